"""A failing deserializer loses no record: the position stays at the bad record.

Kafka's rule (``RecordDeserializationException``): the records before the bad one are
returned, the next poll raises an error naming the topic, partition and offset, and the
consumer stays there (raising again) until the application seeks past it. Auto-commit
never commits past it. Every consuming path is covered: ``poll()``, iteration, key and
value deserializers, typed topics, several partitions; ``poll_arrow()`` applies no
deserializer and so returns the record.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from raystream.client.consumer import Consumer
from raystream.client.producer import Producer
from raystream.errors import RaystreamError, RecordDeserializationError
from raystream.types import ConsumerRecord, TopicPartition

BAD = b"not-json"


@pytest.fixture
def consumers(shared_cluster: Any) -> Iterator[Callable[..., Consumer]]:
    """Make Consumers on the shared cluster; they are closed after the test."""
    made: list[Consumer] = []

    def make(*topics: str, **config: Any) -> Consumer:
        config.setdefault("auto_offset_reset", "earliest")
        consumer = Consumer(*topics, cluster=shared_cluster, **config)
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.close(autocommit=False)


def write(cluster: Any, topic: str, values: list[Any], partition: int = 0, keys=None) -> None:
    """Send ``values`` (and ``keys``) to one partition as one batch, acknowledged."""
    with Producer(cluster, acks=1, linger_ms=1000) as producer:
        for i, value in enumerate(values):
            key = None if keys is None else keys[i]
            producer.send(topic, value, key=key, partition=partition)
        producer.flush(timeout=30)


def strict(data: bytes) -> str:
    """A deserializer that refuses ``BAD``."""
    if data == BAD:
        raise ValueError(f"cannot decode {data!r}")
    return data.decode()


def ten_with_a_bad_fifth() -> list[bytes]:
    return [BAD if i == 5 else b"v%d" % i for i in range(10)]


def poll_until(consumer: Consumer, count: int, timeout_s: float = 20) -> list[ConsumerRecord]:
    """Poll until ``count`` records came (errors propagate)."""
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} records"
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(records)
    return got


def poll_error(consumer: Consumer, timeout_s: float = 20) -> RecordDeserializationError:
    """Poll until a poll raises RecordDeserializationError (no record may come first)."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert time.monotonic() < deadline, "no RecordDeserializationError"
        try:
            polled = consumer.poll(timeout_ms=200)
        except RecordDeserializationError as error:
            return error
        assert not polled, f"records past the bad one: {polled}"


def test_poll_returns_the_records_before_a_bad_one_then_raises_until_sought_past(
    shared_cluster, make_topic, consumers
):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    write(shared_cluster, topic, ten_with_a_bad_fifth())
    consumer = consumers(value_deserializer=strict)
    consumer.assign([tp])
    before = poll_until(consumer, 5)
    assert [r.value for r in before] == [f"v{i}" for i in range(5)]
    assert consumer.position(tp) == 5
    for _ in range(2):  # raised again and again while the position stays
        error = poll_error(consumer)
        assert (error.topic, error.partition, error.offset) == (topic, 0, 5)
        assert error.topic_partition == tp
        assert isinstance(error.__cause__, ValueError)
        assert "not-json" in str(error) and f"{topic}-0" in str(error) and "offset 5" in str(error)
        assert not error.retriable
        assert consumer.position(tp) == 5
    consumer.seek(error.topic_partition, error.offset + 1)
    after = poll_until(consumer, 4)
    assert [r.offset for r in after] == [6, 7, 8, 9]


def test_a_bad_first_record_raises_at_once_without_moving(shared_cluster, make_topic, consumers):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    write(shared_cluster, topic, [BAD, b"v1"])
    consumer = consumers(value_deserializer=strict)
    consumer.assign([tp])
    error = poll_error(consumer)
    assert error.offset == 0
    assert consumer.position(tp) == 0


def test_a_failing_key_deserializer_keeps_the_position_too(shared_cluster, make_topic, consumers):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    keys = [BAD if i == 3 else b"k%d" % i for i in range(6)]
    write(shared_cluster, topic, [b"v"] * 6, keys=keys)
    consumer = consumers(key_deserializer=strict)
    consumer.assign([tp])
    assert [r.key for r in poll_until(consumer, 3)] == ["k0", "k1", "k2"]
    assert poll_error(consumer).offset == 3
    assert consumer.position(tp) == 3


