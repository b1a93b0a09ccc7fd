"""Crash tests with real processes: SIGKILL a writer mid-append, then recover its log."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest

from raystream.log import OFFSET_COLUMN

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

WRITER = r"""
import sys, time
import pyarrow as pa
from raystream.log import Log, LogConfig

directory, flush_every, codec = sys.argv[1], int(sys.argv[2]), sys.argv[3]
config = LogConfig(segment_bytes=4096, index_interval_bytes=512)
log = Log.open(directory, config)
print("start", log.log_end_offset, flush=True)
deadline = time.monotonic() + 20
for i in range(200_000):
    if time.monotonic() > deadline:
        break
    first = log.log_end_offset
    count = i % 7 + 1
    offsets = range(first, first + count)
    text = [f"row-{o}" for o in offsets]
    batch = pa.record_batch({"value": pa.array(offsets, pa.int64()), "text": text})
    log.append(batch, compression=None if codec == "none" else codec)
    if (i + 1) % flush_every == 0:
        log.flush()
        print("flushed", log.log_end_offset - 1, flush=True)
print("done", flush=True)
"""


def run_and_kill(directory: str, flush_every: int, codec: str, reports: int) -> tuple[int, int]:
    """Run the writer until it reported ``reports`` flushes, SIGKILL it.

    Returns:
        (the log end offset it started from, the last offset it reported flushed).
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, directory, str(flush_every), codec],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    start = None
    flushed = -1
    seen = 0
    deadline = time.monotonic() + 60
    try:
        while seen < reports:
            assert time.monotonic() < deadline, "writer made no progress"
            if not selector.select(timeout=1):
                continue
            line = proc.stdout.readline()
            assert line, f"writer exited early: {proc.wait()} {proc.stderr.read()}"
            kind, *rest = line.split()
            assert kind != "done", "writer finished before it was killed"
            if kind == "start":
                start = int(rest[0])
            elif kind == "flushed":
                flushed = int(rest[0])
                seen += 1
    finally:
        proc.send_signal(signal.SIGKILL)
        remaining, errors = proc.communicate(timeout=30)
        selector.close()
    assert proc.returncode == -signal.SIGKILL, errors
    # Flushes reported after we stopped listening (before the kill) count too.
    for line in remaining.splitlines():
        kind, *rest = line.split()
        if kind == "flushed":
            flushed = int(rest[0])
    assert start is not None
    return start, flushed


def check_intact(log) -> None:
    """Every record 0..log end is present once, in order, with value == offset."""
    position = log.log_start_offset
    while position < log.log_end_offset:
        table = log.read(position, max_bytes=1 << 22)
        offsets = table.column(OFFSET_COLUMN).to_numpy()
        assert len(offsets) > 0
        assert offsets[0] == position
        assert np.array_equal(offsets, np.arange(position, position + len(offsets)))
        assert np.array_equal(table.column("value").to_numpy(), offsets)
        assert table.column("text").to_pylist() == [f"row-{o}" for o in offsets]
        position = int(offsets[-1]) + 1


@pytest.mark.parametrize(("flush_every", "codec"), [(1, "none"), (4, "zstd")])
def test_sigkill_mid_append_loses_no_flushed_record(make_log, crash, flush_every, codec):
    directory = None
    expected_start = 0
    for _ in range(2):
        log = make_log(name="crashing", segment_bytes=4096, index_interval_bytes=512)
        directory = log.directory
        expected_start = log.log_end_offset
        crash(log)  # leave no clean-shutdown marker: the writer recovers it
        start, flushed = run_and_kill(directory, flush_every, codec, reports=15)
        assert start == expected_start
        assert flushed >= start
        log = make_log(name="crashing", segment_bytes=4096, index_interval_bytes=512)
        assert log.log_end_offset > flushed
        assert log.segment_count > 1
        check_intact(log)
        crash(log)
    log = make_log(name="crashing", segment_bytes=4096, index_interval_bytes=512)
    end = log.log_end_offset
    batch = pa.record_batch(
        {"value": pa.array([end, end + 1], pa.int64()), "text": [f"row-{end}", f"row-{end + 1}"]}
    )
    assert log.append(batch) == (end, end + 1)
    check_intact(log)
    log.close()
    assert os.path.exists(os.path.join(directory, ".clean-shutdown"))
    log = make_log(name="crashing", segment_bytes=4096, index_interval_bytes=512)
    assert log.log_end_offset == end + 2
    check_intact(log)
