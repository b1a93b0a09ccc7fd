"""Kafka record batches to and from raystream's batches, against independent readers and
writers: kafka-python's ``kafka.record`` (every codec; its snappy, lz4 and zstd
primitives through cramjam, since the libraries it wants are not installed, while the
framing, headers and batch layout are kafka-python's own) and kio's record readers.

Pure: no Ray. Stored batches come from a real :class:`raystream.log.Log` on disk.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import cramjam
import crc32c
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record import default_records
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kio.records.readers import read_batch

from raystream.errors import CorruptRecordError, InvalidRecordError
from raystream.kafka import records as kafka_records
from raystream.kafka.records import (
    ProducedBatch,
    decode_produce,
    decode_produce_run,
    encode_stored,
    produced_batch_key,
)
from raystream.log import Log, LogConfig, compact
from raystream.log.batch import BatchEncoder
from raystream.protocol import encode_records
from raystream.records import BYTES_SCHEMA, HEADERS_TYPE, build_batch, record_schema
from raystream.transactions.markers import marker_batch

START = 1_700_000_000_000
CODEC_IDS = {None: 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


class _Snappy:
    """The python-snappy calls kafka-python's xerial framing makes, through cramjam."""

    @staticmethod
    def compress(data: bytes) -> bytes:
        return bytes(cramjam.snappy.compress_raw(bytes(data)))

    @staticmethod
    def decompress(data: bytes) -> bytes:
        return bytes(cramjam.snappy.decompress_raw(bytes(data)))


@pytest.fixture(autouse=True)
def kafka_python_codecs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give kafka-python snappy, lz4 and zstd (gzip it has)."""
    codecs = default_records.codecs
    monkeypatch.setattr(codecs, "snappy", _Snappy)
    monkeypatch.setattr(codecs, "has_snappy", lambda: True)
    monkeypatch.setattr(codecs, "has_lz4", lambda: True)
    monkeypatch.setattr(codecs, "has_zstd", lambda: True)
    monkeypatch.setattr(default_records, "lz4_encode", lambda d: bytes(cramjam.lz4.compress(d)))
    monkeypatch.setattr(default_records, "lz4_decode", lambda d: bytes(cramjam.lz4.decompress(d)))
    monkeypatch.setattr(default_records, "zstd_encode", lambda d: bytes(cramjam.zstd.compress(d)))
    monkeypatch.setattr(default_records, "zstd_decode", lambda d: bytes(cramjam.zstd.decompress(d)))


def kafka_batch(
    records: list[tuple[Any, ...]],
    codec: str | None = None,
    *,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
) -> bytes:
    """A Kafka record batch built by kafka-python: records are
    (timestamp, key, value, headers)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODEC_IDS[codec],
        is_transactional=transactional,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 30,
    )
    for offset, (timestamp, key, value, headers) in enumerate(records):
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=headers)
    return bytes(builder.build())


