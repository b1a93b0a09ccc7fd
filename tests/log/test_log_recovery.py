"""Opening a log: clean shutdown, rebuilt indexes, torn tails and corrupt batches."""

from __future__ import annotations

import glob
import os
import random

import pytest

import raystream.log.segment as segment_module
from raystream.errors import CorruptRecordError
from raystream.log import OFFSET_COLUMN
from raystream.log.batch import HEADER_SIZE

START = 1_700_000_000_000


def values_of(table) -> list:
    return table.column("value").to_pylist()


def fill(log, batch, batches: int = 30, rows: int = 3) -> list[str]:
    """Append ``batches`` batches of ``rows`` rows; record i has timestamp START + i."""
    expected = []
    for b in range(batches):
        first = b * rows
        values = [f"value-{first + j:04d}" for j in range(rows)]
        log.append(batch(values, timestamps=[START + first + j for j in range(rows)]))
        expected.extend(values)
    return expected


def positions(log) -> list[tuple[str, int, int, int]]:
    """(segment path, position, base offset, size) of every stored batch."""
    return [
        (segment.path, position, header.base_offset, header.size)
        for segment in log._segments
        for position, header in segment.headers()
    ]


def flip_byte(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x5A]))


def truncate_file(path: str, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def assert_whole_log(log, expected: list[str]) -> None:
    table = log.read(log.log_start_offset, max_bytes=1 << 30)
    assert values_of(table) == expected[log.log_start_offset :]
    assert table.column(OFFSET_COLUMN).to_pylist() == list(
        range(log.log_start_offset, len(expected))
    )


@pytest.fixture
def recoveries(monkeypatch):
    """Counts segments recovered batch by batch."""
    calls = []
    original = segment_module.LogSegment.recover

    def recover(self, *args):
        calls.append(self.base_offset)
        return original(self, *args)

    monkeypatch.setattr(segment_module.LogSegment, "recover", recover)
    return calls


def test_clean_close_then_reopen_keeps_everything_and_skips_recovery(make_log, batch, recoveries):
    log = make_log(segment_bytes=1024)
    expected = fill(log, batch)
    log.append(batch(["last"], timestamps=START + 90), partition_leader_epoch=2)
    expected.append("last")
    segments = log.segment_count
    log.close()
    marker = os.path.join(log.directory, ".clean-shutdown")
    assert os.path.exists(marker)
    log = make_log(segment_bytes=1024)
    assert recoveries == []
    assert not os.path.exists(marker)  # a crash from now on is unclean again
    assert log.segment_count == segments
    assert log.log_end_offset == len(expected)
    assert log.leader_epochs.entries() == [(2, len(expected) - 1)]
    assert_whole_log(log, expected)
    assert log.offset_for_timestamp(START + 50) == 50
    assert log.append(batch(["more"])) == (len(expected), len(expected))


def test_unclean_shutdown_recovers_segments_past_the_recovery_point(
    make_log, batch, crash, recoveries
):
    log = make_log(segment_bytes=1024)
    expected = fill(log, batch)
    segments = log.segment_count
    crash(log)
    log = make_log(segment_bytes=1024)
    assert len(recoveries) >= 1
    assert log.segment_count == segments
    assert_whole_log(log, expected)


def test_segments_below_the_recovery_point_are_trusted(make_log, batch, crash, clock, recoveries):
    log = make_log(segment_bytes=1024)
    expected = fill(log, batch)
    clock.advance(1000)  # the flush also persists the recovery point
    log.flush()
    crash(log)
    log = make_log(segment_bytes=1024)
    assert recoveries == [log._segments[-1].base_offset]
    assert_whole_log(log, expected)


@pytest.mark.parametrize("which", ["index", "timeindex", "both"])
def test_missing_index_files_are_rebuilt(make_log, batch, which):
    log = make_log(segment_bytes=1024, index_interval_bytes=256)
    expected = fill(log, batch)
    log.close()
    suffixes = {"index": [".index"], "timeindex": [".timeindex"], "both": [".index", ".timeindex"]}
    removed = []
    for suffix in suffixes[which]:
        for path in glob.glob(os.path.join(log.directory, "*" + suffix)):
            os.unlink(path)
            removed.append(path)
    assert removed
    log = make_log(segment_bytes=1024, index_interval_bytes=256)
    assert all(os.path.exists(path) for path in removed)
    assert all(len(s.index) > 0 for s in log._segments if s.size)
    assert_whole_log(log, expected)
    for offset in (0, 13, 44, len(expected) - 1):
        assert log.read(offset, max_bytes=1).column(OFFSET_COLUMN)[0].as_py() == offset
        assert log.offset_for_timestamp(START + offset) == offset


def cut_points(log) -> list[tuple[str, int, int]]:
    """(path, size to cut the segment to, records that survive) for a stale-index test."""
    batches = positions(log)
    last_path = batches[-1][0]
    in_last = [b for b in batches if b[0] == last_path]
    assert len(in_last) >= 4
    points = []
    for k in (1, len(in_last) // 2, len(in_last) - 1):
        _, position, base, size = in_last[k]
        points.append((last_path, position, base))  # at a batch boundary
        points.append((last_path, position + size // 2, base))  # inside a batch
        points.append((last_path, position + 10, base))  # inside a header
    return points


@pytest.mark.parametrize("index_interval_bytes", [0, 1500, 1 << 20])
def test_stale_index_after_the_log_file_shrank_is_rebuilt(make_log, batch, index_interval_bytes):
    log = make_log(index_interval_bytes=index_interval_bytes)
    expected = fill(log, batch, batches=12)
    points = cut_points(log)
    log.close()
    for path, size, survivors in points:
        directory = log.directory
        copy = make_log(name=f"cut-{size}", index_interval_bytes=index_interval_bytes)
        copy.close()
        for name in os.listdir(directory):
            with open(os.path.join(directory, name), "rb") as src:
                data = src.read()
            with open(os.path.join(copy.directory, name), "wb") as dst:
                dst.write(data)
        truncate_file(os.path.join(copy.directory, os.path.basename(path)), size)
        reopened = make_log(name=f"cut-{size}", index_interval_bytes=index_interval_bytes)
        assert reopened.log_end_offset == survivors, size
        assert_whole_log(reopened, expected[:survivors])
        following = batch(["next"], timestamps=START + survivors)
        assert reopened.append(following) == (survivors, survivors)
        assert values_of(reopened.read(survivors - 1)) == [expected[survivors - 1], "next"]


def test_garbage_in_the_offset_index_is_rebuilt(make_log, batch):
    log = make_log(index_interval_bytes=256)
    expected = fill(log, batch, batches=20)
    log.close()
    path = log._segments[0].index.path
    size = os.path.getsize(path)
    rng = random.Random(7)
    with open(path, "wb") as f:
        f.write(bytes(rng.getrandbits(8) for _ in range(size)))
    log = make_log(index_interval_bytes=256)
    assert_whole_log(log, expected)
    for offset in range(0, len(expected), 5):
        assert values_of(log.read(offset, max_bytes=1))[0] == expected[offset]


def test_garbage_in_the_time_index_is_rebuilt(make_log, batch):
    log = make_log(index_interval_bytes=256)
    expected = fill(log, batch, batches=20)
    log.close()
    path = log._segments[0].time_index.path
    size = os.path.getsize(path)
    rng = random.Random(11)
    with open(path, "wb") as f:
        f.write(bytes(rng.getrandbits(8) for _ in range(size)))
    log = make_log(index_interval_bytes=256)
    assert_whole_log(log, expected)
    for offset in range(0, len(expected), 5):
        assert log.offset_for_timestamp(START + offset) == offset
    assert log.offset_for_timestamp(START + len(expected)) is None


@pytest.mark.parametrize("tear", ["half-batch", "half-header", "garbage"])
def test_torn_tail_is_truncated_on_unclean_open(make_log, batch, crash, tear):
    log = make_log(segment_bytes=1024)
    expected = fill(log, batch)
    path, position, base, size = positions(log)[-1]
    crash(log)
    if tear == "half-batch":
        truncate_file(path, position + size // 2)
        survivors = base
    elif tear == "half-header":
        truncate_file(path, position + HEADER_SIZE // 2)
        survivors = base
    else:
        with open(path, "ab") as f:
            f.write(random.Random(3).randbytes(777))
        survivors = len(expected)
    log = make_log(segment_bytes=1024)
    assert log.log_end_offset == survivors
    assert os.path.getsize(path) == (position if survivors == base else position + size)
    assert_whole_log(log, expected[:survivors])
    after = batch(["after"], timestamps=START + survivors)
    assert log.append(after) == (survivors, survivors)
    assert values_of(log.read(survivors)) == ["after"]
    log = make_log.reopen(log)
    assert_whole_log(log, [*expected[:survivors], "after"])


def test_zeroed_tail_is_truncated_on_unclean_open(make_log, batch, crash):
    """A file extended with zeros (as after a power loss on some filesystems)."""
    log = make_log()
    expected = fill(log, batch, batches=5)
    path = log._segments[-1].path
    crash(log)
    with open(path, "ab") as f:
        f.write(bytes(4096))
    log = make_log()
    assert log.log_end_offset == len(expected)
    assert_whole_log(log, expected)


def payload_middle(log, k: int) -> tuple[str, int, int]:
    """(path, a byte inside the payload, base offset) of the k-th stored batch."""
    path, position, base, size = positions(log)[k]
    return path, position + HEADER_SIZE + (size - HEADER_SIZE) // 2, base


def test_corrupt_batch_in_a_trusted_segment_raises_on_read(make_log, batch):
    log = make_log(segment_bytes=1024)
    expected = fill(log, batch)
    batches = positions(log)
    k = 7
    path, where, base = payload_middle(log, k)
    batch_position = batches[k][1]
    log.close()
    flip_byte(path, where)
    log = make_log(segment_bytes=1024)  # clean shutdown: the segment is trusted
    assert log.log_end_offset == len(expected)
    with pytest.raises(CorruptRecordError) as info:
        log.read(base)
    message = str(info.value)
    assert path in message
    assert f"position {batch_position}" in message
    assert "CRC32C" in message
    # Reads that include the corrupt batch fail; it is never returned as data.
    for start in (base + 1, base + 2, batches[k - 1][2]):
        with pytest.raises(CorruptRecordError):
            log.read(start, max_bytes=1 << 30)
    with pytest.raises(CorruptRecordError):
        log.read_batches(base)
    # The batches around it are still served.
    assert values_of(log.read(0, max_offset=base)) == expected[:base]
    after = batches[k + 1][2]
    assert values_of(log.read(after, max_bytes=1 << 30)) == expected[after:]
    # Still corrupt on the next read: nothing caches it as verified.
    with pytest.raises(CorruptRecordError):
        log.read(base)


def test_corrupt_header_field_under_the_crc_is_detected(make_log, batch):
    log = make_log()
    expected = fill(log, batch, batches=5)
    path, position, base, _ = positions(log)[2]
    log.close()
    flip_byte(path, position + 40)  # inside max_timestamp, covered by the CRC
    log = make_log()
    assert values_of(log.read(0, max_offset=base)) == expected[:base]
    with pytest.raises(CorruptRecordError):
        log.read(base)


def test_corrupt_batch_in_the_unflushed_tail_is_truncated_by_recovery(make_log, batch, crash):
    log = make_log(segment_bytes=4096)
    expected = fill(log, batch)
    batches = positions(log)
    active = log._segments[-1].path
    in_active = [i for i, b in enumerate(batches) if b[0] == active]
    k = in_active[1]
    path, where, base = payload_middle(log, k)
    crash(log)
    flip_byte(path, where)
    log = make_log(segment_bytes=4096)
    assert log.log_end_offset == base
    assert os.path.getsize(path) == batches[k][1]
    assert_whole_log(log, expected[:base])
    assert log.append(batch(["after"])) == (base, base)


def test_corruption_in_an_older_unflushed_segment_drops_everything_after_it(make_log, batch, crash):
    log = make_log(segment_bytes=2048)
    expected = fill(log, batch)
    assert log.segment_count >= 4
    second = log._segments[1]
    batches = positions(log)
    in_second = [i for i, b in enumerate(batches) if b[0] == second.path]
    assert len(in_second) >= 2
    k = in_second[1]
    path, where, base = payload_middle(log, k)
    crash(log)
    flip_byte(path, where)
    log = make_log(segment_bytes=2048)
    assert log.segment_count == 2
    assert log.log_end_offset == base
    assert sorted(n for n in os.listdir(log.directory) if n.endswith(".log")) == [
        f"{0:020d}.log",
        f"{second.base_offset:020d}.log",
    ]
    assert_whole_log(log, expected[:base])
    assert log.append(batch(["after"], timestamps=START + base)) == (base, base)
    assert_whole_log(log, [*expected[:base], "after"])


def test_leftover_temporary_files_are_removed_on_open(make_log, batch):
    log = make_log()
    log.append(batch(["a"]))
    log.close()
    names = ["00000000000000000000.log.cleaned", "00000000000000000000.log.truncating", "x.tmp"]
    for name in names:
        with open(os.path.join(log.directory, name), "wb") as f:
            f.write(b"junk")
    log = make_log()
    assert not any(os.path.exists(os.path.join(log.directory, n)) for n in names)
    assert values_of(log.read(0)) == ["a"]


def test_open_creates_the_directory_and_an_empty_log(tmp_path, make_log):
    log = make_log(name="nested/deeper/topic-3")
    assert os.path.isdir(log.directory)
    assert (log.log_start_offset, log.log_end_offset, log.segment_count) == (0, 0, 1)
    log = make_log.reopen(log)
    assert (log.log_start_offset, log.log_end_offset, log.segment_count) == (0, 0, 1)
