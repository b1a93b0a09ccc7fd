"""Shared fixtures: one Ray instance per test session, one raystream cluster per test.

Each test gets its own raystream namespace and data directory on the session's Ray, so
tests are isolated without paying for a Ray start each. A test that needs a fresh Ray
cluster (several nodes, node loss) starts its own and says so.

Tests that wait or inject faults use the helpers here (as fixtures: ``wait_until``,
``holds_for``, ``chaos``): a wait is on a condition with a deadline and says what it
awaited; a fault is recorded (what, which actor or node, its process, when) and checked
against Ray's own word that it happened, so a chaos test cannot pass without chaos.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import pytest

_namespaces = itertools.count()


def needs_own_ray(item: pytest.Item) -> bool:
    """Whether the test stops the session's Ray for a Ray of its own: a multi-node
    ``ray_nodes`` cluster, or a test marked ``own_ray``."""
    return "ray_nodes" in getattr(item, "fixturenames", ()) or bool(
        item.get_closest_marker("own_ray")
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests that need a Ray of their own after all the others (keeping the
    order within each part).

    Each of them stops the session's Ray, and the next test that needs it would start
    it again (seconds each time, a Spark session's Java workers included); at the end
    of the session nothing comes after them.

    Such tests sit in modules of their own, so that a runner that hands out whole
    modules (pytest-xdist's ``--dist loadscope``) keeps this order too: one beside
    shared tests would run with its module, mid-session, and stop the Ray that the
    session- and package-wide clusters (Spark's, the Kafka listener's) live on.
    """
    own = {item.nodeid.split("::")[0] for item in items if needs_own_ray(item)}
    mixed = sorted({item.nodeid.split("::")[0] for item in items if not needs_own_ray(item)} & own)
    if mixed:
        raise pytest.UsageError(
            f"tests that stop the session's Ray share a module with tests that use it: "
            f"{mixed}; move them to a module of their own"
        )
    items.sort(key=needs_own_ray)  # a stable sort: collection order otherwise


class PackageTeardown:
    """Tears down a test directory's package-scoped fixtures as soon as the run leaves
    that directory, as pytest does for real packages.

    ``tests/`` has no ``__init__.py`` (the test directories are not importable packages:
    ``tests/kafka`` would shadow kafka-python), so pytest finds no ``Package`` node and
    keeps a ``scope="package"`` fixture until the session ends. The package clusters
    (the Kafka listener's, Spark's with its JVMs, the multi-node Ray) would then run
    beside every later test: the Streams tests ran at a quarter of their speed beside
    some hundred idle replica processes. A fixture torn down here is set up again if
    the run comes back to its directory (own-Ray tests are sorted to the end).

    A plugin rather than this conftest's hooks: such a fixture is set up on the session
    node, whose hooks are only the root directory's.
    """

    def __init__(self) -> None:
        # Set up so far, oldest first, with the request that made each (``finish`` needs it).
        self._live: list[tuple[pytest.FixtureDef[Any], pytest.FixtureRequest]] = []

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> Iterator[Any]:
        """Remember each package-scoped fixture of a directory as it is set up."""
        value = yield
        if fixturedef.scope == "package" and fixturedef.baseid:
            self._live.append((fixturedef, request))
        return value

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Iterator[None]:
        """After a test's own teardown, finish the fixtures of the directories the next
        test is not in (dependents first: ``finish`` runs theirs before its own)."""
        yield
        leaving = [
            entry
            for entry in self._live
            if nextitem is None or not nextitem.nodeid.startswith(f"{entry[0].baseid}/")
        ]
        self._live = [entry for entry in self._live if entry not in leaving]
        errors: list[BaseException] = []
        for fixturedef, request in reversed(leaving):  # the newest first, as pytest does
            try:
                fixturedef.finish(request)  # a no-op if already finished
            except BaseException as error:
                errors.append(error)
        for later in errors[1:]:
            errors[0].add_note(f"also, tearing down another package fixture: {later!r}")
        if errors:
            raise errors[0]


def pytest_configure(config: pytest.Config) -> None:
    """Register :class:`PackageTeardown` (once, however often this is called)."""
    if not config.pluginmanager.has_plugin("raystream-package-teardown"):
        config.pluginmanager.register(PackageTeardown(), "raystream-package-teardown")


# ------------------------------------------------------------------ two workers (xdist)

