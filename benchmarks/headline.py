"""The headline figures of every benchmark in one run, printed as one table.

``python -m benchmarks`` runs each area's benchmark through the same functions its own
command uses (``benchmarks.bench_clients.measure`` and so on), so a figure here is the
figure that command prints, and sets it next to the peer measured in the same run, the
ratio raystream / peer, the goal the project set for it (met or missed) and the
command that gives the area's full tables. The table is Markdown, the layout of the
one at the top of BENCHMARKS.md, so a run's output can replace it as is.

Areas (``--only`` takes a comma list of their names): storage, clients, calls,
replication, groups, transactions, listener, connect, mirror, security, streams, spark,
scale. ``--quick`` runs every area at a small size (a minute or two each, figures
noisier; for checking that the benchmarks run, not for BENCHMARKS.md).

Optional peers (Redis Streams, the Tansu Kafka-protocol broker, Quix Streams, Faust)
are checked before anything is measured: a missing one is named with the command that
installs it, its cells say so, and every other figure is still measured. An area that
fails is reported with its error and the run goes on to the next.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from benchmarks import harness, page_cache

RECORD_RATE = 2000
"""Records/s of the end-to-end runs, as every benchmark's default."""


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    area: str
    figure: str
    ours: str
    """raystream's figure, with its unit."""
    peer: str
    """What it is set against, measured in the same run, with its value (or why not)."""
    ratio: float | None
    """raystream / peer, in the figure's own unit; the goal says which side is better."""
    goal: str
    met: bool | None
    """Whether the goal is met; None when there is no goal or a figure is missing."""
    command: str


@dataclass
class Outcome:
    """What one area gives: its rows, and notes printed under the table."""

    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Area:
    """One benchmark area: its peers (keys of :data:`benchmarks.peers.PEERS`), its
    options at full and at quick size (named as the script's own flags), and how to
    run it."""

    name: str
    script: str
    peers: tuple[str, ...]
    full: dict[str, Any]
    quick: dict[str, Any]
    run: Callable[[Area, dict[str, Any], str], Outcome]
    takes_page_cache: bool = True
    """Whether the script has ``--warm-page-cache``."""
    fixed: tuple[str, ...] = ()
    """Flags the script's command needs for the subset this area runs."""

    def command(self, options: dict[str, Any], warm: bool) -> str:
        """The script's command for ``options``: it prints this area's full tables."""
        flags = [*self.fixed]
        for name, value in options.items():
            text = ",".join(map(str, value)) if isinstance(value, list | tuple) else value
            flags.append(f"--{name} {text!r}" if text == "" else f"--{name} {text}")
        if warm and self.takes_page_cache:
            flags.append("--warm-page-cache")
        return " ".join([f"python -m benchmarks.{self.script}", *flags])


# --------------------------------------------------------------------------- formats


def per_s(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}/s"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def ratio_of(ours: float | None, peer: float | None) -> float | None:
    return ours / peer if ours is not None and peer else None


def at_least(value: float | None, bound: float) -> bool | None:
    return None if value is None else value >= bound


def at_most(value: float | None, bound: float) -> bool | None:
    return None if value is None else value <= bound


def both(*verdicts: bool | None) -> bool | None:
    """All met; None if any is unknown and none is missed."""
    if any(v is False for v in verdicts):
        return False
    return None if any(v is None for v in verdicts) else True


def peer_cell(label: str, value: float | None, fmt: Callable[[float | None], str]) -> str:
    return f"{label}: {fmt(value)}" if value is not None else f"{label}: not measured"


def peer_notes(results: Iterable[Any]) -> list[str]:
    """The notes of benchmarks.peers results (what was missing, how the peer ran)."""
    return [f"{r.name}: {r.note}" for r in results if r.note]


def row_named(rows: list[tuple[str, float, str]], name: str) -> float:
    """The figure of the row called ``name`` in a bench_connect table."""
    for what, figure, _ in rows:
        if what == name:
            return figure
    raise LookupError(f"no row {name!r} in {[what for what, _, _ in rows]}")


# --------------------------------------------------------------------------- areas


