"""JSON text and Arrow columns, both ways, by whole columns; Kafka Connect's JSON schemas.

The JSON converter's engine. Writing: :func:`json_text` renders each value of an Arrow
array as JSON text with Arrow compute (per struct field: escape, quote, join), in the
encodings of Kafka's ``JsonConverter``. Reading: :func:`parse_json_values` and
:func:`parse_envelopes` join a binary column's values with newlines and parse them in
one ``pyarrow.json`` call. :func:`connect_schema` and :func:`arrow_type` map Arrow types
to Kafka Connect's JSON schemas (``{"type": "struct", "fields": [...]}``) and back.

Python runs per value only where Arrow has no kernel: base64 of bytes and decimals,
strings holding control characters other than newline and tab, and batches whose
values carry several different schemas.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from raystream.errors import ConnectError

#: Kafka Connect's logical type names, as they appear in a JSON schema's ``name``.
TIMESTAMP_NAME = "org.apache.kafka.connect.data.Timestamp"
DATE_NAME = "org.apache.kafka.connect.data.Date"
TIME_NAME = "org.apache.kafka.connect.data.Time"
DECIMAL_NAME = "org.apache.kafka.connect.data.Decimal"


def binary_data(array: pa.Array) -> bytes | pa.Buffer:
    """The bytes of a binary array's values, end to end (no copy when unsliced)."""
    if len(array) == 0:
        return b""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)[
        array.offset : array.offset + len(array) + 1
    ]
    return array.buffers()[2][int(offsets[0]) : int(offsets[-1])]


def with_nulls_of(text: pa.Array, original: pa.Array) -> pa.Array:
    """``text`` with the nulls of ``original`` (top-level nulls stay tombstones)."""
    if original.null_count == 0:
        return text
    return pc.if_else(original.is_null(), pa.scalar(None, text.type), text)


# -- JSON text from Arrow (vectorized) ---------------------------------------------

