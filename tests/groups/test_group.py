"""The group membership rules (pure: no Ray, the clock is an argument)."""

from __future__ import annotations

import pytest

from raystream.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from raystream.groups.group import EMPTY, NO_GENERATION, PREPARING_REBALANCE, STABLE, Group
from raystream.groups.offsets_topic import (
    GroupStore,
    OffsetAndMetadata,
    group_record,
    offset_records,
    partition_for,
)
from raystream.types import TopicPartition

COUNTS = {"t": 6}


def tp(p: int, topic: str = "t") -> TopicPartition:
    return TopicPartition(topic, p)


def join(group, member_id="", now=0.0, *, owned=(), instance=None, strategies=("range",), **kw):
    return group.join(
        member_id,
        instance,
        kw.get("client_id", "c"),
        kw.get("topics", ["t"]),
        strategies,
        owned,
        kw.get("generation", NO_GENERATION),
        kw.get("session", 10.0),
        kw.get("rebalance", 30.0),
        now,
        kw.get("actor_id"),
    )


def settle(group, counts=COUNTS, now=0.0):
    assert group.ready(now)
    return group.complete(counts, now)


def test_first_members_rebalance_into_an_even_split_and_a_generation():
    group = Group("g")
    a = join(group)
    assert a.wait and group.state == PREPARING_REBALANCE
    b = join(group)  # joins the rebalance in progress
    settle(group)
    assert group.state == STABLE and group.generation == 1
    first, second = sorted([a.member_id, b.member_id])  # range deals by member id
    assert group.assigned(first).assignment == [tp(0), tp(1), tp(2)]
    assert group.assigned(second).assignment == [tp(3), tp(4), tp(5)]
    assert group.leader == first


def test_a_new_member_makes_everyone_rejoin_and_late_members_are_dropped():
    group = Group("g")
    a = join(group, rebalance=5.0)
    settle(group)
    b = join(group, now=1.0, rebalance=5.0)
    assert group.state == PREPARING_REBALANCE and not group.ready(1.0)  # a must rejoin
    join(group, a.member_id, now=2.0, generation=1, rebalance=5.0)
    settle(group, now=2.0)
    assert group.generation == 2
    assert len(group.assigned(b.member_id).assignment) == 3
    c = join(group, now=3.0, rebalance=5.0)  # nobody else rejoins in time
    assert not group.ready(7.9) and group.ready(8.0)
    assert sorted(group.complete(COUNTS, 8.0)) == sorted([a.member_id, b.member_id])
    assert group.assigned(c.member_id).assignment == [tp(p) for p in range(6)]


def test_members_beyond_the_partition_count_stay_idle():
    group = Group("g")
    ids = [join(group).member_id for _ in range(8)]
    settle(group)
    sizes = sorted(len(group.assigned(m).assignment) for m in ids)
    assert sizes == [0, 0, 1, 1, 1, 1, 1, 1]


def test_heartbeats_tell_stale_unknown_and_rebalancing_members_apart():
    group = Group("g")
    a = join(group)
    settle(group)
    group.heartbeat(a.member_id, 1, 1.0)
    with pytest.raises(IllegalGenerationError, match="generation 0"):
        group.heartbeat(a.member_id, 0, 1.0)
    with pytest.raises(UnknownMemberIdError, match="'ghost'"):
        group.heartbeat("ghost", 1, 1.0)
    join(group, now=2.0)
    with pytest.raises(RebalanceInProgressError):
        group.heartbeat(a.member_id, 1, 2.0)


def test_expired_sessions_and_leaves_trigger_a_rebalance_and_empty_the_group():
    group = Group("g")
    a = join(group, session=3.0)
    b = join(group, session=3.0)
    settle(group)
    group.heartbeat(b.member_id, 1, 2.5)
    assert group.expire(3.5) == [a.member_id]
    assert group.state == PREPARING_REBALANCE
    join(group, b.member_id, now=3.6, owned=[tp(3), tp(4), tp(5)], generation=1)
    settle(group, now=3.6)
    assert group.assigned(b.member_id).assignment == [tp(p) for p in range(6)]
    group.leave(b.member_id, 4.0)
    assert group.state == EMPTY and not group.members and group.generation == 3


def test_commits_from_stale_generations_or_outsiders_are_refused():
    group = Group("g")
    group.check_commit("", NO_GENERATION)  # empty group: outsiders (admin) may commit
    a = join(group)
    settle(group)
    group.check_commit(a.member_id, 1)
    with pytest.raises(CommitFailedError, match=r"generation 0 .* stale"):
        group.check_commit(a.member_id, 0)
    with pytest.raises(CommitFailedError, match="active members"):
        group.check_commit("", NO_GENERATION)
    with pytest.raises(CommitFailedError, match="no longer in group"):
        group.check_commit("gone", 1)
    with pytest.raises(NonEmptyGroupError, match="reset_offsets"):
        group.check_inactive("reset_offsets")


