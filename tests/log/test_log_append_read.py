"""Append and read: offsets, byte and offset limits, schemas, metadata, compression."""

from __future__ import annotations

import decimal
import os
import re
import subprocess
import sys

import pyarrow as pa
import pytest

from raystream.errors import (
    IllegalStateError,
    InvalidRecordError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from raystream.log import OFFSET_COLUMN

START = 1_700_000_000_000
"""The fake clock's start (see conftest)."""


def values_of(table: pa.Table) -> list:
    return table.column("value").to_pylist()


def offsets_of(table: pa.Table) -> list[int]:
    return table.column(OFFSET_COLUMN).to_pylist()


def test_importing_the_log_does_not_import_ray():
    code = "import raystream.log, sys; assert 'ray' not in sys.modules, 'ray was imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_ray_init_is_refused_in_log_tests():
    ray = pytest.importorskip("ray")
    with pytest.raises(AssertionError, match="must not be called"):
        ray.init()


def test_append_assigns_consecutive_offsets_and_returns_first_and_last(make_log, batch):
    log = make_log()
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.append(batch(["a", "b", "c"])) == (0, 2)
    assert log.append(batch(["d"])) == (3, 3)
    assert log.append(batch(["e", "f"])) == (4, 5)
    assert log.log_end_offset == 6


def test_read_returns_rows_with_int64_offset_column(make_log, batch):
    log = make_log()
    log.append(batch(["a", "b", "c"]))
    log.append(batch(["d", "e"]))
    table = log.read(0)
    assert table.schema.field(OFFSET_COLUMN).type == pa.int64()
    assert table.column_names == ["value", OFFSET_COLUMN]
    assert values_of(table) == ["a", "b", "c", "d", "e"]
    assert offsets_of(table) == [0, 1, 2, 3, 4]


def test_read_from_the_middle_of_a_batch(make_log, batch):
    log = make_log()
    log.append(batch(["a", "b", "c", "d"]))
    log.append(batch(["e", "f"]))
    table = log.read(2)
    assert offsets_of(table) == [2, 3, 4, 5]
    assert values_of(table) == ["c", "d", "e", "f"]
    table = log.read(5)
    assert offsets_of(table) == [5]


def test_read_of_a_table_argument_appends_one_batch(make_log, batch):
    log = make_log()
    table = pa.Table.from_batches([batch([1, 2]), batch([3])])
    assert log.append(table) == (0, 2)
    assert len(log.read_batches(0)) == 1
    assert values_of(log.read(0)) == [1, 2, 3]


def test_max_bytes_stops_at_whole_batches(make_log, batch):
    log = make_log()
    for i in range(5):
        log.append(batch([f"v{i}-{j}" for j in range(10)]))
    stored = log.read_batches(0)
    sizes = [b.header.size for b in stored]
    assert len(sizes) == 5
    # Exactly two batches fit; one byte less and only one does.
    two = sizes[0] + sizes[1]
    assert offsets_of(log.read(0, max_bytes=two)) == list(range(20))
    assert offsets_of(log.read(0, max_bytes=two - 1)) == list(range(10))
    assert len(log.read_batches(0, max_bytes=two)) == 2
    # Starting inside a batch still counts that whole batch.
    assert offsets_of(log.read(15, max_bytes=two)) == list(range(15, 30))


def test_max_bytes_always_returns_at_least_one_batch(make_log, batch):
    log = make_log()
    log.append(batch(["x" * 1000] * 5))
    log.append(batch(["y"]))
    for max_bytes in (0, 1, 100):
        table = log.read(0, max_bytes=max_bytes)
        assert offsets_of(table) == [0, 1, 2, 3, 4]
    assert offsets_of(log.read(3, max_bytes=1)) == [3, 4]


def test_max_offset_is_never_passed(make_log, batch):
    log = make_log()
    log.append(batch(list(range(10))))
    log.append(batch(list(range(10, 20))))
    assert offsets_of(log.read(0, max_offset=7)) == list(range(7))
    assert offsets_of(log.read(5, max_offset=15)) == list(range(5, 15))
    assert offsets_of(log.read(0, max_offset=10)) == list(range(10))
    assert offsets_of(log.read(0, max_offset=100)) == list(range(20))
    stored = log.read_batches(0, max_offset=10)
    assert [b.header.base_offset for b in stored] == [0]


def test_read_at_or_past_max_offset_is_empty(make_log, batch):
    log = make_log()
    log.append(batch([1, 2, 3]))
    for start, max_offset in ((2, 2), (3, 1), (0, 0)):
        table = log.read(start, max_offset=max_offset)
        assert table.num_rows == 0
        assert table.column_names == [OFFSET_COLUMN]
    assert log.read_batches(1, max_offset=1) == []


def test_read_at_log_end_returns_an_empty_table(make_log, batch):
    log = make_log()
    assert log.read(0).num_rows == 0
    log.append(batch(["a", "b"]))
    table = log.read(2)
    assert table.num_rows == 0
    assert table.column_names == [OFFSET_COLUMN]
    assert table.schema.field(OFFSET_COLUMN).type == pa.int64()


def test_read_outside_the_log_raises_offset_out_of_range(make_log, batch):
    log = make_log()
    log.append(batch(list(range(10))))
    log.roll()
    log.append(batch(list(range(10))))
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 21 is out of range \[0, 20\]"):
        log.read(21)
    with pytest.raises(OffsetOutOfRangeError):
        log.read_batches(1000)
    log.delete_records_before(10)
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 9 is out of range \[10, 20\]"):
        log.read(9)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1)
    assert offsets_of(log.read(10))[0] == 10


