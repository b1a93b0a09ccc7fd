"""Small batches of the record layout are stored compact (no Arrow IPC framing), read
back as the same Arrow data, and ``max.message.bytes`` counts a batch as Kafka does;
batches written in the Arrow IPC format before stay readable."""

from __future__ import annotations

import tempfile

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raystream.errors import RecordTooLargeError
from raystream.log import OFFSET_COLUMN, Log, compact
from raystream.log.batch import (
    END_OF_STREAM,
    HEADER_SIZE,
    BatchEncoder,
    PayloadDecoder,
)
from raystream.records import BYTES_SCHEMA, build_batch

START = 1_700_000_000_000

records = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=40)),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.integers(START - 10**6, START + 10**6),
        st.one_of(
            st.none(),
            st.lists(
                st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))),
                max_size=3,
            ),
        ),
    ),
    min_size=1,
    max_size=40,
)


def record_batch(rows: list) -> pa.RecordBatch:
    keys, values, timestamps, headers = (list(column) for column in zip(*rows, strict=True))
    return build_batch(BYTES_SCHEMA, keys, values, timestamps, headers)


def stored_sizes(log) -> list[int]:
    return [stored.header.size for stored in log.read_batches(0)]


def test_a_one_record_batch_takes_about_what_kafka_takes(make_log):
    """A 100-byte value alone in its batch: 1.1 KB as an Arrow IPC stream, Kafka 170."""
    log = make_log()
    log.append(build_batch(BYTES_SCHEMA, [None], [b"x" * 100], [START], None))
    (size,) = stored_sizes(log)
    kafka = compact.kafka_batch_size(build_batch(BYTES_SCHEMA, [None], [b"x" * 100], [START], None))
    assert kafka == 170  # kafka-python's DefaultRecordBatchBuilder builds 170 bytes
    assert size <= 1.1 * kafka
    assert log.read(0).column("value").to_pylist() == [b"x" * 100]


def test_a_full_batch_stays_an_arrow_ipc_stream(make_log):
    """Large batches are read zero-copy: their payload is a standard Arrow IPC stream."""
    rows = 1000
    batch = build_batch(BYTES_SCHEMA, [None] * rows, [b"x" * 100] * rows, [START] * rows, None)
    log = make_log()
    log.append(batch)
    (stored,) = log.read_batches(0)
    assert pa.ipc.open_stream(stored.payload).read_all().to_batches()[0].equals(batch)
    table = log.read(0)
    value_data = table.column("value").chunk(0).buffers()[2]
    segment = stored.buffer
    assert segment.address <= value_data.address < segment.address + segment.size  # no copy


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=records, codec=st.sampled_from([None, "lz4", "zstd"]), cut=st.integers(0, 5))
def test_any_small_batch_round_trips_through_the_compact_payload(rows, codec, cut):
    """Nulls, empty values, headers (null values too), any timestamps, slices, codecs."""
    batch = record_batch(rows)
    if cut and batch.num_rows > cut:
        batch = batch.slice(cut // 2, batch.num_rows - cut)
    assert compact.eligible(batch)
    payload = pa.py_buffer(b"".join(bytes(p) for p in BatchEncoder().payload(batch, codec)))
    assert payload.to_pybytes()[0] == compact.TAG
    schema, decoded = PayloadDecoder().decode_with_schema(payload)
    decoded.validate(full=True)
    assert schema.equals(BYTES_SCHEMA)
    assert decoded.equals(batch)


def test_small_batches_round_trip_through_a_log_with_every_feature(make_log):
    """Compression, compaction (rewrites into Arrow with explicit offsets), truncation
    inside a batch, reopening: the compact batches read back as they were written."""
    log = make_log(cleanup_policy="compact", segment_bytes=1024)
    written = []
    for i in range(30):
        batch = build_batch(
            BYTES_SCHEMA,
            [b"k%d" % (i % 3), b"u%d" % i],
            [b"v%d" % i, None if i % 7 == 0 else b"w%d" % i],
            [START + i, START + i + 1],
            [[("h", b"%d" % i)], None],
        )
        log.append(batch, compression="zstd" if i % 2 else None)
        written.extend(
            zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(), strict=True)
        )
    assert all(size < 200 for size in stored_sizes(log))
    table = log.read(0, max_bytes=1 << 20)
    pairs = zip(table["key"].to_pylist(), table["value"].to_pylist(), strict=True)
    assert list(pairs) == written[: len(table)]
    log.roll()
    assert log.compact(now_ms=START).records_removed > 0
    rewritten = [b for b in log.read_batches(0) if b.header.has_explicit_offsets]
    assert rewritten  # compaction kept a row of a batch and dropped the other
    for stored in log.read_batches(0):  # rewritten ones stay compact too
        assert stored.payload.to_pybytes()[0] == compact.TAG
        assert stored.header.size < 200
    latest = {}
    for offset, (key, value) in enumerate(written):
        latest[key] = (offset, value)
    rows = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        table, offset = log.read_until(offset)
        columns = (table[name].to_pylist() for name in (OFFSET_COLUMN, "key", "value"))
        rows.extend(zip(*columns, strict=True))
    assert rows == sorted((o, k, v) for k, (o, v) in latest.items())
    log.truncate_to(5)
    log.close()
    reopened = make_log(cleanup_policy="compact", segment_bytes=1024)
    assert reopened.log_end_offset == 5


