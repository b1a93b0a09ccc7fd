"""Converters: between the bytes a topic stores and the data connectors see, a column at a time.

Kafka Connect converts each record's key and value between the stored bytes and
*connect data* (a value plus its schema) with a converter chosen by
``key.converter`` / ``value.converter``. raystream does the same on whole Arrow
columns: connect data is an Arrow array (binary, string, a number, or a struct for
structured data), and the Arrow type is the schema. The converters and their Kafka
names:

=========  ===========================================================  ==========================
short      Kafka class name                                             connect data
=========  ===========================================================  ==========================
bytes      org.apache.kafka.connect.converters.ByteArrayConverter       binary, as stored
string     org.apache.kafka.connect.storage.StringConverter             string (UTF-8)
json       org.apache.kafka.connect.json.JsonConverter                  whatever the JSON holds
arrow      raystream.connect.converters.ArrowConverter                  the topic's typed columns
int8..     org.apache.kafka.connect.converters.{Short,Integer,Long,     a number (big-endian
double     Float,Double}Converter                                       bytes, as Kafka's)
=========  ===========================================================  ==========================

The JSON converter is Kafka's ``JsonConverter``: with ``schemas.enable=true`` (Kafka's
default) each stored value is the envelope ``{"schema": ..., "payload": ...}`` whose
schema (Kafka Connect's JSON schema: ``{"type": "struct", "fields": [...]}``) gives the
Arrow type exactly; with ``schemas.enable=false`` the plain JSON is parsed and the
Arrow type inferred over the whole column. Parsing is one ``pyarrow.json`` call over the
column's bytes joined by newlines, and writing JSON is Arrow compute over the columns
(string joins per field), so no Python code runs per record except for the few JSON
shapes Arrow cannot express (base64 of bytes and decimals, control characters in
strings, a batch mixing several schemas).

A null stays null both ways (a tombstone remains a tombstone), as Kafka's converters
do. Typed topics (a topic with an Arrow schema) hold their columns as the struct
``value``; the ``arrow`` converter is the identity on it.
"""

from __future__ import annotations

import base64
import importlib
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from raystream.connect.api import SourceRecord
from raystream.errors import ConnectError, InvalidConfigError

#: The Arrow type of a batch's ``headers`` column (the sink and source batch shapes).
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

#: Kafka Connect's logical type names, as they appear in a JSON schema's ``name``.
TIMESTAMP_NAME = "org.apache.kafka.connect.data.Timestamp"
DATE_NAME = "org.apache.kafka.connect.data.Date"
TIME_NAME = "org.apache.kafka.connect.data.Time"
DECIMAL_NAME = "org.apache.kafka.connect.data.Decimal"


