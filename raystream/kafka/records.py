"""Kafka record batches (v2) to and from raystream's stored batches, vectorized.

A Kafka client produces record batches v2 (magic 2): a 61-byte header (the field order
raystream's stored header follows, see :mod:`raystream.log.batch`) and then the records,
possibly compressed as a whole with gzip, snappy, lz4 or zstd. Each record is framed by
varints::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint |
    headers (headerKeyLength varint | headerKey | headerValueLength varint | value)*

(varints are zigzag LEB128; a length of -1 is null). :func:`decode_produce` turns the
batches of one partition of a Produce request into Arrow record batches of the topic's
record layout (:mod:`raystream.records`), one :class:`ProducedBatch` per Kafka batch;
:func:`encode_fetch` turns the stored batches a raystream fetch answers with back into
Kafka record batches.

Why one Kafka batch is one produce to the leader: an idempotent producer numbers its
records per partition and the leader deduplicates and orders whole batches by their
first and last sequence (a retry resends the same batch). Splitting or merging batches
would make a retried batch look like a gap or a new batch; one to one keeps the
producer's sequence, epoch and transactional state exactly as Kafka's broker sees them.

Vectorized for large batches, walked in Python for small ones: the vectorized paths cost
300 to 500 us of CPU whatever the count (some forty numpy and Arrow calls), a Python walk
4 to 7 us per record, so batches of up to :data:`_SMALL_BATCH_RECORDS` records (what a
steady producer sends and a caught-up consumer fetches) are read and written by a walk
that gives the same batch and the same bytes (property tests check both), and a plain
run of them goes straight to the stored payload (:func:`compact_run`). Larger batches:
no Python step per record on the common path. Records are chained by their
length prefix, so the start of record i+1 depends on record i; the starts are
*guessed* (records of one batch usually have one size), checked all at once with numpy,
and repaired by shifting the tail at the first mismatch, a few rounds at most. Only a
batch whose record sizes keep changing falls back to walking the length prefixes in
Python (one step per record, still nothing else per record). Every field is then read
for all records at once: the varints of one field with a few numpy operations, keys and
values cut out of the batch by one Arrow ``take``. Encoding builds the varint prefixes
with numpy and joins them with keys and values in one Arrow ``binary_join_element_wise``.
Headers take one vectorized step per header position, not per record.

Typed topics (values are a struct of the topic's Arrow schema) appear to Kafka clients
with a JSON object per value: produced JSON is parsed by Arrow's JSON reader against the
schema (a value that does not fit is refused naming the record and the field), fetched
structs are written as JSON with Arrow string kernels for flat primitive fields.

Transactions on fetch: the leader leaves transaction markers out of every fetch, and a
read_committed fetch also leaves out the batches of aborted transactions (see
:class:`raystream.protocol.FetchResponse`). So a Kafka Fetch answer needs no
aborted-transactions list (send an empty one): there is nothing aborted in it to drop.
What the left-out batches would have told a Kafka client, that its position moves past
them, :func:`encode_fetch` says with one synthetic control batch (a commit marker, which
every client skips) covering the offsets left out after the last batch it sends;
without it a consumer standing at a marker would fetch the same offset forever. Stored
markers that do come through (a leader that sends them) become Kafka control batches
as they are: their key and value already are Kafka's control record.

Pure: no Ray, no clock. Decompression bombs are not capped here (as in Kafka's broker,
the request size bounds the compressed bytes only).
"""

from __future__ import annotations

import array
import base64
import json
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import cramjam
import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from raystream.errors import CorruptRecordError, InvalidRecordError, RaystreamError
from raystream.log import compact
from raystream.log.batch import (
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    PayloadDecoder,
    batch_offsets,
    stored_headers,
    user_columns,
)
from raystream.protocol import FetchResponse
from raystream.records import BYTES_SCHEMA, HEADER_TYPE, HEADERS_TYPE, record_schema

KAFKA_HEADER = struct.Struct(">qiibIhiqqqhii")
"""Kafka's record batch v2 header, base offset to record count (61 bytes)."""
KAFKA_HEADER_SIZE = KAFKA_HEADER.size
_CRC_START = 21
"""The CRC32C covers the batch from the attributes on (as in the stored format)."""
_MAGIC_AT = 16
_MIN_BATCH_LENGTH = KAFKA_HEADER_SIZE - 12
_MIN_RECORD_SIZE = 7
"""Length varint, attributes, timestamp and offset deltas, key and value lengths and
header count: a record is never smaller."""