_ESCAPES = (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"))
_OTHER_CONTROL = "[\x00-\x08\x0b\x0c\x0e-\x1f]"


def json_text(array: pa.Array, *, decimal_numeric: bool) -> pa.Array:
    """JSON text of each value (null -> ``null``), by Arrow compute over whole columns.

    Encodings are Kafka's ``JsonConverter``'s: timestamps as epoch milliseconds, dates
    as epoch days, times as milliseconds of the day, bytes as base64, decimals as base64
    of the unscaled value (or as numbers with ``decimal_numeric``), maps with string
    keys as objects and others as ``[[key, value], ...]``; NaN and infinities, which
    JSON cannot hold, as null.
    """
    kind = array.type
    if pa.types.is_null(kind):
        return pa.repeat(pa.scalar("null"), len(array))
    if pa.types.is_dictionary(kind):
        return json_text(array.dictionary_decode(), decimal_numeric=decimal_numeric)
    if pa.types.is_boolean(kind) or pa.types.is_integer(kind):
        text = array.cast(pa.string())
    elif pa.types.is_floating(kind):
        text = _float_text(array)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = _string_text(array.cast(pa.string()))
    elif (
        pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
    ):
        text = pa.array(
            [
                None if v is None else '"' + base64.b64encode(v).decode() + '"'
                for v in array.to_pylist()
            ],
            pa.string(),
        )
    elif pa.types.is_timestamp(kind):
        text = (
            array.cast(pa.timestamp("ms", kind.tz), safe=False).cast(pa.int64()).cast(pa.string())
        )
    elif pa.types.is_date(kind):
        text = array.cast(pa.date32()).cast(pa.int32()).cast(pa.string())
    elif pa.types.is_time(kind):
        text = array.cast(pa.time32("ms"), safe=False).cast(pa.int32()).cast(pa.string())
    elif pa.types.is_decimal(kind):
        if decimal_numeric:
            text = array.cast(pa.string())
        else:
            text = pa.array(
                [
                    None if v is None else '"' + _decimal_base64(v, kind.scale) + '"'
                    for v in array.to_pylist()
                ],
                pa.string(),
            )
    elif pa.types.is_struct(kind):
        text = _struct_text(array, decimal_numeric)
    elif pa.types.is_map(kind):
        text = _map_text(array, decimal_numeric)
    elif (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    ):
        text = _list_text(array, decimal_numeric)
    else:
        raise ConnectError(f"JSON: no JSON form for Arrow type {kind}")
    return text.fill_null("null") if text.null_count else text


def _float_text(array: pa.Array) -> pa.Array:
    text = array.cast(pa.string())
    integral = pc.match_substring_regex(text, r"^-?[0-9]+$")
    text = pc.if_else(integral, pc.binary_join_element_wise(text, ".0", ""), text)
    return pc.if_else(pc.is_finite(array), text, pa.scalar(None, pa.string()))


def _string_text(array: pa.Array) -> pa.Array:
    escaped = array
    for raw, escape in _ESCAPES:
        escaped = pc.replace_substring(escaped, raw, escape)
    text = pc.binary_join_element_wise('"', escaped, '"', "")
    control = pc.match_substring_regex(array, _OTHER_CONTROL)
    if pc.any(control).as_py():
        slow = pa.array(
            [None if v is None else json.dumps(v) for v in array.to_pylist()], pa.string()
        )
        text = pc.if_else(control, slow, text)
    return text


def _struct_text(array: pa.Array, decimal_numeric: bool) -> pa.Array:
    pieces: list[Any] = ["{"]
    for index, field in enumerate(array.type):
        child = pc.struct_field(array, [index])
        if index:
            pieces.append(",")
        pieces.append(json.dumps(field.name) + ":")
        pieces.append(json_text(child, decimal_numeric=decimal_numeric))
    pieces.append("}")
    if len(pieces) == 2:
        text = pa.repeat(pa.scalar("{}"), len(array))
    else:
        text = pc.binary_join_element_wise(*pieces, "")
    return with_nulls_of(text, array)


def _list_text(array: pa.Array, decimal_numeric: bool) -> pa.Array:
    if pa.types.is_fixed_size_list(array.type):
        array = array.cast(pa.list_(array.type.value_type))
    if pa.types.is_large_list(array.type):
        array = array.cast(pa.list_(array.type.value_type))
    offsets, values = _entries(array)
    elements = json_text(values, decimal_numeric=decimal_numeric)
    lists = pa.ListArray.from_arrays(offsets, elements, mask=_mask(array))
    joined = pc.binary_join(lists, ",")
    return with_nulls_of(pc.binary_join_element_wise("[", joined, "]", ""), array)


def _map_text(array: pa.MapArray, decimal_numeric: bool) -> pa.Array:
    offsets, values = _entries(array)
    keys = pc.struct_field(values, [0])
    items = json_text(pc.struct_field(values, [1]), decimal_numeric=decimal_numeric)
    if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
        entries = pc.binary_join_element_wise(_string_text(keys.cast(pa.string())), ":", items, "")
        opening, closing = "{", "}"
    else:
        key_text = json_text(keys, decimal_numeric=decimal_numeric)
        entries = pc.binary_join_element_wise("[", key_text, ",", items, "]", "")
        opening, closing = "[", "]"
    lists = pa.ListArray.from_arrays(offsets, entries, mask=_mask(array))
    joined = pc.binary_join(lists, ",")
    return with_nulls_of(pc.binary_join_element_wise(opening, joined, closing, ""), array)


def _entries(array: pa.ListArray) -> tuple[pa.Array, pa.Array]:
    """A list (or map) array's offsets from 0 and the entries they index: the rows of a
    slice only (``values`` is the whole child, offsets of a slice start inside it)."""
    offsets = array.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    return pc.subtract(offsets, start), array.values.slice(start, end - start)


def _mask(array: pa.Array) -> pa.Array | None:
    return array.is_null() if array.null_count else None


def _decimal_base64(value: Decimal, scale: int) -> str:
    """Kafka's Decimal bytes: the unscaled value, big-endian two's complement, base64."""
    unscaled = int(value.scaleb(scale))
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


# -- Kafka Connect schemas <-> Arrow types ------------------------------------------

_PRIMITIVE_TO_CONNECT = {
    pa.int8(): "int8",
    pa.int16(): "int16",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.uint8(): "int16",
    pa.uint16(): "int32",
    pa.uint32(): "int64",
    pa.uint64(): "int64",
    pa.float16(): "float",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.bool_(): "boolean",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "bytes",
    pa.large_binary(): "bytes",
}
_CONNECT_TO_ARROW = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "bytes": pa.binary(),
}


