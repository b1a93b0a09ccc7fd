"""Connect's durable state in three compacted internal topics, as Kafka Connect keeps it.

A worker group ``group_id`` keeps its state in ``<group_id>-configs``,
``<group_id>-offsets`` and ``<group_id>-status`` (so the default group ``"connect"``
uses Kafka Connect's usual ``connect-configs``, ``connect-offsets`` and
``connect-status``), each one partition, ``cleanup.policy=compact``: the latest record
per key is the state, a tombstone (value None) deletes it. Keys and values are JSON,
Kafka Connect's own layouts, so a Kafka Connect user reading the topics sees the
records they know:

configs (written by ``Workers`` and by the worker running a connector):
    ``connector-<name>``            ``{"properties": {...}}``  (tombstone: deleted)
    ``target-state-<name>``         ``{"state": "STARTED" | "PAUSED" | "STOPPED"}``
    ``task-<name>-<i>``             ``{"properties": {...}}``  one per task config
    ``commit-<name>``               ``{"tasks": n}``  the task configs before it are complete
    ``restart-connector-<name>``    ``{"include-tasks": bool, "only-failed": bool}``
    ``workers``                     ``{"count": n}``  (raystream's own: the group's size)

offsets (written by source tasks, after or with the records they describe):
    key ``["<connector>", {source partition}]``, value ``{source offset}``

status (written by the worker running the connector or task):
    ``status-connector-<name>``, ``status-task-<name>-<i>``:
    ``{"state": ..., "trace": str | null, "worker_id": str, "generation": int}``

The encodings are pure functions; :class:`ConnectStore` is the thin I/O around them.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from raystream.errors import RaystreamTimeoutError, TopicAlreadyExistsError
from raystream.types import TopicPartition

CONNECTOR_PREFIX = "connector-"
TARGET_STATE_PREFIX = "target-state-"
TASK_PREFIX = "task-"
COMMIT_PREFIX = "commit-"
RESTART_PREFIX = "restart-connector-"
WORKERS_KEY = "workers"
STATUS_CONNECTOR_PREFIX = "status-connector-"
STATUS_TASK_PREFIX = "status-task-"

READ_TIMEOUT_S = 30.0


def topic_names(group_id: str) -> tuple[str, str, str]:
    """``(configs, offsets, status)`` topic names of worker group ``group_id``."""
    return f"{group_id}-configs", f"{group_id}-offsets", f"{group_id}-status"


def encode(value: Any) -> bytes | None:
    """A record value as compact JSON bytes (None stays None: a tombstone)."""
    if value is None:
        return None
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def decode(data: bytes | None) -> Any:
    """The JSON value of a record (None for a tombstone)."""
    return None if data is None else json.loads(data)


def connector_key(name: str) -> str:
    return CONNECTOR_PREFIX + name


def target_state_key(name: str) -> str:
    return TARGET_STATE_PREFIX + name


def task_key(name: str, task: int) -> str:
    return f"{TASK_PREFIX}{name}-{task}"


def commit_key(name: str) -> str:
    return COMMIT_PREFIX + name


def restart_key(name: str) -> str:
    return RESTART_PREFIX + name


def status_key(name: str, task: int | None = None) -> str:
    """The status record's key of connector ``name`` (or of its task ``task``)."""
    if task is None:
        return STATUS_CONNECTOR_PREFIX + name
    return f"{STATUS_TASK_PREFIX}{name}-{task}"


def parse_config_key(key: str) -> tuple[str, str, int | None]:
    """``(kind, connector, task)`` of a configs-topic key; kind is one of ``connector``,
    ``target-state``, ``task``, ``commit``, ``restart``, ``workers`` or ``unknown``.

    >>> parse_config_key("task-orders-sink-3")
    ('task', 'orders-sink', 3)
    """
    # Longest prefixes first: "restart-connector-" would otherwise never match.
    if key == WORKERS_KEY:
        return "workers", "", None
    if key.startswith(RESTART_PREFIX):
        return "restart", key[len(RESTART_PREFIX) :], None
    if key.startswith(TARGET_STATE_PREFIX):
        return "target-state", key[len(TARGET_STATE_PREFIX) :], None
    if key.startswith(CONNECTOR_PREFIX):
        return "connector", key[len(CONNECTOR_PREFIX) :], None
    if key.startswith(COMMIT_PREFIX):
        return "commit", key[len(COMMIT_PREFIX) :], None
    if key.startswith(TASK_PREFIX):
        name, _, task = key[len(TASK_PREFIX) :].rpartition("-")
        if name and task.isdigit():
            return "task", name, int(task)
    return "unknown", key, None


def parse_status_key(key: str) -> tuple[str, int | None] | None:
    """``(connector, task or None)`` of a status-topic key; None if it is not one."""
    if key.startswith(STATUS_CONNECTOR_PREFIX):
        return key[len(STATUS_CONNECTOR_PREFIX) :], None
    if key.startswith(STATUS_TASK_PREFIX):
        name, _, task = key[len(STATUS_TASK_PREFIX) :].rpartition("-")
        if name and task.isdigit():
            return name, int(task)
    return None


def offset_key(connector: str, source_partition: Mapping[str, Any]) -> bytes:
    """The offsets-topic key of a source partition (Kafka Connect's JSON array)."""
    return json.dumps(
        [connector, dict(source_partition)], sort_keys=True, separators=(",", ":")
    ).encode()


def parse_offset_key(key: bytes) -> tuple[str, dict[str, Any]] | None:
    """``(connector, source partition)`` of an offsets-topic key; None if malformed."""
    try:
        connector, partition = json.loads(key)
    except (ValueError, TypeError):
        return None
    if not isinstance(connector, str) or not isinstance(partition, dict):
        return None
    return connector, partition


