"""The PostgreSQL sink: insert or upsert, each batch with its offsets in one transaction."""

from __future__ import annotations

import datetime as dt
import io
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as csv
from psycopg import sql

from raystream.connectors.api import SinkConnector, SinkTask
from raystream.connectors.postgres.common import (
    bool_setting,
    choice_setting,
    connect,
    conninfo,
    identifier,
    pg_type,
    split_list,
)
from raystream.errors import ConnectError, InvalidConfigError, RetriableConnectError
from raystream.types import TopicPartition

INSERT_MODES = ("insert", "upsert", "update")
PK_MODES = ("none", "kafka", "record_key", "record_value")

_KAFKA_PK = ("__connect_topic", "__connect_partition", "__connect_offset")


@dataclass(frozen=True)
class PostgresSinkConfig:
    """The sink's settings, from Kafka's JDBC sink keys (``.`` -> ``_``).

    ``connector`` keys the stored offsets: the connector's ``name``, or, in a config
    without it, its topics and target table format (stable across restarts too).
    """

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
        table_name_format = config.get("table.name.format", "${topic}")
        topics = config.get("topics") or config.get("topics.regex") or ""
        connector = config.get("name") or f"{topics} -> {table_name_format}"
        insert_mode = choice_setting(config, "insert.mode", INSERT_MODES, "insert")
        pk_mode = choice_setting(config, "pk.mode", PK_MODES, "none")
        pk_fields = tuple(split_list(config.get("pk.fields")))
        delete_enabled = bool_setting(config, "delete.enabled", False)
        if insert_mode != "insert" and pk_mode == "none":
            raise InvalidConfigError(f"insert.mode={insert_mode} needs a key: set pk.mode")
        if pk_mode == "record_value" and not pk_fields:
            raise InvalidConfigError("pk.mode=record_value needs pk.fields")
        if pk_mode == "kafka" and pk_fields and len(pk_fields) != 3:
            raise InvalidConfigError("pk.mode=kafka takes three pk.fields (topic,partition,offset)")
        if delete_enabled and pk_mode != "record_key":
            raise InvalidConfigError("delete.enabled=true needs pk.mode=record_key")
        return cls(
            connector=connector,
            table_name_format=table_name_format,
            insert_mode=insert_mode,
            pk_mode=pk_mode,
            pk_fields=pk_fields,
            auto_create=bool_setting(config, "auto.create", False),
            auto_evolve=bool_setting(config, "auto.evolve", False),
            delete_enabled=delete_enabled,
            offsets_table_name=config.get("offsets.table.name", "raystream_connect_offsets"),
        )


class PostgresSink(SinkConnector):
    """Kafka's JDBC sink for PostgreSQL, exactly once (see the module)."""

    def validate(self, config: Mapping[str, str]) -> None:
        PostgresSinkConfig.from_config(config)

    def exactly_once_support(self, config: Mapping[str, str]) -> bool:
        return True  # offsets in the rows' own transaction (see the module)

    def task_class(self) -> type[SinkTask]:
        return PostgresSinkTask


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


def _csv_text(value: Any, type_: pa.DataType) -> str:
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_):
        return "\\x" + value.hex()  # bytea's hex input
    if pa.types.is_duration(type_):
        return f"{value // dt.timedelta(microseconds=1)} microseconds"
    return json.dumps(value, default=str)  # nested values into jsonb


def copy_csv(table: pa.Table) -> bytes:
    """``table`` as the CSV that ``COPY ... (FORMAT csv)`` reads, written by Arrow's CSV
    writer: a null is an empty field and an empty string a quoted one, as COPY expects.

    Columns Arrow writes as COPY reads them (numbers, strings, booleans, decimals, dates,
    times, timestamps) are converted in C; binary, durations and nested values, which
    PostgreSQL spells differently, go through Python first.
    """
    columns = []
    for column in table.columns:
        type_ = column.type
        if (
            pa.types.is_binary(type_)
            or pa.types.is_large_binary(type_)
            or pa.types.is_duration(type_)
            or pa.types.is_nested(type_)
        ):
            column = pa.array(
                [None if v is None else _csv_text(v, type_) for v in column.to_pylist()],
                pa.string(),
            )
        elif pa.types.is_null(type_):
            column = column.cast(pa.string())
        columns.append(column)
    sink = io.BytesIO()
    csv.write_csv(
        pa.table(columns, names=table.column_names), sink, csv.WriteOptions(include_header=False)
    )
    return sink.getvalue()


def last_per_key(rows: pa.Table, key: Sequence[str]) -> pa.Table:
    """The last row of each key, in record order: what applying them in turn leaves (one
    ``INSERT ... ON CONFLICT`` may not touch a row twice)."""
    index = rows.select(list(key)).append_column(
        "__row", pa.array(range(rows.num_rows), pa.int64())
    )
    last = index.group_by(list(key), use_threads=False).aggregate([("__row", "max")])
    rows_kept = last.column("__row_max").combine_chunks()
    return rows.take(pc.take(rows_kept, pc.array_sort_indices(rows_kept)))


