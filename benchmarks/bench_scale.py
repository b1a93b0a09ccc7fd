"""Scale: what a partition replica costs next to a bare Ray actor, from 10 to 300 replicas.

Every partition replica is a Ray actor, so every replica is a process. On one node, for
each step of N replicas alive (default 10, 50, 100, 200, 300), in one run:

- unique memory (USS, from ``/proc/<pid>/smaps_rollup``) per replica process at rest
  after its creation, next to a bare Ray actor (an empty async class, ``num_cpus=0``)
  with N of them alive;
- idle CPU of the whole Ray cluster (every process of the run's Ray, the driver aside)
  over ``--seconds`` with no traffic, next to the same Ray with N bare actors instead;
- creation time: each step adds its replicas as one rf=1 topic of the partitions it
  adds (also given per 100 partitions);
- throughput over all N partitions: a default producer's ``send()`` of 100-byte records
  into every partition in turn for ``--seconds``, then a consumer assigned to all of
  them reading those records back; next to the same on a 4-partition topic, measured
  first with only its 4 replicas alive.

The bare actors run in a Ray of their own, before raystream's (same settings, see
:mod:`benchmarks.harness`), so the two never share the machine's memory or CPU. A step
that would not fit in the memory available (or ``--max-memory-gb``) is skipped with the
reason printed. Targets (issue 17): a replica within 15% of a bare actor's memory and
within 25% of its idle CPU; 100 partitions created in at most 15 s; many-partition
throughput at least 70% of the 4-partition figure.

Run:  python -m benchmarks.bench_scale [--steps 10,50,100,200,300] [--seconds 10]
      a quick run: python -m benchmarks.bench_scale --steps 10,50 --seconds 3
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import psutil
import ray

import raystream as rs
from benchmarks import harness
from raystream.types import TopicPartition

VALUE = b"v" * 100
MB = 2**20
SETTLE_S = 3.0
"""Rest after a step's actors started, before memory and CPU are read."""
FIRST_ESTIMATE_BYTES = 100 * MB
"""Memory assumed per process before the run has measured one (USS plus its share of
page tables and kernel structures)."""
HEADROOM = 1.25
"""What a process takes beyond its measured USS, for the memory check."""
TARGET_MEMORY = 1.15
TARGET_CPU = 1.25
TARGET_CREATE_S = 15.0
TARGET_THROUGHPUT = 0.70


@ray.remote(num_cpus=0)
class BareActor:
    """The floor: a Ray actor that does nothing (async, as a replica is)."""

    async def ping(self) -> int:
        return os.getpid()


@dataclass
class Step:
    """The figures of one step (N processes alive); None where not measured."""

    alive: int
    uss_mb: float | None = None
    uss_all_mb: float | None = None
    idle_cores: float | None = None
    create_s: float | None = None
    created: int = 0
    produce: float | None = None
    consume: float | None = None
    skipped: str = ""


@dataclass
class Run:
    steps: list[int]
    bare: dict[int, Step] = field(default_factory=dict)
    replicas: dict[int, Step] = field(default_factory=dict)
    four: Step | None = None


def unique_memory_mb(pid: int) -> float:
    """A process's unique set size (private clean + dirty pages), MB."""
    private = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                private += int(line.split()[1])
    return private / 1024


def mean_uss_mb(pids: list[int]) -> float:
    return statistics.fmean(unique_memory_mb(pid) for pid in pids)


def _cpu_seconds(processes: list[psutil.Process]) -> dict[int, float]:
    seconds = {}
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = process.cpu_times()
            seconds[process.pid] = times.user + times.system
    return seconds


def cluster_idle_cores(seconds: float) -> float:
    """Cores used by every process of this driver's Ray (its children) over ``seconds``."""
    processes = psutil.Process().children(recursive=True)
    before = _cpu_seconds(processes)
    time.sleep(seconds)
    after = _cpu_seconds(psutil.Process().children(recursive=True))
    used = sum(value - before.get(pid, 0.0) for pid, value in after.items())
    return used / seconds