def sample(count: int, first: int = 0) -> list[tuple[Any, ...]]:
    """Records with every shape: null keys and values, headers (a null header value
    too), empty values, timestamps going back and forth."""
    out = []
    for i in range(first, first + count):
        key = None if i % 3 == 0 else b"key-%d" % i
        value = None if i % 11 == 5 else b"v" * (i % 130)
        headers = [] if i % 4 else [("trace", b"t%d" % i), ("é", None)][: 1 + i % 8 // 4]
        out.append((START + (i * 37) % 5000 - 100, key, value, headers))
    return out


def as_tuples(batch: ProducedBatch | pa.RecordBatch) -> list[tuple[Any, ...]]:
    """(timestamp, key, value, headers) per record of a decoded batch."""
    records = batch.records if isinstance(batch, ProducedBatch) else batch
    return [
        (r["timestamp"], r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"] or []])
        for r in records.to_pylist()
    ]


def reseal(data: bytes, records: bytes, codec: int | None = None) -> bytes:
    """``data``'s batch with its records section replaced (and the CRC recomputed)."""
    header = bytearray(data[:61])
    struct.pack_into(">i", header, 8, 49 + len(records))
    if codec is not None:
        (attributes,) = struct.unpack_from(">h", header, 21)
        struct.pack_into(">h", header, 21, (attributes & ~7) | codec)
    body = bytes(header[21:]) + records
    struct.pack_into(">I", header, 17, crc32c.crc32c(body))
    return bytes(header[:21]) + body


# ====================================================================== produce


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_decodes_to_the_same_records(codec: str | None) -> None:
    records = sample(300)
    data = kafka_batch(records, codec, producer=(42, 3, 1000), transactional=True)
    assert data[22] & 7 == CODEC_IDS[codec]  # kafka-python did compress
    [batch] = decode_produce(data)
    assert as_tuples(batch) == records
    assert batch.records.schema == BYTES_SCHEMA
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 1000)
    assert batch.transactional and batch.record_count == 300 and batch.timestamp_type == 0
    assert batch.compression == codec


def test_snappy_as_a_bare_block_as_librdkafka_writes_it() -> None:
    records = sample(50)
    plain = kafka_batch(records)
    data = reseal(plain, bytes(cramjam.snappy.compress_raw(plain[61:])), codec=2)
    assert as_tuples(decode_produce(data)[0]) == records


def test_records_of_changing_sizes_take_the_walking_path() -> None:
    rng = np.random.default_rng(7)
    records = [(START + i, None, b"x" * int(rng.integers(0, 3000)), []) for i in range(2000)]
    assert as_tuples(decode_produce(kafka_batch(records))[0]) == records


@pytest.mark.parametrize("count", [1, 63, 64, 65, 8192, 9000])
def test_offset_delta_widths_change_within_a_batch(count: int) -> None:
    records = [(START + 10 * i, b"k", b"v" * 20, []) for i in range(count)]
    assert as_tuples(decode_produce(kafka_batch(records))[0]) == records


def test_a_record_with_many_headers_among_plain_ones() -> None:
    many = [(f"h{j}", b"%d" % j) for j in range(300)]
    records = [(START, None, b"v", many if i == 5 else []) for i in range(100)]
    assert as_tuples(decode_produce(kafka_batch(records))[0]) == records


def test_several_batches_in_one_partition_decode_in_order() -> None:
    first, second = sample(10), sample(7, first=10)
    batches = decode_produce(kafka_batch(first) + kafka_batch(second, "gzip"))
    assert [as_tuples(b) for b in batches] == [first, second]


def test_a_run_of_batches_decodes_as_one_batch_in_order() -> None:
    # The listener's coalescing: single-record batches (each with its own base
    # timestamp, as librdkafka sends them) and larger ones, one decode for all.
    parts = [sample(1, first=i) for i in range(5)] + [sample(40, first=5), sample(2, 45)]
    payloads = [kafka_batch(p, "lz4" if len(p) == 40 else None) for p in parts]
    run = decode_produce_run(payloads)
    assert as_tuples(run) == [r for p in parts for r in p]
    assert run.producer_id == -1 and not run.transactional and run.compression is None
    assert [produced_batch_key(p) for p in payloads[4:6]] == [(-1, 0, 1), (-1, 3, 40)]


def test_a_run_refuses_what_a_single_decode_refuses() -> None:
    good = kafka_batch(sample(3))
    bad = bytearray(kafka_batch(sample(2)))
    bad[-1] ^= 0xFF  # CRC mismatch
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        decode_produce_run([good, bytes(bad)])
    with pytest.raises(InvalidRecordError, match="producer id"):
        decode_produce_run([good, kafka_batch(sample(2), producer=(7, 0, 0))])
    with pytest.raises(InvalidRecordError, match="more than one batch"):
        decode_produce_run([good, good + good])


_plain_record = st.tuples(
    st.integers(-(2**62), 2**62),
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=300),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    run=st.lists(st.lists(_plain_record, min_size=1, max_size=12), min_size=1, max_size=8),
    flips=st.lists(st.tuples(st.integers(0, 4_000), st.integers(1, 255)), max_size=2),
)
def test_a_plain_run_goes_straight_to_the_stored_payload(
    run: list[list[tuple[Any, ...]]], flips: list[tuple[int, int]]
) -> None:
    """compact_run writes the bytes the general path (decode the run, then encode the
    batch for the leader) writes, and leaves every refusal to it."""
    payloads = [bytearray(kafka_batch([(t, k, v, []) for t, k, v in batch])) for batch in run]
    for position, mask in flips:
        payload = payloads[position % len(payloads)]
        payload[position % len(payload)] ^= mask
    payloads = [bytes(p) for p in payloads]
    direct = kafka_records.compact_run(payloads)
    try:
        decoded = decode_produce_run(payloads)
    except (CorruptRecordError, InvalidRecordError):
        assert direct is None
        return
    general = bytes(encode_records(BatchEncoder(), decoded.records))
    if direct is None:  # a run too large to be certain it is stored compact
        assert len(general) > 4_000 or flips
    else:
        assert direct == general
        assert direct[0] == compact.TAG


