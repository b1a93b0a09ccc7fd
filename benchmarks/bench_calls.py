"""Per-call costs: what one request costs here, next to a loopback server's.

Every figure of the other benchmarks that crosses an actor boundary pays Ray's cost per
call; this one measures that cost directly, so their throughput and latency can be
read against it. p50 in ms of ``--calls`` calls made one after another (after a
warm-up), 100-byte values, replication factor 1 unless said:

- an empty call to a partition replica actor (``ping``), next to Redis PING;
- one record produced: the replica's ``produce`` call (Arrow IPC bytes, acks=1) as a
  Ray call and over the replica's direct path (:mod:`raystream.wire`, what the producer
  uses), and ``Producer.send(...).get()`` through the sender thread, next to one XADD
  (AOF on);
- one offset committed (``Consumer.commit``): the group coordinator's call and its
  acks=all write to ``__consumer_offsets``;
- a transaction of one record (begin, send, commit): the coordinator's state writes
  and the markers;
- end-to-end latency at 200 records/s, a rate at which the machine is mostly idle, for
  replication factor 1 (acks=1) and 3 (acks=all), next to Redis Streams; with the CPU
  time the partition leader's process and the client process spend per record.

Run:  python -m benchmarks.bench_calls [--calls 300] [--skip-peers]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from collections.abc import Callable
from typing import Any

import psutil
import ray

import raystream as rs
from benchmarks import harness, page_cache, peers
from benchmarks.bench_clients import end_to_end
from raystream.client.sender import encode_records
from raystream.log.batch import BatchEncoder
from raystream.records import build_batch
from raystream.requests import ProduceRequest
from raystream.transport import outcome, send
from raystream.types import TopicPartition

VALUE = b"v" * 100
E2E_RATE = 200
E2E_SECONDS = 5.0


def p50_ms(call: Callable[[], Any], calls: int) -> float:
    """Median milliseconds of ``call`` over ``calls`` sequential calls, after a warm-up."""
    for _ in range(min(calls, 20)):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def e2e_with_cpu(cluster: rs.Cluster, topic: str, acks: int | str) -> tuple[float, float, float]:
    """End-to-end p50 at E2E_RATE, and the leader's and this process's CPU ms per record."""
    leader = cluster.topic_metadata(topic).partitions[0].leader_handle
    replica = psutil.Process(ray.get(leader.ping.remote()))
    client = psutil.Process()
    before = cpu_seconds(replica), cpu_seconds(client)
    p50, _ = end_to_end(cluster, topic, E2E_RATE, E2E_SECONDS, acks=acks)
    records = E2E_RATE * E2E_SECONDS
    return (
        p50,
        (cpu_seconds(replica) - before[0]) / records * 1000,
        (cpu_seconds(client) - before[1]) / records * 1000,
    )


def measure(cluster: rs.Cluster, calls: int) -> dict[str, Any]:
    admin = cluster.admin()
    admin.create_topic("calls")
    admin.create_topic("rf3", replication_factor=3, config={"min.insync.replicas": 2})
    metadata = cluster.topic_metadata("calls", refresh=True)
    leader = metadata.partitions[0].leader_handle
    record = encode_records(
        BatchEncoder(),
        build_batch(metadata.record_schema, [None], [VALUE], [int(time.time() * 1000)], None),
    )
    figures: dict[str, Any] = {}
    figures["empty call"] = p50_ms(lambda: ray.get(leader.ping.remote()), calls)
    produce = ProduceRequest("calls", 0, record, 1)
    figures["produce call"] = p50_ms(lambda: ray.get(leader.handle.remote(produce)), calls)
    figures["produce direct"] = p50_ms(lambda: outcome(send(leader, produce)), calls)
    with cluster.producer(acks=1, linger_ms=0) as producer:
        figures["send().get()"] = p50_ms(lambda: producer.send("calls", VALUE).get(), calls)
    consumer = cluster.consumer(group_id="calls", enable_auto_commit=False)
    tp = TopicPartition("calls", 0)
    consumer.assign([tp])
    figures["commit"] = p50_ms(lambda: consumer.commit({tp: 1}), calls)
    consumer.close(autocommit=False)
    producer = cluster.producer(transactional_id="calls")
    producer.init_transactions()

    def transaction() -> None:
        producer.begin_transaction()
        producer.send("calls", VALUE)
        producer.commit_transaction()

    figures["transaction"] = p50_ms(transaction, max(calls // 5, 20))
    producer.close()
    time.sleep(1)  # the rf3 followers join the ISR
    figures["e2e rf1"] = e2e_with_cpu(cluster, "calls", 1)
    figures["e2e rf3"] = e2e_with_cpu(cluster, "rf3", "all")
    return figures


def run(calls: int) -> dict[str, Any]:
    """:func:`measure` on a cluster of its own: p50 ms by figure (the end-to-end
    figures are (p50 ms, leader CPU ms per record, client CPU ms per record))."""
    with harness.local_cluster("bench-calls") as cluster:
        return measure(cluster, calls)


def measure_redis(calls: int) -> tuple[dict[str, float], str]:
    """Redis PING, XADD and end-to-end at E2E_RATE (p50 ms), or why they are missing."""
    why = peers.missing_peer("redis")
    if why:
        return {}, why
    import redis

    binary = shutil.which("redis-server")
    assert binary is not None  # missing_peer checked it
    with peers.redis_server(binary) as port:
        client = redis.Redis(host="127.0.0.1", port=port)
        try:
            figures = {
                "empty call": p50_ms(client.ping, calls),
                "produce call": p50_ms(lambda: client.xadd("calls", {b"v": VALUE}), calls),
            }
            figures["produce direct"] = figures["produce call"]
        finally:
            client.close()
        p50, _, note = peers.redis_e2e(redis, port, E2E_RATE, E2E_SECONDS, len(VALUE))
    if p50 is not None:
        figures["e2e rf1"] = p50
    return figures, note


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--skip-peers", action="store_true")
    page_cache.add_option(parser)
    args = parser.parse_args()
    cache_note = page_cache.prepare(args)
    ours = run(args.calls)
    theirs, note = ({}, "peers skipped") if args.skip_peers else measure_redis(args.calls)

    print(f"\n{harness.machine_line()}")
    print(cache_note)
    print(f"p50 of {args.calls} sequential calls; end-to-end at {E2E_RATE} records/s\n")
    rows = [
        ("empty call (replica ping / Redis PING)", "empty call"),
        ("one record: replica produce Ray call / XADD", "produce call"),
        ("one record: replica produce direct path / XADD", "produce direct"),
        ("one record: Producer.send().get()", "send().get()"),
        ("one offset: Consumer.commit()", "commit"),
        ("transaction of one record", "transaction"),
        ("end-to-end p50, rf=1 acks=1 / Redis Streams", "e2e rf1"),
        ("end-to-end p50, rf=3 acks=all", "e2e rf3"),
    ]
    print(f"{'figure (ms)':<46} {'raystream':>10} {'Redis':>8} {'ratio':>7}")
    for label, key in rows:
        value = ours[key][0] if isinstance(ours[key], tuple) else ours[key]
        peer = theirs.get(key)
        peer_text = f"{peer:>8.2f} {value / peer:>6.1f}x" if peer else f"{'-':>8} {'-':>7}"
        print(f"{label:<46} {value:>10.2f} {peer_text}")
    print(f"\nRedis: {note or 'AOF on (everysec)'}")
    for key, label in (("e2e rf1", "rf=1"), ("e2e rf3", "rf=3 acks=all")):
        _, leader_ms, client_ms = ours[key]
        print(
            f"CPU per record at {E2E_RATE}/s, {label}: partition leader's process "
            f"{leader_ms:.2f} ms, client process (producer and consumer) {client_ms:.2f} ms"
        )


if __name__ == "__main__":
    main()