def connect_schema(kind: pa.DataType, optional: bool = True) -> dict[str, Any]:
    """Kafka Connect's JSON schema of an Arrow type (what ``JsonConverter`` writes).

    Example: ``struct<id: int32, name: string>`` ->
    ``{"type": "struct", "fields": [{"type": "int32", "optional": true, "field": "id"},
    {"type": "string", "optional": true, "field": "name"}], "optional": true}``.
    """
    if pa.types.is_dictionary(kind):
        return connect_schema(kind.value_type, optional)
    if kind in _PRIMITIVE_TO_CONNECT:
        return {"type": _PRIMITIVE_TO_CONNECT[kind], "optional": optional}
    if pa.types.is_null(kind):
        return {"type": "string", "optional": True}
    if pa.types.is_timestamp(kind):
        return {"type": "int64", "optional": optional, "name": TIMESTAMP_NAME, "version": 1}
    if pa.types.is_date(kind):
        return {"type": "int32", "optional": optional, "name": DATE_NAME, "version": 1}
    if pa.types.is_time(kind):
        return {"type": "int32", "optional": optional, "name": TIME_NAME, "version": 1}
    if pa.types.is_decimal(kind):
        return {
            "type": "bytes",
            "optional": optional,
            "name": DECIMAL_NAME,
            "version": 1,
            "parameters": {
                "scale": str(kind.scale),
                "connect.decimal.precision": str(kind.precision),
            },
        }
    if pa.types.is_struct(kind):
        fields = []
        for field in kind:
            entry = connect_schema(field.type, field.nullable)
            entry["field"] = field.name
            fields.append(entry)
        return {"type": "struct", "fields": fields, "optional": optional}
    if pa.types.is_map(kind):
        return {
            "type": "map",
            "keys": connect_schema(kind.key_type, False),
            "values": connect_schema(kind.item_type, kind.item_field.nullable),
            "optional": optional,
        }
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return {
            "type": "array",
            "items": connect_schema(kind.value_type, kind.value_field.nullable),
            "optional": optional,
        }
    raise ConnectError(f"JSON: no Kafka Connect schema for Arrow type {kind}")


def arrow_type(schema: Mapping[str, Any]) -> pa.DataType:
    """The Arrow type of a Kafka Connect JSON schema (the inverse of :func:`connect_schema`).

    Raises:
        ConnectError: the schema is malformed or of an unknown type.
    """
    if not isinstance(schema, Mapping) or "type" not in schema:
        raise ConnectError(f"JSON schema {schema!r} has no type")
    name = schema.get("name")
    kind = schema["type"]
    if name == TIMESTAMP_NAME:
        return pa.timestamp("ms")
    if name == DATE_NAME:
        return pa.date32()
    if name == TIME_NAME:
        return pa.time32("ms")
    if name == DECIMAL_NAME:
        parameters = schema.get("parameters") or {}
        scale = int(parameters.get("scale", 0))
        precision = int(parameters.get("connect.decimal.precision", 38))
        return pa.decimal128(max(precision, scale, 1), scale)
    if kind in _CONNECT_TO_ARROW:
        return _CONNECT_TO_ARROW[kind]
    if kind == "struct":
        return pa.struct(
            [
                pa.field(f["field"], arrow_type(f), nullable=bool(f.get("optional", True)))
                for f in schema.get("fields", [])
            ]
        )
    if kind == "array":
        return pa.list_(arrow_type(schema["items"]))
    if kind == "map":
        return pa.map_(arrow_type(schema["keys"]), arrow_type(schema["values"]))
    raise ConnectError(f"JSON schema type {kind!r} is unknown")


# -- Arrow from JSON text (vectorized) ---------------------------------------------