def storage(area: Area, o: dict[str, Any], command: str) -> Outcome:
    from benchmarks import bench_log, bench_record_size

    log = bench_log.measure(o["records"], o["big-gb"], o["rounds"], None)
    by_name = {name: rps for name, rps, _, _ in log.rows}
    out = Outcome()
    for ours, peer, figure in (
        ("Log.append", "raw Arrow IPC write", "Log.append, 1,000-record batches"),
        ("Log.read", "raw Arrow IPC read (memory-mapped)", "Log.read"),
    ):
        r = ratio_of(by_name[ours], by_name[peer])
        out.rows.append(
            Row(
                area.name,
                figure,
                per_s(by_name[ours]),
                peer_cell("raw Arrow IPC, same disk", by_name[peer], per_s),
                r,
                ">= 0.70",
                at_least(r, 0.70),
                command,
            )
        )
    if log.big_rows:
        empty, big = log.big_rows[0][1], log.big_rows[1][1]
        r = ratio_of(big, empty)
        out.rows.append(
            Row(
                area.name,
                f"{log.big_rows[1][0]} (records/s)",
                per_s(big),
                peer_cell("an empty log", empty, per_s),
                r,
                "equal, within noise",
                None,
                command,
            )
        )
    size_command = "python -m benchmarks.bench_record_size"
    full = bench_record_size.FULL_BATCH
    for rows, count, label in ((1, 200, "1-record batches"), (full, 20, f"full batches ({full})")):
        ours, _, kafka = bench_record_size.bytes_per_record(rows, False, count)
        out.rows.append(
            Row(
                area.name,
                f"bytes on disk per 100-byte record, {label}",
                f"{ours:.1f} B",
                f"Kafka record batch v2: {kafka:.1f} B",
                ratio_of(ours, kafka),
                "",
                None,
                size_command,
            )
        )
    return out


def clients(area: Area, o: dict[str, Any], command: str) -> Outcome:
    from benchmarks import bench_clients

    n, seconds_ = o["records"], o["e2e-seconds"]
    ours = bench_clients.measure(n, RECORD_RATE, seconds_)
    redis, tansu = bench_clients.measure_peers(n, RECORD_RATE, seconds_)
    rates = ours.rates
    out = Outcome(notes=peer_notes([redis, tansu]))

    def row(figure: str, value: float, peer: Any, attr: str, goal: str, met: Any) -> None:
        theirs = getattr(peer, attr)
        label = "Tansu + confluent-kafka" if peer is tansu else "Redis Streams"
        fmt = ms if attr.startswith("e2e") else per_s
        r = ratio_of(value, theirs)
        out.rows.append(
            Row(
                area.name,
                figure,
                fmt(value),
                peer_cell(label, theirs, fmt),
                r,
                goal,
                met(value, r),
                command,
            )
        )

    ahead = 1.0
    row(
        "send() per record, 1 partition",
        rates["send() per record, 1 partition"],
        tansu,
        "produce_rps",
        ">= 300,000/s",
        lambda v, r: at_least(v, 300_000),
    )
    row(
        "send_batch()",
        rates["send_batch()"],
        tansu,
        "produce_rps",
        ">= 3,000,000/s, ratio >= 1",
        lambda v, r: both(at_least(v, 3_000_000), at_least(r, ahead)),
    )
    row(
        "consume per record",
        rates["consume per record"],
        tansu,
        "consume_rps",
        ">= 1,000,000/s, ratio >= 1",
        lambda v, r: both(at_least(v, 1_000_000), at_least(r, ahead)),
    )
    row(
        "consume poll_arrow",
        rates["consume poll_arrow"],
        tansu,
        "consume_rps",
        ">= 5,000,000/s",
        lambda v, r: at_least(v, 5_000_000),
    )
    row(
        f"end-to-end p50 at {RECORD_RATE:,}/s",
        ours.e2e_p50_ms,
        tansu,
        "e2e_p50_ms",
        "<= 3 ms",
        lambda v, r: at_most(v, 3.0),
    )
    row(
        "send() per record, 1 partition",
        rates["send() per record, 1 partition"],
        redis,
        "produce_rps",
        "ratio >= 1",
        lambda v, r: at_least(r, ahead),
    )
    row(
        "consume per record",
        rates["consume per record"],
        redis,
        "consume_rps",
        "ratio >= 1",
        lambda v, r: at_least(r, ahead),
    )
    return out


