"""Running an application on the cluster: internal topics, worker actors, state, queries.

``App.start()`` hands over to an :class:`AppRunner`, which

1. checks the topology against the cluster: every user source topic exists, and topics
   that must be co-partitioned (a join's sides) have equal partition counts (else a
   TopologyError naming them);
2. creates the internal topics: each repartition topic
   ``<application_id>-<name>-repartition`` with the count ``Topology.partition_counts``
   gives it, and each store's changelog ``<application_id>-<store>-changelog`` with
   ``cleanup.policy=compact`` and one partition per task of its sub-topology (an
   existing internal topic with another count is an error: it would send keys to other
   tasks than their state);
3. starts ``num_workers`` worker actors (:mod:`raystream.actors.streams_worker`), which
   share the tasks through the consumer group ``application_id``.

The app's state is Kafka Streams' ``KafkaStreams.State``, derived from the workers':
CREATED before start, REBALANCING while a worker joins, restores or is being restarted,
RUNNING when every worker processes, ERROR when a worker stopped on an error (a user
function raised: it stops the other workers too, and :meth:`AppRunner.wait` raises it),
NOT_RUNNING after stop.

Interactive queries (``app.store(name)``) go to the worker holding the key's task:
the partition is the one the producer's default partitioner picks for the key (the
key's bytes for a user topic, its streams encoding for a repartition topic); keys of
other types, and ``all``/``range``, ask every worker and merge the answers.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from raystream.client.cluster import resolve_cluster
from raystream.client.partitioner import partition_for_key
from raystream.errors import (
    BrokerNotAvailableError,
    InvalidConfigError,
    RaystreamError,
    RaystreamTimeoutError,
    StreamsError,
    TopicAlreadyExistsError,
    TopologyError,
    UnknownTopicOrPartitionError,
)
from raystream.streams.serde import encode_key
from raystream.streams.stores import changelog_topic
from raystream.transport import CALL_ERRORS, stop_actor, wait_result

logger = logging.getLogger(__name__)

CREATED = "CREATED"
REBALANCING = "REBALANCING"
RUNNING = "RUNNING"
PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
NOT_RUNNING = "NOT_RUNNING"
ERROR = "ERROR"

STATUS_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 60.0
WAIT_SLICE_S = 0.2


def internal_topic_counts(app: Any, cluster: Any) -> tuple[dict[str, int], dict[str, int]]:
    """``(partition count of every source topic, partition count of every changelog)``.

    Raises:
        TopologyError: a user source topic does not exist, or co-partitioned topics
            have different partition counts.
    """
    topology = app.topology
    internal = set(topology.repartition_topics)
    users: dict[str, int] = {}
    for sub in topology.build():
        for topic in sub.source_topics:
            if topic in internal or topic in users:
                continue
            try:
                users[topic] = cluster.partitions_for(topic)
            except UnknownTopicOrPartitionError:
                raise TopologyError(
                    f"application {app.application_id!r} reads topic {topic!r}, which does "
                    "not exist: create it first"
                ) from None
    counts = topology.partition_counts(users)
    changelogs = {
        changelog_topic(app.application_id, spec.name): max(counts[t] for t in sub.source_topics)
        for sub in topology.build()
        for spec in sub.stores
    }
    return counts, changelogs


def create_internal_topics(app: Any, cluster: Any) -> dict[str, int]:
    """Check co-partitioning and create the repartition and changelog topics (see the
    module docstring); returns every source topic's partition count."""
    counts, changelogs = internal_topic_counts(app, cluster)
    admin = cluster.admin()
    wanted = {t: (counts[t], {}) for t in app.topology.repartition_topics}
    wanted.update({t: (n, {"cleanup.policy": "compact"}) for t, n in changelogs.items()})
    for topic, (partitions, config) in wanted.items():
        try:
            admin.create_topic(topic, partitions=partitions, config=config)
        except TopicAlreadyExistsError:
            existing = cluster.partitions_for(topic)
            if existing != partitions:
                raise TopologyError(
                    f"internal topic {topic!r} exists with {existing} partitions but "
                    f"application {app.application_id!r} needs {partitions}: delete it (and "
                    "the application's state) or use another application_id"
                ) from None
    return counts


