"""Transaction rules of the producer state and the log's read_committed reading: open
transactions and the last stable offset, markers, the aborted-transaction index (its
query against a brute-force model), fencing by a marker's epoch, snapshots, rebuilds."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raystream.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    TransactionCoordinatorFencedError,
)
from raystream.log.producer_state import NO_SEQUENCE, AbortedTxn, ProducerStateManager, Verdict
from raystream.records import BYTES_SCHEMA
from raystream.transactions.markers import ABORT_KEY, COMMIT_KEY, marker_batch

T = 1_700_000_000_000


def txn_batch(state: ProducerStateManager, pid: int, epoch: int, seq: int, count: int) -> int:
    offset = state.map_end_offset
    state.append(pid, epoch, seq, seq + count - 1, offset, offset + count - 1, T, True)
    return offset


def marker(state: ProducerStateManager, pid: int, epoch: int, commit: bool) -> int:
    offset = state.map_end_offset
    state.complete_txn(pid, epoch, commit, offset, T)
    return offset


def test_the_first_transactional_batch_opens_a_transaction_and_a_marker_closes_it() -> None:
    state = ProducerStateManager()
    assert state.first_unstable_offset() is None
    state.append(1, 0, 0, 4, 0, 4, T)  # idempotent, not transactional
    assert state.last_stable_offset(5) == 5
    first = txn_batch(state, 1, 0, 5, 3)
    txn_batch(state, 1, 0, 8, 3)
    assert state.first_unstable_offset() == first == 5
    assert state.last_stable_offset(11) == 5
    marker(state, 1, 0, commit=True)
    assert state.first_unstable_offset() is None and state.aborted == []


def test_the_next_epochs_transactional_batch_waits_for_the_previous_marker() -> None:
    """The coordinator writes markers after answering the end, and the producer's next
    transaction takes the next epoch at once: its batch waits (then is refused,
    retriably) while the ended transaction is open here, and appends after the marker."""
    state = ProducerStateManager()
    txn_batch(state, 1, 0, 0, 3)
    check = state.check(1, 1, 0, 1, transactional=True)
    assert check.verdict is Verdict.PREVIOUS_TXN_OPEN and check.waits
    assert isinstance(check.error(), ConcurrentTransactionsError)
    assert check.error().retriable
    assert state.check(1, 0, 3, 4, transactional=True).verdict is Verdict.APPEND  # same epoch
    marker(state, 1, 0, commit=True)
    assert state.check(1, 1, 0, 1, transactional=True).verdict is Verdict.APPEND


def test_offsets_without_a_sequence_are_fenced_by_epoch_and_open_the_transaction() -> None:
    """A Kafka client's TxnOffsetCommit is appended without a sequence (as Kafka's
    coordinator does): any number of them append, before or between sequenced
    batches of the same epoch, and they still open the transaction and are fenced."""
    state = ProducerStateManager()
    for _ in range(3):  # no state yet, then the same epoch again and again
        check = state.check(1, 0, NO_SEQUENCE, NO_SEQUENCE, transactional=True)
        assert check.verdict is Verdict.APPEND
        offset = state.map_end_offset
        state.append(1, 0, NO_SEQUENCE, NO_SEQUENCE, offset, offset, T, True)
    assert state.first_unstable_offset() == 0
    assert state.check(1, 0, 0, 4, transactional=True).verdict is Verdict.APPEND
    marker(state, 1, 0, commit=True)
    state.append(1, 2, NO_SEQUENCE, NO_SEQUENCE, state.map_end_offset, state.map_end_offset, T)
    assert state.check(1, 1, NO_SEQUENCE, NO_SEQUENCE).verdict is Verdict.FENCED


def test_the_last_stable_offset_is_the_oldest_open_transaction() -> None:
    state = ProducerStateManager()
    a = txn_batch(state, 1, 0, 0, 2)
    txn_batch(state, 2, 0, 0, 2)
    assert state.last_stable_offset(100) == a
    marker(state, 1, 0, commit=False)
    assert state.last_stable_offset(100) == 2
    assert state.last_stable_offset(1) == 1  # never above the high watermark


def test_an_abort_marker_enters_the_aborted_index() -> None:
    state = ProducerStateManager()
    first = txn_batch(state, 7, 0, 0, 3)
    txn_batch(state, 8, 0, 0, 3)
    at = marker(state, 7, 0, commit=False)
    assert state.aborted == [AbortedTxn(7, first, at)]
    skip = state.aborted_filter(0, 100)
    assert skip is not None


def test_a_marker_with_a_newer_epoch_fences_the_older_one() -> None:
    state = ProducerStateManager()
    txn_batch(state, 3, 0, 0, 2)
    marker(state, 3, 1, commit=False)  # the coordinator aborted with the bumped epoch
    assert state.check(3, 0, 2, 2).verdict is Verdict.FENCED
    assert state.check(3, 1, 0, 0).verdict is Verdict.APPEND
    assert state.first_unstable_offset() is None and len(state.aborted) == 1
    with pytest.raises(InvalidProducerEpochError):
        state.check_marker(3, 0, 0)


def test_a_marker_from_an_older_coordinator_epoch_is_refused() -> None:
    state = ProducerStateManager()
    txn_batch(state, 3, 0, 0, 2)
    state.complete_txn(3, 0, True, 2, T, coordinator_epoch=5)
    state.check_marker(3, 0, 5)
    with pytest.raises(TransactionCoordinatorFencedError, match="epoch 4"):
        state.check_marker(3, 0, 4)


def test_pruning_drops_aborted_transactions_below_the_log_start() -> None:
    state = ProducerStateManager()
    for pid in range(3):
        txn_batch(state, pid, 0, 0, 2)
        marker(state, pid, 0, commit=False)
    state.prune_aborted(4)
    assert [t.producer_id for t in state.aborted] == [1, 2]
    assert state.aborted_between(0, 100) == state.aborted


@settings(max_examples=200, deadline=None)
@given(
    spans=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 30)), max_size=20),
    start=st.integers(0, 90),
    length=st.integers(1, 40),
)
def test_aborted_between_finds_exactly_the_overlapping_transactions(spans, start, length):
    # Markers come in log order, so build transactions sorted by marker offset.
    txns = sorted(
        (AbortedTxn(i, first, first + size) for i, (first, size) in enumerate(spans)),
        key=lambda t: t.last_offset,
    )
    state = ProducerStateManager()
    for txn in txns:
        state._add_aborted(txn)
    end = start + length
    expected = [t for t in txns if t.last_offset >= start and t.first_offset < end]
    assert state.aborted_between(start, end) == expected


def test_open_transactions_and_the_index_survive_a_snapshot(tmp_path) -> None:
    state = ProducerStateManager(str(tmp_path))
    txn_batch(state, 1, 0, 0, 2)
    marker(state, 1, 0, commit=False)
    open_first = txn_batch(state, 2, 0, 0, 2)
    state.complete_txn(1, 0, True, state.map_end_offset, T, coordinator_epoch=3)
    state.take_snapshot()
    loaded = ProducerStateManager(str(tmp_path))
    assert loaded.load(0, state.map_end_offset) == state.map_end_offset
    assert loaded.aborted == state.aborted
    assert loaded.first_unstable_offset() == open_first
    assert loaded.producers[1].coordinator_epoch == 3


def test_state_rebuilt_from_headers_knows_transactions(make_log) -> None:
    log = make_log()
    data = pa.record_batch(
        [pa.array([b"k"]), pa.array([b"v"]), pa.array([T]), pa.array([None], BYTES_SCHEMA[3].type)],
        schema=BYTES_SCHEMA,
    )
    log.append(data, producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True)
    log.append(
        marker_batch(BYTES_SCHEMA, False, 0, T), producer_id=1, producer_epoch=0, is_control=True
    )
    log.append(data, producer_id=2, producer_epoch=0, base_sequence=0, is_transactional=True)
    rebuilt = ProducerStateManager(log.directory)
    rebuilt.apply_all(log.batch_headers(rebuilt.load(0, log.log_end_offset)))
    assert rebuilt.aborted == [AbortedTxn(1, 0, 1)]
    assert rebuilt.first_unstable_offset() == 2


def test_reads_hide_markers_and_skip_aborted_batches_reporting_how_far_they_got(make_log):
    log = make_log()
    state = ProducerStateManager()

    def write(value: bytes, pid: int, seq: int) -> None:
        batch = pa.record_batch(
            [
                pa.array([None], pa.binary()),
                pa.array([value]),
                pa.array([T]),
                pa.array([None], BYTES_SCHEMA[3].type),
            ],
            schema=BYTES_SCHEMA,
        )
        base, last = log.append(
            batch, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True
        )
        state.append(pid, 0, seq, seq, base, last, T, True)

    def end(pid: int, commit: bool) -> None:
        base, _ = log.append(
            marker_batch(BYTES_SCHEMA, commit, 0, T),
            producer_id=pid,
            producer_epoch=0,
            is_control=True,
            is_commit=commit,
        )
        state.complete_txn(pid, 0, commit, base, T)

    write(b"a1", 1, 0)
    write(b"b1", 2, 0)
    end(1, commit=False)
    end(2, commit=True)
    write(b"a2", 1, 1)
    end(1, commit=True)
    assert [h.is_commit for h in log.batch_headers(0) if h.is_control] == [False, True, True]
    everything = log.read(0)
    assert everything.column("value").to_pylist() == [b"a1", b"b1", b"a2"]
    end_offset = log.log_end_offset
    committed, next_offset = log.read_until(0, skip=state.aborted_filter(0, end_offset))
    assert committed.column("value").to_pylist() == [b"b1", b"a2"]
    assert committed.column("offset").to_pylist() == [1, 4]
    assert next_offset == end_offset
    at_marker, next_offset = log.read_until(5)
    assert at_marker.num_rows == 0 and next_offset == 6


def test_marker_keys_are_kafkas_control_keys() -> None:
    assert ABORT_KEY == b"\x00\x00\x00\x00" and COMMIT_KEY == b"\x00\x00\x00\x01"
    batch = marker_batch(BYTES_SCHEMA, True, 9, T)
    assert batch.schema.equals(BYTES_SCHEMA) and batch.num_rows == 1
    assert batch.column("value")[0].as_py() == b"\x00\x00\x00\x00\x00\x09"
