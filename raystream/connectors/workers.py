"""``rs.connectors.Workers``: a Connect cluster on Ray, and its Python API.

::

    workers = rs.connectors.Workers(cluster, group_id="connect", num_workers=2, rest_port=8083)
    workers.create("lines", {"connector.class": "FileStreamSource", "tasks.max": 1,
                             "file": "/tmp/in.txt", "topic": "lines"})
    workers.status("lines")   # {"name": "lines", "connector": {"state": "RUNNING", ...}, ...}

Creating ``Workers`` creates the group's internal topics (see :mod:`storage`), records
the group's size in its configs topic and starts (or finds) the ``num_workers``
worker actors; with ``rest_port`` it serves Kafka Connect's REST API on loopback
from this process (``rest_port=0`` takes a free port: see :attr:`rest_url`).
:meth:`Workers.attach` reaches a running group without starting anything (the CLI).

Every call is a record written to (or read from) the configs and status topics, as
Kafka Connect's herder does: the workers follow the configs topic and act on it, and
write each connector's and task's state to the status topic. Values of a config are
kept as strings (``"tasks.max": 2`` becomes ``"2"``), as Kafka Connect keeps them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from raystream.connectors import plugins as plugin_table
from raystream.connectors import storage
from raystream.connectors.connector_config import check_connector_config
from raystream.connectors.worker import PAUSED, STARTED, ConfigState, connector_status
from raystream.errors import ConnectError, InvalidConfigError

logger = logging.getLogger(__name__)


class ConnectorNotFoundError(ConnectError):
    """No connector of that name exists in the worker group (REST answers 404)."""


class ConnectorExistsError(ConnectError):
    """A connector of that name exists already (REST answers 409)."""


def _stringify(config: Mapping[str, Any]) -> dict[str, str]:
    if not isinstance(config, Mapping):
        raise InvalidConfigError(
            f"a connector config is a mapping of keys to values, got {config!r}"
        )
    out = {}
    for key, value in config.items():
        if not isinstance(key, str) or not key:
            raise InvalidConfigError(f"connector config key {key!r} is not a non-empty string")
        if isinstance(value, bool):
            value = "true" if value else "false"
        out[key] = str(value) if value is not None else ""
    return out


class Workers:
    """A group of Connect workers (see the module docstring).

    Args:
        cluster: the raystream cluster (None: :func:`raystream.connect`).
        group_id: the worker group; names its internal topics and actors.
        num_workers: how many worker actors run the group's connectors.
        rest_port: serve the REST API on this loopback port (0: any free port).
        plugins: extra connector classes by ``connector.class`` name, shipped to the
            workers (classes that the workers cannot import, e.g. a test's).
    """

    def __init__(
        self,
        cluster: Any = None,
        group_id: str = "connect",
        num_workers: int | None = 1,
        rest_port: int | None = None,
        plugins: Mapping[str, type] | None = None,
    ) -> None:
        from raystream.client.cluster import resolve_cluster

        if not isinstance(group_id, str) or not group_id:
            raise InvalidConfigError(f"group_id must be a non-empty string, got {group_id!r}")
        if num_workers is not None and (
            not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1
        ):
            raise InvalidConfigError(f"num_workers must be an int >= 1, got {num_workers!r}")
        self.cluster = resolve_cluster(cluster)
        self.group_id = group_id
        self.extra_plugins = dict(plugins or {})
        self.store = storage.ConnectStore(self.cluster, group_id)
        self.store.ensure_topics()
        self._lock = threading.Lock()
        self._state = ConfigState()
        self._tail: storage.Tail | None = None
        self._rest: Any = None
        if num_workers is not None:
            self.scale(num_workers)
        if rest_port is not None:
            from raystream.connectors.rest import RestServer

            self._rest = RestServer(self, port=rest_port)
            self._rest.start()

    @classmethod
    def attach(cls, cluster: Any = None, group_id: str = "connect") -> Workers:
        """The running group ``group_id``, starting no worker (what the CLI uses)."""
        return cls(cluster, group_id=group_id, num_workers=None)

    # ----------------------------------------------------------------- workers

    def scale(self, num_workers: int) -> None:
        """Run ``num_workers`` worker actors: the count goes to the configs topic (every
        worker recomputes its share), missing slots start, extra slots stop."""
        from raystream.actors import connect_worker

        self.store.write(self.store.configs_topic, [(storage.WORKERS_KEY, {"count": num_workers})])
        connect_worker.start_workers(self.cluster, self.group_id, num_workers, self.extra_plugins)
        extra = [s for s in self._slots() if s >= num_workers]
        connect_worker.stop_workers(self.cluster.namespace, self.group_id, extra)

    def _slots(self) -> list[int]:
        from raystream.actors.connect_worker import worker_slots

        return worker_slots(self.cluster.namespace, self.group_id)

    def worker_statuses(self) -> list[dict[str, Any] | None]:
        """Each worker actor's own account of what it runs (None if it cannot answer)."""
        from raystream.actors.connect_worker import worker_status

        return [worker_status(self.cluster.namespace, self.group_id, s) for s in self._slots()]

    def shutdown(self) -> None:
        """Stop the REST server and every worker actor (tasks commit first); the
        connectors' configs and offsets stay in the topics for the next ``Workers``."""
        from raystream.actors.connect_worker import stop_workers

        if self._rest is not None:
            self._rest.stop()
            self._rest = None
        stop_workers(self.cluster.namespace, self.group_id, self._slots())
        self.close()

    def close(self) -> None:
        """Release this handle's clients (the workers keep running)."""
        with self._lock:
            if self._tail is not None:
                self._tail.close()
                self._tail = None
        self.store.close()

    @property
    def rest_url(self) -> str | None:
        """``http://127.0.0.1:<port>`` of the REST API, or None without one."""
        return None if self._rest is None else self._rest.url

    # -------------------------------------------------------------- the state

    def _refresh(self) -> ConfigState:
        """The configs topic replayed up to its current end."""
        with self._lock:
            if self._tail is None:
                self._tail = storage.Tail(self.cluster, self.store.configs_topic)
            for offset, key, value in self._tail.read_to_end():
                if key is not None:
                    self._state.apply(offset, key.decode(), storage.decode(value))
            return self._state

    def _require(self, name: str) -> ConfigState:
        state = self._refresh()
        if name not in state.connectors:
            raise ConnectorNotFoundError(f"connector {name!r} not found in group {self.group_id!r}")
        return state

    def validate(self, name: str, config: Mapping[str, Any]) -> dict[str, str]:
        """The config as strings, checked: a plugin, the framework's keys as Kafka
        Connect checks them (:mod:`~raystream.connectors.connector_config`), the
        connector's own ``validate``. Raises InvalidConfigError naming what is wrong."""
        if not isinstance(name, str) or not name or "/" in name:
            raise InvalidConfigError(
                f"connector name {name!r} must be a non-empty string without '/'"
            )
        config = _stringify(config)
        config.pop("name", None)
        cls = plugin_table.resolve(config.get("connector.class", ""), self.extra_plugins)
        config.setdefault("tasks.max", "1")
        connector = cls()
        check_connector_config(name, connector, config)
        connector.validate(config)
        connector.validate_for_workers(config, self.cluster.namespace)
        return {**config, "name": name}

    # -------------------------------------------------------------- the API

    def create(self, name: str, config: Mapping[str, Any]) -> dict[str, Any]:
        """Create connector ``name`` (``POST /connectors``); returns its info.

        Raises:
            ConnectorExistsError: the name is taken.
            InvalidConfigError: the config cannot work (the message names the key).
        """
        checked = self.validate(name, config)
        if name in self._refresh().connectors:
            raise ConnectorExistsError(f"connector {name!r} already exists")
        self.store.write(
            self.store.configs_topic,
            [
                (storage.connector_key(name), {"properties": checked}),
                (storage.target_state_key(name), {"state": STARTED}),
            ],
        )
        return self.info(name)

    def update(self, name: str, config: Mapping[str, Any]) -> dict[str, Any]:
        """Replace connector ``name``'s config, or create it (``PUT .../config``)."""
        checked = self.validate(name, config)
        records: list[tuple[str, Any]] = [(storage.connector_key(name), {"properties": checked})]
        if name not in self._refresh().connectors:
            records.append((storage.target_state_key(name), {"state": STARTED}))
        self.store.write(self.store.configs_topic, records)
        return self.info(name)

    def config(self, name: str) -> dict[str, str]:
        """Connector ``name``'s config (``GET /connectors/{name}/config``)."""
        return dict(self._require(name).connectors[name])

    def info(self, name: str) -> dict[str, Any]:
        """``GET /connectors/{name}``: name, config, tasks and type."""
        state = self._require(name)
        return {
            "name": name,
            "config": dict(state.connectors[name]),
            "tasks": [{"connector": name, "task": i} for i in range(len(state.tasks(name)))],
            "type": self._type(state.connectors[name]),
        }

    def tasks(self, name: str) -> list[dict[str, Any]]:
        """``GET /connectors/{name}/tasks``: each task's id and config."""
        state = self._require(name)
        return [
            {"id": {"connector": name, "task": i}, "config": dict(c)}
            for i, c in enumerate(state.tasks(name))
        ]

    def status(self, name: str) -> dict[str, Any]:
        """``GET /connectors/{name}/status``: the connector's and each task's state
        (RUNNING, PAUSED, FAILED with its trace, UNASSIGNED) and worker."""
        state = self._require(name)
        kind = self._type(state.connectors[name])
        return connector_status(name, self.store.statuses(), len(state.tasks(name)), kind)

    def _type(self, config: Mapping[str, str]) -> str:
        try:
            return plugin_table.connector_type(
                plugin_table.resolve(config.get("connector.class", ""), self.extra_plugins)
            )
        except InvalidConfigError:
            return "unknown"

    def _target(self, name: str, target: str) -> None:
        self._require(name)
        self.store.write(
            self.store.configs_topic, [(storage.target_state_key(name), {"state": target})]
        )

    def pause(self, name: str) -> None:
        """Pause the connector and its tasks (they stay assigned, do no work)."""
        self._target(name, PAUSED)

    def resume(self, name: str) -> None:
        """Resume a paused connector."""
        self._target(name, STARTED)

    def restart(
        self,
        name: str,
        include_tasks: bool = False,
        only_failed: bool = False,
        task: int | None = None,
    ) -> None:
        """Restart the connector object (and its tasks with ``include_tasks``; only the
        failed ones with ``only_failed``), KIP-745's request; or task ``task`` alone."""
        state = self._require(name)
        request: dict[str, Any] = {"include-tasks": include_tasks, "only-failed": only_failed}
        if task is not None:
            if not 0 <= task < len(state.tasks(name)):
                raise ConnectorNotFoundError(f"connector {name!r} has no task {task}")
            request["task"] = task
        self.store.write(self.store.configs_topic, [(storage.restart_key(name), request)])

    def delete(self, name: str) -> None:
        """Delete the connector: its workers stop it; its source offsets stay (a new
        connector of the same name resumes from them, as in Kafka Connect)."""
        state = self._require(name)
        records: list[tuple[str, Any]] = [
            (storage.connector_key(name), None),
            (storage.target_state_key(name), None),
            (storage.commit_key(name), None),
        ]
        records += [(storage.task_key(name, i), None) for i in range(len(state.tasks(name)))]
        self.store.write(self.store.configs_topic, records)

    def list(self) -> list[str]:
        """The names of the group's connectors."""
        return sorted(self._refresh().connectors)

    def plugins(self) -> list[str]:
        """The connector class names the workers can run."""
        return [p["class"] for p in self.describe_plugins()]

    def describe_plugins(self) -> list[dict[str, str]]:
        """``GET /connector-plugins``: ``[{"class", "type", "version"}]``."""
        return plugin_table.describe_plugins(self.extra_plugins)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
