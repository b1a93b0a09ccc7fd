"""Giving a server process's free memory back to the system.

A replica process is mostly idle, and what it freed stays with the process unless
something hands it back: Arrow's allocator (mimalloc) keeps freed pages for reuse, and
glibc's heap keeps the holes below its top (the garbage of compiling modules at start,
the buffers of a burst of requests). Both hand them back on request, in well under a
millisecond, so a replica asks after its start and whenever it is at rest.

Measured here (``python -m benchmarks.bench_scale``): a replica after 20,000 records
kept about 4 MB more without this; picking glibc's allocator for Arrow
(``ARROW_DEFAULT_MEMORY_POOL=system``) or Ray's jemalloc (``LD_PRELOAD``) instead did
no better at rest, and setting either for the replica actors through a ``runtime_env``
made their creation more than twice as slow (Ray then starts each worker through the
runtime-env agent), so the allocators stay Ray's and Arrow's defaults.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

import pyarrow as pa


def _load_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None on a C library without it (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _load_malloc_trim()


def release_free_memory() -> None:
    """Return the pages Arrow's pool and the C heap hold free to the system.

    Costs well under a millisecond on an idle process; nothing in use is touched.
    """
    pa.default_memory_pool().release_unused()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
