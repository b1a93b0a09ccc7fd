"""The PostgreSQL source: Kafka JDBC source's table modes; ``mode=cdc`` reads a slot."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from raystream.connectors.api import SourceBatch, SourceConnector, SourceTask
from raystream.connectors.postgres.cdc import ChangeReader
from raystream.connectors.postgres.common import (
    SQL_NAME,
    arrow_type,
    arrow_values,
    choice_setting,
    connect,
    conninfo,
    identifier,
    int_setting,
    split_list,
)
from raystream.errors import ConnectError, InvalidConfigError, RetriableConnectError

SOURCE_MODES = ("incrementing", "timestamp", "timestamp+incrementing", "cdc")
_TS = "__raystream_ts"  # the timestamp expression, selected beside the row's columns
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


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
        mode = choice_setting(config, "mode", SOURCE_MODES, "")
        tables = tuple(split_list(config.get("tables") or config.get("table.whitelist")))
        tables = tables or tuple(split_list(config.get("table.include.list")))
        query = config.get("query", "").strip()
        if query and mode == "cdc":
            raise InvalidConfigError("query cannot be used with mode=cdc: name tables instead")
        if query and tables:
            raise InvalidConfigError("set either query or table.whitelist, not both")
        incrementing = config.get("incrementing.column.name", "")
        timestamps = tuple(split_list(config.get("timestamp.column.name")))
        if "incrementing" in mode and not incrementing:
            raise InvalidConfigError(f"mode={mode} needs incrementing.column.name")
        if "timestamp" in mode and not timestamps:
            raise InvalidConfigError(f"mode={mode} needs timestamp.column.name")
        slot = config.get("slot.name", "raystream")
        publication = config.get("publication.name", f"{slot}_publication")
        for key, name in (("slot.name", slot), ("publication.name", publication)):
            if not SQL_NAME.match(name):
                raise InvalidConfigError(f"{key} must match {SQL_NAME.pattern}, got {name!r}")
        batch_max_rows = int_setting(config, "batch.max.rows", 100)
        if batch_max_rows == 0:
            raise InvalidConfigError("batch.max.rows must be at least 1")
        return cls(
            mode=mode,
            tables=tables,
            query=query,
            topic_prefix=config.get("topic.prefix", ""),
            incrementing_column_name=incrementing,
            timestamp_column_name=timestamps,
            timestamp_delay_interval_ms=int_setting(config, "timestamp.delay.interval.ms", 0),
            batch_max_rows=batch_max_rows,
            poll_interval_ms=int_setting(config, "poll.interval.ms", 5000),
            slot_name=slot,
            publication_name=publication,
        )


class PostgresSource(SourceConnector):
    """Kafka's JDBC source for PostgreSQL, plus change data capture (see the module)."""

    def validate(self, config: Mapping[str, str]) -> None:
        PostgresSourceConfig.from_config(config)

    def start(self, config: dict[str, str]) -> None:
        super().start(config)
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
        arrow_values(list(values), type_) for values, type_ in zip(columns, types, strict=True)
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
                _TableState({"table": t}, identifier(t), settings.topic_prefix + t.split(".")[-1])
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


class PostgresSourceTask(SourceTask):
    """Reads the tables (or the slot) of its config into source batches."""

    def start(self, config: dict[str, str]) -> None:
        self.settings = PostgresSourceConfig.from_config(config)
        self.conn = connect(config)
        kind = ChangeReader if self.settings.mode == "cdc" else _TableReader
        self.reader = kind(self.conn, self.settings, self.context)

    def poll(self) -> SourceBatch | None:
        return self.reader.poll()

    def commit(self) -> None:
        self.reader.commit()

    def stop(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            conn.close()
