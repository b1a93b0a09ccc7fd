"""Tiny connectors for the runtime's tests: a counting source and a file-appending sink.

They reach the worker actors through ``Workers(plugins=...)`` (pickled by value: the
workers cannot import the tests' modules).

- ``CountingSource``: task ``i`` emits ``"<prefix><n>"`` for n = 0 .. count-1 (values
  ``b"<n>"`` when no prefix), ``batch`` rows per poll, sleeping ``poll.ms`` first;
  source partition ``{"stream": i}``, offset ``{"n": next n}``; as a :class:`SourceBatch`
  when ``as.batch=true``, else as records.
- ``AppendSink``: appends each value (bytes, str or JSON of a struct) as a line to
  ``<dir>/<task>.txt``; ``retriable.failures=N`` raises RetriableConnectError on the
  first N puts of the task, and ``fail.on=VALUE`` fails the task at that value.
"""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa

from raystream.connectors.api import (
    SinkConnector,
    SinkTask,
    SourceBatch,
    SourceConnector,
    SourceRecord,
    SourceTask,
)
from raystream.errors import ConnectError, RetriableConnectError


class CountingTask(SourceTask):
    def start(self, config):
        self.config = config
        self.stream = {"stream": int(config["task.id"])}
        stored = self.context.offset_storage_reader.offset(self.stream)
        self.n = stored["n"] if stored else 0
        self.count = int(config.get("count", "100"))
        self.batch = int(config.get("batch", "10"))
        self.pause_s = int(config.get("poll.ms", "0")) / 1000
        self.topic = config["topic"]

    def poll(self):
        time.sleep(self.pause_s or 0.01)
        if self.n >= self.count:
            return None
        values = list(range(self.n, min(self.n + self.batch, self.count)))
        self.n = values[-1] + 1
        if self.config.get("as.batch") == "true":
            table = pa.table({"value": pa.array([str(v).encode() for v in values], pa.binary())})
            return SourceBatch(self.stream, {"n": self.n}, self.topic, table)
        return [
            SourceRecord(self.stream, {"n": v + 1}, self.topic, value=str(v).encode())
            for v in values
        ]

    def stop(self):
        pass


class CountingSource(SourceConnector):
    def start(self, config):
        self.config = config

    def task_class(self):
        return CountingTask

    def task_configs(self, max_tasks):
        return [{**self.config, "task.id": str(i)} for i in range(max_tasks)]

    def stop(self):
        pass


class AppendTask(SinkTask):
    def start(self, config):
        self.path = os.path.join(config["dir"], f"{config['task.id']}.txt")
        self.retriable = int(config.get("retriable.failures", "0"))
        self.fail_on = config.get("fail.on")
        self.puts = 0

    def put_batch(self, batch):
        self.puts += 1
        if self.puts <= self.retriable:
            raise RetriableConnectError(f"busy ({self.puts})")
        lines = []
        for value in batch.column("value").to_pylist():
            text = value.decode() if isinstance(value, bytes) else value
            text = text if isinstance(text, str) else json.dumps(text, sort_keys=True)
            if text == self.fail_on:
                raise ConnectError(f"refusing {text!r}")
            lines.append(text)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write("".join(f"{line}\n" for line in lines))

    def stop(self):
        pass


class AppendSink(SinkConnector):
    def start(self, config):
        self.config = config

    def task_class(self):
        return AppendTask

    def task_configs(self, max_tasks):
        return [{**self.config, "task.id": str(i)} for i in range(max_tasks)]

    def stop(self):
        pass


PLUGINS = {"CountingSource": CountingSource, "AppendSink": AppendSink}
