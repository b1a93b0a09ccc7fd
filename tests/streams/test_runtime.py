"""Streams applications on a real Ray: worker actors in the application's consumer group,
internal topics, stores restored from changelogs, interactive queries, errors surfaced,
exactly-once under worker kills, scaling. Each result is checked against the batch answer
computed from the same input records."""

from __future__ import annotations

import itertools
import json
import random
import time
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import raystream as rs
from raystream.cli import main
from raystream.errors import StreamsError, TopologyError
from raystream.streams import TumblingWindows
from raystream.types import TopicPartition

_apps = itertools.count()
WINDOW_MS = 1_000


def app_id(name: str) -> str:
    return f"{name}-{time.monotonic_ns() % 10**9}-{next(_apps)}"


def read_records(
    cluster: Any, topic: str, isolation: str = "read_uncommitted"
) -> list[tuple[Any, Any]]:
    """Every (key, value) of ``topic`` readable at ``isolation``, partition by partition."""
    n = cluster.partitions_for(topic)
    tps = [TopicPartition(topic, p) for p in range(n)]
    out: list[tuple[Any, Any]] = []
    with cluster.consumer(
        auto_offset_reset="earliest", enable_auto_commit=False, isolation_level=isolation
    ) as consumer:
        consumer.assign(tps)
        end = consumer.end_offsets(tps)
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < end[tp] for tp in tps):
            assert time.monotonic() < deadline
            for records in consumer.poll(timeout_ms=200).values():
                out += [(r.key, r.value) for r in records]
    return out


def lag(cluster: Any, group: str, topics: list[str]) -> int:
    """Input records the application has not committed yet."""
    try:
        committed = cluster.admin().describe_group(group).offsets
    except rs.errors.GroupIdNotFoundError:
        committed = {}
    tps = [TopicPartition(t, p) for t in topics for p in range(cluster.partitions_for(t))]
    with cluster.consumer(enable_auto_commit=False) as consumer:
        ends = consumer.end_offsets(tps)
    return sum(ends[tp] - committed.get(tp, 0) for tp in tps)


def committed_total(cluster: Any, group: str, topic: str) -> int:
    """The sum of ``group``'s committed offsets on ``topic``'s partitions."""
    try:
        offsets = cluster.admin().describe_group(group).offsets
    except rs.errors.GroupIdNotFoundError:
        return 0
    return sum(offset for tp, offset in offsets.items() if tp.topic == topic)


def produce(cluster: Any, topic: str, items: list[tuple[bytes, bytes, int]]) -> None:
    with cluster.producer(linger_ms=1) as producer:
        for key, value, ts in items:
            producer.send(topic, value, key, timestamp_ms=ts)


def clicks(n: int, keys: int, seed: int) -> list[tuple[bytes, bytes, int]]:
    """``n`` records over ``keys`` keys, timestamps spread over 6 windows and shuffled
    (out of order, all within the grace)."""
    rng = random.Random(seed)
    items = [
        (f"k{rng.randrange(keys)}".encode(), b"x", rng.randrange(6 * WINDOW_MS)) for _ in range(n)
    ]
    rng.shuffle(items)
    return items


def batch_counts(items: list[tuple[bytes, bytes, int]]) -> Counter[str]:
    return Counter(f"{k.decode()}@{ts // WINDOW_MS * WINDOW_MS}" for k, _, ts in items)


def windowed_count_app(cluster: Any, source: str, sink: str, **options: Any) -> rs.streams.App:
    """Count per key per tumbling window, through a repartition topic (group_by)."""
    app = rs.streams.App(cluster, app_id("count"), commit_interval_ms=50, **options)
    (
        app.stream(source)
        .group_by(lambda k, v: k.decode())
        .window(TumblingWindows(WINDOW_MS, grace_ms=60_000))
        .count(name="counts")
        .to_stream()
        .to(
            sink,
            key_serializer=lambda w: f"{w.key}@{w.start_ms}".encode(),
            value_serializer=lambda v: str(v).encode(),
        )
    )
    return app


