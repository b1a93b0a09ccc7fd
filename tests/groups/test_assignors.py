"""Partition assignors: Kafka's documented examples, then validity, balance,
stickiness and cooperative convergence checked over many random, seeded groups."""

from __future__ import annotations

import doctest
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import raystream.groups.assignors as assignors_module
from raystream.groups.assignors import (
    ASSIGNORS,
    COOPERATIVE,
    EAGER,
    Assignment,
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    StreamAssignor,
    added_partitions,
    choose_protocol,
    format_assignment,
    get_assignor,
    revoked_partitions,
)
from raystream.types import TopicPartition

PROPERTY = settings(derandomize=True, max_examples=200, deadline=None)

TOPICS = ("t0", "t1", "t2", "t3")
OLD_MEMBERS = tuple(f"c{i}" for i in range(8))
NEW_MEMBERS = tuple(f"n{i}" for i in range(8))
BALANCED = ("roundrobin", "sticky", "cooperative-sticky")
STICKY = ("sticky", "cooperative-sticky")


def tps(*names: str) -> list[TopicPartition]:
    """``tps("t0-1", "t1-0")``: topic-partitions in Kafka's notation."""
    result = []
    for name in names:
        topic, partition = name.rsplit("-", 1)
        result.append(TopicPartition(topic, int(partition)))
    return result


def member(member_id: str, topics: Sequence[str], owned: Sequence[str] = (), generation: int = 1):
    return MemberSubscription(member_id, frozenset(topics), tuple(tps(*owned)), generation)


def show(assignment: Assignment) -> dict[str, list[str]]:
    return {m: [f"{tp.topic}-{tp.partition}" for tp in tps_] for m, tps_ in assignment.items()}


def subscribed_partitions(
    partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
) -> set[TopicPartition]:
    return {
        TopicPartition(topic, p)
        for topic, count in partitions_per_topic.items()
        if any(topic in m.topics for m in members)
        for p in range(count)
    }


def owners(members: Sequence[MemberSubscription]) -> dict[TopicPartition, set[str]]:
    result: dict[TopicPartition, set[str]] = {}
    for m in members:
        for tp in m.owned:
            result.setdefault(tp, set()).add(m.member_id)
    return result


def rejoin(members: Sequence[MemberSubscription], assignment: Assignment, generation: int):
    """The members as they join the next generation, owning what they were assigned."""
    return [
        replace(m, owned=tuple(assignment[m.member_id]), generation=generation) for m in members
    ]


def loads(assignment: Assignment) -> list[int]:
    return [len(partitions) for partitions in assignment.values()]


# The checkers -----------------------------------------------------------------------


def check_valid(
    assignment: Assignment,
    partitions_per_topic: Mapping[str, int],
    members: Sequence[MemberSubscription],
    complete: bool = True,
) -> set[TopicPartition]:
    """Every member has a sorted entry; each partition goes at most once (exactly once if
    ``complete``) and only to a member subscribed to its topic. Returns the unassigned."""
    by_id = {m.member_id: m for m in members}
    assert set(assignment) == set(by_id)
    seen: set[TopicPartition] = set()
    for member_id, partitions in assignment.items():
        assert partitions == sorted(partitions)
        for tp in partitions:
            assert tp.topic in by_id[member_id].topics, (member_id, tp)
            assert 0 <= tp.partition < partitions_per_topic[tp.topic]
            assert tp not in seen, f"{tp} assigned twice"
            seen.add(tp)
    expected = subscribed_partitions(partitions_per_topic, members)
    assert seen <= expected
    if complete:
        assert seen == expected
    return expected - seen


