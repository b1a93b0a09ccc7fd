"""The record layout of topics: building batches and reading them back (no Ray)."""

from __future__ import annotations

import gc

import pyarrow as pa
import pytest

from raystream.errors import InvalidRecordError
from raystream.records import (
    BYTES_SCHEMA,
    batch_from_table,
    build_batch,
    consumer_records,
    record_schema,
    to_user_table,
)
from raystream.types import ConsumerRecord

TYPED = pa.schema([("item", pa.string()), ("amount", pa.float64())])


def with_offsets(batch: pa.RecordBatch, first: int = 0) -> pa.Table:
    table = pa.Table.from_batches([batch])
    return table.append_column("offset", pa.array(range(first, first + table.num_rows), pa.int64()))


def to_consumer_records(table: pa.Table, topic: str, partition: int, timestamp_type: int, **kw):
    offsets = table.column("offset").to_numpy()
    return consumer_records(
        table,
        offsets,
        topic,
        partition,
        timestamp_type,
        kw.get("key_deserializer"),
        kw.get("value_deserializer"),
    )


def test_byte_records_round_trip_to_consumer_records() -> None:
    batch = build_batch(BYTES_SCHEMA, [b"k", None], [b"v", None], [10, 11], [[("h", b"1")], None])
    records = to_consumer_records(with_offsets(batch, 5), "t", 2, 0)
    assert records == [
        ConsumerRecord("t", 2, 5, 10, 0, b"k", b"v", (("h", b"1"),)),
        ConsumerRecord("t", 2, 6, 11, 0, None, None, ()),
    ]


def test_records_are_immutable_all_the_way_down() -> None:
    """Headers are tuples, so records are hashable and records without headers share
    one empty tuple: no list per record for the garbage collector to track."""
    batch = build_batch(BYTES_SCHEMA, [b"k", None], [b"v", None], [10, 11], [[("h", b"1")], None])
    records = to_consumer_records(with_offsets(batch, 5), "t", 2, 0)
    assert len(set(records)) == 2
    assert not gc.is_tracked(records[1].headers)


def test_deserializers_apply_to_non_null_keys_and_values() -> None:
    batch = build_batch(BYTES_SCHEMA, [b"1", None], [b"a", None], [0, 0], None)
    records = to_consumer_records(
        with_offsets(batch), "t", 0, 1, key_deserializer=int, value_deserializer=bytes.upper
    )
    assert [(r.key, r.value, r.timestamp_type) for r in records] == [(1, b"A", 1), (None, None, 1)]


def test_typed_values_are_columns_and_come_back_as_dicts() -> None:
    schema = record_schema(TYPED)
    batch = build_batch(schema, [None], [{"item": "pen", "amount": 2.5}], [1], None)
    assert batch.schema.field("value").type == pa.struct(list(TYPED))
    (record,) = to_consumer_records(with_offsets(batch), "t", 0, 0)
    assert record.value == {"item": "pen", "amount": 2.5}
    table = to_user_table(with_offsets(batch), "t", 0)
    assert table.column_names == [
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "item",
        "amount",
        "headers",
    ]


def test_a_value_that_does_not_fit_the_schema_is_named() -> None:
    schema = record_schema(TYPED)
    with pytest.raises(InvalidRecordError, match=r"record 1: value .*'amount': 'lots'"):
        build_batch(
            schema,
            [None, None],
            [{"item": "a", "amount": 1.0}, {"item": "b", "amount": "lots"}],
            [0, 0],
            None,
        )


def test_send_batch_tables_take_value_key_and_timestamp_columns() -> None:
    table = pa.table({"value": ["a", "b"], "id": [b"x", b"y"], "timestamp": [5, 6]})
    batch = batch_from_table(table, BYTES_SCHEMA, "id", now_ms=99)
    assert batch.schema == BYTES_SCHEMA
    assert batch.column("value").to_pylist() == [b"a", b"b"]
    assert batch.column("key").to_pylist() == [b"x", b"y"]
    assert batch.column("timestamp").to_pylist() == [5, 6]


def test_send_batch_fills_missing_timestamps_with_now() -> None:
    batch = batch_from_table(pa.table({"value": [b"a"]}), BYTES_SCHEMA, None, now_ms=99)
    assert batch.column("timestamp").to_pylist() == [99]
    assert batch.column("key").to_pylist() == [None]


def test_send_batch_takes_one_chunk_columns_without_copying_and_joins_chunked_ones() -> None:
    values = pa.array([b"v" * 100] * 1000)
    batch = batch_from_table(pa.table({"value": values}), BYTES_SCHEMA, None, now_ms=99)
    assert batch.column("value").buffers()[2].address == values.buffers()[2].address
    chunked = pa.Table.from_batches([pa.record_batch({"value": [b"a"], "timestamp": [1]})] * 3)
    batch = batch_from_table(chunked, BYTES_SCHEMA, None, now_ms=99)
    assert batch.column("value").to_pylist() == [b"a"] * 3
    assert batch.column("timestamp").to_pylist() == [1] * 3


def test_send_batch_of_a_typed_topic_takes_the_schema_columns() -> None:
    table = pa.table({"amount": [1, 2], "item": ["a", "b"]})
    batch = batch_from_table(table, record_schema(TYPED), None, now_ms=0)
    assert batch.column("value").to_pylist() == [
        {"item": "a", "amount": 1.0},
        {"item": "b", "amount": 2.0},
    ]


@pytest.mark.parametrize(
    ("table", "schema", "key", "message"),
    [
        (pa.table({"v": [b"a"]}), BYTES_SCHEMA, None, "needs a 'value' column"),
        (pa.table({"value": [1]}), BYTES_SCHEMA, None, "must be binary or string"),
        (pa.table({"value": [b"a"]}), BYTES_SCHEMA, "nope", "key_column 'nope'"),
        (
            pa.table({"item": ["a"]}),
            record_schema(TYPED),
            None,
            r"lacks the topic's columns \['amount'\]",
        ),
        (pa.table({"item": ["a"], "amount": ["x"]}), record_schema(TYPED), None, "does not fit"),
        ([1, 2], BYTES_SCHEMA, None, "not list"),
        (pa.table({"value": [b"a"], "headers": ["h=1"]}), BYTES_SCHEMA, None, "column 'headers'"),
        (
            pa.table({"value": [b"a"], "timestamp": ["yesterday"]}),
            BYTES_SCHEMA,
            None,
            "column 'timestamp' must hold integer milliseconds",
        ),
    ],
)
def test_send_batch_input_errors_name_the_problem(table, schema, key, message) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        batch_from_table(table, schema, key, now_ms=0)