SHARED_DIRECTORIES = ("tests/connectors", "tests/kafka", "tests/replication", "tests/spark")
"""Directories whose tests share package-scoped fixtures (PostgreSQL, the Kafka
listener's cluster, the multi-node Ray, Spark's JVMs): one worker runs each whole, so
each fixture starts once."""

SPLIT_MODULES = ("tests/examples/test_examples.py",)
"""Modules whose tests share nothing (each example is a process of its own): each test
is a unit of its own, so both workers take some."""

SCOPE_SECONDS = {
    "tests/replication": 250,
    "tests/kafka": 250,
    "tests/spark": 210,
    "tests/security/test_secure_listeners.py": 150,
    "tests/streams/test_runtime.py": 140,
    "tests/actors/test_controller_admin.py": 95,
    "tests/groups/test_consumer_groups.py": 90,
    "tests/mirror/test_mirror_into_kafka.py": 75,
    "tests/security/test_listener_auth.py": 72,
    "tests/examples/test_examples.py::test_spark_analytics_writes_window_totals": 73,
    "tests/connectors": 70,
    "tests/examples/test_examples.py::test_consumer_group_actors_count_every_click_once": 66,
    "tests/cli/test_demo.py": 62,
    "tests/cli/test_cli.py": 60,
    "tests/client/test_producer.py": 58,
    "tests/mirror/test_mirror_raystream.py": 56,
    "tests/groups/test_consumer_group_actors.py": 56,
    "tests/examples/test_examples.py::test_streams_revenue_matches_the_batch_answer": 53,
    "tests/examples/test_examples.py::test_ml_pipeline_scores_every_transaction": 47,
    "tests/data/test_data_io.py": 45,
    "tests/security/test_direct_tls.py": 43,
    "tests/log/test_log_properties.py": 40,
}
"""Seconds each of the longest units took in a one-process run of the suite (its
``--durations``): the scheduler hands them out longest first, so neither worker is
left with a long unit at the end while the other idles. A unit missing here counts as
short and goes in collection order after these; a stale figure costs balance, never
correctness."""


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its directory (:data:`SHARED_DIRECTORIES`),
    itself (:data:`SPLIT_MODULES`) or its module."""
    module = nodeid.split("::", 1)[0]
    directory = module.rsplit("/", 1)[0]
    if directory in SHARED_DIRECTORIES:
        return directory
    if module in SPLIT_MODULES:
        return nodeid.split("[", 1)[0]
    return module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``-n``, hand out whole units (:func:`unit_of`), longest first
    (:data:`SCOPE_SECONDS`).

    xdist's own ``loadscope`` hands out modules, largest first by test count: a
    directory's package fixtures would start once per worker that gets one of its
    modules, and a module of many quick tests would go before one of a few long ones.
    """
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            longest = max(self.workqueue, key=lambda unit: SCOPE_SECONDS.get(unit, 0))
            self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

    return UnitScheduling(config, log)


def ensure_local_ray() -> None:
    """Start the session's local Ray unless one is running in this process."""
    import ray

    from raystream.java import provide_java
    from raystream.transport import local_ray_system_config

    if not ray.is_initialized():
        provide_java()  # Spark tests need Java workers on the node
        ray.init(
            address="local",  # a fresh Ray even if a ``ray start`` cluster is running
            num_cpus=8,
            include_dashboard=False,
            logging_level="warning",
            log_to_driver=False,
            _system_config=local_ray_system_config(),
        )


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """Ray for the whole session, with more logical CPUs than cores (actors use 0).

    Tests that need their own multi-node cluster shut it down; the next test that asks
    for this fixture's Ray gets it started again.
    """
    import ray

    ensure_local_ray()
    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="session")
def start_local_ray(ray_session: None) -> Callable[[], None]:
    """:func:`ensure_local_ray`, for fixtures of other conftests with a wider scope than
    a test (they cannot use ``local_ray``)."""
    return ensure_local_ray


@pytest.fixture
def local_ray(ray_session: None) -> None:
    """The session's single-node Ray, started again if a multi-node test stopped it."""
    ensure_local_ray()


@pytest.fixture
def cluster_factory(ray_session: None, tmp_path) -> Iterator[Callable[..., Any]]:
    """Connect raystream clusters for this test; each is shut down at the end.

    Keyword arguments go to :func:`raystream.connect`; by default a namespace unique to
    the test and a data dir under the test's tmp_path.
    """
    from raystream.client.cluster import connect

    ensure_local_ray()
    made: list[Any] = []

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("namespace", f"test-{os.getpid()}-{next(_namespaces)}")
        kwargs.setdefault("data_dir", str(tmp_path / f"data-{len(made)}"))
        cluster = connect(**kwargs)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        with contextlib.suppress(Exception):  # already shut down by the test
            cluster.shutdown()


