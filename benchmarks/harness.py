"""What every benchmark does around its measurements: a cluster of its own, the machine line.

Each benchmark runs on a Ray of its own (``address="local"``, even if a ``ray start``
cluster is running) with eight logical CPUs, so that actors and Ray Data tasks are not
held back by Ray's CPU accounting on a two-core machine, and on a raystream cluster in a
temporary data dir that is removed afterwards. The figures it prints open with one line
that says what they were measured on.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import psutil


@contextlib.contextmanager
def local_ray() -> Iterator[None]:
    """A fresh local Ray for one run, with the settings raystream starts Ray with, gone on
    exit (benchmarks that need Ray without a raystream cluster, e.g. bare actors)."""
    import ray  # here, so that the storage engine's benchmark runs without Ray

    from raystream.transport import local_ray_system_config

    ray.init(
        address="local",
        num_cpus=8,
        include_dashboard=False,
        logging_level="error",
        log_to_driver=False,
        _system_config=local_ray_system_config(),
    )
    try:
        yield
    finally:
        ray.shutdown()


@contextlib.contextmanager
def local_cluster(namespace: str, broker_config: dict[str, Any] | None = None) -> Iterator[Any]:
    """A fresh Ray and raystream cluster (an ``rs.Cluster``) for one run, gone on exit;
    ``broker_config``: the cluster's broker settings (Kafka's names)."""
    import raystream as rs

    data_dir = tempfile.mkdtemp(prefix="raystream-bench-")
    try:
        with local_ray():
            cluster = rs.connect(
                namespace=namespace, data_dir=data_dir, broker_config=broker_config
            )
            yield cluster
            cluster.shutdown()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def package_version(name: str) -> str:
    """``name``'s installed version, or "not installed": a benchmark names an optional
    peer it could not run rather than failing on it after its figures are taken."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_line(*packages: str) -> str:
    """The machine, Python, and the versions of pyarrow, Ray and ``packages`` (a package
    that is not installed is named as such)."""
    versions = ", ".join(
        f"{name} {package_version(name)}" for name in ("pyarrow", "ray", *packages)
    )
    return (
        f"machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}, "
        f"{versions}"
    )