def test_non_integer_start_offset_is_an_invalid_request(make_log, batch):
    log = make_log()
    log.append(batch([1]))
    for bad in ("0", 0.0, True, None):
        with pytest.raises(InvalidRequestError):
            log.read(bad)


def test_any_schema_round_trips(make_log):
    log = make_log()
    schema = pa.schema(
        [
            ("i8", pa.int8()),
            ("u64", pa.uint64()),
            ("f", pa.float64()),
            ("flag", pa.bool_()),
            ("s", pa.large_string()),
            ("b", pa.binary()),
            ("d", pa.decimal128(10, 3)),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("tags", pa.list_(pa.string())),
            ("point", pa.struct([("x", pa.float32()), ("y", pa.float32())])),
            ("attrs", pa.map_(pa.string(), pa.int32())),
            ("color", pa.dictionary(pa.int8(), pa.string())),
        ]
    )
    rows = [
        {
            "i8": -3,
            "u64": 2**63 + 5,
            "f": 1.5,
            "flag": True,
            "s": "héllo",
            "b": b"\x00\xff",
            "d": "12.345",
            "ts": 1_700_000_000_000_000,
            "tags": ["a", "b"],
            "point": {"x": 1.0, "y": 2.0},
            "attrs": [("k", 1)],
            "color": "red",
        },
        {
            "i8": None,
            "u64": 0,
            "f": None,
            "flag": False,
            "s": "",
            "b": None,
            "d": None,
            "ts": None,
            "tags": [],
            "point": None,
            "attrs": [],
            "color": "blue",
        },
    ]
    rows[0]["d"] = decimal.Decimal("12.345")
    original = pa.Table.from_pylist(rows, schema=schema)
    log.append(original)
    table = log.read(0)
    assert table.schema.remove(table.schema.get_field_index(OFFSET_COLUMN)) == schema
    assert table.drop_columns([OFFSET_COLUMN]).equals(original)


def test_schema_change_between_batches_one_read_returns_one_schema(make_log, batch):
    log = make_log()
    log.append(batch(["a", "b"]))
    log.append(batch(["c"]))
    log.append(pa.record_batch({"value": pa.array([1, 2], pa.int64()), "extra": [True, False]}))
    log.append(
        pa.record_batch({"value": pa.array([3], pa.int64()), "extra": pa.array([None], pa.bool_())})
    )
    log.append(batch(["d"]))

    first = log.read(0)
    assert values_of(first) == ["a", "b", "c"]
    assert offsets_of(first) == [0, 1, 2]
    second = log.read(3)
    assert second.column_names == ["value", "extra", OFFSET_COLUMN]
    assert values_of(second) == [1, 2, 3]
    assert offsets_of(second) == [3, 4, 5]
    third = log.read(6)
    assert values_of(third) == ["d"]

    # A consumer that advances past what it received sees every row once.
    seen = []
    position = 0
    while position < log.log_end_offset:
        table = log.read(position)
        assert table.num_rows > 0
        seen.extend(offsets_of(table))
        position = offsets_of(table)[-1] + 1
    assert seen == list(range(7))


@pytest.mark.parametrize("column", [OFFSET_COLUMN, "__offset"])
def test_reserved_column_names_are_rejected(make_log, column):
    log = make_log()
    with pytest.raises(InvalidRecordError, match=re.escape(repr(column))):
        log.append(pa.record_batch({column: [1, 2], "value": ["a", "b"]}))
    assert log.log_end_offset == 0


def test_empty_batch_is_rejected(make_log, batch):
    log = make_log()
    empty = batch(["a"]).slice(0, 0)
    with pytest.raises(InvalidRecordError, match="empty"):
        log.append(empty)
    with pytest.raises(InvalidRecordError, match="empty"):
        log.append(pa.Table.from_batches([], schema=empty.schema))
    assert log.log_end_offset == 0


def test_non_arrow_data_is_rejected(make_log):
    log = make_log()
    with pytest.raises(InvalidRecordError, match="RecordBatch or Table"):
        log.append([{"value": 1}])


