"""Kafka's field transforms on Arrow batches: InsertField, ReplaceField, MaskField, Cast,
ExtractField, HoistField, Flatten and TimestampConverter (each on the key or the value),
and ValueToKey.

A struct column is what Kafka calls a Struct: these transforms work on its fields with
Arrow compute over whole columns, and pass tombstones (null rows) through as Kafka's
do. Configured by :func:`raystream.connectors.transforms.transforms_from_config`.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from raystream.connectors.json_arrow import json_text, with_nulls_of
from raystream.connectors.transform_api import (
    MILLIS,
    KeyOrValueTransformation,
    Transformation,
    appended_header,
    column,
    format_millis,
    java_date_format,
    list_setting,
    struct_of,
    with_column,
    with_nulls,
)
from raystream.errors import ConnectError, InvalidConfigError


class InsertField(KeyOrValueTransformation):
    """Adds fields to a struct: the record's topic, partition, offset and timestamp, and a
    static text field (Kafka's ``topic.field``, ``partition.field``, ``offset.field``,
    ``timestamp.field``, ``static.field``, ``static.value``). A name ending in ``!`` is a
    required field (a record without the value fails), ``?`` or nothing optional.
    Tombstones pass unchanged."""

    _SOURCES = {
        "topic.field": ("topic", pa.string()),
        "partition.field": ("partition", pa.int32()),
        "offset.field": ("offset", pa.int64()),
        "timestamp.field": ("timestamp", pa.timestamp("ms")),
    }

    def __init__(self, config: Mapping[str, str], which: str = "value") -> None:
        super().__init__(config, which)
        self.fields: list[tuple[str, str, bool]] = []  # (config key, field name, required)
        for key in (*self._SOURCES, "static.field"):
            spec = str(config.get(key, "")).strip()
            if not spec:
                continue
            required = spec.endswith("!")
            name = spec.rstrip("!?")
            if not name:
                raise InvalidConfigError(f"{key}={spec!r}: a field name is needed")
            self.fields.append((key, name, required))
        if not self.fields:
            raise InvalidConfigError(
                "topic.field, partition.field, offset.field, timestamp.field or "
                "static.field: set at least one"
            )
        static = config.get("static.value")
        self.static_value = None if static is None else str(static)
        if config.get("static.field") and self.static_value is None:
            raise InvalidConfigError("static.value: required with static.field")

    def transform(self, array: pa.Array, batch: pa.Table) -> pa.Array:
        if not self._struct(array):
            return array
        additions: list[tuple[pa.Field, pa.Array]] = []
        for key, name, required in self.fields:
            if key == "static.field":
                values = pa.repeat(pa.scalar(self.static_value, pa.string()), len(array))
                kind = pa.string()
            else:
                source, kind = self._SOURCES[key]
                if source not in batch.column_names:
                    raise ConnectError(
                        f"InsertField {key}={name!r}: the batch has no {source} "
                        + ("(offsets are only for sink connectors)" if source == "offset" else "")
                    )
                values = column(batch, source).cast(kind)
            if required and pc.any(pc.and_(values.is_null(), array.is_valid())).as_py():
                raise ConnectError(f"InsertField {key}={name}!: a record has no {name}")
            additions.append((pa.field(name, kind, nullable=not required), values))
        return _set_fields(array, additions)


class ReplaceField(KeyOrValueTransformation):
    """Keeps, drops and renames struct fields (Kafka's ``include``, ``exclude`` and
    ``renames`` = ``old:new,...``; the older ``whitelist``/``blacklist`` too). A field
    is kept if ``include`` is empty or names it, and ``exclude`` does not."""

    def __init__(self, config: Mapping[str, str], which: str = "value") -> None:
        super().__init__(config, which)
        self.include = set(list_setting(config, "include") or list_setting(config, "whitelist"))
        self.exclude = set(list_setting(config, "exclude") or list_setting(config, "blacklist"))
        self.renames: dict[str, str] = {}
        for pair in list_setting(config, "renames"):
            old, sep, new = pair.partition(":")
            if not sep or not old.strip() or not new.strip():
                raise InvalidConfigError(f"renames={config['renames']!r}: expected old:new,...")
            self.renames[old.strip()] = new.strip()

    def transform(self, array: pa.Array, batch: pa.Table) -> pa.Array:
        if not self._struct(array):
            return array
        children, fields = [], []
        for index, field in enumerate(array.type):
            if (self.include and field.name not in self.include) or field.name in self.exclude:
                continue
            children.append(pc.struct_field(array, [index]))
            fields.append(field.with_name(self.renames.get(field.name, field.name)))
        return struct_of(children, fields, array)


class MaskField(KeyOrValueTransformation):
    """Replaces the values of ``fields`` with their type's null-equivalent (0, false, "",
    empty bytes, list or map, the epoch) or with ``replacement`` read as the field's
    type; null values stay null. Kafka's ``MaskField``."""

    def __init__(self, config: Mapping[str, str], which: str = "value") -> None:
        super().__init__(config, which)
        self.fields = list_setting(config, "fields")
        if not self.fields:
            raise InvalidConfigError("fields: required (the fields to mask)")
        self.replacement = config.get("replacement")
        if self.replacement is not None and self.replacement == "":
            raise InvalidConfigError("replacement: must not be empty (leave it out to mask)")

    def transform(self, array: pa.Array, batch: pa.Table) -> pa.Array:
        if not self._struct(array):
            return array
        names = [f.name for f in array.type]
        for name in self.fields:
            if name not in names:
                raise ConnectError(f"MaskField: the {self.which} has no field {name!r}")
        children = []
        for index, field in enumerate(array.type):
            child = pc.struct_field(array, [index])
            if field.name in self.fields:
                masked = self._mask_value(field)
                child = pc.if_else(child.is_null(), pa.scalar(None, field.type), masked)
            children.append(child)
        return struct_of(children, list(array.type), array)

    def _mask_value(self, field: pa.Field) -> pa.Scalar:
        kind = field.type
        if self.replacement is not None:
            if not (
                pa.types.is_integer(kind)
                or pa.types.is_floating(kind)
                or pa.types.is_decimal(kind)
                or pa.types.is_string(kind)
                or pa.types.is_large_string(kind)
            ):
                raise ConnectError(
                    f"MaskField: replacement is for numeric and text fields; {field.name} is {kind}"
                )
            try:
                return pa.scalar(self.replacement).cast(kind)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                raise ConnectError(
                    f"MaskField: replacement={self.replacement!r} is not a {kind} "
                    f"for field {field.name}"
                ) from error
        if pa.types.is_boolean(kind):
            return pa.scalar(False)
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
            return pa.scalar(0).cast(kind)
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return pa.scalar("", kind)
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            return pa.scalar(b"", kind)
        if pa.types.is_date(kind):
            return pa.scalar(0, pa.int32()).cast(kind)
        if pa.types.is_temporal(kind):
            return pa.scalar(0, pa.int64()).cast(kind)
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
            return pa.scalar([], kind)
        raise ConnectError(f"MaskField: cannot mask field {field.name} of type {kind}")


