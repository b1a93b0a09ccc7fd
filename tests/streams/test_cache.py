"""The record cache (KIP-63) on real stores, no Ray: folding of a key's updates between
commits, the old values forwarded, LRU eviction, windowed and session aggregates,
interactive queries reading through, and a cached run giving the uncached answer."""

from __future__ import annotations

import pickle
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from raystream.errors import InvalidConfigError
from raystream.streams import Windowed
from raystream.streams.dsl import App
from raystream.streams.serde import encode_key
from raystream.streams.stores import KeyValueStore, MemoryBackend, TaskCache, read_only
from raystream.streams.stores.cache import ENTRY_OVERHEAD_BYTES
from raystream.streams.task import OutputRecord, Task, TaskId, open_task_stores
from raystream.streams.windows import HoppingWindows, SessionWindows, TumblingWindows
from raystream.types import ConsumerRecord, TopicPartition


class Runner:
    """Runs every sub-topology of ``app`` as the task of partition 0 with a record cache
    of ``cache_max_bytes``, carrying records through repartition topics; ``commit``
    flushes the caches as the runtime does before committing."""

    def __init__(self, app: App, state_dir: Path, cache_max_bytes: int) -> None:
        self.app = app
        self.offsets: dict[str, int] = defaultdict(int)
        self.changelog: dict[TopicPartition, list] = defaultdict(list)
        self.tasks = [
            Task(
                TaskId(sub.id, 0),
                sub,
                open_task_stores(sub, state_dir / f"{sub.id}_0"),
                "app",
                cache_max_bytes=cache_max_bytes,
            )
            for sub in app.subtopologies()
        ]

    def records(self, topic: str, items: list[tuple[Any, Any, int]]) -> list[ConsumerRecord]:
        result = []
        for key, value, ts in items:
            result.append(ConsumerRecord(topic, 0, self.offsets[topic], ts, 0, key, value, ()))
            self.offsets[topic] += 1
        return result

    def feed(
        self, topic: str, items: list[tuple[Any, Any, int]], commit: bool = True
    ) -> list[OutputRecord]:
        """Process ``items`` (and what they send through repartition topics); with
        ``commit``, flush the caches (until nothing more moves); return the outputs."""
        outputs: list[OutputRecord] = []
        pending = self.records(topic, items)
        while True:
            while pending:
                by_task = defaultdict(list)
                for record in pending:
                    task = next(
                        t for t in self.tasks if record.topic in t.subtopology.source_topics
                    )
                    by_task[task.task_id.subtopology].append(record)
                pending = []
                for index, records in by_task.items():
                    pending += self._route(self.tasks[index].process(records, 0), outputs)
            if commit:
                for task in self.tasks:
                    pending += self._route(task.flush_cache(), outputs)
            if not pending:
                return outputs

    def _route(self, result: Any, outputs: list[OutputRecord]) -> list[ConsumerRecord]:
        for tp, changes in result.changelog.items():
            self.changelog[tp].extend(changes)
        pending = []
        for out in result.outputs:
            if out.topic in self.app.topology.repartition_topics:
                pending += self.records(out.topic, [(out.key, out.value, out.timestamp)])
            else:
                outputs.append(out)
        return pending


def kv(outputs: list[OutputRecord]) -> list[tuple[Any, Any]]:
    return [(o.key, o.value) for o in outputs]


def last_per_key(outputs: list[OutputRecord]) -> dict[Any, Any]:
    """The table the updates describe (a None value: no row)."""
    table = {}
    for o in outputs:
        table[o.key] = o.value
    return {k: v for k, v in table.items() if v is not None}


def test_repeated_updates_of_a_key_are_folded_until_the_commit(tmp_path: Path) -> None:
    app = App(None, "app")
    windows = TumblingWindows(10, grace_ms=10)
    counts = app.stream("clicks").group_by_key().window(windows).count(name="c")
    counts.to_stream().to("out")
    runner = Runner(app, tmp_path, cache_max_bytes=1 << 20)
    items = [("a", 1, 1), ("a", 1, 8), ("b", 1, 3), ("a", 1, 12), ("a", 1, 4)]
    assert runner.feed("clicks", items, commit=False) == []
    assert runner.changelog == {}
    out = runner.feed("clicks", [])
    # In the order of each key's last update; the timestamp is the largest folded one.
    assert [(o.key, o.value, o.timestamp) for o in out] == [
        (Windowed("b", 0, 10), 1, 3),
        (Windowed("a", 10, 20), 1, 12),
        (Windowed("a", 0, 10), 3, 8),
    ]
    (changes,) = runner.changelog.values()
    assert len(changes) == 3  # one changelog record per window, not per input record
    assert kv(runner.feed("clicks", [("a", 1, 5), ("a", 1, 6)])) == [(Windowed("a", 0, 10), 5)]