@pytest.fixture
def cluster(cluster_factory: Callable[..., Any]) -> Any:
    """A fresh raystream cluster (own namespace and data dir) on the session's Ray."""
    return cluster_factory()


@pytest.fixture(scope="module")
def shared_cluster(ray_session: None, request, tmp_path_factory) -> Iterator[Any]:
    """One raystream cluster for a whole test module (its own namespace and data dir),
    for tests that only add topics of their own: far cheaper than a cluster per test."""
    from raystream.client.cluster import connect

    ensure_local_ray()
    module = request.module.__name__.rsplit(".", 1)[-1]
    cluster = connect(
        namespace=f"{module}-{os.getpid()}",
        data_dir=str(tmp_path_factory.mktemp(f"{module}-data")),
    )
    yield cluster
    cluster.shutdown()


def topic_maker(cluster: Any, request: Any) -> Callable[..., str]:
    """``make(partitions=1, **create_topic_kwargs)`` -> the name of a fresh topic of
    ``cluster``, named after the requesting test (the fixtures below and the packages'
    ``spark_topic`` and ``kafka_topic``)."""
    admin = cluster.admin()
    prefix = request.node.name.split("[")[0][-40:].strip("_")

    def make(partitions: int = 1, **kwargs: Any) -> str:
        name = f"{prefix}-{next(_topic_names)}"
        admin.create_topic(name, partitions=partitions, **kwargs)
        return name

    return make


@pytest.fixture
def make_topic(shared_cluster: Any, request) -> Callable[..., str]:
    """``make_topic(partitions=1, **create_topic_kwargs)`` -> a fresh topic's name."""
    return topic_maker(shared_cluster, request)


@pytest.fixture(name="topic_maker")
def topic_maker_fixture() -> Callable[..., Callable[..., str]]:
    """:func:`topic_maker`, for the conftests of the test packages."""
    return topic_maker


_topic_names = itertools.count()


def read_topic(cluster: Any, topic: str, isolation: str, partitions: int = 1) -> list[Any]:
    """Every value of the topic readable at this isolation level, partition by partition.

    read_committed first waits for the markers of the transactions already ended (the
    coordinator writes them after it answers the end), so it reads every one of them.
    """
    from raystream.types import TopicPartition

    if isolation == "read_committed":
        wait_until(
            lambda: not cluster.transaction_coordinator_call("completing"),
            30,
            "the ended transactions' markers written",
        )
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with cluster.consumer(
        auto_offset_reset="earliest", enable_auto_commit=False, isolation_level=isolation
    ) as consumer:
        consumer.assign(tps)
        end = consumer.end_offsets(tps)
        values: list[Any] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < end[tp] for tp in tps):
            assert time.monotonic() < deadline, f"stuck at {[consumer.position(tp) for tp in tps]}"
            table = consumer.poll_arrow(timeout_ms=200)
            values += table.column("value").to_pylist() if table.num_rows else []
        return values


@pytest.fixture
def read_all() -> Callable[..., list[Any]]:
    """``read_all(cluster, topic, isolation, partitions=1)`` -> every readable value."""
    return read_topic


# ------------------------------------------------------------------ waiting and chaos

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout_s: float,
    what: str,
    *,
    interval_s: float = 0.05,
    retry_on: tuple[type[BaseException], ...] = (),
    detail: Callable[[], Any] | None = None,
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that.

    The way a test synchronizes: wait for the thing itself, with a deadline, never for
    a guessed time. Errors of the types in ``retry_on`` count as "not yet" (a
    controller restarting, say); any other error propagates at once.

    Raises:
        AssertionError: ``timeout_s`` passed first. The message names what was
            awaited, the last value or error seen and, when given, ``detail()``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = condition()
        except retry_on as error:
            last: Any = error
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            extra = f"; {detail()}" if detail is not None else ""
            raise AssertionError(
                f"timed out after {timeout_s} s waiting for {what} (last: {last!r}{extra})"
            )
        time.sleep(interval_s)


