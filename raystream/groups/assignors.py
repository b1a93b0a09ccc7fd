"""Partition assignors: which member of a consumer group reads which partition.

The group leader runs one assignor over the members' subscriptions and the partition
counts of the subscribed topics; the result maps every member id to the partitions it
reads. Four of Kafka's strategies, with Kafka's semantics and names:

* ``range`` (:class:`RangeAssignor`): per topic, contiguous ranges of partitions.
* ``roundrobin`` (:class:`RoundRobinAssignor`): all partitions dealt out in turn.
* ``sticky`` (:class:`StickyAssignor`): balanced, and keeps as many of the partitions
  members already own as balance allows (eager protocol).
* ``cooperative-sticky`` (:class:`CooperativeStickyAssignor`): the same target as
  ``sticky``, reached by KIP-429's incremental cooperative rebalancing.
* ``stream`` (:class:`StreamAssignor`): partition ``p`` of every subscribed topic to
  one member, sticky and cooperative: what streams tasks need (Kafka Streams'
  ``StreamsPartitionAssignor`` likewise hands out tasks, not partitions).

Eager and cooperative protocols differ in what a member does with the partitions it
owns. Under the *eager* protocol every member revokes everything before it rejoins,
so any assignment is safe. Under the *cooperative* protocol members keep consuming
what they own while the group rebalances, so a partition that moves from A to B is
not given to B in the same rebalance: A is told to give it up (it is missing from A's
new assignment), A rejoins without it, and the follow-up rebalance gives it to B.
Partitions that do not move are never revoked.

Invariants of every assignor here (checked by property tests over random groups):

* every member gets an entry, possibly empty (more members than partitions leaves
  idle hot standbys), and every entry is sorted;
* a partition goes only to a member subscribed to its topic, and to at most one;
* every partition of a topic someone subscribes to is assigned, except, under the
  cooperative protocol, partitions held back while their owner revokes them;
* topics nobody subscribes to, and subscribed topics missing from the partition
  counts (unknown to the cluster), are not assigned;
* the output depends only on the input, not on the order of the members list.

Members are ordered as Kafka orders them: static members (with a
``group_instance_id``) first, by instance id, then dynamic members by member id. The
range and round-robin results therefore survive a static member's restart, which
gives it a new member id but keeps its instance id.

``t0-1`` below is partition 1 of topic ``t0`` (Kafka's notation).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from raystream.types import TopicPartition

__all__ = [
    "ASSIGNORS",
    "COOPERATIVE",
    "EAGER",
    "Assignment",
    "Assignor",
    "CooperativeStickyAssignor",
    "MemberSubscription",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "StreamAssignor",
    "added_partitions",
    "choose_protocol",
    "format_assignment",
    "get_assignor",
    "revoked_partitions",
]

EAGER = "eager"
"""Rebalance protocol in which members revoke everything they own before rejoining."""

COOPERATIVE = "cooperative"
"""Rebalance protocol in which members revoke only what moves away (KIP-429)."""

Assignment = dict[str, list[TopicPartition]]
"""Member id -> the partitions that member reads, sorted."""


@dataclass(frozen=True)
class MemberSubscription:
    """What one member tells the group leader when it joins.

    Attributes:
        member_id: the id the coordinator gave the member; unique in the group.
        topics: the topics the member subscribes to (any iterable of names is
            accepted and stored as a frozenset; a bare string is refused).
        owned: the partitions the member holds now, as assigned in ``generation``;
            read by the sticky assignors only.
        generation: the generation in which ``owned`` was assigned (-1: none). When
            members claim the same partition, the highest generation's claim wins; a
            tie at the highest generation invalidates every claim to it (Kafka's rule
            for a split brain), so the partition is placed afresh.
        group_instance_id: the static member's ``group.instance.id``, or None for a
            dynamic member. Static members sort before dynamic ones, by instance id.
    """

    member_id: str
    topics: frozenset[str]
    owned: tuple[TopicPartition, ...] = ()
    generation: int = -1
    group_instance_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.member_id, str) or not self.member_id:
            raise ValueError(f"member_id must be a non-empty string, got {self.member_id!r}")
        if isinstance(self.topics, str):
            raise ValueError(
                f"topics must be a collection of topic names, got the string {self.topics!r}"
            )
        object.__setattr__(self, "topics", frozenset(self.topics))
        object.__setattr__(self, "owned", tuple(TopicPartition(*tp) for tp in self.owned))


class Assignor(Protocol):
    """A partition assignment strategy.

    Attributes:
        name: the strategy's name as consumers configure it
            (``partition.assignment.strategy``).
        protocol: :data:`EAGER` or :data:`COOPERATIVE`.
    """

    name: str
    protocol: str

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment:
        """Every member's partitions, given each topic's partition count.

        Raises:
            ValueError: duplicate member ids or a negative partition count.
        """
        ...


class RangeAssignor:
    """Kafka's RangeAssignor: per topic, each member reads a contiguous range.

    For each topic, its partitions in order and the members subscribed to it in member
    order; each member gets ``partitions // members`` partitions and the first
    ``partitions % members`` members one more. Members with the same subscriptions
    therefore read the same partition numbers of every topic, which is what a join of
    co-partitioned topics needs; the price is imbalance, since the extra partitions of
    every topic land on the same first members.

    Example:
        Kafka's: two members, topics t0 and t1 with 3 partitions each.

        >>> members = [MemberSubscription("C0", {"t0", "t1"}),
        ...            MemberSubscription("C1", {"t0", "t1"})]
        >>> print(format_assignment(RangeAssignor().assign({"t0": 3, "t1": 3}, members)))
        C0: t0-0 t0-1 t1-0 t1-1
        C1: t0-2 t1-2
    """

    name: ClassVar[str] = "range"
    protocol: ClassVar[str] = EAGER

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment:
        """See :class:`Assignor`."""
        ordered = _ordered_members(partitions_per_topic, members)
        assignment: Assignment = {m.member_id: [] for m in ordered}
        for topic in _subscribed_topics(partitions_per_topic, ordered):
            consumers = [m.member_id for m in ordered if topic in m.topics]
            per_member, extra = divmod(partitions_per_topic[topic], len(consumers))
            start = 0
            for i, member_id in enumerate(consumers):
                end = start + per_member + (1 if i < extra else 0)
                assignment[member_id].extend(TopicPartition(topic, p) for p in range(start, end))
                start = end
        return _sorted(assignment)


class RoundRobinAssignor:
    """Kafka's RoundRobinAssignor: all partitions dealt out to the members in turn.

    All partitions of the subscribed topics, sorted by topic then partition, go one by
    one to the members in member order, cycling; a member not subscribed to the
    partition's topic is skipped. With identical subscriptions the counts differ by at
    most one; with different subscriptions they can differ more.

    Example:
        Kafka's: two members, topics t0 and t1 with 3 partitions each.

        >>> members = [MemberSubscription("C0", {"t0", "t1"}),
        ...            MemberSubscription("C1", {"t0", "t1"})]
        >>> print(format_assignment(RoundRobinAssignor().assign({"t0": 3, "t1": 3}, members)))
        C0: t0-0 t0-2 t1-1
        C1: t0-1 t1-0 t1-2
    """

    name: ClassVar[str] = "roundrobin"
    protocol: ClassVar[str] = EAGER

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment:
        """See :class:`Assignor`."""
        ordered = _ordered_members(partitions_per_topic, members)
        assignment: Assignment = {m.member_id: [] for m in ordered}
        turn = 0
        for tp in _subscribed_partitions(partitions_per_topic, ordered):
            # Terminates: the partition's topic is subscribed by at least one member.
            while tp.topic not in ordered[turn % len(ordered)].topics:
                turn += 1
            assignment[ordered[turn % len(ordered)].member_id].append(tp)
            turn += 1
        return _sorted(assignment)


class StickyAssignor:
    """Kafka's StickyAssignor: balanced, and moves as few owned partitions as it can.

    Three steps:

    1. Keep: every member keeps the partitions it owns that are still valid (the topic
       exists, the member still subscribes to it, and no other member has a claim from
       a higher generation).
    2. Place: the remaining partitions, the most constrained first (fewest subscribers,
       then topic and partition order), each go to the subscribed member with the
       fewest partitions (ties: member order). From scratch with identical
       subscriptions this is round robin.
    3. Balance: while a member could pass a partition, directly or along a chain of
       members each handing the next a partition of a topic it subscribes to, to a
       member holding at least two fewer, do so; first moving only partitions their
       holder did not own, then any (the donor's unowned ones first, then its highest).

    The result is as balanced as the subscriptions allow: no chain of moves makes it
    more even (it minimises the sum of squared partition counts), which is stronger
    than Kafka's test of single moves. With identical subscriptions, partition counts
    differ by at most one, and the number of owned partitions that move is the least
    any balanced assignment needs: a member owning at most ``total // members``
    partitions keeps them all.
    Run again with every member owning what it was given, the assignor returns the
    same assignment.

    Example:
        Kafka's: three members subscribed to t0, t1, t2 and t3 with 2 partitions each.

        >>> topics = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
        >>> members = [MemberSubscription(c, set(topics)) for c in ("C0", "C1", "C2")]
        >>> first = StickyAssignor().assign(topics, members)
        >>> print(format_assignment(first))
        C0: t0-0 t1-1 t3-0
        C1: t0-1 t2-0 t3-1
        C2: t1-0 t2-1

        C1 leaves. C0 and C2 keep all they had, and share out C1's partitions
        (round robin would move t1-0 and t1-1 as well):

        >>> members = [MemberSubscription(c, set(topics), tuple(first[c]), generation=1)
        ...            for c in ("C0", "C2")]
        >>> print(format_assignment(StickyAssignor().assign(topics, members)))
        C0: t0-0 t1-1 t2-0 t3-0
        C2: t0-1 t1-0 t2-1 t3-1
    """

    name: ClassVar[str] = "sticky"
    protocol: ClassVar[str] = EAGER

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment:
        """See :class:`Assignor`."""
        return _sticky_assign(partitions_per_topic, members)


class CooperativeStickyAssignor:
    """Kafka's CooperativeStickyAssignor: the sticky target, reached in two rebalances.

    It computes :class:`StickyAssignor`'s assignment, then holds back every partition
    that would go to a member not owning it while another member still claims it.
    That owner finds the partition missing from its new assignment, revokes it (see
    :func:`revoked_partitions`) and rejoins without it; the follow-up rebalance assigns
    it, since nobody claims it any more. A partition is therefore never owned by two
    members at once, and partitions that stay put are never revoked, so their members
    consume straight through the rebalance. The follow-up rebalance revokes nothing
    more (every member then owns part of an optimal assignment, which the sticky
    balancing completes without moving owned partitions), so a change settles in two
    rebalances.

    Example:
        C0 owns all four partitions of t0 when C1 joins. The target is two each, so
        C0 keeps t0-0 and t0-1 and revokes t0-2 and t0-3, which nobody gets yet:

        >>> cooperative = CooperativeStickyAssignor()
        >>> owned = tuple(TopicPartition("t0", p) for p in range(4))
        >>> c0 = MemberSubscription("C0", {"t0"}, owned, generation=1)
        >>> c1 = MemberSubscription("C1", {"t0"})
        >>> first = cooperative.assign({"t0": 4}, [c0, c1])
        >>> print(format_assignment(first))
        C0: t0-0 t0-1
        C1: (none)
        >>> print(format_assignment({"C0": revoked_partitions(owned, first["C0"])}))
        C0: t0-2 t0-3

        C0 rejoins owning only what it kept, and the follow-up rebalance gives C1 the
        revoked partitions; C0 loses nothing more:

        >>> c0 = MemberSubscription("C0", {"t0"}, tuple(first["C0"]), generation=2)
        >>> print(format_assignment(cooperative.assign({"t0": 4}, [c0, c1])))
        C0: t0-0 t0-1
        C1: t0-2 t0-3
    """

    name: ClassVar[str] = "cooperative-sticky"
    protocol: ClassVar[str] = COOPERATIVE

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment:
        """See :class:`Assignor`."""
        target = _sticky_assign(partitions_per_topic, members)
        claimants: dict[TopicPartition, set[str]] = {}
        for m in members:
            for tp in m.owned:
                claimants.setdefault(tp, set()).add(m.member_id)
        for m in members:
            owned = set(m.owned)
            target[m.member_id] = [
                tp
                for tp in target[m.member_id]
                if tp in owned or not claimants.get(tp, set()) - {m.member_id}
            ]
        return target


class StreamAssignor:
    """Streams tasks' assignor: partition ``p`` of every subscribed topic to one member.

    A streams task reads partition ``p`` of each source topic of its sub-topology (both
    sides of a join, a table and the stream joined with it), so those partitions must
    go to one member; the sticky assignors may split them. This assignor hands out
    *units*, one per partition number (partition ``p`` of every subscribed topic that
    has it), which co-locates every task that could need them.

    Balanced: every member gets ``units // members`` or one more. Sticky: a member
    keeps the units it owns (a unit is owned through any of its partitions) as far as
    balance allows, so a task's stores rarely move. Cooperative (KIP-429): a unit
    another member still claims is held back until that member revokes it, so no
    partition is read by two members at once; the follow-up rebalance places it.

    Example:
        C0 owns every partition of two topics with 2 partitions each when C1 joins:
        C0 keeps unit 0 and revokes unit 1, which C1 gets in the follow-up rebalance.

        >>> a = StreamAssignor()
        >>> owned = tuple(TopicPartition(t, p) for t in ("a", "b") for p in (0, 1))
        >>> c0 = MemberSubscription("C0", {"a", "b"}, owned, generation=1)
        >>> c1 = MemberSubscription("C1", {"a", "b"})
        >>> print(format_assignment(a.assign({"a": 2, "b": 2}, [c0, c1])))
        C0: a-0 b-0
        C1: (none)
        >>> c0 = MemberSubscription("C0", {"a", "b"}, owned[::2], generation=2)
        >>> print(format_assignment(a.assign({"a": 2, "b": 2}, [c0, c1])))
        C0: a-0 b-0
        C1: a-1 b-1
    """

    name: ClassVar[str] = "stream"
    protocol: ClassVar[str] = COOPERATIVE

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment:
        """See :class:`Assignor`."""
        ordered = _ordered_members(partitions_per_topic, members)
        if not ordered:
            return {}
        topics = _subscribed_topics(partitions_per_topic, ordered)
        units = max((partitions_per_topic[t] for t in topics), default=0)
        base, extra = divmod(units, len(ordered))
        valid = _valid_claims(set(_subscribed_partitions(partitions_per_topic, ordered)), ordered)
        claimants: dict[int, set[str]] = {}
        for tp, owner in valid.items():
            claimants.setdefault(tp.partition, set()).add(owner)
        units_of: dict[str, list[int]] = {m.member_id: [] for m in ordered}
        taken: set[int] = set()
        # Keep: each member its owned units (lowest first) up to base + 1; only `extra`
        # members may stay at base + 1, the first in member order.
        big = 0
        for m in ordered:
            mine = sorted(u for u, who in claimants.items() if m.member_id in who)
            limit = base + 1 if big < extra else base
            kept = [u for u in mine if claimants[u] == {m.member_id}][:limit]
            if len(kept) == base + 1:
                big += 1
            units_of[m.member_id] = kept
            taken.update(kept)
        # Place: free units to the lightest members (ties: member order), held back while
        # another member still claims them (it revokes them first).
        for unit in range(units):
            if unit in taken:
                continue
            for m in sorted(ordered, key=lambda m: len(units_of[m.member_id])):
                load = len(units_of[m.member_id])
                if load > base or (load == base and big >= extra):
                    continue
                taken.add(unit)
                if not claimants.get(unit, set()) - {m.member_id}:
                    big += load == base
                    units_of[m.member_id].append(unit)
                break
        by_id = {m.member_id: m for m in ordered}
        result: Assignment = {member_id: [] for member_id in units_of}
        owner_of_unit = {u: member_id for member_id, mine in units_of.items() for u in mine}
        for topic in topics:
            for u in range(partitions_per_topic[topic]):
                tp = TopicPartition(topic, u)
                owner = owner_of_unit.get(u)
                if owner is not None and topic in by_id[owner].topics:
                    result[owner].append(tp)
                elif u not in claimants or u in owner_of_unit:
                    # Members with other subscriptions (never a streams app's): the
                    # partition goes to the lightest subscriber unless someone owns it.
                    subscribers = [m for m in ordered if topic in m.topics]
                    target = min(subscribers, key=lambda m: len(result[m.member_id]))
                    if valid.get(tp, target.member_id) == target.member_id:
                        result[target.member_id].append(tp)
        return _sorted(result)


ASSIGNORS: dict[str, Assignor] = {
    a.name: a
    for a in (
        RangeAssignor(),
        RoundRobinAssignor(),
        StickyAssignor(),
        CooperativeStickyAssignor(),
        StreamAssignor(),
    )
}
"""Every strategy by its name, in Kafka's spelling."""


def get_assignor(name: str) -> Assignor:
    """The assignor called ``name``.

    Raises:
        ValueError: no strategy has that name; the message lists the valid ones.
    """
    try:
        return ASSIGNORS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown partition assignment strategy {name!r}; valid strategies: "
            f"{', '.join(ASSIGNORS)}"
        ) from None


