"""The base of raystream's single message transforms: the classes a transform derives
from and the column helpers the built-in ones share.

A transform maps an Arrow batch (the connector API's sink or source batch, ``key`` and
``value`` already connect data) to the next; :mod:`raystream.connectors.transforms` builds
chains of them from a connector config. Kafka's ``$Key``/``$Value`` variants are one
class here with ``which`` naming the column (:class:`KeyOrValueTransformation`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raystream.errors import ConnectError, InvalidConfigError, InvalidRequestError
from raystream.records import HEADERS_TYPE

KAFKA_PACKAGE = "org.apache.kafka.connect.transforms."
KAFKA_PREDICATES = KAFKA_PACKAGE + "predicates."
#: Modules whose public transforms are Kafka's (their class names are Kafka's).
KAFKA_MODULES = ("raystream.connectors.transforms", "raystream.connectors.field_transforms")


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
        if cls.__module__ in KAFKA_MODULES and not cls.__name__.startswith("_"):
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


class KeyOrValueTransformation(Transformation):
    """A transform of the ``key`` or the ``value`` column (Kafka's ``$Key``/``$Value``)."""

    def __init__(self, config: Mapping[str, str], which: str = "value") -> None:
        super().__init__(config)
        if which not in ("key", "value"):
            raise InvalidRequestError(f"which={which!r}: expected 'key' or 'value'")
        self.which = which

    def apply(self, batch: pa.Table) -> pa.Table:
        return with_column(batch, self.which, self.transform(column(batch, self.which), batch))

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


# -- helpers over batches and columns ------------------------------------------------


def list_setting(config: Mapping[str, str], key: str) -> list[str]:
    """A comma-separated list setting, blanks dropped."""
    return [part.strip() for part in str(config.get(key, "")).split(",") if part.strip()]


def column(batch: pa.Table, name: str) -> pa.Array:
    """A column as one array; an absent key or timestamp reads as nulls."""
    if name not in batch.column_names:
        if name in ("key", "timestamp"):
            return pa.nulls(batch.num_rows)
        raise ConnectError(f"the batch has no {name} column")
    chunked = batch.column(name)
    return chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()


def headers_column(batch: pa.Table) -> pa.Array:
    """The ``headers`` column as one list array (empty lists when the batch has none)."""
    if "headers" not in batch.column_names:
        return pa.array([[]] * batch.num_rows, HEADERS_TYPE)
    headers = column(batch, "headers")
    return headers if headers.type == HEADERS_TYPE else headers.cast(HEADERS_TYPE)


def appended_header(batch: pa.Table, key: str, values: pa.Array) -> pa.Array:
    """The batch's ``headers`` column with the header ``key`` added at the end of each
    row's headers, with that row's value of ``values`` (binary; null: a null value)."""
    headers = headers_column(batch)
    rows = batch.num_rows
    entries = pc.list_flatten(headers).cast(HEADERS_TYPE.value_type)
    lengths = pc.fill_null(pc.list_value_length(headers), 0).cast(pa.int64())
    added = pa.StructArray.from_arrays(
        [pa.repeat(pa.scalar(key, pa.string()), rows), values.cast(pa.binary())],
        fields=list(HEADERS_TYPE.value_type),
    )
    # In the new values, old entry j of row p moves to j + p (one added header before
    # it per earlier row); row i's added header goes to end_i + i.
    ends = pc.cumulative_sum(lengths)
    rows_before = pc.list_parent_indices(headers).cast(pa.int64())
    positions = pa.concat_arrays(
        [
            pc.add(pa.array(np.arange(len(entries), dtype=np.int64)), rows_before),
            pc.add(ends, pa.array(np.arange(rows, dtype=np.int64))),
        ]
    )
    offsets = pa.concat_arrays(
        [pa.array([0], pa.int64()), pc.cumulative_sum(pc.add(lengths, 1))]
    ).cast(pa.int32())
    ordered = pa.concat_arrays([entries, added]).take(pc.sort_indices(positions))
    return pa.ListArray.from_arrays(offsets, ordered)


def with_column(batch: pa.Table, name: str, array: pa.Array) -> pa.Table:
    """``batch`` with column ``name`` replaced by ``array`` (appended if absent)."""
    if name in batch.column_names:
        return batch.set_column(batch.column_names.index(name), name, array)
    return batch.append_column(name, array)


def struct_of(children: list[pa.Array], fields: list[pa.Field], like: pa.Array) -> pa.Array:
    """A struct of ``children`` with the row nulls (tombstones) of ``like``."""
    if not children:
        return pa.array(
            [None if null else {} for null in like.is_null().to_pylist()], pa.struct([])
        )
    mask = like.is_null() if like.null_count else None
    return pa.StructArray.from_arrays(children, fields=fields, mask=mask)


def with_nulls(values: pa.Array, like: pa.Array) -> pa.Array:
    """``values`` with nulls where ``like`` has them."""
    if like.null_count == 0:
        return values
    return pc.if_else(like.is_null(), pa.scalar(None, values.type), values)


def format_millis(millis: pa.Array, pieces: list[str]) -> pa.Array:
    """Epoch milliseconds as text in UTC (``pieces`` from :func:`_java_date_format`),
    each distinct second formatted once: a batch spans few of them."""
    seconds = pc.floor(pc.divide(millis.cast(pa.float64()), 1000)).cast(pa.int64())
    distinct = seconds.dictionary_encode()
    instants = distinct.dictionary.cast(pa.timestamp("s", "UTC"))
    parts: list[Any] = []
    for piece in pieces:
        if piece == MILLIS:
            fraction = pc.subtract(millis, pc.multiply(seconds, 1000))
            parts.append(pc.utf8_lpad(fraction.cast(pa.string()), 3, "0"))
        else:
            text = pc.strftime(instants, format=piece, locale="C")
            parts.append(text.take(distinct.indices))
    return pc.binary_join_element_wise(*parts, "") if len(parts) > 1 else parts[0]


MILLIS = "\x00millis"

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


def java_date_format(pattern: str, key: str) -> list[str]:
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
                pieces.append(MILLIS)
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
