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

from raystream.connectors.api import SourceBatch
from raystream.connectors.postgres import (
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
        ({"pk.mode": "key"}, "pk.mode"),
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


# --- source: change data capture ---------------------------------------------------------


def cdc_config(**extra: str) -> dict[str, str]:
    return {
        "mode": "cdc",
        "slot.name": "rs_slot",
        "table.whitelist": "accounts",
        "topic.prefix": "cdc.",
        "batch.max.rows": "100",
        **extra,
    }


def changes(batches: Sequence[SourceBatch]) -> list[tuple[str, Any, Any]]:
    """(op header, key, value) per record."""
    out = []
    for batch in batches:
        rows = batch.table.to_pylist()
        out += [
            (
                dict((h["key"], h["value"]) for h in r["headers"])["__op"].decode(),
                r["key"],
                r["value"],
            )
            for r in rows
        ]
    return out


def confirmed_flush_lsn(url: str) -> str:
    return query(url, "SELECT confirmed_flush_lsn FROM pg_replication_slots")[0][0]


def test_cdc_emits_inserts_updates_and_deletes_as_tombstones(postgres_db: str) -> None:
    execute(postgres_db, "CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance bigint)")
    store = OffsetStore()
    task = source_task(postgres_db, store, **cdc_config())  # creates the slot: reads from now
    execute(
        postgres_db,
        "INSERT INTO accounts VALUES (1, 'ann', 10), (2, 'bob', 20)",
        "UPDATE accounts SET balance = 15 WHERE id = 1",
        "DELETE FROM accounts WHERE id = 2",
        "UPDATE accounts SET id = 3 WHERE id = 1",  # a key change: old key's tombstone first
    )
    batches = drain(task, store, commit=False)
    assert changes(batches) == [
        ("c", {"id": 1}, {"id": 1, "owner": "ann", "balance": 10}),
        ("c", {"id": 2}, {"id": 2, "owner": "bob", "balance": 20}),
        ("u", {"id": 1}, {"id": 1, "owner": "ann", "balance": 15}),
        ("d", {"id": 2}, None),
        ("d", {"id": 1}, None),
        ("u", {"id": 3}, {"id": 3, "owner": "ann", "balance": 15}),
    ]
    assert {b.topic for b in batches} == {"cdc.accounts"}
    assert batches[0].source_partition == {"slot": "rs_slot"}
    timestamps = [t for b in batches for t in b.table.column("timestamp").to_pylist()]
    now_ms = dt.datetime.now(dt.timezone.utc).timestamp() * 1000
    assert all(abs(t - now_ms) < 60_000 for t in timestamps)

    before = confirmed_flush_lsn(postgres_db)
    task.commit()  # acknowledges the stored offset: the slot moves on
    after = confirmed_flush_lsn(postgres_db)
    assert after != before and batches[-1].source_offset == {"lsn": _lsn(after)}
    execute(postgres_db, "INSERT INTO accounts VALUES (4, 'cy', 1)")
    assert changes(drain(task, store)) == [("c", {"id": 4}, {"id": 4, "owner": "cy", "balance": 1})]
    task.stop()


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def test_cdc_resumes_after_a_kill_inside_a_large_transaction_losing_and_repeating_nothing(
    postgres_db: str,
) -> None:
    execute(
        postgres_db,
        "CREATE TABLE accounts (id int PRIMARY KEY, owner text)",
        "CREATE TABLE other (id int PRIMARY KEY)",
    )
    store = OffsetStore()
    config = cdc_config(**{"batch.max.rows": "4", "table.whitelist": "accounts,other"})
    task = source_task(postgres_db, store, **config)
    execute(
        postgres_db,
        "BEGIN; INSERT INTO accounts SELECT i, 'o' || i FROM generate_series(1, 10) i;"
        " INSERT INTO other VALUES (1); INSERT INTO accounts VALUES (11, 'x'); COMMIT",
        "INSERT INTO accounts VALUES (12, 'y')",
    )
    first, second = task.poll(), task.poll()
    for batch in (first, second):
        store.store(batch)
    task.commit()  # the slot cannot move yet: the transaction is half written
    assert second.source_offset["txn_events"] == 8
    unwritten = task.poll()  # polled, never written: the task dies here
    task.stop()
    assert unwritten is not None

    restarted = source_task(postgres_db, store, **config)
    rest = drain(restarted, store)
    restarted.stop()
    ids = [
        (b.topic, k["id"])
        for b in (first, second, *rest)
        for k in b.table.column("key").to_pylist()
    ]
    accounts = [("cdc.accounts", i) for i in range(1, 13)]
    assert ids == [*accounts[:10], ("cdc.other", 1), *accounts[10:]]
    assert rest[-1].source_offset.keys() == {"lsn"}
    assert _lsn(confirmed_flush_lsn(postgres_db)) == rest[-1].source_offset["lsn"]


def test_cdc_on_a_slot_name_taken_by_another_kind_of_slot_fails_with_a_clear_error(
    postgres_db: str,
) -> None:
    execute(postgres_db, "CREATE TABLE accounts (id int PRIMARY KEY)")
    execute(postgres_db, "SELECT pg_create_physical_replication_slot('taken_name')")
    try:
        with pytest.raises(ConnectError, match="'taken_name' exists but is not a pgoutput slot"):
            source_task(postgres_db, OffsetStore(), **cdc_config(**{"slot.name": "taken_name"}))
    finally:
        execute(postgres_db, "SELECT pg_drop_replication_slot('taken_name')")


# --- sink --------------------------------------------------------------------------------


def sink_batch(
    topic: str,
    offsets: Sequence[int],
    values: Sequence[Any],
    value_type: pa.DataType,
    keys: Sequence[Any] | None = None,
    key_type: pa.DataType | None = None,
    partition: int = 0,
) -> pa.Table:
    """A sink batch as the runtime hands it (see the connector API's docstring)."""
    n = len(offsets)
    return pa.table(
        {
            "topic": pa.array([topic] * n, pa.string()),
            "partition": pa.array([partition] * n, pa.int32()),
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array([0] * n, pa.int64()),
            "key": pa.array(keys if keys is not None else [None] * n, key_type or pa.null()),
            "value": pa.array(values, value_type),
            "headers": pa.array(
                [[]] * n, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
            ),
        }
    )


def sink_task(
    url: str, partitions: Sequence[TopicPartition], **config: str
) -> tuple[PostgresSinkTask, SinkContext]:
    task = PostgresSinkTask()
    task.context = SinkContext()
    task.start({"connection.url": url, "name": "to-pg", **config})
    task.open(partitions)
    return task, task.context


PEOPLE = pa.struct(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("tags", pa.list_(pa.string())),
        ("seen", pa.timestamp("us", tz="UTC")),
    ]
)


