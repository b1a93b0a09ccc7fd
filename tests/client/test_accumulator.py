"""The producer's accumulator, request building and record futures, without Ray.

Requests are completed by hand (as the sender would, with the base offsets a leader
would answer), so every mapping from a record to its partition and offset is checked
exactly.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections.abc import Callable

import pyarrow as pa
import pytest

from raystream.client.accumulator import (
    BY_KEY,
    STICKY,
    RecordAccumulator,
    TopicInfo,
    build_requests,
    rows_per_request,
    split_by_partition,
)
from raystream.client.partitioner import DefaultPartitioner, partition_for_key
from raystream.client.results import (
    FutureRecordMetadata,
    ProduceResult,
    compact,
)
from raystream.errors import (
    IllegalStateError,
    InvalidRecordError,
    NotLeaderError,
    RaystreamTimeoutError,
    RecordTooLargeError,
)
from raystream.records import BYTES_SCHEMA, record_schema
from raystream.types import RecordMetadata

TS = 1_700_000_000_000


@pytest.fixture(autouse=True)
def _no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are pure: starting Ray here is a bug."""
    ray = pytest.importorskip("ray")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("accumulator tests must not start Ray")

    monkeypatch.setattr(ray, "init", refuse)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def topic_info(partitions: int = 1, value_schema: pa.Schema | None = None) -> TopicInfo:
    fields = None if value_schema is None else frozenset(value_schema.names)
    required = frozenset(
        f.name for f in (value_schema or []) if not f.nullable and value_schema is not None
    )
    return TopicInfo(
        name="t",
        num_partitions=partitions,
        available_partitions=tuple(range(partitions)),
        record_schema=record_schema(value_schema),
        value_fields=fields,
        required_fields=required,
        leaders=(None,) * partitions,
    )


def accumulator(
    clock: Callable[[], float] | None = None,
    batch_size: int = 1 << 20,
    linger_ms: int = 5,
    buffer_memory: int = 1 << 30,
    max_block_ms: int = 50,
    max_request_size: int = 1 << 20,
) -> RecordAccumulator:
    return RecordAccumulator(
        batch_size, linger_ms, buffer_memory, clock or FakeClock(), max_block_ms, max_request_size
    )


def send(
    acc: RecordAccumulator,
    value: object = b"v",
    key: bytes | None = None,
    part: int | None = None,
    partitions: int = 1,
    headers: list[tuple[str, bytes]] | None = None,
    timestamp: int = TS,
) -> FutureRecordMetadata:
    marker = part if part is not None else (STICKY if key is None else BY_KEY)
    size = 32 + (len(value) if isinstance(value, bytes) else 8) + len(key or b"")
    return acc.append("t", key, value, timestamp, marker, size, headers, partitions)


def drain_one(acc: RecordAccumulator, now: float = 1e9):
    ready, _ = acc.drain(now)
    assert len(ready) == 1
    return ready[0]


def answer(requests, base_offsets: dict[int, int] | None = None, log_append_time: int = -1):
    """Complete requests like a leader would: consecutive offsets per partition."""
    next_offset = dict(base_offsets or {})
    for request in requests:
        base = next_offset.get(request.partition, 0)
        next_offset[request.partition] = base + request.rows
        request.complete(base, log_append_time)


# ------------------------------------------------------------------ buffering


def test_an_open_chunk_is_drained_only_after_linger() -> None:
    clock = FakeClock()
    acc = accumulator(clock, linger_ms=5)
    send(acc)
    ready, deadline = acc.drain(clock.now + 0.004)
    assert ready == []
    assert deadline == pytest.approx(clock.now + 0.005)
    ready, _ = acc.drain(clock.now + 0.005)
    assert len(ready) == 1


def test_a_held_topic_keeps_gathering_records_past_linger_until_released() -> None:
    """The sender holds a topic whose partitions all have calls in flight: its chunk
    stays open (one Arrow batch later instead of one per record), but a full chunk or
    a flush still goes."""
    clock = FakeClock()
    acc = accumulator(clock, batch_size=1000, linger_ms=0)
    send(acc, b"a")
    assert acc.drain(clock.now, held={"t"}) == ([], None)
    send(acc, b"b")
    ready, _ = acc.drain(clock.now)
    assert [len(c) for c in ready] == [2]
    for _ in range(12):
        send(acc, b"x" * 60)  # 92 bytes each: full after 11
    ready, _ = acc.drain(clock.now, held={"t"})
    assert [len(c) for c in ready] == [12]
    send(acc, b"c")
    acc.begin_flush()
    assert [len(c) for c in acc.drain(clock.now, held={"t"})[0]] == [1]
    acc.end_flush()