def test_a_static_member_that_comes_back_keeps_its_partitions_without_a_rebalance():
    group = Group("g")
    a = join(group, instance="pod-a")
    b = join(group, instance="pod-b")
    settle(group)
    before = group.assigned(a.member_id).assignment
    again = join(group, instance="pod-a", now=5.0)  # restarted: no member id yet
    assert not again.wait and group.state == STABLE and group.generation == 1
    assert again.member_id != a.member_id
    assert group.assigned(again.member_id).assignment == before
    with pytest.raises(FencedInstanceIdError, match="pod-a"):
        join(group, a.member_id, now=6.0, instance="pod-a")
    assert b.member_id in group.members


def test_silent_members_in_ray_actors_are_candidates_for_eviction_static_ones_are_not():
    group = Group("g")
    a = join(group, actor_id="actor-a").member_id
    b = join(group, actor_id="actor-b", instance="b-static").member_id
    c = join(group).member_id  # not in an actor: only its session can time out
    settle(group)
    assert group.silent_actors(now=0.4, after_s=0.5) == {}
    group.heartbeat(a, group.generation, now=0.9)
    assert group.silent_actors(now=1.0, after_s=0.5) == {}  # a heard from 0.1 s ago
    assert group.silent_actors(now=1.5, after_s=0.5) == {a: "actor-a"}
    assert group.evict([a, "not-a-member"], now=1.5) == [a]
    assert set(group.members) == {b, c} and group.state == PREPARING_REBALANCE
    assert group.evict([a], now=1.6) == []  # already gone: nothing happens


def test_cooperative_members_revoke_then_the_follow_up_rebalance_hands_partitions_over():
    group = Group("g")
    coop = ("cooperative-sticky",)
    a = join(group, strategies=coop)
    settle(group)
    owned = group.assigned(a.member_id).assignment
    b = join(group, now=1.0, strategies=coop)
    join(group, a.member_id, now=1.0, owned=owned, generation=1, strategies=coop)
    settle(group, now=1.0)
    kept = group.assigned(a.member_id).assignment
    assert len(kept) == 3 and set(kept) < set(owned)
    assert group.assigned(b.member_id).assignment == []  # held back while a revokes
    # a rejoins owning only what it kept: that change starts the follow-up rebalance
    assert join(group, a.member_id, now=2.0, owned=kept, generation=2, strategies=coop).wait
    join(group, b.member_id, now=2.0, generation=2, strategies=coop)
    settle(group, now=2.0)
    assert group.assigned(a.member_id).assignment == kept
    assert set(group.assigned(b.member_id).assignment) == set(owned) - set(kept)


def test_a_member_rejoining_with_nothing_new_keeps_its_assignment():
    group = Group("g")
    a = join(group)
    settle(group)
    again = join(group, a.member_id, now=1.0, generation=1)
    assert not again.wait and group.generation == 1


def test_unknown_members_strategies_and_protocol_mismatches_are_refused():
    group = Group("g")
    with pytest.raises(UnknownMemberIdError, match="'nobody'"):
        join(group, "nobody")
    with pytest.raises(InvalidRequestError, match="'fastest'"):
        join(group, strategies=("fastest",))
    join(group, strategies=("range",))
    with pytest.raises(InconsistentGroupProtocolError, match="roundrobin"):
        join(group, strategies=("roundrobin",))


def test_new_partitions_of_a_subscribed_topic_start_a_rebalance():
    group = Group("g")
    join(group)
    settle(group)
    assert not group.partitions_changed({"t": 6, "other": 3}, 1.0)
    assert group.partitions_changed({"t": 8}, 1.0)
    assert group.state == PREPARING_REBALANCE


def test_the_offsets_topic_replays_into_the_same_groups_and_offsets():
    group = Group("g")
    a = join(group, instance="pod-a")
    settle(group)
    store = GroupStore()
    store.replay(group_record(group), now=100.0)
    commit = {tp(0): OffsetAndMetadata(42, "m", 7), tp(1): OffsetAndMetadata(9)}
    store.replay(offset_records("g", commit), now=100.0)
    store.replay(offset_records("g", {tp(0): OffsetAndMetadata(50)}), now=100.0)
    restored = store.groups["g"]
    assert restored.state == STABLE and restored.generation == 1
    assert restored.assigned(a.member_id).assignment == group.assigned(a.member_id).assignment
    assert restored.members[a.member_id].last_seen == 100.0  # the session starts afresh
    assert store.offsets["g"] == {tp(0): OffsetAndMetadata(50), tp(1): OffsetAndMetadata(9)}


def test_a_group_always_lands_in_the_same_offsets_partition():
    assert partition_for("orders-app", 8) == partition_for("orders-app", 8)
    assert {partition_for(f"g{i}", 8) for i in range(100)} == set(range(8))
    assert partition_for("anything", 1) == 0
