"""Single message transforms: Kafka Connect's SMTs, applied to whole Arrow batches.

A connector config chains transforms by Kafka's keys::

    transforms=addSource,route
    transforms.addSource.type=org.apache.kafka.connect.transforms.InsertField$Value
    transforms.addSource.static.field=source
    transforms.addSource.static.value=orders-db
    transforms.route.type=RegexRouter
    transforms.route.regex=(.*)-raw
    transforms.route.replacement=$1
    transforms.route.predicate=isRaw
    predicates=isRaw
    predicates.isRaw.type=TopicNameMatches
    predicates.isRaw.pattern=.*-raw

and :func:`transforms_from_config` turns them into :class:`Transformation` objects whose
``apply(batch)`` maps a sink or source batch (the shapes in the connector API's
docstring; ``key`` and ``value`` already connect data) to the next. Each transform is
Arrow compute over whole columns: a struct ``value`` is what Kafka calls a Struct, its
fields are the struct's fields, and a null row is a tombstone, which the field
transforms pass through as Kafka's do. Routers compute on the distinct topic names
only, not per record.

The transforms (Kafka's names; ``$Key``/``$Value`` pick the column):
InsertField, ReplaceField, MaskField, Cast, ExtractField, HoistField, Flatten,
TimestampConverter (each ``$Key`` and ``$Value``), ValueToKey, TimestampRouter, RegexRouter, Filter,
InsertHeader and DropHeaders; predicates TopicNameMatches, HasHeaderKey and
RecordIsTombstone. A type is Kafka's class name
(``org.apache.kafka.connect.transforms.Cast$Value``), its short name (``Cast$Value``),
or a dotted path to a :class:`Transformation` subclass of one's own.

A transform with a predicate applies to the rows the predicate selects (all others
pass unchanged, in their places); ``negate=true`` selects the others. Rows of one
column share one Arrow type, so a predicated transform that changes the type of the
rows it selects must give a type the untouched rows can be promoted to (added struct
fields are; a struct turned into a number is not, and fails with ConnectError).
"""

from __future__ import annotations

import functools
import importlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raystream.errors import ConnectError, InvalidConfigError, InvalidRequestError
from raystream.records import HEADERS_TYPE

KAFKA_PACKAGE = "org.apache.kafka.connect.transforms."
KAFKA_PREDICATES = KAFKA_PACKAGE + "predicates."


class Transformation(ABC):
    """One step of a transform chain (Kafka's ``Transformation``).

    Args:
        config: the transform's settings with the ``transforms.<name>.`` prefix removed
            (``type``, ``predicate`` and ``negate`` are the chain's, not the transform's).

    Subclasses validate ``config`` in ``__init__`` and raise ``InvalidConfigError``
    whose message starts with the bad key; :func:`transforms_from_config` prefixes it
    with ``transforms.<name>.``.
    """

    def __init__(self, config: Mapping[str, str]) -> None:
        self.config = dict(config)

    @abstractmethod
    def apply(self, batch: pa.Table) -> pa.Table:
        """The batch after this transform: same columns, rows possibly dropped (Filter) or
        with a changed ``key``, ``value``, ``topic`` or ``headers``; order kept."""

    @property
    def class_name(self) -> str:
        """Kafka's class name for Kafka's transforms (``...transforms.Cast$Value``), else
        the class's dotted path: what the dead letter queue's headers name."""
        cls = type(self)
        if cls.__module__ == __name__ and not cls.__name__.startswith("_"):
            which = getattr(self, "which", None)
            return f"{KAFKA_PACKAGE}{cls.__name__}" + (f"${which.title()}" if which else "")
        return f"{cls.__module__}.{cls.__qualname__}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"


