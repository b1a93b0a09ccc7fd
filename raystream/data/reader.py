"""Reading one partition's offset range from its leader, in blocks of Arrow data.

:func:`read_range` is the one reader behind ``rs.data.read_topic`` (a Ray Data read
task per partition) and ``rs.spark.read_topic`` (a Ray task per partition next to its
leader): it fetches ``[start, end)`` from the partition's leader in chunks of
``FETCH_MAX_BYTES``, keeping the next fetch in flight while the caller converts the
last one, and hands back tables of about ``block_bytes`` in the topic's stored layout
(key, value, timestamp, headers, offset). Retriable errors (leadership moved, a replica
restarting) refresh the topic's metadata and retry from the same offset, after pauses
that grow while the fetch keeps failing (:class:`~raystream.retry.Backoff`), until
``request_timeout_s`` has passed.

A fetch never returns offsets at or past the high watermark, and ``end`` is at most the
high watermark when the read was planned, so the read is a snapshot. Fetches use the
range's isolation level: ``read_committed`` reads leave out the records of aborted
transactions (and every read leaves out transaction markers), so a fetch can come back
empty in the middle of a range; the read goes on from the offset the leader says it
examined up to. A compacted log may have no records left at the end of the range: a
fetch that comes back empty with nothing further examined ends the read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from raystream.data.offsets import PartitionRange
from raystream.errors import LeaderNotAvailableError, RaystreamError, RaystreamTimeoutError
from raystream.requests import FetchRequest
from raystream.retry import Backoff
from raystream.transport import wait_result

FETCH_MAX_BYTES = 8 << 20
"""Bytes one fetch asks the leader for (at least one whole stored batch comes back)."""
BLOCK_BYTES = 32 << 20
"""About how many bytes of records one block holds: large enough that per-block costs
(a Ray object, a Spark task) do not matter, small enough for a 1 GiB Spark executor."""
REQUEST_TIMEOUT_S = 60.0


def read_range(
    cluster: Any,
    part: PartitionRange,
    block_bytes: int = BLOCK_BYTES,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
) -> Iterator[pa.Table]:
    """Tables of the records at offsets ``[part.start, part.end)`` of one partition.

    Each table (about ``block_bytes``, never empty) has the topic's stored columns plus
    ``offset``, in offset order.

    Raises:
        OffsetOutOfRangeError: retention deleted part of the range since it was planned.
        RaystreamTimeoutError: the leader could not be reached within the timeout.
        RaystreamError: any other error the leader answered.
    """
    offset = part.start
    if offset >= part.end:
        return
    fetch = _Fetch(cluster, part, request_timeout_s)
    pending: list[pa.Table] = []
    size = 0
    ref = fetch.send(offset)
    while True:
        table, after = fetch.receive(ref, offset)
        offsets = table.column("offset").to_numpy()
        keep = int(np.searchsorted(offsets, part.end))  # the rows below the end
        if keep == 0:
            if len(offsets) == 0 and offset < after < part.end:
                offset = after  # markers or aborted records only: read on past them
                ref = fetch.send(offset)
                continue
            break  # compaction removed the rest of the range
        offset = int(offsets[keep - 1]) + 1
        done = keep < len(offsets) or offset >= part.end
        if not done:
            ref = fetch.send(offset)  # the next chunk travels while this one is handled
        table = table.slice(0, keep)
        pending.append(table)
        size += table.nbytes
        if size >= block_bytes or done:
            yield pa.concat_tables(pending) if len(pending) > 1 else pending[0]
            pending, size = [], 0
        if done:
            return
    if pending:
        yield pa.concat_tables(pending) if len(pending) > 1 else pending[0]


class _Fetch:
    """Fetches of one partition from its current leader, retried across leader moves."""

    def __init__(self, cluster: Any, part: PartitionRange, timeout_s: float) -> None:
        self.cluster = cluster
        self.part = part
        self.timeout_s = timeout_s

    def send(self, offset: int) -> Any:
        """Start a fetch at ``offset`` (None when no leader is known right now)."""
        metadata = self.cluster.topic_metadata(self.part.topic).partitions[self.part.partition]
        if metadata.leader_handle is None:
            return None
        return metadata.leader_handle.handle.remote(
            FetchRequest(
                self.part.topic,
                self.part.partition,
                offset,
                FETCH_MAX_BYTES,
                0,
                1,
                self.part.isolation_level,
            )
        )

    def receive(self, ref: Any, offset: int) -> tuple[pa.Table, int]:
        """The records of the fetch ``ref`` sent for ``offset`` and the offset the leader
        examined up to (see :meth:`FetchResponse.decode`), retrying the fetch if needed."""
        deadline = time.monotonic() + self.timeout_s
        name = f"{self.part.topic}-{self.part.partition}"
        backoff = Backoff()
        while True:
            try:
                if ref is None:
                    raise LeaderNotAvailableError(f"{name} has no leader now")
                response = wait_result(ref, self.timeout_s, f"fetch of {name}")
                error = response.error()
            except RaystreamError as failure:
                error = failure
            if error is None:
                return response.decode()
            if not error.retriable:
                raise error
            if time.monotonic() >= deadline:
                raise RaystreamTimeoutError(
                    f"fetch of {name} at offset {offset} did not succeed within "
                    f"{self.timeout_s} s; last error: {error}"
                )
            time.sleep(min(backoff.next_s(), max(deadline - time.monotonic(), 0.0)))
            self.cluster.topic_metadata(self.part.topic, refresh=True)
            ref = self.send(offset)