def check_optimally_balanced(assignment: Assignment, members: Sequence[MemberSubscription]):
    """No member can pass a partition, directly or along a chain of members each handing
    the next a partition of a topic it subscribes to, to a member with two fewer."""
    subscribed = {m.member_id: m.topics for m in members}
    held_topics = {m: {tp.topic for tp in tps_} for m, tps_ in assignment.items()}
    for donor, partitions in assignment.items():
        reached, frontier = {donor}, [donor]
        while frontier:
            frontier = [
                taker
                for giver in frontier
                for taker in assignment
                if taker not in reached and held_topics[giver] & subscribed[taker]
            ]
            reached.update(frontier)
        for receiver in reached:
            assert len(assignment[receiver]) >= len(partitions) - 1, (donor, receiver)


def check_no_single_move_helps(assignment: Assignment, members: Sequence[MemberSubscription]):
    """Kafka's test of balance: no member can take a partition from one with two more."""
    subscribed = {m.member_id: m.topics for m in members}
    for partitions in assignment.values():
        for receiver, held in assignment.items():
            if len(held) <= len(partitions) - 2:
                assert not {tp.topic for tp in partitions} & subscribed[receiver]


# Random groups ----------------------------------------------------------------------


@dataclass
class Group:
    partitions_per_topic: dict[str, int]
    members: list[MemberSubscription]


# Strategies built once: making them inside ``draw`` dominates the run time.
_TOPIC_COUNT = st.integers(1, len(TOPICS))
_PARTITION_COUNTS = st.lists(st.integers(1, 12), min_size=len(TOPICS), max_size=len(TOPICS))
_SUBSET = st.integers(0, 2 ** (len(TOPICS) + 1) - 1)  # a bit per topic, and one for "unknown"
_MEMBER_COUNT = st.integers(0, 8)
_SEED = st.integers(0, 2**32)


@st.composite
def groups(draw: st.DrawFn, identical: bool = False) -> Group:
    """1..4 topics of 1..12 partitions; 1..8 members, some staying from a previous
    generation with what they owned in a random valid assignment, some joining;
    subscriptions random (sometimes to a topic the cluster does not know) or identical."""
    n_topics = draw(_TOPIC_COUNT)
    topics = dict(zip(TOPICS[:n_topics], draw(_PARTITION_COUNTS)[:n_topics], strict=True))
    names = [*TOPICS[:n_topics], "unknown"]

    def random_subscription() -> frozenset[str]:
        bits = draw(_SUBSET)
        return frozenset(name for i, name in enumerate(names) if bits >> i & 1)

    common = random_subscription() - {"unknown"} or frozenset(names[:1])

    def subscription() -> frozenset[str]:
        return common if identical else random_subscription()

    previous = OLD_MEMBERS[: draw(_MEMBER_COUNT)]
    previous_topics = {m: subscription() for m in previous}
    # Who owned each partition (or nobody), and the order of the members list: from one
    # seeded generator, far cheaper than a draw each.
    rng = random.Random(draw(_SEED))
    owned: dict[str, list[TopicPartition]] = {m: [] for m in previous}
    for topic, count in topics.items():
        subscribers = [m for m in previous if topic in previous_topics[m]]
        for p in range(count):
            owner = rng.choice([None, *subscribers])
            if owner is not None:
                owned[owner].append(TopicPartition(topic, p))
    staying = [m for m in previous if draw(st.booleans())]
    joining = NEW_MEMBERS[: max(0 if staying else 1, min(draw(_MEMBER_COUNT), 8 - len(staying)))]
    members = [
        MemberSubscription(
            m,
            previous_topics[m] if draw(st.booleans()) else subscription(),
            tuple(owned[m]),
            generation=1,
        )
        for m in staying
    ]
    members += [MemberSubscription(m, subscription()) for m in joining]
    rng.shuffle(members)
    return Group(topics, members)


# Kafka's documented examples --------------------------------------------------------


def test_range_gives_each_member_a_contiguous_range_per_topic() -> None:
    members = [member("C0", ["t0", "t1"]), member("C1", ["t0", "t1"])]
    assert show(RangeAssignor().assign({"t0": 3, "t1": 3}, members)) == {
        "C0": ["t0-0", "t0-1", "t1-0", "t1-1"],
        "C1": ["t0-2", "t1-2"],
    }


