"""Replication benchmark: what replicas cost, and how fast a partition fails over.

In one run, 100-byte values, one partition:

- per-record ``send()`` throughput and end-to-end latency (p50/p99 at a steady rate) for
  replication factor 1 (acks=1), replication factor 3 with acks=1, and replication
  factor 3 with acks=all (min.insync.replicas=2), next to Redis Streams;
- failover time: the leader replica is killed, and the clock runs until the first
  write acknowledged by the new leader; p50 and max over several kills.

The three replicas of a partition share this machine's single Ray node here (on a
cluster they sit on different nodes), so the figures include their copying work on the
same two cores.

Run:  python -m benchmarks.bench_replication [--records 500000] [--kills 10] [--skip-peers]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import ray

import raystream as rs
from benchmarks import harness, page_cache, peers
from benchmarks.bench_clients import end_to_end, produce_per_record


def failover_times(cluster: rs.Cluster, topic: str, kills: int) -> list[float]:
    """Seconds from killing the leader to the first write acknowledged by a new leader."""
    admin = cluster.admin()
    producer = cluster.producer(acks="all", linger_ms=0, retry_backoff_ms=20)
    producer.send(topic, b"warm-up").get(timeout=60)
    times = []
    for _ in range(kills):
        deadline = time.time() + 60
        while len(admin.describe_topic(topic).partitions[0].isr) < 3:
            if time.time() > deadline:
                raise RuntimeError("the ISR did not recover between kills")
            time.sleep(0.1)
        old = admin.describe_topic(topic).partitions[0].leader
        handle = ray.get_actor(f"replica:{topic}:0:{old}", namespace=cluster.namespace)
        killed = time.perf_counter()
        ray.kill(handle, no_restart=False)
        while True:
            producer.send(topic, b"probe").get(timeout=60)
            if admin.describe_topic(topic).partitions[0].leader != old:
                break
        times.append(time.perf_counter() - killed)
    producer.close()
    return times


@dataclass
class ReplicationFigures:
    """One run's figures: per setup (name, records/s, e2e p50 ms, e2e p99 ms), rf=1
    first; and the failover times, seconds."""

    setups: list[tuple[str, float, float, float]]
    failover_s: list[float]


def measure(records: int, kills: int, e2e_rate: int, e2e_seconds: float) -> ReplicationFigures:
    """Throughput and end to end for rf=1, rf=3 acks=1 and rf=3 acks=all, then
    ``kills`` failovers, on a cluster of their own."""
    rows = []
    with harness.local_cluster("bench-replication") as cluster:
        admin = cluster.admin()
        setups = [
            ("rf=1, acks=1", 1, 1),
            ("rf=3, acks=1", 3, 1),
            ("rf=3, acks=all", 3, "all"),
        ]
        for name, rf, acks in setups:
            topic = f"t-rf{rf}-{acks}"
            admin.create_topic(
                topic, replication_factor=rf, config={"min.insync.replicas": min(rf, 2)}
            )
            admin.create_topic(
                topic + "-e2e", replication_factor=rf, config={"min.insync.replicas": min(rf, 2)}
            )
            rps = produce_per_record(cluster, topic, records, acks=acks)
            p50, p99 = end_to_end(cluster, topic + "-e2e", e2e_rate, e2e_seconds, acks=acks)
            rows.append((name, rps, p50, p99))
        admin.create_topic("failover", replication_factor=3, config={"min.insync.replicas": 2})
        times = failover_times(cluster, "failover", kills)
    return ReplicationFigures(rows, times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--e2e-rate", type=int, default=2000)
    parser.add_argument("--e2e-seconds", type=float, default=5.0)
    parser.add_argument("--skip-peers", action="store_true")
    page_cache.add_option(parser)
    args = parser.parse_args()
    cache_note = page_cache.prepare(args)
    figures = measure(args.records, args.kills, args.e2e_rate, args.e2e_seconds)
    rows, kills = figures.setups, figures.failover_s
    redis = (
        None
        if args.skip_peers
        else peers.bench_redis(args.records, 100, args.e2e_rate, args.e2e_seconds)
    )

    print(f"\n{harness.machine_line()}")
    print(cache_note)
    print(f"{args.records:,} records of 100 bytes, one partition, send() per record\n")
    print(f"{'setup':<26} {'records/s':>12} {'vs rf=1':>8} {'e2e p50 ms':>11} {'e2e p99 ms':>11}")
    base = rows[0][1]
    for name, rps, p50, p99 in rows:
        print(f"{name:<26} {rps:>12,.0f} {rps / base:>8.0%} {p50:>11.2f} {p99:>11.2f}")
    if redis is not None and redis.produce_rps:
        ratio = redis.produce_rps / base
        print(
            f"{'redis-streams (XADD)':<26} {redis.produce_rps:>12,.0f} {ratio:>8.0%} "
            f"{redis.e2e_p50_ms:>11.2f} {redis.e2e_p99_ms:>11.2f}"
        )
    elif redis is not None:
        print(f"redis-streams: {redis.note}")
    print(
        f"\nfailover (leader killed -> first write acknowledged by the new leader), "
        f"{len(kills)} kills: p50 {statistics.median(kills):.2f} s, max {max(kills):.2f} s"
    )


if __name__ == "__main__":
    main()
