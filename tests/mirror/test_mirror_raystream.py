"""MirrorMaker from one raystream namespace to another, on the session's Ray.

One source cluster and the module's shared cluster (the target, aliased "b"; the source
is "a") and one flow a->b for the whole module; the loop test adds the flow b->a.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from raystream.mirror import MirrorMaker
from raystream.types import TopicPartition
from tests.conftest import holds_for, wait_until
from tests.mirror.conftest import FAST, commit_part_of_payments, read_partitions


@pytest.fixture(scope="module")
def source(shared_cluster: Any, tmp_path_factory) -> Iterator[Any]:
    from raystream.client.cluster import connect

    cluster = connect(
        namespace=f"mirror-source-{os.getpid()}",
        data_dir=str(tmp_path_factory.mktemp("mirror-source")),
    )
    yield cluster
    cluster.shutdown()


@pytest.fixture(scope="module")
def flow(source: Any, shared_cluster: Any) -> Iterator[MirrorMaker]:
    """a -> b, every topic, group offsets synced."""
    mm = MirrorMaker(
        shared_cluster,
        source={"namespace": source.namespace},
        topics=".*",
        groups=".*",
        source_alias="a",
        target_alias="b",
        config={**FAST, "offset.lag.max": "10"},
    )
    mm.start()
    yield mm
    mm.stop()


def mirrored(target: Any, topic: str, count: int) -> bool:
    try:
        parts = read_partitions(target, topic)
    except Exception:
        return False
    return sum(len(rows) for rows in parts.values()) >= count


def test_every_record_arrives_once_in_partition_order_with_its_key_headers_and_time(
    source: Any, shared_cluster: Any, flow: MirrorMaker
) -> None:
    source.admin().create_topic("orders", partitions=2, config={"retention.ms": "3600000"})
    with source.producer() as producer:
        for i in range(600):
            producer.send(
                "orders",
                value=f"v{i}".encode(),
                key=f"k{i % 7}".encode(),
                headers=[("h", str(i).encode())],
                timestamp_ms=1_700_000_000_000 + i,
            )
    wait_until(lambda: mirrored(shared_cluster, "a.orders", 600), 60, "a.orders mirrored")
    want = read_partitions(source, "orders")
    got = read_partitions(shared_cluster, "a.orders")
    strip = ("key", "value", "headers", "timestamp")
    for partition, rows in want.items():
        assert [tuple(r[c] for c in strip) for r in got[partition]] == [
            tuple(r[c] for c in strip) for r in rows
        ], f"partition {partition} differs"
    assert shared_cluster.admin().describe_topic("a.orders").config["retention.ms"] in (
        3600000,
        "3600000",
    )
    status = flow.status()
    assert status["state"] == "RUNNING", status
    lag = {k: v for k, v in status["partitions"].items() if v["topic"] == "orders"}
    assert len(lag) == 2 and all(v["lag"] == 0 for v in lag.values()), status


def test_a_new_matching_topic_and_new_partitions_are_picked_up(
    source: Any, shared_cluster: Any, flow: MirrorMaker
) -> None:
    admin = source.admin()
    admin.create_topic("late", partitions=1)
    with source.producer() as producer:
        producer.send("late", value=b"first").get(30)
    wait_until(lambda: mirrored(shared_cluster, "a.late", 1), 30, "a.late created and mirrored")
    admin.create_partitions("late", 2)
    with source.producer() as producer:
        producer.send("late", value=b"second", partition=1).get(30)
    wait_until(
        lambda: (
            len(shared_cluster.admin().describe_topic("a.late").partitions) == 2
            and mirrored(shared_cluster, "a.late", 2)
        ),
        30,
        "a.late grown to 2 partitions and its new record mirrored",
    )
    assert read_partitions(shared_cluster, "a.late")[1][0]["value"] == b"second"


def test_a_group_switched_to_the_target_resumes_at_the_translated_offset(
    source: Any, shared_cluster: Any, flow: MirrorMaker
) -> None:
    seen, committed = commit_part_of_payments(source)
    wait_until(lambda: mirrored(shared_cluster, "a.payments", 400), 60, "a.payments mirrored")
    translated = wait_until(
        lambda: (
            (t := flow.translate_offsets("billing"))
            and all(
                t.get(TopicPartition("a.payments", tp.partition)) is not None for tp in committed
            )
            and t
        ),
        30,
        "billing's offsets translated",
    )
    remote = {TopicPartition("a.payments", tp.partition): o for tp, o in committed.items()}
    assert set(translated) == set(remote)
    for tp, offset in remote.items():
        assert 0 <= translated[tp] <= offset  # offsets line up here: never past the commit
    wait_until(
        lambda: shared_cluster.admin().describe_group("billing").offsets == translated,
        30,
        "billing's offsets synced into the target",
    )
    rest: list[bytes] = []
    with shared_cluster.consumer(
        "a.payments", group_id="billing", auto_offset_reset="earliest", enable_auto_commit=False
    ) as consumer:
        while len(set(seen) | set(rest)) < 400:
            for records in consumer.poll(timeout_ms=500).values():
                rest += [r.value for r in records]
                assert len(rest) <= 400, "read far more than the topic holds"
    assert set(seen) | set(rest) == {f"p{i}".encode() for i in range(400)}, "a record skipped"
    # MM2's translation may re-deliver, at most offset.lag.max (10) records per partition.
    assert len(rest) - (400 - len(seen)) <= 2 * 10, "re-read more than offset.lag.max allows"


def test_two_clusters_mirroring_each_other_do_not_loop(
    source: Any, shared_cluster: Any, flow: MirrorMaker
) -> None:
    back = MirrorMaker(
        source,
        source={"namespace": shared_cluster.namespace},
        topics=".*",
        source_alias="b",
        target_alias="a",
        config=FAST,
    )
    back.start()
    try:
        source.admin().create_topic("ping", partitions=1)
        shared_cluster.admin().create_topic("pong", partitions=1)
        with source.producer() as producer:
            producer.send("ping", value=b"from a").get(30)
        with shared_cluster.producer() as producer:
            producer.send("pong", value=b"from b").get(30)
        wait_until(lambda: mirrored(shared_cluster, "a.ping", 1), 30, "ping mirrored a->b")
        wait_until(lambda: mirrored(source, "b.pong", 1), 30, "pong mirrored b->a")
        wait_until(lambda: mirrored(source, "b.heartbeats", 1), 30, "b's heartbeats in a")

        def no_loop() -> bool:
            topics = set(source.admin().list_topics()) | set(shared_cluster.admin().list_topics())
            return not any(t.startswith(("a.b.", "b.a.")) for t in topics)

        holds_for(no_loop, 3.0, "no topic mirrored back home")
        assert back.status()["state"] == "RUNNING"
    finally:
        back.stop()


def test_the_cli_starts_a_flow_from_an_mm2_file_shows_its_lag_and_stops_it(
    source: Any, shared_cluster: Any, flow: MirrorMaker, tmp_path, capsys
) -> None:
    import argparse

    from raystream.cli import mirror as cli

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="command"))
    file = tmp_path / "mm2.properties"
    file.write_text(
        "clusters = c, b\n"
        f"c.raystream.namespace = {source.namespace}\n"
        f"b.raystream.namespace = {shared_cluster.namespace}\n"
        "c->b.enabled = true\n"
        "c->b.topics = orders\n"
        "emit.heartbeats.enabled = false\n"
        "emit.checkpoints.enabled = false\n"
    )
    assert cli.mirror(parser.parse_args(["mirror", "--config", str(file), "--detach"]), None) == 0
    try:
        wait_until(lambda: mirrored(shared_cluster, "c.orders", 600), 60, "c.orders mirrored")

        def caught_up() -> bool:  # the flow notes a round done just after its records land
            (status,) = [f for f in cli.statuses() if f["flow"] == "c->b"]
            return bool(status["partitions"]) and status["lag"] == 0

        wait_until(caught_up, 30, "c->b's lag at 0")
        assert cli.mirror(parser.parse_args(["mirror", "status"]), None) == 0
        out = capsys.readouterr().out
        assert "started c->b" in out and "a->b  RUNNING" in out and "c->b  RUNNING" in out
        assert re.search(r"orders-1 +c\.orders +(\d+) +\1 +0", out), out
    finally:
        assert cli.mirror(parser.parse_args(["mirror", "stop", "c->b"]), None) == 0
    assert "c->b" not in cli.running_flows() and "a->b" in cli.running_flows()
