"""File and directory connectors, their tasks called directly on real files (no Ray)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from file_tasks import OffsetStore, SinkContext, SourceContext, sink_batch

from raystream.connectors.api import SourceBatch
from raystream.connectors.file import (
    OFFSETS_DIR,
    DirectorySinkConnector,
    DirectorySinkTask,
    DirectorySourceConnector,
    FileSourceTask,
    FileStreamSinkConnector,
    FileStreamSinkTask,
    FileStreamSourceConnector,
    data_file_name,
    parse_data_file_name,
)
from raystream.errors import ConnectError, InvalidConfigError
from raystream.types import TopicPartition

TP = TopicPartition("orders", 0)


def source(config: dict[str, str], store: OffsetStore) -> FileSourceTask:
    task = FileSourceTask()
    task.context = SourceContext(store)
    task.start({"poll.interval.ms": "0", **config})
    return task


def drain(task: FileSourceTask, store: OffsetStore) -> list[SourceBatch]:
    """Poll until idle, committing each batch's offset as the framework does."""
    batches = []
    while (batch := task.poll()) is not None:
        store.commit(batch)
        batches.append(batch)
    return batches


def values(batches: list[SourceBatch]) -> list:
    return [v for b in batches for v in b.table.column("value").to_pylist()]


def test_file_stream_source_reads_lines_in_batches_waits_for_a_whole_line_and_resumes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.log"
    path.write_bytes(b"one\r\ntwo\nthree\n\nfive\nsix-with-no-newline-yet")
    store = OffsetStore()
    config = {"file": str(path), "topic": "logs", "batch.size": "2"}
    task = source(config, store)

    batches = drain(task, store)
    assert [b.table.num_rows for b in batches] == [2, 2, 1]
    assert values(batches) == ["one", "two", "three", "", "five"]
    assert batches[0].topic == "logs" and batches[0].source_partition == {"file": str(path)}
    assert store.committed[str(path)] == {"position": path.read_bytes().index(b"six")}

    with open(path, "ab") as handle:  # the writer finishes the line: the tail is read
        handle.write(b"\nseven\n")
    assert values(drain(task, store)) == ["six-with-no-newline-yet", "seven"]

    with open(path, "ab") as handle:
        handle.write(b"eight\n")
    restarted = source(config, store)  # a new task resumes at the committed position
    assert values(drain(restarted, store)) == ["eight"]