def test_the_sender_sleeps_through_a_held_topics_linger() -> None:
    clock = FakeClock()
    acc = accumulator(clock, linger_ms=0)
    send(acc)
    start = time.monotonic()
    acc.wait_for_work(0.0, None)  # linger over: returns at once
    acc.wait_for_work(0.05, None, held={"t"})  # held: sleeps until woken or timeout
    assert time.monotonic() - start >= 0.05


def test_a_full_chunk_is_ready_at_once_and_keeps_taking_records_until_drained() -> None:
    clock = FakeClock()
    acc = accumulator(clock, batch_size=100, linger_ms=10_000)
    futures = [send(acc, b"x" * 60) for _ in range(3)]  # 92 bytes each: full after 2
    ready, _ = acc.drain(clock.now)
    assert len(ready) == 1 and len(ready[0]) == 3
    send(acc, b"y")  # the drained chunk takes no more: a new one opens
    assert acc.drain(clock.now)[0] == []
    assert futures[0]._result is futures[2]._result


def test_a_chunk_is_closed_before_it_outgrows_a_request() -> None:
    acc = accumulator(batch_size=100, linger_ms=10_000, max_request_size=1000)
    for _ in range(20):
        send(acc, b"x" * 68)  # 100 bytes each; cap is 90% of 1000
    ready, _ = acc.drain(0)
    assert [len(c) for c in ready] == [9, 9, 2]
    assert all(c.size_bytes <= 900 for c in ready)


def test_flush_makes_lingering_chunks_ready() -> None:
    clock = FakeClock()
    acc = accumulator(clock, linger_ms=60_000)
    future = send(acc)
    results = acc.begin_flush()
    assert results == [future._result]
    assert len(acc.drain(clock.now)[0]) == 1
    acc.end_flush()


def test_append_after_close_is_refused() -> None:
    acc = accumulator()
    acc.close()
    with pytest.raises(IllegalStateError, match="closed"):
        send(acc)


def test_buffer_memory_blocks_then_times_out_and_frees_on_completion() -> None:
    acc = accumulator(time.monotonic, buffer_memory=200, max_block_ms=30)
    send(acc, b"x" * 100)  # 132 bytes
    with pytest.raises(RaystreamTimeoutError, match="buffer_memory=200"):
        send(acc, b"x" * 100)
    with pytest.raises(RecordTooLargeError, match="exceeds buffer_memory=200"):
        send(acc, b"x" * 300)
    chunk = drain_one(acc)
    requests = build_requests(chunk, topic_info(), DefaultPartitioner(), 1 << 20)
    answer(requests)
    assert acc.buffered_bytes == 0
    assert not send(acc, b"x" * 100).is_done  # room again


def test_a_blocked_send_resumes_when_space_frees() -> None:
    acc = accumulator(time.monotonic, buffer_memory=200, max_block_ms=10_000)
    send(acc, b"x" * 100)
    chunk = drain_one(acc)
    requests = build_requests(chunk, topic_info(), DefaultPartitioner(), 1 << 20)
    timer = threading.Timer(0.05, answer, args=(requests,))
    timer.start()
    future = send(acc, b"x" * 100)  # blocks until the timer completes the first
    timer.join()
    assert not future.is_done


# ------------------------------------------------------------- building requests


def test_keyless_records_go_to_one_sticky_partition_that_moves_on_per_batch() -> None:
    acc = accumulator()
    partitioner = DefaultPartitioner(random.Random(3))
    info = topic_info(partitions=3)
    chosen = []
    for _ in range(4):
        futures = [send(acc, b"v%d" % i, partitions=3) for i in range(5)]
        requests = build_requests(drain_one(acc), info, partitioner, 1 << 20)
        assert len(requests) == 1
        answer(requests)
        metadata = [f.get(0) for f in futures]
        assert {m.partition for m in metadata} == {requests[0].partition}
        assert [m.offset for m in metadata] == [0, 1, 2, 3, 4]
        chosen.append(requests[0].partition)
    assert all(a != b for a, b in itertools.pairwise(chosen))