def final_counts(records: list[tuple[Any, Any]]) -> dict[str, int]:
    """The last count of each (key, window): the table the update stream describes."""
    return {k.decode(): int(v) for k, v in records}


def changelog_ends(cluster: Any, topic: str) -> dict[int, int]:
    """Each changelog partition's end offset (its record count: no transactions)."""
    tps = [TopicPartition(topic, p) for p in range(cluster.partitions_for(topic))]
    with cluster.consumer(enable_auto_commit=False) as consumer:
        return {tp.partition: end for tp, end in consumer.end_offsets(tps).items()}


def test_a_windowed_count_over_out_of_order_records_gives_the_batch_answer(
    shared_cluster: Any, make_topic: Any, wait_until: Any, chaos: Any
) -> None:
    """...and, with a standby of each task on the other worker, a worker killed for good
    hands its tasks to the survivor, which restores almost nothing (its standbys were
    current) and resumes each task's stream time (a late record stays dropped)."""
    source, sink = make_topic(partitions=3), make_topic()
    items = clicks(600, keys=7, seed=1)
    produce(shared_cluster, source, items)
    # No record cache: every update is a changelog record, so the moved tasks' changelogs
    # are long enough to tell a standby's handover from a restore.
    app = windowed_count_app(
        shared_cluster, source, sink, num_workers=2, num_standby_replicas=1, cache_max_bytes=0
    )
    # The Arrow path on a typed topic, in the same polls as the byte topics: fn's table
    # goes to the typed output topic with send_batch.
    schema = pa.schema([("x", pa.int64()), ("name", pa.string())])
    typed_in, typed_out = make_topic(schema=schema), make_topic(schema=schema)
    app.stream(typed_in).map_batches(lambda t: t.set_column(2, "x", pc.multiply(t["x"], 2))).to(
        typed_out
    )
    with shared_cluster.producer() as producer:
        for i in range(50):
            producer.send(typed_in, {"x": i, "name": f"n{i}"}, b"k%d" % (i % 5))
    app.start()
    try:
        internal = [app.application_id + "-" + s for s in ("counts-changelog",)]
        assert all(t in shared_cluster.admin().list_topics() for t in internal)
        assert app.state in ("REBALANCING", "RUNNING")
        topics = [source, typed_in, *app.topology.repartition_topics]
        wait_until(lambda: lag(shared_cluster, app.application_id, topics) == 0, 60, "no lag")
        expected = batch_counts(items)
        wait_until(
            lambda: final_counts(read_records(shared_cluster, sink)) == expected,
            30,
            "the batch answer in the output topic",
        )
        wait_until(lambda: app.state == "RUNNING", 30, "RUNNING")
        doubled = sorted((v["x"], v["name"]) for _, v in read_records(shared_cluster, typed_out))
        assert doubled == [(2 * i, f"n{i}") for i in range(50)]
        # Interactive queries: the window store of every task, and one key's windows.
        store = app.store("counts")
        assert {f"{w.key}@{w.start_ms}": c for w, c in store.all()} == expected
        fetched = store.fetch("k3", 0, 6 * WINDOW_MS)
        assert {f"k3@{start}": c for start, c in fetched} == {
            k: c for k, c in expected.items() if k.startswith("k3@")
        }

        # Stream time moves to 100 s (after every record above, so none of them is late).
        future = [(f"k{i}".encode(), b"x", 100 * WINDOW_MS) for i in range(7)]
        produce(shared_cluster, source, future)
        expected = batch_counts(items + future)
        wait_until(
            lambda: final_counts(read_records(shared_cluster, sink)) == expected,
            30,
            "the future records counted",
        )
        wait_until(lambda: lag(shared_cluster, app.application_id, topics) == 0, 60, "committed")
        # Each stateful task has a standby on the other worker, fed from its changelog
        # and checkpointed up to its end.
        changelog = app.application_id + "-counts-changelog"
        ends = changelog_ends(shared_cluster, changelog)

        def standbys_current() -> bool:
            statuses = app.status()
            checkpoints = {t: c for s in statuses for t, c in s["standby_checkpoints"].items()}
            stateful = [t for s in statuses for t in s["tasks"] if t.startswith("1_")]
            return sorted(checkpoints) == sorted(stateful) and all(
                c == {"counts": ends[int(t[2:])]} for t, c in checkpoints.items()
            )

        wait_until(
            standbys_current,
            60,
            "standbys checkpointed up to the changelog's end",
            detail=lambda: [(s["tasks"], s["standby_checkpoints"]) for s in app.status()],
        )
        survivor, victim = app.status()
        assert survivor["standby_tasks"] == [t for t in victim["tasks"] if t.startswith("1_")]
        moved = [t for t in victim["tasks"] if t.startswith("1_")]
        moved_records = sum(ends[int(t.split("_")[1])] for t in moved)
        restored_before = survivor["restored_records_total"]
        every_task = len(survivor["tasks"]) + len(victim["tasks"])
        chaos.kill_actor(app._runner.workers[1], "streams worker 1", restart=False)
        chaos.verify(min_faults=1)
        survivor = wait_until(
            lambda: (
                (s := app.status()[0])
                and s["state"] == "RUNNING"
                and len(s["tasks"]) == every_task
                and s
            ),
            60,
            "the survivor runs every task",
        )
        restored = survivor["restored_records_total"] - restored_before
        assert moved_records >= 50 and restored * 10 < moved_records, (restored, moved_records)
        assert survivor["standby_updated_records_total"] > 0
        assert not survivor["standby_tasks"]  # taken over: nobody to keep copies for
        # A record of window [0, 1 s) is late at stream time 100 s, also for moved tasks.
        produce(shared_cluster, source, [(f"k{i}".encode(), b"x", 0) for i in range(7)])
        wait_until(
            lambda: app.status()[0]["dropped_records_total"] == 7, 30, "late records dropped"
        )
        assert final_counts(read_records(shared_cluster, sink)) == expected
        # The moved stores answer queries (windows past retention at 100 s are gone).
        held = {f"{w.key}@{w.start_ms}": c for w, c in store.all()}
        assert {k for k in expected if k.endswith("@100000")} <= set(held)
        assert all(expected[k] == c for k, c in held.items())
    finally:
        app.stop()
    assert app.state == "NOT_RUNNING"


