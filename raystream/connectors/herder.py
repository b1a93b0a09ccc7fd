"""One worker's control loop: follow the configs topic, run this worker's share.

The :class:`Herder` (Kafka Connect's name) of worker ``slot`` replays the configs topic
into a :class:`~raystream.connectors.worker.ConfigState`, then on every turn reads what
arrived, asks :func:`~raystream.connectors.worker.plan` what to stop and start, and does
it: a connector unit starts the connector object (``start``, then ``task_configs``
written back to the configs topic when they differ from the committed ones); a task
unit starts a :mod:`runtime` runner on a thread. Target states pause and resume the
units; restart requests (only those written after the worker caught up: a restarted
worker starts everything anyway) restart the units they name. Every state change of
a unit is written to the status topic.

**Fencing.** Workers read the configs topic each at its own pace, so when the group's
size changes a unit moving from worker A to worker B would run on both from the moment
B reads the change until A does. So, as Kafka Connect revokes a task before assigning
it elsewhere, B fences the unit before starting it: every other worker stops it and
keeps it stopped until its own reading of the configs topic reaches B's *generation*
(the offset of the last config record B applied; by then it assigns the unit as B
does). A worker whose reading is newer than the fencer's and that runs the unit as its
own keeps it (the fencer is the stale one, and the newer worker fenced it when it
started the unit). A worker that cannot be reached runs nothing; one that does not
answer in time holds the start back to the next turn.

I/O through raystream's clients; no Ray import (the actor shell adds Ray).
"""

from __future__ import annotations

import logging
import socket
import threading
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from raystream.connectors import storage
from raystream.connectors.api import Connector
from raystream.connectors.plugins import resolve
from raystream.connectors.runtime import FAILED, PAUSED, RUNNING, TaskEnv, TaskRunner, runner_for
from raystream.connectors.worker import (
    STARTED,
    STOPPED,
    ConfigState,
    RestartRequest,
    UnitId,
    assign,
    plan,
    restart_units,
)
from raystream.errors import RaystreamError

logger = logging.getLogger(__name__)

TURN_S = 0.2

#: Stops units on every other worker of the group until that worker has read the configs
#: topic up to a generation (see "Fencing" above); returns once they all answered.
Fence = Callable[[list[UnitId], int], None]


class _ConnectorContext:
    def __init__(self) -> None:
        self.reconfigure = False
        self.error: Exception | None = None

    def request_task_reconfiguration(self) -> None:
        self.reconfigure = True

    def raise_error(self, error: Exception) -> None:
        self.error = error


class _ConnectorUnit:
    """A running connector object and its state."""

    def __init__(self, connector: Connector, context: _ConnectorContext) -> None:
        self.connector = connector
        self.context = context
        self.state = RUNNING
        self.trace: str | None = None


