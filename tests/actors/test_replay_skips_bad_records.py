"""A record that does not decode in an internal topic (or the controller's metadata log)
is skipped and logged by the replay that rebuilds state from it: it never wedges the
coordinator (or controller) that reads it, and every other group, transactional id or
topic keeps working.

The bad records are written to the partition leader directly (as a buggy or hostile
writer could, past any client-side check), the coordinator is killed and restarted by
Ray, and the test checks that the records are really stored where it says, that the
restart happened, and that the warning names the partition and offset.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray
from ray._private import state

from raystream.actors.controller import METADATA_DIR
from raystream.groups.offsets_topic import OFFSETS_TOPIC
from raystream.log import Log, LogConfig
from raystream.records import build_batch
from raystream.requests import (
    GROUP_COORDINATOR_WRITER,
    TRANSACTION_COORDINATOR_WRITER,
    ProduceRequest,
)
from raystream.transactions.state_topic import TRANSACTION_STATE_TOPIC
from raystream.transport import outcome, send
from raystream.types import TopicPartition

FAST = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 200}


def write_to_leader(cluster: Any, topic: str, records: list[tuple[bytes, bytes]]) -> int:
    """Append ``(key, value)`` records to partition 0 of ``topic`` straight at its leader
    (acks=all), as the topic's coordinator writes them (clients may not); their first
    offset."""
    metadata = cluster.topic_metadata(topic, refresh=True)
    keys, values = zip(*records, strict=True)
    batch = build_batch(metadata.record_schema, keys, values, [0] * len(keys), None)
    writer = GROUP_COORDINATOR_WRITER if topic == OFFSETS_TOPIC else TRANSACTION_COORDINATOR_WRITER
    request = ProduceRequest(topic, 0, batch, "all", 30_000, internal_writer=writer)
    answer = outcome(send(metadata.partitions[0].leader_handle, request), 120)
    answer.raise_for_error()
    return answer.base_offset


def stored_keys(cluster: Any, topic: str, offset: int, count: int) -> list[bytes]:
    """The keys stored at ``offset`` and after in partition 0 of ``topic``."""
    leader = cluster.topic_metadata(topic, refresh=True).partitions[0].leader_handle
    answer = ray.get(leader.fetch.remote(offset, 1 << 20, 0, 1), timeout=120)
    answer.raise_for_error()
    table = answer.records
    assert table.column("offset").to_pylist()[:count] == list(range(offset, offset + count))
    return table.column("key").to_pylist()[:count]


def actor_info(handle: Any) -> dict[str, Any]:
    return state.actors(actor_id=handle._actor_id.hex())


def restart(coordinator: Any) -> None:
    """Kill the coordinator; Ray restarts it. Returns once the restarted one has loaded
    (its ``ping`` waits for the load, and fails if the load does)."""
    before = actor_info(coordinator)["NumRestarts"]
    ray.kill(coordinator, no_restart=False)
    deadline = time.monotonic() + 120
    while (info := actor_info(coordinator))["NumRestarts"] <= before or info["State"] != "ALIVE":
        assert time.monotonic() < deadline, f"{coordinator} was not restarted: {info}"
        time.sleep(0.1)
    while True:  # this process may not know yet that the restart is done
        try:
            assert ray.get(coordinator.ping.remote(), timeout=300)
            return
        except ray.exceptions.ActorUnavailableError:
            assert time.monotonic() < deadline + 300, f"{coordinator} never answered"
            time.sleep(0.1)


def wait_for_log(handle: Any, *texts: str) -> str:
    """The actor process's stderr once it contains every one of ``texts``."""
    pid = actor_info(handle)["Pid"]
    logs = Path(ray._private.worker._global_node.get_logs_dir_path())
    deadline = time.monotonic() + 60
    while True:
        text = "".join(p.read_text(errors="replace") for p in logs.glob(f"worker-*-{pid}.err"))
        if all(t in text for t in texts):
            return text
        assert time.monotonic() < deadline, f"not in the log of pid {pid}: {texts}\n{text[-3000:]}"
        time.sleep(0.2)