def test_a_stream_table_join_enriches_every_order_with_its_customer(
    shared_cluster: Any, make_topic: Any, wait_until: Any, capsys: Any
) -> None:
    customers, orders, sink = make_topic(partitions=2), make_topic(partitions=2), make_topic()
    app = rs.streams.App(shared_cluster, app_id("join"), commit_interval_ms=50)
    table = app.table(customers, name="customers")
    app.stream(orders).join(table, lambda order, customer: order + b"@" + customer).to(sink)
    app.start()
    try:
        produce(
            shared_cluster,
            customers,
            [(f"c{i}".encode(), f"city{i}".encode(), 0) for i in range(10)],
        )
        store = app.store("customers")
        wait_until(lambda: len(store.all()) == 10, 60, "the customers table loaded")
        assert store.get(b"c4") == b"city4" and store.get(b"nobody") is None
        assert store.range(b"c1", b"c3") == [
            (b"c1", b"city1"),
            (b"c2", b"city2"),
            (b"c3", b"city3"),
        ]
        rng = random.Random(2)
        placed = [
            (f"c{rng.randrange(12)}".encode(), f"o{i}".encode(), 10 + rng.randrange(100))
            for i in range(200)
        ]
        produce(shared_cluster, orders, placed)
        expected = Counter(
            (c, o + b"@" + f"city{c.decode()[1:]}".encode())
            for c, o, _ in placed
            if int(c[1:]) < 10
        )
        wait_until(
            lambda: Counter(read_records(shared_cluster, sink)) == expected,
            60,
            "every order with a known customer joined once",
        )
        # The CLI finds the running app through its named worker actors.
        namespace = ["--namespace", shared_cluster.namespace]
        capsys.readouterr()
        assert main([*namespace, "streams", "list", "--output", "json"]) == 0
        assert json.loads(capsys.readouterr().out)[app.application_id] == 1
        assert main([*namespace, "streams", "describe", app.application_id]) == 0
        out = capsys.readouterr().out
        assert "RUNNING" in out and "Sub-topology: 0" in out and "0_1" in out
        assert main([*namespace, "streams", "describe", "nobody"]) == 1
    finally:
        app.stop()


