"""Client metrics: Kafka's windowed stats (pure, with a given clock), and the values a
real Producer and Consumer report after real sends, polls and commits."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from raystream.client.consumer import Consumer
from raystream.client.metrics import ConsumerMetrics, ProducerMetrics, Windowed
from raystream.client.producer import Producer
from raystream.errors import InvalidRecordError
from raystream.types import TopicPartition

# ------------------------------------------------------------------ pure stats


def test_a_windowed_stat_averages_maxes_and_rates_over_kafkas_window() -> None:
    stat = Windowed(window_s=30, samples=2)
    assert math.isnan(stat.avg(0.0)) and math.isnan(stat.max(0.0)) and stat.rate(0.0) == 0.0
    stat.record(4.0, now=0.0)
    stat.record(2.0, now=1.0)
    assert (stat.avg(1.0), stat.max(1.0)) == (3.0, 4.0)
    assert stat.rate(1.0) == pytest.approx(6 / 30)  # at least one whole window
    assert stat.count_rate(1.0) == pytest.approx(2 / 30)
    stat.record(10.0, now=40.0)  # a second window
    assert stat.avg(40.0) == pytest.approx(16 / 3)
    assert stat.rate(40.0) == pytest.approx(16 / 40)
    assert stat.max(65.0) == 10.0  # the first window expired: 0 + 2 * 30 < 65
    assert stat.avg(65.0) == 10.0
    assert math.isnan(stat.avg(200.0)) and stat.rate(200.0) == 0.0


def test_producer_metrics_count_sends_retries_errors_and_latency() -> None:
    metrics = ProducerMetrics()
    metrics.record_send(100, 5000, retry=False, queued_s=0.004, now=1.0)
    metrics.record_send(100, 5000, retry=True, queued_s=0.002, now=1.5)
    metrics.record_answer(0.003, now=1.5)
    metrics.record_answer(0.005, now=1.6)
    metrics.record_errors(7, now=1.7)
    snapshot = metrics.snapshot(2.0, **{"buffer-available-bytes": 10})
    assert snapshot["record-send-total"] == 200
    assert snapshot["record-retry-total"] == 100
    assert snapshot["record-error-total"] == 7
    assert snapshot["request-total"] == 2 and snapshot["response-total"] == 2
    assert snapshot["request-latency-avg"] == pytest.approx(4.0)
    assert snapshot["request-latency-max"] == pytest.approx(5.0)
    assert snapshot["records-per-request-avg"] == 100
    assert snapshot["batch-size-avg"] == 5000 and snapshot["outgoing-byte-total"] == 10000
    assert snapshot["record-queue-time-max"] == pytest.approx(4.0)
    assert snapshot["record-send-rate"] == pytest.approx(200 / 30)
    assert snapshot["buffer-available-bytes"] == 10


def test_consumer_metrics_report_lag_per_partition_and_its_max() -> None:
    metrics = ConsumerMetrics()
    metrics.record_poll(1.0)
    metrics.record_fetch(0.010, 2048, 20, now=1.0)
    metrics.record_consumed(20, 2048.0, now=1.0)
    metrics.record_poll(1.5)
    metrics.record_commit(0.002, now=1.6)
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    snapshot = metrics.snapshot(2.0, {tp0: 3, tp1: 9})
    assert snapshot["records-lag-max"] == 9
    assert snapshot["records-lag"] == {tp0: 3, tp1: 9}
    assert snapshot["records-consumed-total"] == 20
    assert snapshot["bytes-consumed-total"] == 2048
    assert snapshot["fetch-latency-avg"] == pytest.approx(10.0)
    assert snapshot["fetch-size-max"] == 2048
    assert snapshot["commit-total"] == 1
    assert snapshot["time-between-poll-avg"] == pytest.approx(500.0)
    assert snapshot["last-poll-seconds-ago"] == pytest.approx(0.5)
    assert math.isnan(ConsumerMetrics().snapshot(0.0, {})["records-lag-max"])


# ------------------------------------------------------------ real clients


@pytest.fixture
def clients(shared_cluster: Any) -> Iterator[Callable[..., Any]]:
    """``clients(kind, ...)``: Producers and Consumers closed after the test."""
    made: list[Any] = []

    def make(kind: type, *args: Any, **config: Any) -> Any:
        client = kind(*args, cluster=shared_cluster, **config)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_a_producers_metrics_move_with_its_sends_and_failures(
    shared_cluster, make_topic, clients
) -> None:
    topic = make_topic(partitions=2)
    producer = clients(Producer, acks=1, linger_ms=50, buffer_memory=1 << 20)
    before = producer.metrics()
    assert before["record-send-total"] == 0 and before["request-total"] == 0
    assert before["buffer-available-bytes"] == before["buffer-total-bytes"] == 1 << 20
    for i in range(300):
        producer.send(topic, b"x" * 100, partition=i % 2)
    producer.flush(timeout=60)
    after = producer.metrics()
    assert after["record-send-total"] == 300
    assert after["record-error-total"] == 0 and after["record-retry-total"] == 0
    assert 2 <= after["request-total"] <= 300
    assert after["response-total"] == after["request-total"]
    assert after["records-per-request-avg"] == pytest.approx(300 / after["request-total"])
    assert after["record-send-rate"] > 0
    assert 0 < after["request-latency-avg"] <= after["request-latency-max"] < 60_000
    assert after["batch-size-avg"] > 100  # bytes of at least one record per call
    assert after["outgoing-byte-total"] >= 300 * 100
    assert after["buffer-available-bytes"] == 1 << 20  # everything acknowledged
    assert after["requests-in-flight"] == 0


def test_a_producers_failed_records_count_as_errors(shared_cluster, make_topic, clients) -> None:
    import pyarrow as pa

    topic = make_topic(schema=pa.schema([("n", pa.int64())]))
    producer = clients(Producer, acks=1)
    good = producer.send(topic, {"n": 1})
    bad = producer.send(topic, {"n": "not a number"})  # refused when the batch is built
    producer.flush(timeout=60)
    assert good.succeeded()
    with pytest.raises(InvalidRecordError):
        bad.get(timeout=10)
    metrics = producer.metrics()
    assert metrics["record-error-total"] == 1
    assert metrics["record-send-total"] == 1


def test_a_consumers_metrics_move_with_its_polls_lag_and_commits(
    shared_cluster, make_topic, clients
) -> None:
    topic = make_topic(partitions=2)
    with Producer(shared_cluster, acks=1) as producer:
        for i in range(100):
            producer.send(topic, b"y" * 50, partition=i % 2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer = clients(
        Consumer, group_id=f"{topic}-g", auto_offset_reset="earliest", enable_auto_commit=False
    )
    consumer.assign(tps)
    first = consumer.poll(timeout_ms=10_000, max_records=10)
    assert sum(map(len, first.values())) == 10
    metrics = consumer.metrics()
    assert metrics["records-consumed-total"] == 10
    assert metrics["bytes-consumed-total"] >= 10 * 50
    assert metrics["fetch-total"] >= 1
    assert 0 < metrics["fetch-latency-avg"] <= metrics["fetch-latency-max"]
    assert metrics["assigned-partitions"] == 2
    polled_tp = next(iter(first))
    assert metrics["records-lag"][polled_tp] == 50 - consumer.position(polled_tp)
    assert metrics["records-lag-max"] == max(metrics["records-lag"].values())
    got = 10
    deadline = time.monotonic() + 30
    while got < 100:
        assert time.monotonic() < deadline, f"{got} of 100"
        got += sum(map(len, consumer.poll(timeout_ms=200).values()))
    consumer.commit()
    metrics = consumer.metrics()
    assert metrics["records-consumed-total"] == 100
    assert metrics["records-lag"] == {tps[0]: 0, tps[1]: 0} and metrics["records-lag-max"] == 0
    assert metrics["commit-total"] == 1 and metrics["commit-latency-max"] > 0
    assert metrics["records-consumed-rate"] > 0
    assert metrics["last-poll-seconds-ago"] >= 0 and metrics["time-between-poll-avg"] >= 0
