"""Consumer groups on a real Ray: coordinator, rebalances, commits, admin and CLI.

Consumers here use short session timeouts and heartbeat intervals so that evictions and
rebalances happen within a second or two; the rules are the same at Kafka's defaults.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import ray

from raystream.actors.coordinator import COORDINATOR_NAME
from raystream.cli import main
from raystream.client.consumer import Consumer
from raystream.errors import (
    CommitFailedError,
    InvalidRequestError,
    NonEmptyGroupError,
)
from raystream.types import TopicPartition

FAST = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 200}


@pytest.fixture
def consumers(shared_cluster: Any) -> Callable[..., Consumer]:
    """Make group consumers on the shared cluster; closed after the test."""
    made: list[Consumer] = []

    def make(*topics: str, **config: Any) -> Consumer:
        consumer = Consumer(
            *topics, cluster=shared_cluster, auto_offset_reset="earliest", **{**FAST, **config}
        )
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.close()


def produce(cluster: Any, topic: str, count: int, start: int = 0) -> None:
    producer = cluster.producer(linger_ms=1)
    for i in range(start, start + count):
        producer.send(topic, value=str(i).encode(), key=str(i).encode())
    producer.close()


def drive(
    members: list[Consumer],
    until: Callable[[], bool],
    timeout_s: float = 30.0,
    sink: dict[int, list[Any]] | None = None,
) -> None:
    """Poll every member in turn (one thread, like several apps) until ``until()``."""
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, "condition not reached; assignments: " + str(
            [sorted(m.assignment()) for m in members]
        )
        for i, member in enumerate(members):
            for records in member.poll(timeout_ms=20).values():
                if sink is not None:
                    sink.setdefault(i, []).extend(records)


def balanced(members: list[Consumer], partitions: int, sizes: list[int]) -> Callable[[], bool]:
    def check() -> bool:
        owned = [m.assignment() for m in members]
        every = set().union(*owned)
        return (
            sorted(len(o) for o in owned) == sizes
            and len(every) == partitions
            and sum(len(o) for o in owned) == partitions
        )

    return check


def test_members_share_the_partitions_and_extra_members_idle(make_topic, consumers):
    topic = make_topic(partitions=6)
    members = [consumers(topic, group_id="share") for _ in range(3)]
    drive(members, balanced(members, 6, [2, 2, 2]))
    members.append(consumers(topic, group_id="share"))
    drive(members, balanced(members, 6, [1, 1, 2, 2]))
    members += [consumers(topic, group_id="share") for _ in range(3)]
    drive(members, balanced(members, 6, [0, 1, 1, 1, 1, 1, 1]))


def test_every_group_reads_every_record_once_across_its_members(
    shared_cluster, make_topic, consumers
):
    topic = make_topic(partitions=4)
    produce(shared_cluster, topic, 400)
    group_a = [consumers(topic, group_id="pub-a") for _ in range(2)]
    group_b = [consumers(topic, group_id="pub-b")]
    seen_a: dict[int, list[Any]] = {}
    seen_b: dict[int, list[Any]] = {}

    def total(seen: dict[int, list[Any]]) -> int:
        return sum(len(v) for v in seen.values())

    drive(group_a, lambda: total(seen_a) >= 400, sink=seen_a)
    drive(group_b, lambda: total(seen_b) >= 400, sink=seen_b)
    for seen in (seen_a, seen_b):
        values = sorted(int(r.value) for records in seen.values() for r in records)
        assert values == list(range(400))  # all of them, none twice


def test_the_listener_runs_on_the_consumer_thread_and_cooperative_keeps_what_stays(
    make_topic, consumers
):
    topic = make_topic(partitions=6)
    events: list[tuple[str, frozenset, str]] = []

    class Listener:
        def on_partitions_revoked(self, partitions):
            events.append(("revoked", frozenset(partitions), threading.current_thread().name))

        def on_partitions_assigned(self, partitions):
            events.append(("assigned", frozenset(partitions), threading.current_thread().name))

    first = consumers(group_id="coop")
    first.subscribe([topic], listener=Listener())
    drive([first], lambda: len(first.assignment()) == 6)
    everything = first.assignment()
    second = consumers(topic, group_id="coop")
    drive([first, second], balanced([first, second], 6, [3, 3]))
    revoked = [e for e in events if e[0] == "revoked"]
    assert len(revoked) == 1 and len(revoked[0][1]) == 3  # only what moved away
    assert revoked[0][1] | first.assignment() == everything
    assert {e[2] for e in events} == {threading.current_thread().name}


def test_eager_members_revoke_everything_before_rejoining(make_topic, consumers):
    topic = make_topic(partitions=4)
    revoked: list[frozenset] = []

    class Listener:
        def on_partitions_revoked(self, partitions):
            revoked.append(frozenset(partitions))

    first = consumers(group_id="eager", partition_assignment_strategy="range")
    first.subscribe([topic], listener=Listener())
    drive([first], lambda: len(first.assignment()) == 4)
    second = consumers(topic, group_id="eager", partition_assignment_strategy="range")
    drive([first, second], balanced([first, second], 4, [2, 2]))
    assert revoked and len(revoked[0]) == 4


def test_commits_auto_commits_and_close_land_in_the_group(shared_cluster, make_topic, consumers):
    topic = make_topic(partitions=2)
    produce(shared_cluster, topic, 100)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    auto = consumers(topic, group_id="auto", auto_commit_interval_ms=100)
    seen: dict[int, list[Any]] = {}
    drive([auto], lambda: sum(len(v) for v in seen.values()) >= 100, sink=seen)
    ends = auto.end_offsets(tps)
    drive([auto], lambda: all(auto.committed(tp) == ends[tp] for tp in tps))

    manual = consumers(topic, group_id="manual", enable_auto_commit=False)
    drive([manual], lambda: len(manual.assignment()) == 2)
    manual.commit({tps[0]: 7, tps[1]: (3, "note")})
    assert (manual.committed(tps[0]), manual.committed(tps[1])) == (7, 3)
    noted = manual.committed(tps[1], metadata=True)
    assert (noted.offset, noted.metadata) == (3, "note")
    assert manual.committed(tps[0], metadata=True).metadata == ""
    done = []
    manual.commit_async({tps[0]: 9}, callback=lambda offsets, error: done.append(error))
    drive([manual], lambda: bool(done))
    assert done == [None] and manual.committed(tps[0]) == 9
    with pytest.raises(InvalidRequestError, match="offset -1"):
        manual.commit({tps[0]: -1})

    closing = consumers(topic, group_id="closing")
    seen = {}
    drive([closing], lambda: sum(len(v) for v in seen.values()) >= 100, sink=seen)
    closing.close()  # commits its positions, then leaves
    successor = consumers(topic, group_id="closing")
    drive([successor], lambda: len(successor.assignment()) == 2)
    assert {tp: successor.position(tp) for tp in tps} == ends
    assert successor.poll(timeout_ms=300) == {}


def test_a_stale_member_cannot_commit(make_topic, consumers):
    topic = make_topic(partitions=2)
    tp = TopicPartition(topic, 0)
    slow = consumers(topic, group_id="stale", max_poll_interval_ms=1500)
    drive([slow], lambda: len(slow.assignment()) == 2)
    fresh = consumers(topic, group_id="stale", max_poll_interval_ms=1500)
    # slow stops polling: it misses the rebalance and is dropped, fresh takes everything
    drive([fresh], lambda: len(fresh.assignment()) == 2, timeout_s=20)
    with pytest.raises(CommitFailedError, match=r"stale|no longer in group"):
        slow.commit({tp: 1})
    fresh.commit({tp: 1})
    assert fresh.committed(tp) == 1


def test_committed_offsets_survive_a_coordinator_restart(
    shared_cluster, make_topic, consumers, chaos
):
    topic = make_topic(partitions=1)
    produce(shared_cluster, topic, 10)
    tp = TopicPartition(topic, 0)
    member = consumers(topic, group_id="durable", enable_auto_commit=False)
    drive([member], lambda: len(member.assignment()) == 1)
    member.commit({tp: 5})
    coordinator = ray.get_actor(COORDINATOR_NAME, namespace=shared_cluster.namespace)
    chaos.kill_actor(coordinator, "the group coordinator")
    chaos.confirm()  # Ray counted the restart: the old coordinator cannot answer below
    assert member.committed(tp) == 5  # retried until the restarted coordinator answers
    chaos.verify()  # it did come back in a new process
    member.commit({tp: 6})  # the restored group still knows the member and generation
    member.close()
    again = consumers(topic, group_id="durable")
    seen: dict[int, list[Any]] = {}
    drive([again], lambda: bool(seen), sink=seen)
    assert seen[0][0].offset == 6


def test_a_static_member_restart_gets_its_partitions_back_without_a_rebalance(
    shared_cluster, make_topic, consumers
):
    topic = make_topic(partitions=4)
    admin = shared_cluster.admin()
    a = consumers(topic, group_id="static", group_instance_id="pod-a", session_timeout_ms=10_000)
    b = consumers(topic, group_id="static", group_instance_id="pod-b", session_timeout_ms=10_000)
    drive([a, b], balanced([a, b], 4, [2, 2]))
    before = admin.describe_group("static")
    owned = a.assignment()
    a.close()  # a static member does not leave
    back = consumers(topic, group_id="static", group_instance_id="pod-a", session_timeout_ms=10_000)
    drive([back, b], lambda: back.assignment() == owned, timeout_s=5)
    after = admin.describe_group("static")
    assert after.generation == before.generation and after.state == "Stable"
    assert b.assignment() | back.assignment() == {TopicPartition(topic, p) for p in range(4)}


@ray.remote(num_cpus=0)
class _ActorMember:
    """A group consumer living in a Ray actor, polling on a thread of its own."""

    def __init__(self, cluster: Any, topic: str, group_id: str) -> None:
        self.consumer = cluster.consumer(
            topic, group_id=group_id, auto_offset_reset="earliest", **LONG_SESSION
        )
        self.owned: list[int] = []
        self.error: BaseException | None = None
        threading.Thread(target=self._poll, daemon=True).start()

    def _poll(self) -> None:
        try:
            while True:
                self.consumer.poll(timeout_ms=50)
                self.owned = sorted(tp.partition for tp in self.consumer.assignment())
        except BaseException as error:  # recorded: partitions() raises it
            self.error = error

    def partitions(self) -> list[int]:
        """The partitions owned; raises the poll thread's error if it ended on one."""
        if self.error is not None:
            raise self.error
        return self.owned


