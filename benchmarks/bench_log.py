"""Storage engine benchmark: the Log against raw Arrow IPC on the same disk.

Appends and reads N 100-byte records in batches of 1,000 through :class:`raystream.log.Log`
and writes/reads the same batches as one plain Arrow IPC stream file (the ceiling: no
headers, checksums, indexes or offsets; uncompressed, as the log stores these batches),
next to the bound of any checksummed log (each batch serialized, CRC32C'd and written,
nothing else), and copies the log as a follower does (``read_raw`` chunks into
``append_raw``). Write rounds of the ceiling, the bound and the log alternate; every
figure is the best of the rounds, with elapsed time and, for writes, the thread's CPU
time (on a shared machine the latter is the steadier of the two). Then fills a log to a
few GB and measures append and read again at its end and start, to show that speed does
not depend on how much the log holds.

Run:  python -m benchmarks.bench_log [--records 10000000] [--big-gb 5] [--rounds 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import crc32c
import numpy as np
import pyarrow as pa

from benchmarks import harness, page_cache
from raystream.log import Log, LogConfig
from raystream.log.batch import HEADER_SIZE, BatchEncoder

VALUE_BYTES = 100
BATCH = 1000
COPY_CHUNK_BYTES = 8 << 20
"""What a follower fetches at a time (the replica's replica.fetch.max.bytes)."""


def make_batch(value_bytes: int = VALUE_BYTES, rows: int = BATCH) -> pa.RecordBatch:
    """A batch of ``rows`` records: 100-byte values and int64 ms timestamps."""
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, size=rows * value_bytes, dtype=np.uint8).tobytes()
    offsets = pa.array(np.arange(0, (rows + 1) * value_bytes, value_bytes, dtype=np.int32))
    values = pa.BinaryArray.from_buffers(
        pa.binary(), rows, [None, offsets.buffers()[1], pa.py_buffer(data)]
    )
    timestamps = pa.array(np.full(rows, 1_700_000_000_000, dtype=np.int64))
    return pa.record_batch({"value": values, "timestamp": timestamps})


class Timing(NamedTuple):
    """Seconds of one run: elapsed, and CPU time (user + system) of the running thread.

    On a machine shared with other work, elapsed time also counts the time the thread
    waited for a core; CPU time counts only the work done, page-cache copies included.
    """

    wall: float
    cpu: float


def timed(fn: Callable[[], object]) -> Timing:
    wall, cpu = time.perf_counter(), time.thread_time()
    fn()
    return Timing(time.perf_counter() - wall, time.thread_time() - cpu)


def raw_ipc(path: str, batch: pa.RecordBatch, batches: int) -> Timing:
    """Time to write ``batches`` copies of ``batch`` as one Arrow IPC stream file
    (uncompressed, as the log stores batches without a codec)."""

    def write() -> None:
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, batch.schema) as writer:
            for _ in range(batches):
                writer.write_batch(batch)

    return timed(write)


def checksummed_write(path: str, batch: pa.RecordBatch, batches: int) -> Timing:
    """Time to do only what any checksummed log must do per batch: serialize it, take
    the CRC32C of header and bytes, and write both with one ``writev``; no offsets,
    header fields, indexes or locks. The log comes no closer to the ceiling than this."""
    encoder = BatchEncoder()
    head = bytes(HEADER_SIZE)

    def write() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for _ in range(batches):
                pieces = encoder.payload(batch, None)
                crc = crc32c.crc32c(head)
                for piece in pieces:
                    crc = crc32c.crc32c(piece, value=crc)
                os.writev(fd, [head, *pieces])
        finally:
            os.close(fd)

    return timed(write)


def raw_ipc_read(path: str, batch: pa.RecordBatch, batches: int) -> float:
    """Seconds to read the IPC stream file back, memory-mapped, as one Table."""

    def read() -> None:
        with pa.memory_map(path) as source:
            table = pa.ipc.open_stream(source).read_all()
            assert table.num_rows == batches * batch.num_rows

    return timed(read).wall


def log_append(log: Log, batch: pa.RecordBatch, batches: int) -> Timing:
    """Time to append ``batches`` copies of ``batch``."""

    def run() -> None:
        for _ in range(batches):
            log.append(batch)

    return timed(run)


def log_read(log: Log, start: int, records: int) -> float:
    """Seconds to read ``records`` records from ``start`` on, 16 MB per read."""

    def run() -> None:
        offset, end = start, start + records
        while offset < end:
            table = log.read(offset, max_bytes=16 << 20, max_offset=end)
            offset += table.num_rows

    return timed(run).wall


def settle(log: Log) -> None:
    """Flush the log and let the kernel write back every dirty page first."""
    log.flush()
    os.sync()