def holds_for(
    condition: Callable[[], Any],
    duration_s: float,
    what: str,
    *,
    interval_s: float = 0.1,
    min_samples: int = 3,
) -> int:
    """Check that ``condition`` stays true for ``duration_s``; return how often it was
    sampled.

    For claims that something does not happen (a partition stays offline, an idle
    producer is not fenced): the window is the claim, not synchronization, so it is
    sampled throughout and fails at the first false sample, not only at its end.

    Raises:
        AssertionError: a sample was false (the message says when in the window), or
            fewer than ``min_samples`` were taken (a stalled sampler proves nothing).
    """
    start = time.monotonic()
    end = start + duration_s
    samples = 0
    while True:
        value = condition()
        samples += 1
        now = time.monotonic()
        assert value, (
            f"{what} broke {now - start:.2f} s into its {duration_s} s window "
            f"(sample {samples}: {value!r})"
        )
        if now >= end:
            break
        time.sleep(min(interval_s, end - now))
    assert samples >= min_samples, (
        f"{what}: only {samples} samples in {duration_s} s (wanted {min_samples})"
    )
    return samples


def actor_info(handle: Any) -> dict[str, Any]:
    """Ray's actor-table entry for ``handle``: ``State``, ``NumRestarts``, ``Pid``, ...

    Read from the GCS through ``ray._private.state`` (as raystream's liveness check
    does): the public ``ray.util.state`` needs the dashboard, which the test Rays do not
    start, and with several Rays on the machine it may ask another one.
    """
    from ray._private import state

    actor_id = handle._actor_id.hex()
    info = state.actors(actor_id=actor_id)
    assert info, f"Ray does not know actor {actor_id}"
    return info


def node_alive(node_id: str) -> bool:
    """Whether Ray's node table lists ``node_id`` as alive."""
    import ray

    return any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes())


@dataclasses.dataclass
class Kill:
    """An actor a test killed: which one, its process, Ray's restart count before the
    kill, whether Ray may restart it, when (``time.monotonic()``) the kill was sent, and
    when Ray was first seen to report it (an upper bound of the moment it died)."""

    what: str
    actor_id: str
    pid: int
    restarts_before: int
    restart: bool
    at: float
    confirmed_at: float | None = None


@dataclasses.dataclass
class NodeLoss:
    """A Ray node a test removed, when, and when Ray was first seen to report it dead."""

    what: str
    node_id: str
    at: float
    confirmed_at: float | None = None