def test_runs_compact_run_leaves_to_the_general_path() -> None:
    with_headers = kafka_batch([(START, None, b"v", [("h", b"1")])])
    compressed = kafka_batch(sample(3), "gzip")
    identified = kafka_batch(sample(2), producer=(7, 0, 0))
    large = kafka_batch([(START, None, b"x" * 13_000, [])])
    for payloads in ([with_headers], [compressed], [identified], [large]):
        assert kafka_records.compact_run(payloads) is None
        decode_produce(payloads[0])  # each is fine, just not the plain case


def test_kio_written_batch_decodes() -> None:
    import datetime
    import io

    from kio.records.schema import NewRecordBatch, Record, RecordHeader
    from kio.records.writers import write_new_batch
    from kio.static.primitive import i8, i16, i32, i64

    stamp = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
    records = tuple(
        Record(
            attributes=i8(0),
            timestamp=stamp,
            offset=i64(i),
            key=None if i == 1 else b"k%d" % i,
            value=b"value-%d" % i,
            headers=(RecordHeader(key=b"h", value=b"x"),) if i == 2 else (),
        )
        for i in range(3)
    )
    buffer = io.BytesIO()
    write_new_batch(
        buffer,
        NewRecordBatch(
            producer_id=i64(-1),
            producer_epoch=i16(-1),
            base_sequence=i32(-1),
            attributes=i16(0),
            records=records,
        ),
    )
    [batch] = decode_produce(buffer.getvalue())
    millis = int(stamp.timestamp() * 1000)
    assert as_tuples(batch) == [
        (millis, b"k0", b"value-0", []),
        (millis, None, b"value-1", []),
        (millis, b"k2", b"value-2", [("h", b"x")]),
    ]


def test_a_checksum_mismatch_is_refused() -> None:
    data = bytearray(kafka_batch(sample(20)))
    data[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC32C mismatch"):
        decode_produce(bytes(data))


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_formats_are_refused(magic: int) -> None:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=START if magic else None, key=b"k", value=b"v")
    with pytest.raises(InvalidRecordError, match=f"magic {magic} is not supported"):
        decode_produce(bytes(builder.build()))


def test_control_batches_and_empty_data_are_refused() -> None:
    data = bytearray(kafka_batch(sample(3)))
    struct.pack_into(">h", data, 21, 0x30)
    with pytest.raises(InvalidRecordError, match="control"):
        decode_produce(reseal(bytes(data), bytes(data[61:])))
    with pytest.raises(InvalidRecordError, match="no record batch"):
        decode_produce(b"")


def test_offset_deltas_out_of_order_are_refused() -> None:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for offset in (0, 2, 1):
        builder.append(offset, timestamp=START, key=None, value=b"v", headers=[])
    with pytest.raises(InvalidRecordError, match="offset delta"):
        decode_produce(bytes(builder.build()))


def test_every_truncation_is_refused_cleanly() -> None:
    data = kafka_batch(sample(12))
    for cut in range(1, len(data)):
        with pytest.raises((CorruptRecordError, InvalidRecordError)):
            decode_produce(data[:cut])
    records = data[61:]
    for cut in range(0, len(records)):  # a consistent header over cut records
        with pytest.raises(CorruptRecordError):
            decode_produce(reseal(data, records[:cut]))


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=6),
    codec=st.sampled_from([None, None, "gzip", "lz4"]),
)
def test_fuzzed_records_decode_or_are_refused_cleanly(
    seed: int, flips: list[tuple[int, int]], codec: str | None
) -> None:
    """Flipped bytes in the records (the CRC made right again, so the parser meets them):
    either records come out or a raystream error names the problem; nothing else."""
    records = sample(5 + seed % 40, first=seed % 1000)
    data = kafka_batch(records)
    body = bytearray(data[61:])
    for position, mask in flips:
        body[position % len(body)] ^= mask
    if codec is not None:
        compressed = {"gzip": cramjam.gzip.compress, "lz4": cramjam.lz4.compress}[codec]
        fuzzed = reseal(data, bytes(compressed(bytes(body))), CODEC_IDS[codec])
    else:
        fuzzed = reseal(data, bytes(body))
    try:
        [batch] = decode_produce(fuzzed)
    except (CorruptRecordError, InvalidRecordError) as error:
        assert str(error)
    else:
        assert batch.record_count == len(records)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    count=st.integers(1, 48),
    first=st.integers(0, 1000),
    flips=st.lists(st.tuples(st.integers(0, 2_000), st.integers(1, 255)), max_size=3),
)
def test_small_batches_read_in_python_match_the_vectorized_path(
    count: int, first: int, flips: list[tuple[int, int]]
) -> None:
    """A few records are read by a Python walk (cheaper than the vectorized path's fixed
    cost); it must give the same batch, and leave every refusal to the vectorized path."""
    body = bytearray(kafka_batch(sample(count, first))[61:])
    for position, mask in flips:
        body[position % len(body)] ^= mask
    walked = kafka_records._walk_records(bytes(body), count, START, True, None)
    try:
        vectorized = kafka_records._decode_records(
            bytes(body), count, START, "test", produced=True, small_batch_records=0
        )
    except (CorruptRecordError, InvalidRecordError):
        assert walked is None
    else:
        if walked is not None:  # None: the walk was cautious, the vectorized path decides
            assert walked.equals(vectorized)
        else:
            assert flips


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.binary(max_size=300))
def test_random_bytes_are_refused_cleanly(data: bytes) -> None:
    with pytest.raises((CorruptRecordError, InvalidRecordError)):
        decode_produce(data)


