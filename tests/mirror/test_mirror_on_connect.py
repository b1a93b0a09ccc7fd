"""MirrorMaker's source connector on Connect workers (not ``raystream mirror``'s runner).

The workers' runtime must tell the task where each batch landed (``commit_batch``), as
the runner does: that is what writes the offset syncs a group's offsets are translated
through, and what lets the task forget a batch's upstream offsets.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mirror_probes
import pytest
from ray import cloudpickle

from raystream.mirror.config import BYTES_CONVERTER
from raystream.mirror.offsets import OffsetSync
from raystream.types import TopicPartition
from tests.conftest import wait_until
from tests.mirror.conftest import read_partitions

cloudpickle.register_pickle_by_value(mirror_probes)

ROUNDS = 8
PER_ROUND = 60


@pytest.fixture(scope="module")
def source(shared_cluster: Any, tmp_path_factory) -> Iterator[Any]:
    from raystream.client.cluster import connect

    cluster = connect(
        namespace=f"mirror-connect-source-{os.getpid()}",
        data_dir=str(tmp_path_factory.mktemp("mirror-connect-source")),
    )
    yield cluster
    cluster.shutdown()


@pytest.fixture(scope="module")
def workers(shared_cluster: Any) -> Iterator[Any]:
    from raystream.connectors import Workers

    group = Workers(
        shared_cluster, group_id="mirror-cx", num_workers=1, plugins=mirror_probes.PLUGINS
    )
    yield group
    group.shutdown()


def flow_config(source: Any, target: Any, probe: Path) -> dict[str, str]:
    """MM2's source connector config of the flow a -> b, ``orders`` only."""
    return {
        "connector.class": "ProbedMirrorSourceConnector",
        "tasks.max": "1",
        "source.cluster.alias": "a",
        "source.cluster.raystream.namespace": source.namespace,
        "target.cluster.alias": "b",
        "target.cluster.raystream.namespace": target.namespace,
        "topics": "orders",
        "key.converter": BYTES_CONVERTER,
        "value.converter": BYTES_CONVERTER,
        "refresh.topics.interval.seconds": "0.5",
        "offset.lag.max": "25",
        mirror_probes.PROBE_KEY: str(probe),
    }


def mirrored(target: Any, count: int) -> bool:
    try:
        rows = read_partitions(target, "a.orders")
    except Exception:  # not created yet
        return False
    return sum(map(len, rows.values())) >= count


def offset_syncs(target: Any) -> list[OffsetSync]:
    topic = "mm2-offset-syncs.a.internal"
    tp = TopicPartition(topic, 0)
    with target.consumer(auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        syncs = []
        while consumer.position(tp) < end:
            for record in consumer.poll(timeout_ms=200).get(tp, []):
                syncs.append(OffsetSync.decode(record.key, record.value))
    return syncs


def test_on_connect_workers_the_source_task_writes_offset_syncs_and_forgets_written_batches(
    source: Any, shared_cluster: Any, workers: Any, tmp_path: Path
) -> None:
    """Batch after batch mirrored on a Connect worker: each offset sync pins a source
    record to the very target record it became, the latest record of each partition is
    synced, and the task remembers no more batches than one read's (one per partition)."""
    source.admin().create_topic("orders", partitions=2)
    probe = tmp_path / "remembered.txt"
    workers.create("mirror-a", flow_config(source, shared_cluster, probe))
    sent = 0
    with source.producer() as producer:
        for round_ in range(ROUNDS):  # one round after the other: many batches
            for i in range(PER_ROUND):
                producer.send("orders", value=f"r{round_}-{i}".encode(), partition=i % 2)
            producer.flush()
            sent += PER_ROUND
            wait_until(lambda n=sent: mirrored(shared_cluster, n), 60, f"{sent} records mirrored")

    upstream = read_partitions(source, "orders")
    downstream = read_partitions(shared_cluster, "a.orders")
    last = {p: rows[-1]["offset"] for p, rows in upstream.items()}

    def synced_to_the_end() -> bool:
        latest = {s.tp.partition: s.upstream for s in offset_syncs(shared_cluster)}
        return latest == last

    wait_until(synced_to_the_end, 30, "the last record of each partition synced")
    syncs = offset_syncs(shared_cluster)
    assert len(syncs) >= 2 * ROUNDS, f"few syncs: {syncs}"
    for sync in syncs:
        assert sync.tp.topic == "orders"
        source_values = {r["offset"]: r["value"] for r in upstream[sync.tp.partition]}
        target_values = {r["offset"]: r["value"] for r in downstream[sync.tp.partition]}
        assert source_values[sync.upstream] == target_values[sync.downstream], sync

    remembered = [int(line) for line in probe.read_text().split()]
    assert len(remembered) >= ROUNDS, "commit_batch was not called per batch"
    assert max(remembered) <= 1, f"batches piled up: {max(remembered)}"
    assert remembered[-1] == 0
    workers.delete("mirror-a")