def best(rounds: int, measure: Callable[[], float]) -> float:
    """The fastest of ``rounds`` runs: the figure least disturbed by other load."""
    return min(measure() for _ in range(rounds))


@dataclass
class LogFigures:
    """One run's figures."""

    records: int
    """Records appended and read (whole batches of :data:`BATCH`)."""
    rows: list[tuple[str, float, float | None, float | None]]
    """(operation, records/s, ratio to the raw Arrow IPC figure, CPU-time ratio)."""
    paired: list[float]
    """Log.append against the raw write, round by round."""
    big_rows: list[tuple[str, float]]
    """The size check: (probe, records/s); empty when skipped."""


def measure(records_wanted: int, big_gb: float, rounds: int, directory: str | None) -> LogFigures:
    """Every figure, in a temporary directory under ``directory`` (default: the temp
    dir), removed afterwards; ``big_gb`` 0 skips the size check."""
    root = tempfile.mkdtemp(prefix="raystream-bench-", dir=directory)
    batch = make_batch()
    batches = records_wanted // BATCH
    records = batches * BATCH
    rows: list[tuple[str, float, float | None, float | None]] = []
    paired: list[float] = []
    big_rows: list[tuple[str, float]] = []
    try:
        raw_path = os.path.join(root, "raw.arrows")
        log_path = os.path.join(root, "log-append")
        copy_path = os.path.join(root, "log-copy")

        def append_round(flush: bool) -> Timing:
            shutil.rmtree(log_path, ignore_errors=True)
            os.sync()
            log = Log.open(log_path, LogConfig())
            timing = log_append(log, batch, batches)
            if flush:
                flushed = timed(log.flush)
                timing = Timing(timing.wall + flushed.wall, timing.cpu + flushed.cpu)
            log.close()
            return timing

        def raw_round() -> Timing:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(raw_path)
            os.sync()
            return raw_ipc(raw_path, batch, batches)

        def bound_round() -> Timing:
            bound_path = os.path.join(root, "checksummed.bin")
            os.sync()
            timing = checksummed_write(bound_path, batch, batches)
            os.unlink(bound_path)
            return timing

        def copy_round() -> Timing:
            # What a follower does: append_raw of the leader's read_raw chunks.
            with Log.open(log_path, LogConfig()) as leader:
                chunks: list[pa.Buffer] = []
                offset = 0
                while offset < records:
                    chunks.extend(leader.read_raw(offset, COPY_CHUNK_BYTES))
                    offset = leader.read_batches(offset, COPY_CHUNK_BYTES)[-1].header.next_offset
                shutil.rmtree(copy_path, ignore_errors=True)
                os.sync()
                follower = Log.open(copy_path, LogConfig())
                timing = timed(lambda: [follower.append_raw(chunk) for chunk in chunks])
                follower.close()
            return timing

        def first_read_after_reopen() -> float:
            # A reopened log has checked no checksum yet: this read checks them all.
            with Log.open(log_path, LogConfig()) as log:
                return log_read(log, 0, records)

        # Interleaved rounds: the page cache's state after gigabytes of writes moves
        # every writer's speed, so the ceiling and the log are measured side by side.
        writes: dict[str, list[Timing]] = {"raw": [], "bound": [], "append": [], "flush": []}
        for _ in range(rounds):
            writes["raw"].append(raw_round())
            writes["bound"].append(bound_round())
            writes["append"].append(append_round(False))
            writes["flush"].append(append_round(True))
        raw_write, bound, append, append_flush = (
            Timing(min(t.wall for t in writes[k]), min(t.cpu for t in writes[k]))
            for k in ("raw", "bound", "append", "flush")
        )
        paired = [
            raw.wall / log.wall for raw, log in zip(writes["raw"], writes["append"], strict=True)
        ]
        raw_read = best(rounds, lambda: raw_ipc_read(raw_path, batch, batches))
        os.unlink(raw_path)
        copies = [copy_round() for _ in range(rounds)]
        copy = Timing(min(t.wall for t in copies), min(t.cpu for t in copies))
        shutil.rmtree(copy_path)
        read_cold = best(rounds, first_read_after_reopen)
        log = Log.open(log_path, LogConfig())
        read = best(rounds, lambda: log_read(log, 0, records))
        log.close()

        fsync_batches = min(batches, 2000)
        log = Log.open(os.path.join(root, "log-fsync"), LogConfig(flush_messages=1))
        fsync_each = log_append(log, batch, fsync_batches).wall
        log.delete()

        def write_row(name: str, timing: Timing) -> tuple[str, float, float, float]:
            ratios = raw_write.wall / timing.wall, raw_write.cpu / timing.cpu
            return name, records / timing.wall, *ratios

        rows = [
            ("raw Arrow IPC write", records / raw_write.wall, None, None),
            write_row("serialize + CRC32C + writev only (the bound)", bound),
            write_row("Log.append", append),
            write_row("Log.append + flush (fsync) at end", append_flush),
            write_row(f"Log.append_raw ({COPY_CHUNK_BYTES >> 20} MB chunks, a follower)", copy),
            (
                f"Log.append, flush.messages=1 ({fsync_batches} batches)",
                fsync_batches * BATCH / fsync_each,
                None,
                None,
            ),
            ("raw Arrow IPC read (memory-mapped)", records / raw_read, None, None),
            ("Log.read", records / read, raw_read / read, None),
            (
                "Log.read, first after reopen (CRC check)",
                records / read_cold,
                raw_read / read_cold,
                None,
            ),
        ]
        if big_gb > 0:
            big_rows = size_independence(root, batch, big_gb, min(batches, 1000), max(rounds, 5))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    return LogFigures(records, rows, paired, big_rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument(
        "--big-gb", type=float, default=5.0, help="log size for the size check (0 skips)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="best of this many runs")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    page_cache.add_option(parser)
    args = parser.parse_args()
    cache_note = page_cache.prepare(args, args.dir)
    figures = measure(args.records, args.big_gb, args.rounds, args.dir)
    records, rows, paired, big_rows = (
        figures.records,
        figures.rows,
        figures.paired,
        figures.big_rows,
    )

    print(f"\n{harness.machine_line()}")
    print(cache_note)
    print(
        f"{records:,} records of {VALUE_BYTES} bytes in batches of {BATCH}, best of {args.rounds}\n"
    )
    header = f"{'operation':<48} {'records/s':>14} {'MB/s':>8} {'vs raw IPC':>11} {'CPU time':>9}"
    print(header)
    for name, rps, ratio, cpu_ratio in rows:
        shown = f"{ratio:>10.0%}" if ratio is not None else ""
        cpu_shown = f"{cpu_ratio:>8.0%}" if cpu_ratio is not None else ""
        print(
            f"{name:<48} {rps:>14,.0f} {rps * VALUE_BYTES / 1e6:>8,.0f} {shown:>11} {cpu_shown:>9}"
        )
    if paired:
        # Each round's ceiling and log run back to back: their ratio shows the spread.
        print(f"Log.append vs raw IPC, round by round: {' '.join(f'{p:.0%}' for p in paired)}")
        print("CPU time: the raw write's CPU time over the log's (the work, without waits)")
    if big_rows:
        print(f"\n{'size independence':<48} {'records/s':>14} {'MB/s':>8}")
        for name, rps in big_rows:
            print(f"{name:<48} {rps:>14,.0f} {rps * VALUE_BYTES / 1e6:>8,.0f}")


def size_independence(
    root: str, batch: pa.RecordBatch, big_gb: float, probe: int, rounds: int
) -> list[tuple[str, float]]:
    """Append and read speed on an empty log and on a log of ``big_gb``, measured in
    alternating rounds at the same moment (the machine's page cache state after writing
    gigabytes moves every writer's speed, so only side-by-side figures compare)."""
    big = Log.open(os.path.join(root, "log-big"), LogConfig())
    while big.size_bytes < big_gb * 1e9:
        log_append(big, batch, 1000)
    empty = Log.open(os.path.join(root, "log-empty"), LogConfig())
    probe_records = probe * BATCH
    raw_dir = os.path.join(root, "raw-probes")
    os.makedirs(raw_dir)
    counter = iter(range(1_000_000))
    figures: dict[str, list[float]] = {"empty": [], "big": [], "raw": []}
    for _ in range(rounds):
        settle(empty)
        figures["empty"].append(log_append(empty, batch, probe).wall)
        settle(big)
        figures["big"].append(log_append(big, batch, probe).wall)
        os.sync()
        path = os.path.join(raw_dir, f"{next(counter)}.arrows")
        figures["raw"].append(raw_ipc(path, batch, probe).wall)
    end = big.log_end_offset - probe_records
    size = f"{big.size_bytes / 1e9:.1f} GB log"
    rows = [
        ("append, empty log", probe_records / min(figures["empty"])),
        (f"append, {size}", probe_records / min(figures["big"])),
        ("raw Arrow IPC write, new file, same moment", probe_records / min(figures["raw"])),
        (
            "read, empty log",
            probe_records / best(rounds, lambda: log_read(empty, 0, probe_records)),
        ),
        (
            f"read at the end, {size}",
            probe_records / best(rounds, lambda: log_read(big, end, probe_records)),
        ),
        (
            f"read at the start, {size}",
            probe_records / best(rounds, lambda: log_read(big, 0, probe_records)),
        ),
    ]
    big.delete()
    empty.delete()
    return rows


if __name__ == "__main__":
    main()
