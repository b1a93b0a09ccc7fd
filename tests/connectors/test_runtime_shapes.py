"""Pure tests of the runtime's batch shapes and the CLI's config files (no Ray)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from raystream.cli.connect import read_config_file
from raystream.connectors.api import SourceBatch, SourceRecord, partition_runs
from raystream.connectors.file import split_partitions
from raystream.connectors.runtime import _next_offsets, _to_topic_table, sink_batch, source_table
from raystream.errors import ConnectError, InvalidConfigError
from raystream.records import HEADERS_TYPE
from raystream.types import TopicPartition


def polled(**value_columns: pa.Array) -> pa.Table:
    """A poll_arrow-shaped table of two records of partition 1, then one of partition 0."""
    return pa.table(
        {
            "topic": ["t", "t", "t"],
            "partition": pa.array([1, 1, 0], pa.int32()),
            "offset": pa.array([5, 6, 9], pa.int64()),
            "timestamp": pa.array([1, 2, 3], pa.int64()),
            "key": pa.array([b"k", None, b"j"], pa.binary()),
            **value_columns,
            "headers": pa.array([[], [{"key": "h", "value": b"v"}], []], HEADERS_TYPE),
        }
    )


def test_a_typed_topics_columns_become_one_struct_value_for_sinks() -> None:
    batch = sink_batch(polled(x=pa.array([1, 2, 3]), y=pa.array(["a", "b", "c"])))
    assert batch.column_names == [
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
        "headers",
    ]
    assert batch.column("value").to_pylist()[0] == {"x": 1, "y": "a"}
    byte_batch = sink_batch(polled(value=pa.array([b"1", b"2", b"3"])))
    assert byte_batch.column("value").to_pylist() == [b"1", b"2", b"3"]


def test_the_next_offsets_of_a_sink_batch_are_per_partition() -> None:
    batch = sink_batch(polled(value=pa.array([b"1", b"2", b"3"])))
    assert _next_offsets(batch) == {TopicPartition("t", 1): 7, TopicPartition("t", 0): 10}


def routed() -> pa.Table:
    """A sink batch whose rows a routing transform interleaved: t-1, t-1, u-1, t-0, t-1."""
    return pa.table(
        {
            "topic": pa.chunked_array([["t", "t"], ["u", "t", "t"]]),
            "partition": pa.array([1, 1, 1, 0, 1], pa.int32()),
            "offset": pa.array([3, 4, 5, 8, 6], pa.int64()),
        }
    )


def test_partition_runs_follow_topic_and_partition_changes_in_batch_order() -> None:
    t0, t1, u1 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 1)
    assert partition_runs(routed()) == [(t1, 0, 2), (u1, 2, 3), (t0, 3, 4), (t1, 4, 5)]
    assert partition_runs(routed().slice(3, 1)) == [(t0, 0, 1)]
    assert partition_runs(routed().slice(0, 0)) == []


def test_a_partition_in_several_runs_is_split_out_whole_and_in_order() -> None:
    parts = {tp: rows.column("offset").to_pylist() for tp, rows in split_partitions(routed())}
    assert parts == {
        TopicPartition("t", 1): [3, 4, 6],
        TopicPartition("u", 1): [5],
        TopicPartition("t", 0): [8],
    }
    assert list(parts) == [TopicPartition("t", 1), TopicPartition("u", 1), TopicPartition("t", 0)]
    assert _next_offsets(routed()) == {
        TopicPartition("t", 1): 7,
        TopicPartition("u", 1): 6,
        TopicPartition("t", 0): 9,
    }


def test_records_and_batches_of_a_source_give_rows_and_the_latest_offsets() -> None:
    records = [
        SourceRecord({"f": "a"}, {"pos": 1}, "t", value=b"x"),
        SourceRecord({"f": "b"}, {"pos": 7}, "u", value=b"y", partition=2),
        SourceRecord({"f": "a"}, {"pos": 2}, "t", value=b"z"),
    ]
    rows, offsets = source_table(records)
    assert rows.column("topic").to_pylist() == ["t", "u", "t"]
    assert rows.column("partition").to_pylist() == [None, 2, None]
    assert offsets == {'{"f":"a"}': {"pos": 2}, '{"f":"b"}': {"pos": 7}}
    table = pa.table({"value": pa.array([b"1", b"2"])})
    rows, offsets = source_table(SourceBatch({"f": "c"}, {"pos": 2}, "v", table))
    assert rows.column("topic").to_pylist() == ["v", "v"] and offsets == {'{"f":"c"}': {"pos": 2}}


def test_rows_for_a_typed_topic_unpack_their_struct_value() -> None:
    rows = pa.table(
        {
            "topic": ["t"],
            "value": pa.array([{"x": 1, "y": "a"}]),
            "key": pa.array([b"k"]),
        }
    )
    typed = _to_topic_table(rows, typed=True)
    assert typed.column_names == ["x", "y", "key"] and typed.column("x").to_pylist() == [1]
    with pytest.raises(ConnectError, match="struct values"):
        _to_topic_table(pa.table({"topic": ["t"], "value": [b"raw"]}), typed=True)


def test_config_files_are_json_rest_bodies_json_objects_or_properties(tmp_path) -> None:
    body = tmp_path / "a.json"
    body.write_text(json.dumps({"name": "a", "config": {"connector.class": "X", "tasks.max": 2}}))
    assert read_config_file(str(body)) == ("a", {"connector.class": "X", "tasks.max": 2})
    plain = tmp_path / "b.json"
    plain.write_text(json.dumps({"connector.class": "X"}))
    assert read_config_file(str(plain)) == (None, {"connector.class": "X"})
    props = tmp_path / "c.properties"
    props.write_text(
        "# a comment\nname=c\nconnector.class = X\ntopics=a,\\\n    b\nurl=http://h:1/x\n"
        "csv.delimiter \\t\n"
    )
    assert read_config_file(str(props)) == (
        "c",
        {
            "name": "c",
            "connector.class": "X",
            "topics": "a,b",
            "url": "http://h:1/x",
            "csv.delimiter": "\t",
        },
    )
    bad = tmp_path / "d.properties"
    bad.write_text("topics = \\uZZZZ\n")
    with pytest.raises(InvalidConfigError, match=r"d\.properties.*\\uZZZZ"):
        read_config_file(str(bad))