class Herder:
    """Worker ``slot`` of group ``group_id`` (see the module docstring).

    Args:
        cluster: the raystream cluster.
        group_id: the worker group (names the internal topics).
        slot: this worker's number.
        plugins: extra connector classes by name (``Workers(plugins=...)``).
        fence: how this worker fences the units it starts on the other workers (the
            actor shell calls them); None runs no fence (a group of one).
    """

    def __init__(
        self,
        cluster: Any,
        group_id: str,
        slot: int,
        plugins: Mapping[str, type] | None = None,
        fence: Fence | None = None,
    ) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.slot = slot
        self.plugins = dict(plugins or {})
        self.worker_id = f"{socket.gethostname()}/{group_id}-{slot}"
        self.store = storage.ConnectStore(cluster, group_id)
        self.state = ConfigState()
        self.running: dict[UnitId, dict[str, Any]] = {}
        self.connectors: dict[str, _ConnectorUnit] = {}
        self.tasks: dict[tuple[str, int], TaskRunner] = {}
        self.caught_up = False
        self.fence_others = fence
        #: unit -> the generation another worker fenced it at: not started here before
        #: this worker's reading of the configs topic reaches it.
        self.fenced: dict[UnitId, int] = {}
        self._tail: storage.Tail | None = None
        self._stop = threading.Event()
        # Held by the loop's turn and by fences from other workers (never while this
        # worker waits for theirs: two workers fencing each other must not deadlock).
        self._lock = threading.RLock()

    # ----------------------------------------------------------------- the loop

    def run(self) -> None:
        """Turn until :meth:`stop`; a turn's error is logged and the loop goes on."""
        self.catch_up()
        while not self._stop.is_set():
            try:
                self.turn()
            except Exception as error:  # the loop survives: log and go on
                logger.warning(
                    "connect worker %s: %s",
                    self.worker_id,
                    "".join(traceback.format_exception(error, limit=4)),
                )
            self._stop.wait(TURN_S)
        self.shutdown()

    def catch_up(self) -> None:
        """Replay the configs topic to its end (before the first turn)."""
        self.store.ensure_topics()
        self._tail = storage.Tail(self.cluster, self.store.configs_topic)
        with self._lock:
            for offset, key, value in self._tail.read_to_end():
                if key is not None:
                    self.state.apply(offset, key.decode(), storage.decode(value))
            self.caught_up = True

    def turn(self) -> None:
        """Read new config records, then reconcile what runs with what should: stop
        first, fence the units to start on the other workers, then start them."""
        assert self._tail is not None
        restarts: list[RestartRequest] = []
        with self._lock:
            for offset, key, value in self._tail.poll():
                if key is None:
                    continue
                request = self.state.apply(offset, key.decode(), storage.decode(value))
                if request is not None:
                    restarts.append(request)
            self.fenced = {u: g for u, g in self.fenced.items() if g > self.state.offset}
            starts = self._stop_units()
            generation = self.state.offset
        if starts and self.fence_others is not None:
            try:
                self.fence_others([unit for unit, _ in starts], generation)
            except Exception as error:  # not fenced everywhere: start them at a later turn
                logger.warning("connect worker %s: fencing failed: %s", self.worker_id, error)
                starts = []
        with self._lock:
            for unit, config in starts:
                if unit not in self.fenced and unit not in self.running:
                    self._start_unit(unit, config)
            self._follow_target_states()
            for request in restarts:
                self.restart(request)
            self.reconfigure()

    def _stop_units(self) -> list[tuple[UnitId, dict[str, Any]]]:
        """Stop what :func:`plan` says; the units to start that no fence holds back."""
        decided = plan(self.state, self.slot, self.running)
        for unit in decided.stop:
            self._stop_unit(unit, deleted=unit[0] not in self.state.connectors)
        return [(unit, config) for unit, config in decided.start if unit not in self.fenced]

    def _follow_target_states(self) -> None:
        for (name, _), runner in self.tasks.items():
            if self.state.target_state(name) == STARTED:
                runner.resume()
            else:
                runner.pause()
        for name, unit in self.connectors.items():
            target = RUNNING if self.state.target_state(name) == STARTED else PAUSED
            if unit.state in (RUNNING, PAUSED) and unit.state != target:
                unit.state = target
                self._report((name, None), target, None)

    def fence(self, units: list[UnitId], generation: int) -> None:
        """Another worker starts ``units``, having read the configs topic up to
        ``generation``: stop them here and start none of them before this worker's
        reading reaches it, unless this worker's reading is newer and gives it the
        unit (see "Fencing" in the module docstring). Returns once they are stopped."""
        with self._lock:
            own = set(assign(self.state).get(self.slot, []))
            for unit in units:
                if generation < self.state.offset and unit in own:
                    continue  # the fencer is behind; it will find the unit is ours
                if unit in self.running:
                    self._stop_unit(unit, deleted=False)
                self.fenced[unit] = max(self.fenced.get(unit, -1), generation)

    def restart(self, request: RestartRequest) -> None:
        states: dict[UnitId, str] = {}
        for name, unit in self.connectors.items():
            states[(name, None)] = unit.state
        for (name, task), runner in self.tasks.items():
            states[(name, task)] = runner.state
        for unit in restart_units(request, states):
            config = self.running.get(unit)
            if config is None:
                continue
            self._stop_unit(unit, deleted=False)
            self._start_unit(unit, config)

    def reconfigure(self) -> None:
        """Write task configs again for connectors that asked (or failed meanwhile)."""
        for name, unit in list(self.connectors.items()):
            if unit.context.error is not None and unit.state != FAILED:
                self._fail_connector(name, unit, unit.context.error)
            elif unit.context.reconfigure and unit.state != FAILED:
                unit.context.reconfigure = False
                self._write_task_configs(name, unit)

    # ------------------------------------------------------------------ units

    def _start_unit(self, unit: UnitId, config: dict[str, Any]) -> None:
        name, task = unit
        self.running[unit] = config
        if task is None:
            self._start_connector(name, config)
            return
        connector_config, task_config = config["connector"], config["task"]
        try:
            cls = resolve(connector_config.get("connector.class", ""), self.plugins)
            task_class = cls().task_class()
        except Exception as error:
            self._report(unit, FAILED, "".join(traceback.format_exception(error)))
            return
        env = TaskEnv(
            cluster=self.cluster,
            group_id=self.group_id,
            connector=name,
            task_id=task,
            connector_config=dict(connector_config),
            task_config=dict(task_config),
            task_class=task_class,
            report=lambda state, trace, unit=unit: self._report(unit, state, trace),
        )
        runner = runner_for(env)
        self.tasks[(name, task)] = runner
        runner.start(paused=self.state.target_state(name) != STARTED)

    def _start_connector(self, name: str, config: dict[str, str]) -> None:
        context = _ConnectorContext()
        try:
            cls = resolve(config.get("connector.class", ""), self.plugins)
            connector = cls()
            connector.context = context
            connector.validate(config)
            connector.validate_for_workers(config, self.cluster.namespace)
            connector.start(dict(config))
        except Exception as error:
            unit = _ConnectorUnit(None, context)  # type: ignore[arg-type]
            self.connectors[name] = unit
            self._fail_connector(name, unit, error)
            return
        unit = _ConnectorUnit(connector, context)
        self.connectors[name] = unit
        unit.state = RUNNING if self.state.target_state(name) == STARTED else PAUSED
        self._report((name, None), unit.state, None)
        self._write_task_configs(name, unit)

    def _write_task_configs(self, name: str, unit: _ConnectorUnit) -> None:
        config = self.state.connectors.get(name)
        if config is None or self.state.target_state(name) == STOPPED:
            return
        try:
            max_tasks = int(config.get("tasks.max", "1"))
            configs = [
                {k: str(v) for k, v in c.items()} for c in unit.connector.task_configs(max_tasks)
            ][:max_tasks]
        except Exception as error:
            self._fail_connector(name, unit, error)
            return
        if configs == self.state.tasks(name):
            return
        records: list[tuple[str, Any]] = [
            (storage.task_key(name, i), {"properties": c}) for i, c in enumerate(configs)
        ]
        records.append((storage.commit_key(name), {"tasks": len(configs)}))
        self.store.write(self.store.configs_topic, records)

    def _fail_connector(self, name: str, unit: _ConnectorUnit, error: Exception) -> None:
        unit.state = FAILED
        unit.trace = "".join(traceback.format_exception(error))
        logger.error("connector %s failed: %s", name, unit.trace)
        self._report((name, None), FAILED, unit.trace)

    def _stop_unit(self, unit: UnitId, deleted: bool) -> None:
        name, task = unit
        self.running.pop(unit, None)
        if task is None:
            connector = self.connectors.pop(name, None)
            if connector is not None and connector.connector is not None:
                try:
                    connector.connector.stop()
                except Exception as error:
                    logger.warning("connector %s: stop raised %s", name, error)
        else:
            runner = self.tasks.pop((name, task), None)
            if runner is not None:
                runner.stop()
        if deleted:
            self._tombstone(unit)
        elif task is not None:
            self._report(unit, "UNASSIGNED", None)

    def _report(self, unit: UnitId, state: str, trace: str | None) -> None:
        name, task = unit
        value = {
            "state": state,
            "trace": trace,
            "worker_id": self.worker_id,
            "generation": self.state.offset,
        }
        self.store.write(self.store.status_topic, [(storage.status_key(name, task), value)])

    def _tombstone(self, unit: UnitId) -> None:
        try:
            self.store.write(self.store.status_topic, [(storage.status_key(*unit), None)])
        except RaystreamError as error:
            logger.warning("connect: status of %s not deleted: %s", unit, error)

    # ------------------------------------------------------------ introspection

    def describe(self) -> dict[str, Any]:
        """What this worker runs, for ``status`` calls and tests."""
        return {
            "worker_id": self.worker_id,
            "slot": self.slot,
            "caught_up": self.caught_up,
            "connectors": {n: u.state for n, u in self.connectors.items()},
            "tasks": {f"{n}-{t}": r.state for (n, t), r in self.tasks.items()},
        }

    def stop(self) -> None:
        self._stop.set()

    def shutdown(self) -> None:
        """Stop every unit (tasks commit what they can) and close the clients."""
        with self._lock:
            for unit in sorted(self.running, key=lambda u: (u[1] is None, u)):
                try:
                    self._stop_unit(unit, deleted=False)
                except Exception as error:
                    logger.warning(
                        "connect worker %s: stopping %s: %s", self.worker_id, unit, error
                    )
        if self._tail is not None:
            self._tail.close()
        self.store.close()