def test_keyed_records_land_where_murmur2_says_in_send_order() -> None:
    acc = accumulator()
    keys = [b"key-%d" % (i % 7) for i in range(40)]
    futures = [send(acc, b"v%d" % i, key=k, partitions=4) for i, k in enumerate(keys)]
    requests = build_requests(drain_one(acc), topic_info(4), DefaultPartitioner(), 1 << 20)
    assert [r.partition for r in requests] == sorted(r.partition for r in requests)
    answer(requests, base_offsets={0: 10, 1: 20, 2: 30, 3: 40})
    seen: dict[int, list[int]] = {}
    for i, (future, key) in enumerate(zip(futures, keys, strict=True)):
        metadata = future.get(0)
        assert metadata.partition == partition_for_key(key, 4)
        seen.setdefault(metadata.partition, []).append((metadata.offset, i))
    for partition, pairs in seen.items():
        offsets = [o for o, _ in pairs]
        assert offsets == list(range(10 * (partition + 1), 10 * (partition + 1) + len(pairs)))
        assert [i for _, i in pairs] == sorted(i for _, i in pairs)  # send order kept


def test_request_batches_carry_the_records_in_partition_order() -> None:
    acc = accumulator()
    for i in range(10):
        send(acc, b"v%d" % i, part=i % 2, partitions=2, headers=[("h", b"%d" % i)] if i else None)
    requests = build_requests(drain_one(acc), topic_info(2), DefaultPartitioner(), 1 << 20)
    assert [r.partition for r in requests] == [0, 1]
    first, second = (r.payload() for r in requests)
    assert first.column("value").to_pylist() == [b"v0", b"v2", b"v4", b"v6", b"v8"]
    assert second.column("headers").to_pylist()[0] == [{"key": "h", "value": b"1"}]
    assert first.column("headers").to_pylist()[0] is None
    assert first.schema.equals(BYTES_SCHEMA)


def test_mixed_markers_keep_order_per_partition() -> None:
    acc = accumulator()
    futures = [
        send(acc, b"a", key=b"k", partitions=2),
        send(acc, b"b", part=0, partitions=2),
        send(acc, b"c", partitions=2),
        send(acc, b"d", key=b"k", partitions=2),
    ]
    requests = build_requests(drain_one(acc), topic_info(2), DefaultPartitioner(), 1 << 20)
    answer(requests)
    metadata = [f.get(0) for f in futures]
    key_partition = partition_for_key(b"k", 2)
    assert metadata[0].partition == metadata[3].partition == key_partition
    assert metadata[0].offset < metadata[3].offset
    assert metadata[1].partition == 0


def test_a_partition_larger_than_a_request_is_split_and_offsets_follow_on() -> None:
    acc = accumulator(max_request_size=1 << 20)
    futures = [send(acc, b"x" * 100) for _ in range(100)]
    chunk = drain_one(acc)
    requests = build_requests(chunk, topic_info(), DefaultPartitioner(), 4000)
    assert len(requests) > 3
    assert sum(r.rows for r in requests) == 100
    for r in requests:  # compact: Ray ships whole buffers of a slice
        payload = r.payload()
        assert payload.get_total_buffer_size() <= payload.nbytes + 4096
    answer(requests, base_offsets={0: 500})
    assert [f.get(0).offset for f in futures] == list(range(500, 600))


def test_log_append_time_replaces_the_timestamp() -> None:
    acc = accumulator()
    future = send(acc, timestamp=5)
    other = accumulator()
    kept = send(other, timestamp=5)
    answer(build_requests(drain_one(acc), topic_info(), DefaultPartitioner(), 1 << 20), {}, 999)
    answer(build_requests(drain_one(other), topic_info(), DefaultPartitioner(), 1 << 20))
    assert future.get(0).timestamp == 999
    assert kept.get(0) == RecordMetadata("t", 0, 0, 5)


def test_a_value_that_does_not_fit_a_typed_topic_fails_only_its_own_future() -> None:
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    acc = accumulator()
    good = send(acc, {"id": 1, "name": "a"})
    bad = send(acc, {"id": "not a number", "name": "b"})
    later = send(acc, {"id": 3})
    requests = build_requests(drain_one(acc), topic_info(1, schema), DefaultPartitioner(), 1 << 20)
    assert requests[0].rows == 2
    answer(requests)
    assert good.get(0).offset == 0
    assert later.get(0).offset == 1
    with pytest.raises(InvalidRecordError, match="not a number"):
        bad.get(0)
    assert bad.failed() and not bad.retriable()


def test_a_chunk_of_only_bad_values_completes_with_their_errors() -> None:
    schema = pa.schema([("id", pa.int64())])
    acc = accumulator()
    bad = send(acc, {"id": "x"})
    assert (
        build_requests(drain_one(acc), topic_info(1, schema), DefaultPartitioner(), 1 << 20) == []
    )
    assert bad.is_done
    assert isinstance(bad.exception, InvalidRecordError)