def choose_protocol(strategies_per_member: Sequence[Sequence[str]]) -> str:
    """The strategy a group uses, from every member's strategies in preference order.

    Kafka's rule: only strategies every member supports are candidates; each member
    votes for the candidate it prefers most, and the candidate with the most votes
    wins. Ties go to the candidate the first member prefers. When all members list
    strategies in the same order (the usual case), the winner is the first strategy
    they all support.

    Example:
        >>> choose_protocol([["cooperative-sticky", "range"], ["range"]])
        'range'
        >>> choose_protocol([["sticky", "range"], ["range", "sticky"], ["range", "sticky"]])
        'range'

    Raises:
        ValueError: no members, or no strategy that every member supports (the
            message names each member's strategies).
    """
    if not strategies_per_member:
        raise ValueError("cannot choose an assignment strategy for a group with no members")
    common = set(strategies_per_member[0]).intersection(*map(set, strategies_per_member[1:]))
    if not common:
        listed = "; ".join(
            f"member {i}: {list(strategies)}" for i, strategies in enumerate(strategies_per_member)
        )
        raise ValueError(f"no partition assignment strategy common to all members ({listed})")
    votes = Counter(
        next(s for s in strategies if s in common) for strategies in strategies_per_member
    )
    first_preference = [s for s in strategies_per_member[0] if s in common]
    return max(first_preference, key=lambda s: (votes[s], -first_preference.index(s)))


