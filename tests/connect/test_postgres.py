"""The PostgreSQL connectors' tasks against a real PostgreSQL server (no Ray).

The tasks are called as the Connect runtime calls them: a source task polled with the
framework's offset store behind ``context.offset_storage_reader`` (offsets stored after
each batch is "written"), a sink task opened, put and committed. A "killed" task is one
whose instance is dropped between two calls; a new instance resumes from what was
stored, as a restarted worker's would.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from raystream.connect.api import SourceBatch
from raystream.connect.postgres import (
    PostgresSink,
    PostgresSinkConfig,
    PostgresSinkTask,
    PostgresSource,
    PostgresSourceConfig,
    PostgresSourceTask,
)
from raystream.errors import ConnectError, InvalidConfigError
from raystream.types import TopicPartition


class OffsetStore:
    """The framework's source offset store: what it committed, by source partition."""

    def __init__(self) -> None:
        self.committed: dict[str, dict[str, Any]] = {}

    def offset(self, source_partition: Mapping[str, Any]) -> dict[str, Any] | None:
        return self.committed.get(json.dumps(source_partition, sort_keys=True))

    def offsets(self, source_partitions: Sequence[Mapping[str, Any]]) -> dict[str, dict]:
        found = {json.dumps(p, sort_keys=True): self.offset(p) for p in source_partitions}
        return {k: v for k, v in found.items() if v is not None}

    def store(self, batch: SourceBatch) -> None:
        self.committed[json.dumps(batch.source_partition, sort_keys=True)] = dict(
            batch.source_offset
        )


class SourceContext:
    def __init__(self, store: OffsetStore) -> None:
        self.offset_storage_reader = store
        self.transaction_context = None


class SinkContext:
    """Records the rewinds a sink task asks for."""

    def __init__(self) -> None:
        self.rewinds: dict[TopicPartition, int] = {}

    def offset(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.rewinds.update(offsets)


def source_task(url: str, store: OffsetStore, **config: str) -> PostgresSourceTask:
    task = PostgresSourceTask()
    task.context = SourceContext(store)
    task.start({"connection.url": url, "poll.interval.ms": "0", **config})
    return task


def drain(
    task: PostgresSourceTask, store: OffsetStore, *, commit: bool = True
) -> list[SourceBatch]:
    """Poll until a poll returns nothing, storing each batch's offset as the framework
    does once the batch is written (and calling ``commit`` then, if asked)."""
    batches = []
    while (batch := task.poll()) is not None:
        batches.append(batch)
        store.store(batch)
        if commit:
            task.commit()
    return batches


def values(batches: Sequence[SourceBatch], field: str) -> list[Any]:
    return [row[field] for b in batches for row in b.table.column("value").to_pylist()]


def execute(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def query(url: str, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(statement).fetchall()


# --- config --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"mode": "bulk"}, "mode"),
        ({"mode": "incrementing"}, "incrementing.column.name"),
        ({"mode": "timestamp", "incrementing.column.name": "id"}, "timestamp.column.name"),
        ({"mode": "cdc", "slot.name": "Bad-Slot"}, "slot.name"),
        ({"mode": "cdc", "query": "SELECT 1"}, "query"),
        (
            {"mode": "incrementing", "incrementing.column.name": "id", "batch.max.rows": "x"},
            "batch.max.rows",
        ),
    ],
)
def test_source_config_errors_name_the_bad_key(config: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidConfigError, match=named.replace(".", r"\.")):
        PostgresSourceConfig.from_config({"connection.url": "postgresql://h/db", **config})


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"name": "s", "insert.mode": "merge"}, "insert.mode"),
        ({"name": "s", "insert.mode": "upsert"}, "pk.mode"),
        ({"name": "s", "pk.mode": "record_value"}, "pk.fields"),
        ({"name": "s", "delete.enabled": "true", "pk.mode": "kafka"}, "delete.enabled"),
        ({"insert.mode": "insert"}, "name"),
        ({"name": "s", "auto.create": "yes"}, "auto.create"),
    ],
)
def test_sink_config_errors_name_the_bad_key(config: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidConfigError, match=named.replace(".", r"\.")):
        PostgresSinkConfig.from_config({"connection.url": "postgresql://h/db", **config})