def test_forwarded_old_values_are_the_values_forwarded_before(tmp_path: Path) -> None:
    app = App(None, "app")
    app.table("t").filter(lambda k, v: v > 10).to_stream().to("out")
    runner = Runner(app, tmp_path, cache_max_bytes=1 << 20)
    assert kv(runner.feed("t", [("a", 20, 1), ("b", 1, 1)])) == [("a", 20)]
    # a: 5, 30, then 3, folded into 3 with old 20 (not 30): the filter retracts a.
    assert kv(runner.feed("t", [("a", 5, 2), ("a", 30, 3), ("a", 3, 4)])) == [("a", None)]
    # b: created and deleted within one commit: nothing to forward or log.
    before = sum(len(c) for c in runner.changelog.values())
    assert runner.feed("t", [("c", 1, 5), ("c", None, 6)]) == []
    assert sum(len(c) for c in runner.changelog.values()) == before


def test_a_table_table_join_over_cached_tables_gives_the_joined_rows(tmp_path: Path) -> None:
    app = App(None, "app")
    app.table("l").left_join(app.table("r"), lambda a, b: (a, b)).to_stream().to("out")
    runner = Runner(app, tmp_path, cache_max_bytes=1 << 20)
    runner.feed("r", [("k", "x", 1), ("j", "y", 1)], commit=False)
    out = runner.feed("l", [("k", 1, 2), ("k", 2, 3), ("m", 3, 4)])
    assert last_per_key(out) == {"k": (2, "x"), "m": (3, None)}
    out = runner.feed("l", [("k", None, 5)])
    assert kv(out) == [("k", None)]


def test_lru_eviction_flushes_the_store_evicted_entry_first(tmp_path: Path) -> None:
    flushed: list[tuple[Any, Any, Any]] = []
    one = len(encode_key("a")) + len(pickle.dumps(10, 5)) + ENTRY_OVERHEAD_BYTES
    cache = TaskCache(max_bytes=2 * one)
    store = KeyValueStore("s", MemoryBackend())
    cached = cache.wrap(
        store, lambda: (7, ()), lambda k, new, old, ts, h: flushed.append((k, new, old))
    )
    cached.put("a", 10)
    cached.put("b", 11)
    cached.put("a", 12)
    assert flushed == [] and store.get("a") is None
    cached.put("c", 13)  # over budget: b, the least recently used, is evicted
    assert flushed == [("b", 11, None), ("a", 12, None), ("c", 13, None)]
    assert cache.size_bytes == 2 * one and cached.dirty_count == 0
    assert [store.get(k) for k in "abc"] == [12, 11, 13]
    flushed.clear()
    cached.put("d", 14)  # evicts a, clean: nothing forwarded
    assert flushed == [] and cached.get("a") == 12 and cached.cached_count == 2
    cached.put("c", 15)
    cache.flush()
    assert flushed == [("d", 14, None), ("c", 15, 13)]
    assert [len(c) for c in [store.drain_changelog()]] == [5]


def test_a_small_budget_evicts_mid_batch_and_still_gives_the_final_counts(tmp_path: Path) -> None:
    app = App(None, "app")
    app.stream("clicks").group_by_key().count(name="c").to_stream().to("out")
    runner = Runner(app, tmp_path, cache_max_bytes=150)  # about two entries
    items = [(f"k{i % 5}", 1, i) for i in range(50)]
    out = runner.feed("clicks", items, commit=False)
    assert 0 < len(out) < 50  # evictions forwarded some updates before the commit
    out += runner.feed("clicks", [])
    assert last_per_key(out) == {f"k{i}": 10 for i in range(5)}
    for key in (f"k{i}" for i in range(5)):  # each key's updates go up, never repeat
        counts = [o.value for o in out if o.key == key]
        assert counts == sorted(set(counts))


def test_session_merges_within_a_commit_forward_only_the_merged_session(tmp_path: Path) -> None:
    app = App(None, "app")
    sessions = app.stream("t").group_by_key().window(SessionWindows(6, grace_ms=100))
    sessions.count(name="s").to_stream().to("out")
    runner = Runner(app, tmp_path, cache_max_bytes=1 << 20)
    assert kv(runner.feed("t", [("k", 1, 0)])) == [(Windowed("k", 0, 0), 1)]
    # 12 opens a session that 6 then merges with the one at 0 before any commit: the
    # session at 12 is never forwarded nor logged, the one at 0 is retracted.
    out = runner.feed("t", [("k", 1, 12), ("k", 1, 6)])
    assert kv(out) == [(Windowed("k", 0, 0), None), (Windowed("k", 0, 12), 3)]
    (changes,) = runner.changelog.values()
    assert [v is None for _, v in changes] == [False, True, False]