def calls(area: Area, o: dict[str, Any], command: str) -> Outcome:
    from benchmarks import bench_calls

    ours = bench_calls.run(o["calls"])
    theirs, note = bench_calls.measure_redis(o["calls"])
    out = Outcome(notes=[f"Redis: {note}"] if note else [])
    for key, figure, label in (
        ("produce direct", "one record produced, direct path, p50", "Redis XADD"),
        ("e2e rf1", f"end-to-end p50 at {bench_calls.E2E_RATE}/s, rf=1", "Redis Streams"),
    ):
        value = ours[key][0] if isinstance(ours[key], tuple) else ours[key]
        peer = theirs.get(key)
        out.rows.append(
            Row(
                area.name,
                figure,
                ms(value),
                peer_cell(label, peer, ms),
                ratio_of(value, peer),
                "",
                None,
                command,
            )
        )
    return out


def replication(area: Area, o: dict[str, Any], command: str) -> Outcome:
    from benchmarks import bench_replication

    fig = bench_replication.measure(o["records"], o["kills"], RECORD_RATE, o["e2e-seconds"])
    setups = {name: (rps, p50) for name, rps, p50, _ in fig.setups}
    (one_rps, one_p50), (all_rps, all_p50) = setups["rf=1, acks=1"], setups["rf=3, acks=all"]
    failover = fig.failover_s
    r = ratio_of(all_rps, one_rps)
    p50 = statistics.median(failover)
    return Outcome(
        [
            Row(
                area.name,
                "rf=3 acks=all, send() per record",
                per_s(all_rps),
                peer_cell("rf=1 acks=1", one_rps, per_s),
                r,
                ">= 0.50",
                at_least(r, 0.50),
                command,
            ),
            Row(
                area.name,
                f"rf=3 acks=all, end-to-end p50 at {RECORD_RATE:,}/s",
                ms(all_p50),
                peer_cell("rf=1 acks=1", one_p50, ms),
                ratio_of(all_p50, one_p50),
                "<= 5 ms",
                at_most(all_p50, 5.0),
                command,
            ),
            Row(
                area.name,
                f"failover p50 over {len(failover)} leader kills",
                f"{p50:.2f} s (max {max(failover):.2f} s)",
                "-",
                None,
                "<= 2 s",
                at_most(p50, 2.0),
                command,
            ),
        ]
    )


def groups(area: Area, o: dict[str, Any], command: str) -> Outcome:
    from benchmarks import bench_groups

    _, times, pauses = bench_groups.measure(o["records"], o["kills"])
    bound = bench_groups.SESSION_TIMEOUT_MS / 1000 + 1
    p50 = statistics.median(times)
    before, during = pauses["cooperative-sticky"]
    return Outcome(
        [
            Row(
                area.name,
                f"rebalance after a member kill, p50 over {len(times)}",
                f"{p50:.2f} s (max {max(times):.2f} s)",
                "-",
                None,
                f"<= {bound:.1f} s (session timeout + 1 s)",
                at_most(p50, bound),
                command,
            ),
            Row(
                area.name,
                "cooperative-sticky: longest gap on kept partitions during a join",
                f"{during:.0f} ms",
                f"the same gap before the join: {before:.0f} ms",
                ratio_of(during, before),
                "no pause added",
                None,
                command,
            ),
        ]
    )


def transactions(area: Area, o: dict[str, Any], command: str) -> Outcome:
    from benchmarks import bench_transactions

    fig = bench_transactions.measure(o["records"], o["rounds"])
    alo, eos = fig.pipelines[10_000]
    r = ratio_of(eos, alo)
    return Outcome(
        [
            Row(
                area.name,
                "consume-transform-produce, exactly-once, 10,000-record transactions",
                per_s(eos),
                peer_cell("at-least-once", alo, per_s),
                r,
                ">= 0.70",
                at_least(r, 0.70),
                command,
            )
        ]
    )


