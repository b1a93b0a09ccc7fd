"""A PostgreSQL table to a topic to another PostgreSQL table on a real Ray, exactly once.

The source captures changes (``mode=cdc``) in Kafka transactions with its offsets
(``exactly.once.support=required``); the sink reads committed records only and writes
each batch with its offsets in one database transaction. A worker is killed while rows
are still being written to the source table (the group's one worker: both tasks die
and Ray restarts it): every row reaches the copy once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from raystream.types import TopicPartition

GROUP = "pgx"
ROWS, PER_TRANSACTION = 2000, 20


@pytest.fixture(scope="module")
def workers(shared_cluster: Any) -> Iterator[Any]:
    from raystream.connectors import Workers

    group = Workers(shared_cluster, group_id=GROUP, num_workers=1)  # Ray restarts it
    yield group
    group.shutdown()


def count(url: str, table: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def worker_running(workers: Any, name: str) -> Any:
    """The worker actor that runs task 0 of connector ``name``."""
    import ray

    from raystream.actors.connect_worker import worker_name

    worker_id = workers.status(name)["tasks"][0]["worker_id"]
    slot = int(worker_id.rsplit("-", 1)[1])
    return ray.get_actor(worker_name(GROUP, slot), namespace=workers.cluster.namespace)


@pytest.mark.slow
def test_a_table_reaches_another_table_once_each_across_a_killed_worker(
    workers: Any, shared_cluster: Any, postgres_db: str, wait_until, chaos
) -> None:
    with psycopg.connect(postgres_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, item text, qty bigint)")
    topic = "pgx.orders"  # the source's topic.prefix and the table's name
    shared_cluster.admin().create_topic(topic, partitions=2)
    json_records = {"key.converter": "json", "value.converter": "json"}
    workers.create(
        "pg-orders-out",
        {
            "connector.class": "raystream.connectors.postgres.PostgresSource",
            "connection.url": postgres_db,
            "mode": "cdc",
            "slot.name": "pgx_orders",
            "table.whitelist": "orders",
            "topic.prefix": "pgx.",
            "batch.max.rows": "50",
            "poll.interval.ms": "50",
            "exactly.once.support": "required",
            **json_records,
        },
    )
    workers.create(
        "pg-orders-in",
        {
            "connector.class": "raystream.connectors.postgres.PostgresSink",
            "connection.url": postgres_db,
            "topics": topic,
            "table.name.format": "orders_copy",
            "auto.create": "true",  # plain inserts, no key: a duplicate would show
            "consumer.override.isolation.level": "read_committed",
            "exactly.once.support": "required",  # Kafka passes it through; this sink keeps it
            **json_records,
        },
    )
    wait_until(
        lambda: (
            all(
                s == "RUNNING"
                for name in ("pg-orders-out", "pg-orders-in")
                for s in [workers.status(name)["connector"]["state"]]
                + [t["state"] for t in workers.status(name)["tasks"]]
            )
            and len(workers.status("pg-orders-in")["tasks"]) == 1
        ),
        120,
        "both connectors and their tasks RUNNING",
        detail=lambda: [workers.status(n) for n in ("pg-orders-out", "pg-orders-in")],
    )

    failures: list[BaseException] = []

    def write_orders() -> None:  # the application, still writing when the worker dies
        try:
            insert_orders()
        except BaseException as error:  # failed writes fail the test, not only the thread
            failures.append(error)
            raise

    def insert_orders() -> None:
        with psycopg.connect(postgres_db, autocommit=True) as conn:
            for first in range(0, ROWS, PER_TRANSACTION):
                conn.execute(
                    "INSERT INTO orders SELECT i, 'item ' || i, i * 3"
                    " FROM generate_series(%s::int, %s::int) i",
                    [first, first + PER_TRANSACTION - 1],
                )
                time.sleep(0.05)

    writer = threading.Thread(target=write_orders, name="orders-writer")
    writer.start()
    arrivals = [(0.0, 0)]  # (when, how many rows the copy had), as the test saw them grow

    def copied_at_least(n: int) -> bool:
        copied = count(postgres_db, "orders_copy") if _exists(postgres_db) else 0
        if copied > arrivals[-1][1]:
            arrivals.append((time.monotonic(), copied))
        return copied >= n

    def progress() -> str:
        ends = shared_cluster.consumer().end_offsets([TopicPartition(topic, p) for p in (0, 1)])
        states = {n: workers.status(n)["tasks"] for n in ("pg-orders-out", "pg-orders-in")}
        return f"topic end offsets {ends}; copied {arrivals[-1][1]}; tasks {states}"

    wait_until(lambda: failures or copied_at_least(200), 60, "200 orders copied", detail=progress)
    assert not failures, failures
    assert writer.is_alive(), "the writer finished before the kill: not mid-way"
    chaos.kill_actor(worker_running(workers, "pg-orders-in"), "the worker running both tasks")
    chaos.confirm()
    writer.join()
    assert not failures, failures
    wait_until(lambda: copied_at_least(ROWS), 120, f"all {ROWS} orders copied", detail=progress)
    chaos.assert_around([t for t, _ in arrivals[1:]], "orders arriving in the copy")
    with psycopg.connect(postgres_db, autocommit=True) as conn:
        copy = conn.execute("SELECT id, item, qty FROM orders_copy ORDER BY id").fetchall()
        source = conn.execute("SELECT id, item, qty FROM orders ORDER BY id").fetchall()
    assert len(source) == ROWS
    assert copy == source  # nothing lost, nothing twice
    for name in ("pg-orders-out", "pg-orders-in"):
        workers.delete(name)
    wait_until(lambda: not {"pg-orders-out", "pg-orders-in"} & set(workers.list()), 30, "deleted")


def _exists(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT to_regclass('orders_copy') IS NOT NULL").fetchone()[0]
