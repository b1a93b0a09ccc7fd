"""Helpers for the transaction tests, as fixtures: fresh transactional ids, transactional
producers, and reading a whole topic at an isolation level."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest

_ids = itertools.count()


def new_txn_id() -> str:
    return f"tx-{time.monotonic_ns()}-{next(_ids)}"


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
def transactional() -> Callable[..., Any]:
    """``transactional(cluster, **config)`` -> an initialized transactional producer."""
    return open_transactional