class Cast(KeyOrValueTransformation):
    """Casts fields (``spec=field:type,...``) or the whole key or value (``spec=type``) to
    int8..int64, float32, float64, boolean or string, as Kafka's ``Cast``: numbers
    narrow by truncation, a number is true when not 0, text parses, timestamps become
    epoch milliseconds or ISO-8601 text."""

    def __init__(self, config: Mapping[str, str], which: str = "value") -> None:
        super().__init__(config, which)
        spec = str(config.get("spec", "")).strip()
        if not spec:
            raise InvalidConfigError("spec: required (field:type,... or a type)")
        self.whole: pa.DataType | None = None
        self.fields: dict[str, pa.DataType] = {}
        for part in (p.strip() for p in spec.split(",")):
            name, sep, kind = part.rpartition(":")
            target = _CAST_TYPES.get(kind.strip().lower())
            if target is None:
                raise InvalidConfigError(
                    f"spec={spec!r}: {kind.strip()!r} is not one of {sorted(_CAST_TYPES)}"
                )
            if sep:
                self.fields[name.strip()] = target
            elif len(spec.split(",")) > 1:
                raise InvalidConfigError(f"spec={spec!r}: a whole-value cast stands alone")
            else:
                self.whole = target

    def transform(self, array: pa.Array, batch: pa.Table) -> pa.Array:
        if self.whole is not None:
            if pa.types.is_nested(array.type):
                raise ConnectError(f"Cast: cannot cast a {array.type} {self.which} as a whole")
            return _cast(array, self.whole, self.which)
        if not self._struct(array):
            return array
        children, fields = [], []
        for index, field in enumerate(array.type):
            child = pc.struct_field(array, [index])
            target = self.fields.get(field.name)
            if target is not None:
                child = _cast(child, target, field.name)
                field = field.with_type(target)
            children.append(child)
            fields.append(field)
        return struct_of(children, fields, array)


