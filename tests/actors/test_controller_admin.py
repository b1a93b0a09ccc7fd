"""The controller and replica actors on a real Ray: topics, durability, bad input.

Data is written straight to the leader replica, so these tests need no client but the
Admin and exercise the actors' own answers.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from typing import Any

import pyarrow as pa
import pytest
import ray

import raystream as rs
from raystream.actors import CONTROLLER_NAME
from raystream.controller.producer_ids import PRODUCER_ID_BLOCK_SIZE
from raystream.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    LogDirInUseError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raystream.records import build_batch


@pytest.fixture
def shared(shared_cluster):
    """The module's cluster, for tests that only add their own topics."""
    return shared_cluster


def produce(cluster: rs.Cluster, topic: str, values: list[bytes], partition: int = 0, **kw):
    metadata = cluster.topic_metadata(topic, refresh=True)
    leader = metadata.partitions[partition].leader_handle
    batch = build_batch(
        metadata.record_schema,
        [None] * len(values),
        values,
        kw.get("timestamps", [1] * len(values)),
        None,
    )
    return ray.get(leader.produce.remote(batch, 1))


def fetch_all(cluster: rs.Cluster, topic: str, partition: int = 0) -> list[bytes]:
    leader = cluster.topic_metadata(topic, refresh=True).partitions[partition].leader_handle
    response = ray.get(leader.fetch.remote(0, 64 << 20, 0))
    response.raise_for_error()
    return response.records.column("value").to_pylist()


def wait_until_leader(wait_until, handle, old_pid: int, timeout_s: float = 60) -> None:
    """Wait (with the ``wait_until`` fixture) until the restarted replica (a new
    process) serves as leader again.

    Only Ray's errors (the actor restarting, a slow answer) mean "not yet"; the last
    state or error seen is named on timeout.
    """

    def leads_again() -> dict | None:
        state = ray.get(handle.state.remote(), timeout=5)
        return state if state["pid"] != old_pid and state["role"] == "leader" else None

    wait_until(
        leads_again,
        timeout_s,
        f"the replica (was pid {old_pid}) to lead again",
        interval_s=0.1,
        retry_on=(ray.exceptions.RayError,),
    )


def test_topics_are_created_described_listed_and_deleted(cluster: rs.Cluster) -> None:
    admin = cluster.admin()
    description = admin.create_topic("orders", partitions=2, config={"retention.ms": 60000})
    assert description.name == "orders"
    assert [p.partition for p in description.partitions] == [0, 1]
    first = description.partitions[0]
    assert (first.leader, first.replicas, first.isr, first.leader_epoch) == (0, [0], [0], 0)
    assert (first.log_start_offset, first.high_watermark, first.log_end_offset) == (0, 0, 0)
    assert description.config["retention.ms"] == 60000
    assert description.config["cleanup.policy"] == "delete"
    assert admin.list_topics() == ["orders"]
    produce(cluster, "orders", [b"a", b"b"])
    assert admin.describe_topic("orders").partitions[0].high_watermark == 2
    admin.delete_topic("orders")
    assert admin.list_topics() == []
    with pytest.raises(UnknownTopicOrPartitionError, match="'orders' does not exist"):
        admin.describe_topic("orders")


def test_a_recreated_topic_does_not_see_the_deleted_ones_data(cluster: rs.Cluster) -> None:
    admin = cluster.admin()
    admin.create_topic("again")
    produce(cluster, "again", [b"old"])
    admin.delete_topic("again")
    admin.create_topic("again")
    assert fetch_all(cluster, "again") == []


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"name": "bad name"}, InvalidTopicError, "outside"),
        ({"name": "x" * 250}, InvalidTopicError, "over 249"),
        ({"name": ".."}, InvalidTopicError, "not allowed"),
        ({"name": "t", "partitions": 0}, InvalidPartitionsError, "partitions must be >= 1, not 0"),
        ({"name": "t", "replication_factor": 0}, InvalidReplicationFactorError, "not 0"),
        ({"name": "t", "config": {"retention.days": 1}}, InvalidConfigError, "'retention.days'"),
        ({"name": "t", "config": {"retention.ms": "x"}}, InvalidConfigError, "retention.ms='x'"),
        ({"name": "t", "schema": "not a schema"}, rs.errors.InvalidRequestError, "pyarrow.Schema"),
    ],
)
def test_bad_topic_creation_is_refused_by_name(shared, kwargs, error, message) -> None:
    admin = shared.admin()
    kwargs = {"partitions": 1, **kwargs}
    with pytest.raises(error, match=message):
        admin.create_topic(**kwargs)
    assert kwargs["name"] not in admin.list_topics()