def test_a_jdbc_url_is_accepted() -> None:
    settings = PostgresSourceConfig.from_config(
        {
            "connection.url": "jdbc:postgresql://db:5432/app",
            "mode": "incrementing",
            "incrementing.column.name": "id",
            "table.whitelist": "a, b",
        }
    )
    assert settings.tables == ("a", "b")


# --- source: the JDBC modes ------------------------------------------------------------


def test_incrementing_mode_reads_new_rows_in_batches_and_resumes_after_a_restart(
    postgres_db: str,
) -> None:
    execute(
        postgres_db,
        "CREATE TABLE orders (id serial PRIMARY KEY, item text, qty int, price numeric(10,2))",
        "INSERT INTO orders (item, qty, price) SELECT 'item' || i, i, i * 1.5"
        " FROM generate_series(1, 5) i",
    )
    store = OffsetStore()
    config = {
        "mode": "incrementing",
        "incrementing.column.name": "id",
        "table.whitelist": "orders",
        "topic.prefix": "pg-",
        "batch.max.rows": "2",
    }
    task = source_task(postgres_db, store, **config)
    batches = drain(task, store)
    assert [b.table.num_rows for b in batches] == [2, 2, 1]
    assert {b.topic for b in batches} == {"pg-orders"}
    assert [b.source_offset for b in batches] == [{"incrementing": i} for i in (2, 4, 5)]
    assert batches[0].source_partition == {"table": "orders"}
    value_type = batches[0].table.column("value").type
    assert value_type == pa.struct(
        [
            ("id", pa.int32()),
            ("item", pa.string()),
            ("qty", pa.int32()),
            ("price", pa.decimal128(10, 2)),
        ]
    )
    assert values(batches, "price")[2] == Decimal("4.50")

    execute(postgres_db, "INSERT INTO orders (item, qty) VALUES ('late', 6)")
    assert values(drain(task, store), "item") == ["late"]
    task.stop()

    execute(postgres_db, "INSERT INTO orders (item, qty) VALUES ('after restart', 7)")
    restarted = source_task(postgres_db, store, **config)
    assert values(drain(restarted, store), "item") == ["after restart"]
    restarted.stop()


def test_timestamp_mode_sees_updates_and_never_ends_a_batch_inside_equal_timestamps(
    postgres_db: str,
) -> None:
    execute(
        postgres_db,
        "CREATE TABLE items (id int, name text, updated timestamp NOT NULL)",
        "INSERT INTO items VALUES (1, 'a', '2024-01-01 00:00:01'), (2, 'b', '2024-01-01 00:00:01'),"
        " (3, 'c', '2024-01-01 00:00:01'), (4, 'd', '2024-01-01 00:00:02.5'),"
        " (5, 'e', '2024-01-01 00:00:03'), (6, 'f', '2024-01-01 00:00:03')",
    )
    store = OffsetStore()
    config = {
        "mode": "timestamp",
        "timestamp.column.name": "updated",
        "table.whitelist": "items",
        "batch.max.rows": "2",
    }
    task = source_task(postgres_db, store, **config)
    batches = drain(task, store)
    # [a, b] is full and all at 00:00:01, so the run is read whole; [d, e] would end
    # inside e's run, so the batch stops after d.
    assert [values([b], "name") for b in batches] == [["a", "b", "c"], ["d"], ["e", "f"]]
    assert batches[1].source_offset == {"timestamp": 1704067202500, "timestamp_nanos": 500_000_000}
    assert "__raystream_ts" not in batches[0].table.column("value").type.names

    execute(postgres_db, "UPDATE items SET name = 'b2', updated = '2024-01-02' WHERE id = 2")
    assert values(drain(task, store), "name") == ["b2"]
    task.stop()
    restarted = source_task(postgres_db, store, **config)
    assert drain(restarted, store) == []
    restarted.stop()


