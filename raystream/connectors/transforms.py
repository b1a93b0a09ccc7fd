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

The transforms (Kafka's names): InsertField, ReplaceField, MaskField, Cast,
ExtractField, HoistField, Flatten, TimestampConverter and HeaderFrom, each as ``$Key``
and ``$Value`` (the column they work on); ValueToKey, TimestampRouter, RegexRouter,
Filter, InsertHeader and DropHeaders; the predicates TopicNameMatches, HasHeaderKey and
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
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raystream.connectors.field_transforms import (
    Cast,
    ExtractField,
    Flatten,
    HeaderFrom,
    HoistField,
    InsertField,
    MaskField,
    ReplaceField,
    TimestampConverter,
    ValueToKey,
)
from raystream.connectors.transform_api import (
    KAFKA_PACKAGE,
    KAFKA_PREDICATES,
    Predicate,
    Transformation,
    appended_header,
    column,
    format_millis,
    headers_column,
    java_date_format,
    list_setting,
    with_column,
)
from raystream.errors import ConnectError, InvalidConfigError
from raystream.records import HEADERS_TYPE

__all__ = [
    "Cast",
    "DropHeaders",
    "ExtractField",
    "Filter",
    "Flatten",
    "HasHeaderKey",
    "HeaderFrom",
    "HoistField",
    "InsertField",
    "InsertHeader",
    "MaskField",
    "Predicate",
    "RecordIsTombstone",
    "RegexRouter",
    "ReplaceField",
    "TimestampConverter",
    "TimestampRouter",
    "TopicNameMatches",
    "Transformation",
    "ValueToKey",
    "apply_chain",
    "transforms_from_config",
]


# -- routers, filters and headers -------------------------------------------------------


class TimestampRouter(Transformation):
    """Routes each record to a topic named from its topic and timestamp (Kafka's
    ``topic.format``, default ``${topic}-${timestamp}``, and ``timestamp.format``, a
    Java date pattern, default ``yyyyMMdd``, in UTC)."""

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.topic_format = str(config.get("topic.format", "${topic}-${timestamp}"))
        self.timestamp_pieces = java_date_format(
            str(config.get("timestamp.format", "yyyyMMdd")), "timestamp.format"
        )

    def apply(self, batch: pa.Table) -> pa.Table:
        if batch.num_rows == 0:
            return batch
        timestamps = column(batch, "timestamp")
        if timestamps.null_count:
            raise ConnectError("TimestampRouter: a record has no timestamp")
        if pa.types.is_timestamp(timestamps.type):
            timestamps = timestamps.cast(pa.timestamp("ms"), safe=False)
        stamp = format_millis(timestamps.cast(pa.int64()), self.timestamp_pieces)
        topic = column(batch, "topic")
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
            routed = pa.repeat(pa.scalar(routed), batch.num_rows)
        return with_column(batch, "topic", routed)


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

        return with_column(batch, "topic", _map_distinct(column(batch, "topic"), rename))


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
        values = pa.repeat(pa.scalar(self.value, pa.binary()), batch.num_rows)
        return with_column(batch, "headers", appended_header(batch, self.header, values))


class DropHeaders(Transformation):
    """Removes the headers whose keys are in ``headers`` (Kafka's ``DropHeaders``)."""

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.names = list_setting(config, "headers")
        if not self.names:
            raise InvalidConfigError("headers: required (the header keys to drop)")

    def apply(self, batch: pa.Table) -> pa.Table:
        headers = headers_column(batch)
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
        return with_column(batch, "headers", kept.cast(HEADERS_TYPE))


# -- predicates -----------------------------------------------------------------------


class TopicNameMatches(Predicate):
    """Rows whose topic fully matches ``pattern`` (a regular expression)."""

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.pattern = _regex(config, "pattern")

    def test(self, batch: pa.Table) -> pa.Array:
        def matches(topic: str) -> bool:
            return self.pattern.fullmatch(topic) is not None

        return _map_distinct(column(batch, "topic"), matches, pa.bool_()).fill_null(False)


class HasHeaderKey(Predicate):
    """Rows with at least one header whose key is ``name``."""

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.name = str(config.get("name", ""))
        if not self.name:
            raise InvalidConfigError("name: required (the header key)")

    def test(self, batch: pa.Table) -> pa.Array:
        headers = headers_column(batch)
        entries = pc.list_flatten(headers)
        hits = pc.equal(pc.struct_field(entries, [0]), self.name).fill_null(False)
        rows = pc.list_parent_indices(headers).filter(hits)
        return pc.is_in(pa.array(np.arange(len(headers), dtype=np.int64)), rows.cast(pa.int64()))


class RecordIsTombstone(Predicate):
    """Rows whose value is null (a delete for a compacted topic)."""

    def test(self, batch: pa.Table) -> pa.Array:
        return column(batch, "value").is_null()


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
    HeaderFrom,
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
    for name in list_setting(config, "predicates"):
        prefix = f"predicates.{name}."
        kind = str(config.get(prefix + "type", "")).strip()
        if not kind:
            raise InvalidConfigError(f"{prefix}type: missing (predicate {name!r} is declared)")
        cls = _PREDICATES.get(kind.removeprefix(KAFKA_PREDICATES)) or _user_class(
            kind, prefix + "type", Predicate
        )
        predicates[name] = _configured(cls, _settings(config, prefix), prefix)
    chain: list[Transformation] = []
    for name in list_setting(config, "transforms"):
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


def _regex(config: Mapping[str, str], key: str) -> re.Pattern[str]:
    """A Java regular expression setting (named groups ``(?<name>...)`` included)."""
    text = config.get(key)
    if not text:
        raise InvalidConfigError(f"{key}: required (a regular expression)")
    try:
        return re.compile(re.sub(r"\(\?<(?![=!])", "(?P<", text))
    except re.error as error:
        raise InvalidConfigError(f"{key}={text!r}: not a regular expression ({error})") from error


def _map_distinct(
    column: pa.Array, fn: Callable[[str], Any], result_type: pa.DataType | None = None
) -> pa.Array:
    """``fn`` of each value, computed once per distinct value (topics are few)."""
    result_type = result_type or pa.string()
    encoded = column.dictionary_encode() if not pa.types.is_dictionary(column.type) else column
    mapped = pa.array([fn(v) for v in encoded.dictionary.to_pylist()], result_type)
    return mapped.take(encoded.indices)


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