class AppRunner:
    """The running side of an ``App``: its worker actors (see the module docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.cluster = resolve_cluster(app.cluster)
        app.cluster = self.cluster
        self.counts: dict[str, int] = {}
        self.workers: list[Any] = []
        self._state = CREATED
        self._lock = threading.Lock()

    def start(self) -> None:
        """Create the internal topics and start the workers (see the module docstring).

        Raises:
            TopologyError: a source topic is missing, co-partitioning is broken, or an
                internal topic exists with the wrong partition count.
            IllegalStateError: the app was started before.
        """
        if self._state != CREATED:
            raise StreamsError(
                f"application {self.app.application_id!r} was already started (state "
                f"{self._state}); build a new App to run it again"
            )
        self.counts = create_internal_topics(self.app, self.cluster)
        self._state = REBALANCING
        self.scale(self.app.num_workers)

    def scale(self, num_workers: int) -> None:
        """Start or stop workers until ``num_workers`` run; the group rebalances (the
        workers stopped commit and close their tasks first, so nothing is lost)."""
        from raystream.actors.streams_worker import StreamsWorkerActor, worker_name

        if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1:
            raise InvalidConfigError(f"scale: num_workers must be an int >= 1, got {num_workers!r}")
        if self._state in (NOT_RUNNING, CREATED):
            raise StreamsError(f"scale: application {self.app.application_id!r} is not running")
        with self._lock:
            while len(self.workers) < num_workers:
                slot = len(self.workers)
                self.workers.append(
                    StreamsWorkerActor.options(
                        name=worker_name(self.app.application_id, slot),
                        namespace=self.cluster.namespace,
                        num_cpus=0,
                        max_restarts=-1,
                        max_task_retries=0,
                    ).remote(self.app, slot)
                )
            removed = self.workers[num_workers:]
            del self.workers[num_workers:]
            self.app.num_workers = num_workers
        self._stop_workers(removed)

    def _stop_workers(self, workers: list[Any]) -> None:
        stopping = [(w, w.stop.remote()) for w in workers]
        for worker, ref in stopping:
            try:
                wait_result(ref, STOP_TIMEOUT_S, "streams worker stop")
            except (RaystreamError, *CALL_ERRORS) as error:
                logger.info("streams worker did not stop cleanly: %s", error)
            stop_actor(worker)

    def statuses(self) -> list[dict[str, Any] | None]:
        """Each worker's status; None for one that cannot answer (Ray restarts it)."""
        with self._lock:
            workers = list(self.workers)
        refs = [w.status.remote() for w in workers]
        result: list[dict[str, Any] | None] = []
        for ref in refs:
            try:
                result.append(wait_result(ref, STATUS_TIMEOUT_S, "streams worker status"))
            except (BrokerNotAvailableError, RaystreamTimeoutError, *CALL_ERRORS):
                result.append(None)
        return result

    @property
    def state(self) -> str:
        """CREATED, REBALANCING, RUNNING, ERROR or NOT_RUNNING (see the module docstring)."""
        if self._state in (CREATED, NOT_RUNNING, PENDING_SHUTDOWN):
            return self._state
        statuses = self.statuses()
        if any(s is not None and s["state"] == "ERROR" for s in statuses):
            return ERROR
        if all(s is not None and s["state"] == "RUNNING" for s in statuses):
            return RUNNING
        if all(s is not None and s["state"] == "STOPPED" for s in statuses):
            return NOT_RUNNING
        return REBALANCING

    def errors(self) -> list[str]:
        """The errors of the workers that stopped on one."""
        return [s["error"] for s in self.statuses() if s is not None and s.get("error")]

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the app stops (``stop()`` from another thread) or fails.

        Returns:
            True if it stopped, False if ``timeout`` seconds passed first.

        Raises:
            StreamsError: a worker stopped on an error (the message carries it).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = self.state
            if state == ERROR:
                raise StreamsError(
                    f"application {self.app.application_id!r} failed:\n" + "\n".join(self.errors())
                )
            if state == NOT_RUNNING:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(WAIT_SLICE_S)

    def stop(self) -> None:
        """Stop every worker (each commits, closes its tasks and leaves); idempotent."""
        if self._state in (CREATED, NOT_RUNNING):
            self._state = NOT_RUNNING
            return
        self._state = PENDING_SHUTDOWN
        with self._lock:
            workers, self.workers = self.workers, []
        self._stop_workers(workers)
        self._state = NOT_RUNNING

    # ---------------------------------------------------------- interactive queries

    def store(self, name: str) -> StoreQuery:
        """A queryable view of store ``name`` across the workers.

        Raises:
            StreamsError: no store has that name.
        """
        for sub in self.app.topology.build():
            for spec in sub.stores:
                if spec.name == name:
                    return StoreQuery(self, name, sub)
        raise StreamsError(
            f"application {self.app.application_id!r} has no store {name!r}; its stores: "
            f"{sorted(self.app.topology.stores)}"
        )

    def query(self, store: str, method: str, args: tuple[Any, ...], partition: int | None) -> list:
        """``[(task id, answer)]`` from the workers holding the store (only the task of
        ``partition`` if given, asking its worker alone when known)."""
        with self._lock:
            workers = list(self.workers)
        if partition is not None:
            for worker, status in zip(workers, self.statuses(), strict=False):
                if status and any(tuple(t)[1] == partition for t in status["task_ids"]):
                    answers = self._ask([worker], store, method, args, partition)
                    if answers:
                        return answers
        return self._ask(workers, store, method, args, partition)

    @staticmethod
    def _ask(
        workers: list[Any], store: str, method: str, args: tuple[Any, ...], partition: int | None
    ) -> list:
        refs = [w.query.remote(store, method, args, partition) for w in workers]
        answers = []
        for ref in refs:
            try:
                answers.extend(wait_result(ref, STATUS_TIMEOUT_S, f"query {store}.{method}"))
            except (StreamsError, BrokerNotAvailableError, RaystreamTimeoutError, *CALL_ERRORS):
                continue  # stopped or restarting: its tasks answer from elsewhere later
        return answers


