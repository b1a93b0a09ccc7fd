"""One raystream cluster with a Kafka-protocol listener for the package's tests.

Kafka clients (kafka-python, aiokafka, confluent-kafka) connect to it unmodified, with
``bootstrap.servers`` from :meth:`raystream.Cluster.bootstrap_servers`. Each test makes
its own topics, so the tests share the cluster's cost.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="package")
def kafka_cluster(start_local_ray: Callable[[], None], tmp_path_factory) -> Iterator[Any]:
    """A raystream cluster whose listener takes any free port on loopback."""
    from raystream.client.cluster import connect

    start_local_ray()
    cluster = connect(
        namespace=f"kafka-{os.getpid()}",
        data_dir=str(tmp_path_factory.mktemp("kafka-data")),
        broker_config={"listeners": "PLAINTEXT://127.0.0.1:0"},
    )
    yield cluster
    cluster.shutdown()


@pytest.fixture(scope="package")
def bootstrap(kafka_cluster: Any) -> str:
    """``bootstrap.servers`` for Kafka clients."""
    return kafka_cluster.bootstrap_servers()


@pytest.fixture
def kafka_topic(kafka_cluster: Any, request, topic_maker: Callable[..., Any]) -> Callable[..., str]:
    """``kafka_topic(partitions=1, **create_topic_kwargs)`` -> a fresh topic's name."""
    return topic_maker(kafka_cluster, request)
