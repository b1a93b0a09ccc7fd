"""The on-disk batch format: a fixed header followed by a payload, an Arrow IPC stream
or, for a small batch of the record layout, a compact payload.

A stored batch is::

    offset  size  field
    0       8     base_offset            (assigned by the leader; outside the CRC)
    8       4     size                   (bytes of the whole batch, header included)
    12      4     partition_leader_epoch (assigned by the leader; outside the CRC)
    16      1     magic                  (format version, 1)
    17      4     crc                    (CRC32C of bytes 21..size)
    21      2     attributes             (codec bits 0-2, timestamp type bit 3,
                                          transactional bit 4, control bit 5,
                                          commit bit 6, explicit offsets bit 7)
    23      4     last_offset_delta
    27      8     base_timestamp
    35      8     max_timestamp
    43      8     producer_id
    51      2     producer_epoch
    53      4     base_sequence
    57      4     record_count
    61      3     (padding: keeps the payload 8-byte aligned for zero-copy reads)
    64      ...   payload: an Arrow IPC stream (schema, one record batch, end marker),
                  or a compact payload (see below)

The field order and the CRC's coverage follow Kafka's RecordBatch v2, so the leader can
stamp ``base_offset`` and ``partition_leader_epoch`` without recomputing the checksum.
A compacted batch keeps its base offset and ``last_offset_delta`` but holds fewer rows;
it carries the surviving rows' offsets in an extra ``__offset`` column and sets the
explicit-offsets attribute.

Payloads. A large batch's payload is a standard Arrow IPC stream, readable by any Arrow
tool and read zero-copy; per-batch body compression (lz4, zstd) is Arrow's own. Its
framing (the schema message, the batch's flatbuffer, buffer padding) is about a
kilobyte whatever the batch holds, which is nothing next to a full batch but six times
a one-record batch of a 100-byte value (Kafka's whole batch is 170 bytes). So a batch of
the record layout (byte topics, the internal topics, markers) under
:data:`~raystream.log.compact.COMPACT_MAX_BYTES` is stored as a *compact payload*
instead (:mod:`raystream.log.compact`: a columnar encoding with one integer width per
column, decoded back into the same Arrow arrays), about Kafka's size.

Why not a topic's schema stored once per log, with schema-less IPC messages per batch:
that still leaves the record-batch message's ~600 bytes of flatbuffer and padding per
batch, and makes every batch depend on something outside it, where today a batch is
decoded alone wherever it goes (a fetch, a follower's copy, the producer's call).

Which encoding a payload has is its first byte: an Arrow IPC stream starts with the
continuation marker 0xff, a compact payload with :data:`~raystream.log.compact.TAG`. So
every reader that holds only a payload (the leader decoding a produce call, the cleaner,
truncation) decodes either without the header, and batches written before the compact
payload existed (all Arrow IPC streams) read as they always did. The CRC covers the
payload either way, and followers copy batches as bytes, whatever their encoding.

Transactions: a producer's batches inside a transaction set the transactional bit; the
transaction coordinator ends it on every partition with a *marker*, a control batch of
one record carrying the producer's id and epoch. Kafka tells a commit from an abort by
the marker's record key; here the commit bit (6, only meaningful with the control bit)
says it in the header too, so the producer state, which sees headers only (appends,
copied batches, rebuilds), learns the outcome without decoding a payload.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c
import numpy as np
import pyarrow as pa

from raystream.errors import CorruptRecordError
from raystream.log import compact

HEADER = struct.Struct("<qiiBIhiqqqhii3x")
HEADER_SIZE = HEADER.size
CRC_START = 21
MAGIC = 1
_HEAD = struct.Struct("<qiiBI")
"""Bytes 0..21 of a header: the fields the CRC does not cover, and the CRC itself."""
_TAIL = struct.Struct("<hiqqqhii3x")
"""Bytes 21..64 of a header: the fields the CRC covers (it goes on over the payload)."""
_EPOCH = struct.Struct("<i")

CODECS = {None: 0, "none": 0, "uncompressed": 0, "lz4": 3, "zstd": 4}
_CODEC_NAMES = {0: None, 3: "lz4", 4: "zstd"}
ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_COMMIT = 0x40
ATTR_EXPLICIT_OFFSETS = 0x80

OFFSET_COLUMN = "offset"
"""Column every read adds: the record's offset in the partition."""
EXPLICIT_OFFSET_COLUMN = compact.EXPLICIT_OFFSET_COLUMN
"""Column a compacted batch stores its surviving rows' offsets in."""

