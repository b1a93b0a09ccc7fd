"""A file to a topic to a partitioned Parquet lake and an Iceberg table, on a real Ray:
the file and data-lake connectors run by Connect's workers, read back by pyarrow and
pyiceberg (Spark's read of such a table: tests/spark/test_iceberg_spark.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from raystream.connect.datalake import load_table
from raystream.errors import ConnectError

pytestmark = pytest.mark.slow

RECORDS = 3000
COUNTRIES = ("FR", "DE", "IT")


def test_a_jsonl_file_lands_once_in_a_parquet_lake_and_an_iceberg_table(
    shared_cluster: Any, make_topic: Callable[..., str], tmp_path: Path, wait_until
) -> None:
    from raystream.connect import Workers

    source_file = tmp_path / "orders.jsonl"
    with open(source_file, "w") as handle:
        for i in range(RECORDS):
            handle.write(json.dumps({"id": i, "country": COUNTRIES[i % 3], "amount": i / 2}) + "\n")
    topic = make_topic(partitions=2)
    lake = tmp_path / "lake"
    iceberg = {
        "table.format": "iceberg",
        "iceberg.tables": "shop.orders",
        "iceberg.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
        "iceberg.catalog.warehouse": f"file://{tmp_path}/warehouse",
    }
    workers = Workers(shared_cluster, group_id="files", num_workers=1)
    try:
        workers.create(
            "orders-in",
            {
                "connector.class": "raystream.connect.file.FileStreamSourceConnector",
                "file": str(source_file),
                "format": "jsonl",
                "topic": topic,
                "batch.size": "500",
            },
        )
        common = {"topics": topic, "offset.flush.interval.ms": "1000", "tasks.max": "2"}
        workers.create(
            "orders-lake",
            {
                "connector.class": "raystream.connect.datalake.DataLakeSinkConnector",
                "directory": str(lake),
                "partitioner": "field",
                "partition.field.name": "country",
                **common,
            },
        )
        workers.create(
            "orders-iceberg",
            {
                "connector.class": "raystream.connect.datalake.DataLakeSinkConnector",
                **iceberg,
                **common,
            },
        )

        def lake_rows() -> int:
            return (
                ds.dataset(lake, format="parquet", partitioning="hive").count_rows()
                if lake.exists()
                else 0
            )

        def iceberg_rows() -> int:
            try:
                return load_table(iceberg).scan().to_arrow().num_rows
            except ConnectError:  # not created yet
                return 0

        def statuses() -> dict[str, Any]:
            return {name: workers.status(name) for name in workers.list()}

        wait_until(
            lambda: lake_rows() >= RECORDS,
            120,
            f"{RECORDS} rows in the Parquet lake",
            detail=lambda: (lake_rows(), statuses()),
        )
        wait_until(
            lambda: iceberg_rows() >= RECORDS,
            120,
            f"{RECORDS} rows in the Iceberg table",
            detail=lambda: (iceberg_rows(), statuses()),
        )
    finally:
        workers.shutdown()

    read = ds.dataset(lake, format="parquet", partitioning="hive").to_table()
    assert sorted(read.column("id").to_pylist()) == list(range(RECORDS))
    assert sorted({str(p.relative_to(lake).parts[0]) for p in lake.rglob("*.parquet")}) == [
        f"country={c}" for c in sorted(COUNTRIES)
    ]
    rows = load_table(iceberg).scan().to_arrow().sort_by("id")
    assert rows.column("id").to_pylist() == list(range(RECORDS))
    assert rows.column("country").to_pylist() == [COUNTRIES[i % 3] for i in range(RECORDS)]
