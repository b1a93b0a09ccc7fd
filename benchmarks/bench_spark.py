"""Spark on Ray over topics: read_topic and write_topic next to their ceilings.

Measures, with 100-byte values and replication factor 1, in one run:

- ``rs.spark.read_topic`` of an N-record topic followed by ``count()``, then a
  ``groupBy("partition").count()`` on the same DataFrame;
- the ceiling: the same records, already Arrow tables in Ray's object store in the
  Kafka source layout, handed to Spark with ``ray.data.from_arrow(...).to_spark(spark)``
  (RayDP's path for a Ray Dataset), same count and groupBy;
- a second ceiling: the same blocks as Arrow IPC streams in the object store handed to
  Spark the way ``read_topic`` hands its own (RayDP's JVM reader), which isolates what
  reading the topic costs;
- ``rs.spark.write_topic`` of an N-row DataFrame (cached in Spark first), next to the
  ceiling of handing the same DataFrame to Ray (``ray.data.from_spark``, materialized)
  and to producing the same Arrow blocks from Ray alone (``rs.data.write_topic``).

Rounds alternate ours and the ceilings (the machine may be shared); each figure is the
best of its rounds.

MB/s counts value bytes (N x 100 B). Run:  python -m benchmarks.bench_spark [--records N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import ray

import raystream as rs
from benchmarks import harness, page_cache
from raystream.data.offsets import plan
from raystream.data.reader import read_range
from raystream.spark.blocks import ipc_stream, kafka_table
from raystream.spark.source import blocks_to_dataframe

VALUE_BYTES = 100
PRODUCE_ROWS = 200_000


def timed(action: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = action()
    return result, time.perf_counter() - start


def report(figures: dict[str, float]) -> dict[str, float]:
    for name, seconds in figures.items():
        print(f"  {name}: {seconds:.2f} s", flush=True)
    return figures


def fill(cluster: rs.Cluster, topic: str, records: int) -> None:
    """``records`` 100-byte values, keyless (spread over the partitions)."""
    table = pa.table({"value": pa.array([b"v" * VALUE_BYTES] * PRODUCE_ROWS, pa.binary())})
    producer = cluster.producer(acks=1)
    for start in range(0, records, PRODUCE_ROWS):
        producer.send_batch(topic, table.slice(0, min(PRODUCE_ROWS, records - start)))
    producer.close()


def topic_as_kafka_tables(cluster: rs.Cluster, topic: str) -> list[pa.Table]:
    """The topic's records as Spark-layout tables on this driver (to build the ceilings)."""
    tables = []
    for part in plan(cluster, topic, "earliest", "latest"):
        for table in read_range(cluster, part):
            tables.append(kafka_table(table, topic, part.partition, 0))
    return tables


def spark_queries(df: Any, records: int) -> tuple[float, float]:
    """Seconds of count() (checked) and of groupBy(partition).count() on ``df``."""
    count, count_s = timed(df.count)
    assert count == records, (count, records)
    groups, group_s = timed(lambda: df.groupBy("partition").count().collect())
    assert sum(row["count"] for row in groups) == records
    return count_s, group_s


def warm_up(cluster: rs.Cluster, spark: Any) -> None:
    """A small read and Spark job, so that no round pays for starting workers."""
    spark.range(1000).count()
    ends = {
        p.partition: min(p.end, p.start + 1000)
        for p in plan(cluster, "source", "earliest", "latest")
    }
    rs.spark.release(rs.spark.read_topic(spark, "source", ending_offsets=ends))


def read_round(spark: Any, n: int, ds: Any, blocks: list[Any], schema: pa.Schema) -> dict:
    """read_topic against both ceilings, one after the other (seconds per figure)."""
    df, read_s = timed(lambda: rs.spark.read_topic(spark, "source"))
    count_s, group_s = spark_queries(df, n)
    rs.spark.release(df)
    figures = {
        "read_topic + count": read_s + count_s,
        "read_topic: groupBy on the snapshot": group_s,
    }
    df, handoff_s = timed(lambda: ds.to_spark(spark))
    count_s, group_s = spark_queries(df, n)
    figures["ceiling: from_arrow -> to_spark + count"] = handoff_s + count_s
    figures["ceiling: to_spark groupBy"] = group_s
    df, handoff_s = timed(lambda: blocks_to_dataframe(spark, blocks, schema))
    count_s, group_s = spark_queries(df, n)
    figures["ceiling: IPC blocks -> RayDP reader + count"] = handoff_s + count_s
    figures["ceiling: IPC blocks groupBy"] = group_s
    print(f"  (read_topic alone: {read_s:.2f} s)", flush=True)
    return figures