def test_iteration_stops_at_the_bad_record_and_resumes_after_a_seek(
    shared_cluster, make_topic, consumers
):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    write(shared_cluster, topic, ten_with_a_bad_fifth())
    consumer = consumers(value_deserializer=strict, consumer_timeout_ms=2000)
    consumer.assign([tp])
    seen = []
    with pytest.raises(RecordDeserializationError) as raised:
        for record in consumer:
            seen.append(record.offset)
    assert seen == [0, 1, 2, 3, 4]
    assert raised.value.offset == 5
    assert consumer.position(tp) == 5
    with pytest.raises(RecordDeserializationError, match="offset 5"):
        next(iter(consumer))  # still there
    consumer.seek(tp, 6)
    assert [record.offset for record in consumer] == [6, 7, 8, 9]


def test_a_typed_topic_value_deserializer_that_raises_keeps_the_position(
    shared_cluster, make_topic, consumers
):
    schema = pa.schema([("n", pa.int64())])
    topic = make_topic(schema=schema)
    tp = TopicPartition(topic, 0)
    write(shared_cluster, topic, [{"n": i} for i in range(6)])

    def positive_reciprocal(row: dict) -> float:
        return 1 / (row["n"] - 2)  # raises at n == 2

    consumer = consumers(value_deserializer=positive_reciprocal)
    consumer.assign([tp])
    assert [r.offset for r in poll_until(consumer, 2)] == [0, 1]
    error = poll_error(consumer)
    assert error.offset == 2 and isinstance(error.__cause__, ZeroDivisionError)
    assert consumer.position(tp) == 2


def test_poll_arrow_applies_no_deserializer_and_returns_the_bad_record(
    shared_cluster, make_topic, consumers
):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    write(shared_cluster, topic, ten_with_a_bad_fifth())
    consumer = consumers(value_deserializer=strict)
    consumer.assign([tp])
    rows: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(rows) < 10:
        assert time.monotonic() < deadline
        rows += consumer.poll_arrow(timeout_ms=200).column("value").to_pylist()
    assert rows[5] == BAD
    assert consumer.position(tp) == 10


def test_other_partitions_lose_nothing_when_one_has_a_bad_record(
    shared_cluster, make_topic, consumers
):
    topic = make_topic(partitions=3)
    for partition in range(3):
        values = [b"p%d-%d" % (partition, i) for i in range(20)]
        if partition == 1:
            values[7] = BAD
        write(shared_cluster, topic, values, partition=partition)
    tps = [TopicPartition(topic, p) for p in range(3)]
    consumer = consumers(value_deserializer=strict, max_poll_records=9)
    consumer.assign(tps)
    got: dict[int, list[int]] = {0: [], 1: [], 2: []}
    errors = 0
    deadline = time.monotonic() + 30
    while len(got[0]) + len(got[2]) < 40 or len(got[1]) < 19:
        assert time.monotonic() < deadline, {p: len(o) for p, o in got.items()}
        try:
            polled = consumer.poll(timeout_ms=200)
        except RecordDeserializationError as error:
            assert (error.partition, error.offset) == (1, 7)
            errors += 1
            consumer.seek(error.topic_partition, error.offset + 1)
            continue
        for tp, records in polled.items():
            got[tp.partition].extend(r.offset for r in records)
    assert errors == 1
    assert got[0] == list(range(20)) and got[2] == list(range(20))
    assert got[1] == [o for o in range(20) if o != 7]


def test_auto_commit_never_commits_past_the_bad_record(shared_cluster, make_topic, consumers):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    write(shared_cluster, topic, ten_with_a_bad_fifth())
    group = f"{topic}-group"
    consumer = consumers(
        topic, group_id=group, value_deserializer=strict, auto_commit_interval_ms=1
    )
    assert len(poll_until(consumer, 5, timeout_s=60)) == 5  # joins the group first
    for _ in range(3):  # polls that auto-commit (the interval is 1 ms) and raise
        poll_error(consumer)
        time.sleep(0.002)  # let the next auto-commit fall due (not a synchronization)
    consumer.close()  # commits the positions on the way out
    with Consumer(cluster=shared_cluster, group_id=group, enable_auto_commit=False) as other:
        assert other.committed(tp) == 5


def test_the_error_survives_pickling_with_its_fields() -> None:
    error = RecordDeserializationError("bad value", "orders", 2, 41)
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, RaystreamError)
    assert (copy.topic, copy.partition, copy.offset, str(copy)) == ("orders", 2, 41, "bad value")
