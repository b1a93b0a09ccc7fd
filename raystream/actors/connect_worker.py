"""A Connect worker as a Ray actor: a thin shell running a :class:`Herder` on a thread.

``rs.connectors.Workers`` starts ``num_workers`` of these, detached (a Connect
cluster is a service, as Kafka Connect's workers are), named
``connect:<group_id>:<slot>`` in the cluster's namespace, with ``max_restarts=-1``: Ray
restarts a dead worker in place, and the restarted herder replays the configs topic
and starts its share again, its source tasks from their committed offsets and its sink
tasks from their group's committed offsets.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping
from typing import Any

import ray

from raystream.connectors.herder import Herder
from raystream.errors import ConnectError
from raystream.transport import CALL_ERRORS, stop_actor

ACTOR_PREFIX = "connect:"


def worker_name(group_id: str, slot: int) -> str:
    """The Ray actor name of worker ``slot`` of ``group_id``."""
    return f"{ACTOR_PREFIX}{group_id}:{slot}"


class ConnectWorkerShell:
    """Runs the herder's loop on a thread so that ``status`` and ``stop`` answer."""

    def __init__(
        self, cluster: Any, group_id: str, slot: int, plugins: Mapping[str, type] | None = None
    ) -> None:
        self.namespace = cluster.namespace
        self.group_id = group_id
        self.slot = slot
        self.herder = Herder(cluster, group_id, slot, plugins, fence=self._fence_others)
        self._thread = threading.Thread(target=self.herder.run, name="connect-herder", daemon=True)
        self._thread.start()

    def status(self) -> dict[str, Any]:
        """What the worker runs, its pid, and whether its loop is alive."""
        return {**self.herder.describe(), "pid": os.getpid(), "alive": self._thread.is_alive()}

    def fence(self, units: list[tuple[str, int | None]], generation: int) -> None:
        """Another worker of the group starts ``units`` (:meth:`Herder.fence`)."""
        self.herder.fence([tuple(unit) for unit in units], generation)  # type: ignore[misc]

    def _fence_others(self, units: list[tuple[str, int | None]], generation: int) -> None:
        """Fence ``units`` on every other worker of the group, in parallel; a worker
        that is gone runs nothing.

        Raises:
            ConnectError: a worker did not answer in time (the start waits a turn).
        """
        calls = []
        for slot in worker_slots(self.namespace, self.group_id):
            actor = None if slot == self.slot else _handle(self.namespace, self.group_id, slot)
            if actor is not None:
                calls.append((slot, actor.fence.remote(units, generation)))
        for slot, ref in calls:
            try:
                ray.get(ref, timeout=FENCE_TIMEOUT_S)
            except ray.exceptions.GetTimeoutError:
                raise ConnectError(
                    f"connect worker {slot} of group {self.group_id!r} did not stop "
                    f"{units} within {FENCE_TIMEOUT_S} s"
                ) from None
            except CALL_ERRORS:  # gone (stopped, or dead and not restarted): runs nothing
                pass

    def stop(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Stop every task (committing what it can) and the loop."""
        self.herder.stop()
        self._thread.join(timeout_s)
        return self.status()


ConnectWorkerActor = ray.remote(max_concurrency=4)(ConnectWorkerShell)
"""The worker as a Ray actor class (threaded: status answers while the loop runs)."""


START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
#: How long a fenced worker may take to stop a unit (a task's stop waits up to 30 s).
FENCE_TIMEOUT_S = 60.0


def start_workers(
    cluster: Any, group_id: str, count: int, plugins: Mapping[str, type] | None = None
) -> None:
    """Start (or find) workers ``0..count-1`` of ``group_id`` and wait until each answers.

    Raises:
        ConnectError: a worker did not start (its constructor failed: e.g. a plugin
            class that cannot be unpickled there).
    """
    actors = [
        ConnectWorkerActor.options(
            name=worker_name(group_id, slot),
            namespace=cluster.namespace,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_restarts=-1,
            max_task_retries=0,
        ).remote(cluster, group_id, slot, dict(plugins or {}))
        for slot in range(count)
    ]
    for slot, actor in enumerate(actors):
        try:
            ray.get(actor.status.remote(), timeout=START_TIMEOUT_S)
        except Exception as error:
            raise ConnectError(
                f"connect worker {slot} of group {group_id!r} did not start: {error}"
            ) from None


def worker_slots(namespace: str, group_id: str) -> list[int]:
    """The slots of the group's worker actors that Ray knows by name."""
    prefix = worker_name(group_id, 0)[:-1]
    slots = []
    for actor in ray.util.list_named_actors(all_namespaces=True):
        name = actor["name"]
        if actor["namespace"] == namespace and name.startswith(prefix):
            tail = name[len(prefix) :]
            if tail.isdigit():
                slots.append(int(tail))
    return sorted(slots)


def _handle(namespace: str, group_id: str, slot: int) -> Any | None:
    try:
        return ray.get_actor(worker_name(group_id, slot), namespace=namespace)
    except ValueError:  # not (or no longer) running
        return None


def worker_status(namespace: str, group_id: str, slot: int, timeout_s: float = 30.0) -> Any:
    """Worker ``slot``'s ``status()``, or None when it cannot answer."""
    actor = _handle(namespace, group_id, slot)
    if actor is None:
        return None
    try:
        return ray.get(actor.status.remote(), timeout=timeout_s)
    except CALL_ERRORS:
        return None


def stop_workers(namespace: str, group_id: str, slots: list[int]) -> None:
    """Stop these workers (their tasks commit first) and end their actors for good."""
    actors = [a for a in (_handle(namespace, group_id, s) for s in slots) if a is not None]
    refs = [a.stop.remote() for a in actors]
    for ref in refs:
        with contextlib.suppress(*CALL_ERRORS):
            ray.get(ref, timeout=STOP_TIMEOUT_S)
    for actor in actors:
        stop_actor(actor)