assert HEADER_SIZE == 64
assert _HEAD.size == CRC_START and _HEAD.size + _TAIL.size == HEADER_SIZE


class BatchHeader(NamedTuple):
    """The metadata of one stored batch; ``last_offset`` and ``next_offset`` are derived."""

    base_offset: int
    size: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        """The offset of the batch's last record (kept by compaction)."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset right after this batch."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> str | None:
        """The Arrow codec of the payload, or None."""
        return _CODEC_NAMES.get(self.attributes & ATTR_CODEC_MASK)

    @property
    def is_transactional(self) -> bool:
        """Whether the batch belongs to a transaction."""
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        """Whether the batch is a transaction marker rather than data."""
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_commit(self) -> bool:
        """Whether a control batch is a commit marker (else an abort marker)."""
        return bool(self.attributes & ATTR_COMMIT)

    @property
    def has_explicit_offsets(self) -> bool:
        """Whether the payload carries its rows' offsets (a compacted batch)."""
        return bool(self.attributes & ATTR_EXPLICIT_OFFSETS)


_new_header = tuple.__new__
"""Builds a BatchHeader from its unpacked fields: what ``_make`` does, without its
per-call overhead (headers are parsed once per batch read)."""


def parse_header(buffer: object, position: int, limit: int, where: str) -> BatchHeader:
    """Parse and sanity-check the header at ``position`` of a segment's bytes.

    Raises:
        CorruptRecordError: the header is truncated, has a foreign magic, or a size that
            does not fit before ``limit``; ``where`` names the segment in the message.
    """
    if position + HEADER_SIZE > limit:
        raise CorruptRecordError(f"{where} position {position}: truncated batch header")
    header = _new_header(BatchHeader, HEADER.unpack_from(buffer, position))
    if header.magic != MAGIC:
        raise CorruptRecordError(f"{where} position {position}: unknown batch magic {header.magic}")
    if header.size < HEADER_SIZE or position + header.size > limit:
        raise CorruptRecordError(
            f"{where} position {position}: batch size {header.size} runs past the segment end"
        )
    if header.record_count < 0 or header.last_offset_delta < 0:
        raise CorruptRecordError(f"{where} position {position}: negative record count")
    return header


def stored_headers(data: pa.Buffer | bytes) -> Iterator[BatchHeader]:
    """The headers of the stored batches laid end to end in ``data`` (copied data).

    Raises:
        CorruptRecordError: a header is malformed.
    """
    buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    position = 0
    size = buffer.size
    while position < size:
        header = parse_header(buffer, position, size, "replicated data")
        yield header
        position += header.size


def verify_crc(buffer: object, position: int, header: BatchHeader, where: str) -> None:
    """Check the batch's CRC32C; a mismatch is never served as data.

    Raises:
        CorruptRecordError: naming the segment, the position and both checksums.
    """
    view = memoryview(buffer)[position + CRC_START : position + header.size]
    actual = crc32c.crc32c(view)
    if actual != header.crc:
        raise CorruptRecordError(
            f"{where} position {position}: CRC32C mismatch "
            f"(stored {header.crc:#010x}, computed {actual:#010x})"
        )


END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"

Piece = pa.Buffer | bytes
"""A part of an encoded batch. A batch goes to disk as its pieces with one ``writev``,
not joined first, so its serialized body is not copied again before the page cache."""


