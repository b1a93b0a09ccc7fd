"""Standby placement and the restore start of a task's stores, without Ray: where each
active task keeps its warm copies, and which stores a task (or standby) that opens them
must wipe and restore from 0 rather than from its checkpoint."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from raystream.streams.dsl import App
from raystream.streams.standby import place_standbys
from raystream.streams.stores import read_checkpoint, write_checkpoint
from raystream.streams.task import TaskId, open_task_stores, restore_starts
from raystream.streams.windows import TumblingWindows


def test_each_task_keeps_its_standbys_on_the_members_after_its_owner() -> None:
    t = [TaskId(s, p) for s in (0, 1) for p in range(3)]
    active = {"m2": [t[1], t[4]], "m1": [t[0], t[3]], "m3": [t[2], t[5]]}
    assert place_standbys(active, 0) == {"m1": set(), "m2": set(), "m3": set()}
    assert place_standbys(active, 1) == {
        "m1": {t[2], t[5]},
        "m2": {t[0], t[3]},
        "m3": {t[1], t[4]},
    }
    # More replicas than other members: every other member, never the owner.
    assert place_standbys(active, 5) == {
        "m1": {t[1], t[4], t[2], t[5]},
        "m2": {t[0], t[3], t[2], t[5]},
        "m3": {t[0], t[3], t[1], t[4]},
    }
    assert place_standbys({"alone": [t[0]]}, 2) == {"alone": set()}
    assert place_standbys({}, 1) == {}


@pytest.mark.parametrize("seed", range(20))
def test_placement_is_deterministic_and_puts_n_copies_on_distinct_other_members(
    seed: int,
) -> None:
    rng = random.Random(seed)
    members = [f"member-{rng.randrange(10**6)}" for _ in range(rng.randrange(1, 6))]
    tasks = [TaskId(0, p) for p in range(rng.randrange(0, 12))]
    active: dict[str, list[TaskId]] = {m: [] for m in members}
    for task in tasks:
        active[rng.choice(members)].append(task)
    n = rng.randrange(0, 4)
    placed = place_standbys(active, n)
    shuffled = dict(rng.sample(list(active.items()), len(active)))
    assert place_standbys(shuffled, n) == placed  # every member computes the same
    owner = {task: m for m, mine in active.items() for task in mine}
    for task in tasks:
        holders = [m for m, standbys in placed.items() if task in standbys]
        assert owner[task] not in holders
        assert len(holders) == min(n, len(set(members)) - 1)


def test_restore_starts_from_the_checkpoint_unless_exactly_once_must_wipe(
    tmp_path: Path,
) -> None:
    app = App(None, "app")
    app.stream("t").group_by_key().window(TumblingWindows(10)).count(name="c")
    sub = app.subtopologies()[0]
    stores = open_task_stores(sub, tmp_path)
    stores["c"].put("k", 1, 0)
    stores["c"].flush()
    write_checkpoint(tmp_path, {"c": 7})
    checkpoint = read_checkpoint(tmp_path)
    assert restore_starts(stores, checkpoint, "at_least_once") == {"c": 7}
    assert restore_starts(stores, checkpoint, "exactly_once") == {"c": 7}
    assert list(stores["c"].fetch("k", 0, 0)) == [(0, 1)]  # a clean checkpoint keeps the data
    assert restore_starts(stores, {}, "at_least_once") == {"c": 0}
    assert list(stores["c"].fetch("k", 0, 0)) == [(0, 1)]  # replayed over: duplicates are harmless
    # Under exactly-once, stores without a checkpoint may hold aborted writes: wiped.
    assert restore_starts(stores, {}, "exactly_once") == {"c": 0}
    assert list(stores["c"].fetch("k", 0, 0)) == []