def old_format_batch(batch: pa.RecordBatch, base_offset: int) -> bytes:
    """A stored batch as raystream wrote every batch before the compact payload: a
    64-byte header and a self-contained Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    stream = sink.getvalue().to_pybytes()
    assert stream.endswith(END_OF_STREAM)
    pieces, _ = BatchEncoder.seal(
        [stream],
        base_offset=base_offset,
        partition_leader_epoch=0,
        attributes=0,
        last_offset_delta=batch.num_rows - 1,
        base_timestamp=START,
        max_timestamp=START,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        record_count=batch.num_rows,
    )
    return b"".join(bytes(piece) for piece in pieces)


def test_batches_in_the_old_format_still_read_next_to_new_ones(make_log):
    """Data stays on disk across upgrades: old Arrow IPC batches of the record layout and
    new compact ones read back as one table, and reopening changes nothing."""
    old = build_batch(BYTES_SCHEMA, [b"a", None], [b"old-1", b"old-2"], [START] * 2, None)
    log = make_log()
    log.append_raw(old_format_batch(old, 0))
    log.append(build_batch(BYTES_SCHEMA, [None], [b"new"], [START], [[("h", b"1")]]))
    log.close()
    log = make_log()
    (first, second) = log.read_batches(0)
    assert first.payload.to_pybytes()[:4] == b"\xff\xff\xff\xff"
    assert second.payload.to_pybytes()[0] == compact.TAG
    table = log.read(0)
    assert table["value"].to_pylist() == [b"old-1", b"old-2", b"new"]
    assert table[OFFSET_COLUMN].to_pylist() == [0, 1, 2]
    assert table["headers"].to_pylist() == [None, None, [{"key": "h", "value": b"1"}]]


def test_max_message_bytes_counts_a_batch_as_kafka_does(make_log):
    """Finding 2: with max.message.bytes=1000 a 2-byte value was refused as 1024 bytes."""
    log = make_log(max_message_bytes=1000)
    assert log.append(build_batch(BYTES_SCHEMA, [None], [b"hi"], [START], None)) == (0, 0)
    over = build_batch(BYTES_SCHEMA, [None] * 12, [b"z" * 100] * 12, [START] * 12, None)
    with pytest.raises(RecordTooLargeError) as info:
        log.append(over)
    message = str(info.value)
    assert "topic-0" in message and "max.message.bytes=1000" in message
    assert f"is {compact.kafka_batch_size(over)} bytes in Kafka's record-batch format" in message
    assert log.log_end_offset == 1


def test_a_large_batch_kafka_would_take_is_taken_whatever_arrow_adds(make_log):
    """A batch stored as Arrow IPC (framing, 4-byte offsets, 8-byte timestamps) counts
    at its Kafka size: the limit a Kafka user set passes what Kafka would pass."""
    rows = 200
    batch = build_batch(BYTES_SCHEMA, [None] * rows, [b"y" * 100] * rows, [START] * rows, None)
    kafka = compact.kafka_batch_size(batch)
    log = make_log(max_message_bytes=kafka)
    assert log.append(batch) == (0, rows - 1)
    (stored,) = log.read_batches(0)
    assert stored.header.size > kafka  # only Kafka's count let it in
    smaller = make_log(name="topic-1", max_message_bytes=kafka - 1)
    with pytest.raises(RecordTooLargeError, match=f"max.message.bytes={kafka - 1}"):
        smaller.append(batch)


def test_kafka_batch_size_matches_kafka_pythons_encoder():
    """The size max.message.bytes counts is what Kafka's own encoder produces."""
    records_module = pytest.importorskip("kafka.record.default_records")
    rng = np.random.default_rng(7)

    def size(high: int) -> bytes:
        return bytes(int(rng.integers(0, high)))

    for trial in range(30):
        rows = int(rng.integers(1, 60))
        keys = [None if rng.random() < 0.3 else size(200) for _ in range(rows)]
        values = [None if rng.random() < 0.1 else size(3000) for _ in range(rows)]
        stamps = (START + rng.integers(-(10**7), 10**7, rows)).tolist()
        headers = [
            None
            if rng.random() < 0.5
            else [(f"h{j}", None if j == 2 else size(300)) for j in range(3)]
            for _ in range(rows)
        ]
        builder = records_module.DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 30,
        )
        for offset, (key, value, stamp, header) in enumerate(
            zip(keys, values, stamps, headers, strict=True)
        ):
            builder.append(offset, timestamp=stamp, key=key, value=value, headers=header or [])
        batch = build_batch(BYTES_SCHEMA, keys, values, stamps, headers)
        assert compact.kafka_batch_size(batch) == len(builder.build()), trial


