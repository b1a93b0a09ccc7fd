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