def revoked_partitions(
    owned: Iterable[TopicPartition], assigned: Iterable[TopicPartition]
) -> list[TopicPartition]:
    """The partitions a member owns but was not assigned, sorted: it must give them up.

    Under the cooperative protocol a member revokes exactly these (committing their
    offsets first) and, if there are any, rejoins so that the follow-up rebalance can
    give them to their new owners.
    """
    return sorted(set(owned) - set(assigned))


def added_partitions(
    owned: Iterable[TopicPartition], assigned: Iterable[TopicPartition]
) -> list[TopicPartition]:
    """The partitions a member was assigned but does not own yet, sorted: it starts them."""
    return sorted(set(assigned) - set(owned))


def format_assignment(assignment: Mapping[str, Iterable[TopicPartition]]) -> str:
    """One line per member, ``member: t0-0 t0-1``, for logs and examples."""
    lines = []
    for member_id, partitions in assignment.items():
        names = " ".join(f"{tp.topic}-{tp.partition}" for tp in partitions)
        lines.append(f"{member_id}: {names or '(none)'}")
    return "\n".join(lines)


# Shared steps ------------------------------------------------------------------------


def _member_key(member: MemberSubscription) -> tuple[int, str, str]:
    """Kafka's member order: static members by instance id, then dynamic by member id."""
    if member.group_instance_id is not None:
        return (0, member.group_instance_id, member.member_id)
    return (1, member.member_id, "")