CODECS = {0: None, 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
"""Kafka's codec numbers (the batch attributes' low three bits) and names."""
_CODEC_IDS = {name: code for code, name in CODECS.items()}
STORED_CODECS = {None: None, "gzip": "zstd", "snappy": "lz4", "lz4": "lz4", "zstd": "zstd"}
"""The storage codec closest to a Kafka codec: raystream stores lz4 or zstd (Arrow's),
so a ratio-minded gzip producer gets zstd and a speed-minded snappy one lz4."""
ATTR_KAFKA_MASK = 0x3F
"""Attribute bits Kafka defines for a batch we send (codec, timestamp type,
transactional, control); bit 6 is Kafka's delete horizon, raystream's commit bit."""

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK = struct.Struct(">i")
_XERIAL_BLOCK_SIZE = 32 << 10
_CONTROL_COMMIT_KEY = struct.pack(">hh", 0, 1)
_CONTROL_VALUE = struct.pack(">hi", 0, 0)
_PAD = 16
"""Zero bytes after the records while parsing, so a varint read never leaves the array
(a varint running into them ends past the batch and is refused)."""
_GUESS_ROUNDS = 8
_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
_SMALL_BATCH_RECORDS = 48
"""Batches of at most this many records are read and written in Python (see
:func:`_walk_records`, :func:`_walk_encode`): a walk costs 4 to 7 us of CPU per record
and the vectorized paths 300 to 500 us whatever the count, so below about 64 records
the walk is cheaper; a coalesced run or a catching-up fetch is often a few dozen."""
_HEADER_WALK_ROWS = 16
"""Below this many records still holding headers, the rest are read in Python (a few
records with very many headers would otherwise take a numpy round per header)."""

Piece = bytes | pa.Buffer
"""A part of the encoded answer; the parts are joined once."""

_DECODER = PayloadDecoder()


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    """One Kafka record batch of a Produce request, as raystream appends it.

    ``records`` is a RecordBatch of the topic's record layout (key, value, timestamp,
    headers; values typed for a typed topic): what :class:`raystream.requests.ProduceRequest`
    takes as ``records`` (or its payload, see :func:`raystream.protocol.encode_records`,
    which is cheaper for Ray to carry). The producer fields go to the request
    as they are.
    """

    records: pa.RecordBatch
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    timestamp_type: int
    """0 CreateTime, 1 LogAppendTime (clients send CreateTime; the topic decides)."""
    compression: str | None
    """The Kafka codec the client compressed the batch with (None: none)."""

    @property
    def record_count(self) -> int:
        """Records in the batch (what the producer's sequence numbers count)."""
        return self.records.num_rows

    @property
    def compression_type(self) -> str | None:
        """The ``compression_type`` to store the batch with (see :data:`STORED_CODECS`)."""
        return STORED_CODECS[self.compression]


# ====================================================================== produce


def decode_produce(
    data: bytes | bytearray | memoryview | pa.Buffer, value_schema: pa.Schema | None = None
) -> list[ProducedBatch]:
    """Decode the record batches of one partition of a Kafka Produce request.

    Each batch's CRC32C is checked and its records decompressed and decoded into the
    topic's record layout (``value_schema`` set: a typed topic, whose values are JSON
    objects checked against it). Kafka's produce v3+ carries exactly one batch; more
    are decoded in order.

    Raises:
        CorruptRecordError: a checksum mismatch, or truncated or malformed bytes (bad
            lengths, varints, compression), naming the batch and what is wrong.
        InvalidRecordError: well-formed but not acceptable: a magic other than 2, a
            control batch, no records, offset deltas out of order, or a value that does
            not fit a typed topic's schema.
    """
    view = memoryview(data).cast("B") if not isinstance(data, pa.Buffer) else memoryview(data)
    size = len(view)
    if size == 0:
        raise InvalidRecordError("produce data holds no record batch")
    batches = []
    position = 0
    while position < size:
        batch, position = _decode_batch(view, position, size, value_schema)
        batches.append(batch)
    return batches


def decode_produce_run(
    payloads: Sequence[bytes | bytearray | memoryview | pa.Buffer],
    value_schema: pa.Schema | None = None,
) -> ProducedBatch:
    """Several produce payloads, each of exactly one batch without a producer id (not
    idempotent, not transactional), as ONE batch of all their records in order.

    The Kafka listener coalesces the produce requests waiting for one partition into
    one append (see :mod:`raystream.kafka.data`): a request of a record or two costs
    the vectorized decode its fixed overhead of numpy calls, which this pays once for
    the whole run. Each batch is checked as :func:`decode_produce` checks it (CRC,
    magic, codec, counts, offset deltas); their records are then decoded in one pass,
    each keeping its batch's base timestamp. The result's producer fields are those of
    no producer; its ``compression`` is the first batch's.

    Raises:
        CorruptRecordError, InvalidRecordError: as :func:`decode_produce`, for any batch
            of the run (the caller decodes them one by one to tell which); also a
            payload that is not exactly one batch, or a batch with a producer id.
    """
    records, count, base_timestamps, offset_deltas, codec = _open_run(payloads)
    batch = _decode_records(
        records,
        count,
        base_timestamps,
        f"run of {len(payloads)} record batches",
        produced=True,
        offset_deltas=offset_deltas,
    )
    if value_schema is not None:
        batch = _typed(batch, value_schema)
    return ProducedBatch(
        records=batch,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        transactional=False,
        timestamp_type=0,
        compression=codec,
    )


def _open_run(
    payloads: Sequence[bytes | bytearray | memoryview | pa.Buffer],
) -> tuple[bytes, int, np.ndarray, np.ndarray, str | None]:
    """(the records of a run's batches joined, how many, each one's base timestamp and
    offset delta within its batch, the first batch's codec), every batch checked as
    :func:`decode_produce_run` says."""
    pieces: list[Any] = []
    counts: list[int] = []
    bases: list[int] = []
    codec: str | None = None
    for index, data in enumerate(payloads):
        view = memoryview(data).cast("B") if not isinstance(data, pa.Buffer) else memoryview(data)
        header, records, end = _open_batch(view, 0, len(view))
        if end != len(view):
            raise InvalidRecordError(f"payload {index} of a run holds more than one batch")
        if header[9] >= 0 or header[5] & ATTR_TRANSACTIONAL:
            raise InvalidRecordError(f"payload {index} of a run has a producer id")
        if index == 0:
            codec = CODECS[header[5] & 0x07]
        pieces.append(records)
        counts.append(header[12])
        bases.append(header[7])
    count = sum(counts)
    starts = np.repeat(np.cumsum([0, *counts[:-1]]), counts)
    base_timestamps = np.repeat(np.array(bases, dtype=np.int64), counts)
    return b"".join(pieces), count, base_timestamps, np.arange(count) - starts, codec


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
COMPACT_RUN_BYTES = 12 << 10
"""The most key and value bytes (plus 64 per record) :func:`compact_run` writes: well
under :data:`~raystream.log.compact.COMPACT_MAX_BYTES`, so the general path would store
the same run compact too."""


def compact_run(
    payloads: Sequence[bytes | bytearray | memoryview | pa.Buffer],
) -> bytes | None:
    """A run of produce payloads (as :func:`decode_produce_run` takes them) straight to
    the stored compact payload that ``encode_records`` of its decoded batch makes (a
    property test checks they are the same bytes), without building Arrow arrays on the
    way; None when the run is not the plain case this writes (compressed, with headers,
    larger than :data:`COMPACT_RUN_BYTES`, or anything amiss), and the caller takes
    :func:`decode_produce_run`, which also names what is wrong.

    The Kafka listener's commonest produce, a steady producer's run of a few small
    records, cost about 0.2 ms of CPU through Arrow (decode, then the compact encoder's
    numpy calls per column) and costs some tens of microseconds this way.
    """
    if sum(len(p) for p in payloads) > COMPACT_RUN_BYTES + KAFKA_HEADER_SIZE * len(payloads):
        return None  # too large for what it writes (without checking and joining 1 MB)
    try:
        records, count, base_timestamps, offset_deltas, codec = _open_run(payloads)
    except RaystreamError:
        return None
    if codec is not None or count > COMPACT_RUN_BYTES // 64:
        return None
    rows = _walk_rows(records, count, base_timestamps, True, offset_deltas)
    if rows is None:
        return None
    keys, values, timestamps, headers = rows
    if any(entries is not None for entries in headers):
        return None
    if not _INT64_MIN <= min(timestamps) <= max(timestamps) <= _INT64_MAX:
        return None  # the general path refuses it
    size = sum(len(k) for k in keys if k is not None) + sum(len(v) for v in values if v)
    if size + 64 * count > COMPACT_RUN_BYTES:
        return None
    return compact.encode_rows(keys, values, timestamps)


def produced_batch_key(
    data: bytes | bytearray | memoryview | pa.Buffer,
) -> tuple[int, int, int] | None:
    """(producer id, codec number, record count) from a produce payload's first batch
    header, without checking it; None if it is too short to have one. What the
    listener groups runs of payloads by before :func:`decode_produce_run` checks them."""
    view = memoryview(data).cast("B") if not isinstance(data, pa.Buffer) else memoryview(data)
    if len(view) < KAFKA_HEADER_SIZE:
        return None
    header = KAFKA_HEADER.unpack_from(view, 0)
    return header[9], header[5] & 0x07, header[12]


def _open_batch(view: memoryview, position: int, size: int) -> tuple[tuple, Any, int]:
    """(the header's fields, the records' bytes decompressed, the batch's end) of the
    batch at ``position``, its header and checksum checked."""
    where = f"record batch at byte {position}"
    if size - position <= _MAGIC_AT:
        raise CorruptRecordError(f"{where}: truncated header ({size - position} bytes)")
    magic = view[position + _MAGIC_AT]
    if magic != 2:
        raise InvalidRecordError(
            f"{where}: message format magic {magic} is not supported; only record batches "
            "v2 (magic 2, Kafka 0.11 and later clients) are"
        )
    if size - position < KAFKA_HEADER_SIZE:
        raise CorruptRecordError(f"{where}: truncated header ({size - position} bytes)")
    header = KAFKA_HEADER.unpack_from(view, position)
    batch_length, crc, attributes = header[1], header[4], header[5]
    last_offset_delta, count = header[6], header[12]
    end = position + 12 + batch_length
    if batch_length < _MIN_BATCH_LENGTH or end > size:
        raise CorruptRecordError(
            f"{where}: batch length {batch_length} does not fit the {size - position} bytes"
        )
    actual = crc32c.crc32c(view[position + _CRC_START : end])
    if actual != crc:
        raise CorruptRecordError(
            f"{where}: CRC32C mismatch (batch says {crc:#010x}, computed {actual:#010x})"
        )
    if attributes & ATTR_CONTROL:
        raise InvalidRecordError(f"{where}: clients may not produce control batches")
    codec = attributes & 0x07
    if codec not in CODECS:
        raise CorruptRecordError(f"{where}: unknown compression codec {codec}")
    if count <= 0:
        raise InvalidRecordError(f"{where}: a produced batch needs records, it has {count}")
    if last_offset_delta != count - 1:
        raise InvalidRecordError(
            f"{where}: last offset delta {last_offset_delta} does not match {count} records"
        )
    records = view[position + KAFKA_HEADER_SIZE : end]
    name = CODECS[codec]
    if name is not None:
        records = _decompress(name, records, where)
    return header, records, end


def _typed(batch: pa.RecordBatch, value_schema: pa.Schema) -> pa.RecordBatch:
    """A decoded batch of the byte layout with its JSON values typed by ``value_schema``."""
    return pa.RecordBatch.from_arrays(
        [batch.column(0), json_to_values(batch.column(1), value_schema), *batch.columns[2:]],
        schema=record_schema(value_schema),
    )


def _decode_batch(
    view: memoryview, position: int, size: int, value_schema: pa.Schema | None
) -> tuple[ProducedBatch, int]:
    header, records, end = _open_batch(view, position, size)
    attributes, base_timestamp, count = header[5], header[7], header[12]
    producer_id, producer_epoch, base_sequence = header[9], header[10], header[11]
    where = f"record batch at byte {position}"
    batch = _decode_records(records, count, base_timestamp, where, produced=True)
    if value_schema is not None:
        batch = _typed(batch, value_schema)
    produced = ProducedBatch(
        records=batch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=bool(attributes & ATTR_TRANSACTIONAL),
        timestamp_type=1 if attributes & ATTR_LOG_APPEND_TIME else 0,
        compression=CODECS[attributes & 0x07],
    )
    return produced, end


# ------------------------------------------------------------------- records


def _decode_records(
    records: Any,
    count: int,
    base_timestamp: int | np.ndarray,
    where: str,
    produced: bool,
    offset_deltas: np.ndarray | None = None,
    small_batch_records: int = _SMALL_BATCH_RECORDS,
) -> pa.RecordBatch:
    """The ``count`` records in ``records`` (uncompressed) as a batch of the byte layout.

    ``base_timestamp``: the batch's, or one per record (a run of batches); a produced
    batch's offset deltas must be ``offset_deltas`` (default: 0, 1, 2, ...). Up to
    ``small_batch_records`` records are read in Python (:func:`_walk_records`).
    """
    size = len(records)
    if count > size // _MIN_RECORD_SIZE:
        raise CorruptRecordError(f"{where}: {count} records cannot fit in {size} bytes")
    if count <= small_batch_records:
        small = _walk_records(records, count, base_timestamp, produced, offset_deltas)
        if small is not None:
            return small
    data = np.empty(size + _PAD, dtype=np.uint8)
    data[:size] = np.frombuffer(records, dtype=np.uint8)
    data[size:] = 0
    starts, lengths, length_sizes = _record_starts(data, size, count, where)
    ends = starts + length_sizes + lengths
    position = starts + length_sizes + 1  # past the attributes byte
    deltas, used = _varints(data, position, size, where, "timestamp delta")
    position += used
    offsets, used = _varints(data, position, size, where, "offset delta")
    position += used
    if produced:
        expected = np.arange(count) if offset_deltas is None else offset_deltas
        if not np.array_equal(offsets, expected):
            bad = int(np.flatnonzero(offsets != expected)[0])
            raise InvalidRecordError(
                f"{where}: record {bad} has offset delta {int(offsets[bad])}, "
                f"not {int(expected[bad])}"
            )
    key_lengths, used = _lengths(data, position, ends, where, "key")
    key_starts = position + used
    position = key_starts + np.maximum(key_lengths, 0)
    value_lengths, used = _lengths(data, position, ends, where, "value")
    value_starts = position + used
    position = value_starts + np.maximum(value_lengths, 0)
    header_counts, used = _lengths(data, position, ends, where, "header count")
    position += used
    buffer = pa.py_buffer(data)
    if header_counts.any():
        if (header_counts < 0).any():
            bad = int(np.flatnonzero(header_counts < 0)[0])
            raise CorruptRecordError(f"{where}: record {bad} has a negative header count")
        headers, position = _decode_headers(data, buffer, position, ends, header_counts, where)
    else:
        headers = pa.nulls(count, HEADERS_TYPE)
    mismatch = np.flatnonzero(position != ends)
    if mismatch.size:
        bad = int(mismatch[0])
        raise CorruptRecordError(
            f"{where}: record {bad}'s fields take {int(position[bad] - starts[bad])} bytes, "
            f"its length says {int(ends[bad] - starts[bad])}"
        )
    timestamps = deltas + base_timestamp
    return pa.RecordBatch.from_arrays(
        [
            _binary(buffer, key_starts, key_lengths),
            _binary(buffer, value_starts, value_lengths),
            pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(timestamps)]),
            headers,
        ],
        schema=BYTES_SCHEMA,
    )