def listener(area: Area, o: dict[str, Any], command: str) -> Outcome:
    from benchmarks import bench_kafka_listener, bench_kafka_records, peers

    workload = (o["records"], 100, RECORD_RATE, o["e2e-seconds"])
    ours = bench_kafka_listener.measure(*workload)
    tansu = peers.bench_kafka(*workload)
    out = Outcome(notes=peer_notes([ours, tansu]))
    for figure, attr, fmt, goal, met in (
        ("confluent-kafka produce", "produce_rps", per_s, ">= 0.50", lambda r: at_least(r, 0.5)),
        ("confluent-kafka consume", "consume_rps", per_s, ">= 0.50", lambda r: at_least(r, 0.5)),
        (
            f"end-to-end p50 at {RECORD_RATE:,}/s",
            "e2e_p50_ms",
            ms,
            "<= 1.00",
            lambda r: at_most(r, 1.0),
        ),
    ):
        value, theirs = getattr(ours, attr), getattr(tansu, attr)
        r = ratio_of(value, theirs)
        out.rows.append(
            Row(
                area.name,
                figure,
                fmt(value),
                peer_cell("Tansu + confluent-kafka", theirs, fmt),
                r,
                goal,
                met(r),
                command,
            )
        )
    records_command = f"python -m benchmarks.bench_kafka_records --records {o['records']}"
    for direction, size, _, mine, theirs in bench_kafka_records.measure(
        o["records"], sizes=(1_000,), codecs=(None,)
    ):
        out.rows.append(
            Row(
                area.name,
                f"Kafka record batches {direction}d, {size:,} records each (per CPU second)",
                per_s(mine),
                peer_cell("kafka-python", theirs, per_s),
                ratio_of(mine, theirs),
                "",
                None,
                records_command,
            )
        )
    return out


def connect(area: Area, o: dict[str, Any], command: str) -> Outcome:
    from benchmarks.connect_sink import bench_sink

    rows = bench_sink(o["sink-records"])
    sink, raw = row_named(rows, "file-to-Parquet sink"), row_named(rows, "raw consume")
    r = ratio_of(sink, raw)
    return Outcome(
        [
            Row(
                area.name,
                "file-to-Parquet sink",
                per_s(sink),
                peer_cell("raw consume", raw, per_s),
                r,
                ">= 0.50",
                at_least(r, 0.50),
                command,
            )
        ],
        ["Connect's source connectors have no benchmark yet."],
    )


def mirror(area: Area, o: dict[str, Any], command: str) -> Outcome:
    from benchmarks import bench_connect

    pairs = o["pairs"]
    run = f"#{pairs}" + (" (warm)" if pairs > 1 else " (cold: a new target's first flows)")
    out = Outcome()
    local = bench_connect.bench_mirror(o["records"], o["rate"], o["seconds"], pairs)
    into_kafka = bench_connect.bench_mirror_kafka(o["records"], pairs)
    for label, rows, consume, produce in (
        ("raystream -> raystream", local, "raw consume (source)", "raw produce (target)"),
        ("raystream -> Tansu", into_kafka, "raw consume (raystream)", "raw produce (Tansu)"),
    ):
        try:
            floor = min(row_named(rows, consume), row_named(rows, produce))
        except LookupError:  # the Tansu half was skipped: its one row says why
            out.notes += [f"{label}: {note}" for _, _, note in rows]
            continue
        for mode in ("at-least-once", "exactly-once"):
            value = row_named(rows, f"mirror {mode} {run.split()[0]}")
            r = ratio_of(value, floor)
            out.rows.append(
                Row(
                    area.name,
                    f"MirrorMaker {label}, {mode} {run}",
                    per_s(value),
                    peer_cell("the slower raw consume or produce", floor, per_s),
                    r,
                    ">= 0.50",
                    at_least(r, 0.50),
                    command,
                )
            )
    lag = [row_named(local, f"lag p{q} at {o['rate']}/s") for q in (50, 99)]
    out.rows.append(
        Row(
            area.name,
            f"MirrorMaker lag p50 / p99 at {o['rate']:,}/s",
            f"{lag[0]:.0f} / {lag[1]:.0f} ms",
            "-",
            None,
            "",
            None,
            command,
        )
    )
    return out