class StoreQuery:
    """Interactive queries of one store (``app.store(name)``): reads of every task's
    copy, routed by key where the key's partition can be computed."""

    def __init__(self, runner: AppRunner, name: str, subtopology: Any) -> None:
        self._runner = runner
        self.name = name
        self._sub = subtopology

    def _partition(self, key: Any) -> int | None:
        counts = self._runner.counts
        n = max(counts[t] for t in self._sub.source_topics)
        internal = set(self._runner.app.topology.repartition_topics)
        if any(t in internal for t in self._sub.source_topics):
            return partition_for_key(encode_key(key), n)
        if isinstance(key, bytes):
            return partition_for_key(key, n)
        return None

    def get(self, key: Any) -> Any | None:
        """The value of ``key`` (None if absent)."""
        answers = self._runner.query(self.name, "get", (key,), self._partition(key))
        return next((value for _, value in answers if value is not None), None)

    def fetch(self, key: Any, from_ms: int, to_ms: int) -> list[tuple[int, Any]]:
        """A window store's ``(window_start_ms, value)`` of ``key`` for windows starting
        in ``[from_ms, to_ms]``, in time order."""
        answers = self._runner.query(
            self.name, "fetch", (key, from_ms, to_ms), self._partition(key)
        )
        return sorted((item for _, items in answers for item in items), key=lambda kv: kv[0])

    def all(self) -> list[tuple[Any, Any]]:
        """Every entry of every task, in key order where the keys compare."""
        return _merged(self._runner.query(self.name, "all", (), None))

    def range(self, lo: Any = None, hi: Any = None) -> list[tuple[Any, Any]]:
        """Entries with ``lo <= key <= hi`` across the tasks, in key order."""
        return _merged(self._runner.query(self.name, "range", (lo, hi), None))


def _merged(answers: list) -> list[tuple[Any, Any]]:
    items = [item for _, items in answers for item in items]
    try:
        return sorted(items, key=lambda kv: encode_key(kv[0]))
    except RaystreamError:  # keys the streams encoding does not order: task order
        return items
