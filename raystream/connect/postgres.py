"""PostgreSQL connectors: a source (Kafka's JDBC source modes and change data capture)
and a sink (insert or upsert, exactly once through offsets stored with the data).

**PostgresSource** reads tables into topics, as Kafka Connect's JDBC source does. Each
table in ``table.whitelist`` (or the ``query``) is a source partition
(``{"table": name}`` or ``{"query": sql}``) whose offset says how far it was read:

- ``mode=incrementing``: new rows by a strictly increasing column
  (``incrementing.column.name``): ``WHERE id > last ORDER BY id``; offset
  ``{"incrementing": last}``. Sees inserts only.
- ``mode=timestamp``: rows whose ``timestamp.column.name`` (several columns: the first
  non-null) passed the last one seen, up to the database's ``now()`` less
  ``timestamp.delay.interval.ms``; offset ``{"timestamp": ms, "timestamp_nanos": ns}``
  (Kafka's shape). Sees inserts and updates that set the column; a batch never ends
  inside a run of equal timestamps, so none of them is skipped.
- ``mode=timestamp+incrementing``: both, ordered by (timestamp, id): the robust mode.
- ``mode=cdc``: change data capture from logical replication. A publication
  (``publication.name``; of the whitelisted tables, else all tables) and a logical
  slot (``slot.name``, plugin ``pgoutput``) are created when missing; changes are
  read through the SQL functions ``pg_logical_slot_peek_binary_changes`` (psycopg 3
  has no replication protocol) and the slot is advanced only in ``commit()``, to the
  offset the framework stored, so nothing is lost when a task dies in between.
  Records: key = the row's replica identity (its primary key) as a struct, value = the
  row after the change, a ``__op`` header ``c``/``u``/``d``, the commit time as the
  record timestamp. **Deletes are tombstones** (value null, key set), as a compacted
  topic and Kafka's JDBC sink (``delete.enabled``) understand them; an update that
  changes the key is a tombstone of the old key and then the new row. Offsets are
  LSNs: ``{"lsn": L}`` (every transaction ending at or before L was written), plus
  ``"txn_lsn"``/``"txn_events"`` while a transaction larger than a batch is half
  written. Rows that existed before the slot are not read (use an incrementing mode
  for a backfill); unchanged TOAST values of an update are null unless the table has
  ``REPLICA IDENTITY FULL``.

Topics are ``topic.prefix`` + table name (the prefix alone for a ``query``). Each poll
returns one :class:`SourceBatch` of at most ``batch.max.rows`` rows of one table,
whose ``value`` is a struct of the row's columns, typed from the table's column types.

**PostgresSink** writes the records of a topic into the table ``table.name.format``
(``${topic}`` replaced): ``insert.mode`` ``insert`` (COPY) or ``upsert`` / ``update`` by
the key ``pk.mode`` = ``none`` | ``kafka`` | ``record_key`` | ``record_value`` with
``pk.fields``; ``auto.create`` makes the table from the records' Arrow schema and
``auto.evolve`` adds missing columns; ``delete.enabled`` turns tombstones into deletes.
Each batch is written in ONE database transaction together with the next offsets of
its partitions in the table ``offsets.table.name`` (``raystream_connect_offsets``), so a
task killed at any moment leaves the data and its offsets agreeing: ``open`` rewinds
the consumer to the stored offsets and records at or below them are dropped, hence
exactly once. ``pre_commit`` returns ``{}``: the consumer group's offsets are not used.
"""

from __future__ import annotations

import collections
import datetime as dt
import re
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql
from psycopg.pq import Format
from psycopg.types.json import Jsonb

from raystream.connect.api import SinkConnector, SinkTask, SourceBatch, SourceConnector, SourceTask
from raystream.errors import ConnectError, InvalidConfigError, RetriableConnectError
from raystream.types import TopicPartition