def write_round(cluster: rs.Cluster, spark: Any, source: Any, n: int) -> dict:
    """write_topic of a cached DataFrame, the Spark -> Ray handoff, and produce alone."""
    written, write_s = timed(lambda: rs.spark.write_topic(source, "sink", acks=1))
    assert written == n
    handed, handoff_s = timed(lambda: ray.data.from_spark(source).materialize())
    _, produce_s = timed(lambda: rs.data.write_topic(handed, "sink", cluster=cluster, acks=1))
    return {
        "write_topic": write_s,
        "ceiling: from_spark (Spark -> Ray)": handoff_s,
        "produce alone: rs.data.write_topic": produce_s,
    }


def best_of(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {name: min(r[name] for r in rounds) for name in rounds[0]}


def bench(cluster: rs.Cluster, spark: Any, n: int, n_write: int, rounds: int) -> dict:
    """Every figure, best of ``rounds`` rounds that alternate ours and the ceilings."""
    warm_up(cluster, spark)
    tables = topic_as_kafka_tables(cluster, "source")
    ds = ray.data.from_arrow(tables).materialize()
    blocks = [ray.put(ipc_stream(t)) for t in tables]
    schema = tables[0].schema
    del tables
    measured = []
    for number in range(rounds):
        print(f"read round {number + 1}", flush=True)
        measured.append(report(read_round(spark, n, ds, blocks, schema)))
    figures = best_of(measured)
    del ds, blocks
    source = (
        spark.range(n_write)
        .selectExpr(f"CAST(REPEAT('v', {VALUE_BYTES}) AS BINARY) AS value")
        .repartition(8)
        .cache()
    )
    source.count()
    measured = []
    for number in range(rounds):
        print(f"write round {number + 1}", flush=True)
        measured.append(report(write_round(cluster, spark, source, n_write)))
    source.unpersist()
    figures.update(best_of(measured))
    return figures


def measure(records: int, write_records: int, partitions: int, rounds: int) -> dict[str, float]:
    """Every figure (seconds, by name) on a cluster and Spark session of their own."""
    with harness.local_cluster("bench-spark") as cluster:
        admin = cluster.admin()
        admin.create_topic("source", partitions=partitions)
        admin.create_topic("sink", partitions=partitions)
        _, fill_s = timed(lambda: fill(cluster, "source", records))
        print(f"filled 'source' with {records:,} records in {fill_s:.1f} s", flush=True)
        spark = rs.spark.session(
            cluster, app_name="bench-spark", executor_cores=2, executor_memory="4g"
        )
        try:
            return bench(cluster, spark, records, write_records, rounds)
        finally:
            rs.spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--write-records", type=int, default=None, help="default: --records")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2, help="figures are the best of these")
    page_cache.add_option(parser)
    args = parser.parse_args()
    cache_note = page_cache.prepare(args)
    n = args.records
    n_write = args.write_records or n
    figures = measure(n, n_write, args.partitions, args.rounds)

    print(f"\n{harness.machine_line('pyspark', 'raydp')}")
    print(cache_note)
    print(
        f"read: {n:,} records, write: {n_write:,} rows, {VALUE_BYTES}-byte values, "
        f"{args.partitions} partitions, 1 executor x 2 cores, best of {args.rounds} rounds\n"
    )
    rows = [
        ("read_topic + count", n, "ceiling: from_arrow -> to_spark + count"),
        ("read_topic: groupBy on the snapshot", n, "ceiling: to_spark groupBy"),
        ("ceiling: from_arrow -> to_spark + count", n, None),
        ("ceiling: to_spark groupBy", n, None),
        ("ceiling: IPC blocks -> RayDP reader + count", n, None),
        ("ceiling: IPC blocks groupBy", n, None),
        ("write_topic", n_write, "ceiling: from_spark (Spark -> Ray)"),
        ("ceiling: from_spark (Spark -> Ray)", n_write, None),
        ("produce alone: rs.data.write_topic", n_write, None),
    ]
    print(f"{'figure':<44} {'seconds':>8} {'records/s':>12} {'MB/s':>8} {'of ceiling':>11}")
    for name, records, ceiling in rows:
        seconds = figures[name]
        ratio = f"{figures[ceiling] / seconds:>10.0%}" if ceiling else ""
        mb_s = records * VALUE_BYTES / 1e6 / seconds
        print(f"{name:<44} {seconds:>8.2f} {records / seconds:>12,.0f} {mb_s:>8.1f} {ratio:>11}")
    ipc = figures["ceiling: IPC blocks -> RayDP reader + count"]
    print(
        f"\nread_topic + count against the IPC-blocks ceiling: "
        f"{ipc / figures['read_topic + count']:.0%}"
    )


if __name__ == "__main__":
    main()