def test_batch_over_max_message_bytes_names_the_sizes(make_log, batch):
    log = make_log(max_message_bytes=2000)
    big = batch(["x" * 3000])
    with pytest.raises(RecordTooLargeError) as info:
        log.append(big)
    message = str(info.value)
    assert "max.message.bytes=2000" in message
    size = int(re.search(r"is (\d+) bytes", message).group(1))
    assert size > 3000
    assert log.log_end_offset == 0
    assert log.append(batch(["small"])) == (0, 0)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_per_append_compression_round_trips(make_log, batch, codec):
    log = make_log()
    values = ["repetitive value " * 20] * 200
    log.append(batch(values), compression=codec)
    log.append(batch(values))
    stored = log.read_batches(0)
    assert [b.header.compression for b in stored] == [codec, None]
    assert stored[0].header.size < stored[1].header.size / 4
    assert values_of(log.read(0)) == values + values
    log = make_log.reopen(log)
    assert values_of(log.read(0)) == values + values


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_topic_compression_type_overrides_the_producer(make_log, batch, codec):
    log = make_log(compression_type=codec)
    log.append(batch(["v"] * 100))
    log.append(batch(["w"] * 100), compression="lz4" if codec == "zstd" else "zstd")
    assert [b.header.compression for b in log.read_batches(0)] == [codec, codec]
    assert values_of(log.read(0)) == ["v"] * 100 + ["w"] * 100


def test_topic_compression_none_stores_uncompressed(make_log, batch):
    log = make_log(compression_type="none")
    log.append(batch(["v"] * 100), compression="zstd")
    assert log.read_batches(0)[0].header.compression is None


def test_unknown_compression_is_an_invalid_request(make_log, batch):
    log = make_log()
    with pytest.raises(InvalidRequestError, match="gzip"):
        log.append(batch(["v"]), compression="gzip")
    assert log.log_end_offset == 0


def test_batch_metadata_is_persisted(make_log, batch):
    log = make_log()
    log.append(
        batch(["a", "b", "c"], timestamps=[START + 5, START + 9, START + 1]),
        partition_leader_epoch=4,
        producer_id=77,
        producer_epoch=3,
        base_sequence=12,
        is_transactional=True,
        compression="zstd",
    )
    log.append(batch(["marker"]), partition_leader_epoch=4, is_control=True, max_timestamp=START)

    def check(log):
        first, second = log.read_batches(0)
        h = first.header
        assert (h.base_offset, h.last_offset, h.next_offset, h.record_count) == (0, 2, 3, 3)
        assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 3, 12)
        assert h.partition_leader_epoch == 4
        assert h.is_transactional and not h.is_control
        assert (h.base_timestamp, h.max_timestamp) == (START + 1, START + 9)
        assert h.compression == "zstd"
        assert not h.has_explicit_offsets
        h = second.header
        assert (h.base_offset, h.record_count) == (3, 1)
        assert h.is_control and not h.is_transactional
        assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, -1)
        assert h.max_timestamp == START
        assert h.compression is None

    check(log)
    check(make_log.reopen(log))


def test_batch_without_timestamp_column_uses_the_append_time(make_log, batch, clock):
    log = make_log()
    log.append(batch(["a"]))
    clock.advance(500)
    log.append(batch(["b"]))
    first, second = log.read_batches(0)
    assert first.header.max_timestamp == START
    assert second.header.base_timestamp == second.header.max_timestamp == START + 500


def test_arrow_timestamp_column_gives_the_batch_time_range(make_log):
    log = make_log()
    times = pa.array([START + 20, START + 10], pa.int64()).cast(pa.timestamp("ms"))
    log.append(pa.record_batch({"value": ["a", "b"], "timestamp": times}))
    header = log.read_batches(0)[0].header
    assert (header.base_timestamp, header.max_timestamp) == (START + 10, START + 20)


def test_log_append_time_overwrites_the_timestamp_column(make_log, batch, clock):
    log = make_log(message_timestamp_type="LogAppendTime")
    clock.set(START + 12345)
    log.append(batch(["a", "b"], timestamps=[1, 2]))
    header = log.read_batches(0)[0].header
    assert header.max_timestamp == header.base_timestamp == START + 12345
    assert log.read(0).column("timestamp").to_pylist() == [START + 12345] * 2


def test_read_tables_stay_valid_after_the_log_changes(make_log, batch):
    log = make_log(segment_bytes=1024)
    for i in range(20):
        log.append(batch([f"value-{i}"] * 5))
    before = log.read(0)
    log.truncate_to(3)
    log.append(batch(["new"]))
    log.enforce_retention()
    assert values_of(before)[:5] == ["value-0"] * 5
    assert values_of(before)[-1] == "value-19"
    assert values_of(log.read(0)) == ["value-0"] * 3 + ["new"]


def test_closed_log_refuses_operations(make_log, batch):
    log = make_log()
    log.append(batch(["a"]))
    log.close()
    log.close()  # idempotent
    with pytest.raises(IllegalStateError):
        log.append(batch(["b"]))
    with pytest.raises(IllegalStateError):
        log.read(0)


def test_delete_removes_the_directory(make_log, batch):
    log = make_log()
    log.append(batch(["a"]))
    log.delete()
    assert not os.path.exists(log.directory)
