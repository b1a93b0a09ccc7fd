"""Kafka clients against raystream's Kafka-protocol listener, next to a Kafka-protocol broker.

The same client (confluent-kafka, librdkafka) and the same settings as the Tansu peer
of ``bench_clients`` (:func:`benchmarks.peers.measure_kafka_protocol`), in one run:

- produce: ``produce()`` per record, linger.ms=5, batch.size=1 MB, acks=1, no
  compression, no idempotence, until ``flush`` returns;
- consume: a consumer-group member (fetch.wait.max.ms=10, fetch.queue.backoff.ms=10)
  reading every record, timed from the first batch;
- end to end: p50/p99 of produce -> consumer at a steady 2,000 records/s.

raystream: a local cluster (replication factor 1, data on disk) with
``listeners=PLAINTEXT://127.0.0.1:0``. Tansu keeps everything in memory and does not
replicate. Targets (issue 19): produce and consume >= 50% of Tansu's, e2e p50 no worse.

Run:  python -m benchmarks.bench_kafka_listener [--records 1000000] [--skip-peers]
      [--only e2e] [--e2e-rounds N]

``--only e2e`` skips produce and consume; ``--e2e-rounds N`` measures the end to end N
times on each side, alternating raystream and Tansu (both kept running), and prints
each round and the median p50, for an A/B on a noisy machine.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics

from benchmarks import harness, peers


def main(argv: list[str] | None = None) -> int:
    """Measure raystream's listener (and Tansu unless ``--skip-peers``); print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--e2e-rate", type=int, default=2000)
    parser.add_argument("--e2e-seconds", type=float, default=3.0)
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--only", choices=("e2e",), help="measure only this figure")
    parser.add_argument("--e2e-rounds", type=int, default=1, help="end-to-end rounds per side")
    args = parser.parse_args(argv)
    if args.e2e_rounds < 1:
        parser.error(f"--e2e-rounds must be at least 1, not {args.e2e_rounds}")
    throughput = args.only is None
    workload = (args.records, args.value_bytes, args.e2e_rate, args.e2e_seconds)
    if args.e2e_rounds > 1:
        return _e2e_rounds(args, workload)

    ours = measure(*workload, throughput=throughput)
    results = [ours]
    if not args.skip_peers:
        results.append(peers.bench_kafka(*workload, throughput=throughput))

    print(harness.machine_line("confluent-kafka", "kio"))
    print(
        f"records={args.records:,} value_bytes={args.value_bytes} "
        f"e2e_rate={args.e2e_rate}/s for {args.e2e_seconds:g} s"
    )
    peers.print_table(results)
    if len(results) == 2:
        _print_ratios(ours, results[1])
    return 0


def measure(
    records: int, value_bytes: int, e2e_rate: int, e2e_seconds: float, throughput: bool = True
) -> peers.PeerResult:
    """confluent-kafka's figures against raystream's listener on a cluster of its own
    (without ``throughput``: only the end to end); the peer's are
    :func:`benchmarks.peers.bench_kafka` with the same arguments."""
    with harness.local_cluster(
        "bench-kafka-listener", broker_config={"listeners": "PLAINTEXT://127.0.0.1:0"}
    ) as cluster:
        return peers.measure_kafka_protocol(
            "raystream listener",
            cluster.bootstrap_servers(),
            records,
            value_bytes,
            e2e_rate,
            e2e_seconds,
            note="on disk, rf=1",
            throughput=throughput,
        )


def _print_ratios(ours: peers.PeerResult, peer: peers.PeerResult) -> None:
    print(f"\n{'figure':<10} {'ratio raystream/peer':>22}  target")
    for figure, mine, theirs, target in (
        ("produce", ours.produce_rps, peer.produce_rps, ">= 0.50"),
        ("consume", ours.consume_rps, peer.consume_rps, ">= 0.50"),
    ):
        if mine and theirs:
            print(f"{figure:<10} {mine / theirs:>22.2f}  {target}")
    if ours.e2e_p50_ms and peer.e2e_p50_ms:
        print(f"{'e2e p50':<10} {peer.e2e_p50_ms / ours.e2e_p50_ms:>22.2f}  >= 1.00 (peer/ours)")


def _e2e_rounds(args: argparse.Namespace, workload: tuple[int, int, int, float]) -> int:
    """End to end only, ``--e2e-rounds`` times per side, raystream and Tansu alternating
    (both running throughout), each round on a new topic; every round and the medians."""
    rows: list[tuple[int, str, float | None, float | None, str]] = []
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(
            harness.local_cluster(
                "bench-kafka-listener", broker_config={"listeners": "PLAINTEXT://127.0.0.1:0"}
            )
        )
        sides = [("raystream listener", cluster.bootstrap_servers())]
        if not args.skip_peers:
            sides.append(("tansu", stack.enter_context(peers.tansu_broker(peers._tansu_binary()))))
        for round_ in range(args.e2e_rounds):
            order = sides if round_ % 2 == 0 else sides[::-1]
            for name, bootstrap in order:
                result = peers.measure_kafka_protocol(name, bootstrap, *workload, throughput=False)
                rows.append((round_ + 1, name, result.e2e_p50_ms, result.e2e_p99_ms, result.note))
                print(
                    f"round {round_ + 1} {name:<20} p50 {result.e2e_p50_ms} "
                    f"p99 {result.e2e_p99_ms} {result.note}",
                    flush=True,
                )
    print(harness.machine_line("confluent-kafka", "kio"))
    print(f"e2e_rate={args.e2e_rate}/s for {args.e2e_seconds:g} s, {args.e2e_rounds} rounds")
    for name, _ in sides:
        p50s = [r[2] for r in rows if r[1] == name and r[2] is not None]
        p99s = [r[3] for r in rows if r[1] == name and r[3] is not None]
        if p50s:
            print(
                f"{name:<20} median p50 {statistics.median(p50s):.2f} ms "
                f"(rounds {', '.join(f'{x:.2f}' for x in p50s)}), "
                f"median p99 {statistics.median(p99s):.2f} ms"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