def test_duplicate_topics_unknown_topics_and_shrinking_are_refused(shared) -> None:
    admin = shared.admin()
    admin.create_topic("dup", partitions=2)
    with pytest.raises(TopicAlreadyExistsError, match="'dup' already exists"):
        admin.create_topic("dup")
    with pytest.raises(UnknownTopicOrPartitionError, match="'nope'"):
        admin.delete_topic("nope")
    with pytest.raises(InvalidPartitionsError, match="must be larger"):
        admin.create_partitions("dup", 2)
    with pytest.raises(InvalidConfigError, match=re.escape("cleanup.policy='shred'")):
        admin.alter_topic_config("dup", {"cleanup.policy": "shred"})


def test_partitions_grow_and_config_changes_take_effect(shared) -> None:
    admin = shared.admin()
    admin.create_topic("grow", partitions=1)
    description = admin.create_partitions("grow", 3)
    assert len(description.partitions) == 3
    produce(shared, "grow", [b"x"], partition=2)
    effective = admin.alter_topic_config("grow", {"max.message.bytes": 200})
    assert effective["max.message.bytes"] == 200
    response = produce(shared, "grow", [b"y" * 500])
    assert isinstance(response.error(), rs.errors.RecordTooLargeError)
    assert "max.message.bytes=200" in response.message


def test_a_typed_topic_keeps_its_schema(shared) -> None:
    schema = pa.schema([("item", pa.string()), ("amount", pa.float64())])
    description = shared.admin().create_topic("typed", schema=schema)
    assert description.schema.equals(schema)
    metadata = shared.topic_metadata("typed")
    batch = build_batch(metadata.record_schema, [None], [{"item": "pen", "amount": 1.5}], [1], None)
    leader = metadata.partitions[0].leader_handle
    assert ray.get(leader.produce.remote(batch, 1)).base_offset == 0
    response = ray.get(leader.fetch.remote(0))
    assert response.records.column("value").to_pylist() == [{"item": "pen", "amount": 1.5}]


def test_replicas_answer_bad_requests_with_errors_and_stay_alive(shared) -> None:
    shared.admin().create_topic("safe")
    leader = shared.topic_metadata("safe").partitions[0].leader_handle
    wrong_schema = ray.get(leader.produce.remote(pa.record_batch({"x": [1]}), 1))
    assert isinstance(wrong_schema.error(), rs.errors.InvalidRecordError)
    not_a_batch = ray.get(leader.produce.remote("text", 1))
    assert "not str" in not_a_batch.message
    bad_acks = ray.get(leader.produce.remote(pa.record_batch({"x": [1]}), 7))
    assert "acks=7" in bad_acks.message
    negative = ray.get(leader.fetch.remote(-1))
    assert "offset=-1" in negative.message
    beyond = ray.get(leader.fetch.remote(10, 1024, 0))
    assert isinstance(beyond.error(), rs.errors.OffsetOutOfRangeError)
    bad_time = ray.get(leader.list_offsets.remote(-7))
    assert "-7" in bad_time.message
    assert produce(shared, "safe", [b"still fine"]).base_offset == 0
    assert fetch_all(shared, "safe") == [b"still fine"]


def test_a_waiting_fetch_returns_within_milliseconds_of_a_produce(shared, holds_for) -> None:
    shared.admin().create_topic("live")
    leader = shared.topic_metadata("live").partitions[0].leader_handle
    ray.get(leader.ping.remote())
    waiting = leader.fetch.remote(0, 1 << 20, 5000)
    holds_for(lambda: not ray.wait([waiting], timeout=0)[0], 0.3, "the fetch waiting for data")
    # Built first: a process's first build_batch takes ~0.4 s (one-time set-up), which is
    # no part of how fast the waiting fetch sees the produce.
    schema = shared.topic_metadata("live").record_schema
    batch = build_batch(schema, [None], [b"now"], [1], None)
    produced_at = time.perf_counter()
    assert ray.get(leader.produce.remote(batch, 1)).error_code == 0
    response = ray.get(waiting)
    latency = time.perf_counter() - produced_at
    assert response.records.column("value").to_pylist() == [b"now"]
    assert latency < 0.2, f"the waiting fetch answered {latency:.3f} s after the produce"


