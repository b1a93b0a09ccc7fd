"""Consumer-group benchmark: member-actor throughput, rebalance time, cooperative pause.

In one run, on a 12-partition topic of 100-byte values:

- throughput of ``rs.ConsumerGroup`` with 1, 2 and 4 member actors (Arrow mode, a
  function that only counts), from the group's start until every record is processed
  and committed (the join and first rebalance included);
- rebalance time: one member of three is killed (``ray.kill``, a crash) while a producer
  writes steadily; the clock runs until every partition it owned has had a record
  consumed by another member. p50 and max over several kills. Target: p50 <= session
  timeout + 1 s;
- pause of unaffected partitions during a rebalance: a consumer owns all partitions and
  consumes a steady stream when a second one joins; the longest gap between records of
  the partitions it keeps, during the rebalance, against the same gap before it. Under
  the cooperative protocol the rebalance adds nothing (target: 0 ms); the eager
  protocol (``range``), shown next to it, stops everything while it rebalances.

Run:  python -m benchmarks.bench_groups [--records 2000000] [--kills 10]
"""

from __future__ import annotations

import argparse
import glob
import itertools
import os
import shutil
import statistics
import tempfile
import threading
import time
from typing import Any

import pyarrow as pa
import ray

import raystream as rs
from benchmarks import harness, page_cache

SESSION_TIMEOUT_MS = 2000
FAST = {"session_timeout_ms": SESSION_TIMEOUT_MS, "heartbeat_interval_ms": 200}


def fill(cluster: rs.Cluster, topic: str, records: int) -> None:
    producer = cluster.producer(acks=1, linger_ms=5)
    chunk = 100_000
    value = b"x" * 100
    for start in range(0, records, chunk):
        n = min(chunk, records - start)
        keys = pa.array([str(i).encode() for i in range(start, start + n)], pa.binary())
        producer.send_batch(topic, pa.table({"key": keys, "value": pa.array([value] * n)}))
    producer.close()


def count_rows(table: Any) -> None:
    """The member function of the throughput runs: the work is the consuming itself."""


def throughput(cluster: rs.Cluster, topic: str, records: int, members: int) -> float:
    started = time.perf_counter()
    group = rs.ConsumerGroup(
        cluster,
        topic,
        f"throughput-{members}",
        count_rows,
        members=members,
        consumer_config={**FAST, "max_poll_records": 50_000},
    )
    try:
        while group.processed() < records:
            time.sleep(0.05)
        return records / (time.perf_counter() - started)
    finally:
        group.stop()


def stamp_to(directory: str) -> Any:
    """A member function that appends 'partition wallclock' per batch to its own file."""

    def stamp(table: Any) -> None:
        now = time.time()
        partitions = set(table.column("partition").to_pylist())
        with open(os.path.join(directory, f"{os.getpid()}.txt"), "a") as f:
            f.write("".join(f"{p} {now}\n" for p in partitions))

    return stamp


def steady_producer(cluster: rs.Cluster, topic: str, stop: threading.Event) -> threading.Thread:
    def run() -> None:
        producer = cluster.producer(acks=1, linger_ms=5)
        i = 0
        while not stop.is_set():
            for _ in range(100):
                producer.send(topic, b"x" * 100, key=str(i).encode())
                i += 1
            time.sleep(0.01)  # ~10k records/s over every partition
        producer.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def rebalance_times(cluster: rs.Cluster, topic: str, kills: int) -> list[float]:
    directory = tempfile.mkdtemp(prefix="raystream-bench-groups-")
    stop = threading.Event()
    producer = steady_producer(cluster, topic, stop)
    group = rs.ConsumerGroup(
        cluster, topic, "rebalance", stamp_to(directory), members=3, consumer_config=FAST
    )
    times = []
    try:
        for _ in range(kills):
            while True:  # settled: every partition owned, by live members
                statuses = group.status()
                if sorted(len(s.get("assignment", [])) for s in statuses) == [4, 4, 4]:
                    break
                time.sleep(0.2)
            victim = group.members[0]
            owned = {tp.partition for tp in statuses[0]["assignment"]}
            victim_pid = statuses[0]["pid"]
            killed = time.time()
            ray.kill(victim, no_restart=False)
            time.sleep(0.5)
            while True:
                seen = consumed_after(directory, killed, exclude_pid=victim_pid)
                if owned <= set(seen):
                    times.append(max(seen[p] for p in owned) - killed)
                    break
                if time.time() - killed > 60:
                    raise RuntimeError(f"partitions {owned - set(seen)} not consumed again")
                time.sleep(0.2)
            time.sleep(1)
    finally:
        stop.set()
        producer.join()
        group.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return times