def test_start_checks_co_partitioning_and_missing_topics(
    shared_cluster: Any, make_topic: Any
) -> None:
    left, right = make_topic(partitions=2), make_topic(partitions=3)
    app = rs.streams.App(shared_cluster, app_id("copart"))
    app.stream(left).join(app.table(right), lambda a, b: a).to(left)
    with pytest.raises(TopologyError, match=r"co-partitioned.*\{.*2.*3"):
        app.start()
    missing = rs.streams.App(shared_cluster, app_id("missing"))
    missing.stream("no-such-topic").to(left)
    with pytest.raises(TopologyError, match=r"no-such-topic.*does not exist"):
        missing.start()


def test_a_user_function_that_raises_stops_every_worker_and_puts_the_app_in_error(
    shared_cluster: Any, make_topic: Any, wait_until: Any
) -> None:
    source, sink = make_topic(partitions=2), make_topic()

    def explode(value: bytes) -> bytes:
        if value == b"bad":
            raise ValueError("cannot handle bad")
        return value

    app = rs.streams.App(shared_cluster, app_id("boom"), commit_interval_ms=50, num_workers=2)
    app.stream(source).map_values(explode).to(sink)
    app.start()
    try:
        wait_until(
            lambda: all(s and s["state"] == "RUNNING" and s["tasks"] for s in app.status()),
            60,
            "both workers run a task",
        )
        produce(shared_cluster, source, [(b"k", b"good", 1), (b"k", b"bad", 2)])
        with pytest.raises(StreamsError, match="cannot handle bad"):
            app.wait(timeout=60)
        assert app.state == "ERROR"
        # The whole app stops (Kafka Streams' SHUTDOWN_CLIENT): the failed worker's
        # sibling committed and closed instead of taking over the poison record.
        statuses = wait_until(
            lambda: (s := app.status()) and not any(x["alive"] for x in s) and s,
            60,
            "every worker stopped",
        )
        assert sorted(s["state"] for s in statuses) == ["ERROR", "STOPPED"]
        assert app.state == "ERROR"
    finally:
        app.stop()
    assert app.state == "NOT_RUNNING"


def per_window_updates(records: list[tuple[Any, Any]]) -> dict[str, list[int]]:
    """Each (key, window)'s count updates, in the order they were written."""
    updates: dict[str, list[int]] = {}
    for k, v in records:
        updates.setdefault(k.decode(), []).append(int(v))
    return updates


def assert_each_count_once(records: list[tuple[Any, Any]], expected: Counter[str]) -> None:
    """Every record counted once: each (key, window)'s updates rise strictly to its count
    (the record cache folds updates between commits, so not every count is written, but
    a record counted twice would repeat or overshoot one)."""
    updates = per_window_updates(records)
    assert set(updates) == set(expected)
    wrong = {
        k: u for k, u in updates.items() if u != sorted(set(u)) or u[-1] != expected[k] or u[0] < 1
    }
    assert not wrong, f"duplicated or lost updates: {dict(itertools.islice(wrong.items(), 3))}"