def test_kafka_batch_size_bound_is_never_below_the_size():
    """The bound the log checks first (``max.message.bytes``) is an upper bound of the
    exact count for any byte batch it covers, and close to it for a producer's uniform
    batch; a batch with headers is left to the exact count."""
    rng = np.random.default_rng(11)

    def size(high: int) -> bytes:
        return bytes(int(rng.integers(0, high)))

    for trial in range(200):
        rows = int(rng.integers(1, 3000))
        keys = [None if rng.random() < 0.3 else size(300) for _ in range(rows)]
        if rng.random() < 0.3:
            keys = [None] * rows
        values = [None if rng.random() < 0.1 else size(20000) for _ in range(rows)]
        spread = int(rng.choice([0, 5, 10**4, 10**12]))
        stamps = (START + rng.integers(-spread, spread + 1, rows)).tolist()
        batch = build_batch(BYTES_SCHEMA, keys, values, stamps, None)
        bound = compact.kafka_batch_size_bound(batch)
        assert bound is not None and bound >= compact.kafka_batch_size(batch), trial
        sliced = batch.slice(rows // 3)
        assert compact.kafka_batch_size_bound(sliced) >= compact.kafka_batch_size(sliced), trial
    uniform = build_batch(BYTES_SCHEMA, [None] * 9000, [b"v" * 100] * 9000, [START] * 9000, None)
    assert compact.kafka_batch_size_bound(uniform) - compact.kafka_batch_size(uniform) <= 2 * 9000
    with_headers = build_batch(BYTES_SCHEMA, [None], [b"v"], [START], [[("h", b"x")]])
    assert compact.kafka_batch_size_bound(with_headers) is None


def test_a_batch_kafka_would_take_passes_on_the_bound(make_log):
    """A producer's full batch: over max.message.bytes as Arrow, under it in Kafka's
    format, taken (the bound decides, no exact count needed)."""
    rows = 9200
    batch = build_batch(BYTES_SCHEMA, [None] * rows, [b"x" * 100] * rows, [START] * rows, None)
    limit = 1_048_588
    assert batch.get_total_buffer_size() > limit >= compact.kafka_batch_size_bound(batch)
    log = make_log(max_message_bytes=limit)
    assert log.append(batch) == (0, rows - 1)


@pytest.mark.parametrize("codec", [None, "zstd"])
def test_a_damaged_compact_payload_is_a_clean_error(codec):
    """A produce call's bytes carry no checksum: any truncation or flipped byte decodes
    to valid arrays or fails with a ValueError (what the leader refuses as bad data)."""
    batch = build_batch(
        BYTES_SCHEMA, [b"key", None], [b"v" * 50, b""], [START, START + 9], [[("h", b"x")], None]
    )
    payload = b"".join(bytes(p) for p in BatchEncoder().payload(batch, codec))
    decoder = PayloadDecoder()
    rng = np.random.default_rng(3)
    damaged = [payload[:cut] for cut in range(1, len(payload))]
    for _ in range(400):
        data = bytearray(payload)
        data[int(rng.integers(1, len(data)))] = int(rng.integers(0, 256))
        damaged.append(bytes(data))
    failures = 0
    for data in damaged:
        try:
            decoded = decoder.decode(pa.py_buffer(data))
        except ValueError:
            failures += 1
            continue
        decoded.validate(full=True)
        decoded.to_pylist()
    assert failures > len(payload) // 2  # the damage was seen, not silently decoded


def test_the_compact_payload_is_under_a_header_and_crc_like_any_payload(make_log):
    log = make_log()
    log.append(build_batch(BYTES_SCHEMA, [b"k"], [b"v"], [START], None))
    (stored,) = log.read_batches(0)
    assert stored.header.size == HEADER_SIZE + stored.payload.size
    assert stored.header.record_count == 1


def test_a_follower_copies_compact_batches_and_markers_as_bytes(make_log):
    """Replication copies stored batches unchanged: a follower's log holds the leader's
    bytes and reads back the same rows; a transaction's marker (a one-record control
    batch of the record layout) is compact too and still ends the transaction."""
    from raystream.transactions.markers import marker_batch

    leader = make_log(name="leader-0")
    for i in range(5):
        leader.append(
            build_batch(BYTES_SCHEMA, [b"k"], [b"v%d" % i], [START], None),
            producer_id=7,
            producer_epoch=0,
            base_sequence=i,
            is_transactional=True,
        )
    leader.append(
        marker_batch(BYTES_SCHEMA, True, 3, START),
        producer_id=7,
        producer_epoch=0,
        is_control=True,
        is_commit=True,
    )
    follower = make_log(name="follower-0")
    for run in leader.read_raw(0):
        follower.append_raw(run)
    assert b"".join(r.to_pybytes() for r in follower.read_raw(0)) == b"".join(
        r.to_pybytes() for r in leader.read_raw(0)
    )
    marker = follower.read_batches(0)[-1]
    assert marker.header.is_control and marker.header.is_commit
    assert marker.payload.to_pybytes()[0] == compact.TAG
    assert follower.read(0)["value"].to_pylist() == [b"v%d" % i for i in range(5)]


def produced(batch: pa.RecordBatch, codec: str | None = None) -> pa.Buffer:
    """The payload a producer sends for ``batch``."""
    return pa.py_buffer(b"".join(bytes(p) for p in BatchEncoder().payload(batch, codec)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=records)
def test_a_produced_small_batch_is_stored_as_it_came_and_reads_back_the_same(rows):
    """A leader appends a plain compact payload without decoding it: the log holds the
    produced bytes, with the batch's row count and time range in its header, and reads
    back what an append of the decoded batch reads back."""
    batch = record_batch(rows)
    payload = produced(batch)
    summary = PayloadDecoder().decode_produced(payload)
    headers = batch.column("headers")
    if headers.null_count < len(headers):
        assert isinstance(summary, pa.RecordBatch)  # header keys' UTF-8: decode checks it
        return
    assert isinstance(summary, compact.CompactPayload)
    assert summary.num_rows == batch.num_rows
    assert summary.schema is BYTES_SCHEMA
    with tempfile.TemporaryDirectory() as left, tempfile.TemporaryDirectory() as right:
        as_is, decoded = Log.open(left), Log.open(right)
        as_is.append(summary)
        decoded.append(batch)
        (stored,) = as_is.read_batches(0)
        assert stored.payload.to_pybytes() == payload.to_pybytes()
        (reference,) = decoded.read_batches(0)
        assert stored.header == reference.header
        assert as_is.read(0).equals(decoded.read(0))
        as_is.close()
        decoded.close()


def test_a_produced_payload_needing_a_rewrite_is_decoded_first(make_log):
    """Compressed, LogAppendTime or over max.message.bytes: the leader decodes the
    payload and appends as before."""
    batch = build_batch(BYTES_SCHEMA, [None, b"k"], [b"x" * 10, b"y"], [START, START + 5], None)
    assert compact.summarize(produced(batch, "zstd")) is None
    log = make_log(message_timestamp_type="LogAppendTime", compression_type="zstd")
    log.append(compact.summarize(produced(batch)))
    (stored,) = log.read_batches(0)
    assert stored.header.compression == "zstd"
    assert stored.header.max_timestamp != START + 5  # the append time
    assert log.read(0).column("value").to_pylist() == [b"x" * 10, b"y"]
    small = make_log(max_message_bytes=40)
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes=40"):
        small.append(compact.summarize(produced(batch)))


def test_summarize_accepts_only_what_decode_accepts():
    """Flipped bytes and truncations of a produced payload: whatever summarize lets a
    leader store as it came decodes to valid arrays, and every refusal is a ValueError."""
    batch = build_batch(
        BYTES_SCHEMA,
        [b"key", None, b""],
        [b"v" * 50, b"", None],
        [START, START + 9, START - 3],
        None,
    )
    payload = produced(batch).to_pybytes()
    rng = np.random.default_rng(5)
    damaged = [payload[:cut] for cut in range(1, len(payload))]
    for _ in range(600):
        data = bytearray(payload)
        data[int(rng.integers(1, len(data)))] = int(rng.integers(0, 256))
        damaged.append(bytes(data))
    refused = stored = 0
    for data in damaged:
        try:
            summary = compact.summarize(pa.py_buffer(data))
        except ValueError:
            refused += 1
            continue
        if summary is None:
            continue
        stored += 1
        decoded = summary.decode()
        decoded.validate(full=True)
        assert decoded.num_rows == summary.num_rows
        stamps = [t for t in decoded.column("timestamp").to_pylist() if t is not None]
        assert (min(stamps), max(stamps)) == summary.timestamp_range(0)
    assert refused > len(payload) // 2 and stored > 50  # both sides were exercised
