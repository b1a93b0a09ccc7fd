"""The sink half of ``bench_connect``: Connect's file-to-Parquet sink next to a raw consume.

On one local raystream cluster, a topic of one partition is filled with ``records``
100-byte values, then

* raw consume: one consumer reads it with ``poll_arrow`` (assigned, no group), timed
  from the first batch to the last record;
* Parquet sink: a Connect worker runs the directory sink (``format=parquet``, bytes
  converters) over the same topic with the settings a Kafka Connect user gives a bulk
  Parquet sink: files of ``rotate.records=100000`` records (Parquet pays per file and
  per row group, so a user does not write small files; the sink's default) and
  ``consumer.override.max.poll.records=100000`` (Kafka's 500 is raised for bulk sinks;
  the raw consumer takes the same). Every file is fsynced and renamed, then its offsets
  file. It is timed from its first file to the offsets stored with its last, read from
  that offsets file, so the figure counts records durably in Parquet files and leaves
  out the group join before the first poll.

The sink's figure is set against the raw consume (the target: at least 50%).
``python -m benchmarks.bench_connect`` prints these rows beside MirrorMaker's
(``--skip-mirror`` for the sink alone).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.harness import local_cluster

VALUE_BYTES = 100
TABLE_ROWS = 10_000
ROTATE_RECORDS = 100_000


def fill(cluster: Any, topic: str, records: int) -> float:
    """``records`` 100-byte values into partition 0 of ``topic``, in 10,000-row tables;
    records/s until the last one is acknowledged (acks=all).

    The flush is inside the timing: the mirror's figure runs until the remote topic
    holds every record, and the raw produce it is set against must mean the same.
    Timing only the sends (as this did before) left records in flight out of it: the
    figure swung between 0.9 and 1.7 M/s from run to run, and the mirror's ratio with
    it. The Tansu section's raw produce is timed to the last acknowledgement too."""
    producer = cluster.producer(acks="all", linger_ms=5)
    table = pa.table({"value": pa.array([b"x" * VALUE_BYTES] * TABLE_ROWS, pa.binary())})
    start = time.perf_counter()
    for low in range(0, records, TABLE_ROWS):
        producer.send_batch(topic, table.slice(0, min(TABLE_ROWS, records - low)), partition=0)
    producer.flush()
    elapsed = time.perf_counter() - start
    producer.close()
    return records / elapsed


def raw_consume(cluster: Any, topic: str, records: int, max_poll_records: int = 100_000) -> float:
    """Records/s of ``poll_arrow`` over ``topic`` from the start, after the first batch."""
    from raystream.types import TopicPartition

    tp = TopicPartition(topic, 0)
    with cluster.consumer(enable_auto_commit=False, max_poll_records=max_poll_records) as consumer:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got, first, start = 0, 0, 0.0
        while got < records:
            table = consumer.poll_arrow(timeout_ms=500)
            if table.num_rows and not got:
                start, first = time.perf_counter(), table.num_rows
            got += table.num_rows
        return (records - first) / (time.perf_counter() - start)


def stored_offset(directory: Path, topic: str) -> int | None:
    """The next offset the sink stored with its files for partition 0, None before its
    first file."""
    path = directory / "_connect_offsets" / f"{topic}+0.json"
    try:
        return int(json.loads(path.read_text())["next_offset"])
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def parquet_sink(cluster: Any, topic: str, records: int, timeout_s: float = 600) -> float:
    """Records/s of the directory sink writing Parquet, from its first file to its last."""
    from raystream.connectors import Workers

    directory = Path(tempfile.mkdtemp(prefix="raystream-bench-sink-"))
    workers = Workers(cluster, group_id="bench-sink", num_workers=1)
    try:
        workers.create(
            "to-parquet",
            {
                "connector.class": "raystream.connectors.file.DirectorySinkConnector",
                "topics": topic,
                "directory": str(directory),
                "format": "parquet",
                "rotate.records": str(ROTATE_RECORDS),
                "key.converter": "bytes",
                "value.converter": "bytes",
                "consumer.override.max.poll.records": "100000",
            },
        )
        deadline = time.monotonic() + timeout_s
        first: tuple[int, float] | None = None
        while True:
            stored = stored_offset(directory, topic)
            now = time.perf_counter()
            if stored is not None and first is None:
                first = (stored, now)
            if stored is not None and stored >= records:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the sink stored {stored} of {records} records")
            time.sleep(0.01)
        assert first is not None
        if stored == first[0]:
            raise RuntimeError("the sink wrote everything in one file: raise --records")
        return (records - first[0]) / (now - first[1])
    finally:
        workers.shutdown()
        shutil.rmtree(directory, ignore_errors=True)


def bench_sink(records: int) -> list[tuple[str, float, str]]:
    """The sink rows: (what, records/s, note)."""
    with local_cluster("bench-connect-sink") as cluster:
        cluster.admin().create_topic("sink-bulk", partitions=1)
        fill(cluster, "sink-bulk", records)
        consume = raw_consume(cluster, "sink-bulk", records)
        sink = parquet_sink(cluster, "sink-bulk", records)
    return [
        ("raw consume", consume, ""),
        ("file-to-Parquet sink", sink, f"{sink / consume:.0%} of raw consume"),
    ]