def _read_lines(lines: pa.Array, schema: pa.Schema | None) -> pa.Table:
    """``pyarrow.json`` over binary values that are each one JSON object (nulls removed)."""
    if pc.any(pc.match_substring_regex(lines, "[\r\n]")).as_py():
        # JSON strings cannot hold raw line breaks: these are whitespace between tokens.
        lines = pc.replace_substring_regex(lines, "[\r\n]", " ")
    joined = pc.binary_join_element_wise(lines, b"\n", b"")
    data = binary_data(joined)
    block_size = max(len(data) + 1, 1 << 20)
    parse = pa_json.ParseOptions(
        explicit_schema=schema,
        unexpected_field_behavior="ignore" if schema is not None else "infer",
        newlines_in_values=False,
    )
    table = pa_json.read_json(
        pa.BufferReader(data),
        read_options=pa_json.ReadOptions(block_size=block_size),
        parse_options=parse,
    )
    if table.num_rows != len(lines):
        raise ValueError(f"{len(lines)} values held {table.num_rows} JSON objects")
    return table


def parse_json_values(present: pa.Array) -> pa.Array:
    """Schemaless JSON: each value wrapped as ``{"v": ...}`` so any JSON kind parses."""
    wrapped = pc.binary_join_element_wise(b'{"v":', present, b"}", b"")
    table = _read_lines(wrapped, None)
    if "v" not in table.column_names:
        raise ValueError("a stored value is empty")
    return _one_array(table.column("v"))


def parse_envelopes(present: pa.Array, decimal_numeric: bool) -> pa.Array:
    """``{"schema": ..., "payload": ...}`` values: the schema gives the Arrow type.

    The first value's schema is read with Python; when every value starts with the same
    schema text (the usual case: one producer, one schema) that text is cut off and the
    payloads are parsed in one ``pyarrow.json`` call typed by it. Otherwise each
    distinct schema is read and their types unified (a batch across a schema change).
    """
    first = present[0].as_py()
    prefix, schema = _envelope_schema(first)
    if pc.all(pc.starts_with(present, prefix)).as_py():
        kind = arrow_type(schema) if schema is not None else None
        longest = pc.max(pc.binary_length(present)).as_py()
        rest = pc.binary_slice(present, len(prefix), longest)
        if kind is not None and pc.all(pc.starts_with(rest, b",")).as_py():
            # One schema for all: parse only {"payload": ...}, not the schema per value.
            present = pc.binary_join_element_wise(b"{", pc.binary_slice(rest, 1, longest), b"")
    else:
        kinds = {}
        for value in present.to_pylist():
            _, other = _envelope_schema(value)
            key = json.dumps(other, sort_keys=True)
            if key not in kinds:
                kinds[key] = arrow_type(other) if other is not None else None
        known = [k for k in kinds.values() if k is not None]
        try:
            unified = pa.unify_schemas(
                [pa.schema([("payload", k)]) for k in known], promote_options="permissive"
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise ValueError(f"the batch mixes schemas that do not unify: {error}") from error
        kind = unified.field("payload").type if known else None
    if kind is None:
        table = _read_lines(present, None)
        if "payload" not in table.column_names:
            raise ValueError('schemas.enable: a value has no "payload" field')
        return _one_array(table.column("payload"))
    if _has_map(kind):  # pyarrow.json has no maps: Python reads these values
        payloads = [json.loads(value)["payload"] for value in present.to_pylist()]
        return pa.array([_from_json(value, kind) for value in payloads], kind)
    physical = _physical(kind, decimal_numeric)
    table = _read_lines(present, pa.schema([("payload", physical)]))
    return _logical(_one_array(table.column("payload")), kind)


def _has_map(kind: pa.DataType) -> bool:
    if pa.types.is_map(kind):
        return True
    if pa.types.is_struct(kind):
        return any(_has_map(field.type) for field in kind)
    if pa.types.is_list(kind):
        return _has_map(kind.value_type)
    return False


def _from_json(value: Any, kind: pa.DataType) -> Any:
    """A JSON value (as Python reads it) as the Python value ``pa.array`` takes for ``kind``."""
    if value is None:
        return None
    if pa.types.is_struct(kind):
        return {f.name: _from_json(value.get(f.name), f.type) for f in kind}
    if pa.types.is_list(kind):
        return [_from_json(item, kind.value_type) for item in value]
    if pa.types.is_map(kind):
        pairs = value.items() if isinstance(value, dict) else value
        return [(_from_json(k, kind.key_type), _from_json(v, kind.item_type)) for k, v in pairs]
    if pa.types.is_binary(kind):
        return base64.b64decode(value)
    if pa.types.is_decimal(kind):
        if isinstance(value, str):
            return _decimal_from_base64(value, kind.scale)
        return Decimal(str(value))
    if pa.types.is_date(kind):
        return pa.scalar(value, pa.int32()).cast(kind).as_py()
    if pa.types.is_time(kind):
        return pa.scalar(value, pa.int32()).cast(kind).as_py()
    return value


def _envelope_schema(value: bytes) -> tuple[bytes, Any]:
    """The raw text up to and including the envelope's schema, and the schema itself."""
    text = value.decode("utf-8")
    decoder = json.JSONDecoder()
    position = _skip_space(text, 0)
    if text[position : position + 1] != "{":
        raise ValueError(
            'schemas.enable=true needs {"schema": ..., "payload": ...} values '
            "(set schemas.enable=false for plain JSON)"
        )
    position = _skip_space(text, position + 1)
    try:
        key, position = decoder.raw_decode(text, position)
        position = _skip_space(text, position)
        if key == "schema" and text[position] == ":":
            schema, position = decoder.raw_decode(text, _skip_space(text, position + 1))
            return text[:position].encode(), schema
        envelope = json.loads(text)
    except (ValueError, IndexError) as error:
        raise ValueError(f"not JSON: {error}") from error
    if not isinstance(envelope, dict) or set(envelope) != {"schema", "payload"}:
        raise ValueError(
            'schemas.enable=true needs {"schema": ..., "payload": ...} values '
            "(set schemas.enable=false for plain JSON)"
        )
    return b"\x00", envelope["schema"]  # never a prefix: the per-value path reads it


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _physical(kind: pa.DataType, decimal_numeric: bool) -> pa.DataType:
    """The type ``pyarrow.json`` parses the JSON form of ``kind`` into (decimals: numbers
    with ``decimal.format=NUMERIC``, base64 text otherwise)."""
    if pa.types.is_timestamp(kind):
        return pa.int64()
    if pa.types.is_date(kind) or pa.types.is_time(kind):
        return pa.int32()
    if pa.types.is_binary(kind) or (pa.types.is_decimal(kind) and not decimal_numeric):
        return pa.string()
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, _physical(f.type, decimal_numeric)) for f in kind])
    if pa.types.is_list(kind):
        return pa.list_(_physical(kind.value_type, decimal_numeric))
    return kind


