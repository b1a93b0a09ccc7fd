"""Log compaction: keep the latest record per key, as Kafka's log cleaner does.

The cleaner works on closed segments only. It first finds, for every non-null key in
those segments, the offset of its latest record (one Arrow group-by, no per-record
Python). Then it rewrites each segment keeping a row when it is that latest record, has
a null key, and is not a tombstone past the delete horizon. Surviving rows keep their
offsets and their batch's metadata; a segment with nothing to drop is left untouched.

Transactions, as Kafka's cleaner handles them: the caller passes only segments below
the last stable offset, so a record of a transaction still open never counts as a
key's latest; and batches of aborted transactions (the ``skip`` predicate, built from
the partition's aborted-transaction index) are dropped and never count either. Else an
aborted write could stand as a key's latest and take the committed record it was
meant to replace with it: in ``__consumer_offsets`` a group would lose its committed
offset to an aborted ``send_offsets_to_transaction``. Markers stay.

Example:
    offsets 0..4 with keys a, b, a, c, b and values 1, 2, 3, None, 5 (closed segments),
    horizon in the future: the latest offsets are a@2, c@3, b@4, so 2, 3, 4 survive
    (c's tombstone stays until it is older than ``delete.retention.ms``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from raystream.log.batch import (
    HEADER_SIZE,
    BatchEncoder,
    BatchHeader,
    batch_offsets,
    payload_size,
    rewrite_batch,
)
from raystream.log.segment import LogSegment

if TYPE_CHECKING:
    from raystream.log.log import Log

KEY_COLUMN = "key"
VALUE_COLUMN = "value"


@dataclass
class CleanerStats:
    """What one compaction pass did."""

    segments_rewritten: int = 0
    segments_deleted: int = 0
    records_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


Skip = Callable[[BatchHeader], bool]


def clean(
    log: Log, segments: list[LogSegment], delete_horizon_ms: int, skip: Skip | None = None
) -> CleanerStats:
    """Compact ``segments`` (closed segments of ``log``, oldest first).

    Args:
        log: the owning log, which swaps rewritten segments in under its lock.
        segments: the closed segments to compact (all below the last stable offset).
        delete_horizon_ms: tombstones in batches whose max timestamp is older go.
        skip: true for the batches of aborted transactions, which go entirely.
    """
    stats = CleanerStats()
    if not segments:
        return stats
    decoder = log._decoder
    latest = _latest_offsets(segments, decoder, skip)
    for segment in segments:
        size = segment.size
        result = _rewrite(segment, decoder, latest, delete_horizon_ms, skip)
        if result is None:
            continue
        path, removed, new_size = result
        if log._swap_cleaned(segment, size, path):
            stats.records_removed += removed
            stats.bytes_before += size
            stats.bytes_after += new_size
            if path is None:
                stats.segments_deleted += 1
            else:
                stats.segments_rewritten += 1
    return stats


def _batches(segment: LogSegment, decoder):
    buffer = segment.view()
    for position, header in segment.headers(0):
        segment.check(position, header, buffer)
        payload = buffer.slice(position + HEADER_SIZE, header.size - HEADER_SIZE)
        yield position, header, decoder.decode(payload)


def _latest_offsets(segments: list[LogSegment], decoder, skip: Skip | None) -> np.ndarray:
    """Sorted offsets of the latest record of each non-null key (aborted ones aside)."""
    keys: list[pa.Array] = []
    offsets: list[np.ndarray] = []
    for segment in segments:
        for _, header, batch in _batches(segment, decoder):
            index = batch.schema.get_field_index(KEY_COLUMN)
            if index < 0 or header.is_control or (skip is not None and skip(header)):
                continue
            keys.append(batch.column(index))
            offsets.append(batch_offsets(header, batch))
    if not keys:
        return np.empty(0, dtype=np.int64)
    table = pa.table({"k": pa.chunked_array(keys), "o": np.concatenate(offsets)})
    table = table.filter(table["k"].is_valid())
    latest = table.group_by("k").aggregate([("o", "max")])["o_max"]
    return np.sort(latest.to_numpy())


def _rewrite(
    segment: LogSegment, decoder, latest: np.ndarray, horizon: int, skip: Skip | None
) -> tuple[str | None, int, int] | None:
    """Write the compacted segment beside the original.

    Returns:
        None when nothing would be dropped; else (path of the new file or None when
        nothing survives, records removed, new size).
    """
    pieces: list[object] = []
    removed = 0
    buffer = segment.view()
    encoder = BatchEncoder()
    for position, header, batch in _batches(segment, decoder):
        rows = batch_offsets(header, batch)
        if skip is not None and skip(header):  # an aborted transaction's batch
            removed += len(rows)
            continue
        keep = np.ones(len(rows), dtype=bool)
        key_index = batch.schema.get_field_index(KEY_COLUMN)
        if key_index >= 0 and not header.is_control and len(rows):
            lo = np.searchsorted(latest, rows[0])
            hi = np.searchsorted(latest, rows[-1], side="right")
            keys = batch.column(key_index)
            keep = np.isin(rows, latest[lo:hi])
            if keys.null_count:
                keep |= ~keys.is_valid().to_numpy(zero_copy_only=False)
        value_index = batch.schema.get_field_index(VALUE_COLUMN)
        if value_index >= 0 and header.max_timestamp < horizon:
            values = batch.column(value_index)
            if values.null_count:
                keep &= values.is_valid().to_numpy(zero_copy_only=False)
        dropped = int(len(rows) - keep.sum())
        if dropped == 0:
            pieces.append(buffer.slice(position, header.size))
            continue
        removed += dropped
        if keep.any():
            encoded, _ = rewrite_batch(encoder, header, batch, rows, keep, header.last_offset_delta)
            pieces.extend(encoded)
    if removed == 0:
        return None
    new_size = payload_size(pieces)
    if new_size == 0:
        return None, removed, 0
    path = segment.path + ".cleaned"
    with open(path, "wb") as out:
        for piece in pieces:
            out.write(piece)
        out.flush()
        os.fsync(out.fileno())
    return path, removed, new_size
