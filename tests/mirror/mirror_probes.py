"""MirrorMaker's source connector with a probe, for running it on Connect workers.

The task is :class:`~raystream.mirror.connectors.MirrorSourceTask` itself; after each
``commit_batch`` the worker calls, it also appends how many polled batches it still
remembers (:meth:`~raystream.mirror.connectors.MirrorSourceTask.uncommitted_batches`)
to the file named by the connector config's ``probe.file``, which the test reads from
outside the worker actor. The workers cannot import the tests' modules: the test ships
this one by value.
"""

from __future__ import annotations

from typing import Any

from raystream.connectors.api import Delivery, SourceBatch
from raystream.mirror.connectors import MirrorSourceConnector, MirrorSourceTask

PROBE_KEY = "probe.file"


class ProbedMirrorSourceTask(MirrorSourceTask):
    """MirrorSourceTask that reports what it remembers after each committed batch."""

    def start(self, config: dict[str, str]) -> None:
        self.probe_file = config[PROBE_KEY]
        super().start(config)

    def commit_batch(self, batch: SourceBatch, delivery: Delivery) -> None:
        super().commit_batch(batch, delivery)
        with open(self.probe_file, "a", encoding="utf-8") as probe:
            probe.write(f"{self.uncommitted_batches()}\n")


class ProbedMirrorSourceConnector(MirrorSourceConnector):
    """MirrorSourceConnector whose tasks are :class:`ProbedMirrorSourceTask` s."""

    def task_class(self) -> Any:
        return ProbedMirrorSourceTask


PLUGINS = {"ProbedMirrorSourceConnector": ProbedMirrorSourceConnector}
