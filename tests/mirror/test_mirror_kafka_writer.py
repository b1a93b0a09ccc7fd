"""What the Kafka target's writer hands to confluent-kafka, from Arrow tables: pure."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from raystream.mirror.clusters import HEADERS_TYPE, Delivery
from raystream.mirror.kafka_cluster import header_lists, kafka_values


def test_headers_are_cut_per_row_from_one_flattened_column_even_sliced_or_chunked() -> None:
    rows = [
        [{"key": "a", "value": b"1"}],
        None,
        [],
        [{"key": "b", "value": b"2"}, {"key": "c", "value": None}],
        [{"key": "d", "value": b"4"}],
    ]
    column = pa.chunked_array([pa.array(rows[:2], HEADERS_TYPE), pa.array(rows[2:], HEADERS_TYPE)])
    assert header_lists(column, 5) == [
        [("a", b"1")],
        None,
        None,
        [("b", b"2"), ("c", None)],
        [("d", b"4")],
    ]
    sliced = pa.chunked_array([pa.array(rows, HEADERS_TYPE).slice(3, 2)])
    assert header_lists(sliced, 2) == [[("b", b"2"), ("c", None)], [("d", b"4")]]


def test_rows_without_headers_give_none_without_a_pass_over_them() -> None:
    column = pa.chunked_array([pa.array([None, [], None], HEADERS_TYPE)])
    assert header_lists(column, 3) == [None, None, None]


def test_a_byte_topics_values_go_as_they_are_and_a_typed_topics_as_json_objects() -> None:
    plain = pa.table({"timestamp": [1, 2], "key": [None, b"k"], "value": [b"x", None]})
    assert kafka_values(plain).to_pylist() == [b"x", None]
    typed = pa.table(
        {
            "partition": pa.array([0, 0], pa.int32()),
            "timestamp": [1, 2],
            "key": [None, b"k"],
            "id": [1, 2],
            "name": ["a", None],
            "headers": pa.array([[], []], HEADERS_TYPE),
        }
    )
    assert [json.loads(v) for v in kafka_values(typed).to_pylist()] == [
        {"id": 1, "name": "a"},
        {"id": 2, "name": None},
    ]


@pytest.mark.parametrize(
    ("delivery", "consecutive"),
    [
        (Delivery(3, 10), True),  # a writer that vouches for consecutive offsets
        (Delivery(3, 10, 12), True),
        (Delivery(3, 10, 15), False),  # another writer wrote in between
        (Delivery(1, 7, 7), True),
    ],
)
def test_a_delivery_knows_whether_its_rows_sit_at_consecutive_offsets(
    delivery: Delivery, consecutive: bool
) -> None:
    assert delivery.consecutive() is consecutive


def test_librdkafka_errors_map_to_retry_fail_or_fenced() -> None:
    """A fenced producer fails the flow (the runner stops on ProducerFencedError, as
    Kafka Connect fails a fenced task); a retriable error is retried."""
    from confluent_kafka import KafkaError, KafkaException

    from raystream.errors import ConnectError, ProducerFencedError, RetriableConnectError
    from raystream.mirror.kafka_cluster import kafka_error

    fenced = KafkaError(KafkaError._FENCED, "Producer fenced by newer instance", fatal=True)
    old_epoch = KafkaError(
        KafkaError.INVALID_PRODUCER_EPOCH,
        "Broker: Producer attempted an operation with an old epoch",
        fatal=True,
    )
    lost = KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "sequence lost", fatal=True)
    busy = KafkaError(KafkaError.REQUEST_TIMED_OUT, "timed out", retriable=True)
    assert isinstance(kafka_error("commit", KafkaException(fenced)), ProducerFencedError)
    assert isinstance(kafka_error("commit", KafkaException(old_epoch)), ProducerFencedError)
    lost_error = kafka_error("send", KafkaException(lost))
    assert type(lost_error) is ConnectError and "failed for good" in str(lost_error)
    assert isinstance(kafka_error("send", KafkaException(busy)), RetriableConnectError)