LONG_SESSION = {"session_timeout_ms": 60_000, "heartbeat_interval_ms": 200}


def test_a_member_whose_actor_crashed_loses_its_partitions_before_its_session_ends(
    shared_cluster, make_topic, consumers, chaos
):
    """Ray reports the crash: the partitions move in seconds, not a session (60 s) later."""
    topic = make_topic(partitions=4)
    actor = _ActorMember.remote(shared_cluster, topic, "crash")
    survivor = consumers(topic, group_id="crash", **LONG_SESSION)
    drive(
        [survivor],
        lambda: len(survivor.assignment()) == 2 and len(ray.get(actor.partitions.remote())) == 2,
        timeout_s=60,
    )
    killed = chaos.kill_actor(actor, "the member actor holding 2 partitions", restart=False).at
    drive([survivor], lambda: len(survivor.assignment()) == 4, timeout_s=30)
    assert time.monotonic() - killed < 20  # the session would have lasted 60 s
    chaos.verify(min_faults=1)  # the member really died, for good


def test_new_partitions_are_shared_out(shared_cluster, make_topic, consumers):
    topic = make_topic(partitions=2)
    members = [consumers(topic, group_id="grow") for _ in range(2)]
    drive(members, balanced(members, 2, [1, 1]))
    shared_cluster.admin().create_partitions(topic, 4)
    drive(members, balanced(members, 4, [2, 2]), timeout_s=30)


