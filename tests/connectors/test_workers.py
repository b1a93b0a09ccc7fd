"""Connect's runtime end to end on a real Ray: one worker group for the module.

Two worker actors run every test's connectors (the tiny ones of ``tiny_connectors``);
each test uses connectors and topics of its own.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.dataset as ds
import pytest
import tiny_connectors
from ray import cloudpickle

from raystream.connectors.datalake import load_table
from raystream.errors import ConnectError, InvalidConfigError
from raystream.types import TopicPartition

GROUP = "cx"
BYTES = {"key.converter": "bytes", "value.converter": "bytes"}

# The workers cannot import the tests' modules: ship the connector classes by value
# (with Ray's own cloudpickle, which pickles actor arguments).
cloudpickle.register_pickle_by_value(tiny_connectors)


@pytest.fixture(scope="module")
def workers(shared_cluster: Any) -> Iterator[Any]:
    from raystream.connectors import Workers

    group = Workers(
        shared_cluster,
        group_id=GROUP,
        num_workers=2,
        rest_port=0,
        plugins=tiny_connectors.PLUGINS,
    )
    yield group
    group.shutdown()


def values(cluster: Any, topic: str, isolation: str = "read_uncommitted") -> list[bytes]:
    """Every value of partition 0 of ``topic`` now."""
    tp = TopicPartition(topic, 0)
    with cluster.consumer(
        auto_offset_reset="earliest", isolation_level=isolation, enable_auto_commit=False
    ) as consumer:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        out: list[bytes] = []
        while consumer.position(tp) < end:
            out.extend(consumer.poll_arrow(timeout_ms=200).column("value").to_pylist())
        return out


def lines(directory: Any) -> list[str]:
    out: list[str] = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), encoding="utf-8") as handle:
            out.extend(handle.read().splitlines())
    return out


def states(workers: Any, name: str) -> list[str]:
    status = workers.status(name)
    return [status["connector"]["state"]] + [t["state"] for t in status["tasks"]]


def running(workers: Any, name: str, tasks: int) -> Callable[[], bool]:
    return lambda: states(workers, name) == ["RUNNING"] * (tasks + 1)


def test_a_source_feeds_a_sink_through_a_topic(
    workers: Any, shared_cluster: Any, make_topic: Callable[..., str], tmp_path: Any, wait_until
) -> None:
    topic = make_topic(partitions=2)
    workers.create(
        "count-a",
        {"connector.class": "CountingSource", "topic": topic, "count": 300, "batch": 50, **BYTES},
    )
    workers.create(
        "append-a",
        {
            "connector.class": "AppendSink",
            "tasks.max": 2,
            "topics.regex": re.escape(topic) + "|no-such-topic-.*",
            "dir": str(tmp_path),
            "retriable.failures": 1,  # each task's first put is refused: handed again
            "offset.flush.interval.ms": 500,
            **BYTES,
        },
    )
    wait_until(lambda: len(lines(tmp_path)) >= 300, 60, "300 lines in the sink's files")
    assert sorted(map(int, lines(tmp_path))) == list(range(300))
    wait_until(running(workers, "append-a", 2), 30, "the sink and its 2 tasks RUNNING")
    assert states(workers, "count-a") == ["RUNNING", "RUNNING"]
    assert workers.store.offsets("count-a") == {'{"stream":0}': {"n": 300}}
    assert {"count-a", "append-a"} <= set(workers.list())
    assert workers.config("count-a")["count"] == "300"
    assert [t["id"] for t in workers.tasks("append-a")] == [
        {"connector": "append-a", "task": 0},
        {"connector": "append-a", "task": 1},
    ]
    admin = shared_cluster.admin()
    wait_until(
        lambda: sum(admin.describe_group("connect-append-a").offsets.values()) == 300,
        30,
        "the sink's offsets committed after pre_commit",
    )
    workers.delete("append-a")
    wait_until(lambda: "append-a" not in workers.list(), 10, "append-a deleted")


def test_pause_stops_a_source_and_resume_finishes_it(
    workers: Any, shared_cluster: Any, make_topic: Callable[..., str], wait_until, holds_for
) -> None:
    topic = make_topic()
    workers.create(
        "count-p",
        {
            "connector.class": "CountingSource",
            "topic": topic,
            "count": 400,
            "batch": 5,
            "poll.ms": 20,
            **BYTES,
        },
    )
    wait_until(lambda: len(values(shared_cluster, topic)) >= 20, 30, "the source writing")
    workers.pause("count-p")
    wait_until(lambda: states(workers, "count-p") == ["PAUSED", "PAUSED"], 30, "PAUSED")
    written = len(values(shared_cluster, topic))
    holds_for(lambda: len(values(shared_cluster, topic)) == written, 1.0, "no writes while paused")
    workers.resume("count-p")
    wait_until(lambda: states(workers, "count-p") == ["RUNNING", "RUNNING"], 30, "RUNNING")
    wait_until(lambda: len(values(shared_cluster, topic)) == 400, 60, "every record")
    assert values(shared_cluster, topic) == [str(n).encode() for n in range(400)]


def worker_of(workers: Any, name: str, task: int) -> Any:
    import ray

    from raystream.actors.connect_worker import worker_name

    worker_id = workers.status(name)["tasks"][task]["worker_id"]
    slot = int(worker_id.rsplit("-", 1)[1])
    return ray.get_actor(worker_name(GROUP, slot), namespace=workers.cluster.namespace)


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_a_killed_worker_resumes_its_source_at_the_committed_offset(
    workers: Any,
    shared_cluster: Any,
    make_topic: Callable[..., str],
    wait_until,
    chaos,
    exactly_once: bool,
) -> None:
    topic = make_topic()
    name = f"count-kill-{int(exactly_once)}"
    config = {
        "connector.class": "CountingSource",
        "topic": topic,
        "count": 600,
        "batch": 10,
        "poll.ms": 20,
        "as.batch": "true",
        **BYTES,
    }
    if exactly_once:
        config["exactly.once.support"] = "required"
    workers.create(name, config)
    isolation = "read_committed" if exactly_once else "read_uncommitted"
    wait_until(running(workers, name, 1), 30, "the source RUNNING")
    wait_until(lambda: len(values(shared_cluster, topic, isolation)) >= 100, 30, "records")
    chaos.kill_actor(worker_of(workers, name, 0), "the worker running the source task")
    chaos.confirm()
    expected = [str(n).encode() for n in range(600)]
    if exactly_once:
        wait_until(lambda: len(values(shared_cluster, topic, isolation)) >= 600, 90, "every record")
        assert values(shared_cluster, topic, isolation) == expected  # once each, in order
    else:
        wait_until(lambda: set(values(shared_cluster, topic)) == set(expected), 90, "every record")
        got = values(shared_cluster, topic)
        assert got[-1] == expected[-1] and len(got) - 600 <= 10  # a batch again at most
    workers.delete(name)


def test_a_bad_record_goes_to_the_dead_letter_queue_and_a_failing_task_shows_its_trace(
    workers: Any, shared_cluster: Any, make_topic: Callable[..., str], tmp_path: Any, wait_until
) -> None:
    topic, dlq = make_topic(), make_topic()
    producer = shared_cluster.producer()
    for value in (b'{"a": 1}', b"not json", b'{"a": 2}', b'{"a": 3}'):
        producer.send(topic, value).get()
    workers.create(
        "append-dlq",
        {
            "connector.class": "AppendSink",
            "topics": topic,
            "dir": str(tmp_path),
            "value.converter": "json",
            "value.converter.schemas.enable": "false",
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": dlq,
            "errors.deadletterqueue.context.headers.enable": "true",
            "transforms": "origin",
            "transforms.origin.type": "org.apache.kafka.connect.transforms.InsertField$Value",
            "transforms.origin.static.field": "src",
            "transforms.origin.static.value": "t",
            "fail.on": '{"a": 3, "src": "t"}',
        },
    )
    wait_until(lambda: len(values(shared_cluster, dlq)) == 1, 60, "one record in the DLQ")
    with shared_cluster.consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(dlq, 0)])
        (record,) = consumer.poll(timeout_ms=5000)[TopicPartition(dlq, 0)]
    headers = dict(record.headers)
    assert record.value == b"not json"
    assert headers["__connect.errors.topic"] == topic.encode()
    assert headers["__connect.errors.offset"] == b"1"
    assert headers["__connect.errors.connector.name"] == b"append-dlq"
    assert headers["__connect.errors.exception.message"]
    wait_until(lambda: states(workers, "append-dlq")[1] == "FAILED", 30, "the task FAILED")
    # The task saw the transformed record (and failed on it: nothing of its batch is written).
    assert (
        """refusing '{"a": 3, "src": "t"}'""" in workers.status("append-dlq")["tasks"][0]["trace"]
    )
    workers.delete("append-dlq")


def test_the_rest_api_answers_in_kafka_connects_shapes(
    workers: Any, make_topic: Callable[..., str], wait_until
) -> None:
    topic = make_topic()
    config = {"connector.class": "CountingSource", "topic": topic, "count": "5", **BYTES}
    with httpx.Client(base_url=workers.rest_url, timeout=30) as http:
        plugins = http.get("/connector-plugins").json()
        assert {
            "class": "tiny_connectors.CountingSource",
            "type": "source",
            "version": "0.1.0",
        } in plugins
        created = http.post("/connectors", json={"name": "rest-a", "config": config})
        assert created.status_code == 201
        assert created.json()["name"] == "rest-a" and created.json()["type"] == "source"
        again = http.post("/connectors", json={"name": "rest-a", "config": config})
        assert again.status_code == 409 and again.json()["error_code"] == 409
        assert "rest-a" in http.get("/connectors").json()
        assert http.get("/connectors/rest-a/config").json()["count"] == "5"
        wait_until(
            lambda: (
                http.get("/connectors/rest-a/status").json()["tasks"][:1]
                and http.get("/connectors/rest-a/status").json()["tasks"][0]["state"] == "RUNNING"
            ),
            30,
            "the task RUNNING",
        )
        status = http.get("/connectors/rest-a/status").json()
        assert status["connector"]["state"] == "RUNNING" and status["type"] == "source"
        assert http.get("/connectors/rest-a/tasks").json()[0]["id"] == {
            "connector": "rest-a",
            "task": 0,
        }
        assert http.put("/connectors/rest-a/pause").status_code == 202
        wait_until(
            lambda: http.get("/connectors/rest-a/status").json()["connector"]["state"] == "PAUSED",
            30,
            "PAUSED",
        )
        assert http.put("/connectors/rest-a/resume").status_code == 202
        assert http.post("/connectors/rest-a/restart").status_code == 204
        assert http.post("/connectors/rest-a/tasks/0/restart").status_code == 204
        assert http.post("/connectors/rest-a/tasks/9/restart").status_code == 404
        updated = http.put("/connectors/rest-a/config", json={**config, "count": "7"})
        assert updated.status_code == 200 and updated.json()["config"]["count"] == "7"
        assert http.delete("/connectors/rest-a").status_code == 204
        missing = http.get("/connectors/rest-a/status")
        assert missing.status_code == 404 and missing.json()["error_code"] == 404
        bad = http.post("/connectors", json={"name": "b", "config": {"connector.class": "Nope"}})
        assert bad.status_code == 400 and "Nope" in bad.json()["message"]
        at_least_once = {  # a promise this sink cannot keep is refused with the reason
            "connector.class": "FileStreamSink",
            "file": "/nowhere/out.txt",
            "topics": topic,
            "exactly.once.support": "required",
        }
        refused = http.post("/connectors", json={"name": "eos", "config": at_least_once})
        assert refused.status_code == 400, refused.text
        assert "writes at least once" in refused.json()["message"]


def test_the_cli_manages_connectors(
    workers: Any, make_topic: Callable[..., str], tmp_path: Any, capsys, wait_until
) -> None:
    from raystream.cli import main

    topic = make_topic()
    properties = tmp_path / "cli-a.properties"
    properties.write_text(
        # The dotted path: this process imports it, the workers know it from their plugins.
        f"name=cli-a\nconnector.class=tiny_connectors.CountingSource\ntopic={topic}\ncount=3\n"
        "key.converter=bytes\nvalue.converter=bytes\n"
    )
    base = ["--namespace", workers.cluster.namespace, "connect", "--group", GROUP]
    assert main([*base, "create", "--config", str(properties)]) == 0
    assert main([*base, "list"]) == 0
    assert "cli-a" in capsys.readouterr().out.split()
    wait_until(running(workers, "cli-a", 1), 30, "cli-a RUNNING")
    assert main([*base, "status", "cli-a", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["connector"]["state"] == "RUNNING"
    assert main([*base, "plugins"]) == 0
    assert "tiny_connectors.AppendSink" not in capsys.readouterr().out  # not a CLI plugin
    assert main([*base, "delete", "cli-a"]) == 0
    assert "cli-a" not in workers.list()
    assert main([*base, "status", "cli-a"]) != 0
    assert "not found" in capsys.readouterr().err
    assert sys.modules["tiny_connectors"] is tiny_connectors


# ------------------------------------------------------ file and data-lake connectors

FILE_RECORDS = 3000
COUNTRIES = ("FR", "DE", "IT")


@pytest.mark.slow
def test_a_jsonl_file_lands_once_in_a_parquet_lake_and_an_iceberg_table(
    workers: Any, make_topic: Callable[..., str], tmp_path: Path, wait_until
) -> None:
    """The file and data-lake connectors run by the module's workers, read back by
    pyarrow and pyiceberg (Spark's read of such a table: tests/spark/test_iceberg_spark.py)."""
    source_file = tmp_path / "orders.jsonl"
    with open(source_file, "w") as handle:
        for i in range(FILE_RECORDS):
            handle.write(json.dumps({"id": i, "country": COUNTRIES[i % 3], "amount": i / 2}) + "\n")
    topic = make_topic(partitions=2)
    lake = tmp_path / "lake"
    iceberg = {
        "table.format": "iceberg",
        "iceberg.tables": "shop.orders",
        "iceberg.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
        "iceberg.catalog.warehouse": f"file://{tmp_path}/warehouse",
    }
    try:
        workers.create(
            "orders-in",
            {
                "connector.class": "raystream.connectors.file.FileStreamSourceConnector",
                "file": str(source_file),
                "format": "jsonl",
                "topic": topic,
                "batch.size": "500",
            },
        )
        common = {"topics": topic, "offset.flush.interval.ms": "1000", "tasks.max": "2"}
        workers.create(
            "orders-lake",
            {
                "connector.class": "raystream.connectors.datalake.DataLakeSinkConnector",
                "directory": str(lake),
                "partitioner": "field",
                "partition.field.name": "country",
                **common,
            },
        )
        workers.create(
            "orders-iceberg",
            {
                "connector.class": "raystream.connectors.datalake.DataLakeSinkConnector",
                **iceberg,
                **common,
            },
        )

        def lake_rows() -> int:
            return (
                ds.dataset(lake, format="parquet", partitioning="hive").count_rows()
                if lake.exists()
                else 0
            )

        def iceberg_rows() -> int:
            try:
                return load_table(iceberg).scan().to_arrow().num_rows
            except ConnectError:  # not created yet
                return 0

        def statuses() -> dict[str, Any]:
            return {name: workers.status(name) for name in workers.list()}

        wait_until(
            lambda: lake_rows() >= FILE_RECORDS,
            120,
            f"{FILE_RECORDS} rows in the Parquet lake",
            detail=lambda: (lake_rows(), statuses()),
        )
        wait_until(
            lambda: iceberg_rows() >= FILE_RECORDS,
            120,
            f"{FILE_RECORDS} rows in the Iceberg table",
            detail=lambda: (iceberg_rows(), statuses()),
        )
    finally:
        for name in ("orders-in", "orders-lake", "orders-iceberg"):
            workers.delete(name)

    read = ds.dataset(lake, format="parquet", partitioning="hive").to_table()
    assert sorted(read.column("id").to_pylist()) == list(range(FILE_RECORDS))
    assert sorted({str(p.relative_to(lake).parts[0]) for p in lake.rglob("*.parquet")}) == [
        f"country={c}" for c in sorted(COUNTRIES)
    ]
    rows = load_table(iceberg).scan().to_arrow().sort_by("id")
    assert rows.column("id").to_pylist() == list(range(FILE_RECORDS))
    assert rows.column("country").to_pylist() == [COUNTRIES[i % 3] for i in range(FILE_RECORDS)]


def test_a_mirror_maker_connector_aimed_at_another_cluster_is_refused(
    workers: Any, shared_cluster: Any
) -> None:
    """A MirrorMaker connector on the workers writes into the workers' cluster: a
    Kafka target alias (or another namespace) is refused when the connector is created."""
    flow = {
        "connector.class": "MirrorSourceConnector",
        "source.cluster.alias": "upstream",
        "source.cluster.bootstrap.servers": "127.0.0.1:1",
        "topics": "orders",
    }
    kafka = {
        **flow,
        "target.cluster.alias": "backup",
        "target.cluster.bootstrap.servers": "127.0.0.1:2",
    }
    with pytest.raises(InvalidConfigError, match=r"target\.cluster\.alias='backup' is a Kafka"):
        workers.create("mirror-to-kafka", kafka)
    other = {**flow, "target.cluster.alias": "here", "target.cluster.raystream.namespace": "x"}
    with pytest.raises(InvalidConfigError, match=r"target\.cluster\.raystream\.namespace='x'"):
        workers.create("mirror-elsewhere", other)
    assert "mirror-to-kafka" not in workers.list()
    here = {**other, "target.cluster.raystream.namespace": shared_cluster.namespace}
    assert workers.validate("mirror-here", here)["name"] == "mirror-here"
