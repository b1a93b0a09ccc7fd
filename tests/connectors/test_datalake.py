"""The data-lake sink, its tasks called directly: Hive-partitioned Parquet on real disk and
an Iceberg table in a real SQLite catalog (no Ray)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from file_tasks import SinkContext, sink_batch

from raystream.connectors.datalake import (
    HIVE_NULL,
    DataLakeSinkConnector,
    DataLakeSinkTask,
    IcebergSinkTask,
    hive_escape,
    load_table,
)
from raystream.connectors.file import OFFSETS_DIR
from raystream.errors import ConnectError, InvalidConfigError
from raystream.types import TopicPartition

P0 = TopicPartition("orders", 0)
P1 = TopicPartition("orders", 1)
ORDERS = [
    {"id": 0, "country": "FR", "city": "Paris", "amount": 1.5},
    {"id": 1, "country": "DE", "city": "Berlin", "amount": 2.0},
    {"id": 2, "country": "FR", "city": "Lyon/Centre", "amount": 3.25},
    {"id": 3, "country": None, "city": "?", "amount": 4.0},
]


def lake_task(directory: Path, partitions=(P0,), **config: str) -> DataLakeSinkTask:
    connector = DataLakeSinkConnector()
    connector.start({"directory": str(directory), "topics": "orders", **config})
    task = connector.task_class()()
    task.context = SinkContext(partitions)
    task.start(connector.task_configs(1)[0])
    task.open(list(partitions))
    return task


def test_field_partitions_are_hive_directories_read_back_by_pyarrow(tmp_path: Path) -> None:
    task = lake_task(tmp_path, partitioner="field", **{"partition.field.name": "country,city"})
    task.put_batch(sink_batch(ORDERS))
    assert task.pre_commit({P0: 4}) == {P0: 4}
    dirs = sorted(
        str(p.parent.relative_to(tmp_path))
        for p in tmp_path.rglob("*.parquet")
        if OFFSETS_DIR not in p.parts
    )
    assert dirs == [
        "country=DE/city=Berlin",
        "country=FR/city=Lyon%2FCentre",
        "country=FR/city=Paris",
        f"country={HIVE_NULL}/city=%3F",
    ]
    one = next(tmp_path.rglob("*.parquet"))
    assert pq.read_table(one).column_names == ["id", "amount"]  # the directories say the rest
    read = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert sorted(read.column("id").to_pylist()) == [0, 1, 2, 3]
    assert hive_escape("a=b/c") == "a%3Db%2Fc"


def test_time_partitions_by_record_time_or_a_value_field(tmp_path: Path) -> None:
    hour = 3_600_000
    task = lake_task(tmp_path / "record", partitioner="time")
    task.put_batch(sink_batch(ORDERS[:3], timestamps=[0, hour - 1, 25 * hour]))
    task.pre_commit({P0: 3})
    dirs = sorted(
        str(p.parent.relative_to(tmp_path / "record"))
        for p in (tmp_path / "record").rglob("*.parquet")
    )
    assert dirs == ["year=1970/month=01/day=01/hour=00", "year=1970/month=01/day=02/hour=01"]

    task = lake_task(
        tmp_path / "field",
        partitioner="time",
        **{"timestamp.field": "at", "path.format": "dt=%Y-%m-%d"},
    )
    task.put_batch(sink_batch([{"at": 0, "n": 1}, {"at": 86_400_000, "n": 2}]))
    task.pre_commit({P0: 2})
    assert sorted(p.parent.name for p in (tmp_path / "field").rglob("*.parquet")) == [
        "dt=1970-01-01",
        "dt=1970-01-02",
    ]
    with pytest.raises(InvalidConfigError, match="partition"):
        lake_task(tmp_path / "bad", partitioner="field")


def test_partitioned_commit_killed_midway_is_undone_on_open(tmp_path: Path) -> None:
    config = {"partitioner": "field", "partition.field.name": "country"}
    task = lake_task(tmp_path, **config)
    task.put_batch(sink_batch(ORDERS[:2]))
    task.pre_commit({P0: 2})
    # The fault: the second commit's FR file cannot be renamed into place (a directory
    # stands at its name), after its DE file was; the task dies mid-commit.
    blocked = tmp_path / "country=FR" / "orders+0+00000000000000000002.parquet"
    blocked.mkdir(parents=True)
    task.put_batch(sink_batch([ORDERS[1], ORDERS[2]], start=2))
    with pytest.raises(OSError):
        task.pre_commit({P0: 4})
    assert (tmp_path / "country=DE" / "orders+0+00000000000000000002.parquet").is_file()
    blocked.rmdir()

    restarted = lake_task(tmp_path, **config)
    assert restarted.context.rewound == {P0: 2}
    restarted.put_batch(sink_batch([ORDERS[1], ORDERS[2], ORDERS[0]], start=2))
    restarted.pre_commit({P0: 5})
    read = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert sorted(read.column("id").to_pylist()) == [0, 0, 1, 1, 2]  # offsets 0..4 once each


def iceberg_config(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "name": "lake",
        "topics": "orders",
        "table.format": "iceberg",
        "iceberg.tables": "shop.orders",
        "iceberg.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
        "iceberg.catalog.warehouse": f"file://{tmp_path}/warehouse",
        **extra,
    }


def iceberg_task(config: dict[str, str], partitions=(P0, P1)) -> DataLakeSinkTask:
    connector = DataLakeSinkConnector()
    connector.start(config)
    task = connector.task_class()()
    task.context = SinkContext(partitions)
    task.start(connector.task_configs(1)[0])
    task.open(list(partitions))
    return task


def test_iceberg_commits_data_and_offsets_in_one_snapshot_and_resumes_there(
    tmp_path: Path,
) -> None:
    config = iceberg_config(
        tmp_path,
        **{"include.kafka.metadata": "true", "iceberg.tables.default-partition-by": "country"},
    )
    task = iceberg_task(config)
    assert task.context.rewound == {}
    task.put_batch(pa.concat_tables([sink_batch(ORDERS[:2]), sink_batch(ORDERS[2:], partition=1)]))
    assert task.pre_commit({P0: 2, P1: 2}) == {P0: 2, P1: 2}

    table = load_table(config)
    summary = table.current_snapshot().summary.additional_properties
    assert summary["raystream.connectors.offsets.lake"] == '{"orders": {"0": 2, "1": 2}}'
    rows = table.scan().to_arrow().sort_by("id")
    assert rows.column("id").to_pylist() == [0, 1, 2, 3]
    assert rows.column("kafka_partition").to_pylist() == [0, 0, 1, 1]
    assert str(table.spec().fields[0].transform) == "identity"

    # Killed with records given but not committed: they are not in the table, and the
    # next task rewinds to the committed offsets and is handed them again.
    task.put_batch(sink_batch([{"id": 4, "country": "IT", "city": "Rome", "amount": 0.5}], start=2))
    task.stop()
    restarted = iceberg_task(config)
    assert restarted.context.rewound == {P0: 2, P1: 2}
    restarted.put_batch(
        sink_batch([{"id": 4, "country": "IT", "city": "Rome", "amount": 0.5}], start=2)
    )
    restarted.pre_commit({P0: 3, P1: 2})
    ids = load_table(config).scan().to_arrow().column("id").to_pylist()
    assert sorted(ids) == [0, 1, 2, 3, 4]


def test_iceberg_tasks_keep_each_others_offsets_and_schema_changes_are_explicit(
    tmp_path: Path,
) -> None:
    config = iceberg_config(tmp_path)
    first, second = iceberg_task(config, [P0]), iceberg_task(config, [P1])
    first.put_batch(sink_batch([{"id": 0}]))
    first.pre_commit({P0: 1})
    second.put_batch(sink_batch([{"id": 1}], partition=1))
    second.pre_commit({P1: 1})
    assert iceberg_task(config).context.rewound == {P0: 1, P1: 1}

    first.put_batch(sink_batch([{"id": 2, "note": "new field"}], start=1))
    with pytest.raises(ConnectError, match="evolve-schema-enabled"):
        first.pre_commit({P0: 2})
    evolving = iceberg_task({**config, "iceberg.tables.evolve-schema-enabled": "true"}, [P0])
    evolving.put_batch(sink_batch([{"id": 2, "note": "new field"}], start=1))
    evolving.pre_commit({P0: 2})
    rows = load_table(config).scan().to_arrow().sort_by("id")
    assert rows.column("note").to_pylist() == [None, None, "new field"]


def test_an_iceberg_commit_that_loses_a_race_keeps_every_partitions_offsets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = iceberg_config(tmp_path)
    second = iceberg_task(config, [P1])

    class Raced(IcebergSinkTask):
        """Another task commits between this one's load of the table and its append."""

        loads = 0

        def _load(self) -> Any:
            table = super()._load()
            self.loads += 1
            if self.loads == 2:  # the write's load (open's was the first)
                second.put_batch(sink_batch([{"id": 1}], partition=1))
                second.pre_commit({P1: 1})
            return table

    first = iceberg_task(config, [P0])
    first.put_batch(sink_batch([{"id": 0}]))
    first.pre_commit({P0: 1})  # creates the table
    raced = Raced()
    raced.context = SinkContext([P0])
    raced.start(config)
    raced.open([P0])
    raced.put_batch(sink_batch([{"id": 2}], start=1))
    assert raced.pre_commit({P0: 2}) == {P0: 2}
    assert raced.loads >= 2, "the other commit came in the middle of this one"
    assert any("concurrent update" in r.getMessage() for r in caplog.records), (
        "pyiceberg saw the conflict and retried the append"
    )
    table = load_table(config)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, 1, 2]
    assert [s.parent_snapshot_id for s in table.snapshots()][1:] == [
        s.snapshot_id for s in table.snapshots()
    ][:-1]
    assert iceberg_task(config).context.rewound == {P0: 2, P1: 1}
