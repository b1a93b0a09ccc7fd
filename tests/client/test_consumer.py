"""The Consumer on a real Ray: positions, prefetching fetches, Arrow and record output.

Data is written straight to the leader replica (no Producer), so these tests exercise
the consumer and the replica's fetch / list-offsets answers only. The tests share one
raystream cluster per module (a cluster start costs seconds here) and each makes its own
topics.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
import ray
from ray.exceptions import RayActorError

import raystream as rs
from raystream.client.consumer import Consumer
from raystream.errors import (
    IllegalStateError,
    InvalidConfigError,
    InvalidRequestError,
    LeaderNotAvailableError,
    OffsetOutOfRangeError,
    PartitionOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from raystream.records import build_batch
from raystream.types import ConsumerRecord, TopicPartition

T0 = 1_700_000_000_000
"""Timestamp (ms) of the first record the tests write; record i has T0 + i."""


@pytest.fixture(scope="module")
def idle_topic(shared_cluster: Any) -> str:
    """One partition that no test writes to (for tests of arguments and state)."""
    shared_cluster.admin().create_topic("consumer-idle", partitions=1)
    return "consumer-idle"


@pytest.fixture
def consumers(shared_cluster: Any) -> Callable[..., Consumer]:
    """Make Consumers on the shared cluster; they are closed after the test."""
    made: list[Consumer] = []

    def make(*topics: str, **config: Any) -> Consumer:
        consumer = Consumer(*topics, cluster=shared_cluster, **config)
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.close()


def produce(
    cluster: Any,
    topic: str,
    values: list[Any],
    partition: int = 0,
    keys: list[bytes | None] | None = None,
    timestamps: list[int] | None = None,
    headers: list[list[tuple[str, bytes]] | None] | None = None,
) -> int:
    """Append one batch to the partition's leader; returns its base offset.

    Retries while the partition has no serving leader (e.g. a replica restarting).
    """
    count = len(values)
    metadata = cluster.topic_metadata(topic)
    batch = build_batch(
        metadata.record_schema,
        keys if keys is not None else [None] * count,
        values,
        timestamps if timestamps is not None else [T0 + i for i in range(count)],
        headers,
    )
    deadline = time.monotonic() + 60
    while True:
        leader = metadata.partitions[partition].leader_handle
        error: Exception | None = None
        if leader is None:
            error = LeaderNotAvailableError(f"{topic}-{partition} has no leader")
        else:
            try:
                response = ray.get(leader.produce.remote(batch, 1), timeout=30)
                error = response.error()
            except RayActorError as dead:
                error = dead
        if error is None:
            return response.base_offset
        if getattr(error, "retriable", True) is False or time.monotonic() > deadline:
            raise error
        time.sleep(0.1)
        metadata = cluster.topic_metadata(topic, refresh=True)


def poll_records(
    consumer: Consumer, count: int, timeout_s: float = 20, exact: bool = True
) -> list[ConsumerRecord]:
    """Poll until ``count`` records arrived (fails on timeout, or on more if ``exact``)."""
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(records)
    assert len(got) == count or (not exact and len(got) > count), (
        f"expected {count} records, got {len(got)}"
    )
    return got


def values(n: int, prefix: str = "v") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


# ------------------------------------------------------------------- reading


def test_assigned_partition_returns_every_field_of_the_records(
    shared_cluster, make_topic, consumers
):
    topic = make_topic()
    produce(
        shared_cluster,
        topic,
        [b"a", None, b"c"],
        keys=[b"k0", None, b"k2"],
        timestamps=[T0, T0 + 5, T0 + 9],
        headers=[[("h", b"1"), ("g", b"2")], None, [("x", b"")]],
    )
    tp = TopicPartition(topic, 0)
    consumer = consumers(auto_offset_reset="earliest")
    consumer.assign([tp])
    assert consumer.assignment() == {tp}

    records = poll_records(consumer, 3)

    assert records == [
        ConsumerRecord(topic, 0, 0, T0, 0, b"k0", b"a", (("h", b"1"), ("g", b"2"))),
        ConsumerRecord(topic, 0, 1, T0 + 5, 0, None, None, ()),
        ConsumerRecord(topic, 0, 2, T0 + 9, 0, b"k2", b"c", (("x", b""),)),
    ]
    assert consumer.position(tp) == 3
    assert consumer.highwater(tp) == 3
    assert consumer.poll(timeout_ms=50) == {}
    consumer.seek(tp, 1)
    assert [r.headers for r in poll_records(consumer, 2)] == [(), (("x", b""),)]


def test_iteration_yields_in_order_and_stops_after_consumer_timeout(
    shared_cluster, make_topic, consumers
):
    topic = make_topic()
    produce(shared_cluster, topic, values(5))
    consumer = consumers(topic, auto_offset_reset="earliest", consumer_timeout_ms=300)

    started = time.monotonic()
    records = list(consumer)
    waited = time.monotonic() - started

    assert [r.value for r in records] == values(5)
    assert waited >= 0.3
    produce(shared_cluster, topic, [b"late"])
    assert [r.value for r in consumer] == [b"late"]  # a new loop starts afresh
    assert list(consumer) == []


def test_leaving_an_iteration_early_keeps_the_position_of_the_last_record(
    shared_cluster, make_topic, consumers
):
    topic = make_topic()
    produce(shared_cluster, topic, values(10))
    tp = TopicPartition(topic, 0)
    consumer = consumers(topic, auto_offset_reset="earliest", consumer_timeout_ms=2000)
    for record in consumer:
        if record.offset == 3:
            break
    assert consumer.position(tp) == 4
    assert [r.offset for r in poll_records(consumer, 6)] == list(range(4, 10))
    produce(shared_cluster, topic, [b"more"])
    assert next(consumer).offset == 10  # the loop left behind does not repeat 4..9
    consumer.seek(tp, 8)
    assert next(consumer).offset == 8


def test_a_seek_inside_the_loop_takes_effect_at_the_next_record(
    shared_cluster, make_topic, consumers
):
    topic = make_topic()
    produce(shared_cluster, topic, values(6))
    tp = TopicPartition(topic, 0)
    consumer = consumers(topic, auto_offset_reset="earliest", consumer_timeout_ms=500)
    seen = []
    for record in consumer:
        seen.append(record.offset)
        if record.offset == 2 and seen.count(2) == 1:
            consumer.seek(tp, 0)
    assert seen == [0, 1, 2, 0, 1, 2, 3, 4, 5]


def test_poll_arrow_returns_the_records_as_columns(shared_cluster, make_topic, consumers):
    topic = make_topic()
    produce(
        shared_cluster,
        topic,
        [b"a", b"b"],
        keys=[b"k", None],
        headers=[[("h", b"1")], None],
    )
    tp = TopicPartition(topic, 0)
    consumer = consumers(auto_offset_reset="earliest")
    consumer.assign([tp])
    empty = consumer.poll_arrow()  # nothing fetched yet: the layout, no rows
    assert empty.num_rows == 0
    deadline = time.monotonic() + 20
    table = consumer.poll_arrow(timeout_ms=200)
    while table.num_rows == 0 and time.monotonic() < deadline:
        table = consumer.poll_arrow(timeout_ms=200)

    assert table.column_names == [
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
        "headers",
    ]
    assert table.schema.equals(empty.schema)
    assert table.schema.field("offset").type == pa.int64()
    assert table.schema.field("timestamp").type == pa.int64()
    assert table.schema.field("value").type == pa.binary()
    assert table.to_pydict() == {
        "topic": [topic, topic],
        "partition": [0, 0],
        "offset": [0, 1],
        "timestamp": [T0, T0 + 1],
        "key": [b"k", None],
        "value": [b"a", b"b"],
        "headers": [[{"key": "h", "value": b"1"}], None],
    }
    assert consumer.position(tp) == 2


def test_max_poll_records_bounds_each_poll_and_keeps_the_rest_buffered(
    shared_cluster, make_topic, consumers
):
    topic = make_topic()
    produce(shared_cluster, topic, values(25))
    tp = TopicPartition(topic, 0)
    consumer = consumers(auto_offset_reset="earliest", max_poll_records=10)
    consumer.assign([tp])
    sizes, offsets = [], []
    deadline = time.monotonic() + 20
    while sum(sizes) < 25 and time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=200).get(tp, [])
        if batch:
            sizes.append(len(batch))
            offsets.extend(r.offset for r in batch)
    assert sizes == [10, 10, 5]
    assert offsets == list(range(25))
    produce(shared_cluster, topic, values(5))
    assert len(poll_records(consumer, 5)) == 5
    assert consumer.poll_arrow(max_records=3).num_rows == 0
    produce(shared_cluster, topic, values(5))
    table = poll_arrow_rows(consumer, 3, max_records=3)
    assert table.column("offset").to_pylist() == [30, 31, 32]


def poll_arrow_rows(consumer: Consumer, rows: int, **kwargs: Any) -> pa.Table:
    deadline = time.monotonic() + 20
    tables = []
    while sum(t.num_rows for t in tables) < rows and time.monotonic() < deadline:
        tables.append(consumer.poll_arrow(timeout_ms=200, **kwargs))
    return pa.concat_tables(tables)


def test_a_fetch_is_already_in_flight_after_a_poll(shared_cluster, make_topic, consumers):
    topic = make_topic()
    produce(shared_cluster, topic, values(10))
    tp = TopicPartition(topic, 0)
    consumer = consumers(auto_offset_reset="earliest", max_poll_records=5)
    consumer.assign([tp])
    poll_records(consumer, 5)
    assert consumer._fetcher.in_flight() == {tp}  # the next chunk is on its way
    poll_records(consumer, 5)
    assert consumer._fetcher.in_flight() == {tp}  # and a long poll at the end of the log


def test_a_record_produced_while_polling_arrives_within_milliseconds(
    shared_cluster, make_topic, consumers, wait_until
):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    consumer = consumers(auto_offset_reset="latest")
    consumer.assign([tp])
    assert consumer.poll(timeout_ms=100) == {}  # position set, a long poll is waiting
    latencies = []
    errors: list[BaseException] = []

    def long_poll_waiting(offset: int) -> bool:
        """A fetch from ``offset`` is on its way and not answered: the poll waits."""
        flight = consumer._fetcher._states[tp].in_flight
        return flight is not None and flight.offset == offset and not flight.future.done()

    for i in range(3):
        sent: list[float] = []

        def send(i: int = i, sent: list[float] = sent) -> None:
            try:
                wait_until(lambda: long_poll_waiting(i), 10, f"a long poll from offset {i}")
                sent.append(time.perf_counter())
                produce(shared_cluster, topic, [f"ping{i}".encode()])
            except BaseException as error:  # the test raises it
                errors.append(error)

        thread = threading.Thread(target=send)
        thread.start()
        records: dict = {}
        deadline = time.monotonic() + 10
        while not records and time.monotonic() < deadline:
            records = consumer.poll(timeout_ms=1000)
        received = time.perf_counter()
        thread.join(30)
        assert not thread.is_alive(), "the sender thread did not end"
        if errors:
            raise errors[0]
        assert [r.value for r in records[tp]] == [f"ping{i}".encode()]
        latencies.append(received - sent[0])
    assert sorted(latencies)[1] < 0.2, latencies


def test_several_partitions_are_all_read_in_offset_order(shared_cluster, make_topic, consumers):
    topic = make_topic(partitions=3)
    for p in range(3):
        produce(shared_cluster, topic, values(4, prefix=f"p{p}-"), partition=p)
    consumer = consumers(topic, auto_offset_reset="earliest")

    records = poll_records(consumer, 12)

    by_partition: dict[int, list[bytes]] = {}
    for record in records:
        by_partition.setdefault(record.partition, []).append(record.value)
    assert by_partition == {p: values(4, prefix=f"p{p}-") for p in range(3)}
    table = consumer.poll_arrow()
    assert table.num_rows == 0
    for p in range(3):
        produce(shared_cluster, topic, [b"x"], partition=p)
    table = poll_arrow_rows(consumer, 3)
    assert sorted(table.column("partition").to_pylist()) == [0, 1, 2]
    assert table.column("offset").to_pylist() == [4, 4, 4]


def test_subscribe_assigns_every_partition_and_tells_the_listener(
    shared_cluster, make_topic, consumers
):
    first, second = make_topic(partitions=2), make_topic(partitions=1)
    heard: list[tuple[str, set]] = []

    class Listener:
        def on_partitions_revoked(self, partitions: set) -> None:
            heard.append(("revoked", partitions))

        def on_partitions_assigned(self, partitions: set) -> None:
            heard.append(("assigned", partitions))

    consumer = consumers()
    consumer.subscribe([first, second], listener=Listener())
    everything = {TopicPartition(first, 0), TopicPartition(first, 1), TopicPartition(second, 0)}
    assert consumer.assignment() == everything
    assert consumer.subscription() == {first, second}
    assert heard == [("assigned", everything)]
    consumer.subscribe(second)
    assert consumer.assignment() == {TopicPartition(second, 0)}
    consumer.unsubscribe()
    assert consumer.assignment() == set()
    assert consumer.subscription() == set()


def test_subscription_picks_up_partitions_added_later(shared_cluster, make_topic, consumers):
    topic = make_topic(partitions=1)
    consumer = consumers(topic, auto_offset_reset="earliest", metadata_max_age_ms=0)
    shared_cluster.admin().create_partitions(topic, 2)
    produce(shared_cluster, topic, [b"new"], partition=1)
    records = poll_records(consumer, 1)
    assert (records[0].partition, records[0].value) == (1, b"new")
    assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}


# ----------------------------------------------------------------- positions


def test_seek_moves_the_position_and_drops_fetched_data(shared_cluster, make_topic, consumers):
    topic = make_topic()
    produce(shared_cluster, topic, values(10))
    tp = TopicPartition(topic, 0)
    consumer = consumers(auto_offset_reset="earliest", max_poll_records=3)
    consumer.assign([tp])
    assert [r.offset for r in poll_records(consumer, 3)] == [0, 1, 2]

    consumer.seek(tp, 7)
    assert consumer.position(tp) == 7
    assert [r.offset for r in poll_records(consumer, 3)] == [7, 8, 9]

    consumer.seek_to_beginning()
    assert consumer.position(tp) == 0
    assert [r.offset for r in poll_records(consumer, 3)] == [0, 1, 2]

    consumer.seek_to_end(tp)
    assert consumer.position(tp) == 10
    assert consumer.poll(timeout_ms=100) == {}


def test_auto_offset_reset_chooses_where_a_new_position_starts(
    shared_cluster, make_topic, consumers
):
    topic = make_topic()
    produce(shared_cluster, topic, values(4))
    tp = TopicPartition(topic, 0)
    earliest = consumers(auto_offset_reset="earliest")
    earliest.assign([tp])
    latest = consumers()  # Kafka's default: latest
    latest.assign([tp])
    none = consumers(auto_offset_reset="none")
    none.assign([tp])

    assert earliest.position(tp) == 0
    assert latest.position(tp) == 4
    with pytest.raises(OffsetOutOfRangeError, match=rf"{topic}-0 has no position.*'none'"):
        none.poll()
    with pytest.raises(OffsetOutOfRangeError, match="seek"):
        none.position(tp)
    none.seek(tp, 2)
    assert [r.offset for r in poll_records(none, 2)] == [2, 3]


def test_a_position_past_the_log_end_is_reset_by_auto_offset_reset(
    shared_cluster, make_topic, consumers
):
    topic = make_topic()
    produce(shared_cluster, topic, values(3))
    tp = TopicPartition(topic, 0)
    consumer = consumers(auto_offset_reset="earliest")
    consumer.assign([tp])
    consumer.seek(tp, 1000)
    assert [r.offset for r in poll_records(consumer, 3)] == [0, 1, 2]

    strict = consumers(auto_offset_reset="none")
    strict.assign([tp])
    strict.seek(tp, 1000)
    with pytest.raises(OffsetOutOfRangeError, match=rf"position 1000 of {topic}-0 is out of range"):
        poll_records(strict, 1)
    strict.seek(tp, 1)
    assert [r.offset for r in poll_records(strict, 2)] == [1, 2]


def test_offset_lookups_by_time_and_at_both_ends(shared_cluster, make_topic, consumers):
    topic = make_topic(partitions=2)
    produce(shared_cluster, topic, values(5), timestamps=[100, 200, 300, 400, 500])
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer = consumers()  # lookups need no assignment

    assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
    assert consumer.end_offsets([tp0, tp1]) == {tp0: 5, tp1: 0}
    assert consumer.offsets_for_times({tp0: 250, tp1: 0}) == {tp0: 2, tp1: None}
    assert consumer.offsets_for_times({tp0: 0}) == {tp0: 0}
    assert consumer.offsets_for_times({tp0: 501}) == {tp0: None}
    assert consumer.partitions_for_topic(topic) == {0, 1}
    assert consumer.partitions_for_topic("no-such-topic") is None
    assert topic in consumer.topics()


def test_paused_partitions_return_nothing_until_resumed(shared_cluster, make_topic, consumers):
    topic = make_topic(partitions=2)
    produce(shared_cluster, topic, values(3), partition=0)
    produce(shared_cluster, topic, values(3), partition=1)
    tp0 = TopicPartition(topic, 0)
    consumer = consumers(topic, auto_offset_reset="earliest")
    consumer.pause(tp0)
    assert consumer.paused() == {tp0}

    records = poll_records(consumer, 3)
    assert {r.partition for r in records} == {1}
    assert consumer.poll(timeout_ms=200) == {}
    assert tp0 not in consumer._fetcher.in_flight()

    consumer.resume(tp0)
    assert consumer.paused() == set()
    assert [r.offset for r in poll_records(consumer, 3)] == [0, 1, 2]


# ---------------------------------------------------------------- topic kinds


def test_a_typed_topic_gives_dict_values_and_its_own_columns(shared_cluster, make_topic, consumers):
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    topic = make_topic(schema=schema)
    rows = [{"id": 1, "name": "a"}, {"id": 2, "name": None}]
    produce(shared_cluster, topic, rows, keys=[b"k1", b"k2"])
    tp = TopicPartition(topic, 0)
    consumer = consumers(auto_offset_reset="earliest")
    consumer.assign([tp])

    assert [r.value for r in poll_records(consumer, 2)] == rows

    consumer.seek(tp, 0)
    assert consumer.poll_arrow().schema.names == [
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "id",
        "name",
        "headers",
    ]
    table = poll_arrow_rows(consumer, 2)
    assert table.schema.field("id").type == pa.int64()
    assert table.column("id").to_pylist() == [1, 2]
    assert table.column("name").to_pylist() == ["a", None]


def test_deserializers_apply_to_records_but_not_to_arrow_or_none(
    shared_cluster, make_topic, consumers
):
    topic = make_topic()
    produce(
        shared_cluster,
        topic,
        [json.dumps({"n": 1}).encode(), None],
        keys=[b"key", None],
    )
    tp = TopicPartition(topic, 0)
    consumer = consumers(
        auto_offset_reset="earliest",
        key_deserializer=bytes.decode,
        value_deserializer=json.loads,
        consumer_timeout_ms=500,
    )
    consumer.assign([tp])

    records = poll_records(consumer, 2)
    assert [(r.key, r.value) for r in records] == [("key", {"n": 1}), (None, None)]
    consumer.seek(tp, 0)
    assert [(r.key, r.value) for r in consumer] == [("key", {"n": 1}), (None, None)]
    consumer.seek(tp, 0)
    table = poll_arrow_rows(consumer, 2)
    assert table.column("value").to_pylist() == [b'{"n": 1}', None]


def test_log_append_time_topics_mark_their_records(shared_cluster, make_topic, consumers):
    topic = make_topic(config={"message.timestamp.type": "LogAppendTime"})
    produce(shared_cluster, topic, [b"a"])
    consumer = consumers(topic, auto_offset_reset="earliest")
    (record,) = poll_records(consumer, 1)
    assert record.timestamp_type == 1
    assert abs(record.timestamp - time.time() * 1000) < 60_000


def test_a_compacted_topic_with_offset_gaps_is_read_in_order(shared_cluster, make_topic, consumers):
    topic = make_topic(config={"cleanup.policy": "compact", "segment.bytes": 1024})
    for b in range(12):
        produce(
            shared_cluster,
            topic,
            [f"v{b}-{i}".encode() for i in range(5)],
            keys=[f"k{i % 3}".encode() for i in range(5)],
        )
    leader = shared_cluster.topic_metadata(topic).partitions[0].leader_handle
    ray.get(leader.run_housekeeping.remote()).unwrap()
    stored = ray.get(leader.fetch.remote(0, 1 << 20, 0)).records
    tp = TopicPartition(topic, 0)
    consumer = consumers(auto_offset_reset="earliest", max_poll_records=4)
    consumer.assign([tp])

    records = poll_records(consumer, stored.num_rows)

    assert [r.offset for r in records] == stored.column("offset").to_pylist()
    assert [r.value for r in records] == stored.column("value").to_pylist()
    assert records[-1].offset == 59
    assert consumer.position(tp) == 60


def test_conversion_of_sliced_chunked_tables_keeps_gaps_headers_and_nones():
    from raystream.records import BYTES_SCHEMA, consumer_records, iter_consumer_records

    chunks = [
        build_batch(BYTES_SCHEMA, [b"a", None], [b"1", None], [5, 6], [[("h", b"x")], None]),
        build_batch(
            BYTES_SCHEMA, [None, b"d"], [b"3", b"4"], [7, 8], [None, [("i", b""), ("j", b"y")]]
        ),
    ]
    table = pa.Table.from_batches(chunks).append_column("offset", pa.array([10, 11, 13, 20]))
    sliced = table.slice(1, 3)
    offsets = sliced.column("offset").to_numpy()

    records = consumer_records(sliced, offsets, "t", 2, 1, bytes.decode, bytes.decode)

    assert records == [
        ConsumerRecord("t", 2, 11, 6, 1, None, None, ()),
        ConsumerRecord("t", 2, 13, 7, 1, None, "3", ()),
        ConsumerRecord("t", 2, 20, 8, 1, "d", "4", (("i", b""), ("j", b"y"))),
    ]
    offset_list = offsets.tolist()
    cursor = iter(offset_list)
    lazy = iter_consumer_records(sliced, offsets, "t", 2, 1, cursor=cursor)
    assert next(lazy).offset == 11
    offset_list.clear()  # how a seek ends the rest of an iterated batch
    assert list(lazy) == []


# ---------------------------------------------------------------- bad inputs


def test_unknown_topics_and_partitions_are_refused_by_name(idle_topic, consumers):
    topic = idle_topic
    consumer = consumers()
    with pytest.raises(UnknownTopicOrPartitionError, match="'no-such-topic'"):
        consumer.assign([TopicPartition("no-such-topic", 0)])
    for bad in (5, -1):
        with pytest.raises(PartitionOutOfRangeError, match=rf"partition {bad} of topic '{topic}'"):
            consumer.assign([TopicPartition(topic, bad)])
    with pytest.raises(UnknownTopicOrPartitionError, match="'no-such-topic'"):
        consumer.subscribe(["no-such-topic"])
    with pytest.raises(UnknownTopicOrPartitionError, match="'no-such-topic'"):
        consumers("no-such-topic")
    with pytest.raises(PartitionOutOfRangeError, match=r"partition 9 .* not in the range \[0, 1\)"):
        consumer.end_offsets([TopicPartition(topic, 9)])
    with pytest.raises(PartitionOutOfRangeError, match="partition -3") as raised:
        consumer.offsets_for_times({TopicPartition(topic, -3): 0})
    assert not raised.value.retriable
    assert consumer.assignment() == set()


def test_bad_arguments_raise_errors_that_name_them(idle_topic, consumers):
    topic = idle_topic
    tp = TopicPartition(topic, 0)
    consumer = consumers()
    with pytest.raises(IllegalStateError, match="not subscribed"):
        consumer.poll()
    with pytest.raises(InvalidRequestError, match="'nope'"):
        consumer.assign(["nope"])
    with pytest.raises(InvalidRequestError, match="list of TopicPartition"):
        consumer.assign(tp)
    with pytest.raises(InvalidRequestError, match="int partition"):
        consumer.assign([(topic, "0")])
    with pytest.raises(InvalidRequestError, match="topic names"):
        consumer.subscribe([])
    with pytest.raises(IllegalStateError, match=rf"{topic}-0 is not assigned"):
        consumer.seek(tp, 0)
    with pytest.raises(IllegalStateError, match=rf"pause: partition {topic}-0"):
        consumer.pause(tp)
    with pytest.raises(IllegalStateError, match=rf"{topic}-0 is not assigned"):
        consumer.position(tp)
    consumer.assign([tp])
    with pytest.raises(IllegalStateError, match="unsubscribe"):
        consumer.subscribe([topic])
    for bad in (-1, "3", 1.5, True, None):
        with pytest.raises(InvalidRequestError, match=rf"seek offset {bad!r}"):
            consumer.seek(tp, bad)
    with pytest.raises(InvalidRequestError, match="timestamp -5"):
        consumer.offsets_for_times({tp: -5})
    with pytest.raises(InvalidRequestError, match="timeout_ms=-1"):
        consumer.poll(timeout_ms=-1)
    with pytest.raises(InvalidRequestError, match="max_records=0"):
        consumer.poll(max_records=0)
    with pytest.raises(IllegalStateError, match="seek_to_end: partition other-0"):
        consumer.seek_to_end(TopicPartition("other", 0))


def test_bad_config_is_refused_by_name(shared_cluster):
    with pytest.raises(InvalidConfigError, match=r"auto\.offset\.reset='middle'"):
        Consumer(cluster=shared_cluster, auto_offset_reset="middle")
    with pytest.raises(InvalidConfigError, match=r"isolation\.level='dirty'"):
        Consumer(cluster=shared_cluster, isolation_level="dirty")
    with pytest.raises(InvalidConfigError, match=r"max\.poll\.records=0"):
        Consumer(cluster=shared_cluster, max_poll_records=0)
    with pytest.raises(InvalidConfigError, match="'no_such_option'"):
        Consumer(cluster=shared_cluster, no_such_option=1)
    with pytest.raises(InvalidConfigError, match=r"'max_poll_record' \(did you mean 'max_poll_r"):
        Consumer(cluster=shared_cluster, max_poll_record=10)
    with pytest.raises(InvalidConfigError, match=r"'group\.idd' \(did you mean 'group\.id'"):
        Consumer(cluster=shared_cluster, **{"group.idd": "g"})
    with pytest.raises(InvalidConfigError, match=r"auto\.offset\.reset='beginning'"):
        Consumer(cluster=shared_cluster, auto_offset_reset="beginning")
    with pytest.raises(InvalidConfigError, match=r"value\.deserializer=3"):
        Consumer(cluster=shared_cluster, value_deserializer=3)
    assert (
        Consumer(cluster=shared_cluster, auto_offset_reset="smallest").config.auto_offset_reset
        == "earliest"
    )


def test_commits_need_a_group_id(idle_topic, consumers):
    topic = idle_topic
    tp = TopicPartition(topic, 0)
    without_group = consumers(topic)
    with pytest.raises(InvalidRequestError, match="commit\\(\\) needs a group_id"):
        without_group.commit()
    with pytest.raises(InvalidRequestError, match="needs a group_id"):
        without_group.committed(tp)


# ------------------------------------------------------------------- closing


def test_close_is_idempotent_and_every_later_call_fails(shared_cluster, make_topic, consumers):
    topic = make_topic()
    produce(shared_cluster, topic, values(3))
    tp = TopicPartition(topic, 0)
    consumer = consumers(topic, auto_offset_reset="earliest")
    poll_records(consumer, 3)
    assert consumer._fetcher.in_flight() == {tp}

    consumer.close()
    consumer.close()

    assert consumer._fetcher.in_flight() == set()
    for call in (
        consumer.poll,
        consumer.poll_arrow,
        consumer.assignment,
        lambda: consumer.position(tp),
        lambda: consumer.seek(tp, 0),
        lambda: consumer.assign([tp]),
        lambda: iter(consumer),
        lambda: consumer.end_offsets([tp]),
    ):
        with pytest.raises(IllegalStateError, match="closed"):
            call()


def test_closing_inside_the_loop_ends_it_with_an_error(shared_cluster, make_topic, consumers):
    topic = make_topic()
    produce(shared_cluster, topic, values(3))
    consumer = consumers(topic, auto_offset_reset="earliest")
    seen = []
    with pytest.raises(IllegalStateError, match="closed"):
        for record in consumer:
            seen.append(record.offset)
            consumer.close()
    assert seen == [0]


def test_context_manager_closes(idle_topic, shared_cluster):
    topic = idle_topic
    with Consumer(topic, cluster=shared_cluster) as consumer:
        assert consumer.assignment() == {TopicPartition(topic, 0)}
    with pytest.raises(IllegalStateError):
        consumer.poll()


# ------------------------------------------------------------------- failures


@pytest.mark.slow
def test_a_killed_replica_is_survived_with_every_record_once_in_order(
    shared_cluster, make_topic, consumers
):
    topic = make_topic()
    batches, size = 20, 50
    for b in range(batches):
        produce(shared_cluster, topic, values(size, prefix=f"b{b}-"))
    expected = [v for b in range(batches * 2) for v in values(size, prefix=f"b{b}-")]
    tp = TopicPartition(topic, 0)
    consumer = consumers(
        auto_offset_reset="earliest", max_poll_records=70, max_partition_fetch_bytes=1024
    )
    consumer.assign([tp])
    got = poll_records(consumer, 140, exact=False)
    leader = shared_cluster.topic_metadata(topic).partitions[0].leader_handle
    pid = ray.get(leader.ping.remote())

    ray.kill(leader, no_restart=False)
    deadline = time.monotonic() + 60
    while len(got) < batches * size and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(records)
    for b in range(batches, 2 * batches):  # the restarted leader takes new data too
        produce(shared_cluster, topic, values(size, prefix=f"b{b}-"))
    while len(got) < len(expected) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(records)

    assert [r.offset for r in got] == list(range(len(expected)))
    assert [r.value for r in got] == expected
    assert ray.get(leader.ping.remote()) != pid  # a new process served the rest


def test_the_public_name_is_the_consumer(shared_cluster, idle_topic):
    topic = idle_topic
    consumer = shared_cluster.consumer(topic)
    assert isinstance(consumer, rs.Consumer)
    consumer.close()
