"""Kafka's classic, client-assigned group protocol in the Group rules (pure: no Ray, the
clock is an argument): member ids handed out first (KIP-394), the leader learning every
member's metadata, SyncGroup handing out the leader's assignments, rebalances on
changes, static members, and no mixing with raystream-assigned members."""

from __future__ import annotations

import struct

import pytest

from raystream.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from raystream.groups.consumer_protocol import consumer_assignment
from raystream.groups.group import (
    COMPLETING_REBALANCE,
    EMPTY,
    NO_GENERATION,
    PREPARING_REBALANCE,
    STABLE,
    Group,
)
from raystream.groups.offsets_topic import GroupStore, group_record
from raystream.types import TopicPartition


def join(group, member_id="", now=0.0, *, protocols=(("range", b"m"),), instance=None, **kw):
    return group.join_classic(
        member_id,
        instance,
        kw.get("client_id", "c"),
        "10.0.0.1",
        kw.get("protocol_type", "consumer"),
        protocols,
        kw.get("session", 10.0),
        kw.get("rebalance", 30.0),
        now,
        kw.get("require_known", False),
    )


def complete(group, now=0.0):
    assert group.ready(now)
    group.complete({}, now)


def assignment(topic: str, *partitions: int) -> bytes:
    """A consumer-protocol assignment v0 of one topic, as a Kafka client writes it."""
    name = topic.encode()
    return (
        struct.pack(">hih", 0, 1, len(name))
        + name
        + struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
        + struct.pack(">i", -1)
    )


def test_a_first_join_gets_its_member_id_and_the_rebalance_waits_for_it():
    group = Group("g")
    with pytest.raises(MemberIdRequiredError) as required:
        join(group, require_known=True)
    member_id = required.value.member_id
    assert member_id in group.pending and group.state == EMPTY  # no rebalance yet
    a = join(group, member_id, require_known=True)
    assert a.member_id == member_id and a.joined is None
    with pytest.raises(MemberIdRequiredError) as second:
        join(group, require_known=True, now=1.0)
    assert not group.ready(1.0)  # waits for the pending member to come back
    assert not group.expire(5.0) and group.pending  # its session has not timed out
    group.expire(20.0)
    assert not group.pending and second.value.member_id not in group.members
    with pytest.raises(UnknownMemberIdError):
        join(group, second.value.member_id, now=21.0)


def test_the_leader_assigns_and_every_member_gets_its_bytes_through_sync():
    group = Group("g")
    a = join(group, protocols=(("cooperative-sticky", b"a1"), ("range", b"a2")))
    b = join(group, protocols=(("range", b"b2"),))
    complete(group)
    assert group.state == COMPLETING_REBALANCE and group.generation == 1
    leader = group.joined(a.member_id)
    assert (leader.protocol, leader.leader, leader.protocol_type) == (
        "range",
        a.member_id,
        "consumer",
    )
    assert {(m.member_id, m.metadata) for m in leader.members} == {
        (a.member_id, b"a2"),
        (b.member_id, b"b2"),
    }
    assert group.joined(b.member_id).members == ()  # only the leader sees the members
    # The follower's sync waits for the leader's; a commit waits for both.
    assert group.sync(b.member_id, 1, None, "consumer", "range", {}, 0.0) is None
    with pytest.raises(RebalanceInProgressError):
        group.check_commit(b.member_id, 1)
    mine, theirs = assignment("t", 0, 2), assignment("t", 1)
    answer = group.sync(
        a.member_id, 1, None, "consumer", "range", {a.member_id: mine, b.member_id: theirs}, 0.0
    )
    assert answer == mine and group.state == STABLE
    assert group.sync(b.member_id, 1, None, None, None, {}, 0.0) == theirs
    group.check_commit(b.member_id, 1)
    described = group.describe()
    assert described["protocol_type"] == "consumer"
    assert described["members"][b.member_id]["assignment"] == [TopicPartition("t", 1)]
    assert described["members"][b.member_id]["metadata"] == b"b2"
    with pytest.raises(IllegalGenerationError):
        group.sync(b.member_id, 0, None, None, None, {}, 0.0)
    with pytest.raises(InconsistentGroupProtocolError, match="roundrobin"):
        group.sync(b.member_id, 1, None, "consumer", "roundrobin", {}, 0.0)