def partition_id(source_partition: Mapping[str, Any]) -> str:
    """A source partition's stable JSON text: how offsets are keyed in memory."""
    return json.dumps(dict(source_partition), sort_keys=True, separators=(",", ":"))


def offsets_table(connector: str, offsets: Mapping[str, Mapping[str, Any] | None]) -> pa.Table:
    """Records for the offsets topic: ``{partition_id: offset}`` of ``connector``."""
    keys = [offset_key(connector, json.loads(pid)) for pid in offsets]
    values = [encode(dict(o) if o is not None else None) for o in offsets.values()]
    return pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})


def latest_offsets(
    rows: Iterable[tuple[bytes | None, bytes | None]], connector: str
) -> dict[str, dict]:
    """``{partition_id: offset}`` of ``connector`` from offsets-topic records in order
    (the latest record per key wins; a tombstone forgets the partition)."""
    result: dict[str, dict] = {}
    for key, value in rows:
        parsed = parse_offset_key(key) if key is not None else None
        if parsed is None or parsed[0] != connector:
            continue
        pid = partition_id(parsed[1])
        if value is None:
            result.pop(pid, None)
        else:
            result[pid] = decode(value)
    return result


def latest_statuses(rows: Iterable[tuple[bytes | None, bytes | None]]) -> dict[str, dict]:
    """``{status key: status}`` from status-topic records in order (latest wins)."""
    result: dict[str, dict] = {}
    for key, value in rows:
        if key is None:
            continue
        text = key.decode()
        if value is None:
            result.pop(text, None)
        else:
            result[text] = decode(value)
    return result


class ConnectStore:
    """Reads and writes a worker group's internal topics (see the module docstring).

    Args:
        cluster: the raystream cluster holding the topics.
        group_id: the worker group; names the topics.
    """

    def __init__(self, cluster: Any, group_id: str) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.configs_topic, self.offsets_topic, self.status_topic = topic_names(group_id)
        self._producer: Any = None
        self._lock = threading.Lock()  # task threads report statuses beside the loop

    def ensure_topics(self) -> None:
        """Create the three compacted topics unless they exist (one partition each)."""
        admin = self.cluster.admin()
        for topic in (self.configs_topic, self.offsets_topic, self.status_topic):
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topic(topic, partitions=1, config={"cleanup.policy": "compact"})

    @property
    def producer(self) -> Any:
        if self._producer is None:
            self._producer = self.cluster.producer(acks="all", linger_ms=0)
        return self._producer

    def write(self, topic: str, records: Iterable[tuple[str | bytes, Any]]) -> None:
        """Write ``(key, JSON value or None)`` records and wait for them to be stored."""
        with self._lock:
            futures = [
                self.producer.send(
                    topic, key=key.encode() if isinstance(key, str) else key, value=encode(value)
                )
                for key, value in records
            ]
        for future in futures:
            future.get(timeout=READ_TIMEOUT_S)

    def read(
        self, topic: str, isolation: str = "read_uncommitted"
    ) -> list[tuple[int, bytes | None, bytes | None]]:
        """Every ``(offset, key, value)`` of ``topic`` up to its end now."""
        tail = Tail(self.cluster, topic, isolation)
        try:
            return tail.read_to_end()
        finally:
            tail.close()

    def configs(self) -> list[tuple[int, str, Any]]:
        """The configs topic's records, decoded: ``(offset, key, value)``."""
        return [(o, k.decode(), decode(v)) for o, k, v in self.read(self.configs_topic) if k]

    def statuses(self) -> dict[str, dict]:
        """The latest status per key (see :func:`latest_statuses`)."""
        return latest_statuses((k, v) for _, k, v in self.read(self.status_topic))

    def offsets(self, connector: str, isolation: str = "read_uncommitted") -> dict[str, dict]:
        """The committed source offsets of ``connector`` (see :func:`latest_offsets`)."""
        rows = self.read(self.offsets_topic, isolation)
        return latest_offsets(((k, v) for _, k, v in rows), connector)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None


class Tail:
    """Follows one single-partition internal topic from its beginning.

    ``poll()`` returns the records that arrived since the last call; ``read_to_end()``
    returns every record up to the end the topic had when it was called.
    """

    def __init__(self, cluster: Any, topic: str, isolation: str = "read_uncommitted") -> None:
        self.tp = TopicPartition(topic, 0)
        self.consumer = cluster.consumer(
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level=isolation,
            fetch_max_wait_ms=50,
            max_poll_records=10_000,
        )
        self.consumer.assign([self.tp])

    def poll(self, timeout_ms: float = 0) -> list[tuple[int, bytes | None, bytes | None]]:
        table = self.consumer.poll_arrow(timeout_ms=timeout_ms)
        if table.num_rows == 0:
            return []
        return list(
            zip(
                table.column("offset").to_pylist(),
                table.column("key").to_pylist(),
                table.column("value").to_pylist(),
                strict=True,
            )
        )

    def read_to_end(
        self, timeout_s: float = READ_TIMEOUT_S
    ) -> list[tuple[int, bytes | None, bytes | None]]:
        end = self.consumer.end_offsets([self.tp])[self.tp]
        rows: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + timeout_s
        while self.consumer.position(self.tp) < end:
            if time.monotonic() > deadline:
                raise RaystreamTimeoutError(
                    f"reading {self.tp.topic} to offset {end} took over {timeout_s} s"
                )
            rows.extend(self.poll(timeout_ms=100))
        return rows

    def close(self) -> None:
        self.consumer.close(autocommit=False)
