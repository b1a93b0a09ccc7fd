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
"""

from __future__ import annotations

import argparse

from benchmarks import harness, peers


def main(argv: list[str] | None = None) -> int:
    """Measure raystream's listener (and Tansu unless ``--skip-peers``); print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--e2e-rate", type=int, default=2000)
    parser.add_argument("--e2e-seconds", type=float, default=3.0)
    parser.add_argument("--skip-peers", action="store_true")
    args = parser.parse_args(argv)
    workload = (args.records, args.value_bytes, args.e2e_rate, args.e2e_seconds)

    with harness.local_cluster(
        "bench-kafka-listener", broker_config={"listeners": "PLAINTEXT://127.0.0.1:0"}
    ) as cluster:
        ours = peers.measure_kafka_protocol(
            "raystream listener", cluster.bootstrap_servers(), *workload, note="on disk, rf=1"
        )
    results = [ours]
    if not args.skip_peers:
        results.append(peers.bench_kafka(*workload))

    print(harness.machine_line("confluent-kafka", "kio"))
    print(
        f"records={args.records:,} value_bytes={args.value_bytes} "
        f"e2e_rate={args.e2e_rate}/s for {args.e2e_seconds:g} s"
    )
    peers.print_table(results)
    if len(results) == 2 and None not in (ours.produce_rps, results[1].produce_rps):
        peer = results[1]
        rows = [
            ("produce", ours.produce_rps, peer.produce_rps, ">= 0.50"),
            ("consume", ours.consume_rps, peer.consume_rps, ">= 0.50"),
        ]
        print(f"\n{'figure':<10} {'ratio raystream/peer':>22}  target")
        for figure, mine, theirs, target in rows:
            ratio = "-" if not mine or not theirs else f"{mine / theirs:.2f}"
            print(f"{figure:<10} {ratio:>22}  {target}")
        if ours.e2e_p50_ms and peer.e2e_p50_ms:
            print(
                f"{'e2e p50':<10} {peer.e2e_p50_ms / ours.e2e_p50_ms:>22.2f}  >= 1.00 (peer/ours)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
