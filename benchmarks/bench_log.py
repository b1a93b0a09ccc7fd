"""Storage engine benchmark: the Log against raw Arrow IPC on the same disk.

Appends and reads N 100-byte records in batches of 1,000 through :class:`raystream.log.Log`
and writes/reads the same batches as one plain Arrow IPC stream file (the ceiling: no
headers, checksums, indexes or offsets). Then fills a log to a few GB and measures
append and read again at its end and start, to show that speed does not depend on how
much the log holds.

Run:  python -m benchmarks.bench_log [--records 10000000] [--big-gb 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from raystream.log import Log, LogConfig

VALUE_BYTES = 100
BATCH = 1000


def make_batch(value_bytes: int = VALUE_BYTES, rows: int = BATCH) -> pa.RecordBatch:
    """A batch of ``rows`` records: 100-byte values and int64 ms timestamps."""
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, size=rows * value_bytes, dtype=np.uint8).tobytes()
    offsets = pa.array(np.arange(0, (rows + 1) * value_bytes, value_bytes, dtype=np.int32))
    values = pa.BinaryArray.from_buffers(pa.binary(), rows, [None, offsets.buffers()[1], pa.py_buffer(data)])
    timestamps = pa.array(np.full(rows, 1_700_000_000_000, dtype=np.int64))
    return pa.record_batch({"value": values, "timestamp": timestamps})


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def raw_ipc(path: str, batch: pa.RecordBatch, batches: int) -> tuple[float, float]:
    """Seconds to write, then to read (memory-mapped), ``batches`` copies as one IPC stream."""

    def write() -> None:
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, batch.schema) as writer:
            for _ in range(batches):
                writer.write_batch(batch)

    def read() -> None:
        with pa.memory_map(path) as source:
            table = pa.ipc.open_stream(source).read_all()
            assert table.num_rows == batches * batch.num_rows

    return timed(write), timed(read)


def log_append(log: Log, batch: pa.RecordBatch, batches: int, flush_each: bool = False) -> float:
    def run() -> None:
        for _ in range(batches):
            log.append(batch)
            if flush_each:
                log.flush()

    return timed(run)


def log_read(log: Log, start: int, records: int) -> float:
    def run() -> None:
        offset, end = start, start + records
        while offset < end:
            table = log.read(offset, max_bytes=16 << 20, max_offset=end)
            offset += table.num_rows

    return timed(run)


def rate(records: int, seconds: float) -> tuple[float, float]:
    return records / seconds, records * VALUE_BYTES / seconds / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--big-gb", type=float, default=5.0, help="log size for the size-independence check (0 skips)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="raystream-bench-", dir=args.dir)
    batch = make_batch()
    batches = args.records // BATCH
    records = batches * BATCH
    rows: list[tuple[str, float, float, float | None]] = []
    try:
        raw_write, raw_read = raw_ipc(os.path.join(root, "raw.arrows"), batch, batches)
        raw_write_rps, _ = rate(records, raw_write)
        raw_read_rps, _ = rate(records, raw_read)
        rows.append(("raw Arrow IPC write", *rate(records, raw_write), None))
        rows.append(("raw Arrow IPC read (mmap)", *rate(records, raw_read), None))
        os.unlink(os.path.join(root, "raw.arrows"))

        log = Log.open(os.path.join(root, "log"), LogConfig())
        seconds = log_append(log, batch, batches)
        rows.append(("Log.append", *rate(records, seconds), rate(records, seconds)[0] / raw_write_rps))
        flush_seconds = timed(log.flush)
        total = seconds + flush_seconds
        rows.append(("Log.append + flush at end", *rate(records, total), rate(records, total)[0] / raw_write_rps))
        seconds = log_read(log, 0, records)
        rows.append(("Log.read (same process)", *rate(records, seconds), rate(records, seconds)[0] / raw_read_rps))
        log.close()
        log = Log.open(os.path.join(root, "log"), LogConfig())
        seconds = log_read(log, 0, records)
        rows.append(("Log.read after reopen (CRC-checked)", *rate(records, seconds), rate(records, seconds)[0] / raw_read_rps))
        log.delete()

        fsync_batches = min(batches, 2000)
        log = Log.open(os.path.join(root, "log-fsync"), LogConfig())
        seconds = log_append(log, batch, fsync_batches, flush_each=True)
        rows.append((f"Log.append + flush every batch ({fsync_batches} batches)", *rate(fsync_batches * BATCH, seconds), None))
        log.delete()

        big_rows: list[tuple[str, float, float]] = []
        if args.big_gb > 0:
            log = Log.open(os.path.join(root, "log-big"), LogConfig())
            probe = min(batches, 1000)
            empty_append = log_append(log, batch, probe)
            empty_read = log_read(log, 0, probe * BATCH)
            target = int(args.big_gb * 1e9)
            while log.size_bytes < target:
                log_append(log, batch, 1000)
            end = log.log_end_offset
            full_append = log_append(log, batch, probe)
            full_read_tail = log_read(log, end, probe * BATCH)
            full_read_head = log_read(log, probe * BATCH, probe * BATCH)
            big_rows = [
                ("append, empty log", *rate(probe * BATCH, empty_append)),
                (f"append, {log.size_bytes / 1e9:.1f} GB log", *rate(probe * BATCH, full_append)),
                ("read, empty log", *rate(probe * BATCH, empty_read)),
                (f"read at end, {log.size_bytes / 1e9:.1f} GB log", *rate(probe * BATCH, full_read_tail)),
                (f"read at start, {log.size_bytes / 1e9:.1f} GB log", *rate(probe * BATCH, full_read_head)),
            ]
            log.delete()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, pyarrow {pa.__version__}")
    print(f"{records:,} records of {VALUE_BYTES} bytes in batches of {BATCH}\n")
    print(f"{'operation':<52} {'records/s':>14} {'MB/s':>10} {'vs raw IPC':>11}")
    for name, rps, mbps, ratio in rows:
        shown = f"{ratio:>10.0%}" if ratio is not None else f"{'':>10}"
        print(f"{name:<52} {rps:>14,.0f} {mbps:>10,.0f} {shown}")
    if big_rows:
        print(f"\n{'size independence':<52} {'records/s':>14} {'MB/s':>10}")
        for name, rps, mbps in big_rows:
            print(f"{name:<52} {rps:>14,.0f} {mbps:>10,.0f}")


if __name__ == "__main__":
    main()