def _ordered_members(
    partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
) -> list[MemberSubscription]:
    """The members in Kafka's order, after checking the input."""
    for topic, count in partitions_per_topic.items():
        if not isinstance(count, int) or count < 0:
            raise ValueError(f"topic {topic!r} has an invalid partition count {count!r}")
    seen: set[str] = set()
    for m in members:
        if m.member_id in seen:
            raise ValueError(f"member id {m.member_id!r} appears more than once")
        seen.add(m.member_id)
    return sorted(members, key=_member_key)


def _subscribed_topics(
    partitions_per_topic: Mapping[str, int], members: Iterable[MemberSubscription]
) -> list[str]:
    """Sorted topics that someone subscribes to and the cluster knows."""
    return sorted({t for m in members for t in m.topics if t in partitions_per_topic})


def _subscribed_partitions(
    partitions_per_topic: Mapping[str, int], members: Iterable[MemberSubscription]
) -> list[TopicPartition]:
    """Every partition of every subscribed topic, sorted by topic then partition."""
    return [
        TopicPartition(topic, p)
        for topic in _subscribed_topics(partitions_per_topic, members)
        for p in range(partitions_per_topic[topic])
    ]


def _sorted(assignment: Assignment) -> Assignment:
    return {member_id: sorted(partitions) for member_id, partitions in assignment.items()}