def test_timestamp_incrementing_mode_over_a_query_resumes_inside_a_timestamp(
    postgres_db: str,
) -> None:
    execute(
        postgres_db,
        "CREATE TABLE events (id int, kind text, created timestamptz, modified timestamptz)",
        "INSERT INTO events SELECT i, CASE WHEN i % 2 = 0 THEN 'keep' ELSE 'skip' END,"
        " '2024-05-01', NULL FROM generate_series(1, 8) i",
    )
    store = OffsetStore()
    config = {
        "mode": "timestamp+incrementing",
        "incrementing.column.name": "id",
        "timestamp.column.name": "modified,created",
        "topic.prefix": "events",
        "query": "SELECT id, kind, created, modified FROM events WHERE kind = 'keep'",
        "batch.max.rows": "3",
    }
    task = source_task(postgres_db, store, **config)
    first = task.poll()
    store.store(first)
    task.stop()  # killed after one batch: the next instance starts inside 2024-05-01
    assert first.topic == "events" and first.source_partition == {"query": config["query"]}
    assert values([first], "id") == [2, 4, 6]
    assert first.source_offset["incrementing"] == 6
    restarted = source_task(postgres_db, store, **config)
    execute(postgres_db, "UPDATE events SET modified = '2024-06-01' WHERE id = 2")
    assert values(drain(restarted, store), "id") == [8, 2]
    created = values([first], "created")[0]
    assert created == dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
    restarted.stop()


def test_tables_are_split_over_tasks_and_read_in_turn(postgres_db: str) -> None:
    execute(
        postgres_db,
        "CREATE TABLE a (id int)",
        "CREATE TABLE b (id int)",
        "CREATE TABLE c (id int)",
        "INSERT INTO a VALUES (1)",
        "INSERT INTO b VALUES (2)",
        "INSERT INTO c VALUES (3)",
    )
    connector = PostgresSource()
    connector.start(
        {"connection.url": postgres_db, "mode": "incrementing", "incrementing.column.name": "id"}
    )
    configs = connector.task_configs(2)
    assert [c["tables"] for c in configs] == ["a,c", "b"]
    store = OffsetStore()
    task = source_task(postgres_db, store, **configs[0])
    assert sorted(b.topic for b in drain(task, store)) == ["a", "c"]
    task.stop()


def test_column_types_become_arrow_types(postgres_db: str) -> None:
    execute(
        postgres_db,
        "CREATE TABLE t (id bigint, flag boolean, small smallint, real_ float4, dbl float8,"
        " raw bytea, day date, at timestamp, atz timestamptz, doc jsonb, uid uuid, n numeric,"
        " tags text[])",
        "INSERT INTO t VALUES (1, true, 2, 1.5, 2.5, '\\x0102', '2024-02-03',"
        " '2024-02-03 04:05:06', '2024-02-03 04:05:06+02', '{\"a\": 1}',"
        " '00000000-0000-0000-0000-000000000001', 3.25, '{x,y}')",
    )
    store = OffsetStore()
    task = source_task(
        postgres_db,
        store,
        mode="incrementing",
        **{"incrementing.column.name": "id", "table.whitelist": "t"},
    )
    (batch,) = drain(task, store)
    task.stop()
    value = batch.table.column("value")
    types = {f.name: f.type for f in value.type}
    assert types == {
        "id": pa.int64(),
        "flag": pa.bool_(),
        "small": pa.int16(),
        "real_": pa.float32(),
        "dbl": pa.float64(),
        "raw": pa.binary(),
        "day": pa.date32(),
        "at": pa.timestamp("us"),
        "atz": pa.timestamp("us", tz="UTC"),
        "doc": pa.string(),
        "uid": pa.string(),
        "n": pa.string(),
        "tags": pa.list_(pa.string()),
    }
    row = value.to_pylist()[0]
    assert row["raw"] == b"\x01\x02" and json.loads(row["doc"]) == {"a": 1}
    assert row["atz"] == dt.datetime(2024, 2, 3, 2, 5, 6, tzinfo=dt.timezone.utc)
    assert row["n"] == "3.25" and row["tags"] == ["x", "y"]