def _walk_records(
    records: Any,
    count: int,
    base_timestamp: int | np.ndarray,
    produced: bool,
    offset_deltas: np.ndarray | None,
) -> pa.RecordBatch | None:
    """A few records read in Python: the same batch :func:`_decode_records` makes, or
    None when anything is amiss (the vectorized path then finds it and names it).

    A steady producer's requests carry a record or two, and the vectorized path's fixed
    cost (some forty numpy calls, about 0.4 ms) is then most of a request's handling;
    this walk takes about 20 us for such a batch. It returns only for a batch that is
    valid in full, so the errors and their messages stay the vectorized path's alone.
    """
    rows = _walk_rows(records, count, base_timestamp, produced, offset_deltas)
    if rows is None:
        return None
    keys, values, timestamps, headers = rows
    has_headers = any(entries is not None for entries in headers)
    return pa.RecordBatch.from_arrays(
        [
            _small_binary(keys),
            _small_binary(values),
            pa.Array.from_buffers(
                pa.int64(), count, [None, pa.py_buffer(array.array("q", timestamps))]
            ),
            pa.array(headers, HEADERS_TYPE) if has_headers else pa.nulls(count, HEADERS_TYPE),
        ],
        schema=BYTES_SCHEMA,
    )


def _walk_rows(
    records: Any,
    count: int,
    base_timestamp: int | np.ndarray,
    produced: bool,
    offset_deltas: np.ndarray | None,
) -> tuple[list[bytes | None], list[bytes | None], list[int], list[Any]] | None:
    """The keys, values, timestamps and headers (None: none) of a few records, read in
    Python; None when anything is amiss (see :func:`_walk_records`)."""
    raw = bytes(records)
    size = len(raw)
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    timestamps: list[int] = []
    headers: list[list[dict[str, Any]] | None] = []
    position = 0

    def varint() -> int:
        nonlocal position
        value = shift = 0
        while shift < 70 and position < size:
            byte = raw[position]
            position += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return (value >> 1) ^ -(value & 1)
            shift += 7
        raise _Amiss

    def piece(end: int) -> bytes | None:
        nonlocal position
        length = varint()
        if length < -1 or position + max(length, 0) > end:
            raise _Amiss
        if length < 0:
            return None
        position += length
        return raw[position - length : position]

    try:
        for index in range(count):
            length = varint()
            end = position + length
            if length < _MIN_RECORD_SIZE - 1 or end > size:
                return None
            position += 1  # attributes
            delta = varint()
            expected = index if offset_deltas is None else int(offset_deltas[index])
            if varint() != expected and produced:
                return None
            keys.append(piece(end))
            values.append(piece(end))
            header_count = varint()
            if header_count < 0:
                return None
            entries = []
            for _ in range(header_count):
                key = piece(end)
                if key is None:
                    return None
                entries.append({"key": key.decode(), "value": piece(end)})
            headers.append(entries or None)
            if position != end:
                return None
            base = base_timestamp if isinstance(base_timestamp, int) else base_timestamp[index]
            timestamps.append(int(base) + delta)
    except (_Amiss, UnicodeDecodeError):
        return None
    if position != size:
        return None
    return keys, values, timestamps, headers


