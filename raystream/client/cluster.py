"""Connecting to a raystream cluster: the embedded default or a running Ray cluster.

:func:`connect` makes sure Ray is up (an existing ``ray.init``, a running local or
remote cluster, or a local Ray started in this process) and that the namespace has a
controller, starting one if needed. The :class:`Cluster` it returns is picklable: Ray
tasks and actors receive it and reconnect by name.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from raystream.actors import CONTROLLER_NAME, ControllerActor
from raystream.config import BrokerConfig
from raystream.errors import (
    BrokerNotAvailableError,
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    IllegalStateError,
    InvalidConfigError,
    LogDirInUseError,
    PartitionOutOfRangeError,
    RaystreamTimeoutError,
    UnstableOffsetCommitError,
)
from raystream.log.checkpoint import lock_directory
from raystream.protocol import Result, TopicMetadata
from raystream.requests import Request
from raystream.retry import Backoff
from raystream.transport import (
    call,
    ensure_ray,
    named_actor,
    on_this_node,
    outcome,
    send,
    stop_actor,
    wait_result,
)

logger = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "raystream"
CONTROL_TIMEOUT_S = 300
DATA_DIR_WAIT_S = 5


def default_data_dir() -> str:
    """Where a cluster keeps its data unless told otherwise: ``~/.raystream/data``."""
    return os.path.join(os.path.expanduser("~"), ".raystream", "data")


def resolve_data_dir(data_dir: str | None) -> str:
    """The absolute data dir a cluster started with ``data_dir`` uses (None: the default)."""
    return os.path.abspath(os.path.expanduser(data_dir or default_data_dir()))


def connect(
    address: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    data_dir: str | None = None,
    broker_config: dict[str, Any] | None = None,
    **ray_init_kwargs: Any,
) -> Cluster:
    """Connect to (or start) the raystream cluster of ``namespace``.

    Args:
        address: None uses the Ray already initialized in this process, else attaches
            to a running local cluster (``raystream up``) or starts a local Ray in this
            process (the embedded default, which stops with the process). "auto" or
            "ray://..." attach to a running Ray cluster.
        namespace: isolates raystream clusters sharing one Ray cluster.
        data_dir: directory on each node for the logs (default ``~/.raystream/data``);
            only used when this call starts the controller.
        broker_config: cluster-wide settings (:class:`~raystream.config.BrokerConfig`
            names) used when this call starts the controller.
        **ray_init_kwargs: passed to ``ray.init`` when this call initializes Ray.

    Raises:
        InvalidConfigError: ``data_dir`` differs from the running cluster's.
        LogDirInUseError: another cluster (another process's embedded Ray, say) runs
            on ``data_dir``.
    """
    ensure_ray(address, **ray_init_kwargs)
    broker = BrokerConfig.from_kafka(
        broker_config or {},
        data_dir=resolve_data_dir(data_dir),
    )
    if named_actor(CONTROLLER_NAME, namespace) is None:
        check_data_dir_free(broker.data_dir)
    controller = ControllerActor.options(
        name=CONTROLLER_NAME,
        namespace=namespace,
        lifetime="detached",
        max_restarts=-1,
        num_cpus=0,
        get_if_exists=True,
        scheduling_strategy=on_this_node(),
    ).remote(namespace, broker.to_kafka())
    running = wait_result(controller.broker_config.remote(), CONTROL_TIMEOUT_S, "controller start")
    if data_dir is not None and resolve_data_dir(data_dir) != running["data.dir"]:
        raise InvalidConfigError(
            f"data_dir {data_dir!r} differs from the running cluster's {running['data.dir']!r} "
            f"in namespace {namespace!r}; stop it first (raystream down) or omit data_dir"
        )
    return Cluster(namespace, running["data.dir"], controller)


def check_data_dir_free(data_dir: str) -> None:
    """Refuse to start a controller on a data directory another cluster holds.

    The controller takes the lock itself; checking here first, on the same node (it
    is pinned to this one), turns the refusal into this process's own clear error.
    Waits up to DATA_DIR_WAIT_S for a controller that was just stopped or killed.

    Raises:
        LogDirInUseError: another process (another cluster's controller) holds it.
    """
    try:
        os.close(lock_directory(data_dir, DATA_DIR_WAIT_S))
    except LogDirInUseError:
        raise LogDirInUseError(
            f"data dir {data_dir} is in use by another raystream cluster, e.g. another "
            "process that started its own embedded Ray on it; to share one cluster "
            "between processes start it with `raystream up` (then rs.connect() attaches), "
            "or give this cluster its own data_dir"
        ) from None


class Cluster:
    """A handle on one raystream cluster; picklable for Ray tasks and actors.

    Caches topic metadata (leaders and their actor handles) so clients do not ask the
    controller on every call; :meth:`topic_metadata` with ``refresh=True`` renews it
    after a NotLeader / UnknownTopic / dead-actor error.
    """

    def __init__(self, namespace: str, data_dir: str, controller: Any) -> None:
        self.namespace = namespace
        self._data_dir = data_dir
        self.controller = controller
        self._metadata: dict[str, TopicMetadata] = {}
        self._coordinator: Any = None
        self._transaction_coordinator: Any = None
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        return (attach, (self.namespace, self._data_dir))

    @property
    def data_dir(self) -> str:
        """Where this cluster keeps its data (the same path on every node)."""
        return self._data_dir

    def call(self, method: str, *args: Any, timeout_s: float = CONTROL_TIMEOUT_S) -> Any:
        """Call a controller method and return its value, raising its error.

        While the controller restarts (Ray brings it back after a crash) the call is
        retried until ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        backoff = Backoff(50, 1000)
        while True:
            try:
                answer = wait_result(
                    getattr(self.controller, method).remote(*args),
                    max(deadline - time.monotonic(), 0.001),
                    f"controller.{method}",
                )
                break
            except BrokerNotAvailableError:
                current = self._find_controller()
                pause = backoff.next_s()
                if time.monotonic() + pause >= deadline or current is None:
                    raise
                self.controller = current  # restarting, or replaced by a new one
                time.sleep(pause)
        return answer.unwrap() if isinstance(answer, Result) else answer

    def coordinator(self, refresh: bool = False) -> Any:
        """The group coordinator actor's handle (the controller starts it on first use)."""
        with self._lock:
            cached = self._coordinator
        if cached is not None and not refresh:
            return cached
        handle = self.call("find_coordinator")
        with self._lock:
            self._coordinator = handle
        return handle

    def coordinator_call(
        self, method: Request | str, *args: Any, timeout_s: float = CONTROL_TIMEOUT_S
    ) -> Any:
        """Send a request (:mod:`raystream.requests`) to the group coordinator, or call
        another of its methods (``ping``), and return the answer's value, raising its
        error.

        While the coordinator restarts (Ray brings it back after a crash, and it reloads
        ``__consumer_offsets``), and while a transaction may still commit offsets
        (UnstableOffsetCommitError), the call is retried until ``timeout_s``.
        """
        return self._call_coordinator(
            self.coordinator,
            "group coordinator",
            (BrokerNotAvailableError, CoordinatorNotAvailableError, UnstableOffsetCommitError),
            method,
            args,
            timeout_s,
        )

    def transaction_coordinator(self, refresh: bool = False) -> Any:
        """The transaction coordinator's handle (the controller starts it on first use)."""
        with self._lock:
            cached = self._transaction_coordinator
        if cached is not None and not refresh:
            return cached
        handle = self.call("find_transaction_coordinator")
        with self._lock:
            self._transaction_coordinator = handle
        return handle

    def transaction_coordinator_call(
        self, method: Request | str, *args: Any, timeout_s: float = CONTROL_TIMEOUT_S
    ) -> Any:
        """Send a request (:mod:`raystream.requests`) to the transaction coordinator, or
        call another of its methods (``ping``), and return the answer's value, raising
        its error.

        Retried until ``timeout_s`` while the coordinator restarts, and while the
        producer's previous transaction is still completing (ConcurrentTransactionsError).
        """
        return self._call_coordinator(
            self.transaction_coordinator,
            "transaction coordinator",
            (BrokerNotAvailableError, CoordinatorNotAvailableError, ConcurrentTransactionsError),
            method,
            args,
            timeout_s,
        )

    @staticmethod
    def _call_coordinator(
        find: Callable[[bool], Any],
        what: str,
        retry: tuple[type[Exception], ...],
        method: Request | str,
        args: tuple[Any, ...],
        timeout_s: float,
    ) -> Any:
        is_request = isinstance(method, Request)
        name = type(method).__name__ if is_request else method
        deadline = time.monotonic() + timeout_s
        backoff = Backoff(50, 1000)
        refresh = False
        while True:
            try:
                actor = find(refresh)
                answer = outcome(
                    send(actor, method) if is_request else call(actor, method, *args),
                    max(deadline - time.monotonic(), 0.001),
                    f"{what} {name}",
                )
                return answer.unwrap() if isinstance(answer, Result) else answer
            except retry as error:
                pause = backoff.next_s()
                if time.monotonic() + pause >= deadline:
                    raise
                time.sleep(pause)
                refresh = isinstance(error, (BrokerNotAvailableError, CoordinatorNotAvailableError))

    def _find_controller(self) -> Any:
        """The namespace's controller if it is alive or restarting, else None."""
        return named_actor(CONTROLLER_NAME, self.namespace)

    def topic_metadata(self, topic: str, refresh: bool = False) -> TopicMetadata:
        """The cached metadata of ``topic`` (fetched from the controller when missing).

        Raises:
            UnknownTopicOrPartitionError: the topic does not exist.
        """
        with self._lock:
            cached = self._metadata.get(topic)
        if cached is not None and not refresh:
            return cached
        (metadata,) = self.call("metadata", [topic])
        with self._lock:
            self._metadata[topic] = metadata
        return metadata

    def report_unresponsive_leader(self, topic: str, partition: int) -> None:
        """Tell the controller that the partition's leader left a request unanswered
        (past the client's request timeout), without waiting: the controller probes it
        and takes a hung leader out (see :mod:`raystream.controller.liveness`). For a
        partition without followers, clients are the only ones who can notice."""
        try:  # a Ray call left to run: nobody waits for its answer
            self.controller.leader_unresponsive.remote(topic, partition)
        except Exception as error:  # a report only speeds detection up
            logger.debug("leader report for %s-%d not sent: %s", topic, partition, error)

    def forget(self, topic: str) -> None:
        """Drop cached metadata of ``topic``."""
        with self._lock:
            self._metadata.pop(topic, None)

    def partitions_for(self, topic: str) -> int:
        """How many partitions ``topic`` has (from the cache)."""
        return len(self.topic_metadata(topic).partitions)

    def require_partition(self, topic: str, partition: int) -> Any:
        """The partition's metadata.

        Raises:
            UnknownTopicOrPartitionError: the topic does not exist.
            PartitionOutOfRangeError: it has no such partition (after a refresh).
        """
        metadata = self.topic_metadata(topic)
        if not isinstance(partition, int) or not 0 <= partition < len(metadata.partitions):
            metadata = self.topic_metadata(topic, refresh=True)
            if not isinstance(partition, int) or not 0 <= partition < len(metadata.partitions):
                raise PartitionOutOfRangeError.of(topic, partition, len(metadata.partitions))
        return metadata.partitions[partition]

    def admin(self) -> Any:
        """An Admin client for this cluster."""
        from raystream.client.admin import Admin

        return Admin(cluster=self)

    def producer(self, **config: Any) -> Any:
        """A Producer for this cluster (see :class:`raystream.Producer`)."""
        from raystream.client.producer import Producer

        return Producer(cluster=self, **config)

    def consumer(self, *topics: str, **config: Any) -> Any:
        """A Consumer for this cluster (see :class:`raystream.Consumer`)."""
        from raystream.client.consumer import Consumer

        return Consumer(*topics, cluster=self, **config)

    def bootstrap_servers(self, protocol: str = "PLAINTEXT", timeout_s: float = 60.0) -> str:
        """``host:port,...`` of the cluster's Kafka-protocol listeners, as Kafka clients'
        ``bootstrap.servers`` wants it, once at least one has started.

        Raises:
            IllegalStateError: the cluster was started without ``listeners`` for
                ``protocol`` (see :class:`~raystream.config.BrokerConfig`).
            RaystreamTimeoutError: none registered within ``timeout_s``.
        """
        configured = self.call("broker_config").get("listeners", "")
        if protocol.upper() not in configured.upper():
            raise IllegalStateError(
                f"this cluster has no {protocol} Kafka listener (listeners={configured!r}); "
                "start it with broker_config={'listeners': 'PLAINTEXT://127.0.0.1:9092'}"
            )
        deadline = time.monotonic() + timeout_s
        while True:
            servers = [
                f"{e['host']}:{e['port']}"
                for entry in self.call("kafka_listeners")
                for e in entry["endpoints"]
                if e["protocol"] == protocol.upper()
            ]
            if servers:
                return ",".join(servers)
            if time.monotonic() > deadline:
                raise RaystreamTimeoutError(f"no Kafka listener registered within {timeout_s} s")
            time.sleep(0.1)

    def status(self) -> dict[str, Any]:
        """The controller's overview: nodes, topics, partitions, warnings."""
        return self.call("status")

    def shutdown(self) -> None:
        """Stop raystream's actors (controller and replicas); data stays on disk.

        Idempotent: shutting down a stopped cluster does nothing.
        """
        if self._find_controller() is None:
            return
        self.call("shutdown")
        stop_actor(self.controller)
        with self._lock:
            self._metadata.clear()
            self._coordinator = None
            self._transaction_coordinator = None

    def __repr__(self) -> str:
        return f"Cluster(namespace={self.namespace!r}, data_dir={self._data_dir!r})"


def attach(namespace: str, data_dir: str, address: str = "auto") -> Cluster:
    """The running cluster of ``namespace``, joining the Ray at ``address`` if this
    process has none (how a pickled Cluster comes back, and how a process outside
    Ray's workers finds it); it is never started here."""
    ensure_ray(address)
    controller = named_actor(CONTROLLER_NAME, namespace)
    if controller is None:
        raise BrokerNotAvailableError(
            f"no raystream controller runs in namespace {namespace!r} of this Ray cluster"
        )
    return Cluster(namespace, data_dir, controller)


def resolve_cluster(cluster: Cluster | None) -> Cluster:
    """The given cluster, or :func:`connect`'s default one."""
    return connect() if cluster is None else cluster
