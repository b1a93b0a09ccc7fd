"""Count clicks per user with a consumer group of Ray actors, exactly once.

``rs.ConsumerGroup`` starts member actors that share the partitions of topic "clicks".
Each applies ``count_clicks`` to the Arrow batches it polls and, because an
``output_topic`` is given, writes the batch's counts and its consumed offsets in one
transaction: every click is counted once, also when a member crashes and Ray restarts
it or the group rebalances. The group grows from 2 to 4 members mid-stream. Runs on
the embedded default.
"""

import collections
import time
from collections.abc import Callable

import pyarrow as pa

import raystream as rs

USERS = 8
COUNTS = pa.schema([("user", pa.string()), ("clicks", pa.int64())])


def count_clicks(batch: pa.Table) -> pa.Table:
    """Runs inside a member actor: one row per user of the batch, keyed by the user."""
    counts = batch.group_by("key").aggregate([("key", "count")])
    users = counts.column("key")
    return pa.table({"key": users, "user": users.cast(pa.string()), "clicks": counts["key_count"]})


def produce_clicks(cluster: rs.Cluster, count: int) -> None:
    users = [f"user-{i % USERS}".encode() for i in range(count)]
    with cluster.producer() as producer:
        producer.send_batch("clicks", pa.table({"key": users, "value": [b"/home"] * count}))


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout_s} s")
        time.sleep(0.5)


cluster = rs.connect()
admin = cluster.admin()
if "clicks" not in admin.list_topics():
    admin.create_topic("clicks", partitions=4)
if "clicks-per-user" not in admin.list_topics():
    admin.create_topic("clicks-per-user", partitions=2, schema=COUNTS)

group = rs.ConsumerGroup(
    cluster, "clicks", "click-counters", count_clicks, members=2, output_topic="clicks-per-user"
)
produce_clicks(cluster, 5_000)
wait_until(lambda: group.lag() == 0, "all clicks counted")
group.scale(4)  # two more actors: the group rebalances the partitions over four
wait_until(lambda: all(s.get("assignment") for s in group.status()), "a share for all four")
produce_clicks(cluster, 5_000)
wait_until(lambda: group.lag() == 0, "all clicks counted")
for index, status in enumerate(group.status()):
    partitions = sorted(tp.partition for tp in status["assignment"])
    print(f"member {index}: partitions {partitions}, {status['processed']} clicks")
group.stop()

totals: collections.Counter[str] = collections.Counter()
with cluster.consumer(
    "clicks-per-user",
    auto_offset_reset="earliest",
    isolation_level="read_committed",  # only the counts of committed transactions
    consumer_timeout_ms=2000,
) as reader:
    for record in reader:  # a typed topic's value is a dict of its columns
        totals[record.value["user"]] += record.value["clicks"]
    clicks_in_topic = sum(
        reader.end_offsets([rs.TopicPartition("clicks", p) for p in range(4)]).values()
    )
for user, clicks in sorted(totals.items()):
    print(f"{user}: {clicks} clicks")
print(f"{sum(totals.values())} clicks counted, {clicks_in_topic} in topic 'clicks'")