def fits(alive: int, target: int, per_process_bytes: float, budget_bytes: float | None) -> str:
    """Why ``target`` processes would not fit (empty when they would)."""
    adding = (target - alive) * per_process_bytes
    available = psutil.virtual_memory().available - (2 << 30)  # 2 GiB for the rest
    if adding > available:
        return (
            f"{target - alive} more processes need ~{adding / 2**30:.1f} GiB, "
            f"{available / 2**30:.1f} GiB available (2 GiB kept free)"
        )
    if budget_bytes is not None and target * per_process_bytes > budget_bytes:
        return (
            f"{target} processes need ~{target * per_process_bytes / 2**30:.1f} GiB, "
            f"over --max-memory-gb {budget_bytes / 2**30:.0f}"
        )
    return ""


def estimate(steps: dict[int, Step]) -> float:
    """Bytes per process for the memory check: the last USS measured, with headroom."""
    measured = [max(s.uss_mb, s.uss_all_mb or 0) for s in steps.values() if s.uss_mb]
    return measured[-1] * MB * HEADROOM if measured else FIRST_ESTIMATE_BYTES


def measure_bare(run: Run, seconds: float, budget: float | None) -> None:
    """N bare actors alive, step by step, in a Ray of their own."""
    with harness.local_ray():
        actors: list[Any] = []
        pids: list[int] = []
        for target in run.steps:
            reason = fits(len(actors), target, estimate(run.bare), budget)
            if reason:
                run.bare[target] = Step(target, skipped=reason)
                print(f"bare actors, {target}: skipped, {reason}", flush=True)
                break
            added = [BareActor.remote() for _ in range(target - len(actors))]
            pids += ray.get([actor.ping.remote() for actor in added])
            actors += added
            time.sleep(SETTLE_S)
            step = Step(target, uss_mb=mean_uss_mb(pids), idle_cores=cluster_idle_cores(seconds))
            run.bare[target] = step
            print(
                f"bare actors, {target}: {step.uss_mb:.1f} MB each, "
                f"cluster idle {step.idle_cores:.3f} cores",
                flush=True,
            )


def throughput(
    cluster: rs.Cluster, partitions: list[TopicPartition], seconds: float
) -> tuple[float, float]:
    """Records/s of a default producer's send() into every partition in turn for
    ``seconds`` (until all are acknowledged), and of a consumer reading them back."""
    consumer = cluster.consumer(enable_auto_commit=False)
    consumer.assign(partitions)
    producer = cluster.producer()
    send = producer.send
    count = len(partitions)
    # Untimed: one record into every partition and back, so that the clocks below
    # start with every connection open and every leader known to both clients.
    starts = consumer.end_offsets(partitions)
    for tp in partitions:
        send(tp.topic, VALUE, partition=tp.partition)
    producer.flush()
    _read(consumer, starts, count, 60.0)
    starts = consumer.end_offsets(partitions)
    sent = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for i in range(sent, sent + 1000):
            tp = partitions[i % count]
            send(tp.topic, VALUE, partition=tp.partition)
        sent += 1000
    producer.flush()
    produce = sent / (time.perf_counter() - start)
    producer.close()
    start = time.perf_counter()
    seen = _read(consumer, starts, sent, max(60.0, 10 * seconds))
    consume = seen / (time.perf_counter() - start)
    consumer.close(autocommit=False)
    if seen < sent:
        print(f"  consumer read {seen} of {sent} records before giving up", flush=True)
    return produce, consume


def _read(consumer: Any, starts: dict[TopicPartition, int], records: int, limit_s: float) -> int:
    """Records polled from ``starts`` on, until ``records`` or ``limit_s`` seconds."""
    for tp, offset in starts.items():
        consumer.seek(tp, offset)
    seen = 0
    give_up = time.perf_counter() + limit_s
    while seen < records and time.perf_counter() < give_up:
        seen += sum(len(batch) for batch in consumer.poll(timeout_ms=1000).values())
    return seen


def replica_pids(cluster: rs.Cluster, topics: list[str]) -> list[int]:
    handles = [
        partition.leader_handle
        for topic in topics
        for partition in cluster.topic_metadata(topic, refresh=True).partitions
    ]
    return ray.get([handle.ping.remote() for handle in handles])


