"""The transaction coordinator's state machine and ``__transaction_state`` records, pure."""

from __future__ import annotations

import dataclasses

import pytest

from raystream.errors import (
    ConcurrentTransactionsError,
    InvalidRequestError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from raystream.transactions.metadata import (
    MAX_PRODUCER_EPOCH,
    TransactionMetadata,
    TxnState,
    add_partitions,
    bump_epoch,
    complete,
    init_producer,
    new_transaction,
    prepare_end,
    timed_out,
)
from raystream.transactions.state_topic import (
    TransactionStore,
    partition_for,
    transaction_record,
)


def ongoing():
    meta = new_transaction("tx", 5, 1000, now_ms=0)
    return add_partitions(meta, 5, 0, [("a", 0), ("b", 1)], now_ms=10)


def test_a_transaction_goes_from_empty_through_prepare_to_complete() -> None:
    meta = ongoing()
    assert meta.state is TxnState.ONGOING and meta.txn_start_ms == 10
    meta = add_partitions(meta, 5, 0, [("a", 1)], now_ms=20)
    assert meta.partitions == {("a", 0), ("b", 1), ("a", 1)} and meta.txn_start_ms == 10
    prepared = prepare_end(meta, 5, 0, commit=False, now_ms=30)
    assert prepared.state is TxnState.PREPARE_ABORT
    assert prepare_end(prepared, 5, 0, commit=False, now_ms=31) is prepared  # a retry
    done = complete(prepared, now_ms=40)
    assert done.state is TxnState.COMPLETE_ABORT and not done.partitions
    again = add_partitions(done, 5, 0, [("c", 0)], now_ms=50)
    assert again.state is TxnState.ONGOING and again.txn_start_ms == 50


def test_calls_out_of_order_name_the_state() -> None:
    meta = new_transaction("tx", 5, 1000, now_ms=0)
    with pytest.raises(InvalidTxnStateError, match="commit in state Empty"):
        prepare_end(meta, 5, 0, commit=True, now_ms=1)
    prepared = prepare_end(ongoing(), 5, 0, commit=True, now_ms=1)
    with pytest.raises(InvalidTxnStateError, match="abort in state PrepareCommit"):
        prepare_end(prepared, 5, 0, commit=False, now_ms=2)
    with pytest.raises(ConcurrentTransactionsError):
        add_partitions(prepared, 5, 0, [("x", 0)], now_ms=2)
    with pytest.raises(ConcurrentTransactionsError):
        init_producer(prepared, 1000, None, now_ms=2)


def test_a_new_init_bumps_the_epoch_and_fences_the_old_producer() -> None:
    meta = complete(prepare_end(ongoing(), 5, 0, True, 1), 2)
    meta = init_producer(meta, 2000, None, now_ms=3)
    assert (meta.producer_id, meta.producer_epoch, meta.timeout_ms) == (5, 1, 2000)
    with pytest.raises(ProducerFencedError, match="epoch 0 was fenced"):
        add_partitions(meta, 5, 0, [("a", 0)], now_ms=4)
    with pytest.raises(ProducerFencedError):
        prepare_end(meta, 4, 1, commit=True, now_ms=4)


def test_an_open_transaction_is_aborted_with_a_bumped_epoch_before_an_init() -> None:
    meta = ongoing()
    with pytest.raises(InvalidTxnStateError):
        init_producer(meta, 1000, None, now_ms=5)
    aborting = bump_epoch(meta, now_ms=5)
    assert aborting.state is TxnState.PREPARE_ABORT and aborting.producer_epoch == 1
    assert aborting.partitions == meta.partitions


def test_an_exhausted_epoch_gets_a_new_producer_id() -> None:
    meta = dataclasses.replace(
        new_transaction("tx", 5, 1000, now_ms=0), producer_epoch=MAX_PRODUCER_EPOCH
    )
    renewed = init_producer(meta, 1000, 9, now_ms=1)
    assert (renewed.producer_id, renewed.producer_epoch) == (9, 0)


def test_timeouts() -> None:
    meta = ongoing()
    assert not timed_out(meta, 1010)
    assert timed_out(meta, 1011)
    assert not timed_out(new_transaction("tx", 5, 1000, now_ms=0), 10**9)


@pytest.mark.parametrize("bad", [0, -5, "10", 10**9, True])
def test_a_bad_timeout_is_named(bad) -> None:
    with pytest.raises(InvalidRequestError, match="transaction_timeout_ms"):
        new_transaction("tx", 1, bad, now_ms=0)


def test_records_replay_to_the_latest_state() -> None:
    store = TransactionStore()
    first = ongoing()
    second = prepare_end(first, 5, 0, commit=True, now_ms=99)
    store.replay(transaction_record(first))
    store.replay(transaction_record(second))
    assert store.transactions == {"tx": second}
    assert 0 <= partition_for("tx", 3) < 3


def test_an_end_carries_its_partitions_into_the_next_transaction_under_the_next_epoch() -> None:
    prepared = prepare_end(ongoing(), 5, 0, True, 20, number=3, carry=[("a", 0)])
    assert prepared.state is TxnState.PREPARE_COMMIT
    assert prepared.producer_epoch == 0  # the markers carry the ended transaction's epoch
    carried = complete(prepared, now_ms=30)
    assert carried.state is TxnState.ONGOING
    assert carried.partitions == {("a", 0)} and carried.txn_start_ms == 30
    assert (carried.producer_id, carried.producer_epoch) == (5, 1)
    assert not carried.next_partitions and carried.next_producer is None
    # The carried transaction ends like any other, and may carry again.
    again = complete(prepare_end(carried, 5, 1, False, 40, number=4, carry=[("b", 0)]), 50)
    assert again.partitions == {("b", 0)} and again.producer_epoch == 2
    assert complete(prepare_end(again, 5, 2, True, 60, number=5), 70).state is (
        TxnState.COMPLETE_COMMIT
    )


def test_a_retried_end_is_answered_as_decided_even_from_the_epoch_before() -> None:
    carried = complete(prepare_end(ongoing(), 5, 0, True, 20, number=3, carry=[("a", 0)]), 30)
    assert prepare_end(carried, 5, 0, True, 35, number=3, carry=[("a", 0)]) is carried
    with pytest.raises(InvalidTxnStateError, match="transaction 3, it was committed"):
        prepare_end(carried, 5, 0, False, 35, number=3)
    with pytest.raises(ProducerFencedError):  # not a retry: the old epoch is fenced
        prepare_end(carried, 5, 0, True, 35, number=2)
    # A new producer's init forgets the ends of the old one.
    fenced = init_producer(complete(bump_epoch(carried, 40), 41), 1000, None, 42)
    assert fenced.ended is None
    with pytest.raises(ProducerFencedError):
        prepare_end(fenced, 5, 0, True, 45, number=3)


def test_carrying_past_the_last_epoch_takes_a_new_producer_id() -> None:
    meta = dataclasses.replace(ongoing(), producer_epoch=MAX_PRODUCER_EPOCH)
    with pytest.raises(InvalidTxnStateError, match="needs a new producer id"):
        prepare_end(meta, 5, MAX_PRODUCER_EPOCH, True, 20, number=0, carry=[("a", 0)])
    prepared = prepare_end(meta, 5, MAX_PRODUCER_EPOCH, True, 20, 0, [("a", 0)], 9)
    carried = complete(prepared, 30)
    assert (carried.producer_id, carried.producer_epoch) == (9, 0)
    assert carried.state is TxnState.ONGOING


def test_a_bumped_abort_carries_nothing() -> None:
    """A timeout or an init aborting a carried transaction fences it; nothing follows."""
    carried = complete(prepare_end(ongoing(), 5, 0, True, 20, number=3, carry=[("a", 0)]), 30)
    aborted = complete(bump_epoch(carried, 40), 41)
    assert aborted.state is TxnState.COMPLETE_ABORT and aborted.producer_epoch == 2


def test_carried_state_replays_and_older_records_read_without_it() -> None:
    prepared = prepare_end(ongoing(), 5, 0, True, 20, number=3, carry=[("a", 0)])
    store = TransactionStore()
    store.replay(transaction_record(prepared))
    assert store.transactions == {"tx": prepared}
    old = {
        k: v
        for k, v in ongoing().to_dict().items()
        if k not in ("next_partitions", "next_producer", "ended")
    }
    assert TransactionMetadata.from_dict("tx", old) == ongoing()