def test_range_gives_the_extra_partitions_to_the_first_members() -> None:
    members = [member(c, ["t0"]) for c in ("C2", "C0", "C1")]
    assert show(RangeAssignor().assign({"t0": 8}, members)) == {
        "C0": ["t0-0", "t0-1", "t0-2"],
        "C1": ["t0-3", "t0-4", "t0-5"],
        "C2": ["t0-6", "t0-7"],
    }


def test_roundrobin_deals_partitions_in_turn() -> None:
    members = [member("C0", ["t0", "t1"]), member("C1", ["t0", "t1"])]
    assert show(RoundRobinAssignor().assign({"t0": 3, "t1": 3}, members)) == {
        "C0": ["t0-0", "t0-2", "t1-1"],
        "C1": ["t0-1", "t1-0", "t1-2"],
    }


UNEQUAL_TOPICS = {"t0": 1, "t1": 2, "t2": 3}
UNEQUAL_MEMBERS = [member("C0", ["t0"]), member("C1", ["t0", "t1"]), member("C2", TOPICS[:3])]


def test_roundrobin_skips_members_not_subscribed_to_the_topic() -> None:
    assert show(RoundRobinAssignor().assign(UNEQUAL_TOPICS, UNEQUAL_MEMBERS)) == {
        "C0": ["t0-0"],
        "C1": ["t1-0"],
        "C2": ["t1-1", "t2-0", "t2-1", "t2-2"],
    }


def test_sticky_matches_kafkas_examples_with_unequal_subscriptions() -> None:
    first = StickyAssignor().assign(UNEQUAL_TOPICS, UNEQUAL_MEMBERS)
    assert show(first) == {"C0": ["t0-0"], "C1": ["t1-0", "t1-1"], "C2": ["t2-0", "t2-1", "t2-2"]}
    # C0 leaves: roundrobin would move four partitions, sticky only C0's.
    rest = rejoin(UNEQUAL_MEMBERS[1:], first, generation=2)
    assert show(StickyAssignor().assign(UNEQUAL_TOPICS, rest)) == {
        "C1": ["t0-0", "t1-0", "t1-1"],
        "C2": ["t2-0", "t2-1", "t2-2"],
    }


def test_sticky_keeps_everything_when_a_member_leaves() -> None:
    topics = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
    members = [member(c, TOPICS) for c in ("C0", "C1", "C2")]
    first = StickyAssignor().assign(topics, members)
    assert first == RoundRobinAssignor().assign(topics, members)
    second = StickyAssignor().assign(topics, rejoin([members[0], members[2]], first, 2))
    for c in ("C0", "C2"):
        assert set(first[c]) <= set(second[c])


def test_docstring_examples_hold() -> None:
    result = doctest.testmod(assignors_module)
    assert result.attempted > 0
    assert result.failed == 0


# Shapes of groups -------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ASSIGNORS))
def test_more_members_than_partitions_leaves_idle_members(name: str) -> None:
    members = [member(f"C{i}", ["t0"]) for i in range(5)]
    assignment = ASSIGNORS[name].assign({"t0": 2}, members)
    check_valid(assignment, {"t0": 2}, members)
    assert sorted(loads(assignment)) == [0, 0, 0, 1, 1]


@pytest.mark.parametrize("name", list(ASSIGNORS))
def test_a_topic_only_some_members_subscribe_to_goes_only_to_them(name: str) -> None:
    members = [member("C0", ["t0"]), member("C1", ["t0"]), member("C2", ["t0", "t1"])]
    topics = {"t0": 3, "t1": 4}
    assignment = ASSIGNORS[name].assign(topics, members)
    check_valid(assignment, topics, members)
    assert {tp for tp in assignment["C2"] if tp.topic == "t1"} == set(
        tps(*(f"t1-{p}" for p in range(4)))
    )
    if name in STICKY:
        # t1 makes C2 the busiest, so t0 goes to the others (roundrobin does not see it).
        assert sorted(loads(assignment)) == [1, 2, 4]


