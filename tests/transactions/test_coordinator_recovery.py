"""The transaction coordinator killed mid-transaction completes it atomically after
its restart, from what ``__transaction_state`` says."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
import threading
import time
from typing import Any

import pytest

from raystream.actors.partition_client import PartitionClient
from raystream.records import build_batch
from raystream.requests import TRANSACTION_COORDINATOR_WRITER, DescribeTransactionRequest
from raystream.transactions.metadata import TransactionMetadata, TxnState
from raystream.transactions.state_topic import (
    TRANSACTION_STATE_TOPIC,
    partition_for,
    transaction_record,
)
from raystream.types import TopicPartition


def describe(cluster: Any, tid: str) -> dict:
    return cluster.transaction_coordinator_call(DescribeTransactionRequest(tid))


@pytest.mark.parametrize("commit", [True, False])
def test_a_coordinator_killed_between_prepare_and_markers_finishes_after_restart(
    shared_cluster, make_topic, commit, txn_id, read_all, transactional, chaos, wait_until
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
    chaos.kill_actor(shared_cluster.transaction_coordinator(), "the coordinator", restart=False)
    chaos.verify()  # dead for good before the outcome is written
    prepared = dataclasses.replace(
        meta, state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    )
    # Written as the coordinator writes its state (clients may not write internal topics).
    tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition_for(tid, 1))
    schema = shared_cluster.topic_metadata(TRANSACTION_STATE_TOPIC).record_schema
    record = transaction_record(prepared)
    batch = build_batch(schema, record["key"].to_pylist(), record["value"].to_pylist(), [0], None)
    client = PartitionClient(shared_cluster.namespace)
    asyncio.run(client.produce(tp, batch, 60, TRANSACTION_COORDINATOR_WRITER))
    # A new coordinator (the controller starts it on first use) loads and resumes.
    outcome = "CompleteCommit" if commit else "CompleteAbort"
    wait_until(
        lambda: describe(shared_cluster, tid)["state"] == outcome,
        60,
        f"the new coordinator to complete the transaction ({outcome})",
        interval_s=0.2,
        detail=lambda: describe(shared_cluster, tid),
    )
    expected = sorted(f"v{p}".encode() for p in range(3)) if commit else []
    assert sorted(read_all(shared_cluster, topic, "read_committed", 3)) == expected
    producer.close()


def test_markers_written_again_after_a_restart_leave_the_carried_transaction_alone(
    shared_cluster, make_topic, read_all, transactional, chaos, wait_until
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
    chaos.kill_actor(shared_cluster.transaction_coordinator(), "the coordinator", restart=False)
    chaos.verify()  # dead for good: the describe below starts a new one
    wait_until(  # resumed and completed
        lambda: describe(shared_cluster, tid)["state"] == "Ongoing",
        60,
        "the new coordinator to end the last transaction and carry the next",
        interval_s=0.2,
        detail=lambda: describe(shared_cluster, tid),
    )
    assert read_all(shared_cluster, topic, "read_committed") == [b"one"]
    producer.abort_transaction()
    producer.close()
    assert read_all(shared_cluster, topic, "read_committed") == [b"one"]
    assert read_all(shared_cluster, topic, "read_uncommitted") == [b"one", b"two"]


def test_transactions_survive_coordinator_crashes_at_random_points(
    shared_cluster, make_topic, read_all, transactional, chaos, wait_until
) -> None:
    """Ray restarts the killed coordinator; every transaction ends all or nothing."""
    topic = make_topic(partitions=2)
    producer = transactional(shared_cluster, request_timeout_ms=120_000)
    stop = threading.Event()

    rng = random.Random(6)

    def kill_now_and_then() -> None:
        """Kill the coordinator at a random moment once it is back, four times."""
        while len(chaos.kills) < 4 and not stop.wait(rng.uniform(0.1, 1.2)):
            handle = shared_cluster.transaction_coordinator(refresh=True)
            kill = chaos.kill_actor(handle, "the transaction coordinator")

            def back(handle: Any = handle, pid: int = kill.pid) -> bool:
                info = chaos.actor_info(handle)
                return info["State"] == "ALIVE" and info["Pid"] != pid

            wait_until(
                back,
                60,
                f"the coordinator back from kill {len(chaos.kills)} (it was pid {kill.pid})",
                detail=lambda handle=handle: chaos.actor_info(handle),
            )

    killer = chaos.background(kill_now_and_then, "coordinator killer")
    committed = []
    spans: list[tuple[float, float]] = []  # each transaction, begin to end
    deadline = time.monotonic() + 180
    try:
        for i in itertools.count():  # until the killer is done (its four kills)
            if (not killer.is_alive() and i >= 6) or time.monotonic() > deadline:
                break
            began = time.monotonic()
            producer.begin_transaction()
            producer.send(topic, f"t{i}-a".encode(), partition=0)
            producer.send(topic, f"t{i}-b".encode(), partition=1)
            if i % 3 == 2:
                producer.abort_transaction()
            else:
                producer.commit_transaction()
                committed.append(i)
            spans.append((began, time.monotonic()))
    finally:
        stop.set()
        killer.join(90)
    kills = chaos.verify(min_faults=4)
    inside = [k for k in kills if any(b < k.at < e for b, e in spans)]
    assert len(inside) >= 3, f"of {len(kills)} kills only {inside} came inside a transaction"
    producer.close()
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
