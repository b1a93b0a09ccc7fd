"""A Connect task moving between workers never runs on both: herders fence before starting.

Two herders of one worker group run in this process on the session's cluster (real
configs, offsets and status topics; no worker actors), turned by hand, so that one of
them reads the configs topic late, as a busy worker does. Their fences call each other
directly, where the worker actors call each other through Ray.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from raystream.connectors import storage
from raystream.connectors.api import SourceConnector, SourceTask, Task
from raystream.connectors.herder import Herder
from raystream.connectors.runtime import RUNNING
from raystream.connectors.worker import STARTED

#: How many instances of each tracked task run now, and the tasks that ever ran twice.
RUNS: Counter[str] = Counter()
TWICE: list[str] = []
LOCK = threading.Lock()


class TrackedTask(SourceTask):
    """A source task that produces nothing and counts its running instances."""

    def start(self, config: dict[str, str]) -> None:
        self.key = config["track.key"]
        self.idle = threading.Event()
        with LOCK:
            if RUNS[self.key]:
                TWICE.append(self.key)
            RUNS[self.key] += 1

    def poll(self) -> None:
        self.idle.wait(0.02)
        return None

    def stop(self) -> None:
        with LOCK:
            RUNS[self.key] -= 1


class TrackedSource(SourceConnector):
    def task_class(self) -> type[Task]:
        return TrackedTask


@pytest.fixture
def herders(shared_cluster: Any) -> Iterator[tuple[Herder, Herder, storage.ConnectStore]]:
    """Workers 0 and 1 of a fresh group, fencing each other; the group's store."""
    group = f"fence-{uuid.uuid4().hex[:8]}"
    store = storage.ConnectStore(shared_cluster, group)
    store.ensure_topics()
    plugins = {"Tracked": TrackedSource}
    first = Herder(shared_cluster, group, 0, plugins, fence=lambda u, g: second.fence(u, g))
    second = Herder(shared_cluster, group, 1, plugins, fence=lambda u, g: first.fence(u, g))
    yield first, second, store
    for herder in (first, second):
        herder.shutdown()


def turned(herder: Herder, condition: Callable[[], bool]) -> bool:
    """One turn of ``herder``, then ``condition``: what the waits below poll."""
    herder.turn()
    return condition()


def test_a_task_moving_to_another_worker_stops_on_the_old_one_before_it_starts(
    herders: tuple[Herder, Herder, storage.ConnectStore], wait_until: Callable[..., Any]
) -> None:
    old, new, store = herders
    key = uuid.uuid4().hex
    config = {"connector.class": "Tracked", "tasks.max": "1", "track.key": key}
    store.write(
        store.configs_topic,
        [
            (storage.WORKERS_KEY, {"count": 1}),
            (storage.connector_key("moving"), {"properties": config}),
            (storage.target_state_key("moving"), {"state": STARTED}),
        ],
    )
    old.catch_up()
    new.catch_up()
    wait_until(lambda: turned(old, lambda: RUNS[key] == 1), 60, "the task running on worker 0")

    # The group grows to two: task 0 of "moving" now belongs to worker 1. Worker 1
    # reads that first and starts it while worker 0 has not turned since.
    store.write(store.configs_topic, [(storage.WORKERS_KEY, {"count": 2})])
    task = ("moving", 0)

    def started_on_new() -> bool:
        runner = new.tasks.get(task)
        return runner is not None and runner.state == RUNNING

    wait_until(lambda: turned(new, started_on_new), 60, "the task started on worker 1")
    assert TWICE == [], "the task ran on both workers at once"
    assert RUNS[key] == 1
    assert task not in old.running
    assert old.fenced[task] >= 0

    # Worker 0 catches up: it keeps the task stopped, and its fence is lifted.
    wait_until(lambda: turned(old, lambda: not old.fenced), 60, "worker 0 caught up")
    assert task not in old.running and task in new.running
    assert RUNS[key] == 1 and TWICE == []