SOURCE_MODES = ("incrementing", "timestamp", "timestamp+incrementing", "cdc")
INSERT_MODES = ("insert", "upsert", "update")
PK_MODES = ("none", "kafka", "record_key", "record_value")
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_TS = "__raystream_ts"  # the timestamp expression, selected beside the row's columns
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970 (pgoutput's epoch)


# --- connections and types ------------------------------------------------------------


def conninfo(config: Mapping[str, str]) -> str:
    """The libpq connection string of ``connection.url`` (a libpq URL or key=value string,
    or a JDBC ``jdbc:postgresql://host:port/db?user=..`` URL) with ``connection.user`` and
    ``connection.password``."""
    url = config.get("connection.url", "")
    if not url:
        raise InvalidConfigError("connection.url is required (e.g. postgresql://host:5432/db)")
    if url.startswith("jdbc:"):
        url = url[len("jdbc:") :]
    extra = {}
    if config.get("connection.user"):
        extra["user"] = config["connection.user"]
    if config.get("connection.password"):
        extra["password"] = config["connection.password"]
    try:
        return psycopg.conninfo.make_conninfo(url, **extra)
    except psycopg.ProgrammingError as error:
        raise InvalidConfigError(
            f"connection.url {url!r} is not a PostgreSQL URL: {error}"
        ) from error


def connect(config: Mapping[str, str]) -> psycopg.Connection:
    """An autocommit connection in UTC whose JSON, UUID and unknown types load as text
    (the connectors type them, not psycopg); a connection failure is retriable."""
    try:
        conn = psycopg.connect(conninfo(config), autocommit=True)
    except psycopg.OperationalError as error:
        raise RetriableConnectError(f"cannot connect to PostgreSQL: {error}") from error
    conn.execute("SET TimeZone = 'UTC'")
    for name in ("json", "jsonb", "uuid"):
        conn.adapters.register_loader(name, psycopg.types.string.TextLoader)
    return conn


def _identifier(name: str) -> sql.Identifier:
    """``schema.table`` or ``table`` as a quoted identifier."""
    return sql.Identifier(*name.split("."))


_ARRAY_ELEMENTS = {info.array_oid: info.oid for info in psycopg.postgres.types if info.array_oid}


def arrow_type(oid: int, precision: int | None = None, scale: int | None = None) -> pa.DataType:
    """The Arrow type of a PostgreSQL column type (text for types without a better one)."""
    simple = {
        16: pa.bool_(),
        17: pa.binary(),
        20: pa.int64(),
        21: pa.int16(),
        23: pa.int32(),
        26: pa.int64(),
        700: pa.float32(),
        701: pa.float64(),
        1082: pa.date32(),
        1083: pa.time64("us"),
        1114: pa.timestamp("us"),
        1184: pa.timestamp("us", tz="UTC"),
        1186: pa.duration("us"),
    }
    if oid in simple:
        return simple[oid]
    element = _ARRAY_ELEMENTS.get(oid)
    if element is not None:
        return pa.list_(arrow_type(element))
    if oid == 1700 and precision and precision <= 38:
        return pa.decimal128(precision, scale or 0)
    return pa.string()  # text, varchar, json, uuid, unconstrained numeric, others


def _numeric_typmod(typmod: int) -> tuple[int | None, int | None]:
    if typmod < 4:
        return None, None
    return ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF


def _arrow_values(values: list[Any], type_: pa.DataType) -> pa.Array:
    if pa.types.is_string(type_):
        values = [v if v is None or isinstance(v, str) else str(v) for v in values]
    elif pa.types.is_decimal(type_):
        values = [v if v is None or v.is_finite() else None for v in values]
    return pa.array(values, type=type_)


def pg_type(type_: pa.DataType) -> str:
    """The PostgreSQL column type ``auto.create`` gives an Arrow type."""
    if pa.types.is_boolean(type_):
        return "boolean"
    if pa.types.is_int8(type_) or pa.types.is_int16(type_) or pa.types.is_uint8(type_):
        return "smallint"
    if pa.types.is_int32(type_) or pa.types.is_uint16(type_):
        return "integer"
    if pa.types.is_int64(type_) or pa.types.is_uint32(type_):
        return "bigint"
    if pa.types.is_uint64(type_):
        return "numeric(20)"
    if pa.types.is_float32(type_) or pa.types.is_float16(type_):
        return "real"
    if pa.types.is_float64(type_):
        return "double precision"
    if pa.types.is_decimal(type_):
        return f"numeric({type_.precision},{type_.scale})"
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return "text"
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_):
        return "bytea"
    if pa.types.is_timestamp(type_):
        return "timestamptz" if type_.tz else "timestamp"
    if pa.types.is_date(type_):
        return "date"
    if pa.types.is_time(type_):
        return "time"
    if pa.types.is_duration(type_):
        return "interval"
    if pa.types.is_struct(type_) or pa.types.is_list(type_) or pa.types.is_map(type_):
        return "jsonb"
    if pa.types.is_null(type_):
        return "text"
    raise ConnectError(f"PostgresSink: no PostgreSQL type for Arrow type {type_}")


