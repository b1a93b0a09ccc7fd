"""Produce/consume benchmark: raystream next to Redis Streams and a Kafka-protocol broker.

Measures, with 100-byte values and replication factor 1, in one run:

- per-record ``send()`` throughput (acks=1, until flush returns), 1 and 4 partitions;
- ``send_batch()`` throughput (Arrow tables of 100,000 rows; the median of three rounds
  after one untimed table);
- producers are idempotent (the default); the 1-partition ``send()``, ``send_batch()``
  and end-to-end figures are repeated with idempotence off;
- consumer throughput per record: iterating the consumer, and ``poll()``'s lists of
  100,000 records; and columnar (``poll_arrow``);
- end-to-end latency p50/p99 at a steady moderate rate (produce -> consumer sees it);
- resident memory of an idle replica actor and of the controller;

and the same produce/consume/latency figures for Redis Streams (redis-server on
loopback, appendonly on, pipelined XADD / XREADGROUP) and for the Tansu broker (in
memory) driven by confluent-kafka, with the ratio raystream/peer for each figure.

Run:  python -m benchmarks.bench_clients [--records 1000000] [--skip-peers]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from dataclasses import dataclass

import numpy as np
import psutil
import pyarrow as pa
import ray

import raystream as rs
from benchmarks import harness, page_cache, peers

VALUE = b"v" * 100


def produce_per_record(
    cluster: rs.Cluster, topic: str, records: int, acks: int | str = 1, idempotence: bool = True
) -> float:
    """Records/s of send() one record at a time, until every record is acknowledged."""
    producer = cluster.producer(
        acks=acks, linger_ms=5, batch_size=1 << 20, enable_idempotence=idempotence
    )
    start = time.perf_counter()
    send = producer.send
    for _ in range(records):
        send(topic, VALUE)
    producer.flush()
    seconds = time.perf_counter() - start
    producer.close()
    return records / seconds


def produce_batches(
    cluster: rs.Cluster, topic: str, records: int, idempotence: bool = True, rounds: int = 3
) -> float:
    """Records/s of send_batch() with 100,000-row Arrow tables: the median of ``rounds``
    rounds of ``records``, after one table that opens the producer's connection."""
    rows = 100_000
    table = pa.table({"value": pa.array([VALUE] * rows, pa.binary())})
    producer = cluster.producer(acks=1, enable_idempotence=idempotence)
    producer.send_batch(topic, table)
    producer.flush()
    tables = max(records // rows, 1)
    rates = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(tables):
            producer.send_batch(topic, table)
        producer.flush()
        rates.append(tables * rows / (time.perf_counter() - start))
    producer.close()
    return statistics.median(rates)


def log_reader(cluster: rs.Cluster, topic: str, max_poll_records: int) -> rs.Consumer:
    """A consumer reading ``topic`` from the start, up to 16 MB per partition fetch."""
    return cluster.consumer(
        topic,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=16 << 20,
        max_poll_records=max_poll_records,
    )


def consume_records(cluster: rs.Cluster, topic: str, records: int) -> float:
    """Records/s iterating the consumer (``for record in consumer``), each record's value
    taken, over data already in the log; the clock includes the first fetch."""
    consumer = log_reader(cluster, topic, 100_000)
    start = time.perf_counter()
    seen = 0
    for record in consumer:
        record.value  # noqa: B018 - taken, as an application would
        seen += 1
        if seen == records:
            break
    seconds = time.perf_counter() - start
    consumer.close()
    return seen / seconds


def consume_lists(cluster: rs.Cluster, topic: str, records: int) -> float:
    """Records/s of ``poll()``'s per-partition lists of ConsumerRecords (100,000 at a
    time) over data already in the log; the clock includes the first fetch."""
    consumer = log_reader(cluster, topic, 100_000)
    start = time.perf_counter()
    seen = 0
    while seen < records:
        for batch in consumer.poll(timeout_ms=1000).values():
            seen += len(batch)
    seconds = time.perf_counter() - start
    consumer.close()
    return seen / seconds


def consume_arrow(cluster: rs.Cluster, topic: str, records: int) -> float:
    """Records/s of poll_arrow over data already in the log."""
    consumer = log_reader(cluster, topic, 1_000_000)
    start = time.perf_counter()
    seen = 0
    while seen < records:
        seen += consumer.poll_arrow(timeout_ms=1000).num_rows
    seconds = time.perf_counter() - start
    consumer.close()
    return seen / seconds


def end_to_end(
    cluster: rs.Cluster,
    topic: str,
    rate: int,
    seconds: float,
    acks: int | str = 1,
    idempotence: bool = True,
) -> tuple[float, float]:
    """p50 and p99 ms from send() to the consumer seeing the record, at ``rate``/s."""
    consumer = cluster.consumer(topic, auto_offset_reset="latest", fetch_max_wait_ms=500)
    consumer.poll(timeout_ms=100)
    latencies: list[float] = []
    total = int(rate * seconds)
    done = threading.Event()

    def produce() -> None:
        producer = cluster.producer(acks=acks, linger_ms=0, enable_idempotence=idempotence)
        interval = 1.0 / rate
        next_at = time.perf_counter()
        for _ in range(total):
            next_at += interval
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.send(topic, str(time.perf_counter()).encode())
        producer.flush()
        producer.close()
        done.set()

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    deadline = time.perf_counter() + seconds + 30
    while len(latencies) < total and time.perf_counter() < deadline:
        for batch in consumer.poll(timeout_ms=100).values():
            now = time.perf_counter()
            latencies.extend((now - float(r.value)) * 1000 for r in batch)
    thread.join()
    consumer.close()
    warm = latencies[len(latencies) // 10 :]
    return statistics.median(warm), float(np.percentile(warm, 99))


def memory(cluster: rs.Cluster, topic: str) -> tuple[float, float, float]:
    """(replica RSS MB, replica USS MB, controller RSS MB) of idle actors."""
    leader = cluster.topic_metadata(topic).partitions[0].leader_handle
    replica = psutil.Process(ray.get(leader.state.remote())["pid"])
    controller = psutil.Process(ray.get(cluster.controller.ping.remote()))
    return (
        replica.memory_info().rss / 1e6,
        replica.memory_full_info().uss / 1e6,
        controller.memory_info().rss / 1e6,
    )


@dataclass
class ClientFigures:
    """raystream's figures of one run (see the module's docstring)."""

    rates: dict[str, float]
    """Records/s by figure name, in the order printed."""
    e2e_p50_ms: float
    e2e_p99_ms: float
    e2e_off_p50_ms: float
    """End to end without idempotence."""
    e2e_off_p99_ms: float
    replica_rss_mb: float
    replica_uss_mb: float
    controller_rss_mb: float


def measure(records: int, e2e_rate: int, e2e_seconds: float) -> ClientFigures:
    """raystream's produce, consume, end-to-end and memory figures, on a cluster of their
    own (the peers are measured apart, :func:`measure_peers`)."""
    n = records
    with harness.local_cluster("bench") as cluster:
        admin = cluster.admin()
        for name, partitions in (
            ("p1", 1),
            ("p4", 4),
            ("batch", 1),
            ("e2e", 1),
            ("p1-off", 1),
            ("batch-off", 1),
            ("e2e-off", 1),
        ):
            admin.create_topic(name, partitions=partitions)
        rates = {
            "send() per record, 1 partition": produce_per_record(cluster, "p1", n),
            "send() per record, 4 partitions": produce_per_record(cluster, "p4", n),
            "send_batch()": produce_batches(cluster, "batch", n),
            "consume per record": consume_records(cluster, "p1", n),
            "consume per record, poll() lists": consume_lists(cluster, "p1", n),
            "consume poll_arrow": consume_arrow(cluster, "batch", n),
            "send(), 1 partition, no idempotence": produce_per_record(
                cluster, "p1-off", n, idempotence=False
            ),
            "send_batch(), no idempotence": produce_batches(
                cluster, "batch-off", n, idempotence=False
            ),
        }
        p50, p99 = end_to_end(cluster, "e2e", e2e_rate, e2e_seconds)
        off_p50, off_p99 = end_to_end(cluster, "e2e-off", e2e_rate, e2e_seconds, idempotence=False)
        admin.create_topic("idle")
        time.sleep(2)
        replica_rss, replica_uss, controller_rss = memory(cluster, "idle")
    return ClientFigures(
        rates, p50, p99, off_p50, off_p99, replica_rss, replica_uss, controller_rss
    )


def measure_peers(records: int, e2e_rate: int, e2e_seconds: float) -> list[peers.PeerResult]:
    """Redis Streams and Tansu + confluent-kafka on the same workload; a peer that is
    not installed comes back with its figures None and a note saying what to install."""
    return [
        peers.bench_redis(records, 100, e2e_rate, e2e_seconds),
        peers.bench_kafka(records, 100, e2e_rate, e2e_seconds),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--e2e-rate", type=int, default=2000)
    parser.add_argument("--e2e-seconds", type=float, default=5.0)
    page_cache.add_option(parser)
    args = parser.parse_args()
    cache_note = page_cache.prepare(args)
    n = args.records
    figures = measure(n, args.e2e_rate, args.e2e_seconds)
    results = [] if args.skip_peers else measure_peers(n, args.e2e_rate, args.e2e_seconds)

    print(f"\n{harness.machine_line()}")
    print(cache_note)
    print(f"{n:,} records of 100 bytes, replication factor 1, acks=1, idempotent unless noted\n")
    header = f"{'figure':<46} {'raystream':>12}"
    for peer in results:
        header += f" {peer.name:>24} {'ratio':>7}"
    print(header)
    for name, value in figures.rates.items():
        line = f"{name + ' (records/s)':<46} {value:>12,.0f}"
        for peer in results:
            other = getattr(peer, PEER_FIGURES[name]) if name in PEER_FIGURES else None
            line += _peer_cell(value, other, higher_is_better=True)
        print(line)
    latencies = (
        ("end-to-end p50 (ms)", figures.e2e_p50_ms, "e2e_p50_ms"),
        ("end-to-end p99 (ms)", figures.e2e_p99_ms, "e2e_p99_ms"),
        ("end-to-end p50 (ms), no idempotence", figures.e2e_off_p50_ms, None),
        ("end-to-end p99 (ms), no idempotence", figures.e2e_off_p99_ms, None),
    )
    for name, value, attr in latencies:
        line = f"{name:<46} {value:>12.2f}"
        for peer in results:
            other = getattr(peer, attr) if attr else None
            line += _peer_cell(value, other, higher_is_better=False)
        print(line)
    for peer in results:
        if peer.note:
            print(f"note ({peer.name}): {peer.note}")
    print(
        f"\nidle replica actor: {figures.replica_rss_mb:.0f} MB resident "
        f"({figures.replica_uss_mb:.0f} MB unique); "
        f"controller: {figures.controller_rss_mb:.0f} MB resident"
    )
    per_node = 24 * 2**30 / (figures.replica_uss_mb * 1e6)
    print(f"a 24 GiB node holds about {per_node:,.0f} idle replicas (by unique memory)")


#: The peer figure each of raystream's rates is set against.
PEER_FIGURES = {
    "send() per record, 1 partition": "produce_rps",
    "send_batch()": "produce_rps",
    "consume per record": "consume_rps",
    "consume per record, poll() lists": "consume_rps",
    "consume poll_arrow": "consume_rps",
}


def _peer_cell(ours: float, other: float | None, higher_is_better: bool) -> str:
    if other is None:
        return f" {'n/a':>24} {'':>7}"
    ratio = ours / other if higher_is_better else other / ours
    if higher_is_better:
        return f" {other:>24,.0f} {ratio:>6.2f}x"
    return f" {other:>24.2f} {ratio:>6.2f}x"


if __name__ == "__main__":
    main()
