"""Transactions benchmark: what exactly-once costs, measured against the same work without it.

Measures, with 100-byte values and replication factor 1, in one run:

- producer throughput (``send()`` per record) in transactions of 100, 1,000 and
  10,000 records (begin, sends, commit), next to the same producer settings without
  transactions (idempotent, acks=all, one flush at the end);
- consume-transform-produce throughput: a consumer-group consumer polls up to N
  records, the transform passes the values on with ``send_batch()``, and either
  flushes the output then commits its offsets (at-least-once) or puts output and
  offsets in one transaction (exactly-once, read_committed input), for N = 100, 1,000
  and 10,000, each the median of ``--rounds`` rounds that alternate the two modes;

and the ratio transactional / plain for each. Target: exactly-once at >= 70% of
at-least-once with transactions of 10,000 records.

Run:  python -m benchmarks.bench_transactions [--records 200000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from dataclasses import dataclass

import pyarrow as pa

import raystream as rs
from benchmarks import harness, page_cache
from raystream.types import TopicPartition

VALUE = b"v" * 100
SIZES = (100, 1_000, 10_000)
_names = itertools.count()


def produce(cluster: rs.Cluster, topic: str, records: int, txn_size: int | None) -> float:
    """Records/s of send() per record, in transactions of ``txn_size`` (None: none)."""
    config = {"acks": "all", "linger_ms": 5, "batch_size": 1 << 20}
    if txn_size is not None:
        config["transactional_id"] = f"bench-{next(_names)}"
    producer = cluster.producer(**config)
    if txn_size is not None:
        producer.init_transactions()
    send = producer.send
    start = time.perf_counter()
    if txn_size is None:
        for _ in range(records):
            send(topic, VALUE)
        producer.flush()
    else:
        for _ in range(records // txn_size):
            producer.begin_transaction()
            for _ in range(txn_size):
                send(topic, VALUE)
            producer.commit_transaction()
    seconds = time.perf_counter() - start
    producer.close()
    return records // (txn_size or 1) * (txn_size or 1) / seconds


def fill(cluster: rs.Cluster, topic: str, records: int) -> None:
    """Write the input of the consume-transform-produce runs."""
    rows = 100_000
    with cluster.producer(acks=1) as producer:
        for start in range(0, records, rows):
            count = min(rows, records - start)
            producer.send_batch(topic, pa.table({"value": pa.array([VALUE] * count)}))


def transform(
    cluster: rs.Cluster, source: str, sink: str, records: int, batch: int, exactly_once: bool
) -> float:
    """Records/s of consume-transform-produce over ``records`` input records, ``batch``
    records (one transaction, or one offset commit) at a time, into ``sink``."""
    group = f"group-{next(_names)}"
    consumer = cluster.consumer(
        source,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=batch,
        max_partition_fetch_bytes=16 << 20,
        isolation_level="read_committed" if exactly_once else "read_uncommitted",
    )
    config = {"acks": "all", "linger_ms": 0}
    if exactly_once:
        config["transactional_id"] = f"bench-ctp-{next(_names)}"
    producer = cluster.producer(**config)
    if exactly_once:
        producer.init_transactions()
    tp = TopicPartition(source, 0)
    seen = 0
    start = time.perf_counter()
    while seen < records:
        table = consumer.poll_arrow(timeout_ms=1000)
        if not table.num_rows:
            continue
        output = pa.table({"key": table.column("key"), "value": table.column("value")})
        if exactly_once:
            producer.begin_transaction()
            producer.send_batch(sink, output)
            producer.send_offsets_to_transaction(
                {tp: consumer.position(tp)}, consumer.group_metadata()
            )
            producer.commit_transaction()
        else:  # at-least-once: the output is acknowledged before the input is committed
            producer.send_batch(sink, output)
            producer.flush()
            consumer.commit()
        seen += table.num_rows
    seconds = time.perf_counter() - start
    producer.close()
    consumer.close(autocommit=False)
    return seen / seconds


@dataclass
class TransactionFigures:
    """One run's figures (records/s)."""

    produced: dict[str | int, float]
    """The producer: "plain", then each transaction size."""
    pipelines: dict[int, tuple[float, float]]
    """Consume-transform-produce per batch size: the medians (at-least-once, exactly-once)."""
    rounds: dict[int, list[tuple[float, float]]]
    """Every round's (at-least-once, exactly-once) per batch size."""


def measure(records: int, rounds_per_size: int) -> TransactionFigures:
    """The producer and consume-transform-produce figures on a cluster of their own."""
    n = records
    with harness.local_cluster("bench-txn") as cluster:
        admin = cluster.admin()
        admin.create_topic("input")
        fill(cluster, "input", n)
        produced: dict[str | int, float] = {}
        for name in ("plain", *SIZES):
            topic = f"produce-{name}"
            admin.create_topic(topic)
            count = min(n, 200 * name) if isinstance(name, int) else n
            produced[name] = produce(cluster, topic, count, name if name != "plain" else None)
        for mode in ("alo", "eos"):  # one output topic per mode for every run
            admin.create_topic(f"sink-{mode}")
        pipelines = {}
        rounds = {}
        for size in SIZES:
            count = min(n, 200 * size)
            # Each run reads the input from the start in a new group; the rounds
            # alternate the two modes, and each figure is the median of its rounds.
            runs = [
                (
                    transform(cluster, "input", "sink-alo", count, size, exactly_once=False),
                    transform(cluster, "input", "sink-eos", count, size, exactly_once=True),
                )
                for _ in range(rounds_per_size)
            ]
            rounds[size] = runs
            pipelines[size] = (
                statistics.median(alo for alo, _ in runs),
                statistics.median(eos for _, eos in runs),
            )
    return TransactionFigures(produced, pipelines, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument(
        "--rounds", type=int, default=5, help="consume-transform-produce: median of these"
    )
    page_cache.add_option(parser)
    args = parser.parse_args()
    cache_note = page_cache.prepare(args)
    n = args.records
    figures = measure(n, args.rounds)
    produced, pipelines, rounds = figures.produced, figures.pipelines, figures.rounds

    print(f"\n{harness.machine_line()}")
    print(cache_note)
    print(f"up to {n:,} records of 100 bytes, replication factor 1, acks=all\n")
    plain = produced["plain"]
    print(f"{'producer, send() per record':<44} {'records/s':>12} {'vs plain':>9}")
    print(f"{'  no transactions (idempotent)':<44} {plain:>12,.0f}")
    for size in SIZES:
        line = f"  transactions of {size:,} records"
        print(f"{line:<44} {produced[size]:>12,.0f} {produced[size] / plain:>8.0%}")
    print(
        f"\n{'consume-transform-produce, batch = txn':<44} {'at-least-once':>14} "
        f"{'exactly-once':>13} {'ratio':>7}"
    )
    for size, (alo, eos) in pipelines.items():
        line = f"  {size:,} records per batch"
        print(f"{line:<44} {alo:>14,.0f} {eos:>13,.0f} {eos / alo:>6.0%}")
    ratios = ", ".join(f"{eos / alo:.0%}" for alo, eos in rounds[10_000])
    print(f"\nround by round at 10,000 records per batch: {ratios}")
    target = pipelines[10_000][1] / pipelines[10_000][0]
    print(f"\nexactly-once / at-least-once at 10,000: {target:.0%} (target >= 70%)")


if __name__ == "__main__":
    main()