def _split(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _int(config: Mapping[str, str], key: str, default: int) -> int:
    try:
        value = int(config.get(key, default))
    except ValueError:
        raise InvalidConfigError(f"{key} must be an integer, got {config[key]!r}") from None
    if value < 0:
        raise InvalidConfigError(f"{key} must not be negative, got {value}")
    return value


def _bool(config: Mapping[str, str], key: str, default: bool) -> bool:
    value = str(config.get(key, default)).lower()
    if value not in ("true", "false"):
        raise InvalidConfigError(f"{key} must be true or false, got {config[key]!r}")
    return value == "true"


def _choice(config: Mapping[str, str], key: str, choices: Sequence[str], default: str) -> str:
    value = config.get(key, default)
    if value not in choices:
        raise InvalidConfigError(f"{key} must be one of {', '.join(choices)}; got {value!r}")
    return value


# --- the source -------------------------------------------------------------------------


@dataclass(frozen=True)
class PostgresSourceConfig:
    """The source's settings, from Kafka's JDBC source keys (``.`` -> ``_``)."""

    mode: str
    tables: tuple[str, ...]
    query: str
    topic_prefix: str
    incrementing_column_name: str
    timestamp_column_name: tuple[str, ...]
    timestamp_delay_interval_ms: int
    batch_max_rows: int
    poll_interval_ms: int
    slot_name: str
    publication_name: str

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> PostgresSourceConfig:
        """Validated settings; ``InvalidConfigError`` names the bad key."""
        conninfo(config)
        mode = _choice(config, "mode", SOURCE_MODES, "")
        tables = tuple(_split(config.get("tables") or config.get("table.whitelist")))
        tables = tables or tuple(_split(config.get("table.include.list")))
        query = config.get("query", "").strip()
        if query and mode == "cdc":
            raise InvalidConfigError("query cannot be used with mode=cdc: name tables instead")
        if query and tables:
            raise InvalidConfigError("set either query or table.whitelist, not both")
        incrementing = config.get("incrementing.column.name", "")
        timestamps = tuple(_split(config.get("timestamp.column.name")))
        if "incrementing" in mode and not incrementing:
            raise InvalidConfigError(f"mode={mode} needs incrementing.column.name")
        if "timestamp" in mode and not timestamps:
            raise InvalidConfigError(f"mode={mode} needs timestamp.column.name")
        slot = config.get("slot.name", "raystream")
        publication = config.get("publication.name", f"{slot}_publication")
        for key, name in (("slot.name", slot), ("publication.name", publication)):
            if not _NAME.match(name):
                raise InvalidConfigError(f"{key} must match {_NAME.pattern}, got {name!r}")
        batch_max_rows = _int(config, "batch.max.rows", 100)
        if batch_max_rows == 0:
            raise InvalidConfigError("batch.max.rows must be at least 1")
        return cls(
            mode=mode,
            tables=tables,
            query=query,
            topic_prefix=config.get("topic.prefix", ""),
            incrementing_column_name=incrementing,
            timestamp_column_name=timestamps,
            timestamp_delay_interval_ms=_int(config, "timestamp.delay.interval.ms", 0),
            batch_max_rows=batch_max_rows,
            poll_interval_ms=_int(config, "poll.interval.ms", 5000),
            slot_name=slot,
            publication_name=publication,
        )


class PostgresSource(SourceConnector):
    """Kafka's JDBC source for PostgreSQL, plus change data capture (see the module)."""

    def validate(self, config: Mapping[str, str]) -> None:
        PostgresSourceConfig.from_config(config)

    def start(self, config: dict[str, str]) -> None:
        self.config = dict(config)
        self.settings = PostgresSourceConfig.from_config(config)

    def task_class(self) -> type[SourceTask]:
        return PostgresSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """One task for a query or CDC (a slot has one reader), else the tables dealt
        round robin over at most ``max_tasks`` tasks (all tables of the search path when
        none are named)."""
        if self.settings.query or self.settings.mode == "cdc":
            return [dict(self.config)]
        tables = list(self.settings.tables)
        if not tables:
            with connect(self.config) as conn:
                tables = [
                    name
                    for (name,) in conn.execute(
                        "SELECT table_name FROM information_schema.tables WHERE table_schema ="
                        " current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name"
                    )
                ]
        count = max(1, min(max_tasks, len(tables)))
        return [
            {**self.config, "tables": ",".join(tables[i::count])} for i in range(count) if tables
        ] or [dict(self.config)]

    def stop(self) -> None:
        pass


@dataclass
class _TableState:
    """One source partition of the table modes: where it was read up to, when next."""

    partition: dict[str, str]
    source: sql.Composable
    topic: str
    incrementing: int | None = None
    timestamp_us: int | None = None  # microseconds since 1970, UTC
    next_poll_at: float = 0.0

    def offset(self) -> dict[str, int]:
        offset: dict[str, int] = {}
        if self.incrementing is not None:
            offset["incrementing"] = self.incrementing
        if self.timestamp_us is not None:
            offset["timestamp"] = self.timestamp_us // 1000
            offset["timestamp_nanos"] = self.timestamp_us % 1_000_000 * 1000
        return offset

    def resume(self, stored: Mapping[str, Any] | None) -> None:
        if not stored:
            return
        if "incrementing" in stored:
            self.incrementing = int(stored["incrementing"])
        if "timestamp" in stored:
            seconds = int(stored["timestamp"]) // 1000
            self.timestamp_us = seconds * 1_000_000 + int(stored.get("timestamp_nanos", 0)) // 1000


def _utc(timestamp_us: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=timestamp_us)


def _micros(value: dt.datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return (value - _EPOCH) // dt.timedelta(microseconds=1)


def incremental_query(
    settings: PostgresSourceConfig,
    state: _TableState,
    limit: int | None,
    at_timestamp_us: int | None = None,
) -> tuple[sql.Composed, list[Any]]:
    """The SELECT of the next rows of ``state`` in the configured mode, and its params
    (``at_timestamp_us``: instead, every row at exactly that timestamp).

    Worked example, ``mode=timestamp+incrementing`` over ``orders`` (id, updated)::

        SELECT q.*, "updated" AS "__raystream_ts" FROM "orders" AS q
        WHERE "updated" < now() - %s * interval '1 millisecond'
          AND (("updated" = %s AND "id" > %s) OR "updated" > %s)
        ORDER BY "updated", "id" LIMIT 100
    """
    inc = sql.Identifier(settings.incrementing_column_name)
    where: list[sql.Composable] = []
    params: list[Any] = []
    order: list[sql.Composable] = []
    select = sql.SQL("SELECT q.*")
    if settings.timestamp_column_name:
        columns = [sql.Identifier(c) for c in settings.timestamp_column_name]
        ts: sql.Composable = columns[0]
        if len(columns) > 1:
            ts = sql.SQL("COALESCE({})").format(sql.SQL(", ").join(columns))
        select += sql.SQL(", {} AS {}").format(ts, sql.Identifier(_TS))
        where.append(sql.SQL("{} < now() - %s * interval '1 millisecond'").format(ts))
        params.append(settings.timestamp_delay_interval_ms)
        order.append(ts)
        last = None if state.timestamp_us is None else _utc(state.timestamp_us)
        if at_timestamp_us is not None:
            where.append(sql.SQL("{} = %s").format(ts))
            params.append(_utc(at_timestamp_us))
        elif last is not None and settings.mode == "timestamp":
            where.append(sql.SQL("{} > %s").format(ts))
            params.append(last)
        elif last is not None:  # timestamp+incrementing
            where.append(
                sql.SQL("(({ts} = %s AND {inc} > %s) OR {ts} > %s)").format(ts=ts, inc=inc)
            )
            params += [last, -(2**63) if state.incrementing is None else state.incrementing, last]
    if "incrementing" in settings.mode:
        order.append(inc)
        if settings.mode == "incrementing" and state.incrementing is not None:
            where.append(sql.SQL("{} > %s").format(inc))
            params.append(state.incrementing)
    query = select + sql.SQL(" FROM {} AS q").format(state.source)
    if where:
        query += sql.SQL(" WHERE ") + sql.SQL(" AND ").join(where)
    query += sql.SQL(" ORDER BY ") + sql.SQL(", ").join(order)
    if limit is not None:
        query += sql.SQL(" LIMIT {}").format(sql.Literal(limit))
    return query, params


def _value_table(
    names: Sequence[str], types: Sequence[pa.DataType], rows: Sequence[Sequence[Any]]
) -> pa.StructArray:
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    arrays = [
        _arrow_values(list(values), type_) for values, type_ in zip(columns, types, strict=True)
    ]
    return pa.StructArray.from_arrays(
        arrays, fields=[pa.field(n, t) for n, t in zip(names, types, strict=True)]
    )


class _TableReader:
    """The table modes: queries each source partition in turn, the one due first."""

    def __init__(self, conn: psycopg.Connection, settings: PostgresSourceConfig, context: Any):
        self.conn = conn
        self.settings = settings
        if settings.query:
            states = [
                _TableState(
                    {"query": settings.query},
                    sql.SQL("({})").format(sql.SQL(settings.query)),  # the user's own SQL
                    settings.topic_prefix,
                )
            ]
        else:
            if not settings.tables:
                raise InvalidConfigError("PostgresSource: name table.whitelist or a query")
            states = [
                _TableState({"table": t}, _identifier(t), settings.topic_prefix + t.split(".")[-1])
                for t in settings.tables
            ]
        reader = getattr(context, "offset_storage_reader", None)
        for state in states:
            state.resume(reader.offset(state.partition) if reader else None)
        self.states = states

    def poll(self) -> SourceBatch | None:
        state = min(self.states, key=lambda s: s.next_poll_at)
        wait = state.next_poll_at - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, 1.0))
            return None
        limit = self.settings.batch_max_rows
        names, types, rows = self._select(state, limit)
        if self.settings.mode == "timestamp" and len(rows) == limit:
            rows = self._whole_timestamp_runs(state, names, rows)
        full = len(rows) >= limit
        state.next_poll_at = time.monotonic() + (
            0 if full else self.settings.poll_interval_ms / 1000
        )
        if not rows:
            return None
        last = dict(zip(names, rows[-1], strict=True))
        if "incrementing" in self.settings.mode:
            state.incrementing = int(last[self.settings.incrementing_column_name])
        if "timestamp" in self.settings.mode:
            state.timestamp_us = _micros(last[_TS])
        keep = [i for i, name in enumerate(names) if name != _TS]
        value = _value_table(
            [names[i] for i in keep], [types[i] for i in keep], [[r[i] for i in keep] for r in rows]
        )
        table = pa.table({"value": value})
        return SourceBatch(dict(state.partition), state.offset(), state.topic, table)

    def _select(
        self, state: _TableState, limit: int | None, at_timestamp_us: int | None = None
    ) -> tuple[list[str], list[pa.DataType], list[tuple[Any, ...]]]:
        query, params = incremental_query(self.settings, state, limit, at_timestamp_us)
        try:
            with self.conn.cursor() as cursor:
                cursor.execute(query, params)
                rows = cursor.fetchall()
                description = cursor.description or []
        except psycopg.OperationalError as error:
            raise RetriableConnectError(
                f"PostgresSource: reading {state.partition}: {error}"
            ) from error
        except psycopg.Error as error:
            raise ConnectError(f"PostgresSource: reading {state.partition}: {error}") from error
        names = [c.name for c in description]
        types = [arrow_type(c.type_code, c.precision, c.scale) for c in description]
        return names, types, rows

    def _whole_timestamp_runs(
        self, state: _TableState, names: list[str], rows: list[tuple[Any, ...]]
    ) -> list[tuple[Any, ...]]:
        """A full ``mode=timestamp`` batch ends before its last timestamp's run (the rest
        of that run could follow in the next batch, after the offset has passed it); a
        batch that is one run is read whole instead."""
        position = names.index(_TS)
        last = rows[-1][position]
        kept = [row for row in rows if row[position] != last]
        if kept:
            return kept
        return self._select(state, None, at_timestamp_us=_micros(last))[2]

    def commit(self) -> None:
        pass