class ExtractField(KeyOrValueTransformation):
    """Replaces the struct with one of its fields (``field``; with
    ``field.syntax.version=V2`` a dotted path into nested structs). Kafka's
    ``ExtractField``."""

    def __init__(self, config: Mapping[str, str], which: str = "value") -> None:
        super().__init__(config, which)
        field = str(config.get("field", "")).strip()
        if not field:
            raise InvalidConfigError("field: required (the field to extract)")
        version = str(config.get("field.syntax.version", "V1")).upper()
        if version not in ("V1", "V2"):
            raise InvalidConfigError(f"field.syntax.version={version!r}: expected V1 or V2")
        self.path = field.split(".") if version == "V2" else [field]

    def transform(self, array: pa.Array, batch: pa.Table) -> pa.Array:
        for name in self.path:
            if not self._struct(array):
                return array
            names = [f.name for f in array.type]
            if name not in names:
                raise ConnectError(f"ExtractField: the {self.which} has no field {name!r}")
            array = pc.struct_field(array, [names.index(name)])
        return array


class HoistField(KeyOrValueTransformation):
    """Wraps the key or value into a struct with one field named ``field`` (Kafka's
    ``HoistField``; a null becomes a struct holding null, as Kafka's does)."""

    def __init__(self, config: Mapping[str, str], which: str = "value") -> None:
        super().__init__(config, which)
        self.field = str(config.get("field", "")).strip()
        if not self.field:
            raise InvalidConfigError("field: required (the name of the wrapping field)")

    def transform(self, array: pa.Array, batch: pa.Table) -> pa.Array:
        return pa.StructArray.from_arrays([array], names=[self.field])


class Flatten(KeyOrValueTransformation):
    """Flattens nested structs into top-level fields named by the path joined with
    ``delimiter`` (default ``.``), as Kafka's ``Flatten``; lists stay as they are."""

    def __init__(self, config: Mapping[str, str], which: str = "value") -> None:
        super().__init__(config, which)
        self.delimiter = str(config.get("delimiter", "."))

    def transform(self, array: pa.Array, batch: pa.Table) -> pa.Array:
        if not self._struct(array):
            return array
        children: list[pa.Array] = []
        fields: list[pa.Field] = []
        self._collect(array, "", children, fields)
        return struct_of(children, fields, array)

    def _collect(
        self, array: pa.Array, prefix: str, children: list[pa.Array], fields: list[pa.Field]
    ) -> None:
        for index, field in enumerate(array.type):
            child = pc.struct_field(array, [index])
            name = prefix + field.name
            if pa.types.is_struct(field.type):
                self._collect(child, name + self.delimiter, children, fields)
            else:
                children.append(child)
                fields.append(field.with_name(name))


