"""Kafka record batch translation: records/s of :mod:`raystream.kafka.records` next to
kafka-python's ``DefaultRecordBatch`` reader and ``DefaultRecordBatchBuilder``.

Decode: Kafka record batches v2 (what a Kafka producer sends) into the Arrow record
batches raystream appends (:func:`~raystream.kafka.records.decode_produce`), against
kafka-python reading every record's key, value, timestamp and headers. Encode: stored
raystream batches (what a fetch answer carries) into Kafka record batches
(:func:`~raystream.kafka.records.encode_stored`), against kafka-python building the same
records one ``append`` at a time. 100-byte values, no key, timestamps a millisecond
apart, in batches of 1,000 and 10,000, uncompressed and lz4 (kafka-python's lz4 goes
through cramjam here: the python-lz4 it wants is not installed). Best of three rounds
of this process's CPU time (single-threaded work on a shared two-core machine, where
wall time mostly measures the neighbours).

Run:  python -m benchmarks.bench_kafka_records [--records 1000000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator

import cramjam
from kafka.record import default_records
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from benchmarks import harness
from raystream.kafka.records import decode_produce, encode_stored
from raystream.log.batch import BatchEncoder
from raystream.records import BYTES_SCHEMA, build_batch

VALUE_BYTES = 100
START = 1_700_000_000_000
CODECS = {None: 0, "lz4": 3}


def _use_cramjam_lz4() -> None:
    """kafka-python's lz4 codec through cramjam (the same LZ4 frame format)."""
    default_records.lz4_encode = lambda data: bytes(cramjam.lz4.compress(data))
    default_records.lz4_decode = lambda data: bytes(cramjam.lz4.decompress(data))
    default_records.codecs.has_lz4 = lambda: True


def kafka_batches(total: int, size: int, codec: str | None) -> list[bytes]:
    """Kafka record batches of ``size`` records each, built by kafka-python."""
    out = []
    for first in range(0, total, size):
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=CODECS[codec],
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 30,
        )
        for i in range(size):
            value = (b"%010d" % (first + i)) * 10
            builder.append(i, timestamp=START + first + i, key=None, value=value, headers=[])
        out.append(bytes(builder.build()))
    return out


def stored_batches(total: int, size: int) -> list[bytes]:
    """Stored raystream batches of ``size`` records each, as a fetch answer carries them."""
    encoder = BatchEncoder()
    out = []
    for first in range(0, total, size):
        values = [(b"%010d" % (first + i)) * 10 for i in range(size)]
        batch = build_batch(
            BYTES_SCHEMA, [None] * size, values, [START + first + i for i in range(size)], None
        )
        pieces, _ = encoder.seal(
            encoder.payload(batch, None),
            base_offset=first,
            partition_leader_epoch=0,
            attributes=0,
            last_offset_delta=size - 1,
            base_timestamp=START + first,
            max_timestamp=START + first + size - 1,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            record_count=size,
        )
        out.append(b"".join(bytes(p) for p in pieces))
    return out


def ours_decode(batches: list[bytes]) -> int:
    return sum(decode_produce(b)[0].record_count for b in batches)


def peer_decode(batches: list[bytes]) -> int:
    count = 0
    for data in batches:
        for record in DefaultRecordBatch(data):
            record.key, record.value, record.timestamp, record.headers  # noqa: B018
            count += 1
    return count


def ours_encode(stored: list[bytes], codec: str | None) -> int:
    return sum(len(encode_stored([run], fetch_offset=0, compression=codec)) for run in stored)


def rate(work: Callable[[], object], records: int, rounds: int = 3) -> float:
    """Records per CPU second, best of ``rounds``."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return records / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    total = args.records
    print(harness.machine_line("pyarrow", "numpy", "kafka-python", "cramjam"))
    print(f"{total:,} records of {VALUE_BYTES} bytes; records per CPU second, best of 3")
    row = "{:<9}{:>7,} {:<6}{:>12,.0f}{:>14,.0f}{:>7.1f}x"
    header = "{:<9}{:>7} {:<6}{:>12}{:>14}{:>8}".format(
        "direction", "batch", "codec", "raystream", "kafka-python", "ratio"
    )
    print(header)
    print("-" * len(header))
    for direction, size, codec, ours, peer in measure(total):
        print(row.format(direction, size, codec or "none", ours, peer, ours / peer), flush=True)


def measure(
    total: int,
    sizes: tuple[int, ...] = (1_000, 10_000),
    codecs: tuple[str | None, ...] = (None, "lz4"),
) -> Iterator[tuple[str, int, str | None, float, float]]:
    """(direction, batch size, codec, raystream's records per CPU second,
    kafka-python's) for decode and encode of ``total`` records, figure by figure as
    each is measured."""
    _use_cramjam_lz4()
    for size in sizes:
        stored = stored_batches(total, size)
        for codec in codecs:
            batches = kafka_batches(total, size, codec)
            ours = rate(lambda b=batches: ours_decode(b), total)
            peer = rate(lambda b=batches: peer_decode(b), total, rounds=1)
            yield "decode", size, codec, ours, peer
            ours = rate(lambda s=stored, c=codec: ours_encode(s, c), total)
            peer = rate(lambda n=size, c=codec: kafka_batches(total, n, c), total, rounds=1)
            yield "encode", size, codec, ours, peer


if __name__ == "__main__":
    main()
