"""Idempotent producer state as pure rules, snapshots on disk, and rebuilding from a log."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raystream.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from raystream.log.producer_state import (
    BATCHES_TO_RETAIN,
    SEQUENCE_LIMIT,
    ProducerStateManager,
    Verdict,
    next_sequence,
    snapshot_file_name,
)

T = 1_700_000_000_000


def written(state: ProducerStateManager, pid: int, epoch: int, first: int, count: int) -> int:
    """Append a batch of ``count`` records at the state's end; return its first offset."""
    offset = state.map_end_offset
    state.append(pid, epoch, first, next_sequence(first, count - 1), offset, offset + count - 1, T)
    return offset


def test_batches_without_a_producer_id_are_always_appended() -> None:
    assert ProducerStateManager().check(-1, -1, -1, -1).verdict is Verdict.APPEND


def test_a_new_producer_starts_at_sequence_zero() -> None:
    state = ProducerStateManager()
    assert state.check(1, 0, 0, 4).verdict is Verdict.APPEND


def test_an_unknown_producer_ahead_of_zero_is_waited_for_then_accepted() -> None:
    check = ProducerStateManager().check(1, 0, 10, 14)
    assert check.verdict is Verdict.UNKNOWN
    assert check.waits
    assert check.error() is None  # after the wait: state lost, accepted as Kafka does


def test_the_next_batch_in_sequence_is_appended() -> None:
    state = ProducerStateManager()
    written(state, 1, 0, 0, 5)
    assert state.check(1, 0, 5, 9).verdict is Verdict.APPEND


def test_a_retried_batch_is_a_duplicate_answered_with_its_original_offsets() -> None:
    state = ProducerStateManager()
    state.map_end_offset = 100
    written(state, 1, 0, 0, 5)
    written(state, 1, 0, 5, 5)
    check = state.check(1, 0, 0, 4)
    assert (check.verdict, check.first_offset, check.last_offset) == (Verdict.DUPLICATE, 100, 104)
    assert check.error() is None
    check = state.check(1, 0, 5, 9)
    assert (check.first_offset, check.last_offset) == (105, 109)


def test_a_batch_ahead_of_the_next_sequence_is_a_gap_refused_after_the_wait() -> None:
    state = ProducerStateManager()
    written(state, 1, 0, 0, 5)
    check = state.check(1, 0, 7, 9)
    assert check.verdict is Verdict.GAP and check.waits
    assert isinstance(check.error(), OutOfOrderSequenceError)
    assert "7" in str(check.error()) and "5" in str(check.error())


def test_a_batch_behind_the_window_is_out_of_order() -> None:
    state = ProducerStateManager()
    for i in range(BATCHES_TO_RETAIN + 1):
        written(state, 1, 0, i * 10, 10)
    assert state.check(1, 0, 0, 9).verdict is Verdict.OUT_OF_ORDER  # forgotten
    assert state.check(1, 0, 10, 19).verdict is Verdict.DUPLICATE  # still retained
    assert state.check(1, 0, 12, 19).verdict is Verdict.OUT_OF_ORDER  # not a batch it had


def test_an_older_epoch_is_fenced_and_a_newer_one_restarts_at_zero() -> None:
    state = ProducerStateManager()
    written(state, 1, 3, 0, 5)
    fenced = state.check(1, 2, 5, 9)
    assert fenced.verdict is Verdict.FENCED
    assert isinstance(fenced.error(), InvalidProducerEpochError)
    assert state.check(1, 4, 0, 4).verdict is Verdict.APPEND
    assert state.check(1, 4, 5, 9).verdict is Verdict.GAP  # a new epoch's successor early
    written(state, 1, 4, 0, 5)
    assert state.check(1, 3, 5, 9).verdict is Verdict.FENCED
    assert state.check(1, 4, 5, 9).verdict is Verdict.APPEND


def test_producers_are_independent() -> None:
    state = ProducerStateManager()
    written(state, 1, 0, 0, 5)
    assert state.check(2, 0, 0, 0).verdict is Verdict.APPEND
    assert state.check(2, 0, 5, 5).verdict is Verdict.UNKNOWN