class HeaderFrom(KeyOrValueTransformation):
    """Copies (``operation=copy``) or moves (``move``) struct ``fields`` into ``headers``
    of the same order (Kafka's ``HeaderFrom``). A header's value is the field's bytes,
    text as UTF-8, and anything else its JSON text (Kafka's default header converter
    writes text too); a null field, or a tombstone, gives a null header value."""

    def __init__(self, config: Mapping[str, str], which: str = "value") -> None:
        super().__init__(config, which)
        self.fields = list_setting(config, "fields")
        self.headers = list_setting(config, "headers")
        if not self.fields:
            raise InvalidConfigError("fields: required (the fields to copy into headers)")
        if len(self.headers) != len(self.fields):
            raise InvalidConfigError(
                f"headers={config.get('headers')!r}: one header per field of "
                f"fields={config.get('fields')!r}"
            )
        self.operation = str(config.get("operation", "")).strip().lower()
        if self.operation not in ("copy", "move"):
            raise InvalidConfigError(
                f"operation={config.get('operation')!r}: expected copy or move"
            )

    def apply(self, batch: pa.Table) -> pa.Table:
        array = column(batch, self.which)
        if not self._struct(array):
            return batch
        names = [f.name for f in array.type]
        for field, header in zip(self.fields, self.headers, strict=True):
            if field not in names:
                raise ConnectError(f"HeaderFrom: the {self.which} has no field {field!r}")
            values = _header_bytes(pc.struct_field(array, [names.index(field)]))
            batch = with_column(batch, "headers", appended_header(batch, header, values))
        return with_column(batch, self.which, self.transform(array, batch))

    def transform(self, array: pa.Array, batch: pa.Table) -> pa.Array:
        """The struct without the moved fields (unchanged for ``copy``)."""
        if self.operation == "copy":
            return array
        kept = [i for i, field in enumerate(array.type) if field.name not in self.fields]
        children = [pc.struct_field(array, [i]) for i in kept]
        return struct_of(children, [array.type.field(i) for i in kept], array)


class ValueToKey(Transformation):
    """Sets the key to a struct of the value's ``fields`` (Kafka's ``ValueToKey``); a
    tombstone gets a null key."""

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.fields = list_setting(config, "fields")
        if not self.fields:
            raise InvalidConfigError("fields: required (the value fields that make the key)")

    def apply(self, batch: pa.Table) -> pa.Table:
        value = column(batch, "value")
        if pa.types.is_null(value.type):
            return with_column(batch, "key", value)
        if not pa.types.is_struct(value.type):
            raise ConnectError(f"ValueToKey: the value is {value.type}, not a struct with fields")
        names = [f.name for f in value.type]
        children, fields = [], []
        for name in self.fields:
            if name not in names:
                raise ConnectError(f"ValueToKey: the value has no field {name!r}")
            index = names.index(name)
            children.append(pc.struct_field(value, [index]))
            fields.append(value.type.field(index))
        return with_column(batch, "key", struct_of(children, fields, value))


#: Per unix.precision: milliseconds per unit (positive) or units per millisecond (negative).
_UNIX_MILLIS = {"seconds": 1000, "milliseconds": 1, "microseconds": -1000, "nanoseconds": -1000_000}
_TIMESTAMP_TARGETS = ("string", "unix", "timestamp", "date", "time")


