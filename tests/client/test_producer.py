"""The Producer on a real Ray: delivery, partitioning, futures, errors and retries.

What was written is read back straight from each partition's leader (``fetch``), so
these tests do not depend on the Consumer. They share one raystream cluster per module
(a cluster start costs seconds here); each test makes its own topics.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
import ray
from ray.exceptions import RayActorError

from raystream.client.consumer import Consumer
from raystream.client.partitioner import partition_for_key
from raystream.client.producer import Producer
from raystream.client.quotas import ClientQuotas
from raystream.errors import (
    IllegalStateError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTxnStateError,
    LeaderNotAvailableError,
    NotLeaderError,
    PartitionOutOfRangeError,
    RaystreamTimeoutError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from raystream.security.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, QuotaManager
from raystream.types import RecordMetadata, TopicPartition

T0 = 1_700_000_000_000


@pytest.fixture
def producers(shared_cluster: Any) -> Iterator[Callable[..., Producer]]:
    """Make Producers on the shared cluster (acks=1 unless told); closed after the test."""
    made: list[Producer] = []

    def make(**config: Any) -> Producer:
        config.setdefault("acks", 1)
        producer = Producer(shared_cluster, **config)
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.close(timeout=10)


def read_partition(cluster: Any, topic: str, partition: int = 0) -> pa.Table:
    """Every record of the partition, with offsets, fetched from its leader.

    Retries while the partition has no serving leader (a replica restarting).
    """
    deadline = time.monotonic() + 60
    while True:
        try:
            return _read_once(cluster, topic, partition)
        except (RayActorError, LeaderNotAvailableError, NotLeaderError, AttributeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _read_once(cluster: Any, topic: str, partition: int) -> pa.Table:
    leader = cluster.topic_metadata(topic, refresh=True).partitions[partition].leader_handle
    tables = []
    offset = 0
    while True:
        response = ray.get(leader.fetch.remote(offset, 8 << 20, 0), timeout=30)
        response.raise_for_error()
        if response.records.num_rows == 0:
            break
        tables.append(response.records)
        offset = response.records.column("offset")[-1].as_py() + 1
        if offset >= response.high_watermark:
            break
    if not tables:
        return pa.table({"offset": pa.array([], pa.int64())})
    return pa.concat_tables(tables)


def kill_and_wait(replica: Any, no_restart: bool) -> None:
    """Kill a replica actor and return once its process is gone (``ray.kill`` returns
    at once, and a produce over the direct path takes well under a millisecond)."""
    pid = ray.get(replica.ping.remote())
    ray.kill(replica, no_restart=no_restart)
    deadline = time.monotonic() + 30
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, f"replica process {pid} outlived its kill"
        time.sleep(0.005)


def values_of(cluster: Any, topic: str, partition: int = 0) -> list[Any]:
    return read_partition(cluster, topic, partition).column("value").to_pylist()


# ------------------------------------------------------------ configuration


@pytest.mark.parametrize("acks", [0, 1, "all", -1, "0", "1", "-1"])
def test_every_kafka_acks_spelling_is_accepted(acks: object) -> None:
    from raystream.config import ProducerConfig

    assert ProducerConfig(acks=acks).acks in (0, 1, -1)


@pytest.mark.parametrize("acks", [2, "some", None, 1.0, True])
def test_a_bad_acks_is_refused_at_construction_by_value(acks: object) -> None:
    with pytest.raises(InvalidRequestError, match=f"acks={acks!r}"):
        Producer(cluster=object(), acks=acks)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("compression_type", "gzip", "compression.type='gzip'"),
        ("linger_ms", -1, "linger.ms=-1"),
        ("batch_size", 0, "batch.size=0"),
        ("max_in_flight_requests_per_connection", 0, "max.in.flight.requests.per.connection=0"),
        ("request_timeout_ms", "soon", "request.timeout.ms='soon'"),
        ("value_serializer", "json", "value.serializer='json'"),
        ("metadata_max_age_ms", -5, "metadata.max.age.ms=-5"),
    ],
)
def test_bad_options_are_refused_naming_key_and_value(
    option: str, value: Any, message: str
) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        Producer(cluster=object(), **{option: value})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"linger": 5}, "key 'linger' (did you mean 'linger_ms'?)"),
        ({"lingr.ms": 5}, "key 'lingr.ms' (did you mean 'linger.ms'?)"),
        ({"compresion_type": "lz4"}, "did you mean 'compression_type'?"),
        ({"bootstrap_servers": "localhost:9092"}, "'bootstrap_servers': a raystream client"),
        ({"zzz": 1}, "key 'zzz'; known keys: acks, batch_size"),
    ],
)
def test_an_unknown_option_is_refused_by_name_with_the_closest_one(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(message)) as raised:
        Producer(cluster=object(), **options)
    assert not raised.value.retriable


def test_options_may_use_kafkas_dotted_names() -> None:
    def serialize(value: Any) -> bytes:
        return bytes(value)

    producer = Producer(cluster=object(), **{"linger.ms": 7, "value.serializer": serialize})
    try:
        assert producer.config.linger_ms == 7
        assert producer._value_serializer is serialize
    finally:
        producer.close(timeout=1)


def test_a_transactional_producer_sends_only_inside_a_transaction() -> None:
    producer = Producer(cluster=object(), transactional_id="tx")
    with pytest.raises(InvalidTxnStateError, match=r"not allowed in state UNINITIALIZED"):
        producer.send("topic", b"x")
    producer.close()


def test_transaction_methods_need_a_transactional_producer(producers) -> None:
    producer = producers()
    for call in (
        producer.init_transactions,
        producer.begin_transaction,
        producer.commit_transaction,
        producer.abort_transaction,
    ):
        with pytest.raises(InvalidTxnStateError, match="transactional_id"):
            call()
    with pytest.raises(InvalidTxnStateError):
        producer.send_offsets_to_transaction({}, "group")


# ------------------------------------------------------------------- delivery


def test_sent_records_land_in_order_with_the_offsets_their_futures_report(
    shared_cluster, make_topic, producers
) -> None:
    topic = make_topic()
    producer = producers(batch_size=2000)  # several batches, several requests in flight
    futures = [
        producer.send(
            topic,
            b"value-%d" % i,
            key=b"k%d" % i if i % 2 else None,
            headers=[("i", b"%d" % i)] if i % 3 == 0 else None,
            timestamp_ms=T0 + i,
        )
        for i in range(500)
    ]
    producer.flush(timeout=30)
    metadata = [f.get(0) for f in futures]
    assert [m.offset for m in metadata] == list(range(500))
    assert metadata[7] == RecordMetadata(topic, 0, 7, T0 + 7)
    table = read_partition(shared_cluster, topic)
    assert table.column("value").to_pylist() == [b"value-%d" % i for i in range(500)]
    assert table.column("key").to_pylist()[:3] == [None, b"k1", None]
    assert table.column("timestamp").to_pylist()[:2] == [T0, T0 + 1]
    assert table.column("headers").to_pylist()[3] == [{"key": "i", "value": b"3"}]
    assert table.column("headers").to_pylist()[4] is None


def test_order_holds_per_partition_across_many_requests(
    shared_cluster, make_topic, producers
) -> None:
    topic = make_topic(partitions=2)
    producer = producers(batch_size=500, linger_ms=0)
    for i in range(3000):
        producer.send(topic, b"%d" % i, partition=i % 2)
    producer.flush(timeout=30)
    for partition in (0, 1):
        got = [int(v) for v in values_of(shared_cluster, topic, partition)]
        assert got == list(range(partition, 3000, 2))


def test_keys_go_to_the_partition_kafka_would_choose(shared_cluster, make_topic, producers) -> None:
    topic = make_topic(partitions=3)
    producer = producers()
    keys = [b"user-%d" % i for i in range(200)]
    futures = [producer.send(topic, b"v", key=k) for k in keys]
    producer.flush(timeout=30)
    for key, future in zip(keys, futures, strict=True):
        assert future.get(0).partition == partition_for_key(key, 3)
    for partition in range(3):
        stored = read_partition(shared_cluster, topic, partition).column("key").to_pylist()
        assert stored == [k for k in keys if partition_for_key(k, 3) == partition]


def test_keys_spread_over_partitions_added_later(shared_cluster, make_topic, producers) -> None:
    # Kafka's producer sees a topic grow at its next metadata refresh
    # (metadata.max.age.ms), and from then on keys hash over the new partition count.
    topic = make_topic(partitions=1)
    producer = producers(metadata_max_age_ms=100)
    keys = [b"user-%d" % i for i in range(100)]
    moved = next(k for k in keys if partition_for_key(k, 4) != 0)
    assert producer.send(topic, b"v", key=moved).get(30).partition == 0
    shared_cluster.admin().create_partitions(topic, 4)
    deadline = time.monotonic() + 30
    while producer.send(topic, b"v", key=moved).get(30).partition == 0:
        assert time.monotonic() < deadline, "the producer never saw the new partitions"
        time.sleep(0.05)
    futures = [producer.send(topic, b"v", key=k) for k in keys]
    producer.flush(timeout=30)
    assert [f.get(0).partition for f in futures] == [partition_for_key(k, 4) for k in keys]


def test_keyless_records_stick_to_one_partition_per_batch(make_topic, producers) -> None:
    topic = make_topic(partitions=3)
    producer = producers(linger_ms=1000)
    futures = [producer.send(topic, b"v") for _ in range(50)]
    producer.flush(timeout=30)
    assert len({f.get(0).partition for f in futures}) == 1


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_each_acks_level_delivers(shared_cluster, make_topic, producers, acks) -> None:
    topic = make_topic()
    producer = producers(acks=acks)
    futures = [producer.send(topic, b"%d" % i) for i in range(20)]
    producer.flush(timeout=30)
    offsets = [f.get(0).offset for f in futures]
    assert offsets == ([-1] * 20 if acks == 0 else list(range(20)))
    producer.close(timeout=30)  # acks=0: close waits for the requests in flight
    assert values_of(shared_cluster, topic) == [b"%d" % i for i in range(20)]


def test_a_lone_record_is_sent_after_linger_without_flush(make_topic, producers) -> None:
    topic = make_topic()
    producer = producers(linger_ms=300)
    start = time.monotonic()
    future = producer.send(topic, b"alone")
    assert not future.is_done
    assert future.get(timeout=20).offset == 0
    assert time.monotonic() - start >= 0.25


def test_a_full_batch_is_sent_without_waiting_for_linger(make_topic, producers) -> None:
    topic = make_topic()
    producer = producers(linger_ms=600_000, batch_size=10_000)
    futures = [producer.send(topic, b"x" * 100) for _ in range(100)]  # over 10 kB
    assert futures[0].get(timeout=20).offset == 0


def test_callbacks_and_errbacks_run_and_a_failing_callback_harms_nothing(
    make_topic, producers
) -> None:
    topic = make_topic(config={"max.message.bytes": "2000"})
    producer = producers()
    done = threading.Event()
    got: list[Any] = []
    ok = producer.send(topic, b"small")
    ok.add_callback(lambda md: 1 / 0)  # logged, ignored
    ok.add_callback(got.append)
    ok.get(timeout=20)
    # The leader refuses a batch over max.message.bytes: not retriable.
    too_big = producer.send(topic, b"x" * 5000, partition=0)
    too_big.add_errback(lambda error: (got.append(error), done.set()))
    producer.flush(timeout=30)
    assert done.wait(10)
    assert got[0] == RecordMetadata(topic, 0, 0, got[0].timestamp)
    assert isinstance(got[1], RecordTooLargeError)
    assert too_big.failed() and not too_big.retriable()
    later = producer.send(topic, b"after")  # the sender is still alive
    assert later.get(timeout=20).offset >= 1


def test_a_callback_cannot_flush_the_producer_it_runs_on(make_topic, producers) -> None:
    topic = make_topic()
    producer = producers()
    errors: list[BaseException] = []

    def flush_inside(metadata: RecordMetadata) -> None:
        try:
            producer.flush()
        except IllegalStateError as error:
            errors.append(error)

    producer.send(topic, b"v").add_callback(flush_inside)
    producer.flush(timeout=30)
    assert "callback" in str(errors[0])


def test_a_custom_partitioner_is_called_per_record(shared_cluster, make_topic, producers) -> None:
    topic = make_topic(partitions=3)
    calls: list[tuple[Any, list[int]]] = []

    def last(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        calls.append((key, all_partitions))
        return all_partitions[-1]

    producer = producers(partitioner=last)
    assert producer.partitions_for(topic) == {0, 1, 2}
    assert producer.send(topic, b"v", key=b"k").get(timeout=20).partition == 2
    (metadata,) = producer.send_batch(topic, pa.table({"value": [b"a", b"b"], "key": [b"x", None]}))
    assert metadata.partition == 2
    assert calls == [(b"k", [0, 1, 2]), (b"x", [0, 1, 2]), (None, [0, 1, 2])]


def test_sends_from_several_threads_all_arrive(shared_cluster, make_topic, producers) -> None:
    topic = make_topic()
    producer = producers(batch_size=1000)

    def work(n: int) -> None:
        for i in range(500):
            producer.send(topic, b"%d-%d" % (n, i))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    producer.flush(timeout=30)
    got = values_of(shared_cluster, topic)
    assert len(got) == 2000
    for n in range(4):  # each thread's records keep their order
        mine = [v for v in got if v.startswith(b"%d-" % n)]
        assert mine == [b"%d-%d" % (n, i) for i in range(500)]


def test_serializers_apply_to_keys_and_values(shared_cluster, make_topic, producers) -> None:
    topic = make_topic()
    producer = producers(key_serializer=str.encode, value_serializer=lambda v: repr(v).encode())
    producer.send(topic, {"a": 1}, key="k").get(timeout=20)
    producer.send(topic, None, key=None).get(timeout=20)  # None is not serialized
    table = read_partition(shared_cluster, topic)
    assert table.column("value").to_pylist() == [b"{'a': 1}", None]
    assert table.column("key").to_pylist() == [b"k", None]


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_compressed_batches_round_trip(shared_cluster, make_topic, producers, codec) -> None:
    topic = make_topic()
    producer = producers(compression_type=codec)
    for i in range(100):
        producer.send(topic, b"compressible " * 20 + b"%d" % i)
    producer.flush(timeout=30)
    assert values_of(shared_cluster, topic)[99] == b"compressible " * 20 + b"99"


def test_close_flushes_and_refuses_further_sends(shared_cluster, make_topic, producers) -> None:
    topic = make_topic()
    with producers(linger_ms=60_000) as producer:
        future = producer.send(topic, b"last words")
    assert future.get(0).offset == 0
    producer.close()  # idempotent
    with pytest.raises(IllegalStateError, match="closed"):
        producer.send(topic, b"more")
    with pytest.raises(IllegalStateError, match="closed"):
        producer.send_batch(topic, pa.table({"value": [b"x"]}))
    assert values_of(shared_cluster, topic) == [b"last words"]


# ---------------------------------------------------------------- typed topics


SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])


def test_typed_topic_takes_dicts_and_refuses_only_the_bad_record(
    shared_cluster, make_topic, producers
) -> None:
    topic = make_topic(schema=SCHEMA)
    producer = producers(linger_ms=200)
    first = producer.send(topic, {"id": 1, "name": "a", "score": 0.5})
    bad = producer.send(topic, {"id": "one", "name": "b"})
    last = producer.send(topic, {"id": 3, "name": "c"})
    producer.flush(timeout=30)
    assert (first.get(0).offset, last.get(0).offset) == (0, 1)
    with pytest.raises(InvalidRecordError, match="'one'"):
        bad.get(0)
    stored = read_partition(shared_cluster, topic).column("value").to_pylist()
    assert stored == [
        {"id": 1, "name": "a", "score": 0.5},
        {"id": 3, "name": "c", "score": None},
    ]
    with pytest.raises(InvalidRecordError, match=r"fields \['nickname'\]"):
        producer.send(topic, {"id": 4, "nickname": "d"})
    with pytest.raises(InvalidRecordError, match="must be a dict"):
        producer.send(topic, b"raw bytes")


def test_typed_topic_send_batch_takes_the_schema_columns(
    shared_cluster, make_topic, producers
) -> None:
    topic = make_topic(schema=SCHEMA)
    producer = producers()
    table = pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"], "score": [1.0, 2.0, 3.0]})
    (metadata,) = producer.send_batch(topic, table, partition=0)
    assert metadata.offset == 0
    stored = read_partition(shared_cluster, topic).column("value").to_pylist()
    assert stored[2] == {"id": 3, "name": "c", "score": 3.0}
    with pytest.raises(InvalidRecordError, match="lacks the topic's columns"):
        producer.send_batch(topic, pa.table({"id": [1]}))


# ------------------------------------------------------------------ send_batch


def test_send_batch_with_a_key_column_partitions_like_send(
    shared_cluster, make_topic, producers
) -> None:
    topic = make_topic(partitions=3)
    producer = producers(max_request_size=20_000)  # several requests per partition
    keys = [b"k%d" % (i % 50) for i in range(3000)]
    table = pa.table({"user": keys, "value": [b"%d" % i for i in range(3000)]})
    metadata = producer.send_batch(topic, table, key_column="user")
    assert len(metadata) > 3
    assert sorted({m.partition for m in metadata}) == [0, 1, 2]
    for partition in range(3):
        stored = read_partition(shared_cluster, topic, partition)
        expected = [i for i, k in enumerate(keys) if partition_for_key(k, 3) == partition]
        assert [int(v) for v in stored.column("value").to_pylist()] == expected
        firsts = sorted(m.offset for m in metadata if m.partition == partition)
        assert firsts[0] == 0


def test_send_batch_without_keys_spreads_contiguous_slices(
    shared_cluster, make_topic, producers
) -> None:
    topic = make_topic(partitions=2)
    producer = producers(batch_size=1000)
    rows = 2000
    metadata = producer.send_batch(topic, pa.table({"value": [b"%d" % i for i in range(rows)]}))
    assert {m.partition for m in metadata} == {0, 1}
    got = [int(v) for p in (0, 1) for v in values_of(shared_cluster, topic, p)]
    assert sorted(got) == list(range(rows))
    for p in (0, 1):  # each partition holds contiguous runs in table order
        part = [int(v) for v in values_of(shared_cluster, topic, p)]
        assert part == sorted(part)


def test_send_batch_to_an_explicit_partition_with_timestamps_and_nulls(
    shared_cluster, make_topic, producers
) -> None:
    topic = make_topic(partitions=2)
    producer = producers()
    table = pa.table(
        {"value": [b"a", None, b"c"], "key": [b"k", None, b"k"], "timestamp": [T0, None, T0 + 2]}
    )
    (metadata,) = producer.send_batch(topic, table, partition=1)
    assert metadata == RecordMetadata(topic, 1, 0, T0)
    stored = read_partition(shared_cluster, topic, 1)
    assert stored.column("value").to_pylist() == [b"a", None, b"c"]
    assert stored.column("timestamp").to_pylist()[2] == T0 + 2
    assert producer.send_batch(topic, table.slice(0, 0)) == []


def test_send_batch_keeps_order_after_records_buffered_by_send(
    shared_cluster, make_topic, producers
) -> None:
    topic = make_topic()
    producer = producers(linger_ms=60_000)
    producer.send(topic, b"first")
    producer.send_batch(topic, pa.table({"value": [b"second"]}))
    producer.flush(timeout=30)
    assert values_of(shared_cluster, topic) == [b"first", b"second"]


# -------------------------------------------------------------------- bad input


def test_bad_sends_are_refused_with_a_message_naming_the_problem(make_topic, producers) -> None:
    topic = make_topic(partitions=2)
    producer = producers(max_request_size=1000)
    cases = [
        (dict(topic="no-such-topic", value=b"v"), UnknownTopicOrPartitionError, "no-such-topic"),
        (dict(topic=topic, value=b"v", partition=2), PartitionOutOfRangeError, r"2.*\[0, 2\)"),
        (dict(topic=topic, value=b"v", partition=-1), PartitionOutOfRangeError, r"-1.*\[0, 2\)"),
        (dict(topic=topic, value=b"v", partition="0"), InvalidRequestError, "partition must"),
        (dict(topic=topic, value="text"), InvalidRecordError, "not str 'text'"),
        (dict(topic=topic, value=b"v", key=7), InvalidRecordError, "key must be bytes.*not int 7"),
        (dict(topic=topic, value=b"x" * 2000), RecordTooLargeError, "max_request_size=1000"),
        (dict(topic=topic, value=b"v", headers={"a": b"b"}), InvalidRequestError, "headers"),
        (dict(topic=topic, value=b"v", headers=[("a", "text")]), InvalidRequestError, "header"),
        (dict(topic=topic, value=b"v", timestamp_ms=-5), InvalidRequestError, "timestamp_ms=-5"),
        (dict(topic=topic, value=b"v", timestamp_ms=1.5), InvalidRequestError, "timestamp_ms"),
        (dict(topic=42, value=b"v"), InvalidRequestError, "topic must be a string"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message) as raised:
            producer.send(**kwargs)
        assert raised.value.retriable is (error is UnknownTopicOrPartitionError), kwargs
    with pytest.raises(PartitionOutOfRangeError, match="partition 5") as raised:
        producer.send_batch(topic, pa.table({"value": [b"x"]}), partition=5)
    assert (raised.value.topic, raised.value.partition, raised.value.num_partitions) == (
        topic,
        5,
        2,
    )
    with pytest.raises(UnknownTopicOrPartitionError, match="no-such-topic"):
        producer.send_batch("no-such-topic", pa.table({"value": [b"x"]}))
    with pytest.raises(InvalidRecordError, match="'value' column"):
        producer.send_batch(topic, pa.table({"v": [b"x"]}))
    # A bytearray and memoryview are bytes too (copied at send).
    data = bytearray(b"mutable")
    future = producer.send(topic, data, key=memoryview(b"k"))
    data[:] = b"changed"
    producer.flush(timeout=30)
    assert future.succeeded()


# ---------------------------------------------------------------------- retries


def test_a_killed_leader_is_retried_until_it_is_back(shared_cluster, make_topic, producers) -> None:
    topic = make_topic()
    producer = producers(retry_backoff_ms=50)
    for i in range(100):
        producer.send(topic, b"before-%d" % i)
    producer.flush(timeout=30)
    leader = shared_cluster.topic_metadata(topic).partitions[0].leader_handle
    # Ray restarts it; it recovers its log from disk. Sent once its process is gone, the
    # batches meet the restarting leader: they succeed only through retries.
    kill_and_wait(leader, no_restart=False)
    futures = [producer.send(topic, b"after-%d" % i) for i in range(100)]
    producer.flush(timeout=60)
    assert all(f.succeeded() for f in futures)
    got = values_of(shared_cluster, topic)
    assert got[:100] == [b"before-%d" % i for i in range(100)]
    assert got[100:] == [b"after-%d" % i for i in range(100)]  # idempotent: exactly once


@pytest.mark.parametrize("idempotent", [True, False])
def test_batches_resent_after_a_request_timeout_are_written_once_only_with_idempotence(
    shared_cluster, producers, wait_until, idempotent
) -> None:
    """acks=all stalls while a follower restarts (until the controller, told by Ray,
    drops it from the ISR: a few hundred ms): calls time out and are resent while the
    first attempts are already in the leader's log.

    The records are sent one by one across the kill, so that some meet the stall however
    quickly the ISR shrinks on this machine; the test checks that resends happened.
    """
    topic = f"resent-{idempotent}"
    shared_cluster.admin().create_topic(topic, replication_factor=3)
    producer = producers(
        acks="all",
        request_timeout_ms=50,
        retry_backoff_ms=20,
        linger_ms=1,
        enable_idempotence=idempotent,
    )
    for i in range(50):
        producer.send(topic, b"%d" % i)
    producer.flush(timeout=30)
    state = shared_cluster.admin().describe_topic(topic).partitions[0]
    follower = next(r for r in state.replicas if r != state.leader)
    handle = ray.get_actor(f"replica:{topic}:0:{follower}", namespace=shared_cluster.namespace)
    sent = [50]  # the next record's number
    stop = threading.Event()

    def send_across_the_kill() -> None:
        while not stop.is_set():
            producer.send(topic, b"%d" % sent[0])
            sent[0] += 1
            time.sleep(0.003)

    sender = threading.Thread(target=send_across_the_kill, daemon=True)
    sender.start()
    try:
        wait_until(lambda: sent[0] >= 70, 30, "records sent before the kill")
        kill_and_wait(handle, no_restart=False)
        wait_until(
            lambda: producer.metrics()["record-retry-total"] > 0,
            30,
            "a produce call timed out and was resent",
        )
        after = sent[0]
        wait_until(lambda: sent[0] >= after + 20, 30, "records sent after the resends")
    finally:
        stop.set()
        sender.join(10)
    producer.flush(timeout=90)
    got = values_of(shared_cluster, topic)
    expected = [b"%d" % i for i in range(sent[0])]
    if idempotent:
        assert got == expected
    else:  # a resent call's first attempt was already in the log: its records repeat
        assert len(got) > len(expected) and set(got) == set(expected)


def test_records_expire_after_delivery_timeout_when_the_leader_stays_dead(
    shared_cluster, make_topic, producers
) -> None:
    topic = make_topic()
    producer = producers(delivery_timeout_ms=1500, retry_backoff_ms=50, request_timeout_ms=1000)
    producer.send(topic, b"first").get(timeout=20)
    leader = shared_cluster.topic_metadata(topic).partitions[0].leader_handle
    kill_and_wait(leader, no_restart=True)
    future = producer.send(topic, b"lost")
    with pytest.raises(RaystreamTimeoutError, match=r"not acknowledged within 0\.2 s"):
        producer.flush(timeout=0.2)
    with pytest.raises(RaystreamTimeoutError, match="delivery_timeout_ms=1500"):
        future.get(timeout=20)


# ------------------------------------------------------------------ client quotas


def two_one_second_samples(quotas: ClientQuotas) -> None:
    """Meter over 2 samples of 1 s instead of Kafka's 11, and read the quotas now.

    Kafka's 11 samples pad a new client's window to 10 s, so it may send 10 s of its
    quota at once: over a test of a few seconds that burst would be most of what it
    sent. Two samples pad to 1 s (the listener's server test does the same).
    """
    with quotas.lock:
        quotas.manager = QuotaManager(window_num=2, window_size_s=1)
        quotas.version = None
    quotas.refresh()
    assert quotas.manager.active


@pytest.mark.slow
def test_own_clients_hold_to_the_byte_rate_quotas_of_their_client_id(
    shared_cluster, make_topic, producers
) -> None:
    topic = make_topic()
    produce_rate, fetch_rate = 200_000.0, 400_000.0
    admin = shared_cluster.admin()
    quotas = {
        ("client-id", "quota-producer"): {PRODUCER_BYTE_RATE: produce_rate},
        ("client-id", "quota-consumer"): {CONSUMER_BYTE_RATE: fetch_rate},
    }
    admin.alter_client_quotas(quotas)
    try:
        value = b"x" * 1000
        free = producers(client_id="quota-free")
        free._sender.quotas.refresh()
        assert free._sender.quotas.manager.active  # it knows the quotas, none is its own
        began = time.monotonic()
        for _ in range(4000):
            free.send(topic, value)
        free.flush(timeout=30)
        free_s = time.monotonic() - began
        assert 4_000_000 / free_s > 5 * produce_rate, free_s  # not held to the quota
        assert not free.metrics()["produce-throttle-time-max"] > 0

        held = producers(
            client_id="quota-producer",
            buffer_memory=128 << 10,
            batch_size=16 << 10,
            max_request_size=64 << 10,  # calls well under a second of the quota
        )
        two_one_second_samples(held._sender.quotas)
        sent = 0
        start = time.monotonic()
        first: tuple[float, float] | None = None
        while (elapsed := time.monotonic() - start) < 5:  # flat out
            held.send(topic, value)
            sent += 1
            if first is None and elapsed >= 1:  # past the padded window's burst
                first = (elapsed, held.metrics()["outgoing-byte-total"])
        metrics = held.metrics()
        assert first is not None
        rate = (metrics["outgoing-byte-total"] - first[1]) / (elapsed - first[0])
        assert 0.8 * produce_rate <= rate <= 1.2 * produce_rate, rate
        assert metrics["produce-throttle-time-max"] > 0
        held.flush(timeout=30)  # the records still buffered wait out their mute

        tp = TopicPartition(topic, 0)
        with Consumer(
            cluster=shared_cluster,
            client_id="quota-consumer",
            enable_auto_commit=False,
            max_partition_fetch_bytes=64 << 10,
        ) as consumer:
            two_one_second_samples(consumer._fetcher.quotas)
            consumer.assign([tp])
            consumer.seek(tp, 4000)  # the held producer's records
            end = consumer.end_offsets([tp])[tp]
            began = time.monotonic()
            rows = 0
            while consumer.position(tp) < end:
                assert time.monotonic() - began < 60, consumer.position(tp)
                rows += consumer.poll_arrow(timeout_ms=200).num_rows
            read_s = time.monotonic() - began
            fetched = consumer.metrics()
        assert rows == end - 4000 == sent  # nothing lost
        assert fetched["fetch-throttle-time-max"] > 0
        # at most the 1 s padded burst ahead of the quota
        assert read_s >= 0.8 * (fetched["bytes-consumed-total"] / fetch_rate - 1.0), read_s
    finally:
        admin.alter_client_quotas({entity: dict.fromkeys(keys) for entity, keys in quotas.items()})