def test_sink_inserts_into_an_auto_created_table_with_its_offsets(postgres_db: str) -> None:
    tp = TopicPartition("people", 0)
    task, context = sink_task(postgres_db, [tp], **{"auto.create": "true"})
    assert context.rewinds == {}
    seen = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    rows = [
        {"id": i, "name": f"n{i}", "score": i / 2, "tags": ["a", "b"], "seen": seen}
        for i in range(5)
    ]
    rows[1]["name"] = None
    task.put_batch(sink_batch("people", range(10, 15), rows, PEOPLE))
    assert task.pre_commit({tp: 15}) == {}
    task.stop()
    assert query(postgres_db, "SELECT id, name, score, tags, seen FROM people ORDER BY id") == [
        (i, None if i == 1 else f"n{i}", i / 2, ["a", "b"], seen) for i in range(5)
    ]
    assert dict(
        query(
            postgres_db,
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_name = 'people'",
        )
    ) == {
        "id": "bigint",
        "name": "text",
        "score": "double precision",
        "tags": "jsonb",
        "seen": "timestamp with time zone",
    }
    assert query(postgres_db, "SELECT * FROM raystream_connect_offsets") == [
        ("to-pg", "people", 0, 15)
    ]


def test_sink_upserts_by_record_key_deletes_on_tombstones_and_evolves_the_table(
    postgres_db: str,
) -> None:
    key_type = pa.struct([("id", pa.int32())])
    v1 = pa.struct([("id", pa.int32()), ("owner", pa.string())])
    tp = TopicPartition("accounts", 0)
    config = {
        "auto.create": "true",
        "auto.evolve": "true",
        "insert.mode": "upsert",
        "pk.mode": "record_key",
        "delete.enabled": "true",
    }
    task, _ = sink_task(postgres_db, [tp], **config)
    keys = [{"id": k} for k in (1, 2, 1, 2, 2, 3)]
    values_ = [
        {"id": 1, "owner": "ann"},
        {"id": 2, "owner": "bob"},
        {"id": 1, "owner": "ann2"},
        None,
        {"id": 2, "owner": "bob again"},
        None,
    ]
    task.put_batch(sink_batch("accounts", range(6), values_, v1, keys, key_type))
    assert query(postgres_db, "SELECT id, owner FROM accounts ORDER BY id") == [
        (1, "ann2"),
        (2, "bob again"),
    ]
    v2 = pa.struct([("id", pa.int32()), ("owner", pa.string()), ("email", pa.string())])
    task.put_batch(
        sink_batch(
            "accounts",
            [6, 7],
            [{"id": 1, "owner": "ann", "email": "a@x"}, None],
            v2,
            [{"id": 1}, {"id": 2}],
            key_type,
        )
    )
    task.stop()
    assert query(postgres_db, "SELECT id, owner, email FROM accounts ORDER BY id") == [
        (1, "ann", "a@x")
    ]
    assert query(
        postgres_db,
        "SELECT conname FROM pg_constraint WHERE contype = 'p' AND conrelid = 'accounts'::regclass",
    ) == [("accounts_pkey",)]