def test_admin_lists_describes_and_resets_groups(shared_cluster, make_topic, consumers):
    topic = make_topic(partitions=2)
    produce(shared_cluster, topic, 10)
    admin = shared_cluster.admin()
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    member = consumers(topic, group_id="ops", enable_auto_commit=False)
    drive([member], lambda: len(member.assignment()) == 2)
    member.commit({tps[0]: 1, tps[1]: 0})
    assert "ops" in admin.list_groups()
    description = admin.describe_group("ops")
    assert description.state == "Stable" and description.protocol == "cooperative-sticky"
    assert list(description.members.values()) == [tps]
    ends = member.end_offsets(tps)
    assert description.offsets == {tps[0]: 1, tps[1]: 0}
    assert description.lag == {tps[0]: ends[tps[0]] - 1, tps[1]: ends[tps[1]]}
    with pytest.raises(NonEmptyGroupError, match="active members"):
        admin.reset_offsets("ops", topic, "earliest")
    member.close(autocommit=False)
    assert admin.describe_group("ops").state == "Empty"
    assert admin.reset_offsets("ops", topic, "latest") == ends
    assert admin.reset_offsets("ops", topic, 3) == dict.fromkeys(tps, 3)
    future = datetime.datetime.now() + datetime.timedelta(days=1)
    assert admin.reset_offsets("ops", topic, future) == ends
    assert admin.reset_offsets("ops", topic, "earliest") == dict.fromkeys(tps, 0)
    assert admin.describe_group("ops").offsets == dict.fromkeys(tps, 0)
    with pytest.raises(InvalidRequestError, match="'yesterday'"):
        admin.reset_offsets("ops", topic, "yesterday")


def test_the_cli_lists_describes_and_resets_groups(shared_cluster, make_topic, consumers, capsys):
    topic = make_topic(partitions=1)
    produce(shared_cluster, topic, 5)
    member = consumers(topic, group_id="cli-group")
    drive(
        [member],
        lambda: member.position(TopicPartition(topic, 0)) == 5 if member.assignment() else False,
    )
    member.close()
    ns = ["--namespace", shared_cluster.namespace]
    assert main([*ns, "groups", "list"]) == 0
    assert "cli-group" in capsys.readouterr().out
    assert main([*ns, "groups", "describe", "cli-group"]) == 0
    out = capsys.readouterr().out
    assert "Empty" in out and f"{topic}-0" in out and " 5 " in out
    reset = [*ns, "groups", "reset-offsets", "cli-group", "--topic", topic, "--to-offset", "2"]
    assert main(reset) == 0  # a dry run, as Kafka's tool does without --execute
    assert "dry run" in capsys.readouterr().out
    assert shared_cluster.admin().describe_group("cli-group").offsets[TopicPartition(topic, 0)] == 5
    assert main([*reset, "--execute"]) == 0
    assert "reset offsets of group cli-group" in capsys.readouterr().out
    assert shared_cluster.admin().describe_group("cli-group").offsets[TopicPartition(topic, 0)] == 2
    assert main([*ns, "groups", "describe", "no-such-group"]) != 0
    assert "GroupIdNotFoundError" in capsys.readouterr().err