def commit(cluster: Any, group: str, tp: TopicPartition, offset: int) -> None:
    with cluster.consumer(group_id=group, enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        consumer.commit({tp: offset})


def committed(cluster: Any, group: str, tp: TopicPartition) -> int | None:
    with cluster.consumer(group_id=group, enable_auto_commit=False) as consumer:
        return consumer.committed(tp)


def test_a_bad_record_in_consumer_offsets_is_skipped_and_logged(shared_cluster, make_topic):
    cluster = shared_cluster
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    assert cluster.coordinator_call("ping")  # started and loaded (may be slow)
    commit(cluster, "before-the-bad-records", tp, 5)
    bad = [
        (b"not json", b"{}"),
        (json.dumps(["offset", "bad", topic, 0]).encode(), b"not json either"),
        (json.dumps(["group", "bad"]).encode(), json.dumps({"generation": "one"}).encode()),
        (json.dumps(["offset", "bad", topic, 0]).encode(), json.dumps({"offset": "7"}).encode()),
    ]
    base = write_to_leader(cluster, OFFSETS_TOPIC, bad)
    assert stored_keys(cluster, OFFSETS_TOPIC, base, len(bad)) == [key for key, _ in bad]
    commit(cluster, "after-the-bad-records", tp, 7)
    assert committed(cluster, "after-the-bad-records", tp) == 7  # read past them, running

    coordinator = cluster.coordinator()
    restart(coordinator)
    assert committed(cluster, "before-the-bad-records", tp) == 5  # loaded despite them
    assert committed(cluster, "after-the-bad-records", tp) == 7
    assert committed(cluster, "bad", tp) is None
    with cluster.consumer(
        topic, group_id="joins-after", auto_offset_reset="earliest", **FAST
    ) as member:
        deadline = time.monotonic() + 60
        while member.assignment() != {tp}:
            assert time.monotonic() < deadline, "the join never completed"
            member.poll(timeout_ms=50)
        member.commit({tp: 3})
        assert member.committed(tp) == 3
    wait_for_log(
        coordinator,
        *(f"{OFFSETS_TOPIC}-0 offset {base + i}: skipped a record" for i in range(len(bad))),
    )


def transactional(cluster: Any, transactional_id: str) -> Any:
    producer = cluster.producer(transactional_id=transactional_id)
    producer.init_transactions()
    return producer


def test_a_bad_record_in_transaction_state_is_skipped_and_logged(
    shared_cluster, make_topic, read_all
):
    cluster = shared_cluster
    topic = make_topic()
    assert cluster.transaction_coordinator_call("ping")  # started and loaded (may be slow)
    first = transactional(cluster, f"first-{topic}")
    first.begin_transaction()
    first.send(topic, b"one")
    first.commit_transaction()
    bad = [
        (b"\xff\xfe", b"{}"),
        (b"not-json", b"not json"),
        (b"wrong-type", json.dumps({"producer_id": "x"}).encode()),
    ]
    base = write_to_leader(cluster, TRANSACTION_STATE_TOPIC, bad)
    assert stored_keys(cluster, TRANSACTION_STATE_TOPIC, base, len(bad)) == [k for k, _ in bad]

    coordinator = cluster.transaction_coordinator()
    restart(coordinator)
    first.begin_transaction()  # the id's state was loaded despite the records after it
    first.send(topic, b"two")
    first.commit_transaction()
    second = transactional(cluster, f"second-{topic}")
    second.begin_transaction()
    second.send(topic, b"three")
    second.commit_transaction()
    assert sorted(read_all(cluster, topic, "read_committed")) == [b"one", b"three", b"two"]
    wait_for_log(
        coordinator,
        *(f"{TRANSACTION_STATE_TOPIC}-0 offset {base + i}: skipped a record" for i in range(3)),
    )
    first.close()
    second.close()


def test_a_bad_record_in_the_controllers_metadata_log_is_skipped_and_logged(cluster_factory):
    cluster = cluster_factory()
    cluster.admin().create_topic("kept", partitions=1)
    with cluster.producer() as producer:
        producer.send("kept", b"value").get()
    namespace, data_dir = cluster.namespace, cluster.data_dir
    cluster.shutdown()
    log = Log.open(
        os.path.join(data_dir, METADATA_DIR),
        LogConfig(cleanup_policy="compact", segment_bytes=16 << 20),
    )
    keys = [b"broken", b"\xff\xfe"]
    base, _ = log.append(
        pa.record_batch(
            {
                "key": pa.array(keys, pa.binary()),
                "value": pa.array([b"not json", b"{}"], pa.binary()),
                "timestamp": pa.array([0, 0], pa.int64()),
            }
        )
    )
    assert log.read(base).column("key").to_pylist() == keys
    log.close()

    again = cluster_factory(namespace=namespace, data_dir=data_dir)
    assert "kept" in again.admin().list_topics()
    with again.consumer(auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.assign([TopicPartition("kept", 0)])
        deadline = time.monotonic() + 60
        values: list[bytes] = []
        while not values:
            assert time.monotonic() < deadline
            values = [r.value for rs in consumer.poll(timeout_ms=200).values() for r in rs]
    assert values == [b"value"]
    wait_for_log(
        again.controller,
        *(f"{METADATA_DIR} offset {base + i}: skipped a record" for i in range(len(keys))),
    )