def test_list_offsets_by_position_and_time(shared) -> None:
    shared.admin().create_topic("times")
    produce(shared, "times", [b"a", b"b"], timestamps=[100, 200])
    produce(shared, "times", [b"c"], timestamps=[300])
    leader = shared.topic_metadata("times").partitions[0].leader_handle
    offsets = ray.get([leader.list_offsets.remote(t) for t in (-2, -1, 150, 300, 301)])
    assert [o.offset for o in offsets] == [0, 3, 1, 2, -1]


def test_retention_runs_in_the_background(cluster_factory) -> None:
    cluster = cluster_factory(broker_config={"log.retention.check.interval.ms": 200})
    cluster.admin().create_topic(
        "short", config={"segment.bytes": 1024, "retention.bytes": 1, "segment.ms": 3600000}
    )
    for _ in range(5):
        produce(cluster, "short", [b"x" * 900])
    deadline = time.time() + 10
    while time.time() < deadline:
        start = cluster.admin().describe_topic("short").partitions[0].log_start_offset
        if start == 4:
            break
        time.sleep(0.2)
    assert start == 4


def test_topics_configs_and_records_survive_shutdown_and_restart(cluster_factory, tmp_path) -> None:
    data_dir = str(tmp_path / "durable")
    cluster = cluster_factory(data_dir=data_dir)
    admin = cluster.admin()
    admin.create_topic("keep", partitions=2, config={"retention.ms": 12345})
    produce(cluster, "keep", [b"one", b"two"], partition=1)
    cluster.shutdown()
    again = cluster_factory(data_dir=data_dir, namespace=cluster.namespace)
    description = again.admin().describe_topic("keep")
    assert len(description.partitions) == 2
    assert description.config["retention.ms"] == 12345
    assert fetch_all(again, "keep", partition=1) == [b"one", b"two"]
    assert produce(again, "keep", [b"three"], partition=1).base_offset == 2


def wait_for_new_process(actor: Any, old_pid: int) -> float:
    """When (monotonic seconds) a restarted ``actor`` answered from a new process."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if ray.get(actor.ping.remote(), timeout=5) != old_pid:
                return time.monotonic()
        except ray.exceptions.RayError:  # restarting
            pass
        time.sleep(0.05)
    raise AssertionError(f"{actor} did not come back within 60 s")


def test_a_killed_controller_restarts_with_its_metadata_while_leaders_keep_serving(
    cluster, chaos
) -> None:
    admin = cluster.admin()
    admin.create_topic("steady")
    before = [cluster.call("init_producer_id") for _ in range(3)]
    assert [pid for pid, _ in before] == [0, 1, 2] and {e for _, e in before} == {0}
    leader = cluster.topic_metadata("steady").partitions[0].leader_handle
    controller = ray.get_actor(CONTROLLER_NAME, namespace=cluster.namespace)
    old_pid = ray.get(controller.ping.remote())
    schema = cluster.topic_metadata("steady").record_schema
    batch = build_batch(schema, [None], [b"during"], [1], None)
    chaos.kill_actor(controller, "the controller")
    chaos.confirm()  # Ray counted the restart: the old process is gone
    # The data path does not go through the controller: the cached leader serves.
    before = chaos.actor_info(controller)
    assert before["State"] == "RESTARTING", f"the controller was back too soon: {before}"
    assert ray.get(leader.produce.remote(batch, 1)).error_code == 0
    after = chaos.actor_info(controller)
    assert after["State"] == "RESTARTING", f"the controller was back before the produce: {after}"
    wait_for_new_process(controller, old_pid)
    chaos.verify()
    assert admin.list_topics() == ["steady"]
    assert ray.get(leader.fetch.remote(0)).records.column("value").to_pylist() == [b"during"]
    # Producer ids never repeat: the restarted controller skips the reserved block.
    assert cluster.call("init_producer_id") == (PRODUCER_ID_BLOCK_SIZE, 0)


def test_a_producer_keeps_sending_while_the_controller_restarts(cluster, chaos) -> None:
    # metadata_max_age_ms=0: the producer asks the controller for metadata all the
    # time; refreshes that meet the restarting controller must not hold up sends to
    # the leaders it already knows.
    cluster.admin().create_topic("busy", partitions=2)
    producer = cluster.producer(acks=1, metadata_max_age_ms=0)
    try:
        assert producer.send("busy", b"warm", partition=1).get(30).offset == 0
        controller = ray.get_actor(CONTROLLER_NAME, namespace=cluster.namespace)
        old_pid = ray.get(controller.ping.remote())
        killed = chaos.kill_actor(controller, "the controller").at
        chaos.confirm()  # Ray counted the restart: refreshes now meet a restarting controller
        state = chaos.actor_info(controller)["State"]
        assert state == "RESTARTING", f"the controller was back before the sends: {state}"
        futures = [producer.send("busy", b"%d" % i, partition=i % 2) for i in range(100)]
        producer.flush(timeout=30)
        sent = time.monotonic()
        assert [f.get(0).offset for f in futures[:4]] == [0, 1, 1, 2]
        back = wait_for_new_process(controller, old_pid)
        assert sent < back, (
            f"sends took until {sent - killed:.2f}s after the kill, the controller "
            f"was back at {back - killed:.2f}s"
        )
        chaos.verify()
    finally:
        producer.close(timeout=10)


def test_a_killed_replica_restarts_and_recovers_its_log(cluster, wait_until) -> None:
    cluster.admin().create_topic("phoenix")
    produce(cluster, "phoenix", [b"before"])
    leader = cluster.topic_metadata("phoenix").partitions[0].leader_handle
    old_pid = ray.get(leader.ping.remote())
    ray.kill(leader, no_restart=False)
    wait_until_leader(wait_until, leader, old_pid)
    assert fetch_all(cluster, "phoenix") == [b"before"]


RESTART_STEP = """
import json, sys
import raystream as rs