@pytest.mark.parametrize("name", list(ASSIGNORS))
def test_unknown_and_unsubscribed_topics_are_not_assigned(name: str) -> None:
    members = [member("C0", ["t0", "ghost"]), member("C1", ["t0"])]
    assignment = ASSIGNORS[name].assign({"t0": 2, "t1": 5}, members)
    assert show(assignment) in ({"C0": ["t0-0"], "C1": ["t0-1"]}, {"C0": ["t0-1"], "C1": ["t0-0"]})


@pytest.mark.parametrize("name", list(ASSIGNORS))
def test_no_members_or_no_partitions(name: str) -> None:
    assert ASSIGNORS[name].assign({"t0": 3}, []) == {}
    assert ASSIGNORS[name].assign({"t0": 0}, [member("C0", ["t0"])]) == {"C0": []}


def test_static_members_sort_first_by_instance_id() -> None:
    members = [
        MemberSubscription("a-dynamic", {"t0"}),
        MemberSubscription("z-static", {"t0"}, group_instance_id="host-2"),
        MemberSubscription("y-static", {"t0"}, group_instance_id="host-1"),
    ]
    assert show(RangeAssignor().assign({"t0": 3}, members)) == {
        "y-static": ["t0-0"],
        "z-static": ["t0-1"],
        "a-dynamic": ["t0-2"],
    }


def test_the_highest_generation_claim_wins() -> None:
    topics = {"t0": 2}
    newer_c0 = [member("C0", ["t0"], ["t0-0"], 3), member("C1", ["t0"], ["t0-0", "t0-1"], 2)]
    assert show(StickyAssignor().assign(topics, newer_c0)) == {"C0": ["t0-0"], "C1": ["t0-1"]}
    newer_c1 = [member("C0", ["t0"], ["t0-0"], 2), member("C1", ["t0"], ["t0-0", "t0-1"], 3)]
    assert show(StickyAssignor().assign(topics, newer_c1)) == {"C0": ["t0-1"], "C1": ["t0-0"]}


def test_claims_from_the_same_generation_cancel() -> None:
    # Both claim t0-0 in generation 2: neither claim counts, so C1's t0-1 and t0-2 stay
    # and t0-0 goes to the member with fewer partitions.
    members = [member("C0", ["t0"], ["t0-0"], 2), member("C1", ["t0"], ["t0-0", "t0-1", "t0-2"], 2)]
    assert show(StickyAssignor().assign({"t0": 4}, members)) == {
        "C0": ["t0-0", "t0-3"],
        "C1": ["t0-1", "t0-2"],
    }


def test_a_partition_of_an_unsubscribed_topic_is_not_kept() -> None:
    members = [member("C0", ["t1"], ["t0-0"]), member("C1", ["t0", "t1"])]
    assignment = StickyAssignor().assign({"t0": 1, "t1": 1}, members)
    assert show(assignment) == {"C0": ["t1-0"], "C1": ["t0-0"]}
    # Cooperative: C0 still holds t0-0, so C1 gets it only in the next round.
    assignment = CooperativeStickyAssignor().assign({"t0": 1, "t1": 1}, members)
    assert show(assignment) == {"C0": ["t1-0"], "C1": []}


def test_balancing_along_a_chain_moves_unowned_partitions_first() -> None:
    # C0 gets the free t-3; only a chain C0 -> C1 (topic t) -> C2 (topic u) evens the
    # loads, and C0 passes on t-3 rather than a partition it owned.
    members = [
        member("C0", ["t"], ["t-0", "t-1"]),
        member("C1", ["t", "u"], ["t-2", "u-0", "u-1"]),
        member("C2", ["u"]),
    ]
    assert show(StickyAssignor().assign({"t": 4, "u": 2}, members)) == {
        "C0": ["t-0", "t-1"],
        "C1": ["t-2", "t-3"],
        "C2": ["u-0", "u-1"],
    }