class PostgresSinkTask(SinkTask):
    """Writes batches into tables, each in one transaction with its next offsets."""

    def start(self, config: dict[str, str]) -> None:
        self.settings = PostgresSinkConfig.from_config(config)
        self.conn = connect(config)
        self.offsets = identifier(self.settings.offsets_table_name)
        self.next_offsets: dict[TopicPartition, int] = {}
        self.columns: dict[str, dict[str, str]] = {}  # table -> column -> type, as known
        self._stages = 0  # staging tables made, for their names
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
        last = batch.group_by(["topic", "partition"], use_threads=False).aggregate(
            [("offset", "max")]
        )
        ends = {
            TopicPartition(topic, partition): offset + 1
            for topic, partition, offset in zip(
                *(last.column(c).to_pylist() for c in ("topic", "partition", "offset_max")),
                strict=True,
            )
        }
        try:
            with self.conn.transaction():
                for topic in pc.unique(batch.column("topic")).to_pylist():  # first seen first
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
        written = pa.scalar(False)
        for tp, next_offset in self.next_offsets.items():
            written = pc.or_(
                written,
                pc.and_(
                    pc.and_(
                        pc.equal(batch.column("topic"), tp.topic),
                        pc.equal(batch.column("partition"), tp.partition),
                    ),
                    pc.less(batch.column("offset"), next_offset),
                ),
            )
        return batch.filter(pc.invert(written))

    def _write(self, topic: str, batch: pa.Table) -> None:
        table = self.settings.table_name_format.replace("${topic}", topic)
        rows, key = _rows_table(batch, self.settings)
        self._ensure_table(table, rows.schema, key)
        tombstone = batch.column("value").is_null().to_numpy()
        bounds = [0, *(np.flatnonzero(np.diff(tombstone)) + 1).tolist(), len(tombstone)]
        for start, end in itertools.pairwise(bounds):  # runs of writes and of deletes, in order
            if not tombstone[start]:
                self._upsert(table, rows.slice(start, end - start), key)
            elif self.settings.delete_enabled:
                self._delete(table, rows.slice(start, end - start), key)
            else:
                partition, offset = batch["partition"][start], batch["offset"][start]
                raise ConnectError(
                    f"PostgresSink: a tombstone (null value) at {topic}-{partition} offset "
                    f"{offset} with delete.enabled=false: set delete.enabled=true with "
                    f"pk.mode=record_key to delete, or drop tombstones with a Filter transform"
                )

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
                    identifier(table), sql.SQL(", ").join(definition)
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
                    identifier(table), sql.Identifier(f.name), sql.SQL(pg_type(f.type))
                )
            )
            known[f.name] = pg_type(f.type)
        self.columns[table] = known

    def _copy(self, target: sql.Composable, rows: pa.Table) -> None:
        names = sql.SQL(", ").join(sql.Identifier(n) for n in rows.column_names)
        statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(target, names)
        with self.conn.cursor() as cursor, cursor.copy(statement) as copy:
            copy.write(copy_csv(rows))

    def _stage(self, table: str, rows: pa.Table) -> sql.Identifier:
        """A temporary table shaped as ``table`` holding ``rows``, dropped at commit."""
        self._stages += 1
        stage = sql.Identifier(f"raystream_stage_{self._stages}")
        self.conn.execute(
            sql.SQL("CREATE TEMP TABLE {} (LIKE {}) ON COMMIT DROP").format(
                stage, identifier(table)
            )
        )
        self._copy(stage, rows)
        return stage

    def _upsert(self, table: str, rows: pa.Table, key: list[str]) -> None:
        """Insert (COPY straight into the table), upsert or update (COPY into a staging
        table, then one statement joining it)."""
        target = identifier(table)
        if self.settings.insert_mode == "insert":
            self._copy(target, rows)
            return
        rows = last_per_key(rows, key)
        stage = self._stage(table, rows)
        names = [sql.Identifier(n) for n in rows.column_names]
        others = [sql.Identifier(n) for n in rows.column_names if n not in key]
        keys = [sql.Identifier(k) for k in key]
        if self.settings.insert_mode == "upsert":
            action = sql.SQL("DO NOTHING")
            if others:
                action = sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
                    sql.SQL("{0} = EXCLUDED.{0}").format(n) for n in others
                )
            statement = (
                sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT ({}) ").format(
                    target,
                    sql.SQL(", ").join(names),
                    sql.SQL(", ").join(names),
                    stage,
                    sql.SQL(", ").join(keys),
                )
                + action
            )
        else:  # update
            statement = sql.SQL("UPDATE {} AS t SET {} FROM {} AS s WHERE {}").format(
                target,
                sql.SQL(", ").join(sql.SQL("{0} = s.{0}").format(n) for n in others),
                stage,
                sql.SQL(" AND ").join(sql.SQL("t.{0} = s.{0}").format(k) for k in keys),
            )
        self.conn.execute(statement)

    def _delete(self, table: str, rows: pa.Table, key: list[str]) -> None:
        stage = self._stage(table, rows.select(key))
        self.conn.execute(
            sql.SQL("DELETE FROM {} AS t USING {} AS s WHERE {}").format(
                identifier(table),
                stage,
                sql.SQL(" AND ").join(
                    sql.SQL("t.{0} = s.{0}").format(sql.Identifier(k)) for k in key
                ),
            )
        )

    def stop(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            conn.close()