# ======================================================================== fetch


def stored_runs(tmp_path: Any, **options: Any) -> tuple[Log, list[pa.RecordBatch]]:
    """A log with: a small keyed batch with headers (stored compact), a big batch
    (Arrow IPC), a transactional batch and its commit marker, a compacted segment, an
    aborted transaction's batch and marker at the end."""
    log = Log.open(tmp_path / "t-0", LogConfig.from_kafka({"cleanup.policy": "compact", **options}))
    small = build_batch(
        BYTES_SCHEMA,
        [b"a", None, b"b", b"a"],
        [b"1", b"", None, b"2"],
        [START, START + 5, START - 3, START + 9],
        [[("trace", b"x"), ("n", None)], None, [], None],
    )
    log.append(small, partition_leader_epoch=2)
    log.roll()
    log.compact(now_ms=START)  # drops offset 0 (key a, superseded at 3): a gap
    big = build_batch(
        BYTES_SCHEMA,
        [b"k%d" % (i % 7) for i in range(3000)],
        [b"y" * 100] * 3000,
        [START + i for i in range(3000)],
        None,
    )
    log.append(big, partition_leader_epoch=3)
    txn = build_batch(BYTES_SCHEMA, [b"t"], [b"in txn"], [START], None)
    log.append(txn, producer_id=9, producer_epoch=1, base_sequence=0, is_transactional=True)
    log.append(
        marker_batch(BYTES_SCHEMA, True, 4, START),
        producer_id=9,
        producer_epoch=1,
        is_transactional=True,
        is_control=True,
        is_commit=True,
    )
    return log, [small, big, txn]


def kafka_read(data: bytes) -> list[tuple[Any, list[Any]]]:
    """kafka-python's view of encoded batches: (batch, its records), CRCs checked."""
    out = []
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        out.append((batch, list(batch)))
    return out


def test_fetched_batches_read_back_with_offsets_and_flags(tmp_path: Any) -> None:
    log, (small, big, _) = stored_runs(tmp_path)
    runs = log.read_raw(0, max_bytes=1 << 30)
    data = encode_stored(runs, fetch_offset=0, limit=log.log_end_offset)
    batches = kafka_read(data)
    assert [(b.base_offset, b.last_offset_delta) for b, _ in batches] == [
        (0, 3),
        (4, 2999),
        (3004, 0),
        (3005, 0),
    ]
    (compacted, rows), (plain, big_rows), (in_txn, txn_rows), (marker, marker_rows) = batches
    # Compaction removed offset 0: the other rows keep their offsets (gap via offsetDelta).
    assert [r.offset for r in rows] == [1, 2, 3]
    expected = as_tuples(small)[1:]
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in rows] == expected
    assert compacted.leader_epoch == 2 and plain.leader_epoch == 3
    assert [r.offset for r in big_rows] == list(range(4, 3004))
    assert [(r.timestamp, r.key, r.value) for r in big_rows] == [t[:3] for t in as_tuples(big)]
    assert in_txn.is_transactional and not in_txn.is_control_batch
    assert (in_txn.producer_id, in_txn.producer_epoch, in_txn.base_sequence) == (9, 1, 0)
    assert [(r.key, r.value) for r in txn_rows] == [(b"t", b"in txn")]
    assert marker.is_control_batch and marker.is_transactional and marker.producer_id == 9
    assert marker_rows[0].commit and struct.unpack(">hi", marker_rows[0].value) == (0, 4)
    # kio agrees on every batch (its own CRC, length and offset checks).
    position = 0
    while position < len(data):
        kio_batch, used = read_batch(data, position)
        position += used
    assert kio_batch.base_offset == 3005 and position == len(data)