def security(area: Area, o: dict[str, Any], command: str) -> Outcome:
    from benchmarks import bench_security

    setups = bench_security.measure(o["records"], 100, o["rounds"], o["acls"])
    plain = setups[0].median
    out = Outcome()
    for setup in setups[1:]:
        r = ratio_of(setup.median, plain)
        governed = setup is setups[-1]
        out.rows.append(
            Row(
                area.name,
                f"confluent-kafka produce over {setup.name} (median of {len(setup.rates)})",
                per_s(setup.median),
                peer_cell("PLAINTEXT", plain, per_s),
                r,
                f">= {bench_security.TARGET:.2f}" if governed else "",
                at_least(r, bench_security.TARGET) if governed else None,
                command,
            )
        )
    costs = dict(bench_security.acl_check_costs(o["acls"]))
    scan = costs[f"for scale: one scan of {o['acls']:,} bindings"]
    decision = costs["decision, not cached"]
    out.rows.append(
        Row(
            area.name,
            f"ACL decision among {o['acls']:,} bindings, not cached",
            f"{decision:.1f} us",
            f"one scan of every binding: {scan:,.1f} us",
            ratio_of(decision, scan),
            "",
            None,
            command,
        )
    )
    return out


def streams(area: Area, o: dict[str, Any], command: str) -> Outcome:
    from benchmarks import bench_streams

    requested = [p for p in o["peers"].split(",") if p]
    names, missing = bench_streams.runnable_peers(requested)
    work, figures = bench_streams.measure(o["events"], 100, 10, names)
    rate = {(f.system, f.job): f.rps for f in figures}
    out = Outcome(notes=list(missing.values()))
    out.notes += [f"{f.system} {f.job}: {f.note}" for f in figures if f.rps is None]

    def fastest_peer(job: str) -> tuple[str, float | None]:
        measured = [(rate[(p, job)], p) for p in names if rate.get((p, job))]
        if not measured:
            return "the Python peers", None
        best, name = max(measured)
        return name, best

    def versus_peer(job: str, variant: str, goal: float, strict: bool) -> None:
        ours = rate.get((f"raystream {variant} at_least_once", job))
        name, best = fastest_peer(job)
        r = ratio_of(ours, best)
        met = None if r is None or missing else (r > goal if strict else r >= goal)
        out.rows.append(
            Row(
                area.name,
                f"{job}, {variant}, at-least-once",
                per_s(ours),
                peer_cell(f"faster peer ({name})", best, per_s),
                r,
                f"> {goal:g}" if strict else f">= {goal:g}",
                met,
                command,
            )
        )

    versus_peer("window", "record", 1, strict=True)
    versus_peer("window", "map_batches", 10, strict=False)
    versus_peer("join", "record", 1, strict=True)
    for job, variant in (("window", "record"), ("window", "map_batches"), ("join", "record")):
        alo = rate.get((f"raystream {variant} at_least_once", job))
        eos = rate.get((f"raystream {variant} exactly_once", job))
        r = ratio_of(eos, alo)
        out.rows.append(
            Row(
                area.name,
                f"{job}, {variant}, exactly-once",
                per_s(eos),
                peer_cell("at-least-once", alo, per_s),
                r,
                ">= 0.70",
                at_least(r, 0.70),
                command,
            )
        )
    out.notes.append(f"streams: {work.events:,} events, {work.keys} keys, one partition")
    return out


def spark(area: Area, o: dict[str, Any], command: str) -> Outcome:
    from benchmarks import bench_spark

    n = o["records"]
    fig = bench_spark.measure(n, n, 4, o["rounds"])
    out = Outcome()
    for ours, ceiling, label in (
        ("read_topic + count", "ceiling: from_arrow -> to_spark + count", "from_arrow -> to_spark"),
        ("write_topic", "ceiling: from_spark (Spark -> Ray)", "from_spark"),
    ):
        mine, theirs = n / fig[ours], n / fig[ceiling]
        r = ratio_of(mine, theirs)
        out.rows.append(
            Row(
                area.name,
                f"rs.spark.{ours} of {n:,} records",
                per_s(mine),
                peer_cell(f"ceiling: {label}", theirs, per_s),
                r,
                ">= 0.80",
                at_least(r, 0.80),
                command,
            )
        )
    return out


