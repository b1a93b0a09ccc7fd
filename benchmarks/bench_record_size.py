"""Bytes on disk per record: raystream's stored batches next to Kafka's record batch v2.

Appends 100-byte records (no key, and keyed with one header) through
:class:`raystream.log.Log` in batches of 1, 10, 100 records and in full batches (what the
producer's default ``batch_size`` of 64 KiB holds: 496 such records), and divides the
segment bytes by the records. Side by side: the same batches as raystream stored every
batch before the compact payload (a 64-byte header and a self-contained Arrow IPC
stream, :func:`arrow_ipc_size`), and as Kafka's record batch v2, built by kafka-python's
``DefaultRecordBatchBuilder`` (uncompressed, as here). Ratios are to Kafka.

Then the CPU price of the compact payload: microseconds to encode a batch into its
payload and to decode it back into Arrow, compact against Arrow IPC (the encoder's
cached schema message and ``RecordBatch.serialize``, and the decoder's cached schema),
best of five rounds.

Run:  python -m benchmarks.bench_record_size [--batches 200]
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import timeit
from collections.abc import Callable

import pyarrow as pa
from kafka.record.default_records import DefaultRecordBatchBuilder

from benchmarks import harness
from raystream.log import Log, LogConfig
from raystream.log.batch import END_OF_STREAM, HEADER_SIZE, BatchEncoder, PayloadDecoder
from raystream.records import BYTES_SCHEMA, build_batch

VALUE_BYTES = 100
FULL_BATCH = 65_536 // (VALUE_BYTES + 32)
"""Records in a full producer batch: ``batch_size`` 64 KiB over the producer's size
estimate of a 100-byte record (value plus 32 bytes)."""
START = 1_700_000_000_000


def records(rows: int, keyed: bool, first: int) -> pa.RecordBatch:
    """``rows`` records of 100-byte values, timestamps a millisecond apart; keyed ones
    carry a 10-byte key and one header ("trace", 16 bytes)."""
    values = [(b"%010d" % (first + i)) * 10 for i in range(rows)]
    keys = [b"key-%06d" % ((first + i) % 1000) for i in range(rows)] if keyed else [None] * rows
    headers = [[("trace", b"t" * 16)] for _ in range(rows)] if keyed else None
    stamps = [START + first + i for i in range(rows)]
    return build_batch(BYTES_SCHEMA, keys, values, stamps, headers)


def raystream_bytes(batches: list[pa.RecordBatch]) -> int:
    """Bytes of the log's segments after appending ``batches``."""
    with tempfile.TemporaryDirectory(prefix="raystream-size-") as directory:
        log = Log.open(os.path.join(directory, "size-0"), LogConfig(), lambda: START)
        for batch in batches:
            log.append(batch)
        size = log.size_bytes
        log.close()
    return size


def arrow_ipc_size(batch: pa.RecordBatch) -> int:
    """A stored batch as raystream wrote every batch before: header and IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return HEADER_SIZE + sink.getvalue().size


def kafka_size(batch: pa.RecordBatch) -> int:
    """The batch as Kafka's record batch v2 (kafka-python's encoder, uncompressed)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    rows = batch.to_pylist()
    for offset, row in enumerate(rows):
        headers = [(h["key"], h["value"]) for h in row["headers"] or []]
        builder.append(
            offset, timestamp=row["timestamp"], key=row["key"], value=row["value"], headers=headers
        )
    return len(builder.build())


def bytes_per_record(rows: int, keyed: bool, count: int) -> tuple[float, float, float]:
    """Bytes per record of ``count`` batches of ``rows`` records: as raystream stores
    them, as Arrow IPC streams (the format before the compact payload), as Kafka v2."""
    batches = [records(rows, keyed, i * rows) for i in range(count)]
    total = rows * count
    return (
        raystream_bytes(batches) / total,
        sum(map(arrow_ipc_size, batches)) / total,
        sum(map(kafka_size, batches)) / total,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200, help="batches per case (≥ 1)")
    args = parser.parse_args()
    print(harness.machine_line("kafka-python"))
    print(f"bytes on disk per {VALUE_BYTES}-byte record (uncompressed), {args.batches} batches")
    header = (
        f"{'records':<28}{'per batch':>10}{'raystream':>11}{'Arrow IPC':>11}{'Kafka v2':>10}"
        f"{'raystream/Kafka':>17}{'Arrow IPC/Kafka':>17}"
    )
    print(header)
    print("-" * len(header))
    for keyed in (False, True):
        for rows in (1, 10, 100, FULL_BATCH):
            count = max(1, args.batches if rows < FULL_BATCH else args.batches // 10)
            ours, before, kafka = bytes_per_record(rows, keyed, count)
            name = "10-byte key, 1 header" if keyed else "no key, no headers"
            label = f"{rows} (full)" if rows == FULL_BATCH else str(rows)
            print(
                f"{name:<28}{label:>10}{ours:>11.1f}{before:>11.1f}{kafka:>10.1f}"
                f"{ours / kafka:>16.2f}x{before / kafka:>16.2f}x"
            )
    codec_costs()


def best_us(fn: Callable[[], object], number: int = 2000) -> float:
    """Microseconds per call of ``fn``, the best of five rounds."""
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def codec_costs() -> None:
    """Encode and decode time per batch, compact payload against Arrow IPC."""
    print()
    print("microseconds per batch (best of 5): encode to payload, decode to Arrow")
    header = (
        f"{'records per batch':<20}{'compact enc':>12}{'IPC enc':>9}"
        f"{'compact dec':>13}{'IPC dec':>9}"
    )
    print(header)
    print("-" * len(header))
    schema_message = BYTES_SCHEMA.serialize().to_pybytes()
    encoder, decoder = BatchEncoder(), PayloadDecoder()
    for rows in (1, 10, 100):
        batch = records(rows, True, 0)
        compact = pa.py_buffer(b"".join(bytes(p) for p in encoder.payload(batch, None)))
        ipc = pa.py_buffer(schema_message + batch.serialize().to_pybytes() + END_OF_STREAM)
        decoder.decode(ipc)  # caches the schema, as a reader's decoder has it
        figures = (
            best_us(functools.partial(encoder.payload, batch, None)),
            best_us(lambda b=batch: [schema_message, b.serialize(), END_OF_STREAM]),
            best_us(functools.partial(decoder.decode, compact)),
            best_us(functools.partial(decoder.decode, ipc)),
        )
        widths = (12, 9, 13, 9)
        print(f"{rows:<20}" + "".join(f"{f:>{w}.1f}" for f, w in zip(figures, widths, strict=True)))


if __name__ == "__main__":
    main()
