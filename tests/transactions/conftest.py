"""Helpers for the transaction tests, as fixtures: fresh transactional ids, transactional
producers, and reading a whole topic at an isolation level."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest

from raystream.types import TopicPartition

_ids = itertools.count()


def new_txn_id() -> str:
    return f"tx-{time.monotonic_ns()}-{next(_ids)}"


def read_topic(cluster: Any, topic: str, isolation: str, partitions: int = 1) -> list[Any]:
    """Every value of the topic readable at this isolation level, partition by partition."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with cluster.consumer(
        auto_offset_reset="earliest", enable_auto_commit=False, isolation_level=isolation
    ) as consumer:
        consumer.assign(tps)
        end = consumer.end_offsets(tps)
        values: list[Any] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < end[tp] for tp in tps):
            assert time.monotonic() < deadline, f"stuck at {[consumer.position(tp) for tp in tps]}"
            table = consumer.poll_arrow(timeout_ms=200)
            values += table.column("value").to_pylist() if table.num_rows else []
        return values


def open_transactional(cluster: Any, **config: Any) -> Any:
    """A transactional producer, initialized (a fresh transactional id unless given)."""
    tid = config.pop("transactional_id", None) or new_txn_id()
    producer = cluster.producer(transactional_id=tid, **config)
    producer.init_transactions()
    return producer


@pytest.fixture
def txn_id() -> Callable[[], str]:
    """``txn_id()`` -> a transactional id no other test uses."""
    return new_txn_id


@pytest.fixture
def read_all() -> Callable[..., list[Any]]:
    """``read_all(cluster, topic, isolation, partitions=1)`` -> every readable value."""
    return read_topic


@pytest.fixture
def transactional() -> Callable[..., Any]:
    """``transactional(cluster, **config)`` -> an initialized transactional producer."""
    return open_transactional