def test_source_rejects_lines_that_are_not_utf8_and_configs_that_cannot_work(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bad.log"
    path.write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(ConnectError, match="UTF-8"):
        source({"file": str(path), "topic": "t"}, OffsetStore()).poll()
    with pytest.raises(InvalidConfigError, match="topic"):
        FileStreamSourceConnector().validate({"file": str(path)})
    with pytest.raises(InvalidConfigError, match="format='xml'"):
        FileStreamSourceConnector().validate({"file": "f", "topic": "t", "format": "xml"})
    with pytest.raises(InvalidConfigError, match=r"batch\.size=0"):
        source({"file": str(path), "topic": "t", "batch.size": "0"}, OffsetStore())


def test_directory_source_reads_jsonl_and_csv_skips_hidden_files_and_finds_new_ones(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.jsonl").write_text('{"id": 1, "name": "x"}\n{"id": 2, "name": null}\n')
    (tmp_path / ".b.jsonl.tmp").write_text('{"id": 99}\n')
    (tmp_path / "_SUCCESS").write_text("")
    store = OffsetStore()
    task = source(
        {"directory": str(tmp_path), "pattern": "*.jsonl", "format": "jsonl", "topic": "t"}, store
    )
    assert values(drain(task, store)) == [{"id": 1, "name": "x"}, {"id": 2, "name": None}]

    (tmp_path / "c.jsonl").write_text('{"id": 3, "name": "z"}\n')
    assert values(drain(task, store)) == [{"id": 3, "name": "z"}]

    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    (csv_dir / "1.csv").write_text("id;city\n1;Paris\n2;Lyon\n")
    store = OffsetStore()
    config = {
        "directory": str(csv_dir),
        "format": "csv",
        "csv.delimiter": ";",
        "topic": "t",
        "batch.size": "1",
    }
    task = source(config, store)
    first = task.poll()
    store.commit(first)
    assert values([first]) == [{"id": 1, "city": "Paris"}]
    # resumed mid-file, the header is read again for the column names
    assert values(drain(source(config, store), store)) == [{"id": 2, "city": "Lyon"}]


def test_directory_source_tasks_share_the_files_between_them(tmp_path: Path) -> None:
    for i in range(12):
        (tmp_path / f"f{i:02d}.txt").write_text(f"line {i}\n")
    connector = DirectorySourceConnector()
    connector.start({"directory": str(tmp_path), "topic": "t"})
    configs = connector.task_configs(3)
    seen = [sorted(values(drain(source(c, OffsetStore()), OffsetStore()))) for c in configs]
    assert sorted(v for task_values in seen for v in task_values) == sorted(
        f"line {i}" for i in range(12)
    )
    assert all(seen), "every task got some of the twelve files"


def test_parquet_source_resumes_inside_a_row_group(tmp_path: Path) -> None:
    path = tmp_path / "part.parquet"
    pq.write_table(
        pa.table({"n": list(range(10)), "s": [str(i) for i in range(10)]}), path, row_group_size=4
    )
    store = OffsetStore()
    config = {"directory": str(tmp_path), "format": "parquet", "topic": "t", "batch.size": "3"}
    task = source(config, store)
    first = task.poll()
    store.commit(first)
    assert first.source_offset == {"row": 3}
    rest = drain(source(config, store), store)
    assert [row["n"] for row in values([first, *rest])] == list(range(10))
    assert [b.table.num_rows for b in rest] == [1, 3, 1, 2]  # row groups of 4, 4, 2


def test_file_stream_sink_appends_lines_csv_and_jsonl(tmp_path: Path) -> None:
    lines = tmp_path / "out.txt"
    task = FileStreamSinkTask()
    task.start({"file": str(lines)})
    task.put_batch(sink_batch(["a", None, "c"]))
    task.put_batch(sink_batch(pa.array([b"d"], pa.binary()), start=3))
    task.pre_commit({TP: 4})
    task.stop()
    assert lines.read_text() == "a\nnull\nc\nd\n"

    table = tmp_path / "out.csv"
    for start in (0, 2):  # a restarted task appends without a second header
        task = FileStreamSinkTask()
        task.start({"file": str(table), "format": "csv", "include.kafka.metadata": "true"})
        task.put_batch(
            sink_batch(
                [{"id": start, "city": "Paris"}, {"id": start + 1, "city": None}], start=start
            )
        )
        task.flush({TP: start + 2})
        task.stop()
    read = pa_csv.read_csv(table)
    assert read.column("id").to_pylist() == [0, 1, 2, 3]
    assert read.column("kafka_offset").to_pylist() == [0, 1, 2, 3]

    jsonl = tmp_path / "out.jsonl"
    task = FileStreamSinkTask()
    task.start({"file": str(jsonl), "format": "jsonl", "include.kafka.metadata": "true"})
    task.put_batch(
        sink_batch(
            [{"id": 1, "tags": ["x"], "n": None}, {"id": 2, "tags": [], "n": 2.5}],
            timestamps=[5, 6],
        )
    )
    task.stop()  # buffered lines reach the file on close too
    metadata = {"kafka_topic": "orders", "kafka_partition": 0}
    assert [json.loads(line) for line in jsonl.read_text().splitlines()] == [
        {**metadata, "kafka_offset": 0, "kafka_timestamp": 5, "id": 1, "tags": ["x"], "n": None},
        {**metadata, "kafka_offset": 1, "kafka_timestamp": 6, "id": 2, "tags": [], "n": 2.5},
    ]
    with pytest.raises(InvalidConfigError, match="format='parquet'"):
        FileStreamSinkConnector().validate({"file": "f", "format": "parquet"})


def directory_sink(directory: Path, **config: str) -> DirectorySinkTask:
    task = DirectorySinkTask()
    task.context = SinkContext([TP])
    task.start({"directory": str(directory), "topics": "orders", **config})
    task.open([TP])
    return task


def committed_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.is_file())


def test_directory_sink_rotates_by_records_and_at_each_commit(tmp_path: Path) -> None:
    task = directory_sink(tmp_path, format="parquet", **{"rotate.records": "4"})
    task.put_batch(sink_batch([{"n": i} for i in range(10)]))  # two files on their way
    assert task.pre_commit({TP: 10}) == {TP: 10}  # and the last two rows
    files = committed_files(tmp_path)
    assert files == [data_file_name(TP, offset, "parquet") for offset in (0, 4, 8)]
    assert files[-1] == "orders+0+00000000000000000008.parquet"
    assert [pq.read_table(tmp_path / f).num_rows for f in files] == [4, 4, 2]
    assert json.loads((tmp_path / OFFSETS_DIR / "orders+0.json").read_text())["next_offset"] == 10

    by_time = tmp_path / "by-time"
    task = directory_sink(by_time, format="jsonl", **{"rotate.interval.ms": "60000"})
    task.put_batch(sink_batch(["a", "b", "c", "d"], timestamps=[0, 30_000, 60_000, 130_000]))
    task.pre_commit({TP: 4})
    assert [(by_time / f).read_text() for f in committed_files(by_time)] == [
        '{"value":"a"}\n{"value":"b"}\n',
        '{"value":"c"}\n',
        '{"value":"d"}\n',
    ]
    with pytest.raises(InvalidConfigError, match=r"rotate\.records"):
        DirectorySinkConnector().validate({"directory": "d", "rotate.records": "x"})


def test_directory_sink_killed_between_data_and_offsets_neither_loses_nor_duplicates(
    tmp_path: Path,
) -> None:
    task = directory_sink(tmp_path, format="csv")
    task.put_batch(sink_batch([{"n": i} for i in range(3)]))
    assert task.pre_commit({TP: 3}) == {TP: 3}

    # The fault: the offsets file cannot be replaced (a directory stands where its
    # temporary file goes), so the task dies after renaming its second data file.
    blocker = tmp_path / OFFSETS_DIR / ".orders+0.json.tmp"
    blocker.mkdir()
    task.put_batch(sink_batch([{"n": i} for i in range(3, 5)], start=3))
    with pytest.raises(IsADirectoryError):
        task.pre_commit({TP: 5})
    orphan = data_file_name(TP, 3, "csv")
    assert orphan in committed_files(tmp_path), "the fault hit between the two renames"
    (tmp_path / ".orders+0+00000000000000000007.csv.tmp").write_text("torn")  # an older crash
    blocker.rmdir()

    restarted = directory_sink(tmp_path, format="csv")  # open: rewinds and cleans up
    assert restarted.context.rewound == {TP: 3}
    assert committed_files(tmp_path) == [data_file_name(TP, 0, "csv")]
    restarted.put_batch(sink_batch([{"n": i} for i in range(3, 6)], start=3))  # redelivered
    restarted.pre_commit({TP: 6})
    rows = [
        pa_csv.read_csv(tmp_path / f).column("n").to_pylist() for f in committed_files(tmp_path)
    ]
    assert [n for file_rows in rows for n in file_rows] == list(range(6))


def test_directory_sink_files_read_back_by_the_directory_source_in_offset_order(
    tmp_path: Path,
) -> None:
    task = directory_sink(tmp_path, format="parquet", **{"rotate.records": "3"})
    task.put_batch(sink_batch([{"n": i, "s": f"v{i}"} for i in range(8)]))
    task.close([TP])  # dropped, not written: the next owner is handed them again
    assert task.pre_commit({}) == {}
    task = directory_sink(tmp_path, format="parquet", **{"rotate.records": "3"})
    assert task.context.rewound == {TP: 6}
    task.put_batch(sink_batch([{"n": i, "s": f"v{i}"} for i in range(6, 11)], start=6))
    task.pre_commit({TP: 11})
    store = OffsetStore()
    read = source({"directory": str(tmp_path), "format": "parquet", "topic": "t"}, store)
    assert [row["n"] for row in values(drain(read, store))] == list(range(11))


def test_data_file_names_round_trip_with_dotted_topics() -> None:
    tp = TopicPartition("eu.orders+v1", 12)
    name = data_file_name(tp, 345, "jsonl")
    assert parse_data_file_name(name) == (tp, 345)
    assert parse_data_file_name(f".{name}.tmp") == (tp, 345)
    assert parse_data_file_name("part-0000.parquet") is None
    assert os.sep not in name