def measure_replicas(run: Run, seconds: float, budget: float | None) -> None:
    """The 4-partition figures, then N replicas alive step by step, in raystream's Ray."""
    limit = {"max.replicas.per.node": max(run.steps) + 8}
    with harness.local_cluster("bench-scale", broker_config=limit) as cluster:
        admin = cluster.admin()
        admin.create_topic("four", partitions=4)
        four = [TopicPartition("four", p) for p in range(4)]
        run.four = Step(4)
        run.four.produce, run.four.consume = throughput(cluster, four, seconds)
        print(
            f"4 partitions: produce {run.four.produce:,.0f}/s, consume {run.four.consume:,.0f}/s",
            flush=True,
        )
        admin.delete_topic("four")
        topics: list[str] = []
        pids: list[int] = []
        for target in run.steps:
            reason = fits(len(pids), target, estimate(run.replicas), budget)
            if reason:
                run.replicas[target] = Step(target, skipped=reason)
                print(f"replicas, {target}: skipped, {reason}", flush=True)
                break
            topic = f"scale-{target}"
            added = target - len(pids)
            start = time.perf_counter()
            admin.create_topic(topic, partitions=added, timeout_ms=900_000)
            step = Step(target, create_s=time.perf_counter() - start, created=added)
            topics.append(topic)
            fresh = replica_pids(cluster, [topic])
            pids += fresh
            time.sleep(SETTLE_S)
            step.uss_mb = mean_uss_mb(fresh)
            step.uss_all_mb = mean_uss_mb(pids)
            step.idle_cores = cluster_idle_cores(seconds)
            partitions = [
                TopicPartition(topic, p)
                for topic in topics
                for p in range(len(cluster.topic_metadata(topic).partitions))
            ]
            step.produce, step.consume = throughput(cluster, partitions, seconds)
            run.replicas[target] = step
            print(
                f"replicas, {target}: created {added} in {step.create_s:.1f} s, "
                f"{step.uss_mb:.1f} MB each ({step.uss_all_mb:.1f} MB with the replicas that "
                f"served traffic), cluster idle {step.idle_cores:.3f} cores, "
                f"produce {step.produce:,.0f}/s, consume {step.consume:,.0f}/s",
                flush=True,
            )


def measure(steps: list[int], seconds: float, budget: float | None, bare: bool = True) -> Run:
    """Every step's figures: the bare actors' in a Ray of their own (unless not
    ``bare``), then the replicas' (``budget``: bytes the run's processes may take)."""
    run = Run(sorted(steps))
    if bare:
        measure_bare(run, seconds, budget)
    measure_replicas(run, seconds, budget)
    return run


def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}" if value is not None and base else "-"


def _number(value: float | None, spec: str) -> str:
    return format(value, spec) if value is not None else "-"