# --- change data capture (pgoutput) ----------------------------------------------------


@dataclass(frozen=True)
class Relation:
    """A table as pgoutput describes it: columns (name, type oid, typmod, in the key)."""

    relation_id: int
    schema: str
    name: str
    columns: tuple[tuple[str, int, int, bool], ...]


@dataclass(frozen=True)
class Change:
    """One record of a decoded transaction (deletes: ``new`` is None, a tombstone)."""

    relation: Relation
    op: str  # "c", "u" or "d"
    key: tuple[Any, ...] | None
    new: tuple[Any, ...] | None


@dataclass(frozen=True)
class Transaction:
    """A committed transaction: its end LSN (the offset after it), time and changes."""

    end_lsn: int
    commit_time_ms: int
    changes: tuple[Change, ...]


def lsn_text(lsn: int) -> str:
    """PostgreSQL's ``X/Y`` spelling of an LSN."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class PgOutputDecoder:
    """Decodes pgoutput (protocol 1) messages into :class:`Transaction` objects.

    Text values are loaded by the connection's psycopg loaders for their type, so a CDC
    value equals what a SELECT of the row returns.
    """

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn
        self.relations: dict[int, Relation] = {}
        self._loaders: dict[int, Any] = {}

    def decode(self, messages: Iterable[bytes]) -> list[Transaction]:
        """Whole transactions from messages (a batch of the slot's output begins with one
        transaction's ``B`` and ends with a ``C``; partial tails are left out)."""
        done: list[Transaction] = []
        changes: list[Change] = []
        commit_time_ms = 0
        for message in messages:
            kind = message[:1]
            if kind == b"B":
                _, commit_us, _ = struct.unpack_from(">qqi", message, 1)
                commit_time_ms = (commit_us + _PG_EPOCH_US) // 1000
                changes = []
            elif kind == b"C":
                _, _, end_lsn, _ = struct.unpack_from(">bqqq", message, 1)
                done.append(Transaction(end_lsn, commit_time_ms, tuple(changes)))
            elif kind == b"R":
                self._relation(message)
            elif kind in (b"I", b"U", b"D"):
                changes.extend(self._change(kind, message))
            # T (truncate), Y (type), O (origin), M (message): not records
        return done

    def _relation(self, message: bytes) -> None:
        (relation_id,) = struct.unpack_from(">I", message, 1)
        pos = 5
        schema, pos = _cstring(message, pos)
        name, pos = _cstring(message, pos)
        pos += 1  # replica identity setting
        (count,) = struct.unpack_from(">h", message, pos)
        pos += 2
        columns = []
        for _ in range(count):
            flags = message[pos]
            column, pos = _cstring(message, pos + 1)
            oid, typmod = struct.unpack_from(">Ii", message, pos)
            pos += 8
            columns.append((column, oid, typmod, bool(flags & 1)))
        self.relations[relation_id] = Relation(relation_id, schema, name, tuple(columns))

    def _change(self, kind: bytes, message: bytes) -> list[Change]:
        (relation_id,) = struct.unpack_from(">I", message, 1)
        relation = self.relations[relation_id]
        pos = 5
        old = None
        if kind in (b"U", b"D") and message[pos : pos + 1] in (b"K", b"O"):
            old, pos = self._tuple(relation, message, pos + 1)
        new = None
        if kind in (b"I", b"U"):
            new, pos = self._tuple(relation, message, pos + 1)  # skips the "N"
        keys = [i for i, column in enumerate(relation.columns) if column[3]]

        def key_of(row: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
            return tuple(row[i] for i in keys) if row is not None and keys else None

        if kind == b"I":
            return [Change(relation, "c", key_of(new), new)]
        if kind == b"D":
            return [Change(relation, "d", key_of(old), None)]
        if old is not None and key_of(old) != key_of(new):  # the key changed: old one goes
            return [
                Change(relation, "d", key_of(old), None),
                Change(relation, "u", key_of(new), new),
            ]
        return [Change(relation, "u", key_of(new), new)]

    def _tuple(self, relation: Relation, message: bytes, pos: int) -> tuple[tuple[Any, ...], int]:
        (count,) = struct.unpack_from(">h", message, pos)
        pos += 2
        values = []
        for i in range(count):
            kind = message[pos : pos + 1]
            pos += 1
            if kind == b"t":
                (length,) = struct.unpack_from(">i", message, pos)
                pos += 4
                oid = relation.columns[i][1]
                values.append(self._loader(oid).load(message[pos : pos + length]))
                pos += length
            else:  # n: null; u: an unchanged TOAST value, not sent
                values.append(None)
        return tuple(values), pos

    def _loader(self, oid: int) -> Any:
        if oid not in self._loaders:
            loader = self.conn.adapters.get_loader(oid, Format.TEXT)
            if loader is None:
                loader = psycopg.types.string.TextLoader
            self._loaders[oid] = loader(oid, self.conn)
        return self._loaders[oid]


def _cstring(message: bytes, pos: int) -> tuple[str, int]:
    end = message.index(b"\x00", pos)
    return message[pos:end].decode(), end + 1


def _op_headers(op: str) -> list[dict[str, Any]]:
    return [{"key": "__op", "value": op.encode()}]


_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


class _ChangeReader:
    """``mode=cdc``: peeks the slot, emits changes after the stored offset, and
    advances the slot to the stored offset in ``commit``.

    Peeking re-decodes from the slot's confirmed position each time, so the changes
    written but not yet committed are read again and skipped: commit often.
    """

    def __init__(self, conn: psycopg.Connection, settings: PostgresSourceConfig, context: Any):
        self.conn = conn
        self.settings = settings
        self.partition = {"slot": settings.slot_name}
        self.reader = getattr(context, "offset_storage_reader", None)
        self._ensure_slot()
        stored = (self.reader.offset(self.partition) if self.reader else None) or {}
        self.lsn = int(stored.get("lsn", 0))  # transactions ending here or before: done
        self.txn_lsn = int(stored.get("txn_lsn", 0))  # one half written, and how far
        self.txn_events = int(stored.get("txn_events", 0))
        self.pending: collections.deque[tuple[Transaction, int]] = collections.deque()
        self.limit = settings.batch_max_rows

    def _ensure_slot(self) -> None:
        s = self.settings
        exists = self.conn.execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", [s.publication_name]
        ).fetchone()
        if not exists:
            target = (
                sql.SQL("TABLE ") + sql.SQL(", ").join(_identifier(t) for t in s.tables)
                if s.tables
                else sql.SQL("ALL TABLES")
            )
            self.conn.execute(
                sql.SQL("CREATE PUBLICATION {} FOR ").format(sql.Identifier(s.publication_name))
                + target
            )
        slot = self.conn.execute(
            "SELECT plugin, database = current_database() FROM pg_replication_slots"
            " WHERE slot_name = %s",
            [s.slot_name],
        ).fetchone()
        if slot is not None and tuple(slot) != ("pgoutput", True):
            raise ConnectError(
                f"PostgresSource: replication slot {s.slot_name!r} exists but is not a "
                f"pgoutput slot of this database (plugin {slot[0]}): choose another slot.name"
            )
        if slot is None:
            try:
                self.conn.execute(
                    "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", [s.slot_name]
                )
            except psycopg.Error as error:
                raise ConnectError(
                    f"PostgresSource: cannot create the logical replication slot "
                    f"{s.slot_name!r} (the server needs wal_level=logical and a free "
                    f"max_replication_slots): {error}"
                ) from error

    def poll(self) -> SourceBatch | None:
        if not self.pending:
            self._fetch()
            if not self.pending:
                time.sleep(min(self.settings.poll_interval_ms / 1000, 1.0))
                return None
        transaction, start = self.pending[0]
        relation = transaction.changes[start].relation
        changes: list[tuple[Change, int]] = []
        while self.pending and len(changes) < self.settings.batch_max_rows:
            transaction, start = self.pending[0]
            end = start
            while (
                end < len(transaction.changes)
                and transaction.changes[end].relation is relation
                and len(changes) < self.settings.batch_max_rows
            ):
                changes.append((transaction.changes[end], transaction.commit_time_ms))
                end += 1
            if end < len(transaction.changes):
                self.pending[0] = (transaction, end)
                self.txn_lsn, self.txn_events = transaction.end_lsn, end
                break
            self.pending.popleft()
            self.lsn, self.txn_lsn, self.txn_events = transaction.end_lsn, 0, 0
        offset = {"lsn": self.lsn}
        if self.txn_lsn:
            offset |= {"txn_lsn": self.txn_lsn, "txn_events": self.txn_events}
        return SourceBatch(
            dict(self.partition),
            offset,
            self.settings.topic_prefix + relation.name,
            self._table(relation, changes),
        )

    def _table(self, relation: Relation, changes: list[tuple[Change, int]]) -> pa.Table:
        columns = relation.columns
        types = [arrow_type(oid, *_numeric_typmod(typmod)) for _, oid, typmod, _ in columns]
        names = [column[0] for column in columns]
        value_type = pa.struct([pa.field(n, t) for n, t in zip(names, types, strict=True)])
        key_fields = [pa.field(n, t) for n, t, c in zip(names, types, columns, strict=True) if c[3]]
        values = [
            None if c.new is None else dict(zip(names, c.new, strict=True)) for c, _ in changes
        ]
        keys = [
            None if c.key is None else dict(zip((f.name for f in key_fields), c.key, strict=True))
            for c, _ in changes
        ]
        return pa.table(
            {
                "key": pa.array(keys, type=pa.struct(key_fields))
                if key_fields
                else pa.nulls(len(changes)),
                "value": pa.array(values, type=value_type),
                "timestamp": pa.array([ms for _, ms in changes], type=pa.int64()),
                "headers": pa.array([_op_headers(c.op) for c, _ in changes], type=_HEADERS),
            }
        )

    def _fetch(self) -> None:
        """Decode the slot from its confirmed position (growing the window while it holds
        only changes already emitted) and queue what comes after the emitted offset."""
        while True:
            try:
                rows = self.conn.execute(
                    "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s,"
                    " 'proto_version', '1', 'publication_names', %s)",
                    [self.settings.slot_name, self.limit, self.settings.publication_name],
                ).fetchall()
            except psycopg.OperationalError as error:
                raise RetriableConnectError(f"PostgresSource: reading the slot: {error}") from error
            except psycopg.Error as error:
                raise ConnectError(f"PostgresSource: reading the slot: {error}") from error
            for transaction in PgOutputDecoder(self.conn).decode(bytes(r[0]) for r in rows):
                if transaction.end_lsn <= self.lsn:
                    continue
                start = self.txn_events if transaction.end_lsn == self.txn_lsn else 0
                if start < len(transaction.changes):
                    self.pending.append((transaction, start))
                elif not self.pending:  # nothing to write in it: passed by the next offset
                    self.lsn, self.txn_lsn, self.txn_events = transaction.end_lsn, 0, 0
            if self.pending or len(rows) < self.limit:
                return
            self.limit *= 2  # the window held only what was emitted: look further

    def commit(self) -> None:
        """Advance the slot to the offset the framework stored: the server may then
        recycle the WAL before it."""
        stored = (self.reader.offset(self.partition) if self.reader else None) or {}
        lsn = int(stored.get("lsn", 0))
        if not lsn:
            return
        self.conn.execute(
            "SELECT pg_replication_slot_advance(slot_name, %s::pg_lsn) FROM pg_replication_slots"
            " WHERE slot_name = %s AND confirmed_flush_lsn < %s::pg_lsn",
            [lsn_text(lsn), self.settings.slot_name, lsn_text(lsn)],
        )
        self.limit = self.settings.batch_max_rows


class PostgresSourceTask(SourceTask):
    """Reads the tables (or the slot) of its config into source batches."""

    def start(self, config: dict[str, str]) -> None:
        self.settings = PostgresSourceConfig.from_config(config)
        self.conn = connect(config)
        kind = _ChangeReader if self.settings.mode == "cdc" else _TableReader
        self.reader = kind(self.conn, self.settings, self.context)

    def poll(self) -> SourceBatch | None:
        return self.reader.poll()

    def commit(self) -> None:
        self.reader.commit()

    def stop(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            conn.close()


# --- the sink ---------------------------------------------------------------------------

_KAFKA_PK = ("__connect_topic", "__connect_partition", "__connect_offset")


@dataclass(frozen=True)
class PostgresSinkConfig:
    """The sink's settings, from Kafka's JDBC sink keys (``.`` -> ``_``)."""

    connector: str
    table_name_format: str
    insert_mode: str
    pk_mode: str
    pk_fields: tuple[str, ...]
    auto_create: bool
    auto_evolve: bool
    delete_enabled: bool
    offsets_table_name: str

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> PostgresSinkConfig:
        """Validated settings; ``InvalidConfigError`` names the bad key."""
        conninfo(config)
        if not config.get("name"):
            raise InvalidConfigError(
                "PostgresSink needs the connector's name (key 'name'): its offsets are "
                "stored under it"
            )
        insert_mode = _choice(config, "insert.mode", INSERT_MODES, "insert")
        pk_mode = _choice(config, "pk.mode", PK_MODES, "none")
        pk_fields = tuple(_split(config.get("pk.fields")))
        delete_enabled = _bool(config, "delete.enabled", False)
        if insert_mode != "insert" and pk_mode == "none":
            raise InvalidConfigError(f"insert.mode={insert_mode} needs a key: set pk.mode")
        if pk_mode == "record_value" and not pk_fields:
            raise InvalidConfigError("pk.mode=record_value needs pk.fields")
        if pk_mode == "kafka" and pk_fields and len(pk_fields) != 3:
            raise InvalidConfigError("pk.mode=kafka takes three pk.fields (topic,partition,offset)")
        if delete_enabled and pk_mode != "record_key":
            raise InvalidConfigError("delete.enabled=true needs pk.mode=record_key")
        return cls(
            connector=config["name"],
            table_name_format=config.get("table.name.format", "${topic}"),
            insert_mode=insert_mode,
            pk_mode=pk_mode,
            pk_fields=pk_fields,
            auto_create=_bool(config, "auto.create", False),
            auto_evolve=_bool(config, "auto.evolve", False),
            delete_enabled=delete_enabled,
            offsets_table_name=config.get("offsets.table.name", "raystream_connect_offsets"),
        )


class PostgresSink(SinkConnector):
    """Kafka's JDBC sink for PostgreSQL, exactly once (see the module)."""

    def validate(self, config: Mapping[str, str]) -> None:
        PostgresSinkConfig.from_config(config)

    def start(self, config: dict[str, str]) -> None:
        self.config = dict(config)
        PostgresSinkConfig.from_config(config)

    def task_class(self) -> type[SinkTask]:
        return PostgresSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]

    def stop(self) -> None:
        pass


def _rows_table(batch: pa.Table, settings: PostgresSinkConfig) -> tuple[pa.Table, list[str]]:
    """The columns to write of one topic's rows and the names of its key columns: the
    key's and the value's fields (the value's null for tombstones), the Kafka
    coordinates for ``pk.mode=kafka``."""
    value = batch.column("value").combine_chunks()
    if pa.types.is_null(value.type):  # only tombstones, of no known value shape
        value = pa.StructArray.from_arrays([], fields=[], mask=pa.array([True] * len(value)))
    if not pa.types.is_struct(value.type):
        raise ConnectError(
            f"PostgresSink needs structured values (a struct value, e.g. value.converter="
            f"json with schemas, or arrow); topic {batch.column('topic')[0]} has {value.type}"
        )
    columns: dict[str, pa.Array] = {}
    if settings.pk_mode == "kafka":
        names = settings.pk_fields or _KAFKA_PK
        for name, source in zip(names, ("topic", "partition", "offset"), strict=True):
            columns[name] = batch.column(source).combine_chunks()
    elif settings.pk_mode == "record_key":
        key = batch.column("key").combine_chunks()
        if pa.types.is_struct(key.type):
            fields = [key.type.field(i).name for i in range(key.type.num_fields)]
            wanted = settings.pk_fields or tuple(fields)
            for name in wanted:
                if name not in fields:
                    raise ConnectError(f"PostgresSink: pk.fields names {name!r}, not in the key")
                columns[name] = key.field(name)
        else:
            names = settings.pk_fields or ("__connect_key",)
            if len(names) != 1:
                raise ConnectError("PostgresSink: a primitive key fills one of pk.fields")
            columns[names[0]] = key
    key = list(columns)
    for i in range(value.type.num_fields):
        name = value.type.field(i).name
        if name not in columns:
            columns[name] = value.field(i)
    if settings.pk_mode == "record_value":
        key = list(settings.pk_fields)
        for name in key:
            if name not in columns:
                raise ConnectError(f"PostgresSink: pk.fields names {name!r}, not in the value")
    return pa.table(columns), key


def _python_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows for psycopg: nested values (structs, lists, maps) as JSON."""
    columns = []
    for column in table.columns:
        values = column.to_pylist()
        if pa.types.is_nested(column.type):
            values = [None if v is None else Jsonb(v) for v in values]
        columns.append(values)
    return list(zip(*columns, strict=True))


class PostgresSinkTask(SinkTask):
    """Writes batches into tables, each in one transaction with its next offsets."""

    def start(self, config: dict[str, str]) -> None:
        self.settings = PostgresSinkConfig.from_config(config)
        self.conn = connect(config)
        self.offsets = _identifier(self.settings.offsets_table_name)
        self.next_offsets: dict[TopicPartition, int] = {}
        self.columns: dict[str, dict[str, str]] = {}  # table -> column -> type, as known
        self.conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (connector text NOT NULL, topic text NOT NULL,"
                " kafka_partition integer NOT NULL, next_offset bigint NOT NULL,"
                " PRIMARY KEY (connector, topic, kafka_partition))"
            ).format(self.offsets)
        )

    def open(self, partitions: Sequence[TopicPartition]) -> None:
        """Read the stored next offsets of ``partitions`` and rewind the consumer there."""
        stored = {
            TopicPartition(topic, partition): offset
            for topic, partition, offset in self.conn.execute(
                sql.SQL(
                    "SELECT topic, kafka_partition, next_offset FROM {} WHERE connector = %s"
                ).format(self.offsets),
                [self.settings.connector],
            )
        }
        rewind = {tp: stored[tp] for tp in partitions if tp in stored}
        self.next_offsets.update(rewind)
        if rewind and self.context is not None:
            self.context.offset(rewind)

    def close(self, partitions: Sequence[TopicPartition]) -> None:
        for tp in partitions:
            self.next_offsets.pop(tp, None)

    def pre_commit(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int]:
        return {}

    def put_batch(self, batch: pa.Table) -> None:
        """Write ``batch`` (rows at or below the stored offsets dropped: already written)
        and its next offsets in one transaction."""
        batch = self._unwritten(batch)
        if batch.num_rows == 0:
            return
        ends: dict[TopicPartition, int] = {}
        for topic, partition, offset in zip(
            batch.column("topic").to_pylist(),
            batch.column("partition").to_pylist(),
            batch.column("offset").to_pylist(),
            strict=True,
        ):
            ends[TopicPartition(topic, partition)] = offset + 1
        try:
            with self.conn.transaction():
                for topic in dict.fromkeys(batch.column("topic").to_pylist()):
                    rows = batch.filter(pc.equal(batch.column("topic"), topic))
                    self._write(topic, rows)
                with self.conn.cursor() as cursor:
                    cursor.executemany(
                        sql.SQL(
                            "INSERT INTO {} VALUES (%s, %s, %s, %s) ON CONFLICT (connector, topic,"
                            " kafka_partition) DO UPDATE SET next_offset = EXCLUDED.next_offset"
                        ).format(self.offsets),
                        [
                            (self.settings.connector, tp.topic, tp.partition, o)
                            for tp, o in ends.items()
                        ],
                    )
        except psycopg.OperationalError as error:
            self.columns.clear()  # the transaction's DDL rolled back too
            raise RetriableConnectError(f"PostgresSink: writing: {error}") from error
        except psycopg.Error as error:
            self.columns.clear()
            raise ConnectError(f"PostgresSink: writing: {error}") from error
        self.next_offsets.update(ends)

    def _unwritten(self, batch: pa.Table) -> pa.Table:
        if not self.next_offsets or batch.num_rows == 0:
            return batch
        keep = [
            offset >= self.next_offsets.get(TopicPartition(topic, partition), 0)
            for topic, partition, offset in zip(
                batch.column("topic").to_pylist(),
                batch.column("partition").to_pylist(),
                batch.column("offset").to_pylist(),
                strict=True,
            )
        ]
        return batch.filter(pa.array(keep, type=pa.bool_()))

    def _write(self, topic: str, batch: pa.Table) -> None:
        table = self.settings.table_name_format.replace("${topic}", topic)
        rows, key = _rows_table(batch, self.settings)
        self._ensure_table(table, rows.schema, key)
        tombstone = batch.column("value").is_null().to_pylist()
        start = 0
        while start < len(tombstone):  # runs of writes and of deletes, in record order
            end = start
            while end < len(tombstone) and tombstone[end] == tombstone[start]:
                end += 1
            if not tombstone[start]:
                self._upsert(table, rows.slice(start, end - start), key)
            elif self.settings.delete_enabled:
                self._delete(table, rows.slice(start, end - start), key)
            start = end

    def _ensure_table(self, table: str, schema: pa.Schema, key: list[str]) -> None:
        """Create the table (``auto.create``) or add missing columns (``auto.evolve``)."""
        known = self.columns.get(table)
        if known is None:
            known = {
                name: type_
                for name, type_ in self.conn.execute(
                    "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
                    " WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
                    [table],
                )
            }
        if not known:
            if not self.settings.auto_create:
                raise ConnectError(f"PostgresSink: table {table!r} does not exist (auto.create)")
            definition = [
                sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(pg_type(f.type)))
                for f in schema
            ]
            if key:
                definition.append(
                    sql.SQL("PRIMARY KEY ({})").format(
                        sql.SQL(", ").join(sql.Identifier(k) for k in key)
                    )
                )
            self.conn.execute(
                sql.SQL("CREATE TABLE {} ({})").format(
                    _identifier(table), sql.SQL(", ").join(definition)
                )
            )
            known = {f.name: pg_type(f.type) for f in schema}
        missing = [f for f in schema if f.name not in known]
        if missing and not self.settings.auto_evolve:
            names = ", ".join(f.name for f in missing)
            raise ConnectError(f"PostgresSink: table {table!r} has no column {names} (auto.evolve)")
        for f in missing:
            self.conn.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(
                    _identifier(table), sql.Identifier(f.name), sql.SQL(pg_type(f.type))
                )
            )
            known[f.name] = pg_type(f.type)
        self.columns[table] = known

    def _upsert(self, table: str, rows: pa.Table, key: list[str]) -> None:
        target = _identifier(table)
        names = sql.SQL(", ").join(sql.Identifier(n) for n in rows.column_names)
        if self.settings.insert_mode == "insert":
            with self.conn.cursor() as cursor:
                copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(target, names)
                with cursor.copy(copy_sql) as copy:
                    for row in _python_rows(rows):
                        copy.write_row(row)
            return
        others = [n for n in rows.column_names if n not in key]
        if self.settings.insert_mode == "upsert":
            action = (
                sql.SQL("DO UPDATE SET ")
                + sql.SQL(", ").join(
                    sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n)) for n in others
                )
                if others
                else sql.SQL("DO NOTHING")
            )
            statement = (
                sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) ").format(
                    target,
                    names,
                    sql.SQL(", ").join(sql.Placeholder() * len(rows.column_names)),
                    sql.SQL(", ").join(sql.Identifier(k) for k in key),
                )
                + action
            )
            params = _python_rows(rows)
        else:  # update
            statement = sql.SQL("UPDATE {} SET {} WHERE {}").format(
                target,
                sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(n)) for n in others),
                sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql.Identifier(k)) for k in key),
            )
            params = _python_rows(rows.select(others + key))
        with self.conn.cursor() as cursor:
            cursor.executemany(statement, params)

    def _delete(self, table: str, rows: pa.Table, key: list[str]) -> None:
        statement = sql.SQL("DELETE FROM {} WHERE {}").format(
            _identifier(table),
            sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql.Identifier(k)) for k in key),
        )
        with self.conn.cursor() as cursor:
            cursor.executemany(statement, _python_rows(rows.select(key)))

    def stop(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            conn.close()
