"""The transaction coordinator killed mid-transaction completes it atomically after
its restart, from what ``__transaction_state`` says."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import random
import threading
import time
from typing import Any

import pytest
import ray

from raystream.actors.partition_client import PartitionClient
from raystream.records import build_batch
from raystream.transactions.metadata import TransactionMetadata, TxnState
from raystream.transactions.state_topic import (
    TRANSACTION_STATE_TOPIC,
    partition_for,
    transaction_record,
)
from raystream.types import TopicPartition


def describe(cluster: Any, tid: str) -> dict:
    return cluster.transaction_coordinator_call("describe", tid)


@pytest.mark.parametrize("commit", [True, False])
def test_a_coordinator_killed_between_prepare_and_markers_finishes_after_restart(
    shared_cluster, make_topic, commit, txn_id, read_all, transactional
) -> None:
    topic = make_topic(partitions=3)
    tid = txn_id()
    producer = transactional(shared_cluster, transactional_id=tid)
    producer.begin_transaction()
    for p in range(3):
        producer.send(topic, f"v{p}".encode(), partition=p)
    producer.flush()
    meta = TransactionMetadata.from_dict(tid, describe(shared_cluster, tid))
    assert meta.state is TxnState.ONGOING and len(meta.partitions) == 3
    # The coordinator dies right after persisting the outcome, before any marker.
    ray.kill(shared_cluster.transaction_coordinator(), no_restart=True)
    prepared = dataclasses.replace(
        meta, state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    )
    # Written as the coordinator writes its state (clients may not write internal topics).
    tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition_for(tid, 1))
    schema = shared_cluster.topic_metadata(TRANSACTION_STATE_TOPIC).record_schema
    record = transaction_record(prepared)
    batch = build_batch(schema, record["key"].to_pylist(), record["value"].to_pylist(), [0], None)
    asyncio.run(PartitionClient(shared_cluster.namespace).produce(tp, batch, 60))
    # A new coordinator (the controller starts it on first use) loads and resumes.
    deadline = time.monotonic() + 60
    while describe(shared_cluster, tid)["state"] != (
        "CompleteCommit" if commit else "CompleteAbort"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    expected = sorted(f"v{p}".encode() for p in range(3)) if commit else []
    assert sorted(read_all(shared_cluster, topic, "read_committed", 3)) == expected
    producer.close()


def test_markers_written_again_after_a_restart_leave_the_carried_transaction_alone(
    shared_cluster, make_topic, read_all, transactional
) -> None:
    """A restarted coordinator finds the last end in Prepare* and writes its markers
    again. The carried next transaction already wrote there under the next epoch, so
    the partition refuses them: its records stay pending until it ends, as it ends."""
    topic = make_topic()
    producer = transactional(shared_cluster)
    tid = producer.config.transactional_id
    producer.begin_transaction()
    producer.send(topic, b"one").get()
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send(topic, b"two").get()  # the carried transaction: no coordinator call
    ray.kill(shared_cluster.transaction_coordinator(), no_restart=True)
    deadline = time.monotonic() + 60
    while describe(shared_cluster, tid)["state"] != "Ongoing":  # resumed and completed
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert read_all(shared_cluster, topic, "read_committed") == [b"one"]
    producer.abort_transaction()
    producer.close()
    assert read_all(shared_cluster, topic, "read_committed") == [b"one"]
    assert read_all(shared_cluster, topic, "read_uncommitted") == [b"one", b"two"]


def test_transactions_survive_coordinator_crashes_at_random_points(
    shared_cluster, make_topic, read_all, transactional
) -> None:
    """Ray restarts the killed coordinator; every transaction ends all or nothing."""
    topic = make_topic(partitions=2)
    producer = transactional(shared_cluster, request_timeout_ms=120_000)
    stop = threading.Event()

    rng = random.Random(6)
    kills: list[float] = []
    errors: list[BaseException] = []

    def kill_now_and_then() -> None:
        """Kill the coordinator at a random moment once it has loaded, again and again."""
        try:
            while len(kills) < 4 and not stop.wait(rng.uniform(0.1, 1.2)):
                handle = shared_cluster.transaction_coordinator(refresh=True)
                ray.kill(handle, no_restart=False)
                kills.append(time.monotonic())
                with contextlib.suppress(Exception):  # back once it answers
                    ray.get(handle.ping.remote(), timeout=60)
        except BaseException as error:
            errors.append(error)

    killer = threading.Thread(target=kill_now_and_then, daemon=True)
    killer.start()
    committed = []
    deadline = time.monotonic() + 180
    try:
        for i in itertools.count():  # until the killer is done (its four kills)
            if (not killer.is_alive() and i >= 6) or time.monotonic() > deadline:
                break
            producer.begin_transaction()
            producer.send(topic, f"t{i}-a".encode(), partition=0)
            producer.send(topic, f"t{i}-b".encode(), partition=1)
            if i % 3 == 2:
                producer.abort_transaction()
            else:
                producer.commit_transaction()
                committed.append(i)
    finally:
        stop.set()
        killer.join()
    assert not errors
    producer.close()
    assert len(kills) >= 3
    values = read_all(shared_cluster, topic, "read_committed", 2)
    expected = [f"t{i}-{s}".encode() for i in committed for s in "ab"]
    assert sorted(values) == sorted(expected)
    assert len(values) == len(set(values))
    end = shared_cluster.consumer(isolation_level="read_committed", enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(2)]
    stable = end.end_offsets(tps)
    end.close()
    hw = shared_cluster.consumer(enable_auto_commit=False)
    assert stable == hw.end_offsets(tps)  # no transaction left open
    hw.close()
