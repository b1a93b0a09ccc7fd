"""One Spark on Ray (through RayDP) for all Spark tests: a JVM start costs tens of seconds.

The session belongs to one raystream cluster, shared by the package's tests; each test
makes its own topics with ``spark_topic``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="package")
def spark_cluster(start_local_ray: Callable[[], None], tmp_path_factory) -> Iterator[Any]:
    """The raystream cluster the Spark session reads and writes. If Ray had to be
    started for it (a multi-node test stopped the session's), it is stopped again after
    the package, as tests that come later may expect."""
    import ray

    from raystream.client.cluster import connect

    started = not ray.is_initialized()
    start_local_ray()
    cluster = connect(
        namespace=f"spark-{os.getpid()}", data_dir=str(tmp_path_factory.mktemp("spark-data"))
    )
    yield cluster
    cluster.shutdown()
    if started:
        ray.shutdown()


@pytest.fixture(scope="package")
def spark(spark_cluster: Any) -> Iterator[Any]:
    """Spark on the test Ray, one executor, session time zone UTC."""
    import raystream as rs

    session = rs.spark.session(
        spark_cluster, app_name="raystream-tests", configs={"spark.sql.session.timeZone": "UTC"}
    )
    yield session
    rs.spark.stop()


@pytest.fixture
def spark_topic(spark_cluster: Any, request, topic_maker: Callable[..., Any]) -> Callable[..., str]:
    """``spark_topic(partitions=1, **create_topic_kwargs)`` -> a fresh topic's name."""
    return topic_maker(spark_cluster, request)