def scale(area: Area, o: dict[str, Any], command: str) -> Outcome:
    from benchmarks import bench_scale

    steps = [int(s) for s in str(o["steps"]).split(",")]
    run = bench_scale.measure(steps, o["seconds"], None)
    reached = [n for n in run.steps if n in run.replicas and not run.replicas[n].skipped]
    out = Outcome(notes=[f"{n}: {s.skipped}" for n, s in run.replicas.items() if s.skipped])
    if not reached:
        out.notes.append("scale: no step reached")
        return out
    n = reached[-1]
    ours, bare, four = run.replicas[n], run.bare.get(n, bench_scale.Step(n)), run.four
    assert four is not None
    per_100 = ours.create_s / ours.created * 100 if ours.create_s and ours.created else None
    memory, cpu = ratio_of(ours.uss_mb, bare.uss_mb), ratio_of(ours.idle_cores, bare.idle_cores)
    produce, consume = ratio_of(ours.produce, four.produce), ratio_of(ours.consume, four.consume)
    out.rows += [
        Row(
            area.name,
            f"unique memory per replica, {n} replicas",
            f"{ours.uss_mb:.1f} MB",
            peer_cell("a bare Ray actor", bare.uss_mb, lambda v: f"{v:.1f} MB"),
            memory,
            f"<= {bench_scale.TARGET_MEMORY:.2f}",
            at_most(memory, bench_scale.TARGET_MEMORY),
            command,
        ),
        Row(
            area.name,
            f"idle CPU of the cluster, {n} replicas",
            f"{ours.idle_cores:.3f} cores",
            peer_cell(f"{n} bare actors", bare.idle_cores, lambda v: f"{v:.3f} cores"),
            cpu,
            f"<= {bench_scale.TARGET_CPU:.2f}",
            at_most(cpu, bench_scale.TARGET_CPU),
            command,
        ),
        Row(
            area.name,
            "topic creation, per 100 partitions",
            seconds(per_100),
            "-",
            None,
            f"<= {bench_scale.TARGET_CREATE_S:g} s",
            at_most(per_100, bench_scale.TARGET_CREATE_S),
            command,
        ),
        Row(
            area.name,
            f"produce over {n} partitions",
            per_s(ours.produce),
            peer_cell("4 partitions", four.produce, per_s),
            produce,
            f">= {bench_scale.TARGET_THROUGHPUT:.2f}",
            at_least(produce, bench_scale.TARGET_THROUGHPUT),
            command,
        ),
        Row(
            area.name,
            f"consume over {n} partitions",
            per_s(ours.consume),
            peer_cell("4 partitions", four.consume, per_s),
            consume,
            f">= {bench_scale.TARGET_THROUGHPUT:.2f}",
            at_least(consume, bench_scale.TARGET_THROUGHPUT),
            command,
        ),
    ]
    return out


AREAS = (
    Area(
        "storage",
        "bench_log",
        (),
        {"records": 10_000_000, "big-gb": 5.0, "rounds": 3},
        {"records": 1_000_000, "big-gb": 0, "rounds": 3},
        storage,
    ),
    Area(
        "clients",
        "bench_clients",
        ("redis", "tansu"),
        {"records": 1_000_000, "e2e-seconds": 5.0},
        {"records": 100_000, "e2e-seconds": 2.0},
        clients,
    ),
    Area("calls", "bench_calls", ("redis",), {"calls": 300}, {"calls": 100}, calls),
    Area(
        "replication",
        "bench_replication",
        (),
        {"records": 500_000, "kills": 10, "e2e-seconds": 5.0},
        {"records": 50_000, "kills": 2, "e2e-seconds": 2.0},
        replication,
        fixed=("--skip-peers",),
    ),
    Area(
        "groups",
        "bench_groups",
        (),
        {"records": 2_000_000, "kills": 10},
        {"records": 200_000, "kills": 2},
        groups,
    ),
    Area(
        "transactions",
        "bench_transactions",
        (),
        {"records": 200_000, "rounds": 5},
        {"records": 20_000, "rounds": 1},
        transactions,
    ),
    Area(
        "listener",
        "bench_kafka_listener",
        ("tansu",),
        {"records": 1_000_000, "e2e-seconds": 3.0},
        {"records": 100_000, "e2e-seconds": 2.0},
        listener,
        takes_page_cache=False,
    ),
    Area(
        "connect",
        "bench_connect",
        (),
        {"sink-records": 1_000_000},
        {"sink-records": 200_000},
        connect,
        takes_page_cache=False,
        fixed=("--skip-mirror", "--skip-kafka"),
    ),
    Area(
        "mirror",
        "bench_connect",
        ("tansu",),
        {"records": 200_000, "rate": 20_000, "seconds": 5.0, "pairs": 2},
        {"records": 50_000, "rate": 20_000, "seconds": 2.0, "pairs": 1},
        mirror,
        takes_page_cache=False,
        fixed=("--skip-sink",),
    ),
    Area(
        "security",
        "bench_security",
        (),
        {"records": 300_000, "rounds": 4, "acls": 10_000},
        {"records": 30_000, "rounds": 2, "acls": 1_000},
        security,
        takes_page_cache=False,
    ),
    Area(
        "streams",
        "bench_streams",
        ("tansu", "quix", "faust"),
        {"events": 200_000, "peers": "quix,faust"},
        {"events": 20_000, "peers": "quix,faust"},
        streams,
        takes_page_cache=False,
    ),
    Area(
        "spark",
        "bench_spark",
        (),
        {"records": 10_000_000, "rounds": 2},
        {"records": 1_000_000, "rounds": 1},
        spark,
    ),
    Area(
        "scale",
        "bench_scale",
        (),
        {"steps": "10,50,100", "seconds": 5.0},
        {"steps": "10", "seconds": 3.0},
        scale,
        takes_page_cache=False,
    ),
)
"""Every area, in the order they run (the quicker and the more basic first)."""