def test_split_by_partition_of_a_sliced_batch_ships_compact_requests() -> None:
    big = pa.RecordBatch.from_pydict(
        {"key": [None] * 1000, "value": [b"x" * 50] * 1000, "timestamp": [TS] * 1000},
        schema=pa.schema(list(BYTES_SCHEMA)[:3]),
    )
    view = big.slice(100, 300)
    assert compact(view).get_total_buffer_size() < view.get_total_buffer_size()
    result = ProduceResult("t")
    parts = pa.array([0, 1] * 150).to_numpy()
    requests, order = split_by_partition(view, parts, "t", result, 0.0, 50)
    assert len(requests) == 6 and order is not None
    payloads = [r.payload() for r in requests]
    assert all(p.get_total_buffer_size() <= p.nbytes + 4096 for p in payloads)
    assert [v for p in payloads for v in p.column("value").to_pylist()] == [b"x" * 50] * 300


def test_rows_per_request_keeps_requests_under_the_limit() -> None:
    batch = pa.RecordBatch.from_pydict({"value": [b"x" * 100] * 1000})
    per = rows_per_request(batch, 10_000)
    assert 0 < per * batch.nbytes / 1000 <= 10_000
    assert rows_per_request(batch, 1 << 30) == 1000


# ---------------------------------------------------------------------- futures


def test_callbacks_run_on_completion_and_at_once_when_already_done() -> None:
    acc = accumulator()
    future = send(acc)
    failing = send(acc)
    calls: list[object] = []
    future.add_callback(calls.append).add_errback(lambda e: calls.append(("err", e)))
    future.add_callback(lambda tag, md: calls.append((tag, md.offset)), "tagged")
    requests = build_requests(drain_one(acc), topic_info(), DefaultPartitioner(), 1 << 20)
    answer(requests)
    assert calls == [RecordMetadata("t", 0, 0, TS), ("tagged", 0)]
    future.add_callback(calls.append)  # already done: called now, in this thread
    assert calls[-1] == RecordMetadata("t", 0, 0, TS)
    assert failing.succeeded()


def test_errbacks_get_the_error_and_a_raising_callback_is_only_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    acc = accumulator()
    future = send(acc)
    errors: list[BaseException] = []
    future.add_errback(errors.append)
    future.add_callback(lambda md: pytest.fail("no success callback on failure"))
    future.add_errback(lambda e: 1 / 0)
    (request,) = build_requests(drain_one(acc), topic_info(), DefaultPartitioner(), 1 << 20)
    with caplog.at_level(logging.ERROR):
        request.fail(NotLeaderError("moved"))
    assert isinstance(errors[0], NotLeaderError)
    assert "ZeroDivisionError" in caplog.text
    assert future.failed() and future.retriable() and future.value is None
    with pytest.raises(NotLeaderError, match="moved"):
        future.get(0)


def test_add_both_gets_the_metadata_or_the_error() -> None:
    seen: list[object] = []
    ok_acc, bad_acc = accumulator(), accumulator()
    send(ok_acc).add_both(seen.append)
    send(bad_acc).add_both(lambda tag, outcome: seen.append((tag, outcome)), "bad")
    answer(build_requests(drain_one(ok_acc), topic_info(), DefaultPartitioner(), 1 << 20))
    (request,) = build_requests(drain_one(bad_acc), topic_info(), DefaultPartitioner(), 1 << 20)
    request.fail(NotLeaderError("moved"))
    assert seen[0] == RecordMetadata("t", 0, 0, TS)
    assert seen[1][0] == "bad" and isinstance(seen[1][1], NotLeaderError)


def test_get_times_out_while_pending() -> None:
    future = send(accumulator())
    assert not future.is_done and future.value is None and future.exception is None
    with pytest.raises(RaystreamTimeoutError, match=r"within 0\.01 s"):
        future.get(0.01)
    assert "pending" in repr(future)


def test_fail_all_fails_every_record() -> None:
    acc = accumulator()
    futures = [send(acc) for _ in range(3)]
    drain_one(acc).result.fail_all(RaystreamTimeoutError("gave up"))
    assert all(isinstance(f.exception, RaystreamTimeoutError) for f in futures)
    assert acc.incomplete() == []


def test_concurrent_appends_lose_no_record() -> None:
    acc = accumulator(batch_size=500, linger_ms=10_000)
    futures: list[FutureRecordMetadata] = []
    lock = threading.Lock()

    def work(n: int) -> None:
        mine = [send(acc, b"%d" % n) for _ in range(500)]
        with lock:
            futures.extend(mine)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ready, _ = acc.drain(1e9)
    assert sum(len(c) for c in ready) == 2000
    for chunk in ready:
        answer(build_requests(chunk, topic_info(), DefaultPartitioner(), 1 << 20))
    assert all(f.succeeded() for f in futures)