def test_sink_update_mode_by_value_fields_and_a_missing_table_without_auto_create(
    postgres_db: str,
) -> None:
    execute(
        postgres_db,
        "CREATE TABLE stock (sku text PRIMARY KEY, qty int)",
        "INSERT INTO stock VALUES ('a', 1), ('b', 2)",
    )
    value = pa.struct([("sku", pa.string()), ("qty", pa.int32())])
    tp = TopicPartition("stock", 0)
    task, _ = sink_task(
        postgres_db,
        [tp],
        **{"insert.mode": "update", "pk.mode": "record_value", "pk.fields": "sku"},
    )
    task.put_batch(
        sink_batch("stock", [0, 1], [{"sku": "a", "qty": 7}, {"sku": "zz", "qty": 9}], value)
    )
    assert query(postgres_db, "SELECT * FROM stock ORDER BY sku") == [("a", 7), ("b", 2)]
    with pytest.raises(ConnectError, match="'nowhere' does not exist"):
        task.put_batch(sink_batch("nowhere", [0], [{"sku": "a", "qty": 1}], value))
    task.stop()


def test_sink_is_exactly_once_across_a_kill_between_put_and_the_offset_commit(
    postgres_db: str,
) -> None:
    """Task A writes offsets 0-4 and dies before the framework commits anything; the
    consumer would resume at 0, but task B rewinds to 5 and drops a redelivered overlap.
    Plain inserts without a key: a duplicate would show."""
    value = pa.struct([("n", pa.int64())])
    tp = TopicPartition("numbers", 3)
    first, _ = sink_task(postgres_db, [tp], **{"auto.create": "true"})
    first.put_batch(
        sink_batch("numbers", range(5), [{"n": i} for i in range(5)], value, partition=3)
    )
    del first  # killed: no pre_commit, no stop

    second, context = sink_task(postgres_db, [tp])
    assert context.rewinds == {tp: 5}
    second.put_batch(
        sink_batch("numbers", range(3, 8), [{"n": i} for i in range(3, 8)], value, partition=3)
    )
    second.stop()
    assert query(postgres_db, "SELECT n FROM numbers ORDER BY n") == [(i,) for i in range(8)]


def test_a_failed_batch_writes_neither_rows_nor_offsets_and_is_written_once_later(
    postgres_db: str,
) -> None:
    execute(postgres_db, "CREATE TABLE scores (n bigint CHECK (n >= 0))")
    value = pa.struct([("n", pa.int64())])
    tp = TopicPartition("scores", 0)
    task, _ = sink_task(postgres_db, [tp])
    task.put_batch(sink_batch("scores", [0, 1], [{"n": 0}, {"n": 1}], value))
    with pytest.raises(ConnectError, match="scores_n_check"):
        task.put_batch(sink_batch("scores", [2, 3, 4], [{"n": 2}, {"n": 3}, {"n": -4}], value))
    assert query(postgres_db, "SELECT count(*) FROM scores") == [(2,)]
    assert query(postgres_db, "SELECT next_offset FROM raystream_connect_offsets") == [(2,)]
    task.stop()  # the task fails; its restart gets the records again, fixed by a transform
    restarted, context = sink_task(postgres_db, [tp])
    assert context.rewinds == {tp: 2}
    restarted.put_batch(sink_batch("scores", [2, 3, 4], [{"n": 2}, {"n": 3}, {"n": 4}], value))
    restarted.stop()
    assert query(postgres_db, "SELECT n FROM scores ORDER BY n") == [(i,) for i in range(5)]