class Converter(ABC):
    """Converts a column between stored bytes and connect data; one instance per key or value.

    Args:
        config: the converter's own settings, with the ``key.converter.`` /
            ``value.converter.`` prefix removed (``schemas.enable``, ...).
        is_key: whether it converts keys (Kafka's ``isKey``).
    """

    #: Kafka's class name (or raystream's for converters Kafka does not have).
    class_name: str = ""

    def __init__(self, config: Mapping[str, str] | None = None, is_key: bool = False) -> None:
        self.config = dict(config or {})
        self.is_key = is_key

    @abstractmethod
    def to_connect(self, array: pa.Array) -> pa.Array:
        """Stored bytes (binary; nulls for absent keys and tombstones) -> connect data."""

    @abstractmethod
    def from_connect(self, array: pa.Array) -> pa.Array:
        """Connect data -> the binary column to store (the identity for ``arrow``)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(is_key={self.is_key}, config={self.config!r})"


class ByteArrayConverter(Converter):
    """Bytes pass through unchanged (Kafka's ``ByteArrayConverter``); strings become UTF-8."""

    class_name = "org.apache.kafka.connect.converters.ByteArrayConverter"

    def to_connect(self, array: pa.Array) -> pa.Array:
        return _as_binary(array, self)

    def from_connect(self, array: pa.Array) -> pa.Array:
        return _as_binary(array, self)


class StringConverter(Converter):
    """UTF-8 text (Kafka's ``StringConverter``).

    Writing, a number or boolean becomes its text (Kafka's ``toString``), and a struct
    or list its JSON text; bytes are stored as they are.
    """

    class_name = "org.apache.kafka.connect.storage.StringConverter"

    def __init__(self, config: Mapping[str, str] | None = None, is_key: bool = False) -> None:
        super().__init__(config, is_key)
        for key in ("converter.encoding", "encoding"):
            encoding = self.config.get(key, "UTF-8")
            if encoding.replace("-", "").replace("_", "").lower() != "utf8":
                raise InvalidConfigError(
                    f"{key}={encoding!r}: StringConverter supports UTF-8 only "
                    "(Arrow strings are UTF-8)"
                )

    def to_connect(self, array: pa.Array) -> pa.Array:
        array = _combined(array)
        if pa.types.is_string(array.type):
            return array
        if pa.types.is_null(array.type):
            return pa.nulls(len(array), pa.string())
        if pa.types.is_large_string(array.type):
            return array.cast(pa.string())
        try:
            return _as_binary(array, self).cast(pa.string())
        except pa.ArrowInvalid as error:
            raise ConnectError(f"StringConverter: a value is not valid UTF-8: {error}") from error

    def from_connect(self, array: pa.Array) -> pa.Array:
        array = _combined(array)
        kind = array.type
        if pa.types.is_binary(kind) or pa.types.is_null(kind):
            return _as_binary(array, self)
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return array.cast(pa.binary())
        if pa.types.is_dictionary(kind):
            return self.from_connect(array.dictionary_decode())
        text = _json_text(array, decimal_numeric=True)
        return _restore_nulls(text, array).cast(pa.binary())


class JsonConverter(Converter):
    """Kafka's ``JsonConverter``: JSON text, with or without the schema envelope.

    Settings (Kafka's): ``schemas.enable`` (default ``true``: each value is
    ``{"schema": ..., "payload": ...}``), ``decimal.format`` (``BASE64``, Kafka's
    default, or ``NUMERIC``) for decimals written with a schema.
    """

    class_name = "org.apache.kafka.connect.json.JsonConverter"

    def __init__(self, config: Mapping[str, str] | None = None, is_key: bool = False) -> None:
        super().__init__(config, is_key)
        self.schemas_enable = _boolean(self.config, "schemas.enable", True)
        decimal_format = self.config.get("decimal.format", "BASE64").upper()
        if decimal_format not in ("BASE64", "NUMERIC"):
            raise InvalidConfigError(
                f"decimal.format={decimal_format!r}: expected BASE64 or NUMERIC"
            )
        self.decimal_numeric = decimal_format == "NUMERIC"

    def to_connect(self, array: pa.Array) -> pa.Array:
        stored = _as_binary(array, self)
        valid = stored.is_valid()
        present = stored.filter(valid)
        if len(present) == 0:
            return pa.nulls(len(stored))
        try:
            if self.schemas_enable:
                parsed = _parse_envelopes(present, self.decimal_numeric)
            else:
                parsed = _parse_json_values(present)
        except (pa.ArrowInvalid, ValueError, TypeError) as error:
            raise ConnectError(f"JsonConverter: cannot read the stored JSON: {error}") from error
        return _spread(parsed, valid)

    def from_connect(self, array: pa.Array) -> pa.Array:
        array = _combined(array)
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        payload = _json_text(array, decimal_numeric=self.decimal_numeric or not self.schemas_enable)
        if self.schemas_enable:
            schema = json.dumps(connect_schema(array.type), separators=(",", ":"))
            payload = pc.binary_join_element_wise(
                f'{{"schema":{schema},"payload":', payload, "}", ""
            )
        return _restore_nulls(payload, array).cast(pa.binary())


class ArrowConverter(Converter):
    """Typed topics: the value is the struct of the topic's columns already; the identity."""

    class_name = "raystream.connect.converters.ArrowConverter"

    def to_connect(self, array: pa.Array) -> pa.Array:
        return _combined(array)

    def from_connect(self, array: pa.Array) -> pa.Array:
        return _combined(array)


class NumberConverter(Converter):
    """A fixed-width big-endian number per value, as Kafka's Short/Integer/Long/Float/Double
    converters store them (with Kafka's serializers)."""

    arrow_type: pa.DataType = pa.int64()
    dtype: str = ">i8"

    def to_connect(self, array: pa.Array) -> pa.Array:
        stored = _as_binary(array, self)
        valid = stored.is_valid()
        present = stored.filter(valid)
        width = np.dtype(self.dtype).itemsize
        if len(present) and not pc.all(pc.equal(pc.binary_length(present), width)).as_py():
            raise ConnectError(f"{type(self).__name__}: a stored value is not {width} bytes long")
        data = _binary_data(present)
        numbers = np.frombuffer(data, dtype=self.dtype).astype(self.dtype[1:])
        return _spread(pa.array(numbers, self.arrow_type), valid)

    def from_connect(self, array: pa.Array) -> pa.Array:
        array = _combined(array)
        try:
            numbers = array.cast(self.arrow_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
            raise ConnectError(
                f"{type(self).__name__}: cannot store {array.type} as {self.arrow_type}"
            ) from error
        width = np.dtype(self.dtype).itemsize
        values = numbers.fill_null(0).to_numpy(zero_copy_only=False).astype(self.dtype)
        lengths = np.where(numbers.is_valid().to_numpy(zero_copy_only=False), width, 0)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        packed = values[lengths > 0].tobytes()
        return pa.Array.from_buffers(
            pa.binary(),
            len(numbers),
            [
                numbers.is_valid().buffers()[1] if numbers.null_count else None,
                pa.py_buffer(offsets.tobytes()),
                pa.py_buffer(packed),
            ],
            null_count=numbers.null_count,
        )


class ShortConverter(NumberConverter):
    class_name = "org.apache.kafka.connect.converters.ShortConverter"
    arrow_type = pa.int16()
    dtype = ">i2"


class IntegerConverter(NumberConverter):
    class_name = "org.apache.kafka.connect.converters.IntegerConverter"
    arrow_type = pa.int32()
    dtype = ">i4"


class LongConverter(NumberConverter):
    class_name = "org.apache.kafka.connect.converters.LongConverter"
    arrow_type = pa.int64()
    dtype = ">i8"


class FloatConverter(NumberConverter):
    class_name = "org.apache.kafka.connect.converters.FloatConverter"
    arrow_type = pa.float32()
    dtype = ">f4"


class DoubleConverter(NumberConverter):
    class_name = "org.apache.kafka.connect.converters.DoubleConverter"
    arrow_type = pa.float64()
    dtype = ">f8"


_SHORT_NAMES: dict[str, type[Converter]] = {
    "bytes": ByteArrayConverter,
    "string": StringConverter,
    "json": JsonConverter,
    "arrow": ArrowConverter,
    "int16": ShortConverter,
    "int32": IntegerConverter,
    "int64": LongConverter,
    "float32": FloatConverter,
    "float64": DoubleConverter,
}
_BY_NAME: dict[str, type[Converter]] = {
    **_SHORT_NAMES,
    **{cls.class_name: cls for cls in _SHORT_NAMES.values()},
    **{cls.__name__: cls for cls in _SHORT_NAMES.values()},
}


def converter_for(config: Mapping[str, str], which: Literal["key", "value"]) -> Converter:
    """The key or value converter a connector config asks for.

    Reads ``<which>.converter`` (a short name from the module docstring, Kafka's class
    name, or a dotted path to a :class:`Converter` subclass) and hands it the settings
    under ``<which>.converter.`` (``value.converter.schemas.enable=false`` ...). The
    default is ``json``, Kafka Connect's worker default (with ``schemas.enable=true``,
    also Kafka's default).

    Raises:
        InvalidConfigError: an unknown converter or a bad setting, naming the key.
    """
    if which not in ("key", "value"):
        raise InvalidConfigError(f"converter_for: which={which!r}, expected 'key' or 'value'")
    key = f"{which}.converter"
    name = str(config.get(key, "json")).strip()
    prefix = key + "."
    settings = {k[len(prefix) :]: str(v) for k, v in config.items() if k.startswith(prefix)}
    cls = _BY_NAME.get(name) or _BY_NAME.get(name.lower())
    if cls is None:
        cls = _import_class(name, key, Converter)
    try:
        return cls(settings, is_key=which == "key")
    except InvalidConfigError as error:
        raise InvalidConfigError(f"{prefix}{error}") from error


def _import_class(path: str, key: str, base: type) -> Any:
    """The class at a dotted path ``package.module.Class``, checked to derive from ``base``."""
    module_name, _, attribute = path.rpartition(".")
    if not module_name:
        raise InvalidConfigError(f"{key}={path!r}: unknown {base.__name__.lower()}")
    try:
        cls = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise InvalidConfigError(
            f"{key}={path!r}: unknown {base.__name__.lower()} ({error})"
        ) from error
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise InvalidConfigError(f"{key}={path!r} is not a {base.__name__}")
    return cls


def _boolean(config: Mapping[str, str], key: str, default: bool) -> bool:
    value = str(config.get(key, default)).strip().lower()
    if value not in ("true", "false"):
        raise InvalidConfigError(f"{key}={config.get(key)!r}: expected true or false")
    return value == "true"


# -- source records to a batch -----------------------------------------------------


def source_records_table(records: Sequence[SourceRecord]) -> pa.Table:
    """The source batch of per-record :class:`SourceRecord` objects, one row each.

    Columns ``topic``, ``partition`` (int32, null: the partitioner chooses), ``timestamp``
    (int64 ms, null: the producer's clock), ``key``, ``value`` (Arrow's inference over
    the Python values: bytes -> binary, str -> string, dict -> struct, None -> null) and
    ``headers``. This is the one per-record Python step of a per-record source task;
    batch tasks skip it by returning a ``SourceBatch``.

    Raises:
        ConnectError: the keys or values mix kinds Arrow cannot hold in one column
            (bytes and text, say), naming the column.
    """
    columns: dict[str, pa.Array] = {
        "topic": pa.array([r.topic for r in records], pa.string()),
        "partition": pa.array([r.partition for r in records], pa.int32()),
        "timestamp": pa.array([r.timestamp for r in records], pa.int64()),
    }
    for name in ("key", "value"):
        values = [getattr(r, name) for r in records]
        try:
            columns[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise ConnectError(
                f"source records: the {name}s do not fit one Arrow column "
                f"(mixed kinds such as bytes and str?): {error}"
            ) from error
    columns["headers"] = pa.array(
        [[{"key": k, "value": v} for k, v in r.headers] for r in records], HEADERS_TYPE
    )
    return pa.table(columns)


# -- helpers over arrays -----------------------------------------------------------


def _combined(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        if array.num_chunks == 1:
            return array.chunk(0)
        return array.combine_chunks()
    return array


def _as_binary(array: pa.Array | pa.ChunkedArray, converter: Converter) -> pa.Array:
    """The column as ``binary``: bytes as they are, text as UTF-8, nulls as nulls."""
    array = _combined(array)
    kind = array.type
    if pa.types.is_binary(kind):
        return array
    if pa.types.is_null(kind):
        return pa.nulls(len(array), pa.binary())
    if pa.types.is_dictionary(kind):
        return _as_binary(array.dictionary_decode(), converter)
    if (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
        or pa.types.is_string_view(kind)
        or pa.types.is_binary_view(kind)
    ):
        return array.cast(pa.binary())
    raise ConnectError(
        f"{type(converter).__name__} ({'key' if converter.is_key else 'value'}): "
        f"cannot store {kind} as bytes; use a converter for structured data (json, arrow)"
    )


def _binary_data(array: pa.Array) -> bytes | pa.Buffer:
    """The bytes of a binary array's values, end to end (no copy when unsliced)."""
    if len(array) == 0:
        return b""
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)[
        array.offset : array.offset + len(array) + 1
    ]
    return array.buffers()[2][int(offsets[0]) : int(offsets[-1])]


def _spread(values: pa.Array, valid: pa.Array) -> pa.Array:
    """``values`` (one per true of ``valid``) back at the true positions, nulls elsewhere."""
    if len(values) == len(valid):
        return values
    positions = pc.subtract(pc.cumulative_sum(valid.cast(pa.int64())), 1)
    return values.take(pc.if_else(valid, positions, pa.scalar(None, pa.int64())))


def _restore_nulls(text: pa.Array, original: pa.Array) -> pa.Array:
    """``text`` with the nulls of ``original`` (top-level nulls stay tombstones)."""
    if original.null_count == 0:
        return text
    return pc.if_else(original.is_null(), pa.scalar(None, text.type), text)


# -- JSON text from Arrow (vectorized) ---------------------------------------------

_ESCAPES = (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"))
_OTHER_CONTROL = "[\x00-\x08\x0b\x0c\x0e-\x1f]"


def _json_text(array: pa.Array, *, decimal_numeric: bool) -> pa.Array:
    """JSON text of each value (null -> ``null``), by Arrow compute over whole columns.

    Encodings are Kafka's ``JsonConverter``'s: timestamps as epoch milliseconds, dates
    as epoch days, times as milliseconds of the day, bytes as base64, decimals as base64
    of the unscaled value (or as numbers with ``decimal_numeric``), maps with string
    keys as objects and others as ``[[key, value], ...]``; NaN and infinities, which
    JSON cannot hold, as null.
    """
    kind = array.type
    if pa.types.is_null(kind):
        return pa.array(["null"] * len(array), pa.string())
    if pa.types.is_dictionary(kind):
        return _json_text(array.dictionary_decode(), decimal_numeric=decimal_numeric)
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
        pieces.append(_json_text(child, decimal_numeric=decimal_numeric))
    pieces.append("}")
    if len(pieces) == 2:
        text = pa.array(["{}"] * len(array), pa.string())
    else:
        text = pc.binary_join_element_wise(*pieces, "")
    return _restore_nulls(text, array)


def _list_text(array: pa.Array, decimal_numeric: bool) -> pa.Array:
    if pa.types.is_fixed_size_list(array.type):
        array = array.cast(pa.list_(array.type.value_type))
    if pa.types.is_large_list(array.type):
        array = array.cast(pa.list_(array.type.value_type))
    elements = _json_text(array.values, decimal_numeric=decimal_numeric)
    lists = pa.ListArray.from_arrays(array.offsets, elements, mask=array.is_null())
    joined = pc.binary_join(lists, ",")
    return _restore_nulls(pc.binary_join_element_wise("[", joined, "]", ""), array)


def _map_text(array: pa.MapArray, decimal_numeric: bool) -> pa.Array:
    keys = array.keys
    items = _json_text(array.items, decimal_numeric=decimal_numeric)
    if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
        entries = pc.binary_join_element_wise(_string_text(keys.cast(pa.string())), ":", items, "")
        opening, closing = "{", "}"
    else:
        key_text = _json_text(keys, decimal_numeric=decimal_numeric)
        entries = pc.binary_join_element_wise("[", key_text, ",", items, "]", "")
        opening, closing = "[", "]"
    lists = pa.ListArray.from_arrays(array.offsets, entries, mask=array.is_null())
    joined = pc.binary_join(lists, ",")
    return _restore_nulls(pc.binary_join_element_wise(opening, joined, closing, ""), array)


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
    lines = pc.replace_substring(pc.replace_substring(lines, b"\n", b" "), b"\r", b" ")
    joined = pc.binary_join_element_wise(lines, b"\n", b"")
    data = _binary_data(joined)
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


def _parse_json_values(present: pa.Array) -> pa.Array:
    """Schemaless JSON: each value wrapped as ``{"v": ...}`` so any JSON kind parses."""
    wrapped = pc.binary_join_element_wise(b'{"v":', present, b"}", b"")
    table = _read_lines(wrapped, None)
    if "v" not in table.column_names:
        raise ValueError("a stored value is empty")
    return _combined(table.column("v"))


def _parse_envelopes(present: pa.Array, decimal_numeric: bool) -> pa.Array:
    """``{"schema": ..., "payload": ...}`` values: the schema gives the Arrow type.

    The first value's schema is read with Python; when every value starts with the same
    schema text (the usual case: one producer, one schema) the payloads are parsed in
    one ``pyarrow.json`` call typed by it. Otherwise each distinct schema is read and
    their types unified (a batch across a schema change).
    """
    first = present[0].as_py()
    prefix, schema = _envelope_schema(first)
    if pc.all(pc.starts_with(present, prefix)).as_py():
        kind = arrow_type(schema) if schema is not None else None
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
        return _combined(table.column("payload"))
    physical = _physical(kind, decimal_numeric)
    table = _read_lines(present, pa.schema([("payload", physical)]))
    return _logical(_combined(table.column("payload")), kind)


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
    if pa.types.is_map(kind):
        raise ValueError("maps in a JSON schema are not read yet (pyarrow.json has no maps)")
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


__all__ = [
    "HEADERS_TYPE",
    "ArrowConverter",
    "ByteArrayConverter",
    "Converter",
    "DoubleConverter",
    "FloatConverter",
    "IntegerConverter",
    "JsonConverter",
    "LongConverter",
    "ShortConverter",
    "StringConverter",
    "arrow_type",
    "connect_schema",
    "converter_for",
    "source_records_table",
]