class Chaos:
    """The faults one test injects, recorded, and the checks that they happened.

    A chaos test injects its faults through this object (``kill_actor``,
    ``remove_node``; fault loops run on a thread with ``background``) and ends with
    ``verify``, which fails unless the faults were made, no fault loop failed, and Ray
    confirms each one: a killed actor came back in a new process (or is dead for good
    when killed without restart), a removed node is gone. ``confirm`` and
    ``assert_around`` let the test show that it observed its workload both before the
    first fault and after the last one took effect, not only before.

    Thread-safe: fault loops on other threads record here too. Fault loops should wait
    with ``stopping.wait(...)`` so that the test's end stops them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.kills: list[Kill] = []
        self.node_losses: list[NodeLoss] = []
        self.errors: list[BaseException] = []
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    @staticmethod
    def actor_info(handle: Any) -> dict[str, Any]:
        """:func:`actor_info`: Ray's actor-table entry for ``handle``."""
        return actor_info(handle)

    @property
    def faults(self) -> list[Kill | NodeLoss]:
        """Every fault so far, in the order they were made."""
        with self._lock:
            return sorted([*self.kills, *self.node_losses], key=lambda f: f.at)

    def kill_actor(self, handle: Any, what: str, *, restart: bool = True) -> Kill:
        """Kill ``handle``'s process as a crash would (``ray.kill``); Ray restarts the
        actor when ``restart`` and its options allow. The actor must be alive: killing
        one that is still restarting from an earlier kill would be no new fault."""
        import ray

        info = actor_info(handle)
        assert info["State"] == "ALIVE", f"{what}: not alive to be killed: {info['State']}"
        at = time.monotonic()
        ray.kill(handle, no_restart=not restart)
        kill = Kill(what, info["ActorID"], info["Pid"], info["NumRestarts"], restart, at)
        with self._lock:
            self.kills.append(kill)
        self._stamp_when_reported(kill)
        return kill

    def remove_node(self, ray_nodes: Any, node_id: str, what: str) -> NodeLoss:
        """Remove a node of a ``ray.cluster_utils.Cluster`` (its raylet and every
        process on it end)."""
        (node,) = [n for n in ray_nodes.list_all_nodes() if n.node_id == node_id]
        at = time.monotonic()
        ray_nodes.remove_node(node)
        loss = NodeLoss(what, node_id, at)
        with self._lock:
            self.node_losses.append(loss)
        self._stamp_when_reported(loss)
        return loss

    def _stamp_when_reported(self, fault: Kill | NodeLoss, timeout_s: float = 120) -> None:
        """Set ``fault.confirmed_at`` as soon as Ray reports the fault, from a thread, so
        the stamp is close to the fault whenever the test asks (``confirm``)."""

        def watch() -> None:
            deadline = time.monotonic() + timeout_s
            while not self.stopping.is_set() and time.monotonic() < deadline:
                with contextlib.suppress(Exception):  # a GCS hiccup: the next poll asks again
                    if self._happened(fault):
                        fault.confirmed_at = time.monotonic()
                        return
                time.sleep(0.02)

        threading.Thread(target=watch, name=f"confirm-{fault.what}", daemon=True).start()

    def background(self, loop: Callable[[], None], name: str) -> threading.Thread:
        """Run a fault loop on a thread; its error, if any, is recorded (``verify``
        raises it), never swallowed."""

        def run() -> None:
            try:
                loop()
            except BaseException as error:
                with self._lock:
                    self.errors.append(error)

        thread = threading.Thread(target=run, name=f"chaos-{name}", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()
        return thread

    @property
    def running(self) -> bool:
        """Whether a fault loop is still running."""
        with self._lock:
            return any(t.is_alive() for t in self._threads)

    def join(self, timeout_s: float = 60) -> None:
        """Wait for the fault loops to end; fail if one is still running."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0))
            assert not thread.is_alive(), f"fault loop {thread.name} still runs after {timeout_s} s"

    def confirm(self, timeout_s: float = 60) -> float:
        """Wait until Ray reports every fault made so far (a killed actor's process
        gone: Ray counted a restart or marked it dead; a removed node dead) and return
        the time by which all were reported: everything after it came after the faults.

        Raises:
            AssertionError: no fault was made, or Ray did not report one in time.
        """
        faults = self.faults
        assert faults, "no fault was injected"
        for fault in faults:
            wait_until(
                lambda fault=fault: fault.confirmed_at is not None,
                timeout_s,
                f"Ray to report the fault {fault}",
                interval_s=0.02,
            )
        return max(f.confirmed_at for f in faults if f.confirmed_at is not None)

    @staticmethod
    def _happened(fault: Kill | NodeLoss) -> bool:
        if isinstance(fault, NodeLoss):
            return not node_alive(fault.node_id)
        from ray._private import state

        info = state.actors(actor_id=fault.actor_id)
        return info["NumRestarts"] > fault.restarts_before or info["State"] == "DEAD"

    @staticmethod
    def _back(kill: Kill) -> bool:
        from ray._private import state

        info = state.actors(actor_id=kill.actor_id)
        return info["State"] == "ALIVE" and info["Pid"] != kill.pid

    def verify(self, min_faults: int = 1, timeout_s: float = 60) -> list[Kill | NodeLoss]:
        """Fail unless the test's faults happened; return them.

        Checks that the fault loops ended without error, that at least ``min_faults``
        faults were made, that Ray reported each, and that each killed actor is back
        alive in a new process (restart) or dead for good (no restart).
        """
        from ray._private import state

        self.join(timeout_s)
        if self.errors:
            raise AssertionError(
                f"{len(self.errors)} fault loop(s) failed: {self.errors!r}"
            ) from self.errors[0]
        faults = self.faults
        assert len(faults) >= min_faults, (
            f"{len(faults)} faults injected, wanted at least {min_faults}: {faults}"
        )
        self.confirm(timeout_s)
        for kill in self.kills:
            if kill.restart:
                wait_until(
                    lambda kill=kill: self._back(kill),
                    timeout_s,
                    f"{kill.what} back in a new process (it was pid {kill.pid})",
                    interval_s=0.05,
                    detail=lambda kill=kill: state.actors(actor_id=kill.actor_id),
                )
            else:
                assert state.actors(actor_id=kill.actor_id)["State"] == "DEAD", kill
        return faults

    def assert_around(self, times: Iterable[float], what: str) -> None:
        """Fail unless some of ``times`` came before the first fault was made and some
        after the last one was confirmed: the test saw ``what`` through the chaos, not
        only before it."""
        confirmed = self.confirm()
        first = self.faults[0].at
        times = list(times)
        before = sum(t < first for t in times)
        after = sum(t > confirmed for t in times)
        assert before and after, (
            f"{what}: {before} before the first fault and {after} after the last one was "
            f"confirmed (of {len(times)}): the test did not see them through the chaos"
        )

    def close(self) -> None:
        """Stop the fault loops (they watch ``stopping``) and wait a little for them."""
        self.stopping.set()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(10)


class Watch:
    """Samples ``probe()`` on a thread, as (time, value) pairs, to check a claim about
    how something evolved through a test's faults (a high watermark never going back).

    A probe returning None took no sample (nothing to read right now). An error the
    probe raises is recorded with its time, not swallowed: ``stop`` names them when the
    samples fall short, so a watch that never read anything cannot pass.
    """

    def __init__(self, probe: Callable[[], Any], what: str, interval_s: float = 0.1) -> None:
        self.what = what
        self.samples: list[tuple[float, Any]] = []
        self.errors: list[tuple[float, BaseException]] = []
        self._probe = probe
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{what}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                value = self._probe()
            except Exception as error:  # recorded; stop() reports them
                self.errors.append((time.monotonic(), error))
            else:
                if value is not None:
                    self.samples.append((time.monotonic(), value))
            self._stop.wait(self._interval_s)

    def count(self, after: float = float("-inf"), before: float = float("inf")) -> int:
        """How many samples were taken strictly between ``after`` and ``before``."""
        return sum(after < t < before for t, _ in list(self.samples))

    def stop(
        self,
        chaos: Chaos | None = None,
        *,
        min_before: int = 3,
        min_after: int = 3,
        timeout_s: float = 60,
    ) -> list[Any]:
        """Stop sampling once there are ``min_before`` samples before ``chaos``'s first
        fault and ``min_after`` after its last one was confirmed (without ``chaos``:
        ``min_before + min_after`` samples in all); return the sampled values in order.

        Raises:
            AssertionError: the samples did not come within ``timeout_s`` (the message
                names the probe's errors), or the probe thread did not end.
        """
        try:
            if chaos is None:
                wanted = min_before + min_after
                wait_until(
                    lambda: self.count() >= wanted,
                    timeout_s,
                    f"{wanted} samples of {self.what}",
                    detail=self._errors_seen,
                )
            else:
                first, confirmed = chaos.faults[0].at, chaos.confirm()
                wait_until(
                    lambda: (
                        self.count(before=first) >= min_before
                        and self.count(after=confirmed) >= min_after
                    ),
                    timeout_s,
                    f"{min_before} samples of {self.what} before the first fault and "
                    f"{min_after} after the last",
                    detail=lambda: (
                        f"{self.count(before=first)} before, "
                        f"{self.count(after=confirmed)} after; {self._errors_seen()}"
                    ),
                )
        finally:
            self._stop.set()
            self._thread.join(30)
        assert not self._thread.is_alive(), f"the watch of {self.what} did not stop"
        return [value for _, value in self.samples]

    def _errors_seen(self) -> str:
        errors = [e for _, e in list(self.errors)]
        return f"{len(errors)} probe errors, e.g. {errors[:3]!r}"


@pytest.fixture
def chaos() -> Iterator[Chaos]:
    """A fresh :class:`Chaos` for the test; its fault loops are stopped at the end."""
    recorder = Chaos()
    yield recorder
    recorder.close()


@pytest.fixture(name="wait_until")
def wait_until_fixture() -> Callable[..., Any]:
    """:func:`wait_until`, for tests (conftest modules are not imported by name)."""
    return wait_until


@pytest.fixture(name="holds_for")
def holds_for_fixture() -> Callable[..., int]:
    """:func:`holds_for`, for tests."""
    return holds_for


@pytest.fixture(name="watch")
def watch_fixture() -> Iterator[Callable[..., Watch]]:
    """``watch(probe, what, interval_s=0.1)`` -> a started :class:`Watch`; every watch
    still sampling at the test's end is stopped."""
    made: list[Watch] = []

    def make(probe: Callable[[], Any], what: str, interval_s: float = 0.1) -> Watch:
        made.append(Watch(probe, what, interval_s))
        return made[-1]

    yield make
    for w in made:
        w._stop.set()
        w._thread.join(30)