def test_queries_read_through_the_cache(tmp_path: Path) -> None:
    app = App(None, "app")
    grouped = app.stream("t").group_by_key()
    grouped.count(name="plain")
    grouped.window(TumblingWindows(10, grace_ms=20)).count(name="windows")
    grouped.window(SessionWindows(5, grace_ms=20)).count(name="sessions")
    runner = Runner(app, tmp_path, cache_max_bytes=1 << 20)
    runner.feed("t", [("a", 1, 1), ("b", 1, 2), ("a", 1, 3), ("a", 1, 14)], commit=False)
    (task,) = runner.tasks
    assert task.stores["plain"].get("a") is None  # nothing flushed yet
    plain = read_only(task.queryable_store("plain"))
    assert plain.get("a") == 3 and plain.all() == [("a", 3), ("b", 1)]
    assert plain.range("b", None) == [("b", 1)] and plain.approximate_num_entries() == 2
    windows = read_only(task.queryable_store("windows"))
    assert windows.fetch("a", 0, 100) == [(0, 2), (10, 1)]
    assert windows.all() == [
        (Windowed("a", 0, 10), 2),
        (Windowed("a", 10, 20), 1),
        (Windowed("b", 0, 10), 1),
    ]
    sessions = read_only(task.queryable_store("sessions"))
    assert sessions.fetch("a") == [(Windowed("a", 1, 3), 2), (Windowed("a", 14, 14), 1)]
    runner.feed("t", [("a", None, 20)])  # the commit; a null value is dropped
    assert task.stores["plain"].get("a") == 3
    assert plain.all() == [("a", 3), ("b", 1)]


def _random_items(seed: int, n: int) -> list[tuple[str, int, int]]:
    rng = random.Random(seed)
    return [
        (f"k{rng.randrange(4)}", rng.randrange(10), i * 3 - rng.randrange(40)) for i in range(n)
    ]


@pytest.mark.parametrize("cache_max_bytes", [1 << 20, 300])
def test_a_cached_run_gives_the_uncached_tables_and_final_results(
    tmp_path: Path, cache_max_bytes: int
) -> None:
    def build() -> App:
        app = App(None, "app")
        grouped = app.stream("t").group_by(lambda k, v: k)  # through a repartition topic
        grouped.window(TumblingWindows(20, grace_ms=15)).count(name="tumbling").to_stream().to(
            "tumbling"
        )
        hopping = grouped.window(HoppingWindows(30, 10, grace_ms=15)).reduce(
            lambda a, b: a + b, name="hopping"
        )
        hopping.suppress().to_stream().to("final")
        grouped.window(SessionWindows(8, grace_ms=15)).count(name="sessions").to_stream().to(
            "sessions"
        )
        grouped.count(name="plain").to_stream().to("plain")
        return app

    items = _random_items(seed=11, n=300)
    runs = {}
    for budget in (0, cache_max_bytes):
        runner = Runner(build(), tmp_path / str(budget), cache_max_bytes=budget)
        outputs: list[OutputRecord] = []
        for i in range(0, len(items), 40):
            outputs += runner.feed("t", items[i : i + 40])
        by_topic = defaultdict(list)
        for out in outputs:
            by_topic[out.topic].append(out)
        stores = {
            name: read_only(task.queryable_store(name)).all()
            for task in runner.tasks
            for name in task.stores
        }
        runs[budget] = (by_topic, stores)
    (plain, plain_stores), (cached, cached_stores) = runs[0], runs[cache_max_bytes]
    assert cached_stores == plain_stores
    for topic in ("tumbling", "sessions", "plain"):
        assert last_per_key(cached[topic]) == last_per_key(plain[topic]), topic
        assert len(cached[topic]) < len(plain[topic]), topic
    assert sorted(kv(cached["final"]), key=repr) == sorted(kv(plain["final"]), key=repr)
    assert len(kv(plain["final"])) == len({o.key for o in plain["final"]}) > 0


def test_app_checks_cache_max_bytes() -> None:
    assert App(None, "app").cache_max_bytes == 10 * 1024 * 1024
    assert App(None, "app", cache_max_bytes=0).cache_max_bytes == 0
    with pytest.raises(InvalidConfigError, match="cache_max_bytes"):
        App(None, "app", cache_max_bytes=-1)
