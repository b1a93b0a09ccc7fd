"""Kafka's idempotence and transaction APIs on the listener, in raw kio requests over a
socket (the Kafka producers' own transactions need FindCoordinator and Produce, served
by other modules): producer ids, fencing, and offsets committed or aborted with a
transaction, as raystream's Admin then sees them."""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Callable
from typing import Any

import pytest
from wire_helpers import KafkaSocket

from raystream.errors import GroupIdNotFoundError, InvalidProducerEpochError, ProducerFencedError
from raystream.kafka.txn import kafka_code
from raystream.types import TopicPartition

PRODUCER_FENCED = 90
INVALID_PRODUCER_EPOCH = 47
UNKNOWN_TOPIC_OR_PARTITION = 3
OPERATION_NOT_ATTEMPTED = 55
INVALID_TRANSACTION_TIMEOUT = 50
_ids = itertools.count()


@pytest.fixture
def kafka(bootstrap: str) -> Any:
    conn = KafkaSocket(bootstrap, timeout_s=180, client_id="kadmin-test")
    yield conn
    conn.close()


def _timeout(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def _init(kafka: KafkaSocket, version: int, txn_id: str | None, **fields: Any) -> Any:
    return kafka.ask(
        22, version, transactional_id=txn_id, transaction_timeout=_timeout(60_000), **fields
    )


def test_producer_fenced_is_invalid_producer_epoch_for_older_clients() -> None:
    fenced = ProducerFencedError("x")
    assert kafka_code(fenced, 22, 3) == INVALID_PRODUCER_EPOCH
    assert kafka_code(fenced, 22, 4) == PRODUCER_FENCED
    assert kafka_code(fenced, 28, 2) == INVALID_PRODUCER_EPOCH
    assert kafka_code(InvalidProducerEpochError("x"), 26, 3) == INVALID_PRODUCER_EPOCH


def test_init_producer_id_idempotent_and_transactional_with_fencing(kafka: KafkaSocket) -> None:
    first, second = _init(kafka, 4, None), _init(kafka, 0, None)
    assert (first.error_code, second.error_code) == (0, 0)
    assert first.producer_id >= 0 and second.producer_id != first.producer_id
    assert first.producer_epoch == second.producer_epoch == 0

    txn_id = f"kadmin-fence-{next(_ids)}"
    old = _init(kafka, 4, txn_id)
    new = _init(kafka, 4, txn_id)  # a second producer of the id: epoch + 1
    assert (old.error_code, new.error_code) == (0, 0)
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 1)
    # The older epoch is fenced: PRODUCER_FENCED for clients that know it.
    for version, code in ((3, PRODUCER_FENCED), (1, INVALID_PRODUCER_EPOCH)):
        answer = kafka.ask(
            25,
            version,
            transactional_id=txn_id,
            producer_id=old.producer_id,
            producer_epoch=old.producer_epoch,
            group_id="g",
        )
        assert answer.error_code == code
    # KIP-360: a bump by the fenced producer is refused, by the current one granted.
    stale = _init(kafka, 4, txn_id, producer_id=old.producer_id, producer_epoch=old.producer_epoch)
    assert stale.error_code == PRODUCER_FENCED
    bumped = _init(kafka, 4, txn_id, producer_id=new.producer_id, producer_epoch=new.producer_epoch)
    assert (bumped.error_code, bumped.producer_epoch) == (0, new.producer_epoch + 1)
    too_long = kafka.ask(22, 4, transactional_id=txn_id, transaction_timeout=_timeout(3_600_000))
    assert too_long.error_code == INVALID_TRANSACTION_TIMEOUT


def test_txn_offsets_commit_with_the_transaction_and_vanish_with_an_abort(
    kafka: KafkaSocket,
    kafka_cluster: Any,
    kafka_topic: Callable[..., str],
    wait_until: Callable[..., Any],
) -> None:
    topic = kafka_topic(partitions=2)
    group, txn_id = f"kadmin-group-{next(_ids)}", f"kadmin-txn-{next(_ids)}"
    producer = _init(kafka, 4, txn_id)
    ids = {
        "transactional_id": txn_id,
        "producer_id": producer.producer_id,
        "producer_epoch": producer.producer_epoch,
    }
    admin = kafka_cluster.admin()

    def add_partitions(*partitions: tuple[str, int]) -> dict[tuple[str, int], int]:
        topics: dict[str, list[int]] = {}
        for name, partition in partitions:
            topics.setdefault(name, []).append(partition)
        answer = kafka.ask(
            24,
            3,
            v3_and_below_transactional_id=txn_id,
            v3_and_below_producer_id=producer.producer_id,
            v3_and_below_producer_epoch=producer.producer_epoch,
            v3_and_below_topics=[{"name": n, "partitions": p} for n, p in topics.items()],
        )
        return {
            (t.name, r.partition_index): r.partition_error_code
            for t in answer.results_by_topic_v3_and_below
            for r in t.results_by_partition
        }

    def transaction(offsets: dict[int, int], commit: bool) -> None:
        assert kafka.ask(25, 3, group_id=group, **ids).error_code == 0
        answer = kafka.ask(
            28,
            3,
            group_id=group,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "committed_offset": o, "committed_metadata": "m"}
                        for p, o in offsets.items()
                    ],
                }
            ],
            **ids,
        )
        codes = [p.error_code for t in answer.topics for p in t.partitions]
        assert codes == [0] * len(offsets)
        assert kafka.ask(26, 3, committed=commit, **ids).error_code == 0

    # A partition that does not exist fails the add; the others are not attempted.
    assert add_partitions((topic, 0), (topic, 5)) == {
        (topic, 0): OPERATION_NOT_ATTEMPTED,
        (topic, 5): UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert add_partitions((topic, 0)) == {(topic, 0): 0}
    transaction({0: 5, 1: 7}, commit=True)
    committed = {TopicPartition(topic, 0): 5, TopicPartition(topic, 1): 7}

    # EndTxn answers once the commit is decided; the markers land just after (until
    # then the group has no committed offsets, so it does not exist yet).
    def offsets() -> dict:
        try:
            return admin.describe_group(group).offsets
        except GroupIdNotFoundError:
            return {}

    wait_until(lambda: offsets() == committed, 30, "the committed offsets")
    # An aborted transaction's offsets never show; the next commit's do (the same
    # producer epoch writes the offsets partition again: its sequences go on).
    transaction({0: 9}, commit=False)
    assert admin.describe_group(group).offsets == committed
    transaction({1: 11}, commit=True)
    wait_until(
        lambda: offsets() == {**committed, TopicPartition(topic, 1): 11},
        30,
        "the second commit's offsets",
    )
