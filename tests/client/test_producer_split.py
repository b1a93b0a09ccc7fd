"""A batch the leader refuses as too large is split and its halves resent, as Kafka's
producer does; only a record that is over the limit on its own fails."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from raystream.client.producer import Producer
from raystream.errors import RecordTooLargeError


@pytest.fixture
def producers(shared_cluster: Any) -> Iterator[Callable[..., Producer]]:
    made: list[Producer] = []

    def make(**config: Any) -> Producer:
        producer = Producer(shared_cluster, **config)
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.close(timeout=10)


@pytest.fixture
def splits(caplog: pytest.LogCaptureFixture) -> Callable[[], int]:
    """How many times the producer split a refused batch (the sender logs each one)."""
    caplog.set_level(logging.DEBUG, logger="raystream.client.sender")
    return lambda: sum("refused as too large" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_batch_over_max_message_bytes_is_split_until_it_fits(
    shared_cluster, make_topic, read_all, producers, splits, idempotent
) -> None:
    """60 records of 100 bytes (about 6.5 kB as Kafka counts them) against a 1000-byte
    limit: every one is written once, in order, at consecutive offsets."""
    topic = make_topic(config={"max.message.bytes": "1000"})
    producer = producers(acks="all", linger_ms=10_000, enable_idempotence=idempotent)
    values = [b"%03d" % i + b"x" * 97 for i in range(60)]
    futures = [producer.send(topic, value) for value in values]
    producer.flush(timeout=60)
    assert [f.get(timeout=10).offset for f in futures] == list(range(60))
    assert read_all(shared_cluster, topic, "read_uncommitted") == values
    assert splits() >= 7  # 6.5 kB in halves down to batches under 1000 bytes


def test_only_the_record_over_the_limit_fails_and_order_holds(
    shared_cluster, make_topic, read_all, producers, splits
) -> None:
    """An idempotent producer's batches in flight behind the split one keep their
    sequence numbers (the halves take the refused batch's); the failed record leaves a
    gap the partition renumbers past."""
    topic = make_topic(config={"max.message.bytes": "1000"})
    producer = producers(acks="all", linger_ms=5, batch_size=1500)
    values = [b"%03d" % i + b"y" * 60 for i in range(200)]
    values[77] = b"z" * 3000
    futures = [producer.send(topic, value) for value in values]
    producer.flush(timeout=60)
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes=1000"):
        futures[77].get(timeout=10)
    kept = values[:77] + values[78:]
    offsets = [f.get(timeout=10).offset for i, f in enumerate(futures) if i != 77]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(kept)
    assert read_all(shared_cluster, topic, "read_uncommitted") == kept
    assert splits() >= 2


@pytest.mark.parametrize("sorted_rows", [False, True])
def test_split_requests_answer_each_record_with_its_own_offset(sorted_rows) -> None:
    """Halves of a request (a slice, or row indices of a chunk sorted by partition)
    take its place: each record's metadata comes from the half that holds it."""
    import numpy as np

    from raystream.client.accumulator import split_by_partition
    from raystream.client.results import FutureRecordMetadata, ProduceResult
    from raystream.records import BYTES_SCHEMA, build_batch

    rows = 10
    values = [b"%d" % i for i in range(rows)]
    batch = build_batch(BYTES_SCHEMA, [None] * rows, values, [0] * rows, None)
    parts = np.array([1, 0] * 5 if sorted_rows else [0] * rows)
    result = ProduceResult("t")
    requests, order = split_by_partition(batch, parts, "t", result, 0.0, rows)
    result.set_requests(requests, np.zeros(rows, np.int64), order)
    first = requests[0]
    left, right = first.split()
    left_left, left_right = left.split()
    assert left_left.rows + left_right.rows == left.rows == first.rows // 2
    assert (
        right.view().column("value").to_pylist()
        == first.view().column("value").to_pylist()[left.rows :]
    )
    left_left.complete(100)
    left_right.complete(100 + left_left.rows)
    right.complete(100 + left.rows)
    for request in requests[1:]:
        request.complete(200)
    assert result.done.is_set()
    partition_zero = [i for i in range(rows) if parts[i] == 0]
    offsets = [FutureRecordMetadata(result, i).get(timeout=1).offset for i in partition_zero]
    assert offsets == list(range(100, 100 + first.rows))
