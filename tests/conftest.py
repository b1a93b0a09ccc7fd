"""Shared fixtures: one Ray instance per test session, one raystream cluster per test.

Each test gets its own raystream namespace and data directory on the session's Ray, so
tests are isolated without paying for a Ray start each. A test that needs a fresh Ray
cluster (several nodes, node loss) starts its own and says so.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

_namespaces = itertools.count()


def ensure_local_ray() -> None:
    """Start the session's local Ray unless one is running in this process."""
    import ray

    from raystream.java import provide_java

    if not ray.is_initialized():
        provide_java()  # Spark tests need Java workers on the node
        ray.init(
            address="local",  # a fresh Ray even if a ``ray start`` cluster is running
            num_cpus=8,
            include_dashboard=False,
            logging_level="warning",
            log_to_driver=False,
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


@pytest.fixture
def make_topic(shared_cluster: Any, request) -> Callable[..., str]:
    """``make_topic(partitions=1, **create_topic_kwargs)`` -> a fresh topic's name."""
    admin = shared_cluster.admin()
    prefix = request.node.name.split("[")[0][-40:].strip("_")

    def make(partitions: int = 1, **kwargs: Any) -> str:
        name = f"{prefix}-{next(_topic_names)}"
        admin.create_topic(name, partitions=partitions, **kwargs)
        return name

    return make


_topic_names = itertools.count()


def read_topic(cluster: Any, topic: str, isolation: str, partitions: int = 1) -> list[Any]:
    """Every value of the topic readable at this isolation level, partition by partition."""
    from raystream.types import TopicPartition

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