def report(run: Run, seconds: float) -> None:
    print(f"\n{harness.machine_line()}")
    replica_module = importlib.util.find_spec("raystream.actors.replica")
    assert replica_module is not None and replica_module.origin is not None
    cached = os.path.exists(importlib.util.cache_from_source(replica_module.origin))
    print(
        "raystream's bytecode cache: "
        + ("present" if cached else "absent (each replica compiles raystream at start)")
        + f"; PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}"
    )
    print(
        "MB/replica: USS of the step's new replicas at rest after creation (all: every "
        "replica alive, those that served the earlier steps' traffic included)"
    )
    print(
        f"idle CPU: whole Ray cluster over {seconds:g} s; throughput: 100-byte records, "
        "default producer, all partitions\n"
    )
    header = (
        f"{'replicas':>8} {'create s':>8} {'s/100':>6} {'MB/replica':>10} {'all':>5} "
        f"{'MB/bare':>8} {'ratio':>6} {'idle cores':>10} {'bare cores':>10} {'ratio':>6} "
        f"{'produce/s':>10} {'x 4p':>5} {'consume/s':>10} {'x 4p':>5}"
    )
    print(header)
    four = run.four or Step(4)
    print(
        f"{'4p topic':>8} {'':>8} {'':>6} {'':>10} {'':>5} {'':>8} {'':>6} {'':>10} {'':>10} "
        f"{'':>6} "
        f"{_number(four.produce, ',.0f'):>10} {'':>5} {_number(four.consume, ',.0f'):>10}"
    )
    for target in run.steps:
        ours = run.replicas.get(target)
        bare = run.bare.get(target, Step(target))
        if ours is None or ours.skipped:
            reason = ours.skipped if ours else "not reached"
            print(f"{target:>8} skipped: {reason}")
            continue
        per_100 = ours.create_s / ours.created * 100 if ours.create_s else None
        print(
            f"{target:>8} {_number(ours.create_s, '.1f'):>8} {_number(per_100, '.1f'):>6} "
            f"{_number(ours.uss_mb, '.1f'):>10} {_number(ours.uss_all_mb, '.1f'):>5} "
            f"{_number(bare.uss_mb, '.1f'):>8} "
            f"{_ratio(ours.uss_mb, bare.uss_mb):>6} {_number(ours.idle_cores, '.3f'):>10} "
            f"{_number(bare.idle_cores, '.3f'):>10} {_ratio(ours.idle_cores, bare.idle_cores):>6} "
            f"{_number(ours.produce, ',.0f'):>10} {_ratio(ours.produce, four.produce):>5} "
            f"{_number(ours.consume, ',.0f'):>10} {_ratio(ours.consume, four.consume):>5}"
        )
    print("\ntargets (issue 17), per step measured:")
    checks = [
        (f"memory within {TARGET_MEMORY - 1:.0%} of a bare actor", "memory"),
        (f"idle CPU within {TARGET_CPU - 1:.0%} of bare actors'", "cpu"),
        (f"100 partitions created in <= {TARGET_CREATE_S:g} s", "create"),
        (f"produce and consume >= {TARGET_THROUGHPUT:.0%} of 4 partitions", "throughput"),
    ]
    for label, key in checks:
        verdicts = []
        for target in run.steps:
            ours = run.replicas.get(target)
            if ours is None or ours.skipped:
                continue
            met = _met(key, ours, run.bare.get(target, Step(target)), four)
            if met is not None:
                verdicts.append(f"{target}: {'met' if met else 'MISSED'}")
        print(f"  {label:<48} {', '.join(verdicts) or '-'}")


def _met(key: str, ours: Step, bare: Step, four: Step) -> bool | None:
    """Whether the step meets target ``key``; None when a figure is missing."""
    if key == "memory" and ours.uss_mb and bare.uss_mb:
        return ours.uss_mb <= bare.uss_mb * TARGET_MEMORY
    if key == "cpu" and ours.idle_cores is not None and bare.idle_cores:
        return ours.idle_cores <= bare.idle_cores * TARGET_CPU
    if key == "create" and ours.create_s and ours.created:
        return ours.create_s / ours.created * 100 <= TARGET_CREATE_S
    if key == "throughput" and ours.produce and ours.consume and four.produce and four.consume:
        return min(ours.produce / four.produce, ours.consume / four.consume) >= TARGET_THROUGHPUT
    return None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--steps",
        type=lambda text: sorted({int(n) for n in text.split(",")}),
        default=[10, 50, 100, 200, 300],
        help="replicas alive at each step, comma-separated (default 10,50,100,200,300)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=10.0,
        help="idle CPU window and produce time per step (default 10)",
    )
    parser.add_argument(
        "--max-memory-gb",
        type=float,
        default=None,
        help="most memory the run's processes may take (default: what is available)",
    )
    parser.add_argument("--skip-bare", action="store_true", help="no bare-actor pass")
    args = parser.parse_args()
    if any(n < 1 for n in args.steps):
        parser.error(f"--steps must be positive, got {args.steps}")
    if not sys.platform.startswith("linux"):
        parser.error("unique memory is read from /proc: Linux only")
    budget = args.max_memory_gb * 2**30 if args.max_memory_gb else None
    run = measure(args.steps, args.seconds, budget, bare=not args.skip_bare)
    report(run, args.seconds)


if __name__ == "__main__":
    main()