@pytest.mark.slow
def test_exactly_once_survives_repeated_worker_kills(
    shared_cluster: Any, make_topic: Any, wait_until: Any, chaos: Any
) -> None:
    source, sink = make_topic(partitions=3), make_topic()
    items = clicks(1_500, keys=5, seed=3)
    app = windowed_count_app(
        shared_cluster, source, sink, num_workers=2, processing_guarantee="exactly_once"
    )
    app.start()
    try:
        # Each kill lands while there is work: a chunk goes in, the application commits
        # some of it (its committed input offsets move), then a worker dies. Waiting on
        # the workers' own counters instead raced: a restarted worker that found all
        # input done never counted anything.
        step = -(-len(items) // 6)
        chunks = [items[i : i + step] for i in range(0, len(items), step)]
        workers = app._runner.workers
        for round_ in range(3):
            worker = workers[round_ % len(workers)]
            wait_until(
                lambda w=worker: chaos.actor_info(w)["State"] == "ALIVE", 120, "worker alive"
            )
            before = committed_total(shared_cluster, app.application_id, source)
            produce(shared_cluster, source, chunks[round_])
            wait_until(
                lambda b=before: committed_total(shared_cluster, app.application_id, source) > b,
                120,
                "a commit of the new chunk",
            )
            chaos.kill_actor(worker, f"streams worker {round_ % len(workers)}")
        chaos.verify(min_faults=3, timeout_s=120)
        for chunk in chunks[3:]:
            produce(shared_cluster, source, chunk)
        expected = batch_counts(items)
        # (Input lag never reaches 0 under exactly-once: a transaction's commit marker
        # sits after its last record, so the answer itself is what to wait for.)
        records = wait_until(
            lambda: (
                (r := read_records(shared_cluster, sink, "read_committed"))
                and final_counts(r) == expected
                and r
            ),
            240,
            "the batch answer under read_committed",
            interval_s=1.0,
            detail=lambda: [
                (s["state"], s["tasks"], s["aborts_total"], (s["error"] or "")[-300:])
                for s in app.status()
                if s
            ],
        )
        assert_each_count_once(records, expected)
    finally:
        app.stop()


@pytest.mark.slow
def test_scaling_one_three_one_moves_tasks_with_their_state(
    shared_cluster: Any, make_topic: Any, wait_until: Any
) -> None:
    source, sink = make_topic(partitions=3), make_topic()
    items = clicks(1_200, keys=6, seed=4)
    app = windowed_count_app(shared_cluster, source, sink, num_workers=1)
    app.start()
    topics = [source, *app.topology.repartition_topics]
    try:
        thirds = [items[:400], items[400:800], items[800:]]
        produce(shared_cluster, source, thirds[0])
        wait_until(lambda: lag(shared_cluster, app.application_id, topics) == 0, 120, "no lag")
        app.scale(3)
        wait_until(
            lambda: all(s and s["state"] == "RUNNING" and s["tasks"] for s in app.status()),
            120,
            "three workers with tasks",
        )
        # The tasks that moved rebuilt their window stores from the changelog.
        assert sum(s["restored_records_total"] for s in app.status()[1:]) > 0
        produce(shared_cluster, source, thirds[1])
        wait_until(lambda: lag(shared_cluster, app.application_id, topics) == 0, 120, "no lag")
        app.scale(1)
        wait_until(
            lambda: [len(s["tasks"]) for s in app.status() if s] == [6], 120, "all tasks back"
        )
        produce(shared_cluster, source, thirds[2])
        wait_until(lambda: lag(shared_cluster, app.application_id, topics) == 0, 120, "no lag")
        expected = batch_counts(items)
        records = wait_until(
            lambda: (r := read_records(shared_cluster, sink)) and final_counts(r) == expected and r,
            60,
            "the batch answer",
        )
        assert_each_count_once(records, expected)
    finally:
        app.stop()
