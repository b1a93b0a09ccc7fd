"""``--warm-page-cache``: time on a machine whose memory has been in use, like a server's.

On a fresh virtual machine the hypervisor backs guest memory lazily, and gives back
memory the guest frees: the first write into a page nobody has touched costs a fault on
the host. Measured on the 2-core / 24 GiB VM of 2026-11-25: 1 MB ``writev`` calls into a
new file ran at 411 MB/s (2.4 ms each) while the kernel was handing out never-touched
free pages, and at 4.6-6.2 GB/s (0.17 ms) once the page cache filled the memory and new
writes reused pages the cache gave up. Every figure that writes or allocates (appends,
produce calls, Ray's object store) then measures the hypervisor, and moves by 2x from
run to run with how much memory is still untouched, for raystream and peers alike.

A broker that has been up for a while runs with its page cache full. This option makes
a fresh VM look like one: before anything is timed it writes a ballast file that fills
the free memory (less a reserve) with page cache, and keeps it until the benchmark
exits, so the kernel reclaims those backed pages for the benchmark's own writes.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import shutil
import tempfile
import time

import psutil

#: Free memory left for the benchmark to allocate before the kernel reclaims ballast.
RESERVE_BYTES = 1 << 30

#: Disk space the ballast leaves free for the benchmark's own data.
DISK_RESERVE_BYTES = 12 << 30

_CHUNK = bytes(16 << 20)


def add_option(parser: argparse.ArgumentParser) -> None:
    """Give a benchmark's parser the ``--warm-page-cache`` flag."""
    parser.add_argument(
        "--warm-page-cache",
        action="store_true",
        help="fill free memory with page cache first (see benchmarks/page_cache.py)",
    )


def prepare(args: argparse.Namespace, directory: str | None = None) -> str:
    """Write the ballast if ``args.warm_page_cache``; one line saying what was done.

    The file lives in ``directory`` (default: the temp dir, where benchmarks write) and
    is removed when the process exits.
    """
    if not args.warm_page_cache:
        return "page cache: as found (no --warm-page-cache)"
    directory = directory or tempfile.gettempdir()
    size = min(
        psutil.virtual_memory().free - RESERVE_BYTES,
        shutil.disk_usage(directory).free - DISK_RESERVE_BYTES,
    )
    if size < len(_CHUNK):
        return "page cache: not warmed (too little free memory or disk)"
    fd, path = tempfile.mkstemp(prefix="raystream-ballast-", dir=directory)
    atexit.register(_remove, path)
    start = time.perf_counter()
    try:
        written = 0
        while written < size:
            written += os.write(fd, _CHUNK)
    finally:
        os.close(fd)
    seconds = time.perf_counter() - start
    return f"page cache: warmed with a {written / 2**30:.1f} GiB ballast file ({seconds:.0f} s)"


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
