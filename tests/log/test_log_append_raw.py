"""The follower path: ``read_raw`` on a leader, ``append_raw`` on a follower.

A chunk is checked whole before any of it is written, then written one ``writev`` per
run of batches that share a segment; rolls, offset gaps, epochs and the flush policy
behave as on the leader's own appends.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from raystream.errors import CorruptRecordError, InvalidRecordError
from raystream.log import OFFSET_COLUMN
from raystream.log.batch import CRC_START

START = 1_700_000_000_000
"""The fake clock's start (see conftest)."""


def raw_bytes(log) -> bytes:
    """All of ``log``'s stored batches, end to end, as a leader would send them."""
    return b"".join(r.to_pybytes() for r in log.read_raw(log.log_start_offset, 1 << 30))


def fill(log, batch, batches: int, rows: int = 10, epoch: int = -1, step_ms: int = 0) -> None:
    for i in range(batches):
        values = [f"v{i}-{j}" for j in range(rows)]
        log.append(batch(values, timestamps=START + i * step_ms), partition_leader_epoch=epoch)


def test_a_follower_copy_reads_like_the_leader(make_log, batch, crash):
    leader = make_log(name="leader", segment_bytes=2048)
    fill(leader, batch, 40)
    follower = make_log(name="follower", segment_bytes=2048)
    for chunk in leader.read_raw(0, 1 << 30):
        follower.append_raw(chunk)
    assert follower.log_end_offset == leader.log_end_offset == 400
    assert follower.segment_count == leader.segment_count > 1
    assert follower._bases == leader._bases
    for offset in range(0, 400, 7):
        assert follower.read(offset).equals(leader.read(offset))
    assert [b.header for b in follower.read_batches(0, 1 << 30)] == [
        b.header for b in leader.read_batches(0, 1 << 30)
    ]
    crash(follower)
    reopened = make_log.reopen(follower, clean=False)
    assert reopened.read(0, 1 << 30).equals(leader.read(0, 1 << 30))
    assert reopened.offset_for_timestamp(START) == 0


def test_one_chunk_spanning_several_segments_is_split_into_runs(make_log, batch):
    leader = make_log(name="leader")
    fill(leader, batch, 30)
    follower = make_log(name="follower", segment_bytes=4096)
    assert follower.append_raw(raw_bytes(leader)) == 30
    assert follower.segment_count > 2
    assert all(s.size <= 4096 for s in follower._segments)
    assert follower.read(0, 1 << 30).equals(leader.read(0, 1 << 30))
    for segment in follower._segments:
        first = next(segment.headers(0))[1]
        assert segment.base_offset == first.base_offset
        assert segment.translate(segment.next_offset - 1) is not None


def test_a_run_rolls_at_segment_ms(make_log, batch):
    leader = make_log(name="leader")
    fill(leader, batch, 6, step_ms=400)
    follower = make_log(name="follower", segment_ms=1000)
    follower.append_raw(raw_bytes(leader))
    assert follower._bases == [0, 30]
    assert follower.read(0, 1 << 30).equals(leader.read(0, 1 << 30))


def test_a_corrupt_batch_appends_nothing_of_its_chunk(make_log, batch):
    leader = make_log(name="leader")
    fill(leader, batch, 5)
    data = bytearray(raw_bytes(leader))
    third = leader.read_batches(20)[0]
    data[third.position + CRC_START + 10] ^= 0xFF
    follower = make_log(name="follower")
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        follower.append_raw(bytes(data))
    assert follower.log_end_offset == 0
    assert follower.size_bytes == 0


def test_offsets_going_backwards_append_nothing_of_the_chunk(make_log, batch):
    leader = make_log(name="leader")
    fill(leader, batch, 2)
    first, second = leader.read_batches(0)
    backwards = second.raw.to_pybytes() + first.raw.to_pybytes()
    follower = make_log(name="follower")
    with pytest.raises(InvalidRecordError, match="below the log end offset 20"):
        follower.append_raw(backwards)
    assert follower.log_end_offset == 0
    follower.append_raw(first.raw)
    with pytest.raises(InvalidRecordError, match="below the log end offset 10"):
        follower.append_raw(first.raw)
    assert follower.log_end_offset == 10


def test_a_batch_ahead_of_an_empty_segment_starts_it_at_its_offset(make_log, batch):
    leader = make_log(name="leader")
    leader.truncate_fully_and_start_at(100)
    fill(leader, batch, 2)
    follower = make_log(name="follower")
    follower.append_raw(raw_bytes(leader))
    assert follower._bases == [100]
    assert follower.log_end_offset == 120
    assert follower.read(100).column(OFFSET_COLUMN).to_pylist() == list(range(100, 120))


def test_an_offset_jump_past_an_index_range_rolls(make_log, batch, crash):
    near = make_log(name="near")
    fill(near, batch, 1)
    far = make_log(name="far")
    far.truncate_fully_and_start_at(2**31 + 5)
    fill(far, batch, 1)
    follower = make_log(name="follower")
    follower.append_raw(raw_bytes(near) + raw_bytes(far))
    assert follower._bases == [0, 2**31 + 5]
    assert follower.read(2**31 + 5).num_rows == 10
    crash(follower)
    reopened = make_log.reopen(follower, clean=False)
    assert reopened.log_end_offset == 2**31 + 15


def test_copied_batches_carry_their_leader_epochs(make_log, batch):
    leader = make_log(name="leader")
    fill(leader, batch, 2, epoch=3)
    fill(leader, batch, 2, epoch=5)
    follower = make_log(name="follower")
    follower.append_raw(raw_bytes(leader))
    assert follower.leader_epochs.entries() == [(3, 0), (5, 20)]
    assert [b.header.partition_leader_epoch for b in follower.read_batches(0, 1 << 30)] == [
        3,
        3,
        5,
        5,
    ]


def test_copied_batches_obey_the_flush_policy(make_log, batch):
    leader = make_log(name="leader")
    fill(leader, batch, 3)
    follower = make_log(name="follower", flush_messages=1)
    follower.append_raw(raw_bytes(leader))
    assert follower.recovery_point == 30


def test_an_empty_chunk_appends_nothing(make_log):
    follower = make_log(name="follower")
    assert follower.append_raw(pa.py_buffer(b"")) == 0
    assert follower.log_end_offset == 0