def _small_binary(pieces: list[bytes | None]) -> pa.Array:
    """A binary array of a few pieces (None: null), built from its buffers: ``pa.array``
    takes some 60 us to inspect even two ``bytes`` objects, this about 5."""
    nulls = sum(piece is None for piece in pieces)
    if nulls == len(pieces):
        return pa.nulls(nulls, pa.binary())
    ends = array.array("i", [0])
    total = 0
    for piece in pieces:
        total += len(piece) if piece is not None else 0
        ends.append(total)
    data = pa.py_buffer(b"".join(piece for piece in pieces if piece is not None))
    validity = None
    if nulls:
        valid = np.fromiter((piece is not None for piece in pieces), dtype=bool)
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(), len(pieces), [validity, pa.py_buffer(ends), data], null_count=nulls
    )


class _Amiss(Exception):
    """A small batch's walk met something invalid (see :func:`_walk_records`)."""


def _record_starts(
    data: np.ndarray, size: int, count: int, where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, length, length varint size) of every record, checked to chain exactly
    from byte 0 to the end.

    Guess-and-check: the starts are first guessed at a stride of the first record's
    size, then every record's length is read at its guessed start at once; at the
    first record whose end is not the next guessed start, the rest shift by the
    difference (a batch's records differ in size where a timestamp or offset delta
    needs one more varint byte, so a few rounds settle it). A batch still not settled
    after a few rounds has varying records: its remaining starts are walked in Python.
    """
    steps = np.arange(count, dtype=np.int64)
    starts = steps * _record_size(data, 0, size, where)
    settled = 0
    for _ in range(_GUESS_ROUNDS):
        np.clip(starts, 0, size, out=starts)
        lengths, sizes = _varints(data, starts, size, where, "length", strict=False)
        ends = starts + sizes + lengths
        wrong = np.flatnonzero(ends[:-1] != starts[1:])
        if not wrong.size:
            break
        settled = int(wrong[0])
        stride = _record_size(data, int(ends[settled]), size, where)
        starts[settled + 1 :] = ends[settled] + steps[: count - settled - 1] * stride
    else:
        tail = _walk_starts(data, int(ends[settled]), settled + 1, count, size, where)
        starts[settled + 1 :] = tail
        lengths, sizes = _varints(data, starts, size, where, "length")
        ends = starts + sizes + lengths
    if (lengths < _MIN_RECORD_SIZE - 1).any():
        bad = int(np.flatnonzero(lengths < _MIN_RECORD_SIZE - 1)[0])
        raise CorruptRecordError(f"{where}: record {bad} has length {int(lengths[bad])}")
    if count > 1 and (ends[:-1] != starts[1:]).any():
        bad = int(np.flatnonzero(ends[:-1] != starts[1:])[0])
        raise CorruptRecordError(f"{where}: record {bad + 1} does not start where {bad} ends")
    if ends[-1] != size:
        raise CorruptRecordError(
            f"{where}: {count} records take {int(ends[-1])} bytes, the batch holds {size}"
        )
    return starts, lengths, sizes


def _record_size(data: np.ndarray, position: int, size: int, where: str) -> int:
    """The size of the record at ``position`` by its length prefix (at least 1)."""
    if position < 0 or position >= size:
        return 1
    zigzag, used = _py_varint(data.data, position, size, where)
    return max(used + ((zigzag >> 1) ^ -(zigzag & 1)), 1)


def _walk_starts(
    data: np.ndarray, position: int, first: int, count: int, size: int, where: str
) -> list[int]:
    """The starts of records ``first`` on, walking their length prefixes (the fallback
    of :func:`_record_starts` for batches of varying record sizes)."""
    raw = data.data
    starts = []
    for index in range(first, count):
        if position < 0 or position >= size:
            raise CorruptRecordError(f"{where}: record {index} of {count} starts past the end")
        starts.append(position)
        byte = raw[position]
        if byte < 0x80:
            zigzag, used = byte, 1
        else:
            zigzag, used = _py_varint(raw, position, size, where)
        length = (zigzag >> 1) ^ -(zigzag & 1)
        if length < _MIN_RECORD_SIZE - 1:
            raise CorruptRecordError(f"{where}: record {index} has length {length}")
        position += used + length
    return starts


def _py_varint(raw: memoryview, position: int, size: int, where: str) -> tuple[int, int]:
    """(unsigned LEB128 value, bytes) at ``position``."""
    value = shift = 0
    for used in range(1, 11):
        if position >= size:
            break
        byte = raw[position]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, used
        position += 1
        shift += 7
    raise CorruptRecordError(f"{where}: a varint at byte {position} is malformed")


def _varints(
    data: np.ndarray,
    positions: np.ndarray,
    size: int,
    where: str,
    field: str,
    strict: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(zigzag-decoded values, byte sizes) of the varints at ``positions``, all at once.

    ``positions`` must lie in [0, size]; ``data`` has :data:`_PAD` bytes after ``size``.
    A varint longer than ten bytes, or one ending past ``size``, is refused; unless not
    ``strict`` (guessing), where such a varint's size is made too large to chain.
    """
    first = data[positions].astype(np.int64)
    more = first >= 0x80
    if not more.any():  # all one byte
        if strict and (positions >= size).any():
            bad = int(np.flatnonzero(positions >= size)[0])
            raise CorruptRecordError(f"{where}: record {bad}'s {field} runs past the batch end")
        return (first >> 1) ^ -(first & 1), np.ones(len(positions), dtype=np.int64)
    second = data[positions + 1].astype(np.int64)
    if not (more & (second >= 0x80)).any():  # all one or two bytes
        raw = (first & 0x7F) | ((second & 0x7F) << 7) * more
        sizes = 1 + more
        if strict and (positions + sizes > size).any():
            bad = int(np.flatnonzero(positions + sizes > size)[0])
            raise CorruptRecordError(f"{where}: record {bad}'s {field} runs past the batch end")
        return (raw >> 1) ^ -(raw & 1), sizes
    raw = (first & 0x7F).astype(np.uint64)
    sizes = np.ones(len(positions), dtype=np.int64)
    more = np.flatnonzero(more)
    shift = 7
    while more.size:
        if shift >= 70:
            if not strict:
                sizes[more] = size + 1
                break
            raise CorruptRecordError(f"{where}: a {field} varint runs over ten bytes")
        byte = data[np.minimum(positions[more] + shift // 7, size)]
        raw[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
        sizes[more] += 1
        more = more[byte >= 0x80]
        shift += 7
    if strict and (positions + sizes > size).any():
        bad = int(np.flatnonzero(positions + sizes > size)[0])
        raise CorruptRecordError(f"{where}: record {bad}'s {field} runs past the batch end")
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -((raw & np.uint64(1)).astype(np.int64))
    return values, sizes


def _lengths(
    data: np.ndarray, position: np.ndarray, ends: np.ndarray, where: str, field: str
) -> tuple[np.ndarray, np.ndarray]:
    """The length varints at ``position`` (-1 or more, fitting before each record end)."""
    over = position >= ends
    if over.any():
        bad = int(np.flatnonzero(over)[0])
        raise CorruptRecordError(f"{where}: record {bad} ends before its {field} length")
    lengths, used = _varints(data, position, int(ends[-1]), where, f"{field} length")
    wrong = (lengths < -1) | (position + used + np.maximum(lengths, 0) > ends)
    if wrong.any():
        bad = int(np.flatnonzero(wrong)[0])
        raise CorruptRecordError(
            f"{where}: record {bad}'s {field} length {int(lengths[bad])} does not fit the record"
        )
    return lengths, used


def _binary(buffer: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array of ``buffer[starts[i]:starts[i] + lengths[i]]`` (-1: null).

    The pieces are in order and apart, so an array whose offsets alternate start, end,
    start, ... holds them at its even positions (and the bytes between at its odd ones)
    without a copy; one ``take`` of the even positions gathers them in C++.
    """
    count = len(starts)
    valid = lengths >= 0
    if not valid.any():
        return pa.nulls(count, pa.binary())
    bounds = np.empty(2 * count, dtype=np.int32)
    bounds[0::2] = starts
    bounds[1::2] = starts + np.maximum(lengths, 0)
    spread = pa.Array.from_buffers(pa.binary(), 2 * count - 1, [None, pa.py_buffer(bounds), buffer])
    gathered = spread.take(_even(count))
    if valid.all():
        return gathered
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(), count, [bitmap, *gathered.buffers()[1:]], null_count=int(count - valid.sum())
    )


_EVENS: dict[int, pa.Array] = {}


def _even(count: int) -> pa.Array:
    """``[0, 2, ..., 2 * count - 2]`` as an Arrow array (cached per batch size)."""
    evens = _EVENS.get(count)
    if evens is None:
        if len(_EVENS) > 64:
            _EVENS.clear()
        evens = _EVENS[count] = pa.array(np.arange(0, 2 * count, 2, dtype=np.int32))
    return evens


def _decode_headers(
    data: np.ndarray,
    buffer: pa.Buffer,
    position: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
    where: str,
) -> tuple[pa.Array, np.ndarray]:
    """The headers column and the positions after each record's headers.

    One vectorized step per header position j (the j-th header of every record that
    has more than j), never one per record.
    """
    position = position.copy()
    list_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=list_offsets[1:])
    total = int(list_offsets[-1])
    if total > int(ends[-1]) // 2:
        raise CorruptRecordError(f"{where}: header counts exceed what the records hold")
    key_starts = np.empty(total, np.int64)
    key_lengths = np.empty(total, np.int64)
    value_starts = np.empty(total, np.int64)
    value_lengths = np.empty(total, np.int64)
    rows = np.flatnonzero(counts)
    j = 0
    while rows.size:
        if rows.size < _HEADER_WALK_ROWS <= j:
            fields = (key_starts, key_lengths, value_starts, value_lengths)
            _walk_headers(data, rows, j, position, ends, counts, list_offsets, fields, where)
            break
        at, stop = position[rows], ends[rows]
        lengths, used = _lengths(data, at, stop, where, "header key")
        if (lengths < 0).any():
            raise InvalidRecordError(f"{where}: a header key is null")
        entry = list_offsets[rows] + j
        key_starts[entry] = at + used
        key_lengths[entry] = lengths
        at = at + used + lengths
        lengths, used = _lengths(data, at, stop, where, "header value")
        value_starts[entry] = at + used
        value_lengths[entry] = lengths
        position[rows] = at + used + np.maximum(lengths, 0)
        j += 1
        rows = rows[counts[rows] > j]
    keys = _binary(buffer, key_starts, key_lengths)
    try:
        keys = keys.cast(pa.string())
    except pa.ArrowInvalid:
        raise InvalidRecordError(f"{where}: a header key is not valid UTF-8") from None
    entries = pa.StructArray.from_arrays(
        [keys, _binary(buffer, value_starts, value_lengths)], fields=list(HEADER_TYPE)
    )
    mask = pa.array(counts == 0)
    headers = pa.ListArray.from_arrays(pa.array(list_offsets.astype(np.int32)), entries, mask=mask)
    return headers.cast(HEADERS_TYPE), position


def _walk_headers(
    data: np.ndarray,
    rows: np.ndarray,
    first: int,
    position: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
    list_offsets: np.ndarray,
    fields: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    where: str,
) -> None:
    """Headers ``first`` on of a few ``rows``, read in Python (see :func:`_decode_headers`)."""
    raw = data.data
    for row in rows.tolist():
        at, stop = int(position[row]), int(ends[row])
        for j in range(first, int(counts[row])):
            entry = int(list_offsets[row]) + j
            for part, (starts, lengths) in enumerate((fields[:2], fields[2:])):
                if at >= stop:
                    raise CorruptRecordError(f"{where}: record {row} ends inside header {j}")
                zigzag, used = _py_varint(raw, at, stop, where)
                length = (zigzag >> 1) ^ -(zigzag & 1)
                if length < -1 or at + used + max(length, 0) > stop:
                    raise CorruptRecordError(
                        f"{where}: record {row}'s header {j} length {length} does not fit"
                    )
                if length < 0 and part == 0:
                    raise InvalidRecordError(f"{where}: a header key is null")
                starts[entry] = at + used
                lengths[entry] = length
                at += used + max(length, 0)
        position[row] = at


# ---------------------------------------------------------------- compression


def _decompress(codec: str, records: memoryview, where: str) -> Any:
    """The records section of a batch compressed with ``codec``, uncompressed."""
    try:
        if codec == "gzip":
            return cramjam.gzip.decompress(records)
        if codec == "snappy":
            return _snappy_decompress(records)
        if codec == "lz4":
            return cramjam.lz4.decompress(records)
        return cramjam.zstd.decompress(records)
    except (cramjam.DecompressionError, ValueError, struct.error) as error:
        raise CorruptRecordError(f"{where}: {codec} data does not decompress: {error}") from None


def _snappy_decompress(records: memoryview) -> bytes:
    """Snappy as Kafka clients write it: the Java client's xerial framing (a magic
    header, then blocks each prefixed with its big-endian length), or a bare block
    (librdkafka)."""
    if bytes(records[:8]) != _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(records))
    blocks = []
    position = _XERIAL_HEADER.size
    size = len(records)
    while position < size:
        (length,) = _XERIAL_BLOCK.unpack_from(records, position)
        position += 4
        if length < 0 or position + length > size:
            raise ValueError(f"xerial block length {length} runs past the data")
        blocks.append(bytes(cramjam.snappy.decompress_raw(records[position : position + length])))
        position += length
    return b"".join(blocks)


def _compress(codec: str, records: Piece) -> bytes:
    """``records`` compressed as Kafka clients expect ``codec``."""
    if codec == "gzip":
        return bytes(cramjam.gzip.compress(records))
    if codec == "lz4":  # level 1: LZ4's fast mode, as Kafka's clients (the default is HC)
        return bytes(cramjam.lz4.compress(records, level=1))
    if codec == "zstd":
        return bytes(cramjam.zstd.compress(records))
    pieces = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(records), _XERIAL_BLOCK_SIZE):
        chunk = memoryview(records)[start : start + _XERIAL_BLOCK_SIZE]
        block = bytes(cramjam.snappy.compress_raw(chunk))
        pieces += [_XERIAL_BLOCK.pack(len(block)), block]
    return b"".join(pieces)


# ======================================================================= fetch


def encode_fetch(response: FetchResponse, compression: str | None = None) -> bytes:
    """The Kafka record batches of a successful raystream fetch answer (see
    :func:`encode_stored`; typed values become JSON objects)."""
    return encode_stored(
        response.data,
        fetch_offset=response.fetch_offset,
        limit=response.limit,
        next_offset=response.next_offset,
        compression=compression,
    )


def encode_stored(
    runs: Iterable[bytes | bytearray | memoryview | np.ndarray | pa.Buffer],
    *,
    fetch_offset: int,
    limit: int = -1,
    next_offset: int = -1,
    compression: str | None = None,
) -> bytes:
    """Kafka record batches v2 for the stored batches laid end to end in ``runs``.

    Each stored batch becomes one Kafka batch with its base offset, last offset delta,
    partition leader epoch, timestamps and timestamp type, producer id, epoch and base
    sequence, transactional and control flags; each record keeps its real offset (a
    compacted batch's gaps stay gaps, through the offset deltas), key, value and
    headers. Batches at or past ``limit`` (when >= 0) are left out. When
    ``next_offset`` is past the last batch sent (the leader left out markers or aborted
    batches there), a control batch covers the rest, so the client moves past them.
    ``compression`` (a Kafka codec name) compresses every batch; None sends them as
    they are, which every client reads.

    Raises:
        CorruptRecordError: a stored header or payload is malformed.
    """
    if compression is not None and compression not in _CODEC_IDS:
        raise InvalidRecordError(f"unknown Kafka compression {compression!r}")
    pieces: list[Piece] = []
    end = fetch_offset
    for run in runs:
        buffer = run if isinstance(run, pa.Buffer) else pa.py_buffer(run)
        position = 0
        for header in stored_headers(buffer):
            start = position
            position += header.size
            if 0 <= limit <= header.base_offset:
                continue
            _, batch = _DECODER.decode_at(buffer, start + HEADER_SIZE, start + header.size)
            offsets = batch_offsets(header, batch)
            pieces += _encode_batch(header, user_columns(header, batch), offsets, compression)
            end = max(end, header.next_offset)
    if next_offset > end:
        pieces += _gap_batch(end, next_offset)
    return b"".join(pieces)


def _encode_batch(
    header: Any, batch: pa.RecordBatch, offsets: np.ndarray, compression: str | None
) -> list[Piece]:
    """One stored batch as a Kafka record batch (its pieces)."""
    keys = batch.column(0)
    values = batch.column(1)
    if header.is_control and not pa.types.is_binary(values.type):
        values = pa.array([_CONTROL_VALUE] * len(values), pa.binary())
    elif pa.types.is_struct(values.type):
        values = values_to_json(values)
    timestamps = batch.column(2)
    if timestamps.null_count:
        timestamps = timestamps.fill_null(-1)
    encode = _walk_encode if len(batch) <= _SMALL_BATCH_RECORDS else _encode_records
    records = encode(
        keys,
        values,
        timestamps.to_numpy() - header.base_timestamp,
        offsets - header.base_offset,
        batch.column(3),
    )
    attributes = header.attributes & (ATTR_KAFKA_MASK & ~0x07)
    if compression is not None:
        records = _compress(compression, records)
        attributes |= _CODEC_IDS[compression]
    return _seal(
        header.base_offset,
        header.partition_leader_epoch,
        attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(batch),
        records,
    )


def _gap_batch(start: int, next_offset: int) -> list[Piece]:
    """A control batch (a commit marker of no producer) ending at ``next_offset``:
    clients skip control batches and fetch on from after them."""
    delta = next_offset - 1 - start
    records = _encode_records(
        pa.array([_CONTROL_COMMIT_KEY], pa.binary()),
        pa.array([_CONTROL_VALUE], pa.binary()),
        np.zeros(1, np.int64),
        np.array([delta], np.int64),
        pa.nulls(1, HEADERS_TYPE),
    )
    return _seal(
        start, -1, ATTR_CONTROL | ATTR_TRANSACTIONAL, delta, -1, -1, -1, -1, -1, 1, records
    )


def _seal(
    base_offset: int,
    leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    count: int,
    records: Piece,
) -> list[Piece]:
    """The batch's pieces: Kafka's header (CRC32C over attributes to the end), then
    the records."""
    header = bytearray(
        KAFKA_HEADER.pack(
            base_offset,
            KAFKA_HEADER_SIZE - 12 + len(records),
            leader_epoch,
            2,
            0,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    crc = crc32c.crc32c(records, value=crc32c.crc32c(bytes(header[_CRC_START:])))
    struct.pack_into(">I", header, 17, crc)
    return [bytes(header), records]


def _encode_records(
    keys: pa.Array,
    values: pa.Array,
    timestamp_deltas: np.ndarray,
    offset_deltas: np.ndarray,
    headers: pa.Array,
) -> pa.Buffer:
    """The records section: each record's varint framing built for all records at once
    with numpy, joined with the keys, values and headers by one Arrow kernel."""
    count = len(keys)
    no_keys = keys.null_count == count
    key_lengths = _varints_of(-1 if no_keys else compact.byte_lengths(keys))
    value_lengths = compact.byte_lengths(values)
    header_counts, header_bytes = _encode_headers(headers)
    stamps = _varints_of(timestamp_deltas)
    deltas = _varints_of(offset_deltas)
    sizes = _varints_of(value_lengths)
    counts = _varints_of(header_counts)
    # attributes byte (0) + the record's own varints + key and value bytes + headers
    lengths = 1 + np.maximum(value_lengths, 0)
    for column in (stamps, deltas, key_lengths, sizes, counts):
        lengths += _width(column)
    if not no_keys:
        lengths += np.maximum(key_lengths[2], 0)
    if header_bytes is not None:
        lengths += compact.byte_lengths(header_bytes)
    front = [_varints_of(lengths), _ATTRIBUTES, stamps, deltas, key_lengths]
    if no_keys:  # the value's length follows the key's right away
        parts = [_varint_rows([*front, sizes], count)]
    else:
        parts = [_varint_rows(front, count), _filled(keys), _varint_rows([sizes], count)]
    parts += [_filled(values), _varint_rows([counts], count)]
    if header_bytes is not None:
        parts.append(header_bytes)
    joined = pc.binary_join_element_wise(*parts, b"")
    _, bounds, data = joined.buffers()
    end = int(np.frombuffer(bounds, np.int32, count + 1)[-1])
    return data.slice(0, end)


def _walk_encode(
    keys: pa.Array,
    values: pa.Array,
    timestamp_deltas: np.ndarray,
    offset_deltas: np.ndarray,
    headers: pa.Array,
) -> bytes:
    """The records section of a few records, written in Python: the same bytes as
    :func:`_encode_records` (a property test checks it).

    A consumer caught up with a steady producer fetches a record or two at a time, and
    the vectorized path's fixed cost (some fifty numpy and Arrow calls, 0.4 to 0.8 ms)
    was then most of the listener's work per fetch; this takes about 15 us for such a
    batch.
    """
    out = bytearray()
    zigzag = _py_zigzag
    record = bytearray()
    for key, value, stamp, delta, entries in zip(
        keys.to_pylist(),
        values.to_pylist(),
        timestamp_deltas.tolist(),
        offset_deltas.tolist(),
        headers.to_pylist(),
        strict=True,
    ):
        record.clear()
        record += b"\x00"  # attributes
        record += zigzag(stamp)
        record += zigzag(delta)
        for piece in (key, value):
            if piece is None:
                record += b"\x01"  # zigzag(-1)
            else:
                if isinstance(piece, str):  # a JSON value made as text
                    piece = piece.encode()
                record += zigzag(len(piece))
                record += piece
        record += zigzag(len(entries) if entries else 0)
        for entry in entries or ():
            if entry is None:  # a null entry: an empty key, a null value
                record += b"\x00\x01"
                continue
            name = entry["key"].encode() if entry["key"] is not None else b""
            record += zigzag(len(name))
            record += name
            piece = entry["value"]
            if piece is None:
                record += b"\x01"
            else:
                record += zigzag(len(piece))
                record += piece
        out += zigzag(len(record))
        out += record
    return bytes(out)


def _encode_headers(headers: pa.Array) -> tuple[np.ndarray | int, pa.Array | None]:
    """(header count per record, the encoded headers of each record as a binary
    array, or None when no record has headers)."""
    count = len(headers)
    if headers.null_count == count:
        return 0, None
    bounds = headers.offsets.to_numpy().astype(np.int64)
    counts = np.diff(bounds)
    valid = headers.is_valid().to_numpy(zero_copy_only=False)
    if (counts[~valid] != 0).any():  # a null list over entries: rebuild it plainly
        headers = pa.array(headers.to_pylist(), HEADERS_TYPE)
        bounds = headers.offsets.to_numpy().astype(np.int64)
        counts = np.diff(bounds)
    entries = headers.values.slice(int(bounds[0]), int(bounds[-1] - bounds[0]))
    keys = entries.field(0).cast(pa.binary())
    values = entries.field(1)
    if entries.null_count:
        keys = pc.if_else(entries.is_valid(), keys, pa.scalar(b"", pa.binary()))
        values = pc.if_else(entries.is_valid(), values, pa.scalar(None, pa.binary()))
    key_lengths = np.maximum(compact.byte_lengths(keys), 0)
    value_lengths = compact.byte_lengths(values)
    entry_count = len(keys)
    encoded = pc.binary_join_element_wise(
        _varint_rows([_varints_of(key_lengths)], entry_count),
        _filled(keys),
        _varint_rows([_varints_of(value_lengths)], entry_count),
        _filled(values),
        b"",
    )
    entry_offsets = np.frombuffer(encoded.buffers()[1], np.int32, len(encoded) + 1)
    per_record = entry_offsets[bounds - bounds[0]]
    blobs = pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(per_record.copy()), encoded.buffers()[2]]
    )
    return counts, blobs


def _filled(array: pa.Array) -> pa.Array:
    """``array`` as binary with nulls as empty bytes (a null is its length, -1)."""
    if array.null_count:
        array = array.fill_null(b"") if array.null_count < len(array) else None
        if array is None:
            return pa.scalar(b"", pa.binary())
    return array


_Varints = tuple[np.ndarray, np.ndarray, np.ndarray] | bytes
"""A column of varints to write: (zigzag values, byte widths, the values), or the
bytes of one value every row has."""
_ATTRIBUTES = b"\x00"
"""A record's attributes byte: Kafka defines none."""


def _varints_of(values: np.ndarray | int) -> _Varints:
    """``values`` as a column of zigzag varints (an int: the same in every row)."""
    if isinstance(values, int):
        return _py_zigzag(values)
    values = np.asarray(values, dtype=np.int64)
    zigzag = ((values << 1) ^ (values >> 63)).view(np.uint64)
    widths = np.ones(len(zigzag), np.int64)
    top = int(zigzag.max()) if len(zigzag) else 0
    for limit in _VARINT_LIMITS:
        if top < limit:
            break
        widths += zigzag >= limit
    return zigzag, widths, values


def _width(column: _Varints) -> np.ndarray | int:
    return len(column) if isinstance(column, bytes) else column[1]


def _py_zigzag(value: int) -> bytes:
    return compact.encode_uvarint(((value << 1) ^ (value >> 63)) & ((1 << 64) - 1))


def _varint_rows(columns: Sequence[_Varints], count: int) -> pa.Array | pa.Scalar:
    """A binary array whose element i is the varints of ``columns[*][i]`` laid end to
    end; a scalar when every column is the same in every row."""
    if all(isinstance(c, bytes) for c in columns):
        return pa.scalar(b"".join(columns), pa.binary())  # type: ignore[arg-type]
    row = np.zeros(count, np.int64)
    for column in columns:
        row += _width(column)
    offsets = np.zeros(count + 1, np.int32)
    np.cumsum(row, out=offsets[1:])
    out = np.zeros(int(offsets[-1]), np.uint8)
    position = offsets[:-1].astype(np.int64)
    for column in columns:
        if isinstance(column, bytes):
            for k, byte in enumerate(column):
                if byte:
                    out[position + k] = byte
            position += len(column)
        else:
            _write_varints(out, position, column[0], column[1])
            position += column[1]
    return pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(out)]
    )


def _write_varints(
    out: np.ndarray, position: np.ndarray, zigzag: np.ndarray, widths: np.ndarray
) -> None:
    """Write each ``zigzag[i]`` as LEB128 at ``out[position[i]:]``, all rows at once."""
    if not len(zigzag):
        return
    low = zigzag & np.uint64(0x7F)
    more = widths > 1
    if not more.any():
        out[position] = low
        return
    out[position] = low | (more.astype(np.uint64) << np.uint64(7))
    rows = np.flatnonzero(more)
    k = 1
    while rows.size:
        rest = widths[rows] > k + 1
        byte = (zigzag[rows] >> np.uint64(7 * k)) & np.uint64(0x7F)
        out[position[rows] + k] = byte | (rest.astype(np.uint64) << np.uint64(7))
        rows = rows[rest]
        k += 1


# ================================================================ typed topics


def json_to_values(values: pa.Array, value_schema: pa.Schema) -> pa.StructArray:
    """Typed values from Kafka values holding one JSON object each (null: tombstone).

    Parsed by Arrow's JSON reader against ``value_schema`` in one pass; temporal fields
    are ISO 8601 strings and binary fields base64 strings, as :func:`values_to_json`
    writes them.

    Raises:
        InvalidRecordError: a value is not a JSON object of the schema; the message
            names the record and the field.
    """
    count = len(values)
    fields = list(value_schema)
    if values.null_count == count:
        return pa.nulls(count, pa.struct(fields))
    present = values.drop_null() if values.null_count else values
    struct = _parse_json(present, fields)
    if values.null_count:  # tombstones: spread the parsed values out, nulls between
        valid = values.is_valid().to_numpy(zero_copy_only=False)
        struct = struct.take(pa.array(np.cumsum(valid) - 1, mask=~valid))
    return struct


def _parse_json(present: pa.Array, fields: list[pa.Field]) -> pa.StructArray:
    parse_fields = [pa.field(f.name, _parse_type(f.type), True) for f in fields]
    lines = pc.binary_join_element_wise(present, pa.scalar(b"\n"), b"")
    text = lines.buffers()[2].slice(0, int(np.frombuffer(lines.buffers()[1], np.int32)[-1]))
    newlines = pc.any(pc.greater(pc.count_substring(present.cast(pa.binary()), b"\n"), 0))
    try:
        table = pa_json.read_json(
            pa.BufferReader(text),
            read_options=pa_json.ReadOptions(
                use_threads=False, block_size=max(text.size, 1 << 16) + 1
            ),
            parse_options=pa_json.ParseOptions(
                explicit_schema=pa.schema(parse_fields),
                unexpected_field_behavior="error",
                newlines_in_values=bool(newlines.as_py()),
            ),
        )
        if table.num_rows != len(present):
            raise ValueError("not one JSON object per value")
        columns = [
            _from_parsed(table.column(i).combine_chunks(), f.type) for i, f in enumerate(fields)
        ]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError):
        raise InvalidRecordError(_explain_json(present.to_pylist(), fields)) from None
    for field, column in zip(fields, columns, strict=True):
        if not field.nullable and column.null_count:
            row = int(np.flatnonzero(~column.is_valid().to_numpy(zero_copy_only=False))[0])
            raise InvalidRecordError(f"value {row}: field {field.name!r} is missing or null")
    return pa.StructArray.from_arrays(columns, fields=fields)


def _parse_type(data_type: pa.DataType) -> pa.DataType:
    """The type Arrow's JSON reader reads a field as (strings for temporal and binary)."""
    if _is_text_in_json(data_type):
        return pa.string()
    return data_type


def _is_text_in_json(data_type: pa.DataType) -> bool:
    return (
        pa.types.is_temporal(data_type)
        or pa.types.is_binary(data_type)
        or pa.types.is_large_binary(data_type)
        or pa.types.is_fixed_size_binary(data_type)
    )


def _from_parsed(column: pa.Array, data_type: pa.DataType) -> pa.Array:
    if column.type == data_type:
        return column
    if pa.types.is_temporal(data_type):
        return column.cast(data_type)
    decoded = [
        None if v is None else base64.b64decode(v, validate=True) for v in column.to_pylist()
    ]
    return pa.array(decoded, data_type)


def _explain_json(texts: list[bytes], fields: list[pa.Field]) -> str:
    """Why the first bad value does not fit (the error path: one value at a time)."""
    names = {f.name: f for f in fields}
    for row, text in enumerate(texts):
        try:
            value = json.loads(text)
        except (ValueError, UnicodeDecodeError) as error:
            return f"value {row} is not JSON: {error}"
        if not isinstance(value, dict):
            return f"value {row} is a JSON {type(value).__name__}, not an object"
        extra = sorted(set(value) - set(names))
        if extra:
            return f"value {row}: field {extra[0]!r} is not in the topic's schema"
        for name, field in names.items():
            try:
                single = pa.array([value.get(name)], _parse_type(field.type))
                _from_parsed(single, field.type)
            except (
                pa.ArrowInvalid,
                pa.ArrowTypeError,
                TypeError,
                ValueError,
                OverflowError,
            ) as error:
                return (
                    f"value {row}: field {name!r} = {value.get(name)!r:.60} does not fit "
                    f"{field.type}: {error}"
                )
    return "values do not fit the topic's schema"


_PLAIN_JSON = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean)


