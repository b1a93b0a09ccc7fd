"""The compact payload: small batches of the record layout without Arrow IPC framing.

Why: an Arrow IPC stream carries about a kilobyte of framing whatever its size (the
schema message, the record-batch message's flatbuffer, 8- and 64-byte padding of every
buffer), so a one-record batch of a 100-byte value took 1.1 KB on disk and on the wire,
where Kafka's record batch takes about 170 bytes. Full batches keep Arrow IPC: there the
framing is under 2% of the batch and reads stay zero-copy Arrow. Small batches of the
record layout (:data:`~raystream.records.BYTES_SCHEMA`: every byte topic, the internal
topics, transaction markers) are stored in this encoding instead, and decoded back into
the same Arrow arrays on read.

The encoding is columnar, so encoding and decoding are a few numpy operations per
column and never a Python loop over records. Where Kafka writes a varint per field per
record, each column here picks one width (1, 2, 4 or 8 bytes) for all its numbers,
which costs about as little for the small batches this is used for::

    offset  size  field
    0       1     tag: 0x01 (an Arrow IPC stream starts with 0xff: a reader tells the
                  two apart from the payload alone, the produce call's bytes included)
    1       1     codec: 0 none, 3 lz4, 4 zstd (the batch header's codec numbers),
                  plus 0x80 when the body ends with an explicit offsets column
    2       var   uncompressed body length (unsigned LEB128), only with a codec
    ...           body, compressed as a whole with a codec

    body:   rows (unsigned LEB128), then the columns key, value, timestamp, headers.
    binary column (key, value; header keys and values):
            flags (1 byte): 0xff all null; else the width of the offsets (1, 2 or 4)
            plus 0x10 when a validity bitmap follows; [bitmap, ceil(rows/8) bytes,
            Arrow's bit order]; offsets from 0 (rows + 1 x width); the values' bytes.
    timestamp: flags (0xff all null; else the width of the deltas, 0 when all are
            equal, plus 0x10 for a bitmap); [bitmap]; the minimum (zigzag LEB128);
            deltas from it (rows x width, unsigned).
    headers: flags (0xff all null; else the width of the per-record header offsets,
            plus 0x10 for a bitmap); [bitmap]; offsets (rows + 1 x width); then the
            header keys and the header values as two binary columns of that many entries.
    __offset (only with the codec byte's 0x80): the surviving rows' offsets of a batch
            compaction rewrote, encoded as the timestamp column is.

Decoding is zero-copy for the bytes of keys and values (the arrays point into the
payload, as an Arrow IPC read does); only offsets, timestamps and bitmaps are built.

:func:`kafka_batch_size` gives a batch's size in Kafka's record-batch v2 format, which
is what ``max.message.bytes`` counts for a Kafka user.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from raystream.records import BYTES_SCHEMA, HEADER_TYPE, HEADERS_TYPE

TAG = 0x01
"""First byte of a compact payload."""
COMPACT_MAX_BYTES = 16 << 10
"""Batches of the record layout whose Arrow data is at most this many bytes are stored
compact. Above it the IPC framing is a small share and reads stay zero-copy Arrow."""
COMPACT_MAX_ROWS = 1 << 16
"""A compact payload never holds more rows (a decoder refuses more: no payload makes a
reader allocate more than this many rows' worth of offsets)."""
KAFKA_BATCH_OVERHEAD = 61
"""Bytes of Kafka's record batch v2 header (base offset to record count)."""

EXPLICIT_OFFSET_COLUMN = "__offset"
"""Column a compacted batch stores its surviving rows' offsets in."""
EXPLICIT_OFFSETS_SCHEMA = BYTES_SCHEMA.append(pa.field(EXPLICIT_OFFSET_COLUMN, pa.int64()))
"""The record layout of a batch compaction rewrote (also stored compact)."""

_EXPLICIT_OFFSETS = 0x80
_ALL_NULL = 0xFF
_BITMAP = 0x10
_WIDTH_MASK = 0x0F
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_CODEC_IDS = {None: 0, "lz4": 3, "zstd": 4}
_CODEC_NAMES = {0: None, 3: "lz4", 4: "zstd"}
_BYTE = [bytes([i]) for i in range(256)]
_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


class CompactFormatError(ValueError):
    """A compact payload is malformed (a ValueError, as Arrow's decode errors are
    handled by every caller)."""


# ------------------------------------------------------------------------ encoding


def eligible(batch: pa.RecordBatch) -> bool:
    """Whether ``batch``, of the record layout (the caller checked its schema: see
    :func:`is_record_layout`), is stored compact: it is small, and no header entry is
    itself null (the usual null list of a record without headers is fine)."""
    if batch.get_total_buffer_size() > COMPACT_MAX_BYTES or batch.num_rows > COMPACT_MAX_ROWS:
        return False
    headers = batch.column(3)
    if headers.null_count == len(headers):
        return True
    return _header_entries(headers).null_count == 0


def is_record_layout(schema: pa.Schema) -> bool:
    """Whether ``schema`` is the byte-topic record layout (with or without a compacted
    batch's explicit offsets), the one stored compact."""
    return (
        schema is BYTES_SCHEMA
        or schema.equals(BYTES_SCHEMA, check_metadata=True)
        or schema.equals(EXPLICIT_OFFSETS_SCHEMA, check_metadata=True)
    )


def encode(batch: pa.RecordBatch, codec: str | None) -> list[bytes]:
    """The compact payload of ``batch`` (an :func:`eligible` one), in pieces."""
    rows = batch.num_rows
    columns = batch.columns
    body: list[bytes] = [encode_uvarint(rows)]
    body.extend(_binary_column(columns[0], rows))
    body.extend(_binary_column(columns[1], rows))
    body.extend(_timestamp_column(columns[2], rows))
    body.extend(_headers_column(columns[3], rows))
    flags = _CODEC_IDS[codec]
    if len(columns) == 5:
        body.extend(_timestamp_column(columns[4], rows))
        flags |= _EXPLICIT_OFFSETS
    if codec is None:
        return [_BYTE[TAG] + _BYTE[flags], *body]
    raw = b"".join(body)
    compressed = pa.Codec(codec).compress(raw, asbytes=True)
    return [_BYTE[TAG] + _BYTE[flags], encode_uvarint(len(raw)), compressed]


def encode_rows(
    keys: list[bytes | None], values: list[bytes | None], timestamps: list[int]
) -> bytes:
    """The uncompressed compact payload of a batch of the record layout without headers,
    given as Python lists: the bytes :func:`encode` writes for the same batch. For
    callers that read a few records in Python anyway (the Kafka listener's produce),
    where building Arrow arrays only to encode them would cost more than the rest."""
    rows = len(timestamps)
    body = [_BYTE[TAG], _BYTE[0], encode_uvarint(rows)]
    body.extend(_binary_rows(keys, rows))
    body.extend(_binary_rows(values, rows))
    base = min(timestamps) if rows > 1 else timestamps[0]
    largest = max(timestamps) - base
    width = 0 if largest == 0 else _width(largest)
    body.append(_BYTE[width])
    body.append(encode_uvarint(((base << 1) ^ (base >> 63)) & _U64))
    if width:
        body.append(b"".join((t - base).to_bytes(width, "little") for t in timestamps))
    body.append(_BYTE[_ALL_NULL])  # headers: none
    return b"".join(body)


_U64 = (1 << 64) - 1


def _binary_rows(pieces: list[bytes | None], rows: int) -> list[bytes]:
    """A binary column (see the module doc) of Python pieces, None for null."""
    nulls = sum(piece is None for piece in pieces)
    if nulls == rows:
        return [_BYTE[_ALL_NULL]]
    data = b"".join(piece for piece in pieces if piece is not None)
    width = _width(len(data))
    out = [_BYTE[width | (_BITMAP if nulls else 0)]]
    if nulls:
        bits = 0
        for i, piece in enumerate(pieces):
            if piece is not None:
                bits |= 1 << i
        out.append(bits.to_bytes((rows + 7) // 8, "little"))
    ends = bytearray((0).to_bytes(width, "little"))
    total = 0
    for piece in pieces:
        if piece is not None:
            total += len(piece)
        ends += total.to_bytes(width, "little")
    out.append(bytes(ends))
    if data:
        out.append(data)
    return out


def _width(largest: int) -> int:
    if largest < 1 << 8:
        return 1
    if largest < 1 << 16:
        return 2
    return 4 if largest < 1 << 32 else 8


def _bitmap(array: pa.Array) -> bytes:
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    return np.packbits(valid, bitorder="little").tobytes()


def _binary_column(array: pa.Array, rows: int) -> list[bytes]:
    nulls = array.null_count
    if nulls == rows:
        return [_BYTE[_ALL_NULL]]
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], np.int32, rows + 1, array.offset * 4)
    first, last = int(offsets[0]), int(offsets[-1])
    width = _width(last - first)
    pieces = [_BYTE[width | (_BITMAP if nulls else 0)]]
    if nulls:
        pieces.append(_bitmap(array))
    if first:
        offsets = offsets - first
    pieces.append(offsets.astype(_UNSIGNED[width]).tobytes())
    if last > first:
        pieces.append(memoryview(buffers[2])[first:last].tobytes())
    return pieces


def _timestamp_column(array: pa.Array, rows: int) -> list[bytes]:
    nulls = array.null_count
    if nulls == rows:
        return [_BYTE[_ALL_NULL]]
    values = np.frombuffer(array.buffers()[1], np.int64, rows, array.offset * 8)
    bitmap = b""
    if nulls:
        bitmap = _bitmap(array)
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        base = int(values[valid].min())
        values = np.where(valid, values, base)
    else:
        base = int(values.min()) if rows > 1 else int(values[0])
    pieces = []
    width = 0
    if rows > 1:
        # Modulo 2**64 (int64 arithmetic wraps): exact for any range, undone on decode.
        deltas = (values - np.int64(base)).view(np.uint64)
        largest = int(deltas.max())
        width = 0 if largest == 0 else _width(largest)
        if width:
            pieces.append(deltas.astype(_UNSIGNED[width]).tobytes())
    return [
        _BYTE[width | (_BITMAP if nulls else 0)],
        bitmap,
        encode_uvarint((base << 1) ^ (base >> 63)),
        *pieces,
    ]


def _header_entries(headers: pa.Array) -> pa.Array:
    """The struct entries of a (possibly sliced) headers column's rows."""
    offsets = np.frombuffer(headers.buffers()[1], np.int32, len(headers) + 1, headers.offset * 4)
    first = int(offsets[0])
    return headers.values.slice(first, int(offsets[-1]) - first)


def _headers_column(array: pa.Array, rows: int) -> list[bytes]:
    nulls = array.null_count
    if nulls == rows:
        return [_BYTE[_ALL_NULL]]
    offsets = np.frombuffer(array.buffers()[1], np.int32, rows + 1, array.offset * 4)
    first, last = int(offsets[0]), int(offsets[-1])
    width = _width(last - first)
    pieces = [_BYTE[width | (_BITMAP if nulls else 0)]]
    if nulls:
        pieces.append(_bitmap(array))
    pieces.append((offsets - first).astype(_UNSIGNED[width]).tobytes())
    count = last - first
    keys, values = array.values.slice(first, count).flatten()
    pieces.extend(_binary_column(keys, count) if count else [_BYTE[_ALL_NULL]])
    pieces.extend(_binary_column(values, count) if count else [_BYTE[_ALL_NULL]])
    return pieces


def encode_uvarint(value: int) -> bytes:
    """An unsigned varint (protobuf's base-128, as Kafka's records and flexible
    messages use), the one writer of them for the log and the Kafka listener."""
    if value < 0x80:
        return _BYTE[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# ------------------------------------------------------------------------ decoding


def decode(buffer: pa.Buffer, start: int, end: int) -> tuple[pa.Schema, pa.RecordBatch]:
    """The schema (one of two constants) and record batch of the compact payload at
    ``buffer[start:end]``.

    Every array is validated in full (offsets, UTF-8 of header keys), so a malformed
    payload (a produce call's bytes are not checksummed) is an error, never a bad array.

    Raises:
        CompactFormatError: the payload is truncated or inconsistent.
    """
    reader = _Reader(buffer, start, end)
    reader.position += 1  # the tag
    flags = reader.byte()
    codec_id = flags & ~_EXPLICIT_OFFSETS
    if codec_id not in _CODEC_NAMES:
        raise CompactFormatError(f"unknown compact payload codec {codec_id}")
    if codec_id:
        size = reader.uvarint()
        if size > COMPACT_MAX_BYTES * 64:
            raise CompactFormatError(f"compact payload claims {size} uncompressed bytes")
        compressed = buffer.slice(reader.position, end - reader.position)
        try:
            body = pa.Codec(_CODEC_NAMES[codec_id]).decompress(compressed, size)
        except (pa.ArrowException, OSError) as error:
            raise CompactFormatError(f"compact payload does not decompress: {error}") from None
        reader = _Reader(body, 0, body.size)
    rows = reader.uvarint()
    if rows > COMPACT_MAX_ROWS:
        raise CompactFormatError(f"compact payload claims {rows} rows")
    key = reader.binary_column(rows, _BINARY)
    value = reader.binary_column(rows, _BINARY)
    timestamp = reader.timestamp_column(rows)
    headers = reader.headers_column(rows)
    columns = [key, value, timestamp, headers]
    schema = BYTES_SCHEMA
    if flags & _EXPLICIT_OFFSETS:
        columns.append(reader.timestamp_column(rows))
        schema = EXPLICIT_OFFSETS_SCHEMA
    if reader.position != reader.end:
        raise CompactFormatError(
            f"compact payload has {reader.end - reader.position} bytes after its columns"
        )
    batch = pa.RecordBatch.from_arrays(columns, schema=schema)
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid as error:
        raise CompactFormatError(f"compact payload is inconsistent: {error}") from None
    return schema, batch


_BINARY = pa.binary()
_NULLS: dict[tuple[int, pa.DataType], pa.Array] = {}


def _nulls(rows: int, data_type: pa.DataType) -> pa.Array:
    """An all-null array, shared (arrays are immutable) for the small row counts."""
    key = (rows, data_type)
    array = _NULLS.get(key)
    if array is None:
        array = pa.nulls(rows, data_type)
        if rows <= 64:
            _NULLS[key] = array
    return array


class _Reader:
    """A cursor over a payload; every read checks the payload's end."""

    __slots__ = ("buffer", "end", "position", "view")

    def __init__(self, buffer: pa.Buffer, start: int, end: int) -> None:
        self.buffer = buffer
        self.view = memoryview(buffer).cast("B")
        self.position = start
        self.end = end

    def take(self, size: int) -> int:
        position = self.position
        if position + size > self.end:
            raise CompactFormatError(
                f"compact payload truncated: {size} bytes needed at {position}, "
                f"{self.end - position} left"
            )
        self.position = position + size
        return position

    def byte(self) -> int:
        position = self.position
        if position >= self.end:
            raise CompactFormatError("compact payload truncated")
        self.position = position + 1
        return self.view[position]

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.byte()
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 63:
                raise CompactFormatError("compact payload has an overlong varint")

    def bitmap(self, rows: int) -> pa.Buffer:
        size = (rows + 7) // 8
        return self.buffer.slice(self.take(size), size)

    def numbers(self, count: int, width: int) -> np.ndarray:
        dtype = _UNSIGNED.get(width)
        if dtype is None:
            raise CompactFormatError(f"compact payload has a column of width {width}")
        return np.frombuffer(self.buffer, dtype, count, self.take(count * width))

    def skip_binary_column(self, rows: int) -> None:
        """Step over a binary column, checking its offsets as Arrow's validation would."""
        flags = self.byte()
        if flags == _ALL_NULL:
            return
        if flags & _BITMAP:
            self.take((rows + 7) // 8)
        offsets = self.numbers(rows + 1, flags & _WIDTH_MASK)
        total = int(offsets[-1])
        if offsets[0] > total if rows == 1 else not (offsets[1:] >= offsets[:-1]).all():
            raise CompactFormatError("compact payload column offsets decrease")
        self.take(total)

    def binary_column(self, rows: int, data_type: pa.DataType) -> pa.Array:
        flags = self.byte()
        if flags == _ALL_NULL:
            return _nulls(rows, data_type)
        validity = self.bitmap(rows) if flags & _BITMAP else None
        offsets = self.numbers(rows + 1, flags & _WIDTH_MASK).astype(np.int32)
        total = int(offsets[-1])
        if total < 0:
            raise CompactFormatError(f"compact payload column of {total} bytes")
        data = self.buffer.slice(self.take(total), total)
        return pa.Array.from_buffers(data_type, rows, [validity, pa.py_buffer(offsets), data])

    def timestamp_column(self, rows: int) -> pa.Array:
        flags = self.byte()
        if flags == _ALL_NULL:
            return _nulls(rows, pa.int64())
        validity = self.bitmap(rows) if flags & _BITMAP else None
        zigzag = self.uvarint()
        base = (zigzag >> 1) ^ -(zigzag & 1)
        width = flags & _WIDTH_MASK
        if width:
            values = self.numbers(rows, width).astype(np.int64)
            values += np.int64(base)  # wraps like the encoder's subtraction
        else:
            values = np.full(rows, base, np.int64)
        return pa.Array.from_buffers(pa.int64(), rows, [validity, pa.py_buffer(values)])

    def headers_column(self, rows: int) -> pa.Array:
        flags = self.byte()
        if flags == _ALL_NULL:
            return _nulls(rows, HEADERS_TYPE)
        validity = self.bitmap(rows) if flags & _BITMAP else None
        offsets = self.numbers(rows + 1, flags & _WIDTH_MASK).astype(np.int32)
        entries = int(offsets[-1])
        if not 0 <= entries <= self.end - self.position:  # every entry takes bytes
            raise CompactFormatError(f"compact payload claims {entries} headers")
        keys = self.binary_column(entries, pa.string())
        values = self.binary_column(entries, _BINARY)
        struct = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE))
        return pa.Array.from_buffers(
            HEADERS_TYPE, rows, [validity, pa.py_buffer(offsets)], children=[struct]
        )


# ------------------------------------------------------------ storing as it came


class CompactPayload:
    """A produced compact payload a leader stores as it came: no decode, no re-encode.

    Why: on a leader, decoding a small batch into Arrow arrays only to encode the same
    bytes again cost more than the rest of the append; a one-record produce round trip
    paid a quarter of its time for it. :func:`summarize` reads what the append needs
    (rows, time range) and checks the payload as strictly as :func:`decode` does, and
    the log then writes these bytes. It has ``num_rows`` and ``schema`` as a record batch
    has, so a leader's checks read either; :meth:`decode` gives the batch where one is
    needed after all (a ``LogAppendTime`` topic, a codec to apply, a size over the limit).
    """

    __slots__ = ("data", "max_timestamp", "min_timestamp", "num_rows")

    schema = BYTES_SCHEMA

    def __init__(
        self, data: pa.Buffer, num_rows: int, min_timestamp: int | None, max_timestamp: int | None
    ) -> None:
        self.data = data
        self.num_rows = num_rows
        self.min_timestamp = min_timestamp  # None: every timestamp is null
        self.max_timestamp = max_timestamp

    def decode(self) -> pa.RecordBatch:
        """The record batch these bytes hold."""
        return decode(self.data, 0, self.data.size)[1]

    def timestamp_range(self, now: int) -> tuple[int, int]:
        """(min, max) of the records' timestamps, or (now, now) when all are null."""
        low = self.min_timestamp
        return (now, now) if low is None else (low, self.max_timestamp)


def summarize(buffer: pa.Buffer) -> CompactPayload | None:
    """``buffer``, a produced compact payload, ready to store as it came, or None when it
    needs :func:`decode` (a codec, headers, explicit offsets, some null timestamps).

    Checks what :func:`decode` validates for these columns: every binary column's
    offsets never decrease and end inside the payload, and nothing follows the last
    column. So a payload stored this way always decodes.

    Raises:
        CompactFormatError: the payload is truncated or inconsistent.
    """
    reader = _Reader(buffer, 0, buffer.size)
    if reader.byte() != TAG or reader.byte() != 0:  # a codec or explicit offsets
        return None
    rows = reader.uvarint()
    if not 0 < rows <= COMPACT_MAX_ROWS:
        raise CompactFormatError(f"compact payload claims {rows} rows")
    reader.skip_binary_column(rows)  # key
    reader.skip_binary_column(rows)  # value
    flags = reader.byte()
    low = high = None
    if flags != _ALL_NULL:
        if flags & _BITMAP:
            return None
        zigzag = reader.uvarint()
        low = high = (zigzag >> 1) ^ -(zigzag & 1)
        width = flags & _WIDTH_MASK
        if width:
            values = reader.numbers(rows, width).astype(np.int64)
            values += np.int64(low)  # wraps like the encoder's subtraction
            low, high = int(values.min()), int(values.max())
    if reader.byte() != _ALL_NULL:  # headers: their keys' UTF-8 is decode's to check
        return None
    if reader.position != reader.end:
        raise CompactFormatError(
            f"compact payload has {reader.end - reader.position} bytes after its columns"
        )
    return CompactPayload(buffer, rows, low, high)


# ---------------------------------------------------------------- Kafka's batch size


def kafka_batch_size(batch: pa.RecordBatch) -> int:
    """``batch``'s size as Kafka's record batch v2 would have it, uncompressed.

    61 bytes of batch header, then per record its length, attributes, timestamp and
    offset deltas, key and value lengths (zigzag varints) and bytes, and its headers.
    A ``value`` that is not bytes (a typed topic's struct) counts its Arrow bytes, spread
    evenly over the records. Vectorized: no Python loop over records.
    """
    rows = batch.num_rows
    if rows == 0:
        return KAFKA_BATCH_OVERHEAD
    names = batch.schema.names
    record = np.ones(rows, np.int64)  # attributes
    record += _varint_sizes(np.arange(rows, dtype=np.int64))  # offset delta
    if "timestamp" in names and pa.types.is_integer(batch.column("timestamp").type):
        stamps = _integers(batch.column("timestamp"))
        record += _varint_sizes(stamps - stamps[0])
    else:
        record += 1
    other = 0
    for name, column in zip(names, batch.columns, strict=True):
        if name in ("key", "value") and _is_binary(column.type):
            record += _field_sizes(column)
        elif name == "headers" and column.type == HEADERS_TYPE:
            record += _headers_sizes(column)
        elif name != "timestamp":
            other += column.nbytes
    if "key" not in names or not _is_binary(batch.column("key").type):
        record += 1  # a null key: length -1
    if "headers" not in names or batch.column("headers").type != HEADERS_TYPE:
        record += 1  # no headers: count 0
    if other:
        each = np.full(rows, other // rows, np.int64)
        each[: other % rows] += 1
        record += each + _varint_sizes(each)
    return KAFKA_BATCH_OVERHEAD + int((record + _varint_sizes(record)).sum())


def kafka_batch_size_bound(batch: pa.RecordBatch) -> int | None:
    """An upper bound of :func:`kafka_batch_size` from a few numbers per column: each
    record's key and value lengths and timestamp delta counted as wide as the widest
    of the batch, the keys' and values' bytes as their totals. None for a batch it does
    not cover (headers, or a value that is not bytes): count that one exactly.

    A producer's batch is uniform (one value size, close timestamps), so the bound is
    within a byte or two per record of the exact size, and a batch whose Arrow form is
    over ``max.message.bytes`` but Kafka's is not (a Kafka client's full 1 MB batch) is
    let through without a numpy pass per field per record.
    """
    rows = batch.num_rows
    if rows == 0:
        return KAFKA_BATCH_OVERHEAD
    names = batch.schema.names
    if any(n not in ("key", "value", "timestamp", "headers") for n in names):
        return None
    if "headers" in names:
        headers = batch.column("headers")
        if headers.type != HEADERS_TYPE:
            return None
        if headers.null_count != rows:
            offsets = np.frombuffer(headers.buffers()[1], np.int32, rows + 1, headers.offset * 4)
            if offsets[-1] != offsets[0]:
                return None
    fields = 1 + 1  # attributes, header count (0); the offset delta is counted below
    data = longest = 0
    if "timestamp" in names and pa.types.is_integer(batch.column("timestamp").type):
        stamps = _integers(batch.column("timestamp"))
        first = int(stamps[0])
        delta = max(int(stamps.max()) - first, first - int(stamps.min()))
        fields += _varint_size(delta)
    else:
        fields += 1
    for name in ("key", "value"):
        column = batch.column(name) if name in names else None
        if column is not None and not _is_binary(column.type):
            return None
        if column is None or column.null_count == rows:
            fields += 1  # length -1
            continue
        offsets = np.frombuffer(column.buffers()[1], np.int32, rows + 1, column.offset * 4)
        widest = int(np.diff(offsets).max())
        fields += _varint_size(widest)
        longest += widest
        data += int(offsets[-1]) - int(offsets[0])
    offset_deltas = 0
    low = 0
    for size, limit in enumerate(_VARINT_LIMITS, start=1):  # zigzag(i) = 2i < limit
        high = min(rows, (int(limit) + 1) // 2)
        offset_deltas += size * max(high - low, 0)
        low = max(low, high)
    record = fields + _varint_size(rows - 1) + longest  # the longest a record can be
    per_record = fields + _varint_size(record)
    return KAFKA_BATCH_OVERHEAD + rows * per_record + offset_deltas + data


def _varint_size(value: int) -> int:
    """Bytes of ``value`` (non-negative) as a zigzag varint."""
    zigzag = value << 1
    size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


def _is_binary(data_type: pa.DataType) -> bool:
    return pa.types.is_binary(data_type) or pa.types.is_string(data_type)


def byte_lengths(array: pa.Array) -> np.ndarray:
    """Per-row byte lengths of a binary or string array, -1 for nulls (Kafka's null
    length), read from its offsets: see :func:`_valid` for why not ``pyarrow.compute``.
    Also what the Kafka listener's fetch encoding counts."""
    rows = len(array)
    if array.null_count == rows:
        return np.full(rows, -1, np.int64)
    offsets = np.frombuffer(array.buffers()[1], np.int32, rows + 1, array.offset * 4)
    lengths = np.diff(offsets).astype(np.int64)
    if array.null_count:
        lengths[~_valid(array)] = -1
    return lengths


def _integers(column: pa.Array) -> np.ndarray:
    """An integer column's values as int64, nulls as 0."""
    if column.null_count == len(column):
        return np.zeros(len(column), np.int64)
    dtype = np.dtype(str(column.type))
    data = column.buffers()[1]
    values = np.frombuffer(data, dtype, len(column), column.offset * dtype.itemsize)
    values = values.astype(np.int64)
    if column.null_count:
        values[~_valid(column)] = 0
    return values


def _valid(array: pa.Array) -> np.ndarray:
    """Per-row validity of an array with nulls, read from its bitmap with numpy.

    Not ``Array.is_valid`` or ``fill_null``: they load ``pyarrow.compute`` and, through
    the scalar a fill value becomes, pandas, about a second of CPU that a replica paid
    on its first batch over ``max.message.bytes`` as stored (a Kafka producer's 1 MB
    batch, in the middle of its run).
    """
    rows = len(array)
    bits = np.frombuffer(array.buffers()[0], np.uint8)
    valid = np.unpackbits(bits, count=array.offset + rows, bitorder="little")
    return valid[array.offset :].astype(bool)


def _field_sizes(array: pa.Array) -> np.ndarray:
    """Bytes of a varint length plus the data per row (Kafka's key or value field)."""
    lengths = byte_lengths(array)
    return _varint_sizes(lengths) + np.maximum(lengths, 0)


def _headers_sizes(headers: pa.Array) -> np.ndarray:
    rows = len(headers)
    offsets = np.frombuffer(headers.buffers()[1], np.int32, rows + 1, headers.offset * 4)
    counts = np.diff(offsets).astype(np.int64)
    if headers.null_count:
        counts[~_valid(headers)] = 0
    sizes = _varint_sizes(counts)
    entries = _header_entries(headers)
    if len(entries):
        keys, values = entries.flatten()
        per_entry = _field_sizes(keys) + _field_sizes(values)
        cumulative = np.concatenate([[0], np.cumsum(per_entry)])
        relative = offsets.astype(np.int64) - offsets[0]
        sizes += cumulative[relative[1:]] - cumulative[relative[:-1]]
    return sizes


def _varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of each value as a zigzag varint (Kafka's signed varint / varlong): one
    comparison pass per size class the largest value reaches (two or three for the
    lengths and deltas of a batch), not all nine."""
    zigzag = (values.astype(np.int64) << 1) ^ (values.astype(np.int64) >> 63)
    unsigned = zigzag.view(np.uint64)
    sizes = np.ones(len(unsigned), np.int64)
    if not len(unsigned):
        return sizes
    top = int(unsigned.max())
    for limit in _VARINT_LIMITS:
        if top < limit:
            break
        sizes += unsigned >= limit
    return sizes


__all__ = [
    "COMPACT_MAX_BYTES",
    "COMPACT_MAX_ROWS",
    "EXPLICIT_OFFSETS_SCHEMA",
    "EXPLICIT_OFFSET_COLUMN",
    "KAFKA_BATCH_OVERHEAD",
    "TAG",
    "CompactFormatError",
    "byte_lengths",
    "decode",
    "eligible",
    "encode",
    "is_record_layout",
    "kafka_batch_size",
    "kafka_batch_size_bound",
]
