"""The leader replica's idempotence rules on a real Ray, called directly.

Batches carry a producer id, epoch and base sequence as an idempotent producer sends
them; what the leader wrote is read back with ``fetch``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pyarrow as pa
import ray
from ray.exceptions import RayActorError

from raystream.errors import (
    InvalidProducerEpochError,
    InvalidRequestError,
    OutOfOrderSequenceError,
)
from raystream.records import build_batch
from raystream.requests import FetchRequest, ProduceRequest


def leader(cluster: Any, topic: str) -> Any:
    return cluster.topic_metadata(topic, refresh=True).partitions[0].leader_handle


def batch_of(cluster: Any, topic: str, values: list[bytes]) -> pa.RecordBatch:
    schema = cluster.topic_metadata(topic).record_schema
    return build_batch(schema, [None] * len(values), values, [0] * len(values), None)


def produce_ref(cluster, topic, values, pid, epoch, seq, timeout_ms=30_000):
    batch = batch_of(cluster, topic, values)
    request = ProduceRequest(topic, 0, batch, 1, timeout_ms, None, pid, epoch, seq)
    return leader(cluster, topic).handle.remote(request)


def produce(cluster, topic, values, pid, epoch, seq, timeout_ms=30_000):
    return ray.get(produce_ref(cluster, topic, values, pid, epoch, seq, timeout_ms), timeout=60)


def stored(cluster: Any, topic: str) -> list[bytes]:
    request = FetchRequest(topic, 0, 0, 8 << 20, 0)
    response = ray.get(leader(cluster, topic).handle.remote(request), timeout=30)
    response.raise_for_error()
    return response.records.column("value").to_pylist()


def test_a_resent_batch_is_written_once_and_answered_with_its_first_offsets(
    shared_cluster, make_topic
) -> None:
    topic = make_topic()
    first = produce(shared_cluster, topic, [b"a", b"b"], 11, 0, 0)
    second = produce(shared_cluster, topic, [b"c"], 11, 0, 2)
    again = produce(shared_cluster, topic, [b"a", b"b"], 11, 0, 0)
    assert (first.error_code, second.error_code, again.error_code) == (0, 0, 0)
    assert (first.base_offset, second.base_offset, again.base_offset) == (0, 2, 0)
    assert produce(shared_cluster, topic, [b"c"], 11, 0, 2).base_offset == 2
    assert stored(shared_cluster, topic) == [b"a", b"b", b"c"]


def test_a_batch_ahead_of_its_predecessor_waits_for_it(
    shared_cluster, make_topic, holds_for
) -> None:
    topic = make_topic()
    later = produce_ref(shared_cluster, topic, [b"2", b"3"], 12, 0, 2)
    # Parked at the leader, not written: neither answered nor stored throughout a window
    # (the replica shows no count of parked batches that the test could wait for).
    holds_for(
        lambda: not ray.wait([later], timeout=0)[0] and stored(shared_cluster, topic) == [],
        0.3,
        "the later batch unanswered and unwritten",
    )
    earlier = produce(shared_cluster, topic, [b"0", b"1"], 12, 0, 0)
    answer = ray.get(later, timeout=30)
    assert (earlier.base_offset, answer.base_offset) == (0, 2)
    assert stored(shared_cluster, topic) == [b"0", b"1", b"2", b"3"]


def test_a_gap_that_stays_is_refused_as_out_of_order(shared_cluster, make_topic) -> None:
    topic = make_topic()
    produce(shared_cluster, topic, [b"0"], 13, 0, 0)
    started = time.monotonic()
    answer = produce(shared_cluster, topic, [b"5"], 13, 0, 5, timeout_ms=300)
    assert time.monotonic() - started >= 0.25  # it waited for the missing 1..4
    assert isinstance(answer.error(), OutOfOrderSequenceError)
    assert "first sequence 5 where 1 was expected" in answer.message
    assert stored(shared_cluster, topic) == [b"0"]


def test_an_older_epoch_is_fenced_and_a_new_one_restarts_at_zero(
    shared_cluster, make_topic
) -> None:
    topic = make_topic()
    produce(shared_cluster, topic, [b"e1"], 14, 1, 0)
    assert isinstance(
        produce(shared_cluster, topic, [b"e0"], 14, 0, 1).error(), InvalidProducerEpochError
    )
    assert produce(shared_cluster, topic, [b"e2"], 14, 2, 0).base_offset == 1
    assert stored(shared_cluster, topic) == [b"e1", b"e2"]


def test_malformed_producer_fields_are_refused_naming_them(shared_cluster, make_topic) -> None:
    topic = make_topic()
    for epoch, seq, bad in ((-1, 0, "epoch"), (0, -1, "base sequence"), (1 << 15, 0, "epoch")):
        answer = produce(shared_cluster, topic, [b"x"], 15, epoch, seq)
        assert isinstance(answer.error(), InvalidRequestError)
        assert bad in answer.message
    assert stored(shared_cluster, topic) == []


def test_a_restarted_leader_rebuilds_its_producer_state_from_snapshot_and_log(
    shared_cluster, make_topic, chaos
) -> None:
    topic = make_topic()
    for i in range(5):
        produce(shared_cluster, topic, [b"%d" % i], 16, 0, i)
    directory = os.path.join(shared_cluster.data_dir, f"{topic}-0.r0")
    deadline = time.monotonic() + 30
    while not any(name.endswith(".snapshot") for name in os.listdir(directory)):
        assert time.monotonic() < deadline, "no producer-state snapshot was written"
        time.sleep(0.2)  # the replica's housekeeping writes one within a second
    produce(shared_cluster, topic, [b"5"], 16, 0, 5)  # after the snapshot: in the log only
    chaos.kill_actor(leader(shared_cluster, topic), "the leader")
    chaos.confirm()  # Ray counted the restart: no produce below meets the old process
    deadline = time.monotonic() + 60
    while True:
        try:
            answer = produce(shared_cluster, topic, [b"5"], 16, 0, 5)
            if answer.error_code == 0:
                break
        except (RayActorError, AttributeError):  # restarting, or offline (no leader handle)
            pass
        assert time.monotonic() < deadline, "the leader did not come back"
        time.sleep(0.2)  # restarting: not serving yet
    assert answer.base_offset == 5
    assert produce(shared_cluster, topic, [b"3"], 16, 0, 3).base_offset == 3
    assert produce(shared_cluster, topic, [b"6"], 16, 0, 6).base_offset == 6
    assert stored(shared_cluster, topic) == [b"%d" % i for i in range(7)]
    chaos.verify()  # and it came back in a new process