def test_rejoins_a_new_member_and_a_leaving_member_rebalance_the_group():
    group = Group("g")
    a = join(group)
    complete(group)
    group.sync(a.member_id, 1, None, None, None, {a.member_id: b"x"}, 0.0)
    # A follower-less leader rejoining unchanged still rebalances (its metadata view).
    assert join(group, a.member_id).joined is None and group.state == PREPARING_REBALANCE
    complete(group)
    group.sync(a.member_id, 2, None, None, None, {}, 0.0)
    b = join(group, now=1.0)
    assert group.state == PREPARING_REBALANCE and b.joined is None
    with pytest.raises(RebalanceInProgressError):
        group.heartbeat(a.member_id, 2, 1.0)
    with pytest.raises(RebalanceInProgressError):
        group.sync(a.member_id, 2, None, None, None, {}, 1.0)
    assert not group.ready(1.0)
    join(group, a.member_id, now=1.0)
    complete(group, 1.0)
    group.sync(a.member_id, 3, None, None, None, {}, 1.0)
    # An unchanged follower rejoining a stable group gets the generation at once.
    again = join(group, b.member_id, now=2.0)
    assert again.joined is not None and again.joined.generation == 3
    assert group.state == STABLE
    group.leave(b.member_id, 3.0)
    assert group.state == PREPARING_REBALANCE and list(group.members) == [a.member_id]
    group.leave(a.member_id, 3.0)
    complete(group, 3.0)  # the rebalance in progress ends with nobody
    assert group.state == EMPTY and group.protocol_type == "consumer"


def test_static_members_keep_their_assignment_and_fence_their_old_id():
    group = Group("g")
    a = join(group, instance="pod-a")
    b = join(group, instance="pod-b")
    complete(group)
    group.sync(a.member_id, 1, "pod-a", None, None, {b.member_id: b"bb"}, 0.0)
    back = join(group, instance="pod-b", now=1.0)  # restarted, unchanged: no rebalance
    assert back.joined is not None and group.state == STABLE and group.generation == 1
    assert group.sync(back.member_id, 1, "pod-b", None, None, {}, 1.0) == b"bb"
    with pytest.raises(FencedInstanceIdError):
        group.heartbeat(b.member_id, 1, 1.0, "pod-b")
    with pytest.raises(FencedInstanceIdError):
        join(group, b.member_id, instance="pod-b", now=1.0)
    assert group.leave("", 2.0, "pod-b") == back.member_id  # by instance id alone
    assert list(group.members) == [a.member_id]


def test_raystream_and_kafka_members_never_share_a_group():
    kafka = Group("k")
    join(kafka)
    with pytest.raises(InconsistentGroupProtocolError, match="protocol type 'consumer'"):
        kafka.join("", None, "c", ["t"], ["range"], (), NO_GENERATION, 10.0, 30.0, 0.0)
    with pytest.raises(InconsistentGroupProtocolError, match="protocol type 'connect'"):
        join(kafka, protocol_type="connect")
    with pytest.raises(InconsistentGroupProtocolError, match="share none"):
        join(kafka, protocols=(("sticky", b""),))
    ours = Group("r")
    ours.join("", None, "c", ["t"], ["range"], (), NO_GENERATION, 10.0, 30.0, 0.0)
    with pytest.raises(InconsistentGroupProtocolError, match="assigned by raystream"):
        join(ours)


def test_a_client_assigned_group_survives_the_offsets_topic_with_its_bytes():
    group = Group("g")
    a = join(group, protocols=(("range", b"\x00\xffmeta"),), instance="pod-a")
    complete(group)
    group.sync(a.member_id, 1, None, None, None, {a.member_id: assignment("t", 3)}, 0.0)
    store = GroupStore()
    assert store.replay(group_record(group), now=5.0) == []
    restored = store.groups["g"]
    assert (restored.protocol_type, restored.state, restored.leader) == (
        "consumer",
        STABLE,
        a.member_id,
    )
    member = restored.members[a.member_id]
    assert member.protocols == (("range", b"\x00\xffmeta"),)
    assert consumer_assignment(member.assignment_bytes) == [TopicPartition("t", 3)]
    assert restored.sync(a.member_id, 1, None, None, None, {}, 5.0) == assignment("t", 3)


def test_consumer_assignment_reads_partitions_and_refuses_nothing():
    assert consumer_assignment(assignment("orders", 4, 1)) == [
        TopicPartition("orders", 4),
        TopicPartition("orders", 1),
    ]
    for junk in (b"", b"\x00", assignment("t", 1)[:9], b"\x00\x00\x7f\xff\xff\xff"):
        assert consumer_assignment(junk) == []
