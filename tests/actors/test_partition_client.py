"""The server actors' partition client on a real Ray: produce, fetch, list offsets,
retries through a leader restart, deadlines; and the import line it lets the actors keep."""

from __future__ import annotations

import ast
import asyncio
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import ray
from ray._private import state

from raystream.actors.partition_client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    PartitionClient,
)
from raystream.errors import RaystreamTimeoutError, UnknownTopicOrPartitionError
from raystream.records import build_batch
from raystream.types import TopicPartition

ROOT = Path(__file__).resolve().parents[2]


def batch(cluster: Any, topic: str, values: list[bytes]) -> pa.RecordBatch:
    schema = cluster.topic_metadata(topic).record_schema
    return build_batch(schema, [None] * len(values), values, [0] * len(values), None)


def test_produce_fetch_and_list_offsets_round_trip(shared_cluster, make_topic) -> None:
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    first, second = batch(shared_cluster, topic, [b"a", b"b"]), batch(shared_cluster, topic, [b"c"])

    async def run() -> tuple[Any, ...]:
        client = PartitionClient(shared_cluster.namespace)
        bases = [await client.produce(tp, b, 30) for b in (first, second)]
        table, after = (await client.fetch(tp, 0)).decode()
        ends = [await client.list_offset(tp, t) for t in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP)]
        return bases, table, after, ends

    bases, table, after, ends = asyncio.run(run())
    assert bases == [0, 2]
    assert table.column("value").to_pylist() == [b"a", b"b", b"c"]
    assert table.column("offset").to_pylist() == [0, 1, 2] and after == 3
    assert ends == [0, 3]


def test_a_produce_retries_through_a_restart_of_the_leader(shared_cluster, make_topic) -> None:
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    leader = shared_cluster.topic_metadata(topic, refresh=True).partitions[0].leader_handle
    restarts = state.actors(actor_id=leader._actor_id.hex())["NumRestarts"]

    async def run() -> list[int]:
        client = PartitionClient(shared_cluster.namespace)
        bases = [await client.produce(tp, batch(shared_cluster, topic, [b"before"]), 30)]
        ray.kill(leader, no_restart=False)  # the client's cached leader dies
        deadline = time.monotonic() + 60
        while state.actors(actor_id=leader._actor_id.hex())["NumRestarts"] == restarts:
            assert time.monotonic() < deadline, "the leader was not restarted"
            await asyncio.sleep(0.05)
        bases.append(await client.produce(tp, batch(shared_cluster, topic, [b"after"]), 60))
        table, _ = (await client.fetch(tp, 0)).decode()
        assert table.column("value").to_pylist() == [b"before", b"after"]
        return bases

    assert asyncio.run(run()) == [0, 1]


def test_a_request_still_failing_at_its_deadline_says_why(shared_cluster, make_topic) -> None:
    topic = make_topic()
    started = time.monotonic()
    with pytest.raises(RaystreamTimeoutError, match=f"{topic}-5") as raised:
        asyncio.run(
            PartitionClient(shared_cluster.namespace).produce(
                TopicPartition(topic, 5), batch(shared_cluster, topic, [b"x"]), 0.5
            )
        )
    assert isinstance(raised.value.__cause__, UnknownTopicOrPartitionError)
    assert time.monotonic() - started < 10


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_server_actors_and_the_transport_import_nothing_of_the_clients() -> None:
    """The client package imports the actors (to start a cluster); the actors reach
    other actors through the transport and their partition client, never through the
    clients, so the two packages form no import circle."""
    package = ROOT / "raystream"
    paths = [*sorted((package / "actors").glob("*.py")), package / "transport.py"]
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in paths
        for name in imported_modules(path)
        if name == "raystream.client" or name.startswith("raystream.client.")
    }
    assert not offenders
