"""The herder's logic, pure: the config state, who runs what, and what must change.

A worker group's connectors, their task configs and target states are the replay of
its configs topic (:class:`ConfigState`, Kafka Connect's ``ClusterConfigState``).
Every worker replays the same topic, so every worker computes the same
:func:`assign` from it: no leader and no rebalance protocol. Workers are numbered
slots ``0..count-1`` that Ray restarts in place, so the set of workers only changes when
``Workers`` writes a new count; a restarted slot takes its own share again. The
connector object of a connector runs on one worker, which writes its task configs to
the configs topic; the tasks run spread over all workers.

Worked example (3 workers; connector ``a`` with 2 tasks, ``b`` with 3): one counter
runs over the connectors in name order, then over their tasks (a, b, a-0, a-1, b-0,
b-1, b-2), dealing them to the slots in turn::

    slot 0: connector a, tasks a-1, b-2
    slot 1: connector b, task b-0
    slot 2: tasks a-0, b-1

When the count changes, a unit moves between workers that each act on their own
reading of the topic; the new worker fences the unit on the others before starting it
(the herder's "Fencing"), so it never runs on two at once.

:func:`plan` compares what a worker should run with what it runs and says what to
stop and start: a unit whose config changed is stopped and started again.

Nothing here imports Ray or reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raystream.connectors import storage

STARTED = "STARTED"
PAUSED = "PAUSED"
STOPPED = "STOPPED"
TARGET_STATES = (STARTED, PAUSED, STOPPED)

#: A unit of work: ``(connector, None)`` for a connector object, ``(connector, i)`` for task i.
UnitId = tuple[str, int | None]


@dataclass(frozen=True)
class RestartRequest:
    """``POST /connectors/{name}/restart`` (KIP-745), as stored in the configs topic."""

    connector: str
    include_tasks: bool = False
    only_failed: bool = False
    task: int | None = None  # ``POST .../tasks/{task}/restart``: that task alone


@dataclass
class ConfigState:
    """The replay of a configs topic (see the module docstring and :mod:`storage`)."""

    connectors: dict[str, dict[str, str]] = field(default_factory=dict)
    target_states: dict[str, str] = field(default_factory=dict)
    task_configs: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    pending_tasks: dict[str, dict[int, dict[str, str]]] = field(default_factory=dict)
    worker_count: int = 1
    offset: int = -1

    def apply(self, offset: int, key: str, value: Any) -> RestartRequest | None:
        """Apply one record (offsets ascending); returns the restart it asks for, if any."""
        self.offset = max(self.offset, offset)
        kind, name, task = storage.parse_config_key(key)
        if kind == "connector":
            if value is None:
                for table in (self.connectors, self.target_states, self.task_configs):
                    table.pop(name, None)
                self.pending_tasks.pop(name, None)
            else:
                self.connectors[name] = {k: str(v) for k, v in value["properties"].items()}
                self.target_states.setdefault(name, STARTED)
        elif kind == "target-state":
            if value is None:
                self.target_states.pop(name, None)
            elif name in self.connectors or value["state"] in TARGET_STATES:
                self.target_states[name] = value["state"]
        elif kind == "task" and task is not None:
            if value is not None:
                self.pending_tasks.setdefault(name, {})[task] = dict(value["properties"])
        elif kind == "commit":
            if value is not None and name in self.connectors:
                count = int(value["tasks"])
                pending = self.pending_tasks.pop(name, {})
                old = self.task_configs.get(name, [])
                self.task_configs[name] = [
                    pending.get(i, old[i] if i < len(old) else {}) for i in range(count)
                ]
        elif kind == "restart":
            if value is not None and name in self.connectors:
                task = value.get("task")
                return RestartRequest(
                    name,
                    bool(value.get("include-tasks")),
                    bool(value.get("only-failed")),
                    None if task is None else int(task),
                )
        elif kind == "workers" and value is not None:
            self.worker_count = max(1, int(value["count"]))
        return None

    def tasks(self, name: str) -> list[dict[str, str]]:
        """The committed task configs of ``name`` (empty before its first commit)."""
        return self.task_configs.get(name, []) if name in self.connectors else []

    def target_state(self, name: str) -> str:
        return self.target_states.get(name, STARTED)


def assign(state: ConfigState, worker_count: int | None = None) -> dict[int, list[UnitId]]:
    """``{slot: units}`` for every slot (see the module docstring's worked example).

    Connectors whose target state is STOPPED have no tasks running (their connector
    object still runs, as in Kafka, so its status stays visible).
    """
    count = worker_count if worker_count is not None else state.worker_count
    result: dict[int, list[UnitId]] = {slot: [] for slot in range(count)}
    units: list[UnitId] = [(name, None) for name in sorted(state.connectors)]
    for name in sorted(state.connectors):
        if state.target_state(name) != STOPPED:
            units.extend((name, i) for i in range(len(state.tasks(name))))
    for i, unit in enumerate(units):
        result[i % count].append(unit)
    return result


def unit_config(state: ConfigState, unit: UnitId) -> dict[str, Any] | None:
    """What a unit runs with, None if it is gone: a connector's config, or for a task
    ``{"connector": connector config, "task": task config}`` (a task runs its
    connector's converters, transforms and error policy, so a change of either
    restarts it)."""
    name, task = unit
    if name not in state.connectors:
        return None
    if task is None:
        return state.connectors[name]
    tasks = state.tasks(name)
    if task >= len(tasks):
        return None
    return {"connector": state.connectors[name], "task": tasks[task]}


@dataclass(frozen=True)
class Plan:
    """What a worker changes: units to stop, then units to start (with their configs,
    as :func:`unit_config` gives them)."""

    stop: list[UnitId]
    start: list[tuple[UnitId, dict[str, Any]]]


def plan(state: ConfigState, slot: int, running: Mapping[UnitId, Mapping[str, Any]]) -> Plan:
    """What worker ``slot`` must stop and start so that it runs exactly its share of
    ``assign(state)`` with the current configs (``running``: unit -> its
    :func:`unit_config` when started).

    A slot beyond the group's count runs nothing.
    """
    wanted: dict[UnitId, dict[str, Any]] = {}
    for unit in assign(state).get(slot, []):
        config = unit_config(state, unit)
        if config is not None:
            wanted[unit] = config
    stop = [u for u, config in running.items() if wanted.get(u) != dict(config)]
    start = [(u, c) for u, c in wanted.items() if u in stop or u not in running]
    return Plan(sorted(stop, key=_order), sorted(start, key=lambda uc: _order(uc[0])))


def _order(unit: UnitId) -> tuple[str, int]:
    return unit[0], -1 if unit[1] is None else unit[1]


def restart_units(request: RestartRequest, units: Mapping[UnitId, str]) -> list[UnitId]:
    """Which of a worker's units ``request`` restarts (``units``: unit -> its state):
    the connector unless ``only_failed`` and it is not FAILED; its tasks too with
    ``include_tasks`` (only the FAILED ones with ``only_failed``); a request naming a
    task restarts that task alone."""
    chosen = []
    for unit, status in units.items():
        name, task = unit
        if name != request.connector:
            continue
        if request.task is not None:
            if task == request.task:
                chosen.append(unit)
            continue
        if task is not None and not request.include_tasks:
            continue
        if request.only_failed and status != "FAILED":
            continue
        chosen.append(unit)
    return sorted(chosen, key=_order)


def connector_status(
    name: str, statuses: Mapping[str, dict], task_count: int, kind: str
) -> dict[str, Any]:
    """Kafka Connect's ``GET /connectors/{name}/status`` document from the status
    topic's latest records: a unit with no record yet is UNASSIGNED."""

    def one(key: str) -> dict[str, Any]:
        record = statuses.get(key) or {"state": "UNASSIGNED", "worker_id": None}
        out = {"state": record["state"], "worker_id": record.get("worker_id")}
        if record.get("trace"):
            out["trace"] = record["trace"]
        return out

    tasks = [{"id": i, **one(storage.status_key(name, i))} for i in range(task_count)]
    return {
        "name": name,
        "connector": one(storage.status_key(name)),
        "tasks": tasks,
        "type": kind,
    }
