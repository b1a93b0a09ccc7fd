"""A streams worker as a Ray actor: a thin shell around the runtime's StreamsWorker.

``app.start()`` starts ``num_workers`` of these, named
``streams:<application_id>:<slot>`` in the cluster's namespace (how the CLI finds the
applications of a cluster). Each builds its clients (a group consumer with the
``stream`` assignor; a producer, transactional under exactly-once with the id
``<application_id>-<slot>``, stable across Ray restarts so a restarted worker fences its
zombie) and runs the worker's loop on a thread of its own, so that ``status``,
``query`` and ``stop`` answer while it polls.

A user function that raises (``StreamsError``) stops the loop for good: nothing of the
batch is committed, and ``status()`` reports state ERROR with the error, which the app
surfaces. The failing worker first stops the application's other workers (they commit,
close their tasks and leave; Kafka Streams' default SHUTDOWN_CLIENT response: the app
is one client), so none of them takes its tasks over and meets the same record; then it
closes its tasks (dirty) and leaves the group. Other errors (a broker restarting, a
refused commit) are logged and the loop goes on after a pause that grows while they
repeat (:class:`~raystream.retry.Backoff`) and starts over after a round that went
through. Ray restarts a crashed worker
(``max_restarts``): it rejoins the group and restores its tasks.
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from typing import Any

import ray

from raystream.errors import RaystreamError, StreamsError
from raystream.requests import DescribeGroupRequest
from raystream.retry import Backoff
from raystream.streams.runtime import ERROR, StreamsWorker, wall_clock_ms
from raystream.types import TopicPartition

logger = logging.getLogger(__name__)

ACTOR_PREFIX = "streams:"
SIBLINGS_STOP_TIMEOUT_S = 60.0


def worker_name(application_id: str, slot: int) -> str:
    """The Ray actor name of worker ``slot`` of ``application_id``."""
    return f"{ACTOR_PREFIX}{application_id}:{slot}"


def state_dir_of(data_dir: str, application_id: str, slot: int) -> str:
    """Where worker ``slot`` keeps its task stores: beside the cluster's data dir (Kafka
    Streams' ``state.dir``), one directory per application and worker."""
    root = os.path.join(os.path.dirname(os.path.abspath(data_dir)), "streams")
    return os.path.join(root, application_id, f"worker-{slot}")


