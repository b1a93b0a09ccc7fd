"""Connect and MirrorMaker throughput, next to the raw consume and produce of the same clusters.

MirrorMaker half (this file's ``mirror`` section): two raystream clusters (namespaces)
on one local Ray; the source topic is filled with ``--records`` 100-byte records, then

* raw consume: one consumer reads the source topic with ``poll_arrow`` (assigned, no
  group), timed from the first batch to the last record;
* raw produce: one producer writes the same number of records into a target topic
  with ``send_batch`` in tables of 10,000 rows (acks=all, as the mirror writes), timed
  to the last acknowledgement;
* mirror: a MirrorMaker (at-least-once, and exactly-once) is started and timed from
  its start until the remote topic holds every record;
* replication lag at a steady rate: a producer writes ``--rate`` records/s to the
  source in batches of 100 for ``--seconds``; a consumer of the remote topic takes
  the lag of each record as its arrival time minus its (kept) source timestamp:
  p50 and p99 in milliseconds.

MirrorMaker into Kafka (``--skip-kafka`` leaves it out): one raystream cluster is the
source and a Tansu broker (the Kafka-protocol broker of ``benchmarks.peers``, memory
storage, started here) the target. Its raw produce is confluent-kafka writing the same
records into a Tansu topic with the mirror writer's own producer settings (acks=all,
idempotent, ``linger.ms=5``), timed to the last acknowledgement; the mirror runs are
timed from the flow's start until the remote topic's high watermark reaches every
record, and set against the slower of raw consume (source) and raw produce (Tansu).

Sink half (``benchmarks.connect_sink``): a file-to-Parquet directory sink on Connect's
workers reading ``--sink-records`` records, against a raw ``poll_arrow`` consume of the
same topic (target: at least 50%).

The mirror's throughput is set against the slower of raw consume and raw produce (the
target: at least 50%). One command::

    python -m benchmarks.bench_connect [--records 200000] [--rate 20000] [--seconds 5]
        [--skip-sink] [--skip-mirror] [--skip-kafka] [--pairs 2]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.connect_sink import VALUE_BYTES, bench_sink, fill, raw_consume
from benchmarks.harness import local_cluster, machine_line

LAG_BATCH = 100
#: How often the Tansu runs ask the flow whether every record is acknowledged: a
#: flow of 200,000 records takes about a second, so half a second between asks (as
#: before) put up to half its time on the figure.
STATUS_EVERY_S = 0.05


def _table(rows: int, start_ms: int | None = None) -> pa.Table:
    value = b"x" * VALUE_BYTES
    columns: dict[str, Any] = {"value": pa.array([value] * rows, pa.binary())}
    if start_ms is not None:
        columns["timestamp"] = pa.array(np.full(rows, start_ms, dtype=np.int64))
    return pa.table(columns)


@contextmanager
def source_cluster() -> Iterator[Any]:
    """A second raystream cluster on the running Ray (the mirror's source)."""
    from raystream.client.cluster import connect

    data_dir = tempfile.mkdtemp(prefix="raystream-bench-src-")
    try:
        cluster = connect(namespace="bench-mirror-source", data_dir=data_dir)
        yield cluster
        cluster.shutdown()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def mirror_throughput(
    source: Any, target: Any, topic: str, records: int, alias: str, exactly_once: bool
) -> float:
    """Start a MirrorMaker for ``topic`` and time it until every record arrived."""
    from raystream.mirror import MirrorMaker
    from raystream.types import TopicPartition

    mm = MirrorMaker(
        target,
        source={"namespace": source.namespace},
        topics=topic,
        source_alias=alias,
        exactly_once=exactly_once,
        config={"emit.heartbeats.enabled": "false", "emit.checkpoints.enabled": "false"},
    )
    mm.start()
    try:
        remote = TopicPartition(f"{alias}.{topic}", 0)
        # Watch the target's end offset from here: asking the flow's status would take
        # the mirror's own time.
        with target.consumer(enable_auto_commit=False) as watcher:
            t0 = time.perf_counter()
            while watcher.end_offsets([remote])[remote] < records:
                time.sleep(0.02)
            elapsed = time.perf_counter() - t0
        return records / elapsed
    finally:
        mm.stop()


def mirror_lag(source: Any, target: Any, rate: int, seconds: float) -> tuple[float, float, int]:
    """Lag p50/p99 (ms) of records written at ``rate``/s, and how many were measured."""
    from raystream.mirror import MirrorMaker
    from raystream.types import TopicPartition

    topic = "lag"
    source.admin().create_topic(topic, partitions=1)
    mm = MirrorMaker(
        target,
        source={"namespace": source.namespace},
        topics=topic,
        source_alias="lagged",
        config={"emit.heartbeats.enabled": "false", "emit.checkpoints.enabled": "false"},
    )
    mm.start()
    try:
        remote = TopicPartition(f"lagged.{topic}", 0)
        total = int(rate * seconds)
        lags: list[np.ndarray] = []

        def consume() -> None:
            # On a thread of its own: a lag taken while the writer is busy would be
            # the benchmark's, not the mirror's.
            with target.consumer(enable_auto_commit=False) as consumer:
                consumer.assign([remote])
                got, deadline = 0, time.monotonic() + seconds + 60
                while got < total and time.monotonic() < deadline:
                    table = consumer.poll_arrow(timeout_ms=50)
                    if table.num_rows:
                        now_ms = time.time_ns() // 1_000_000
                        lags.append(now_ms - table.column("timestamp").to_numpy())
                        got += table.num_rows

        reader = threading.Thread(target=consume)
        reader.start()
        producer = source.producer(acks="all", linger_ms=0)
        sent, t0 = 0, time.perf_counter()
        while sent < total:
            due = min(total, int((time.perf_counter() - t0) * rate))
            if sent + LAG_BATCH > due:
                time.sleep(0.001)
                continue
            now_ms = time.time_ns() // 1_000_000
            producer.send_batch(topic, _table(LAG_BATCH, now_ms), partition=0)
            sent += LAG_BATCH
        producer.close()
        reader.join()
        measured = np.concatenate(lags) if lags else np.array([np.nan])
        return float(np.percentile(measured, 50)), float(np.percentile(measured, 99)), len(measured)
    finally:
        mm.stop()


def bench_mirror(
    records: int, rate: int, seconds: float, pairs: int = 2
) -> list[tuple[str, float, str]]:
    """The MirrorMaker rows: (what, records/s or ms, note)."""
    rows: list[tuple[str, float, str]] = []
    with local_cluster("bench-mirror-target") as target, source_cluster() as source:
        # Each mode ``pairs`` times, alternating, so that drift on the machine shows as
        # spread; the first pair pays for the flows' start (cold), the others are warm.
        runs = [False, True] * pairs
        for i in range(len(runs)):
            source.admin().create_topic(f"bulk-{i}", partitions=1)
            fill(source, f"bulk-{i}", records)
        consume = raw_consume(source, "bulk-0", records, max_poll_records=50_000)
        target.admin().create_topic("raw", partitions=1)
        produce = fill(target, "raw", records)
        rows += [("raw consume (source)", consume, ""), ("raw produce (target)", produce, "")]
        floor = min(consume, produce)
        for i, exactly_once in enumerate(runs):
            rps = mirror_throughput(source, target, f"bulk-{i}", records, "src", exactly_once)
            mode = "exactly-once" if exactly_once else "at-least-once"
            rows.append(
                (f"mirror {mode} #{i // 2 + 1}", rps, f"{rps / floor:.0%} of the slower raw")
            )
        p50, p99, got = mirror_lag(source, target, rate, seconds)
        rows.append((f"lag p50 at {rate}/s", p50, f"ms, {got} records"))
        rows.append((f"lag p99 at {rate}/s", p99, "ms"))
    return rows


def kafka_produce(bootstrap: str, topic: str, records: int) -> float:
    """Records/s of confluent-kafka writing ``records`` 100-byte values into partition 0
    of a new ``topic``, one ``produce`` call per record (as the mirror's writer makes
    them) with the writer's settings, timed after a first record (the connection's
    set-up) until the last is acknowledged."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from raystream.mirror.kafka_cluster import PRODUCER_DEFAULTS

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_DEFAULTS})
    value = b"x" * VALUE_BYTES
    # One record first, untimed: connecting and the idempotent producer's id are the
    # set-up a running mirror's writer has already done when its clock starts.
    producer.produce(topic, value, partition=0)
    producer.flush(30)
    records -= 1
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:  # librdkafka's queue is full: let it drain
                producer.poll(0.005)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise TimeoutError("raw produce into Tansu: records unacknowledged after 120 s")
    return records / (time.perf_counter() - start)


def kafka_end_offset(watcher: Any, topic: str) -> int:
    """The high watermark of partition 0 of ``topic``, asked through the confluent-kafka
    consumer ``watcher`` (0 while the topic does not exist)."""
    from confluent_kafka import KafkaException
    from confluent_kafka import TopicPartition as KafkaTP

    try:
        return int(watcher.get_watermark_offsets(KafkaTP(topic, 0), timeout=5)[1])
    except KafkaException:  # not created yet
        return 0


def mirror_into_kafka(
    source: Any, bootstrap: str, topic: str, records: int, exactly_once: bool
) -> float:
    """Start a MirrorMaker raystream -> Tansu for ``topic``; records/s from its start
    (as :func:`mirror_throughput`) until the remote topic's high watermark reaches
    ``records`` (or the flow counts them all acknowledged)."""
    from confluent_kafka import Consumer

    from raystream.mirror import MirrorMaker

    mm = MirrorMaker(
        source,
        source=source,
        target={"bootstrap.servers": bootstrap},
        topics=topic,
        source_alias="src",
        target_alias="tansu",
        exactly_once=exactly_once,
        config={"emit.heartbeats.enabled": "false", "emit.checkpoints.enabled": "false"},
    )
    mm.start()
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watch"})
    try:
        t0 = time.perf_counter()
        deadline, next_status = time.monotonic() + 600, time.monotonic() + STATUS_EVERY_S
        while kafka_end_offset(watcher, f"src.{topic}") < records:
            now = time.monotonic()
            if now > next_status:
                # Tansu's high watermark may stay a few hundred records behind what it
                # acknowledged until the next write: then the flow's own count of
                # acknowledged records says when it is done.
                status, next_status = mm.status(), now + STATUS_EVERY_S
                if status["state"] == "FAILED":
                    raise RuntimeError(f"the mirror into Tansu failed: {status['error']}")
                if status["records"] >= records:
                    break
            if now > deadline:
                raise TimeoutError(f"the mirror into Tansu did not finish {topic} in 600 s")
            time.sleep(0.02)
        return records / (time.perf_counter() - t0)
    finally:
        watcher.close()
        mm.stop()


def bench_mirror_kafka(records: int, pairs: int = 2) -> list[tuple[str, float, str]]:
    """The MirrorMaker raystream -> Tansu rows: (what, records/s, note)."""
    from benchmarks.peers import _tansu_binary, missing_peer, tansu_broker

    why = missing_peer("tansu")
    if why:  # no broker here: say so instead of failing the other rows
        return [("mirror into Tansu", float("nan"), f"skipped: {why}")]
    rows: list[tuple[str, float, str]] = []
    with (
        local_cluster("bench-mirror-kafka") as source,
        tansu_broker(_tansu_binary()) as bootstrap,
    ):
        runs = [False, True] * pairs
        for i in range(len(runs)):
            source.admin().create_topic(f"bulk-{i}", partitions=1)
            fill(source, f"bulk-{i}", records)
        consume = raw_consume(source, "bulk-0", records, max_poll_records=50_000)
        produce = kafka_produce(bootstrap, "raw", records)
        rows += [
            ("raw consume (raystream)", consume, ""),
            ("raw produce (Tansu)", produce, "confluent-kafka, the mirror writer's settings"),
        ]
        floor = min(consume, produce)
        for i, exactly_once in enumerate(runs):
            rps = mirror_into_kafka(source, bootstrap, f"bulk-{i}", records, exactly_once)
            mode = "exactly-once" if exactly_once else "at-least-once"
            rows.append(
                (f"mirror {mode} #{i // 2 + 1}", rps, f"{rps / floor:.0%} of the slower raw")
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=20_000, help="records/s for the lag run")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the lag run")
    parser.add_argument(
        "--sink-records", type=int, default=1_000_000, help="records for the sink half"
    )
    parser.add_argument("--skip-sink", action="store_true")
    parser.add_argument("--skip-mirror", action="store_true")
    parser.add_argument("--skip-kafka", action="store_true", help="leave out raystream -> Tansu")
    parser.add_argument(
        "--pairs",
        type=int,
        default=2,
        help="mirror runs per mode (at-least-once and exactly-once alternate); the first "
        "pair is cold",
    )
    args = parser.parse_args()
    print(machine_line("confluent-kafka"))
    if not args.skip_sink:
        print(f"Connect sink, {args.sink_records} records of {VALUE_BYTES} B, one partition")
        _print_rows(bench_sink(args.sink_records))
    if not args.skip_mirror:
        print(f"MirrorMaker, raystream -> raystream, {args.records} records of {VALUE_BYTES} B")
        _print_rows(bench_mirror(args.records, args.rate, args.seconds, args.pairs))
    if not args.skip_kafka:
        print(f"MirrorMaker, raystream -> Tansu, {args.records} records of {VALUE_BYTES} B")
        _print_rows(bench_mirror_kafka(args.records, args.pairs))


def _print_rows(rows: list[tuple[str, float, str]]) -> None:
    print(f"{'what':<28} {'figure':>14}  note")
    for what, figure, note in rows:
        unit = "" if note.startswith("ms") else " rec/s"
        print(f"{what:<28} {figure:>14,.1f}{unit}  {note}")


if __name__ == "__main__":
    main()