def values_to_json(values: pa.Array) -> pa.Array:
    """Kafka values (one JSON object per record, null for a null struct) of a typed
    topic's struct values.

    Flat integer, float, boolean, string and temporal fields are formatted by Arrow
    kernels for all records at once; other types (nested, decimal, binary as base64)
    take a Python pass over that field.
    """
    fields = list(values.type)
    if not fields:
        return pc.if_else(values.is_valid(), pa.scalar(b"{}"), pa.scalar(None, pa.binary()))
    parts: list[Any] = []
    for i, (field, column) in enumerate(zip(fields, values.flatten(), strict=True)):
        parts.append(pa.scalar((("{" if i == 0 else ",") + json.dumps(field.name) + ":").encode()))
        parts.append(_json_column(column))
    parts.append(pa.scalar(b"}"))
    joined = pc.binary_join_element_wise(*parts, b"")
    if values.null_count:
        joined = pc.if_else(values.is_valid(), joined, pa.scalar(None, pa.binary()))
    return joined


def _json_column(column: pa.Array) -> pa.Array:
    """A field's values as JSON text (binary), ``null`` for nulls."""
    data_type = column.type
    if any(check(data_type) for check in _PLAIN_JSON):
        text = column.cast(pa.string())
        if pa.types.is_floating(data_type):
            finite = pc.is_finite(column)
            text = pc.if_else(finite, text, pa.scalar(None, pa.string()))
    elif pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        text = column.cast(pa.string())
        if pc.any(pc.match_substring_regex(text, r"[\x00-\x1f]")).as_py():
            return _python_json(column)
        text = pc.replace_substring(pc.replace_substring(text, "\\", "\\\\"), '"', '\\"')
        text = pc.binary_join_element_wise(pa.scalar('"'), text, pa.scalar('"'), "")
    elif pa.types.is_temporal(data_type) and not pa.types.is_duration(data_type):
        text = pc.binary_join_element_wise(
            pa.scalar('"'), column.cast(pa.string()), pa.scalar('"'), ""
        )
    else:
        return _python_json(column)
    return text.fill_null("null").cast(pa.binary())


def _python_json(column: pa.Array) -> pa.Array:
    return pa.array(
        [
            json.dumps(v, default=_json_default, ensure_ascii=False).encode()
            for v in column.to_pylist()
        ],
        pa.binary(),
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


__all__ = [
    "CODECS",
    "KAFKA_HEADER_SIZE",
    "STORED_CODECS",
    "ProducedBatch",
    "decode_produce",
    "decode_produce_run",
    "encode_fetch",
    "encode_stored",
    "json_to_values",
    "produced_batch_key",
    "values_to_json",
]