def consumed_after(directory: str, since: float, exclude_pid: int) -> dict[int, float]:
    """The first time after ``since`` that each partition was consumed, by any member
    but the killed process (its last batch may be stamped just after the kill)."""
    first: dict[int, float] = {}
    for path in glob.glob(os.path.join(directory, "*.txt")):
        if os.path.basename(path) == f"{exclude_pid}.txt":
            continue
        with open(path) as f:
            for line in f:
                partition, at = line.split()
                at_s = float(at)
                if at_s > since and at_s < first.get(int(partition), float("inf")):
                    first[int(partition)] = at_s
    return first


def pause(cluster: rs.Cluster, topic: str, strategy: str) -> tuple[float, float]:
    """(longest gap before, longest gap during) a join, on the partitions kept, in ms."""
    stop = threading.Event()
    producer = steady_producer(cluster, topic, stop)
    config = {**FAST, "partition_assignment_strategy": strategy, "auto_offset_reset": "latest"}
    group_id = f"pause-{strategy}"
    first = cluster.consumer(topic, group_id=group_id, **config)
    seen: dict[int, list[float]] = {}

    def poll(consumer: Any, until: Any) -> None:
        while not until():
            for tp in consumer.poll(timeout_ms=5):
                seen.setdefault(tp.partition, []).append(time.perf_counter())

    poll(first, lambda: len(first.assignment()) == 12)
    warm = time.perf_counter()
    poll(first, lambda: time.perf_counter() - warm > 3)
    joined = time.perf_counter()
    second = cluster.consumer(topic, group_id=group_id, **config)
    done = threading.Event()
    other = threading.Thread(target=poll, args=(second, done.is_set), daemon=True)
    other.start()
    poll(
        first,
        lambda: (
            len(first.assignment()) + len(second.assignment()) == 12
            and len(second.assignment()) == 6
        ),
    )
    settled = time.perf_counter()
    poll(first, lambda: time.perf_counter() - settled > 1)
    done.set()
    other.join()
    kept = {tp.partition for tp in first.assignment()}
    before = max(_gaps(seen, kept, warm, joined))
    during = max(_gaps(seen, kept, joined, settled + 1))
    first.close()
    second.close()
    stop.set()
    producer.join()
    return before * 1000, during * 1000


def _gaps(seen: dict[int, list[float]], partitions: set[int], start: float, end: float):
    for p in partitions:
        times = [start] + [t for t in seen.get(p, []) if start <= t <= end] + [end]
        yield max(b - a for a, b in itertools.pairwise(times))


def measure(
    records: int, kills: int
) -> tuple[dict[int, float], list[float], dict[str, tuple[float, float]]]:
    """On a cluster of their own: records/s by member count (1, 2, 4), the rebalance
    times (s) over ``kills`` kills, and per strategy the longest gap (ms) on the kept
    partitions before and during a join."""
    with harness.local_cluster("bench-groups") as cluster:
        admin = cluster.admin()
        admin.create_topic("bulk", partitions=12)
        fill(cluster, "bulk", records)
        rates = {m: throughput(cluster, "bulk", records, m) for m in (1, 2, 4)}
        admin.create_topic("live", partitions=12)
        times = rebalance_times(cluster, "live", kills)
        pauses = {s: pause(cluster, "live", s) for s in ("cooperative-sticky", "range")}
    return rates, times, pauses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--kills", type=int, default=10)
    page_cache.add_option(parser)
    args = parser.parse_args()
    cache_note = page_cache.prepare(args)
    rates, times, pauses = measure(args.records, args.kills)

    print(f"\n{harness.machine_line()}")
    print(cache_note)
    print(
        f"{args.records:,} records of 100 bytes, 12 partitions, session timeout "
        f"{SESSION_TIMEOUT_MS} ms\n"
    )
    print(f"| {'figure':<58} | {'value':>12} | {'vs 1 member':>11} |")
    print(f"|{'-' * 60}|{'-' * 14}|{'-' * 13}|")
    for members, rate in rates.items():
        print(
            f"| {f'ConsumerGroup, {members} member actor(s) (records/s)':<58} | "
            f"{rate:>12,.0f} | {rate / rates[1]:>10.2f}x |"
        )
    target = SESSION_TIMEOUT_MS / 1000 + 1
    print(
        f"| {f'rebalance after a member kill, p50 (s), {len(times)} kills':<58} | "
        f"{statistics.median(times):>12.2f} | {'':>11} |"
    )
    print(f"| {'rebalance after a member kill, max (s)':<58} | {max(times):>12.2f} | {'':>11} |")
    print(f"| {'target: p50 <= session timeout + 1 s':<58} | {target:>12.2f} | {'':>11} |")
    for strategy, (before, during) in pauses.items():
        print(
            f"| {f'{strategy}: longest gap on kept partitions, before (ms)':<58} | "
            f"{before:>12.0f} | {'':>11} |"
        )
        print(
            f"| {f'{strategy}: longest gap on kept partitions, during (ms)':<58} | "
            f"{during:>12.0f} | {'':>11} |"
        )


if __name__ == "__main__":
    main()