# The sticky algorithm ----------------------------------------------------------------


def _valid_claims(
    partitions: set[TopicPartition], members: Sequence[MemberSubscription]
) -> dict[TopicPartition, str]:
    """Which member keeps each owned partition: the one claim from the highest generation.

    A claim counts only if the partition exists and the member still subscribes to its
    topic. Two claims from the same highest generation cancel each other (Kafka's
    rule: the assignor cannot tell which is right, so the partition is placed afresh).
    """
    best: dict[TopicPartition, tuple[int, str | None]] = {}
    for m in members:
        for tp in set(m.owned):
            if tp not in partitions or tp.topic not in m.topics:
                continue
            previous = best.get(tp)
            if previous is None or m.generation > previous[0]:
                best[tp] = (m.generation, m.member_id)
            elif m.generation == previous[0]:
                best[tp] = (m.generation, None)
    return {tp: owner for tp, (_, owner) in best.items() if owner is not None}


def _sticky_assign(
    partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
) -> Assignment:
    """Keep valid owned partitions, place the rest, then balance (see StickyAssignor)."""
    ordered = _ordered_members(partitions_per_topic, members)
    if not ordered:
        return {}
    partitions = _subscribed_partitions(partitions_per_topic, ordered)
    state = _Balancer(
        rank={m.member_id: i for i, m in enumerate(ordered)},
        subscribers={
            topic: [m.member_id for m in ordered if topic in m.topics]
            for topic in _subscribed_topics(partitions_per_topic, ordered)
        },
        claims=_valid_claims(set(partitions), ordered),
    )
    for tp, owner in state.claims.items():
        state.add(owner, tp)

    # Place what nobody keeps: topics with the fewest subscribers first, each partition
    # to the subscriber with the fewest partitions (ties: member order).
    for topic in sorted(state.subscribers, key=lambda t: (len(state.subscribers[t]), t)):
        heap = [(*state.load_key(m), m) for m in state.subscribers[topic]]
        heapq.heapify(heap)
        for p in range(partitions_per_topic[topic]):
            tp = TopicPartition(topic, p)
            if tp not in state.claims:
                _, rank, member_id = heap[0]
                state.add(member_id, tp)
                heapq.heapreplace(heap, (len(state.assignment[member_id]), rank, member_id))

    state.balance(revoke=False)
    state.balance(revoke=True)
    return {member_id: sorted(partitions) for member_id, partitions in state.assignment.items()}


