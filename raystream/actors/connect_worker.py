"""A Connect worker as a Ray actor: a thin shell running a :class:`Herder` on a thread.

``rs.connectors.Workers`` starts ``num_workers`` of these, detached (a Connect
cluster is a service, as Kafka Connect's workers are), named
``connect:<group_id>:<slot>`` in the cluster's namespace, with ``max_restarts=-1``: Ray
restarts a dead worker in place, and the restarted herder replays the configs topic
and starts its share again, its source tasks from their committed offsets and its sink
tasks from their group's committed offsets.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

import ray

from raystream.connect.herder import Herder

ACTOR_PREFIX = "connect:"


def worker_name(group_id: str, slot: int) -> str:
    """The Ray actor name of worker ``slot`` of ``group_id``."""
    return f"{ACTOR_PREFIX}{group_id}:{slot}"


class ConnectWorkerShell:
    """Runs the herder's loop on a thread so that ``status`` and ``stop`` answer."""

    def __init__(
        self, cluster: Any, group_id: str, slot: int, plugins: Mapping[str, type] | None = None
    ) -> None:
        self.herder = Herder(cluster, group_id, slot, plugins)
        self._thread = threading.Thread(target=self.herder.run, name="connect-herder", daemon=True)
        self._thread.start()

    def status(self) -> dict[str, Any]:
        """What the worker runs, its pid, and whether its loop is alive."""
        return {**self.herder.describe(), "pid": os.getpid(), "alive": self._thread.is_alive()}

    def stop(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Stop every task (committing what it can) and the loop."""
        self.herder.stop()
        self._thread.join(timeout_s)
        return self.status()


ConnectWorkerActor = ray.remote(max_concurrency=4)(ConnectWorkerShell)
"""The worker as a Ray actor class (threaded: status answers while the loop runs)."""
