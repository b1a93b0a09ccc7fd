"""Standby tasks: warm copies of other workers' task stores (no Ray, no clock).

With ``num_standby_replicas=N`` every stateful task that runs (is *active*) on one
worker has up to N *standby* copies on other workers, as in Kafka Streams. A standby
never processes input, never produces and never writes a changelog: it reads the
task's changelog partitions (read_committed under exactly-once, so its stores never
hold writes a transaction may still abort) into stores in its own state directory,
and checkpoints the changelog offsets it reached. When a rebalance makes the task
active on a worker that kept a standby, the task restores from that checkpoint to the
end of the changelog instead of from offset 0.

Placement needs to know which worker runs which active task. Groups assign on the
coordinator and carry no per-member data, so each worker reads the group's whole
assignment (the coordinator's description of it) once per generation and applies
:func:`place_standbys` to it: every worker computes the same answer from the same
description, and keeps only its own share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raystream.streams.stores import changelog_topic, read_checkpoint, write_checkpoint
from raystream.streams.task import TaskId, open_task_stores, restore_starts
from raystream.streams.topology import SubTopology
from raystream.types import TopicPartition


def place_standbys(
    active: Mapping[str, Iterable[TaskId]], num_standby_replicas: int
) -> dict[str, set[TaskId]]:
    """Where each active task keeps its standbys: on the ``num_standby_replicas``
    members that follow its owner in member-id order (wrapping round), never on the
    owner; fewer when the group has fewer other members.

    Args:
        active: Each member's active stateful tasks.
        num_standby_replicas: Standbys wanted per task.

    Returns:
        Each member's standby tasks (every member of ``active`` has an entry).

    Example:
        Three members, one standby each: a task's standby sits on the next member.

        >>> t = [TaskId(0, p) for p in range(3)]
        >>> placed = place_standbys({"b": [t[1]], "a": [t[0]], "c": [t[2]]}, 1)
        >>> {m: sorted(str(x) for x in placed[m]) for m in sorted(placed)}
        {'a': ['0_2'], 'b': ['0_0'], 'c': ['0_1']}
    """
    members = sorted(active)
    copies = min(num_standby_replicas, len(members) - 1)
    placed: dict[str, set[TaskId]] = {member: set() for member in members}
    for index, member in enumerate(members):
        for task_id in active[member]:
            for step in range(1, copies + 1):
                placed[members[(index + step) % len(members)]].add(task_id)
    for member in members:  # a task listed under two members is active on both: no copy
        placed[member] -= set(active[member])
    return placed


@dataclass
class _Standby:
    task_dir: Path
    stores: dict[str, Any]
    changelogs: dict[str, TopicPartition]
    checkpoint: dict[str, int]  # the changelog offsets its stores cover on disk


class StandbyTasks:
    """One worker's standby tasks: their stores, the consumer that keeps them current,
    their checkpoints.

    Not thread-safe: the worker's loop thread drives it.

    Args:
        application_id: Names the changelog topics.
        subtopologies: The application's sub-topologies by id.
        processing_guarantee: Decides which stores are wiped on open (see
            :func:`~raystream.streams.stores.must_wipe_on_open`).
        task_dir: The state directory of a task (shared with the active task, which
            takes the stores over from the checkpoint).
        consumer: Makes a Consumer without a group (read_committed under exactly-once).

    Attributes:
        updated_records_total: Changelog records applied to standby stores so far.
    """

    def __init__(
        self,
        application_id: str,
        subtopologies: Mapping[int, SubTopology],
        processing_guarantee: str,
        task_dir: Callable[[TaskId], Path],
        consumer: Callable[[], Any],
    ) -> None:
        self.application_id = application_id
        self.subtopologies = subtopologies
        self.processing_guarantee = processing_guarantee
        self._task_dir = task_dir
        self._new_consumer = consumer
        self._consumer: Any = None
        self._tasks: dict[TaskId, _Standby] = {}
        self._stores_by_tp: dict[TopicPartition, Any] = {}
        self._changed = False
        self.updated_records_total = 0

    @property
    def task_ids(self) -> list[TaskId]:
        """The standby tasks held, in order."""
        return sorted(self._tasks)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._tasks

    def checkpoints(self) -> dict[TaskId, dict[str, int]]:
        """Each standby's checkpoint: per store, the changelog offset a takeover would
        restore from (read from any thread)."""
        return {task_id: dict(s.checkpoint) for task_id, s in list(self._tasks.items())}

    def assign(self, wanted: Iterable[TaskId]) -> None:
        """Hold exactly the standbys ``wanted``: drop the others (checkpointed), open the
        new ones from their checkpoints (or from 0 where the stores must be wiped)."""
        wanted = set(wanted)
        for task_id in [t for t in self._tasks if t not in wanted]:
            self.drop(task_id)
        starts: dict[TopicPartition, int] = {}
        for task_id in sorted(wanted - set(self._tasks)):
            sub = self.subtopologies[task_id.subtopology]
            task_dir = self._task_dir(task_id)
            stores = open_task_stores(sub, task_dir)
            begin = restore_starts(stores, read_checkpoint(task_dir), self.processing_guarantee)
            changelogs = {
                spec.name: TopicPartition(
                    changelog_topic(self.application_id, spec.name), task_id.partition
                )
                for spec in sub.stores
            }
            self._tasks[task_id] = _Standby(task_dir, stores, changelogs, begin)
            for name, tp in changelogs.items():
                self._stores_by_tp[tp] = stores[name]
                starts[tp] = begin[name]
        if starts:
            if self._consumer is None:
                self._consumer = self._new_consumer()
            self._consumer.assign(list(self._stores_by_tp))
            for tp, offset in starts.items():
                self._consumer.seek(tp, offset)

    def update(self) -> int:
        """Apply the changelog records fetched since the last call (waits for none);
        returns how many."""
        if not self._tasks:
            return 0
        table = self._consumer.poll_arrow(timeout_ms=0)
        if not table.num_rows:
            return 0
        topics = table.column("topic").to_pylist()
        partitions = table.column("partition").to_pylist()
        keys = table.column("key").to_pylist()
        values = table.column("value").to_pylist()
        start = 0
        for i in range(1, len(keys) + 1):  # partitions follow each other: apply each run
            if i == len(keys) or (topics[i], partitions[i]) != (topics[start], partitions[start]):
                store = self._stores_by_tp[TopicPartition(topics[start], partitions[start])]
                store.restore(zip(keys[start:i], values[start:i], strict=True))
                start = i
        self.updated_records_total += len(keys)
        self._changed = True
        return len(keys)

    def checkpoint(self) -> None:
        """Flush the standby stores and write each task's checkpoint: the changelog
        offsets its stores now cover (only after records were applied)."""
        if not self._changed:
            return
        for standby in self._tasks.values():
            self._checkpoint(standby)
        self._changed = False

    def _checkpoint(self, standby: _Standby) -> None:
        for store in standby.stores.values():
            store.flush()
        offsets = {
            name: self._consumer.position(tp)
            for name, tp in standby.changelogs.items()
            if standby.stores[name].persistent
        }
        write_checkpoint(standby.task_dir, offsets)
        standby.checkpoint = offsets

    def drop(self, task_id: TaskId) -> None:
        """Checkpoint and close a standby: it is not placed here any more, or its task
        becomes active here (and restores from this checkpoint)."""
        standby = self._tasks.pop(task_id)
        self._checkpoint(standby)
        for tp in standby.changelogs.values():
            del self._stores_by_tp[tp]
        for store in standby.stores.values():
            store.close()
        self._consumer.assign(list(self._stores_by_tp))

    def close(self) -> None:
        """Drop every standby and close the consumer."""
        try:
            for task_id in list(self._tasks):
                self.drop(task_id)
        finally:
            if self._consumer is not None:
                self._consumer.close(autocommit=False)
                self._consumer = None
