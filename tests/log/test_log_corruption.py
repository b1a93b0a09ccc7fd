"""Bad bytes in the header fields outside the CRC are never served as data (issue 16.1).

Kafka's layout leaves ``base_offset``, ``size``, ``partition_leader_epoch`` and
``magic`` (and the CRC itself) outside the checksum, so a flipped bit there passes the
CRC check. A read checks these fields against the offset index and the batch's
neighbours instead; a batch that disagrees is a ``CorruptRecordError``, and the log's
next open recovers its segment (truncating from the first bad batch).
"""

from __future__ import annotations

import struct

import pytest

from raystream.errors import CorruptRecordError
from raystream.log import OFFSET_COLUMN

START = 1_700_000_000_000


def fill(log, batch, batches: int, rows: int = 10) -> list[str]:
    expected = []
    for b in range(batches):
        values = [f"value-{b * rows + j:05d}" for j in range(rows)]
        log.append(batch(values, timestamps=START + b))
        expected.extend(values)
    return expected


def positions(log) -> list[tuple[str, int, int, int]]:
    """(segment path, position, base offset, size) of every stored batch."""
    return [
        (segment.path, position, header.base_offset, header.size)
        for segment in log._segments
        for position, header in segment.headers()
    ]


def xor_at(path: str, position: int, mask: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        old = f.read(len(mask))
        f.seek(position)
        f.write(bytes(a ^ b for a, b in zip(old, mask, strict=True)))


def read_everything(log) -> list[tuple[int, str]]:
    """Every row from the log start on, read in 1 KB steps as a consumer would."""
    rows: list[tuple[int, str]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        table = log.read(offset, max_bytes=1024)
        offsets = table.column(OFFSET_COLUMN).to_pylist()
        rows.extend(zip(offsets, table.column("value").to_pylist(), strict=True))
        offset = offsets[-1] + 1
    return rows


def test_flipped_base_offset_bit_in_a_clean_log_is_never_served(make_log, batch):
    """The reported case: offsets went ..., 2498, 2499, 2363, 2364, ..."""
    log = make_log(segment_bytes=1 << 20)
    expected = fill(log, batch, batches=300)
    path, position, base, _ = positions(log)[250]
    assert base == 2500
    log.close()
    xor_at(path, position, struct.pack("<q", 1 << 7))  # 2500 -> 2372: backwards
    log = make_log(segment_bytes=1 << 20)
    with pytest.raises(CorruptRecordError) as info:
        read_everything(log)
    assert "base offset 2372" in str(info.value)
    # Reads that stop before the bad batch are still served, correctly numbered.
    before = base - 10
    table = log.read(0, max_bytes=1 << 30, max_offset=before)
    assert table.column(OFFSET_COLUMN).to_pylist() == list(range(before))
    assert table.column("value").to_pylist() == expected[:before]
    # Every read that would include it fails, wherever it starts.
    for start in (base - 1, base, base + 5):
        with pytest.raises(CorruptRecordError):
            log.read(start, max_bytes=1 << 30)
    # The next open recovers the segment from the bad batch on, as a torn tail.
    assert log.corrupt_from == 0
    log = make_log.reopen(log)
    assert log.log_end_offset == base
    assert read_everything(log) == list(enumerate(expected[:base]))
    assert log.append(batch(["after"])) == (base, base)


def test_flipped_base_offset_of_the_last_batch_in_a_clean_log_is_cut_on_open(make_log, batch):
    """Upwards in the last batch: no neighbour follows it, the recorded log end does."""
    log = make_log(segment_bytes=1 << 20)
    expected = fill(log, batch, batches=20)
    path, position, base, _ = positions(log)[-1]
    log.close()
    xor_at(path, position, struct.pack("<q", 1 << 12))
    log = make_log(segment_bytes=1 << 20)
    assert log.log_end_offset == base
    assert read_everything(log) == list(enumerate(expected[:base]))


def test_flipped_base_offset_at_the_end_of_a_closed_segment_is_cut_on_open(make_log, batch):
    log = make_log(segment_bytes=4096)
    expected = fill(log, batch, batches=40)
    assert log.segment_count >= 3
    first_segment = log._segments[0].path
    path, position, base, _ = [p for p in positions(log) if p[0] == first_segment][-1]
    log.close()
    xor_at(path, position, struct.pack("<q", 1 << 3))
    log = make_log(segment_bytes=4096)
    assert log.segment_count == 1
    assert log.log_end_offset == base
    assert read_everything(log) == list(enumerate(expected[:base]))


def test_flipped_leader_epoch_is_never_served(make_log, batch):
    log = make_log()
    for b in range(40):
        log.append(batch([f"v{b}"]), partition_leader_epoch=3)
    assert len(log._segments[0].index) > 1  # the bad batch is not in the tail open reads
    path, position, base, _ = positions(log)[4]
    log.close()
    xor_at(path, position + 12, struct.pack("<i", 1 << 20))
    log = make_log()
    assert log.log_end_offset == 40
    assert log.read(0, max_offset=base - 1).num_rows == base - 1
    with pytest.raises(CorruptRecordError, match="partition leader epoch 1048579"):
        log.read(0, max_bytes=1 << 30)
    with pytest.raises(CorruptRecordError):
        log.read_raw(base)


def test_flipped_leader_epoch_in_the_tail_of_a_clean_log_is_cut_on_open(make_log, batch):
    log = make_log()
    for b in range(10):
        log.append(batch([f"v{b}"]), partition_leader_epoch=3)
    assert len(log._segments[0].index) == 1  # open reads every header after entry 0
    path, position, base, _ = positions(log)[4]
    log.close()
    xor_at(path, position + 12, struct.pack("<i", -(1 << 31)))
    log = make_log()
    assert log.log_end_offset == base
    assert log.read(0).column("value").to_pylist() == [f"v{b}" for b in range(base)]


def test_a_wrong_offset_index_entry_is_rebuilt_and_the_read_served(make_log, batch):
    log = make_log(index_interval_bytes=0)
    expected = fill(log, batch, batches=30)
    index_path = log._segments[0].index.path
    log.close()
    xor_at(index_path, 8 * 10, struct.pack("<i", 1))  # entry 10's offset: 100 -> 101
    log = make_log(index_interval_bytes=0)
    assert read_everything(log) == list(enumerate(expected))
    assert log.read(105).column(OFFSET_COLUMN)[0].as_py() == 105
    assert log.corrupt_from is None


def test_a_follower_truncating_through_a_corrupt_batch_cuts_from_it(make_log, batch):
    """A follower truncating to its leader meets the bad batch: the log is cut from it,
    ends below the truncation offset, and refetching from there restores the rest."""
    log = make_log(segment_bytes=1 << 20)
    expected = fill(log, batch, batches=60)
    path, position, base, _ = positions(log)[30]
    log.close()
    xor_at(path, position, struct.pack("<q", 1 << 6))
    log = make_log(segment_bytes=1 << 20)
    with pytest.raises(CorruptRecordError):
        log.read(base - 5)
    assert log.corrupt_from == 0
    log.truncate_to(base + 55)
    assert log.log_end_offset == base
    assert log.corrupt_from is None
    assert log.append(batch(expected[base:])) == (base, len(expected) - 1)
    assert read_everything(log) == list(enumerate(expected))
    log = make_log.reopen(log)
    assert read_everything(log) == list(enumerate(expected))