def test_cdc_into_the_sink_copies_a_table_with_its_deletes(postgres_db: str) -> None:
    """Source batches become sink batches as the runtime would pass them through a topic."""
    execute(postgres_db, "CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance bigint)")
    store = OffsetStore()
    source = source_task(postgres_db, store, **cdc_config(**{"batch.max.rows": "3"}))
    execute(
        postgres_db,
        "INSERT INTO accounts SELECT i, 'o' || i, i * 10 FROM generate_series(1, 7) i",
        "UPDATE accounts SET balance = 0 WHERE id % 2 = 0",
        "DELETE FROM accounts WHERE id = 3",
        "UPDATE accounts SET id = 30 WHERE id = 5",
    )
    sink = PostgresSink()
    sink.start(
        {
            "connection.url": postgres_db,
            "name": "copy",
            "pk.mode": "record_key",
            "insert.mode": "upsert",
            "delete.enabled": "true",
            "auto.create": "true",
            "table.name.format": "copy_of_${topic}",
        }
    )
    (config,) = sink.task_configs(1)
    tp = TopicPartition("accounts", 0)
    task = PostgresSinkTask()
    task.context = SinkContext()
    task.start(config)
    task.open([tp])
    next_offset = 0
    for batch in drain(source, store):
        n = batch.table.num_rows
        table = batch.table
        task.put_batch(
            sink_batch(
                "accounts",
                range(next_offset, next_offset + n),
                table.column("value").to_pylist(),
                table.column("value").type,
                table.column("key").to_pylist(),
                table.column("key").type,
            )
        )
        next_offset += n
    source.stop()
    task.stop()
    assert query(postgres_db, "SELECT * FROM copy_of_accounts ORDER BY id") == query(
        postgres_db, "SELECT * FROM accounts ORDER BY id"
    )
    assert len(query(postgres_db, "SELECT * FROM accounts")) == 6


def test_a_tombstone_without_delete_enabled_fails_the_batch_naming_the_record(
    postgres_db: str,
) -> None:
    value = pa.struct([("n", pa.int64())])
    task, _ = sink_task(postgres_db, [TopicPartition("t", 0)], **{"auto.create": "true"})
    with pytest.raises(
        ConnectError, match=r"tombstone .* at t-0 offset 8 with delete\.enabled=false"
    ):
        task.put_batch(sink_batch("t", [7, 8], [{"n": 1}, None], value))
    task.stop()
    assert query(postgres_db, "SELECT to_regclass('t')") == [(None,)]  # rolled back whole


def test_sink_copies_every_arrow_type_it_maps(postgres_db: str) -> None:
    kinds = pa.struct(
        [
            ("raw", pa.binary()),
            ("took", pa.duration("us")),
            ("day", pa.date32()),
            ("at", pa.time64("us")),
            ("price", pa.decimal128(8, 3)),
            ("ok", pa.bool_()),
            ("ratio", pa.float32()),
            ("text", pa.string()),
            ("small", pa.int8()),
            ("doc", pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))])),
        ]
    )
    row = {
        "raw": b'\x00\xff,"',
        "took": dt.timedelta(days=1, microseconds=5),
        "day": dt.date(2024, 2, 29),
        "at": dt.time(23, 59, 58, 7),
        "price": Decimal("-1.250"),
        "ok": False,
        "ratio": float("inf"),
        "text": "",
        "small": -3,
        "doc": {"a": 1, "b": ["x", 'y,"z"']},
    }
    empty = dict.fromkeys(row)
    task, _ = sink_task(postgres_db, [TopicPartition("kinds", 0)], **{"auto.create": "true"})
    task.put_batch(sink_batch("kinds", [0, 1], [row, empty], kinds))
    task.stop()
    written = query(postgres_db, "SELECT * FROM kinds")
    assert written == [tuple(row.values()), tuple(empty.values())]