class Predicate(ABC):
    """A condition on rows (Kafka's ``Predicate``), for ``transforms.<name>.predicate``."""

    def __init__(self, config: Mapping[str, str]) -> None:
        self.config = dict(config)

    @abstractmethod
    def test(self, batch: pa.Table) -> pa.Array:
        """One boolean per row (no nulls): whether the row matches."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"


class _KeyOrValue(Transformation):
    """A transform of the ``key`` or the ``value`` column (Kafka's ``$Key``/``$Value``)."""

    def __init__(self, config: Mapping[str, str], which: str = "value") -> None:
        super().__init__(config)
        if which not in ("key", "value"):
            raise InvalidRequestError(f"which={which!r}: expected 'key' or 'value'")
        self.which = which

    def apply(self, batch: pa.Table) -> pa.Table:
        return _with_column(batch, self.which, self.transform(_column(batch, self.which), batch))

    @abstractmethod
    def transform(self, array: pa.Array, batch: pa.Table) -> pa.Array:
        """The new key or value column."""

    def _struct(self, array: pa.Array) -> bool:
        """Whether ``array`` is a struct column to work on (False: all null, pass through).

        Raises:
            ConnectError: a column of another kind, which has no fields.
        """
        if pa.types.is_struct(array.type):
            return True
        if pa.types.is_null(array.type):
            return False
        raise ConnectError(
            f"{type(self).__name__}${self.which.title()}: the {self.which} is {array.type}, "
            "not a struct with fields; read the topic with a converter that gives "
            "structured data (json, arrow)"
        )


# -- field transforms -----------------------------------------------------------------


class InsertField(_KeyOrValue):
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
        self.static_value = config.get("static.value")
        if config.get("static.field") and self.static_value is None:
            raise InvalidConfigError("static.value: required with static.field")

    def transform(self, array: pa.Array, batch: pa.Table) -> pa.Array:
        if not self._struct(array):
            return array
        additions: list[tuple[pa.Field, pa.Array]] = []
        for key, name, required in self.fields:
            if key == "static.field":
                values = pa.array([self.static_value] * len(array), pa.string())
                kind = pa.string()
            else:
                column, kind = self._SOURCES[key]
                if column not in batch.column_names:
                    raise ConnectError(
                        f"InsertField {key}={name!r}: the batch has no {column} "
                        + ("(offsets are only for sink connectors)" if column == "offset" else "")
                    )
                values = _column(batch, column).cast(kind)
            if required and pc.any(pc.and_(values.is_null(), array.is_valid())).as_py():
                raise ConnectError(f"InsertField {key}={name}!: a record has no {name}")
            additions.append((pa.field(name, kind, nullable=not required), values))
        return _set_fields(array, additions)


class ReplaceField(_KeyOrValue):
    """Keeps, drops and renames struct fields (Kafka's ``include``, ``exclude`` and
    ``renames`` = ``old:new,...``; the older ``whitelist``/``blacklist`` too). A field
    is kept if ``include`` is empty or names it, and ``exclude`` does not."""

    def __init__(self, config: Mapping[str, str], which: str = "value") -> None:
        super().__init__(config, which)
        self.include = set(_names(config, "include") or _names(config, "whitelist"))
        self.exclude = set(_names(config, "exclude") or _names(config, "blacklist"))
        self.renames: dict[str, str] = {}
        for pair in _names(config, "renames"):
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
        return _struct_of(children, fields, array)


class MaskField(_KeyOrValue):
    """Replaces the values of ``fields`` with their type's null-equivalent (0, false, "",
    empty bytes, list or map, the epoch) or with ``replacement`` read as the field's
    type; null values stay null. Kafka's ``MaskField``."""

    def __init__(self, config: Mapping[str, str], which: str = "value") -> None:
        super().__init__(config, which)
        self.fields = _names(config, "fields")
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
        return _struct_of(children, list(array.type), array)

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


class Cast(_KeyOrValue):
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
        return _struct_of(children, fields, array)


class ExtractField(_KeyOrValue):
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


class HoistField(_KeyOrValue):
    """Wraps the key or value into a struct with one field named ``field`` (Kafka's
    ``HoistField``; a null becomes a struct holding null, as Kafka's does)."""

    def __init__(self, config: Mapping[str, str], which: str = "value") -> None:
        super().__init__(config, which)
        self.field = str(config.get("field", "")).strip()
        if not self.field:
            raise InvalidConfigError("field: required (the name of the wrapping field)")

    def transform(self, array: pa.Array, batch: pa.Table) -> pa.Array:
        return pa.StructArray.from_arrays([array], names=[self.field])


class Flatten(_KeyOrValue):
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
        return _struct_of(children, fields, array)

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


class ValueToKey(Transformation):
    """Sets the key to a struct of the value's ``fields`` (Kafka's ``ValueToKey``); a
    tombstone gets a null key."""

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.fields = _names(config, "fields")
        if not self.fields:
            raise InvalidConfigError("fields: required (the value fields that make the key)")

    def apply(self, batch: pa.Table) -> pa.Table:
        value = _column(batch, "value")
        if pa.types.is_null(value.type):
            return _with_column(batch, "key", value)
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
        return _with_column(batch, "key", _struct_of(children, fields, value))


# -- routers and filters --------------------------------------------------------------


class TimestampRouter(Transformation):
    """Routes each record to a topic named from its topic and timestamp (Kafka's
    ``topic.format``, default ``${topic}-${timestamp}``, and ``timestamp.format``, a
    Java date pattern, default ``yyyyMMdd``, in UTC)."""

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.topic_format = str(config.get("topic.format", "${topic}-${timestamp}"))
        self.timestamp_pieces = _java_date_format(
            str(config.get("timestamp.format", "yyyyMMdd")), "timestamp.format"
        )

    def apply(self, batch: pa.Table) -> pa.Table:
        if batch.num_rows == 0:
            return batch
        timestamps = _column(batch, "timestamp")
        if timestamps.null_count:
            raise ConnectError("TimestampRouter: a record has no timestamp")
        if pa.types.is_timestamp(timestamps.type):
            timestamps = timestamps.cast(pa.timestamp("ms"), safe=False)
        stamp = _format_millis(timestamps.cast(pa.int64()), self.timestamp_pieces)
        topic = _column(batch, "topic")
        pieces: list[Any] = []
        for literal, token in _template(self.topic_format):
            if literal:
                pieces.append(literal)
            if token == "topic":
                pieces.append(topic)
            elif token == "timestamp":
                pieces.append(stamp)
        routed = pc.binary_join_element_wise(*pieces, "") if len(pieces) > 1 else pieces[0]
        if isinstance(routed, str):
            routed = pa.array([routed] * batch.num_rows, pa.string())
        return _with_column(batch, "topic", routed)


#: Per unix.precision: milliseconds per unit (positive) or units per millisecond (negative).
_UNIX_MILLIS = {"seconds": 1000, "milliseconds": 1, "microseconds": -1000, "nanoseconds": -1000_000}
_TIMESTAMP_TARGETS = ("string", "unix", "timestamp", "date", "time")


class TimestampConverter(_KeyOrValue):
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
        self.pieces = _java_date_format(pattern, "format") if pattern else []
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
        return _struct_of(children, fields, array)

    def _convert(self, array: pa.Array, what: str) -> pa.Array:
        if pa.types.is_null(array.type):
            return array
        millis = self._millis(array, what)
        if self.target == "unix":
            if self.scale > 0:
                return pc.floor(pc.divide(millis.cast(pa.float64()), self.scale)).cast(pa.int64())
            return pc.multiply(millis, -self.scale)
        if self.target == "string":
            return _with_nulls(_format_millis(millis.fill_null(0), self.pieces), millis)
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
            if _MILLIS in self.pieces:
                raise ConnectError("TimestampConverter: text with SSS cannot be read yet")
            try:
                parsed = pc.strptime(array, format="".join(self.pieces), unit="ms")
            except pa.ArrowInvalid as error:
                raise ConnectError(f"TimestampConverter: {what}: {error}") from error
            return parsed.cast(pa.int64())
        raise ConnectError(f"TimestampConverter: {what} is {kind}, not a time")


class RegexRouter(Transformation):
    """Renames topics that fully match ``regex`` to ``replacement`` (``$1`` refers to a
    group, as in Java); other topics stay. Kafka's ``RegexRouter``."""

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.regex = _regex(config, "regex")
        if "replacement" not in config:
            raise InvalidConfigError("replacement: required")
        self.replacement = _java_replacement(str(config["replacement"]))

    def apply(self, batch: pa.Table) -> pa.Table:
        def rename(topic: str) -> str:
            match = self.regex.fullmatch(topic)
            return match.expand(self.replacement) if match else topic

        return _with_column(batch, "topic", _map_distinct(_column(batch, "topic"), rename))


class Filter(Transformation):
    """Drops records: all of them alone, and with a predicate those it matches (Kafka's
    ``Filter``; ``negate=true`` drops the others)."""

    def apply(self, batch: pa.Table) -> pa.Table:
        return batch.slice(0, 0)


class InsertHeader(Transformation):
    """Adds the header ``header`` with the text ``value.literal`` to every record."""

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.header = str(config.get("header", "")).strip()
        if not self.header:
            raise InvalidConfigError("header: required (the header's key)")
        if "value.literal" not in config:
            raise InvalidConfigError("value.literal: required (the header's value)")
        self.value = str(config["value.literal"]).encode()

    def apply(self, batch: pa.Table) -> pa.Table:
        headers = _headers(batch)
        rows = batch.num_rows
        entries = pc.list_flatten(headers)
        lengths = pc.fill_null(pc.list_value_length(headers), 0).cast(pa.int64())
        added = pa.StructArray.from_arrays(
            [pa.array([self.header] * rows, pa.string()), pa.array([self.value] * rows)],
            fields=list(HEADERS_TYPE.value_type),
        )
        # In the new values, old entry j of row p moves to j + p (one added header
        # before it per earlier row); row i's added header goes to end_i + i.
        ends = pc.cumulative_sum(lengths)
        rows_before = pc.list_parent_indices(headers).cast(pa.int64())
        positions = pa.concat_arrays(
            [
                pc.add(pa.array(range(len(entries)), pa.int64()), rows_before),
                pc.add(ends, pa.array(range(rows), pa.int64())),
            ]
        )
        values = pa.concat_arrays([entries.cast(HEADERS_TYPE.value_type), added])
        offsets = pa.concat_arrays(
            [pa.array([0], pa.int64()), pc.cumulative_sum(pc.add(lengths, 1))]
        ).cast(pa.int32())
        ordered = values.take(pc.sort_indices(positions))
        return _with_column(batch, "headers", pa.ListArray.from_arrays(offsets, ordered))


class DropHeaders(Transformation):
    """Removes the headers whose keys are in ``headers`` (Kafka's ``DropHeaders``)."""

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.names = _names(config, "headers")
        if not self.names:
            raise InvalidConfigError("headers: required (the header keys to drop)")

    def apply(self, batch: pa.Table) -> pa.Table:
        headers = _headers(batch)
        entries = pc.list_flatten(headers)
        keep = pc.invert(pc.is_in(pc.struct_field(entries, [0]), pa.array(self.names)))
        parents = pc.list_parent_indices(headers).filter(keep).to_numpy(zero_copy_only=False)
        per_row = np.bincount(parents, minlength=len(headers))
        offsets = pa.array(np.concatenate([[0], per_row.cumsum()]), pa.int32())
        kept = pa.ListArray.from_arrays(
            offsets,
            entries.filter(keep),
            mask=headers.is_null() if headers.null_count else None,
        )
        return _with_column(batch, "headers", kept.cast(HEADERS_TYPE))


# -- predicates -----------------------------------------------------------------------


class TopicNameMatches(Predicate):
    """Rows whose topic fully matches ``pattern`` (a regular expression)."""

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.pattern = _regex(config, "pattern")

    def test(self, batch: pa.Table) -> pa.Array:
        def matches(topic: str) -> bool:
            return self.pattern.fullmatch(topic) is not None

        return _map_distinct(_column(batch, "topic"), matches, pa.bool_()).fill_null(False)


class HasHeaderKey(Predicate):
    """Rows with at least one header whose key is ``name``."""

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.name = str(config.get("name", ""))
        if not self.name:
            raise InvalidConfigError("name: required (the header key)")

    def test(self, batch: pa.Table) -> pa.Array:
        headers = _headers(batch)
        entries = pc.list_flatten(headers)
        hits = pc.equal(pc.struct_field(entries, [0]), self.name).fill_null(False)
        rows = pc.list_parent_indices(headers).filter(hits)
        return pc.is_in(pa.array(range(len(headers)), pa.int64()), rows.cast(pa.int64()))


class RecordIsTombstone(Predicate):
    """Rows whose value is null (a delete for a compacted topic)."""

    def test(self, batch: pa.Table) -> pa.Array:
        return _column(batch, "value").is_null()


class _Predicated(Transformation):
    """A transform applied only to the rows its predicate selects (xor ``negate``)."""

    def __init__(self, inner: Transformation, predicate: Predicate, negate: bool) -> None:
        super().__init__(inner.config)
        self.inner = inner
        self.predicate = predicate
        self.negate = negate

    def apply(self, batch: pa.Table) -> pa.Table:
        selected = self.predicate.test(batch)
        if self.negate:
            selected = pc.invert(selected)
        if isinstance(self.inner, Filter):
            return batch.filter(pc.invert(selected))
        count = pc.sum(selected.cast(pa.int64())).as_py() or 0
        if count == batch.num_rows:
            return self.inner.apply(batch)
        if count == 0:
            return batch
        changed = self.inner.apply(batch.filter(selected))
        if changed.num_rows != count:
            raise ConnectError(
                f"{type(self.inner).__name__} under a predicate changed the number of rows; "
                "only Filter may drop rows there"
            )
        kept = batch.filter(pc.invert(selected))
        try:  # a column the transform added is null in the rows it did not touch
            merged = pa.concat_tables([changed, kept], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise ConnectError(
                f"{type(self.inner).__name__} under a predicate gives rows of a type the "
                f"others cannot share: {error}"
            ) from error
        positions = pa.concat_arrays(
            [pc.indices_nonzero(selected), pc.indices_nonzero(pc.invert(selected))]
        )
        return merged.take(pc.sort_indices(positions))

    @property
    def class_name(self) -> str:
        return self.inner.class_name

    def __repr__(self) -> str:
        return f"{self.inner!r} if {'not ' if self.negate else ''}{self.predicate!r}"


# -- the chain from a connector config ------------------------------------------------

_KEYED = (
    InsertField,
    ReplaceField,
    MaskField,
    Cast,
    ExtractField,
    HoistField,
    Flatten,
    TimestampConverter,
)
_TRANSFORMS: dict[str, Callable[[Mapping[str, str]], Transformation]] = {}
for _cls in _KEYED:
    _TRANSFORMS[f"{_cls.__name__}$Key"] = functools.partial(_cls, which="key")
    _TRANSFORMS[f"{_cls.__name__}$Value"] = functools.partial(_cls, which="value")
for _cls in (ValueToKey, TimestampRouter, RegexRouter, Filter, InsertHeader, DropHeaders):
    _TRANSFORMS[_cls.__name__] = _cls
_PREDICATES: dict[str, type[Predicate]] = {
    cls.__name__: cls for cls in (TopicNameMatches, HasHeaderKey, RecordIsTombstone)
}


def transforms_from_config(config: Mapping[str, str]) -> list[Transformation]:
    """The transform chain a connector config defines, in ``transforms`` order.

    Raises:
        InvalidConfigError: an unknown type, a missing or bad setting, or a predicate
            that is not declared, naming the key (``transforms.route.regex``).
    """
    predicates: dict[str, Predicate] = {}
    for name in _names(config, "predicates"):
        prefix = f"predicates.{name}."
        kind = str(config.get(prefix + "type", "")).strip()
        if not kind:
            raise InvalidConfigError(f"{prefix}type: missing (predicate {name!r} is declared)")
        cls = _PREDICATES.get(kind.removeprefix(KAFKA_PREDICATES)) or _user_class(
            kind, prefix + "type", Predicate
        )
        predicates[name] = _configured(cls, _settings(config, prefix), prefix)
    chain: list[Transformation] = []
    for name in _names(config, "transforms"):
        prefix = f"transforms.{name}."
        kind = str(config.get(prefix + "type", "")).strip()
        if not kind:
            raise InvalidConfigError(f"{prefix}type: missing (transform {name!r} is listed)")
        factory = _TRANSFORMS.get(kind.removeprefix(KAFKA_PACKAGE)) or _user_class(
            kind, prefix + "type", Transformation
        )
        settings = _settings(config, prefix)
        transform = _configured(factory, settings, prefix)
        predicate_name = str(config.get(prefix + "predicate", "")).strip()
        negate = str(config.get(prefix + "negate", "false")).strip().lower()
        if negate not in ("true", "false"):
            raise InvalidConfigError(f"{prefix}negate={negate!r}: expected true or false")
        if predicate_name:
            if predicate_name not in predicates:
                raise InvalidConfigError(
                    f"{prefix}predicate={predicate_name!r}: not declared in predicates"
                )
            transform = _Predicated(transform, predicates[predicate_name], negate == "true")
        elif negate == "true":
            raise InvalidConfigError(f"{prefix}negate: needs {prefix}predicate")
        chain.append(transform)
    return chain


def apply_chain(chain: list[Transformation], batch: pa.Table) -> pa.Table:
    """``batch`` through each transform of ``chain`` in turn (stopping once it is empty)."""
    for transform in chain:
        if batch.num_rows == 0:
            break
        batch = transform.apply(batch)
    return batch


def _settings(config: Mapping[str, str], prefix: str) -> dict[str, str]:
    chain_keys = ("type", "predicate", "negate")
    return {
        key[len(prefix) :]: str(value)
        for key, value in config.items()
        if key.startswith(prefix) and key[len(prefix) :] not in chain_keys
    }


def _configured(
    factory: Callable[[Mapping[str, str]], Any], settings: dict[str, str], prefix: str
) -> Any:
    try:
        return factory(settings)
    except InvalidConfigError as error:
        raise InvalidConfigError(f"{prefix}{error}") from error


def _user_class(path: str, key: str, base: type) -> Any:
    module_name, _, attribute = path.rpartition(".")
    if not module_name or "$" in path:
        raise InvalidConfigError(f"{key}={path!r}: unknown {base.__name__}")
    try:
        cls = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise InvalidConfigError(f"{key}={path!r}: unknown {base.__name__} ({error})") from error
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise InvalidConfigError(f"{key}={path!r} is not a {base.__name__}")
    return cls


# -- helpers --------------------------------------------------------------------------


def _names(config: Mapping[str, str], key: str) -> list[str]:
    """A comma-separated list setting, blanks dropped."""
    return [part.strip() for part in str(config.get(key, "")).split(",") if part.strip()]


def _regex(config: Mapping[str, str], key: str) -> re.Pattern[str]:
    """A Java regular expression setting (named groups ``(?<name>...)`` included)."""
    text = config.get(key)
    if not text:
        raise InvalidConfigError(f"{key}: required (a regular expression)")
    try:
        return re.compile(re.sub(r"\(\?<(?![=!])", "(?P<", text))
    except re.error as error:
        raise InvalidConfigError(f"{key}={text!r}: not a regular expression ({error})") from error


def _column(batch: pa.Table, name: str) -> pa.Array:
    """A column as one array; an absent key or timestamp reads as nulls."""
    if name not in batch.column_names:
        if name in ("key", "timestamp"):
            return pa.nulls(batch.num_rows)
        raise ConnectError(f"the batch has no {name} column")
    column = batch.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _headers(batch: pa.Table) -> pa.Array:
    if "headers" not in batch.column_names:
        return pa.array([[]] * batch.num_rows, HEADERS_TYPE)
    headers = _column(batch, "headers")
    return headers if headers.type == HEADERS_TYPE else headers.cast(HEADERS_TYPE)


def _with_column(batch: pa.Table, name: str, array: pa.Array) -> pa.Table:
    if name in batch.column_names:
        return batch.set_column(batch.column_names.index(name), name, array)
    return batch.append_column(name, array)


def _struct_of(children: list[pa.Array], fields: list[pa.Field], like: pa.Array) -> pa.Array:
    """A struct of ``children`` with the row nulls (tombstones) of ``like``."""
    if not children:
        return pa.array(
            [None if null else {} for null in like.is_null().to_pylist()], pa.struct([])
        )
    mask = like.is_null() if like.null_count else None
    return pa.StructArray.from_arrays(children, fields=fields, mask=mask)


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
    return _struct_of(children, fields, array)


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


def _with_nulls(values: pa.Array, like: pa.Array) -> pa.Array:
    """``values`` with nulls where ``like`` has them."""
    if like.null_count == 0:
        return values
    return pc.if_else(like.is_null(), pa.scalar(None, values.type), values)


def _format_millis(millis: pa.Array, pieces: list[str]) -> pa.Array:
    """Epoch milliseconds as text in UTC (``pieces`` from :func:`_java_date_format`),
    each distinct second formatted once: a batch spans few of them."""
    seconds = pc.floor(pc.divide(millis.cast(pa.float64()), 1000)).cast(pa.int64())
    distinct = seconds.dictionary_encode()
    instants = distinct.dictionary.cast(pa.timestamp("s", "UTC"))
    parts: list[Any] = []
    for piece in pieces:
        if piece == _MILLIS:
            fraction = pc.subtract(millis, pc.multiply(seconds, 1000))
            parts.append(pc.utf8_lpad(fraction.cast(pa.string()), 3, "0"))
        else:
            text = pc.strftime(instants, format=piece, locale="C")
            parts.append(text.take(distinct.indices))
    return pc.binary_join_element_wise(*parts, "") if len(parts) > 1 else parts[0]


def _map_distinct(
    column: pa.Array, fn: Callable[[str], Any], result_type: pa.DataType | None = None
) -> pa.Array:
    """``fn`` of each value, computed once per distinct value (topics are few)."""
    result_type = result_type or pa.string()
    encoded = column.dictionary_encode() if not pa.types.is_dictionary(column.type) else column
    mapped = pa.array([fn(v) for v in encoded.dictionary.to_pylist()], result_type)
    return mapped.take(encoded.indices)


_MILLIS = "\x00millis"

_JAVA_DATE = {
    "yyyy": "%Y",
    "yyy": "%Y",
    "y": "%Y",
    "yy": "%y",
    "MM": "%m",
    "M": "%m",
    "MMM": "%b",
    "MMMM": "%B",
    "dd": "%d",
    "d": "%d",
    "HH": "%H",
    "H": "%H",
    "hh": "%I",
    "h": "%I",
    "mm": "%M",
    "m": "%M",
    "ss": "%S",
    "s": "%S",
    "a": "%p",
    "EEE": "%a",
    "E": "%a",
    "EEEE": "%A",
    "DDD": "%j",
    "Z": "%z",
    "z": "%Z",
}


def _java_date_format(pattern: str, key: str) -> list[str]:
    """A Java ``SimpleDateFormat`` pattern as strftime formats and millisecond markers.

    Example: ``yyyy-MM-dd'T'HH:mm:ss.SSS`` -> ``["%Y-%m-%dT%H:%M:%S.", MILLIS]``.
    """
    pieces: list[str] = []
    current = ""
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "'":
            end = pattern.find("'", index + 1)
            if end < 0:
                raise InvalidConfigError(f"{key}={pattern!r}: an unclosed quote")
            current += (pattern[index + 1 : end] or "'").replace("%", "%%")
            index = end + 1
            continue
        if char.isalpha():
            run = index
            while run < len(pattern) and pattern[run] == char:
                run += 1
            token = pattern[index:run]
            index = run
            if char == "S":
                if len(token) != 3:
                    raise InvalidConfigError(f"{key}={pattern!r}: milliseconds are SSS")
                pieces.append(current)
                pieces.append(_MILLIS)
                current = ""
                continue
            if token not in _JAVA_DATE:
                raise InvalidConfigError(f"{key}={pattern!r}: {token!r} is not supported")
            current += _JAVA_DATE[token]
            continue
        current += "%%" if char == "%" else char
        index += 1
    pieces.append(current)
    pieces = [piece for piece in pieces if piece]
    if not pieces:
        raise InvalidConfigError(f"{key}={pattern!r}: an empty date format")
    return pieces


def _template(text: str) -> list[tuple[str, str | None]]:
    """``a-${topic}-${timestamp}`` -> [("a-", "topic"), ("-", "timestamp")]."""
    parts: list[tuple[str, str | None]] = []
    position = 0
    for match in re.finditer(r"\$\{(topic|timestamp)\}", text):
        parts.append((text[position : match.start()], match.group(1)))
        position = match.end()
    if position < len(text):
        parts.append((text[position:], None))
    return parts


def _java_replacement(text: str) -> str:
    """A Java ``Matcher`` replacement (``$1``, ``${name}``, ``\\$``) as a Python template."""
    out = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            out.append(text[index + 1].replace("\\", "\\\\"))
            index += 2
        elif char == "$":
            named = re.match(r"\$\{(\w+)\}", text[index:])
            numbered = re.match(r"\$(\d+)", text[index:])
            if named:
                out.append(f"\\g<{named.group(1)}>")
                index += named.end()
            elif numbered:
                out.append(f"\\g<{numbered.group(1)}>")
                index += numbered.end()
            else:
                raise InvalidConfigError(f"replacement={text!r}: a $ without a group")
        else:
            out.append("\\\\" if char == "\\" else char)
            index += 1
    return "".join(out)