data_dir, step = sys.argv[1], sys.argv[2]
cluster = rs.connect(address="local", namespace="reboot", data_dir=data_dir)
producer = cluster.producer(acks="all")
if step == "write":
    cluster.admin().create_topic("kept", partitions=2)
    for i in range(10):
        producer.send("kept", b"%d" % i, key=b"k%d" % i)
    producer.flush(timeout=60)
else:
    producer.send("kept", b"after", key=b"k0").get(60)
    consumer = cluster.consumer("kept", auto_offset_reset="earliest", consumer_timeout_ms=3000)
    print(json.dumps(sorted(record.value.decode() for record in consumer)))
producer.close()
"""


@pytest.mark.slow
def test_topics_and_records_survive_a_restart_of_ray_itself(tmp_path) -> None:
    """Needs fresh Ray clusters: each step is a process that starts its own Ray, as a
    script on the embedded default does. The second Ray gives the node a new id; the
    replicas must find their data on it again."""
    script = tmp_path / "step.py"
    script.write_text(RESTART_STEP)

    def step(name: str) -> str:
        result = subprocess.run(
            [sys.executable, str(script), str(tmp_path / "data"), name],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    step("write")
    values = json.loads(step("read").strip().splitlines()[-1])
    assert values == sorted([str(i) for i in range(10)] + ["after"])


HOLD_DATA_DIR = """
import sys, time
import raystream as rs

rs.connect(address="local", namespace="holder", data_dir=sys.argv[1])
print("up", flush=True)
time.sleep(300)
"""


@pytest.mark.slow
def test_a_second_cluster_on_a_data_dir_in_use_is_refused_by_name(tmp_path, wait_until) -> None:
    """Needs a second Ray: the holder is a process on the embedded default, the way two
    scripts that each call rs.connect() would share ~/.raystream/data.

    The holder is then killed (SIGKILL): its Ray's processes share its fate, and the
    directory is taken as soon as the lock of its ended replica is free. (A graceful
    SIGINT let its Ray shut down for over two minutes under a full suite's load.)"""
    data = str(tmp_path / "data")
    script = tmp_path / "hold.py"
    script.write_text(HOLD_DATA_DIR)
    holder = subprocess.Popen(
        [sys.executable, str(script), data],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "up"
        with pytest.raises(LogDirInUseError, match=re.escape(f"data dir {data} is in use")):
            rs.connect(namespace="second-on-one-dir", data_dir=data)
    finally:
        holder.kill()
        holder.wait(30)
    cluster = wait_until(
        lambda: rs.connect(namespace="second-on-one-dir", data_dir=data),
        60,
        "the data dir free once its holder ended",
        retry_on=(LogDirInUseError,),
    )
    try:
        cluster.admin().create_topic("mine")
        assert cluster.admin().list_topics() == ["mine"]
    finally:
        cluster.shutdown()