class StreamsWorkerShell:
    """Builds the worker's clients and runs its loop on a thread.

    Args:
        app: The ``rs.streams.App`` (its topology and settings; cloudpickled by Ray).
        slot: The worker's index; names its transactional id and state directory.
    """

    def __init__(self, app: Any, slot: int) -> None:
        self.app = app
        self.slot = slot
        cluster = app.cluster
        exactly_once = app.processing_guarantee == "exactly_once"
        isolation = "read_committed" if exactly_once else "read_uncommitted"
        producer_options: dict[str, Any] = {"linger_ms": 5}
        if exactly_once:
            producer_options["transactional_id"] = f"{app.application_id}-{slot}"

        def new_producer() -> Any:
            producer = cluster.producer(**producer_options)
            if exactly_once:
                producer.init_transactions()  # fences this slot's previous incarnation
            return producer

        consumer = cluster.consumer(
            group_id=app.application_id,
            enable_auto_commit=False,
            auto_offset_reset=app.auto_offset_reset,
            isolation_level=isolation,
            partition_assignment_strategy="stream",
            max_poll_records=2_000,
            fetch_max_wait_ms=50,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
        )

        def restore_consumer() -> Any:
            return cluster.consumer(
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                isolation_level=isolation,
                fetch_max_wait_ms=50,
            )

        def group_assignment() -> tuple[int, dict[str, list[TopicPartition]]]:
            # The coordinator's own description (admin.describe_group would add a lag
            # lookup of every committed partition); generation -1 while it rebalances.
            info = cluster.coordinator_call(DescribeGroupRequest(app.application_id))
            if info["state"] != "Stable":
                return -1, {}
            members = {m: list(d["assignment"]) for m, d in info["members"].items()}
            return info["generation"], members

        self.worker = StreamsWorker(
            app.application_id,
            app.subtopologies(),
            app.processing_guarantee,
            app.commit_interval_ms,
            consumer,
            new_producer,
            restore_consumer,
            state_dir_of(cluster.data_dir, app.application_id, slot),
            wall_clock_ms,
            num_standby_replicas=app.num_standby_replicas,
            group_assignment=group_assignment,
            cache_max_bytes=app.cache_max_bytes,
        )
        self._consumer = consumer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raystream-streams", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        worker = self.worker
        clean = True
        backoff = Backoff()
        try:
            worker.start()
            while not self._stop.is_set():
                try:
                    worker.run_once()
                except StreamsError:
                    raise
                except RaystreamError as error:  # transient: the loop goes on
                    logger.warning("streams worker %d: %s", self.slot, error)
                    self._stop.wait(backoff.next_s())
                else:
                    backoff.reset()
        except Exception as error:
            clean = False
            worker.error = "".join(traceback.format_exception(error, limit=4))
            worker.state = ERROR
            logger.error("streams worker %d failed: %s", self.slot, worker.error)
            try:
                self._stop_siblings()
            except Exception as failure:  # Ray unreachable: still close this worker
                logger.warning("streams worker %d: stopping the others: %s", self.slot, failure)
        finally:
            try:
                worker.close(clean=clean)
            except Exception as error:
                logger.warning("streams worker %d: close failed: %s", self.slot, error)
            worker.fail_queries(StreamsError(f"streams worker {self.slot} stopped"))
            self._consumer.close(autocommit=False)
            worker.producer.close()

    def _stop_siblings(self) -> None:
        """Stop the application's other workers and wait for them (see the module
        docstring). They are found by name, so workers added by ``app.scale`` are too."""
        app_id, namespace = self.app.application_id, self.app.cluster.namespace
        prefix, own = worker_name(app_id, 0)[:-1], worker_name(app_id, self.slot)
        refs = []
        for actor in ray.util.list_named_actors(all_namespaces=True):
            name = actor["name"]
            if actor["namespace"] != namespace or not name.startswith(prefix) or name == own:
                continue
            try:
                refs.append(ray.get_actor(name, namespace=namespace).halt.remote())
            except ValueError:  # gone since it was listed
                continue
        if not refs:
            return
        done, pending = ray.wait(refs, num_returns=len(refs), timeout=SIBLINGS_STOP_TIMEOUT_S)
        for ref in done:
            try:
                ray.get(ref)
            except Exception as error:  # dead or restarting: nothing of it runs
                logger.info("streams worker %d: a sibling did not stop: %s", self.slot, error)
        if pending:
            logger.warning("streams worker %d: %d siblings still stopping", self.slot, len(pending))

    def status(self) -> dict[str, Any]:
        """The worker's status (see ``StreamsWorker.status``), its slot and pid."""
        status = self.worker.status()
        status.update(slot=self.slot, pid=os.getpid(), alive=self._thread.is_alive())
        return status

    def describe(self) -> dict[str, Any]:
        """What the CLI prints: the application's id, settings and topology."""
        app = self.app
        return {
            "application_id": app.application_id,
            "processing_guarantee": app.processing_guarantee,
            "num_workers": app.num_workers,
            "topology": app.describe(),
        }

    def query(
        self, store: str, method: str, args: tuple[Any, ...], partition: int | None = None
    ) -> Any:
        """An interactive query (see ``StreamsWorker.query``)."""
        if not self._thread.is_alive():
            raise StreamsError(f"streams worker {self.slot} is not running")
        return self.worker.query(store, method, args, partition)

    def stop(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Commit, close the tasks, leave the group; returns the final status."""
        self._stop.set()
        self._thread.join(timeout_s)
        return self.status()

    def halt(self, timeout_s: float = SIBLINGS_STOP_TIMEOUT_S) -> dict[str, Any]:
        """:meth:`stop` because another worker failed. A worker that failed itself
        answers at once: it is stopping the others too, and may be waiting for the one
        that asks."""
        self._stop.set()
        if self.worker.state != ERROR:
            self._thread.join(timeout_s)
        return self.status()


StreamsWorkerActor = ray.remote(max_concurrency=8)(StreamsWorkerShell)
"""The worker as a Ray actor class (threaded: status and queries answer while it polls)."""