def test_offsets_left_out_at_the_end_become_a_control_batch(tmp_path: Any) -> None:
    log, _ = stored_runs(tmp_path)
    runs, next_offset = log.read_raw_until(3004, skip=lambda h: h.is_control)
    data = encode_stored(runs, fetch_offset=3004, limit=3006, next_offset=next_offset)
    (txn, _), (gap, gap_rows) = kafka_read(data)
    assert txn.base_offset == 3004 and next_offset == 3006
    assert gap.is_control_batch and gap.next_offset == 3006 and gap_rows[0].commit
    # Nothing but left-out offsets: only the control batch, so the client moves on.
    ((only, _),) = kafka_read(encode_stored([], fetch_offset=3005, next_offset=3006))
    assert (only.base_offset, only.next_offset, only.producer_id) == (3005, 3006, -1)


def test_batches_past_the_limit_are_left_out(tmp_path: Any) -> None:
    log, _ = stored_runs(tmp_path)
    runs = log.read_raw(0, max_bytes=1 << 30)
    batches = kafka_read(encode_stored(runs, fetch_offset=0, limit=3004))
    assert [b.base_offset for b, _ in batches] == [0, 4]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_fetches_read_back(tmp_path: Any, codec: str) -> None:
    log, (small, _, _) = stored_runs(tmp_path, **{"compression.type": "zstd"})
    data = encode_stored(log.read_raw(0, max_bytes=200), fetch_offset=0, compression=codec)
    [(batch, rows)] = kafka_read(data)
    assert batch.compression_type == CODEC_IDS[codec]
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in rows] == as_tuples(small)[1:]


def test_log_append_time_and_producer_fields_survive_a_round_trip(tmp_path: Any) -> None:
    log = Log.open(
        tmp_path / "t-0",
        LogConfig.from_kafka({"message.timestamp.type": "LogAppendTime"}),
        clock=lambda: START + 777,
    )
    records = sample(25)
    [produced] = decode_produce(kafka_batch(records, "lz4", producer=(5, 0, 0)))
    log.append(produced.records, producer_id=5, producer_epoch=0, base_sequence=0)
    [(batch, rows)] = kafka_read(encode_stored(log.read_raw(0), fetch_offset=0))
    assert batch.timestamp_type == 1 and batch.max_timestamp == START + 777
    assert {r.timestamp for r in rows} == {START + 777}
    assert [(r.key, r.value, list(r.headers)) for r in rows] == [t[1:] for t in records]
    # And the Kafka batch we send is itself a valid produce (offset deltas from 0).
    [again] = decode_produce(encode_stored(log.read_raw(0), fetch_offset=0))
    assert [t[1:] for t in as_tuples(again)] == [t[1:] for t in records]


# ================================================================= typed topics

SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False),
        ("age", pa.int32()),
        ("score", pa.float64()),
        ("ok", pa.bool_()),
        ("seen", pa.timestamp("ms")),
        ("tags", pa.list_(pa.string())),
    ]
)