# Random groups: validity, determinism, balance ----------------------------------------


@PROPERTY
@given(group=groups(), name=st.sampled_from(["range", "roundrobin", "sticky"]))
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(group: Group, name: str) -> None:
    assignment = ASSIGNORS[name].assign(group.partitions_per_topic, group.members)
    check_valid(assignment, group.partitions_per_topic, group.members)


@PROPERTY
@given(group=groups(), name=st.sampled_from(list(ASSIGNORS)))
def test_the_result_depends_on_the_input_not_on_member_order(group: Group, name: str) -> None:
    assignor = ASSIGNORS[name]
    first = assignor.assign(group.partitions_per_topic, group.members)
    assert assignor.assign(group.partitions_per_topic, group.members) == first
    assert assignor.assign(group.partitions_per_topic, group.members[::-1]) == first


@PROPERTY
@given(group=groups(identical=True), name=st.sampled_from(BALANCED))
def test_identical_subscriptions_give_counts_within_one(group: Group, name: str) -> None:
    assignor = ASSIGNORS[name]
    assignment = assignor.assign(group.partitions_per_topic, group.members)
    if assignor.protocol == COOPERATIVE:  # balanced once the revoked partitions land
        assignment = assignor.assign(
            group.partitions_per_topic, rejoin(group.members, assignment, 2)
        )
    check_valid(assignment, group.partitions_per_topic, group.members)
    assert max(loads(assignment)) - min(loads(assignment)) <= 1


@PROPERTY
@given(group=groups())
def test_range_splits_each_topic_evenly_among_its_subscribers(group: Group) -> None:
    assignment = RangeAssignor().assign(group.partitions_per_topic, group.members)
    for topic in group.partitions_per_topic:
        counts = [
            sum(tp.topic == topic for tp in assignment[m.member_id])
            for m in group.members
            if topic in m.topics
        ]
        if counts:
            assert max(counts) - min(counts) <= 1


@PROPERTY
@given(group=groups())
def test_sticky_is_as_balanced_as_the_subscriptions_allow(group: Group) -> None:
    assignment = StickyAssignor().assign(group.partitions_per_topic, group.members)
    check_no_single_move_helps(assignment, group.members)
    check_optimally_balanced(assignment, group.members)


@PROPERTY
@given(group=groups())
def test_sticky_keeps_an_assignment_it_made(group: Group) -> None:
    first = StickyAssignor().assign(group.partitions_per_topic, group.members)
    again = StickyAssignor().assign(group.partitions_per_topic, rejoin(group.members, first, 2))
    assert again == first


# Stickiness ---------------------------------------------------------------------------


def least_revocations(owned_counts: list[int], total: int) -> int:
    """The fewest owned partitions any balanced assignment takes from their owners: the
    ``total % members`` larger shares go to the members owning the most."""
    share, larger = divmod(total, len(owned_counts))
    ordered = sorted(owned_counts, reverse=True)
    return sum(max(0, o - share - (1 if i < larger else 0)) for i, o in enumerate(ordered))


@PROPERTY
@given(
    group=groups(identical=True),
    name=st.sampled_from(STICKY),
    change=st.sampled_from(["join", "leave"]),
    which=st.integers(0, 7),
)
def test_a_member_joining_or_leaving_moves_no_more_than_needed(
    group: Group, name: str, change: str, which: int
) -> None:
    topics = group.partitions_per_topic
    stable = StickyAssignor().assign(topics, group.members)
    members = rejoin(group.members, stable, 2)
    if change == "join":
        members.append(MemberSubscription("joiner", members[0].topics))
    elif len(members) > 1:
        members.pop(which % len(members))
    assignment = ASSIGNORS[name].assign(topics, members)

    total = len(subscribed_partitions(topics, members))
    revoked = {m.member_id: revoked_partitions(m.owned, assignment[m.member_id]) for m in members}
    moved = sum(len(r) for r in revoked.values())
    assert moved == least_revocations([len(m.owned) for m in members], total)
    for m in members:
        if len(m.owned) <= total // len(members):
            assert revoked[m.member_id] == []


