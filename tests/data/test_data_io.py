"""rs.data on a real Ray: read_topic, write_topic and iter_topic against what was produced.

The tests share one raystream cluster (module scope) and each makes its own topics.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import raystream as rs
from raystream.client.partitioner import partition_for_key
from raystream.errors import (
    InvalidRecordError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from raystream.records import HEADERS_TYPE

T0 = 1_700_000_000_000
ORDER = pa.schema([("customer", pa.string()), ("amount", pa.float64())])


def produce(cluster: Any, topic: str, count: int) -> dict[tuple[int, int], tuple]:
    """``count`` records with keys, headers on every third and distinct timestamps.

    Returns {(partition, offset): (key, value, timestamp, headers)} from the producer's
    acknowledgements.
    """
    producer = cluster.producer()
    sent = {}
    futures = []
    for i in range(count):
        record = (
            b"k%d" % (i % 7),
            b"value-%d" % i,
            T0 + i,
            [("h", b"%d" % i), ("n", b"x")] if i % 3 == 0 else [],
        )
        futures.append(
            (
                record,
                producer.send(
                    topic, record[1], record[0], record[3] or None, timestamp_ms=record[2]
                ),
            )
        )
    for record, future in futures:
        metadata = future.get(timeout=60)
        sent[(metadata.partition, metadata.offset)] = record
    producer.close()
    return sent


def arrow(ds: Any) -> pa.Table:
    """The whole dataset as one table (on the test's driver, to compare)."""
    import ray

    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


def rows_of(table: pa.Table) -> dict[tuple[int, int], tuple]:
    return {
        (row["partition"], row["offset"]): (
            row["key"],
            row["value"],
            row["timestamp"],
            [(h["key"], h["value"]) for h in row["headers"] or []],
        )
        for row in table.to_pylist()
    }


def test_read_topic_returns_every_record_with_offsets_timestamps_and_headers(
    shared_cluster: Any, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=3)
    sent = produce(shared_cluster, topic, 600)
    table = arrow(rs.data.read_topic(shared_cluster, topic))
    assert table.column_names == [
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
        "headers",
    ]
    assert set(table.column("topic").to_pylist()) == {topic}
    assert rows_of(table) == sent
    assert table.num_rows == len(sent)


def test_read_topic_honours_offset_options(
    shared_cluster: Any, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=2)
    sent = produce(shared_cluster, topic, 200)
    per_partition = {p: max(o for q, o in sent if q == p) + 1 for p in (0, 1)}
    ds = rs.data.read_topic(shared_cluster, topic, {0: 10}, f'{{"{topic}": {{"0": 20}}}}')
    offsets = sorted((r["partition"], r["offset"]) for r in arrow(ds).to_pylist())
    expected = [(0, o) for o in range(10, 20)] + [(1, o) for o in range(per_partition[1])]
    assert offsets == expected
    assert rs.data.read_topic(shared_cluster, topic, "latest").count() == 0
    with pytest.raises(OffsetOutOfRangeError, match=f"offset 9999 of {topic}-1"):
        rs.data.read_topic(shared_cluster, topic, ending_offsets={1: 9999})
    with pytest.raises(UnknownTopicOrPartitionError, match="no-such-topic"):
        rs.data.read_topic(shared_cluster, "no-such-topic")


def test_read_committed_leaves_out_aborted_transactions_even_a_whole_fetch_of_them(
    shared_cluster: Any, make_topic: Callable[..., str]
) -> None:
    """Committed, then 12 MB aborted (more than one fetch of the reader), then committed
    again and an open transaction: read_committed gets the committed records only and
    stops at the open transaction; read_uncommitted gets everything (markers hidden)."""
    topic = make_topic(partitions=1)

    def values(prefix: str, n: int, size: int = 10) -> pa.Table:
        return pa.table(
            {"value": [b"%s-%d-" % (prefix.encode(), i) + b"x" * size for i in range(n)]}
        )

    producer = shared_cluster.producer(transactional_id=f"{topic}-txn")
    producer.init_transactions()
    for prefix, n, size, commit in (
        ("a", 50, 10, True),
        ("b", 120_000, 100, False),
        ("c", 50, 10, True),
    ):
        producer.begin_transaction()
        producer.send_batch(topic, values(prefix, n, size), partition=0)
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    producer.begin_transaction()
    producer.send_batch(topic, values("open", 5), partition=0)
    producer.flush()  # written, not committed: the last stable offset stays before it

    committed = arrow(rs.data.read_topic(shared_cluster, topic, isolation_level="read_committed"))
    prefixes = [bytes(v)[:2] for v in committed.column("value").to_pylist()]
    assert prefixes == [b"a-"] * 50 + [b"c-"] * 50
    everything = rs.data.read_topic(shared_cluster, topic, isolation_level="read_uncommitted")
    assert everything.count() == 50 + 120_000 + 50 + 5
    with pytest.raises(InvalidRequestError, match="isolation_level='serializable'"):
        rs.data.read_topic(shared_cluster, topic, isolation_level="serializable")
    producer.abort_transaction()
    producer.close()


def test_write_topic_round_trip_keeps_keys_on_their_murmur2_partition(
    shared_cluster: Any, make_topic: Callable[..., str]
) -> None:
    import ray

    topic = make_topic(partitions=3)
    count = 3000
    rows = pa.table(
        {
            "key": [b"user-%d" % (i % 50) for i in range(count)],
            "value": [f"event-{i}" for i in range(count)],
            "headers": pa.array([[("i", b"%d" % i)] for i in range(count)], HEADERS_TYPE),
        }
    )
    ds = ray.data.from_arrow([rows.slice(0, 1000), rows.slice(1000)])
    assert rs.data.write_topic(ds, topic, cluster=shared_cluster) == count
    back = arrow(rs.data.read_topic(shared_cluster, topic)).to_pylist()
    assert sorted(r["value"] for r in back) == sorted(b"event-%d" % i for i in range(count))
    for row in back:
        assert row["partition"] == partition_for_key(row["key"], 3)
        assert row["headers"] == [{"key": "i", "value": row["value"].split(b"-")[1]}]


def test_typed_topics_read_and_write_their_columns(
    shared_cluster: Any, make_topic: Callable[..., str]
) -> None:
    import ray

    source = make_topic(partitions=2, schema=ORDER)
    target = make_topic(partitions=2, schema=ORDER)
    orders = pa.table({"customer": [f"c{i % 4}" for i in range(100)], "amount": [1.5] * 100})
    with shared_cluster.producer() as producer:
        producer.send_batch(source, orders, key_column="customer")
    ds = rs.data.read_topic(shared_cluster, source)
    assert ds.schema().names == [
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "customer",
        "amount",
        "headers",
    ]
    assert rs.data.write_topic(ds, target, cluster=shared_cluster, key_column="key") == 100
    back = arrow(rs.data.read_topic(shared_cluster, target))
    assert sorted(back.column("customer").to_pylist()) == sorted(orders["customer"].to_pylist())
    assert sum(back.column("amount").to_pylist()) == 150.0
    with pytest.raises(InvalidRecordError, match="amount"):
        rs.data.write_topic(
            ray.data.from_arrow(orders.select(["customer"])), target, cluster=shared_cluster
        )


def test_iter_topic_follows_the_live_end(
    shared_cluster: Any, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=2)
    produce(shared_cluster, topic, 50)
    # The idle timeout is a safety net only: the loop ends once it has seen every record.
    batches = rs.data.iter_topic(shared_cluster, topic, batch_size=40, idle_timeout_ms=60_000)
    first = next(batches)
    assert 0 < first.num_rows <= 40
    errors: list[BaseException] = []

    def later() -> None:
        try:
            producer = shared_cluster.producer()
            producer.send_batch(topic, pa.table({"value": [b"late-%d" % i for i in range(30)]}))
            producer.close()
        except BaseException as error:  # raised below, in the test's thread
            errors.append(error)

    writer = threading.Thread(target=later)
    seen = [first]
    for batch in batches:
        seen.append(batch)
        if writer.ident is None:
            writer.start()  # produce once the iterator has caught up with the end
        if sum(t.num_rows for t in seen) >= 80:
            break
    batches.close()
    writer.join(60)
    assert not errors, errors
    values = pa.concat_tables(seen).column("value").to_pylist()
    assert sorted(values) == sorted(
        [b"value-%d" % i for i in range(50)] + [b"late-%d" % i for i in range(30)]
    )
    assert all(t.num_rows <= 40 for t in seen)
    # With nothing new, an iteration ends after its idle timeout.
    idle = rs.data.iter_topic(shared_cluster, topic, starting_offsets="latest", idle_timeout_ms=300)
    assert list(idle) == []


def test_read_and_write_tasks_take_ray_remote_args(
    shared_cluster: Any, make_topic: Callable[..., str]
) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    topic = make_topic(partitions=2)
    rows = pa.table({"value": [b"v%d" % i for i in range(500)]})
    light = {"num_cpus": 0.25}
    written = rs.data.write_topic(
        ray.data.from_arrow(rows), topic, cluster=shared_cluster, ray_remote_args=light
    )
    assert written == 500
    back = arrow(rs.data.read_topic(shared_cluster, topic, ray_remote_args=light))
    assert sorted(back.column("value").to_pylist()) == sorted(rows.column("value").to_pylist())
    # The options reach the tasks: pinned to a node that does not exist, none can run.
    nowhere = {"scheduling_strategy": NodeAffinitySchedulingStrategy("ab" * 28, soft=False)}
    with pytest.raises(Exception, match=r"(?i)unschedulable|node|infeasible"):
        arrow(rs.data.read_topic(shared_cluster, topic, ray_remote_args=nowhere))
    with pytest.raises(InvalidRequestError, match="ray_remote_args must be a dict"):
        rs.data.read_topic(shared_cluster, topic, ray_remote_args=["num_cpus", 1])
    with pytest.raises(InvalidRequestError, match="ray_remote_args must be a dict"):
        rs.data.write_topic(ray.data.from_arrow(rows), topic, ray_remote_args=0.5)