def test_typed_values_round_trip_as_json(tmp_path: Any) -> None:
    values = [
        {
            "name": 'a "quoted" \\ name',
            "age": 3,
            "score": 1.5,
            "ok": True,
            "seen": "2024-01-02 03:04:05.678",
            "tags": ["x", "y"],
        },
        {"name": "ü", "age": None, "score": 1e300, "ok": False, "seen": None, "tags": []},
        None,
        {"name": "line\nbreak", "age": -7},
    ]
    texts = [None if v is None else json.dumps(v).encode() for v in values]
    records = [(START + i, b"k", text, []) for i, text in enumerate(texts)]
    [produced] = decode_produce(kafka_batch(records), value_schema=SCHEMA)
    assert produced.records.schema == record_schema(SCHEMA)
    typed = produced.records.column("value").to_pylist()
    assert typed[0]["age"] == 3 and typed[0]["tags"] == ["x", "y"] and typed[2] is None
    assert typed[3]["name"] == "line\nbreak" and typed[3]["score"] is None
    log = Log.open(tmp_path / "typed-0")
    log.append(produced.records)
    [(_, rows)] = kafka_read(encode_stored(log.read_raw(0), fetch_offset=0))
    back = [None if r.value is None else json.loads(r.value) for r in rows]
    for sent, got in zip(values, back, strict=True):
        if sent is None:
            assert got is None
            continue
        full = {f.name: None for f in SCHEMA} | sent
        if full.get("tags") is None:
            full["tags"] = None
        assert got == full
    # What a Kafka client reads back, produced again, is stored the same.
    [again] = decode_produce(encode_stored(log.read_raw(0), fetch_offset=0), value_schema=SCHEMA)
    assert again.records.column("value").to_pylist() == typed


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b'{"name": "a", "age": "old"}', "field 'age'"),
        (b'{"name": "a", "age": 3000000000}', "field 'age'"),
        (b'{"name": "a", "height": 2}', "field 'height' is not in the topic's schema"),
        (b'{"age": 2}', "field 'name' is missing or null"),
        (b"[1, 2]", "not an object"),
        (b"{nope", "not JSON"),
        (b'{"name": "a"} {"name": "b"}', "value 1"),
    ],
)
def test_a_value_that_does_not_fit_the_schema_is_refused(value: bytes, message: str) -> None:
    good = json.dumps({"name": "fine"}).encode()
    data = kafka_batch([(START, None, good, []), (START, None, value, [])])
    with pytest.raises(InvalidRecordError, match=message):
        decode_produce(data, value_schema=SCHEMA)


def seal(batch: pa.RecordBatch, base_offset: int, attributes: int = 0) -> bytes:
    """``batch`` as a stored batch (what the log writes), bytes."""
    encoder = BatchEncoder()
    stamps = batch.column("timestamp").to_numpy()
    pieces, _ = encoder.seal(
        encoder.payload(batch, None),
        base_offset=base_offset,
        partition_leader_epoch=1,
        attributes=attributes,
        last_offset_delta=batch.num_rows - 1,
        base_timestamp=int(stamps.min()),
        max_timestamp=int(stamps.max()),
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        record_count=batch.num_rows,
    )
    return b"".join(bytes(p) for p in pieces)


_maybe_bytes = st.none() | st.binary(max_size=40)
_record = st.tuples(
    st.integers(-(2**41), 2**45),
    _maybe_bytes,
    _maybe_bytes,
    st.lists(st.tuples(st.text(max_size=8), _maybe_bytes), max_size=3),
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(records=st.lists(_record, min_size=1, max_size=80), base=st.integers(0, 2**40))
def test_any_records_round_trip_through_both_directions(
    records: list[tuple[Any, ...]], base: int
) -> None:
    batch = build_batch(
        BYTES_SCHEMA,
        [r[1] for r in records],
        [r[2] for r in records],
        [r[0] for r in records],
        [r[3] or None for r in records],
    )
    data = encode_stored([seal(batch, base)], fetch_offset=base)
    [(_, rows)] = kafka_read(data)
    assert [r.offset for r in rows] == list(range(base, base + len(records)))
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in rows] == records
    assert as_tuples(decode_produce(data)[0]) == records


_header_entry = st.none() | st.fixed_dictionaries(
    {"key": st.none() | st.text(max_size=8), "value": _maybe_bytes}
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    records=st.lists(
        st.tuples(
            st.integers(-(2**45), 2**45),
            st.integers(0, 2**33),
            _maybe_bytes,
            _maybe_bytes | st.binary(min_size=100, max_size=300),
            st.none() | st.lists(_header_entry, max_size=3),
        ),
        min_size=1,
        max_size=48,
    )
)
def test_small_batches_written_in_python_match_the_vectorized_path(
    records: list[tuple[Any, ...]],
) -> None:
    """A few records are written by a Python walk (cheaper than the vectorized path's
    fixed cost): the same bytes, for any keys, values, deltas and headers (null lists,
    null entries, null header keys and values included)."""
    stamps, deltas, keys, values, headers = (list(c) for c in zip(*records, strict=True))
    columns = (
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        np.array(stamps, np.int64),
        np.array(deltas, np.int64),
        pa.array(headers, HEADERS_TYPE),
    )
    walked = kafka_records._walk_encode(*columns)
    assert walked == kafka_records._encode_records(*columns).to_pybytes()


def test_a_typed_topic_marker_is_a_control_batch_with_kafka_s_value() -> None:
    schema = record_schema(SCHEMA)
    marker = seal(marker_batch(schema, False, 3, START), 10, attributes=0x30)
    [(batch, [record])] = kafka_read(encode_stored([marker], fetch_offset=10))
    assert batch.is_control_batch and record.abort and len(record.value) == 6
