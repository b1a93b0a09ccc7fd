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
arrow      raystream.connectors.converters.ArrowConverter                  the topic's typed columns
int16 ..   org.apache.kafka.connect.converters.{Short,Integer,Long,     a number (big-endian
float64    Float,Double}Converter                                       bytes, as Kafka's)
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

import importlib
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raystream.connectors.api import SourceRecord
from raystream.connectors.json_arrow import (
    arrow_type,
    binary_data,
    connect_schema,
    json_text,
    parse_envelopes,
    parse_json_values,
    with_nulls_of,
)
from raystream.errors import ConnectError, InvalidConfigError
from raystream.records import HEADERS_TYPE


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
        text = json_text(array, decimal_numeric=True)
        return with_nulls_of(text, array).cast(pa.binary())


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
                parsed = parse_envelopes(present, self.decimal_numeric)
            else:
                parsed = parse_json_values(present)
        except (pa.ArrowInvalid, ValueError, TypeError, KeyError) as error:
            raise ConnectError(f"JsonConverter: cannot read the stored JSON: {error}") from error
        return _spread(parsed, valid)

    def from_connect(self, array: pa.Array) -> pa.Array:
        array = _combined(array)
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        payload = json_text(array, decimal_numeric=self.decimal_numeric or not self.schemas_enable)
        if self.schemas_enable:
            schema = json.dumps(connect_schema(array.type), separators=(",", ":"))
            payload = pc.binary_join_element_wise(
                f'{{"schema":{schema},"payload":', payload, "}", ""
            )
        return with_nulls_of(payload, array).cast(pa.binary())


class ArrowConverter(Converter):
    """Typed topics: the value is the struct of the topic's columns already; the identity."""

    class_name = "raystream.connectors.converters.ArrowConverter"

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
        data = binary_data(present)
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


def _spread(values: pa.Array, valid: pa.Array) -> pa.Array:
    """``values`` (one per true of ``valid``) back at the true positions, nulls elsewhere."""
    if len(values) == len(valid):
        return values
    positions = pc.subtract(pc.cumulative_sum(valid.cast(pa.int64())), 1)
    return values.take(pc.if_else(valid, positions, pa.scalar(None, pa.int64())))


__all__ = [
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
