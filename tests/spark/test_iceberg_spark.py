"""An Iceberg table the data-lake sink wrote, read by real Spark on Ray (RayDP) without
Iceberg's Spark runtime: the table's current data files as Parquet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from raystream.connectors.datalake import DataLakeSinkConnector, load_table, read_iceberg
from raystream.types import TopicPartition

pytestmark = pytest.mark.slow

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def sink_batch(rows: list[dict[str, Any]], start: int) -> pa.Table:
    count = len(rows)
    return pa.table(
        {
            "topic": pa.array(["orders"] * count),
            "partition": pa.array([0] * count, pa.int32()),
            "offset": pa.array(range(start, start + count), pa.int64()),
            "timestamp": pa.array([1_700_000_000_000 + i for i in range(count)], pa.int64()),
            "key": pa.nulls(count, pa.binary()),
            "value": pa.array(rows),
            "headers": pa.nulls(count, HEADERS),
        }
    )


def test_spark_reads_the_iceberg_table_the_sink_committed(spark: Any, tmp_path: Path) -> None:
    config = {
        "topics": "orders",
        "table.format": "iceberg",
        "iceberg.tables": "shop.orders",
        "iceberg.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
        "iceberg.catalog.warehouse": f"file://{tmp_path}/warehouse",
        "iceberg.tables.default-partition-by": "country",
        "include.kafka.metadata": "true",
    }
    connector = DataLakeSinkConnector()
    connector.start(config)
    task = connector.task_class()()
    task.start(connector.task_configs(1)[0])
    tp = TopicPartition("orders", 0)
    task.put_batch(sink_batch([{"id": 0, "country": "FR"}, {"id": 1, "country": "DE"}], 0))
    task.pre_commit({tp: 2})
    task.put_batch(sink_batch([{"id": 2, "country": "FR"}], 2))
    task.pre_commit({tp: 3})
    table = load_table(config)

    frame = read_iceberg(spark, table)
    rows = sorted((r["id"], r["country"], r["kafka_offset"]) for r in frame.collect())
    assert rows == [(0, "FR", 0), (1, "DE", 1), (2, "FR", 2)]
    assert sorted(frame.columns) == sorted(table.scan().to_arrow().column_names)