class BatchEncoder:
    """Encodes record batches as stored batches: a header, then an Arrow IPC stream.

    Two steps, so a caller can work out header fields (the time range) between them,
    while the batch's data is still in the CPU cache from serializing it:
    :meth:`payload` serializes, :meth:`seal` puts the header with its CRC32C in front.

    Per distinct schema the schema message is serialized once. An uncompressed batch
    without dictionaries is then one ``RecordBatch.serialize()`` (a single C++ copy of
    its buffers) between the cached schema message and the end marker. A codec or a
    dictionary-encoded column takes a stream writer per batch, which compresses and
    carries the dictionary messages the batch refers to, so that every payload decodes
    on its own.

    Not thread-safe: the owning :class:`~raystream.log.Log` serializes calls.
    """

    def __init__(self) -> None:
        self._schema: pa.Schema | None = None
        self._schema_message = b""
        self._has_dictionaries = False
        self._record_layout = False

    def payload(self, batch: pa.RecordBatch, compression: str | None) -> list[Piece]:
        """The pieces of ``batch``'s payload: compact when it is a small batch of the
        record layout (see :mod:`raystream.log.compact`), else its Arrow IPC stream
        (schema, batch, end of stream)."""
        schema = batch.schema
        if self._schema is None or not (
            schema is self._schema or schema.equals(self._schema, check_metadata=True)
        ):
            self._schema_message = schema.serialize().to_pybytes()
            self._has_dictionaries = any(_has_dictionaries(field.type) for field in schema)
            self._record_layout = compact.is_record_layout(schema)
            self._schema = schema
        if self._record_layout and compact.eligible(batch):
            return compact.encode(batch, compression)
        if compression is None and not self._has_dictionaries:
            return [self._schema_message, batch.serialize(), END_OF_STREAM]
        sink = pa.BufferOutputStream()
        options = pa.ipc.IpcWriteOptions(compression=compression)
        with pa.ipc.new_stream(sink, schema, options=options) as writer:
            writer.write_batch(batch)
        return [sink.getvalue()]

    @staticmethod
    def seal(
        payload: list[Piece],
        *,
        base_offset: int,
        partition_leader_epoch: int,
        attributes: int,
        last_offset_delta: int,
        base_timestamp: int,
        max_timestamp: int,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        record_count: int,
    ) -> tuple[list[Piece], BatchHeader]:
        """The stored batch's pieces (header, then ``payload``) and its header.

        The CRC32C runs over the covered header fields and then the payload pieces as
        they are, so no piece is copied to checksum it.
        """
        covered = _TAIL.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
        )
        crc = crc32c.crc32c(covered)
        for piece in payload:
            crc = crc32c.crc32c(piece, value=crc)
        size = HEADER_SIZE + payload_size(payload)
        header = BatchHeader(
            base_offset,
            size,
            partition_leader_epoch,
            MAGIC,
            crc,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
        )
        head = _HEAD.pack(base_offset, size, partition_leader_epoch, MAGIC, crc) + covered
        return [head, *payload], header


def _has_dictionaries(data_type: pa.DataType) -> bool:
    """Whether a type is, or nests, a dictionary type."""
    if pa.types.is_dictionary(data_type):
        return True
    return any(_has_dictionaries(data_type.field(i).type) for i in range(data_type.num_fields))


def payload_size(pieces: list[Piece]) -> int:
    """Total bytes of encoded pieces."""
    return sum(map(len, pieces))