# Cooperative rebalancing ----------------------------------------------------------------


@PROPERTY
@given(group=groups())
def test_cooperative_rebalancing_revokes_first_and_settles_in_two_rounds(group: Group) -> None:
    topics, members = group.partitions_per_topic, group.members
    cooperative = CooperativeStickyAssignor()

    # Round 1: nobody gets a partition another member still owns.
    first = cooperative.assign(topics, members)
    held_back = check_valid(first, topics, members, complete=False)
    claimed = owners(members)
    for m in members:
        for tp in added_partitions(m.owned, first[m.member_id]):
            assert claimed.get(tp, set()) <= {m.member_id}, f"{tp} given while owned"

    # What is held back is exactly what sticky moves away from an owner; nothing else
    # differs, so partitions that stay put are never revoked.
    target = StickyAssignor().assign(topics, members)
    moving = {
        tp
        for m in members
        for tp in target[m.member_id]
        if tp not in m.owned and claimed.get(tp, set()) - {m.member_id}
    }
    assert held_back == moving
    assert {m: set(p) for m, p in first.items()} == {m: set(p) - moving for m, p in target.items()}
    for tp in held_back:  # revoked from everyone who holds it
        assert all(tp not in first[holder] for holder in claimed[tp])

    # Round 2: owners rejoin without the revoked partitions; those are now assigned,
    # nothing more is revoked, and the result is balanced.
    second = cooperative.assign(topics, rejoin(members, first, 2))
    check_valid(second, topics, members)
    for m in members:
        assert revoked_partitions(first[m.member_id], second[m.member_id]) == []
    check_optimally_balanced(second, members)

    # Round 3 changes nothing.
    assert cooperative.assign(topics, rejoin(members, second, 3)) == second


@PROPERTY
@given(group=groups(identical=True), joiners=st.integers(1, 3))
def test_new_members_get_partitions_only_after_the_owners_revoke_them(
    group: Group, joiners: int
) -> None:
    topics = group.partitions_per_topic
    cooperative = CooperativeStickyAssignor()
    stable = StickyAssignor().assign(topics, group.members)
    members = rejoin(group.members, stable, 2)
    members += [MemberSubscription(f"joiner{i}", members[0].topics) for i in range(joiners)]

    first = cooperative.assign(topics, members)
    for m in members:  # owners keep a subset; joiners get only unowned partitions
        assert set(first[m.member_id]) <= set(m.owned) or not m.owned
    assert all(first[f"joiner{i}"] == [] for i in range(joiners))

    second = cooperative.assign(topics, rejoin(members, first, 3))
    check_valid(second, topics, members)
    assert max(loads(second)) - min(loads(second)) <= 1
    assert cooperative.assign(topics, rejoin(members, second, 4)) == second


@PROPERTY
@given(group=groups(identical=True), joiners=st.integers(0, 3), leavers=st.integers(0, 2))
def test_stream_assignor_keeps_partition_p_of_every_topic_together(
    group: Group, joiners: int, leavers: int
) -> None:
    topics = group.partitions_per_topic
    stream = StreamAssignor()

    def settle(members: list[MemberSubscription], generation: int) -> Assignment:
        # Rebalance until nothing is held back; each round no partition is given to a
        # member while another still owns it.
        for round_ in range(3):
            assignment = stream.assign(topics, members)
            claimed = owners(members)
            for m in members:
                for tp in added_partitions(m.owned, assignment[m.member_id]):
                    assert claimed.get(tp, set()) <= {m.member_id}, f"{tp} given while owned"
            members = rejoin(members, assignment, generation + round_)
            if check_valid(assignment, topics, members, complete=False) == set():
                return assignment
        raise AssertionError("did not settle in three rounds")

    first = settle(list(group.members), 2)
    members = rejoin(group.members, first, 5)
    members = members[: max(len(members) - leavers, 1)]
    members += [MemberSubscription(f"joiner{i}", members[0].topics) for i in range(joiners)]
    final = settle(members, 6)
    holder: dict[int, str] = {}
    for member_id, partitions in final.items():
        for tp in partitions:  # partition p of every topic is on one member
            assert holder.setdefault(tp.partition, member_id) == member_id
    units = [len({tp.partition for tp in ps}) for ps in final.values()]
    assert max(units) - min(units) <= 1


