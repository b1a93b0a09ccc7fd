"""How an appended batch reaches the disk: a header and a standard Arrow IPC payload,
checksummed piece by piece and written with one ``writev``; a failed write leaves the
log usable."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from raystream.log import OFFSET_COLUMN
from raystream.log import batch as batch_module
from raystream.log import segment as segment_module
from raystream.log.batch import HEADER_SIZE, BatchEncoder

START = 1_700_000_000_000
"""The fake clock's start (see conftest)."""

ENCODE_FIELDS = dict(
    base_offset=7,
    partition_leader_epoch=2,
    attributes=0,
    last_offset_delta=999,
    base_timestamp=START,
    max_timestamp=START,
    producer_id=-1,
    producer_epoch=-1,
    base_sequence=-1,
)


def big_batch(rows: int = 1000, value_bytes: int = 100) -> pa.RecordBatch:
    """``rows`` records of ``value_bytes``-byte values with increasing int64 timestamps."""
    data = np.arange(rows * value_bytes, dtype=np.uint8).tobytes()
    offsets = np.arange(0, (rows + 1) * value_bytes, value_bytes, dtype=np.int32)
    values = pa.BinaryArray.from_buffers(
        pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    timestamps = pa.array(np.arange(START, START + rows, dtype=np.int64))
    return pa.record_batch({"value": values, "timestamp": timestamps})


def dictionary_batch(words: list[str]) -> pa.RecordBatch:
    return pa.record_batch({"value": pa.array(words).dictionary_encode()})


@pytest.mark.parametrize("codec", [None, "lz4", "zstd"])
@pytest.mark.parametrize("kind", ["plain", "dictionary", "sliced"])
def test_payload_is_a_standard_arrow_ipc_stream(make_log, codec, kind):
    original = {
        "plain": big_batch(50),
        "dictionary": dictionary_batch(["red", "blue", "red"]),
        "sliced": big_batch(50).slice(7, 20),
    }[kind]
    log = make_log()
    log.append(original, compression=codec)
    log.append(original, compression=codec)
    for stored in log.read_batches(0):
        assert stored.header.compression == codec
        assert stored.header.size == HEADER_SIZE + stored.payload.size
        assert stored.payload.address % 8 == 0  # zero-copy reads need the alignment
        assert pa.ipc.open_stream(stored.payload).read_all().equals(pa.table(original))
    both = pa.Table.from_batches([original, original])
    assert log.read(0).drop_columns([OFFSET_COLUMN]).equals(both)


@pytest.mark.parametrize("codec", [None, "zstd"])
def test_encoded_pieces_are_header_and_payload_with_a_valid_crc(codec):
    original = big_batch()
    encoder = BatchEncoder()
    fields = ENCODE_FIELDS | {"record_count": original.num_rows}
    pieces, header = encoder.seal(encoder.payload(original, codec), **fields)
    assert header.size == sum(map(len, pieces))
    assert header.record_count == original.num_rows
    stored = pa.py_buffer(b"".join(bytes(p) for p in pieces))
    parsed = batch_module.parse_header(stored, 0, stored.size, "test")
    assert parsed == header
    batch_module.verify_crc(stored, 0, parsed, "test")
    payload = stored.slice(HEADER_SIZE)
    assert pa.ipc.open_stream(payload).read_next_batch().equals(original)


def test_encoder_follows_schema_codec_and_metadata_changes(make_log, batch):
    log = make_log()
    with_metadata = batch(["m"]).replace_schema_metadata({"origin": "test"})
    appended = [
        (batch(["a", "b"]), None),
        (big_batch(10), "zstd"),
        (batch(["c"]), "lz4"),
        (batch(["d"]), None),
        (with_metadata, None),
        (dictionary_batch(["x", "y"]), None),
        (batch(["e"]), None),
    ]
    for record_batch, codec in appended:
        log.append(record_batch, compression=codec)
    stored = log.read_batches(0)
    assert [s.header.compression for s in stored] == [codec for _, codec in appended]
    for item, (record_batch, _) in zip(stored, appended, strict=True):
        decoded = pa.ipc.open_stream(item.payload).read_next_batch()
        assert decoded.equals(record_batch)
        assert decoded.schema.metadata == record_batch.schema.metadata


def test_timestamp_column_is_found_again_when_the_schema_changes(make_log):
    log = make_log()
    log.append(pa.record_batch({"value": ["a", "b"], "timestamp": [START + 5, START + 1]}))
    moved = pa.array([(START + 9) * 1000, (START + 7) * 1000], pa.timestamp("us"))
    log.append(pa.record_batch({"timestamp": moved, "value": ["c", "d"]}))
    log.append(pa.record_batch({"value": ["e"]}))
    headers = [s.header for s in log.read_batches(0)]
    assert [(h.base_timestamp, h.max_timestamp) for h in headers] == [
        (START + 1, START + 5),
        (START + 7, START + 9),
        (START, START),  # no timestamp column: the (fake) append time
    ]


@pytest.mark.parametrize(
    "data_type",
    [pa.int64(), pa.int32(), pa.uint64(), pa.timestamp("ms"), pa.timestamp("s", tz="UTC")],
)
def test_time_range_of_a_sliced_batch_covers_only_its_rows(make_log, data_type):
    unit = 1000 if data_type == pa.timestamp("s", tz="UTC") else 1
    times = [9_000, 1_000, 5_000, 3_000, 4_000, 8_000, 2_000]
    column = pa.array([t // unit for t in times], pa.int64()).cast(data_type)
    whole = pa.record_batch({"value": list("abcdefg"), "timestamp": column})
    log = make_log()
    log.append(whole.slice(2, 3))  # 5000, 3000, 4000
    log.append(whole.slice(4, 3).filter(pa.array([True, False, True])))  # 4000, 2000
    first, second = (s.header for s in log.read_batches(0))
    assert (first.base_timestamp, first.max_timestamp) == (3_000, 5_000)
    assert (second.base_timestamp, second.max_timestamp) == (2_000, 4_000)


def test_null_timestamps_are_left_out_of_the_time_range(make_log):
    log = make_log()
    log.append(pa.record_batch({"value": ["a", "b", "c"], "timestamp": [None, START + 3, 7]}))
    log.append(pa.record_batch({"value": ["d"], "timestamp": pa.array([None], pa.int64())}))
    first, second = (s.header for s in log.read_batches(0))
    assert (first.base_timestamp, first.max_timestamp) == (7, START + 3)
    assert (second.base_timestamp, second.max_timestamp) == (START, START)


def test_a_short_write_is_cut_back_and_the_log_goes_on(make_log, crash, monkeypatch):
    log = make_log()
    log.append(big_batch(10))
    size = log.size_bytes

    def short(fd, pieces):
        return os.write(fd, bytes(pieces[0])[:10])

    with monkeypatch.context() as patch:
        patch.setattr(segment_module.os, "writev", short)
        with pytest.raises(OSError, match="short write"):
            log.append(big_batch(10))
    assert (log.log_end_offset, log.size_bytes) == (10, size)
    assert os.path.getsize(log._segments[-1].path) == size
    assert log.append(big_batch(5)) == (10, 14)
    crash(log)
    reopened = make_log.reopen(log, clean=False)
    assert reopened.log_end_offset == 15
    assert reopened.read(0).num_rows == 15