class _Balancer:
    """Moves partitions along cost-reducing paths until the loads are optimal.

    A cost-reducing path runs from a donor to a receiver holding at least two
    partitions fewer, each member on it giving the next one a partition of a topic the
    next one subscribes to: the donor loses one partition, the receiver gains one, the
    members between keep their counts, and the sum of squared loads drops, so the loop
    ends. An assignment without such a path minimises that sum (and every other convex
    measure of imbalance; the optimality criterion of semi-matchings).

    Balancing runs twice. First only partitions their holder did not own move, which
    revokes nothing; then any partition may move (preferring unowned ones, then the
    highest). If some optimal assignment keeps every owned partition, the first pass
    reaches one: the difference between the two is made of paths over unowned
    partitions. That is why cooperative rebalancing settles in two rounds: in the
    follow-up round every member owns a subset of an optimal assignment.
    """

    def __init__(
        self,
        rank: dict[str, int],
        subscribers: dict[str, list[str]],
        claims: dict[TopicPartition, str],
    ) -> None:
        self.rank = rank
        self.subscribers = subscribers
        self.claims = claims
        self.assignment: dict[str, set[TopicPartition]] = {m: set() for m in rank}
        # Per member and topic: how many partitions it holds, and how many it did not own.
        self._held: dict[str, Counter[str]] = {m: Counter() for m in rank}
        self._unowned: dict[str, Counter[str]] = {m: Counter() for m in rank}

    def add(self, member_id: str, tp: TopicPartition) -> None:
        self.assignment[member_id].add(tp)
        self._held[member_id][tp.topic] += 1
        if self.claims.get(tp) != member_id:
            self._unowned[member_id][tp.topic] += 1

    def remove(self, member_id: str, tp: TopicPartition) -> None:
        self.assignment[member_id].remove(tp)
        self._held[member_id][tp.topic] -= 1
        if self.claims.get(tp) != member_id:
            self._unowned[member_id][tp.topic] -= 1

    def load_key(self, member_id: str) -> tuple[int, int]:
        return (len(self.assignment[member_id]), self.rank[member_id])

    def balance(self, revoke: bool) -> None:
        while (path := self._cost_reducing_path(revoke)) is not None:
            moves = [
                (giver, taker, self._pick(giver, topic, revoke)) for giver, topic, taker in path
            ]
            for giver, taker, tp in moves:
                self.remove(giver, tp)
                self.add(taker, tp)

    def _movable_topics(self, member_id: str, revoke: bool) -> list[str]:
        counts = self._held[member_id] if revoke else self._unowned[member_id]
        return sorted(topic for topic, count in counts.items() if count > 0)

    def _pick(self, giver: str, topic: str, revoke: bool) -> TopicPartition:
        """The partition of ``topic`` the giver hands on: unowned first, then the highest."""
        candidates = [
            tp
            for tp in self.assignment[giver]
            if tp.topic == topic and (revoke or self.claims.get(tp) != giver)
        ]
        return max(candidates, key=lambda tp: (self.claims.get(tp) != giver, tp))

    def _cost_reducing_path(self, revoke: bool) -> list[tuple[str, str, str]] | None:
        """(giver, topic, taker) steps from the fullest donor that has a path, or None.

        Donors are tried fullest first; from each, a breadth-first search over
        "holds a movable partition of a topic the next member subscribes to" finds the
        nearest member at least two partitions lighter (ties: lighter, then order).
        A donor reached from a donor that failed is skipped: it reaches no more, and
        needs a lighter receiver.
        """
        loads = {m: len(held) for m, held in self.assignment.items()}
        least = min(loads.values())
        hopeless: set[str] = set()
        for donor in sorted(loads, key=lambda m: (-loads[m], self.rank[m])):
            if loads[donor] - least < 2:
                return None  # no lighter donor can reach a receiver either
            if donor in hopeless:
                continue
            parent: dict[str, tuple[str, str] | None] = {donor: None}
            frontier = [donor]
            while frontier:
                receivers = [m for m in frontier if loads[m] <= loads[donor] - 2]
                if receivers:
                    return self._path_to(min(receivers, key=self.load_key), parent)
                following = []
                for giver in frontier:
                    for topic in self._movable_topics(giver, revoke):
                        for taker in self.subscribers[topic]:
                            if taker not in parent:
                                parent[taker] = (giver, topic)
                                following.append(taker)
                frontier = following
            hopeless.update(parent)
        return None

    @staticmethod
    def _path_to(
        receiver: str, parent: dict[str, tuple[str, str] | None]
    ) -> list[tuple[str, str, str]]:
        path = []
        step = parent[receiver]
        while step is not None:
            giver, topic = step
            path.append((giver, topic, receiver))
            receiver, step = giver, parent[giver]
        return path[::-1]