def test_revoked_and_added_partitions() -> None:
    owned, assigned = tps("t0-2", "t0-0", "t1-0"), tps("t1-1", "t0-0")
    assert revoked_partitions(owned, assigned) == tps("t0-2", "t1-0")
    assert added_partitions(owned, assigned) == tps("t1-1")
    assert revoked_partitions(owned, owned) == added_partitions(owned, owned) == []


# Strategy selection and errors ----------------------------------------------------------


def test_assignors_are_registered_under_kafkas_names_and_protocols() -> None:
    assert {name: a.protocol for name, a in ASSIGNORS.items()} == {
        "range": EAGER,
        "roundrobin": EAGER,
        "sticky": EAGER,
        "cooperative-sticky": COOPERATIVE,
        "stream": COOPERATIVE,
    }
    assert all(get_assignor(name) is a and a.name == name for name, a in ASSIGNORS.items())


def test_get_assignor_names_the_unknown_strategy_and_the_valid_ones() -> None:
    with pytest.raises(
        ValueError, match=r"'uniform'.*range, roundrobin, sticky, cooperative-sticky"
    ):
        get_assignor("uniform")


def test_the_group_uses_the_first_strategy_all_members_support() -> None:
    assert choose_protocol([["cooperative-sticky", "range"], ["range"]]) == "range"
    assert choose_protocol([["sticky", "roundrobin", "range"]] * 3) == "sticky"
    assert choose_protocol([["cooperative-sticky", "range"], ["cooperative-sticky", "range"]]) == (
        "cooperative-sticky"
    )


def test_members_vote_for_their_preferred_common_strategy() -> None:
    assert (
        choose_protocol([["sticky", "range"], ["range", "sticky"], ["range", "sticky"]]) == "range"
    )
    # A tie goes to the first member's preference.
    assert choose_protocol([["sticky", "range"], ["range", "sticky"]]) == "sticky"


def test_choose_protocol_names_the_conflict() -> None:
    with pytest.raises(ValueError, match=r"member 0: \['range'\]; member 1: \['roundrobin'\]"):
        choose_protocol([["range"], ["roundrobin"]])
    with pytest.raises(ValueError, match="no members"):
        choose_protocol([])


def test_bad_input_is_refused_with_the_bad_value_named() -> None:
    with pytest.raises(ValueError, match="'t0'"):
        MemberSubscription("C0", "t0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="member_id"):
        MemberSubscription("", {"t0"})
    twins = [member("C0", ["t0"]), member("C0", ["t0"])]
    with pytest.raises(ValueError, match="'C0' appears more than once"):
        StickyAssignor().assign({"t0": 1}, twins)
    with pytest.raises(ValueError, match=r"'t0'.*-1"):
        RangeAssignor().assign({"t0": -1}, [member("C0", ["t0"])])


def test_format_assignment_shows_idle_members() -> None:
    assert format_assignment({"C0": tps("t0-0", "t0-1"), "C1": []}) == "C0: t0-0 t0-1\nC1: (none)"


def test_the_public_names_are_exported() -> None:
    for name in assignors_module.__all__:
        assert hasattr(assignors_module, name)
