"""A real multi-node Ray cluster for replication and failover tests.

These tests need their own Ray: ``ray.cluster_utils.Cluster`` starts several raylets
(nodes) on this machine, so replicas land on distinct nodes and a node can be removed.
The session's single-node Ray is shut down first and started again by the next test
that needs it. One such cluster serves the whole package (starting one costs seconds);
each test has a raystream cluster of its own on it.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

_namespaces = itertools.count()
NODES = 3


@pytest.fixture(scope="package")
def ray_nodes() -> Iterator[Any]:
    """A 3-node Ray cluster (head + 2 workers) for this package.

    A test that removes a node adds one back; were one not to (an error between the
    two), ``replicated`` makes up the count for the tests after it.
    """
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    nodes = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 4,
            "object_store_memory": 150 * 2**20,
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3},
        },
    )
    for _ in range(NODES - 1):
        nodes.add_node(num_cpus=2, object_store_memory=150 * 2**20)
    nodes.wait_for_nodes()
    ray.init(address=nodes.address, logging_level="warning", log_to_driver=False)
    yield nodes
    ray.shutdown()
    nodes.shutdown()


@pytest.fixture
def replicated(ray_nodes: Any, tmp_path) -> Iterator[Any]:
    """A raystream cluster on the multi-node Ray, with fast failure detection."""
    import ray

    from raystream.client.cluster import connect

    alive = sum(1 for n in ray.nodes() if n["Alive"])
    for _ in range(NODES - alive):
        ray_nodes.add_node(num_cpus=2, object_store_memory=150 * 2**20)
    if alive < NODES:
        ray_nodes.wait_for_nodes()

    cluster = connect(
        namespace=f"replication-{next(_namespaces)}",
        data_dir=str(tmp_path / "data"),
        broker_config={
            "replica.lag.time.max.ms": 2000,
            "log.flush.scheduler.interval.ms": 200,
        },
    )
    yield cluster
    with contextlib.suppress(Exception):
        cluster.shutdown()