class PayloadDecoder:
    """Decodes payloads into record batches, parsing each distinct schema once.

    Batches of one topic share a schema, so caching the parsed schema by its bytes makes
    decoding a batch one zero-copy ``read_record_batch`` call.
    """

    def __init__(self, capacity: int = 64) -> None:
        self._schemas: dict[bytes, tuple[pa.Schema, bool]] = {}
        self._capacity = capacity

    def decode(self, payload: pa.Buffer) -> pa.RecordBatch:
        """The record batch in ``payload`` (zero-copy: it references ``payload``)."""
        return self.decode_with_schema(payload)[1]

    def decode_produced(self, payload: pa.Buffer) -> pa.RecordBatch | compact.CompactPayload:
        """A produce request's payload for the leader's append: a small compact one as
        it came (see :func:`~raystream.log.compact.summarize`), else its record batch."""
        if payload.size and memoryview(payload)[0] == compact.TAG:
            produced = compact.summarize(payload)
            if produced is not None:
                return produced
        return self.decode(payload)

    def decode_with_schema(self, payload: pa.Buffer) -> tuple[pa.Schema, pa.RecordBatch]:
        """The batch and its cached schema object (identical objects for equal schemas)."""
        return self.decode_at(payload, 0, payload.size)

    def decode_at(
        self, buffer: pa.Buffer, start: int, end: int
    ) -> tuple[pa.Schema, pa.RecordBatch]:
        """:meth:`decode_with_schema` of the payload at ``buffer[start:end]``, without
        cutting it out first (a read decodes every batch of a segment this way).

        The payload's first byte tells its encoding: 0xff starts an Arrow IPC stream,
        :data:`~raystream.log.compact.TAG` a compact payload.
        """
        view = memoryview(buffer)
        if end > start and view[start] == compact.TAG:
            return compact.decode(buffer, start, end)
        (metadata_size,) = _EPOCH.unpack_from(buffer, start + 4)
        schema_end = start + 8 + metadata_size
        # memoryview and slice(): a third of the cost of Buffer's [a:b] per batch.
        key = view[start:schema_end].tobytes()
        cached = self._schemas.get(key)
        if cached is None:
            schema = pa.ipc.read_schema(pa.py_buffer(key))
            cached = schema, any(_has_dictionaries(field.type) for field in schema)
            if len(self._schemas) >= self._capacity:
                self._schemas.clear()
            self._schemas[key] = cached
        schema, has_dictionaries = cached
        if has_dictionaries:
            # Dictionary messages sit between the schema and the batch.
            return schema, pa.ipc.open_stream(buffer.slice(start, end - start)).read_next_batch()
        return schema, pa.ipc.read_record_batch(buffer.slice(schema_end, end - schema_end), schema)


def batch_offsets(header: BatchHeader, batch: pa.RecordBatch) -> np.ndarray:
    """The offsets of the rows of a decoded batch (int64)."""
    if header.has_explicit_offsets:
        column = batch.column(batch.schema.get_field_index(EXPLICIT_OFFSET_COLUMN))
        return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return np.arange(header.base_offset, header.base_offset + batch.num_rows, dtype=np.int64)


def user_columns(header: BatchHeader, batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch without the storage-internal offsets column."""
    if header.has_explicit_offsets:
        return batch.drop_columns([EXPLICIT_OFFSET_COLUMN])
    return batch


def rewrite_batch(
    encoder: BatchEncoder,
    header: BatchHeader,
    batch: pa.RecordBatch,
    offsets: np.ndarray,
    keep: np.ndarray,
    last_offset_delta: int,
) -> tuple[list[Piece], BatchHeader]:
    """Re-encode the kept rows of a stored batch, preserving its metadata and offsets.

    Used by compaction (which keeps ``last_offset_delta``, so the batch still ends
    where it did) and by truncation inside a batch (which shortens it). When the kept
    rows are no longer consecutive from the base offset, their offsets are stored in
    the explicit offsets column.

    Args:
        encoder: the encoder to use (one per caller, reused across its batches).
        header: the original batch's header.
        batch: the decoded original batch, storage columns included.
        offsets: the offsets of ``batch``'s rows.
        keep: boolean mask of rows to keep (at least one True).
        last_offset_delta: the new batch's last offset minus its base offset.

    Returns:
        The new batch's pieces (header first) and its header.
    """
    data = user_columns(header, batch).filter(pa.array(keep))
    kept = offsets[keep]
    attributes = header.attributes & ~ATTR_EXPLICIT_OFFSETS
    if kept[0] != header.base_offset or kept[-1] - kept[0] + 1 != len(kept):
        data = data.append_column(EXPLICIT_OFFSET_COLUMN, pa.array(kept, pa.int64()))
        attributes |= ATTR_EXPLICIT_OFFSETS
    return encoder.seal(
        encoder.payload(data, header.compression),
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        record_count=len(kept),
    )