BY_NAME = {area.name: area for area in AREAS}


# --------------------------------------------------------------------------- the table


def cell(text: str) -> str:
    """``text`` safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def table(rows: list[Row], date: str) -> str:
    """The rows as the Markdown table at the top of BENCHMARKS.md."""
    lines = [
        "| area | figure | raystream | peer (same run) | ratio | goal | command | date |",
        "|---|---|---:|---|---:|---|---|---|",
    ]
    for r in rows:
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}"
        verdict = {True: " (met)", False: " (**missed**)", None: ""}[r.met]
        goal = (r.goal + verdict) if r.goal else "-"
        lines.append(
            "| "
            + " | ".join(
                cell(x)
                for x in (r.area, r.figure, r.ours, r.peer, ratio, goal, f"`{r.command}`", date)
            )
            + " |"
        )
    return "\n".join(lines)


def check_peers(areas: Iterable[Area]) -> dict[str, str]:
    """Why each peer the areas use cannot run here (peers that can are left out)."""
    from benchmarks import peers

    keys = sorted({key for area in areas for key in area.peers})
    return {key: why for key in keys if (why := peers.missing_peer(key))}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--only",
        default="",
        help=f"comma list of areas (default: all): {', '.join(BY_NAME)}",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes: checks that it runs, noisy figures"
    )
    page_cache.add_option(parser)
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        parser.error(f"--only: no area {', '.join(unknown)}; the areas are {', '.join(BY_NAME)}")
    args.areas = [BY_NAME[n] for n in names] if names else list(AREAS)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the chosen areas, print the table; 1 if an area failed, else 0."""
    args = parse_args(argv)
    missing = check_peers(args.areas)
    for key, why in missing.items():
        print(f"peer {key} missing, its figures are skipped: {why}", flush=True)
    cache_note = page_cache.prepare(args)
    date = datetime.date.today().isoformat()
    rows: list[Row] = []
    notes: list[str] = []
    failed: list[str] = []
    started = time.monotonic()
    try:
        for area in args.areas:
            options = area.quick if args.quick else area.full
            command = area.command(options, args.warm_page_cache)
            print(f"\n== {area.name}: {command}", flush=True)
            began = time.monotonic()
            try:
                outcome = area.run(area, options, command)
            except Exception as exc:  # one area's failure must not lose the others
                traceback.print_exc()
                failed.append(area.name)
                notes.append(f"{area.name} FAILED: {exc!r} (traceback above)")
                continue
            rows += outcome.rows
            notes += outcome.notes
            print(f"== {area.name}: {time.monotonic() - began:.0f} s", flush=True)
    finally:
        print(f"\n{harness.machine_line('confluent-kafka', 'kio', 'pyspark', 'raydp')}")
        size = "--quick sizes" if args.quick else "full sizes"
        print(f"{cache_note}; {size}; {time.monotonic() - started:.0f} s in all\n")
        print(table(rows, date))
        if notes or missing:
            print()
        for why in missing.values():
            print(f"- peer missing: {why}")
        for note in notes:
            if not any(why in note for why in missing.values()):  # said just above
                print(f"- {note}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
