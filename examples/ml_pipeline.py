"""Score a stream of card transactions with a small numpy model in Ray Data
(``map_batches``) and write the scores to a topic. Runs on the embedded default."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import raystream as rs

TRANSACTION = pa.schema(
    [("txn_id", pa.int64()), ("amount", pa.float64()), ("hour", pa.int32()), ("abroad", pa.bool_())]
)
SCORE = pa.schema([("txn_id", pa.int64()), ("score", pa.float64()), ("flagged", pa.bool_())])


def features(batch: pa.Table) -> np.ndarray:
    amount = np.log1p(batch.column("amount").to_numpy())
    night = np.isin(batch.column("hour").to_numpy(), [0, 1, 2, 3, 4]).astype(float)
    abroad = batch.column("abroad").to_numpy(zero_copy_only=False).astype(float)
    return np.column_stack([np.ones(len(amount)), amount, night, abroad])


def train(x: np.ndarray, y: np.ndarray, steps: int = 2000) -> np.ndarray:
    """Logistic regression by gradient descent: the small model."""
    weights = np.zeros(x.shape[1])
    for _ in range(steps):
        weights -= 0.5 * x.T @ (1 / (1 + np.exp(-x @ weights)) - y) / len(y)
    return weights


def transactions(rng: np.random.Generator, count: int, first_id: int = 0) -> pa.Table:
    return pa.table(
        {
            "txn_id": np.arange(first_id, first_id + count),
            "amount": rng.lognormal(3.5, 1.2, count).round(2),
            "hour": rng.integers(0, 24, count).astype(np.int32),
            "abroad": rng.random(count) < 0.1,
        },
        schema=TRANSACTION,
    )


cluster = rs.connect()
admin = cluster.admin()
for name, schema in (("transactions", TRANSACTION), ("fraud-scores", SCORE)):
    if name not in admin.list_topics():
        admin.create_topic(name, partitions=3, schema=schema)

rng = np.random.default_rng(42)
history = transactions(rng, 5_000, first_id=-5_000)  # labelled history to learn from
x = features(history)
labels = (x @ [-6.0, 0.9, 1.5, 2.0] + rng.normal(0, 0.5, len(x))) > 0
weights = train(x, labels.astype(float))

with cluster.producer() as producer:  # the stream to score
    producer.send_batch("transactions", transactions(rng, 20_000))


def score(batch: pa.Table) -> pa.Table:
    p = 1 / (1 + np.exp(-features(batch) @ weights))
    return pa.table({"txn_id": batch.column("txn_id"), "score": p, "flagged": p > 0.5})


scored = rs.data.read_topic(cluster, "transactions").map_batches(score, batch_format="pyarrow")
written = rs.data.write_topic(scored, "fraud-scores", cluster=cluster)
flagged = sum(
    pc.sum(batch.column("flagged").cast(pa.int64())).as_py() or 0
    for batch in rs.data.iter_topic(cluster, "fraud-scores", batch_size=4096, idle_timeout_ms=1000)
)
print(f"scored {written} transactions, {flagged} flagged, written to topic 'fraud-scores'")