class TimestampConverter(KeyOrValueTransformation):
    """Converts a time between epoch numbers, text and Arrow's timestamp, date and time,
    as Kafka's ``TimestampConverter``: ``field`` (empty: the whole key or value),
    ``target.type`` (``string``, ``unix``, ``Timestamp``, ``Date`` or ``Time``),
    ``format`` (a Java date pattern, for text in or out; UTC) and ``unix.precision``
    (``seconds``, ``milliseconds`` (default), ``microseconds``, ``nanoseconds``).
    Through milliseconds, as Kafka's ``java.util.Date``."""

    def __init__(self, config: Mapping[str, str], which: str = "value") -> None:
        super().__init__(config, which)
        self.field = str(config.get("field", "")).strip()
        self.target = str(config.get("target.type", "")).strip().lower()
        if self.target not in _TIMESTAMP_TARGETS:
            raise InvalidConfigError(
                f"target.type={config.get('target.type')!r}: expected string, unix, "
                "Timestamp, Date or Time"
            )
        pattern = str(config.get("format", "")).strip()
        if self.target == "string" and not pattern:
            raise InvalidConfigError("format: required with target.type=string")
        self.pieces = java_date_format(pattern, "format") if pattern else []
        precision = str(config.get("unix.precision", "milliseconds")).strip().lower()
        if precision not in _UNIX_MILLIS:
            raise InvalidConfigError(
                f"unix.precision={precision!r}: expected one of {sorted(_UNIX_MILLIS)}"
            )
        self.scale = _UNIX_MILLIS[precision]

    def transform(self, array: pa.Array, batch: pa.Table) -> pa.Array:
        if not self.field:
            return self._convert(array, self.which)
        if not self._struct(array):
            return array
        names = [f.name for f in array.type]
        if self.field not in names:
            raise ConnectError(f"TimestampConverter: the {self.which} has no field {self.field!r}")
        children, fields = [], []
        for index, field in enumerate(array.type):
            child = pc.struct_field(array, [index])
            if field.name == self.field:
                child = self._convert(child, field.name)
                field = field.with_type(child.type)
            children.append(child)
            fields.append(field)
        return struct_of(children, fields, array)

    def _convert(self, array: pa.Array, what: str) -> pa.Array:
        if pa.types.is_null(array.type):
            return array
        millis = self._millis(array, what)
        if self.target == "unix":
            if self.scale > 0:
                return pc.floor(pc.divide(millis.cast(pa.float64()), self.scale)).cast(pa.int64())
            return pc.multiply(millis, -self.scale)
        if self.target == "string":
            return with_nulls(format_millis(millis.fill_null(0), self.pieces), millis)
        timestamps = millis.cast(pa.timestamp("ms"))
        if self.target == "date":
            return timestamps.cast(pa.date32())
        if self.target == "time":
            return timestamps.cast(pa.time32("ms"))
        return timestamps

    def _millis(self, array: pa.Array, what: str) -> pa.Array:
        """Epoch milliseconds (int64) of any of the forms a time comes in."""
        kind = array.type
        if pa.types.is_timestamp(kind):
            return array.cast(pa.timestamp("ms", kind.tz), safe=False).cast(pa.int64())
        if pa.types.is_date(kind):
            return array.cast(pa.timestamp("ms")).cast(pa.int64())
        if pa.types.is_time(kind):
            return array.cast(pa.time32("ms"), safe=False).cast(pa.int32()).cast(pa.int64())
        if pa.types.is_integer(kind) or pa.types.is_floating(kind):
            if self.scale > 0:
                return pc.multiply(array.cast(pa.int64(), safe=False), self.scale)
            return pc.floor(pc.divide(array.cast(pa.float64()), -self.scale)).cast(pa.int64())
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            if not self.pieces:
                raise ConnectError("TimestampConverter: format is needed to read text times")
            if MILLIS in self.pieces:
                raise ConnectError("TimestampConverter: text with SSS cannot be read yet")
            try:
                parsed = pc.strptime(array, format="".join(self.pieces), unit="ms")
            except pa.ArrowInvalid as error:
                raise ConnectError(f"TimestampConverter: {what}: {error}") from error
            return parsed.cast(pa.int64())
        raise ConnectError(f"TimestampConverter: {what} is {kind}, not a time")


_CAST_TYPES = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
}


def _header_bytes(values: pa.Array) -> pa.Array:
    """Header values of a field: bytes as they are, text as UTF-8, others as JSON text."""
    kind = values.type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_null(kind):
        return values.cast(pa.binary())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return values.cast(pa.binary())
    return with_nulls_of(json_text(values, decimal_numeric=True), values).cast(pa.binary())


def _set_fields(array: pa.Array, additions: list[tuple[pa.Field, pa.Array]]) -> pa.Array:
    names = {field.name: index for index, (field, _) in enumerate(additions)}
    children, fields = [], []
    for index, field in enumerate(array.type):
        if field.name not in names:
            children.append(pc.struct_field(array, [index]))
            fields.append(field)
    for field, values in additions:
        children.append(values)
        fields.append(field)
    return struct_of(children, fields, array)


def _cast(array: pa.Array, target: pa.DataType, what: str) -> pa.Array:
    """Kafka's Cast of one column (``what`` names it in errors)."""
    source = array.type
    try:
        if pa.types.is_timestamp(source):
            if target == pa.string():
                text = pc.strftime(array.cast(pa.timestamp("ms"), safe=False), "%Y-%m-%dT%H:%M:%S")
                return pc.binary_join_element_wise(text, "Z", "")
            array = array.cast(pa.timestamp("ms"), safe=False).cast(pa.int64())
        elif pa.types.is_date(source) or pa.types.is_time(source):
            array = array.cast(pa.timestamp("ms")) if pa.types.is_date(source) else array
            return _cast(array, target, what)
        if pa.types.is_boolean(target) and (
            pa.types.is_string(array.type) or pa.types.is_large_string(array.type)
        ):
            return pc.equal(pc.utf8_lower(array), "true")
        return array.cast(target, safe=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise ConnectError(
            f"Cast: {what} of type {source} cannot be cast to {target}: {error}"
        ) from error