def _logical(array: pa.Array, kind: pa.DataType) -> pa.Array:
    """An array parsed as :func:`_physical` of ``kind``, turned into ``kind``."""
    if array.type == kind:
        return array
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind) or pa.types.is_time(kind):
        return array.cast(kind)
    if pa.types.is_binary(kind):
        return pa.array(
            [None if v is None else base64.b64decode(v) for v in array.to_pylist()], kind
        )
    if pa.types.is_decimal(kind):
        return pa.array(
            [None if v is None else _decimal_from_base64(v, kind.scale) for v in array.to_pylist()],
            kind,
        )
    if pa.types.is_struct(kind):
        children = [_logical(pc.struct_field(array, [i]), f.type) for i, f in enumerate(kind)]
        return pa.StructArray.from_arrays(
            children, fields=list(kind), mask=array.is_null() if array.null_count else None
        )
    if pa.types.is_list(kind):
        values = _logical(array.values, kind.value_type)
        return pa.ListArray.from_arrays(
            array.offsets, values, mask=array.is_null() if array.null_count else None
        )
    return array.cast(kind)


def _decimal_from_base64(text: str, scale: int) -> Decimal:
    """A decimal stored as Kafka's default: base64 of the unscaled value's bytes."""
    unscaled = int.from_bytes(base64.b64decode(text), "big", signed=True)
    return Decimal(unscaled).scaleb(-scale)


def _one_array(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        return array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
    return array