def test_sequences_wrap_at_two_to_the_31() -> None:
    last = SEQUENCE_LIMIT - 1
    assert next_sequence(last) == 0
    state = ProducerStateManager()
    state.append(1, 0, last - 4, last, 0, 4, T)
    assert state.check(1, 0, 0, 9).verdict is Verdict.APPEND
    assert state.check(1, 0, 3, 9).verdict is Verdict.GAP
    assert state.check(1, 0, last - 9, last - 5).verdict is Verdict.OUT_OF_ORDER


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=12),
    data=st.data(),
)
def test_any_arrival_order_with_retries_writes_each_batch_once_in_order(sizes, data) -> None:
    """Model: a producer pipelines batches; the network reorders and repeats them; the
    leader parks gaps (here: a batch waits until its turn) and drops duplicates."""
    firsts = [sum(sizes[:i]) for i in range(len(sizes))]
    arrivals = data.draw(
        st.lists(st.sampled_from(range(len(sizes))), min_size=len(sizes), max_size=40)
    )
    arrivals += list(range(len(sizes)))  # every batch is eventually (re)sent
    state = ProducerStateManager()
    log: list[int] = []  # batch index per appended batch
    parked: list[int] = []
    for batch in arrivals:
        parked.append(batch)
        progress = True
        while progress:
            progress = False
            for waiting in list(parked):
                first = firsts[waiting]
                check = state.check(9, 0, first, first + sizes[waiting] - 1)
                if check.verdict is Verdict.APPEND:
                    written(state, 9, 0, first, sizes[waiting])
                    log.append(waiting)
                elif check.verdict is Verdict.DUPLICATE:
                    assert check.first_offset == sum(sizes[:waiting])
                elif check.waits:
                    continue
                else:  # behind the window: only batches long acknowledged get here
                    assert waiting < len(log) - BATCHES_TO_RETAIN
                parked.remove(waiting)
                progress = True
    assert log == list(range(len(sizes)))


# ---------------------------------------------------------------- snapshots


def test_a_snapshot_round_trips_and_keeps_only_the_newest_two(tmp_path) -> None:
    state = ProducerStateManager(str(tmp_path))
    for i in range(3):
        written(state, 1, 0, i * 5, 5)
        written(state, 2, 7, i * 3, 3)
        state.take_snapshot()
    assert state.snapshot_offsets() == [16, 24]
    again = ProducerStateManager(str(tmp_path))
    assert again.load(0, 24) == 24
    assert not again.needs_snapshot
    assert again.check(1, 0, 10, 14).first_offset == state.check(1, 0, 10, 14).first_offset
    assert again.check(2, 7, 9, 9).verdict is Verdict.APPEND


def test_snapshots_past_the_log_end_and_corrupt_ones_are_dropped(tmp_path) -> None:
    state = ProducerStateManager(str(tmp_path))
    written(state, 1, 0, 0, 5)
    state.take_snapshot()
    written(state, 1, 0, 5, 5)
    state.take_snapshot()
    again = ProducerStateManager(str(tmp_path))
    assert again.load(0, 7) == 5  # the log lost its tail: the snapshot at 10 goes
    assert again.snapshot_offsets() == [5]
    with open(tmp_path / snapshot_file_name(5), "r+") as f:
        f.seek(12)
        f.write("X")
    assert ProducerStateManager(str(tmp_path)).load(0, 7) == 0  # replay from log start
    assert not os.listdir(tmp_path)


# ------------------------------------------------------- rebuilding from a log


def test_state_rebuilt_from_snapshot_and_log_tail_equals_the_live_state(make_log) -> None:
    log = make_log()
    live = ProducerStateManager(log.directory)
    batch = pa.record_batch({"value": pa.array([b"x"] * 4, pa.binary())})
    sequences = {1: 0, 2: 0}
    for i in range(12):
        pid = 1 + i % 2
        base, last = log.append(
            batch, producer_id=pid, producer_epoch=0, base_sequence=sequences[pid]
        )
        live.append(pid, 0, sequences[pid], sequences[pid] + 3, base, last, T)
        sequences[pid] += 4
        if i == 5:
            live.take_snapshot()
    log.append(batch)  # a batch without idempotence
    rebuilt = ProducerStateManager(log.directory)
    start = rebuilt.load(log.log_start_offset, log.log_end_offset)
    assert start == 24
    tail = log.batch_headers(start)
    assert len(tail) == 7  # the snapshot spared replaying the first six batches
    rebuilt.apply_all(tail)
    assert rebuilt.map_end_offset == log.log_end_offset
    for pid in (1, 2):
        assert list(rebuilt.producers[pid].batches) == list(live.producers[pid].batches)


@pytest.mark.parametrize("offset", [0, 5])
def test_clearing_forgets_producers_and_snapshots(tmp_path, offset) -> None:
    state = ProducerStateManager(str(tmp_path))
    written(state, 1, 0, 0, 5)
    state.take_snapshot()
    state.clear(offset)
    assert state.producers == {} and state.map_end_offset == offset
    assert state.snapshot_offsets() == []
