"""One consumer group's membership and rebalance rules, as plain data and functions.

The group coordinator actor feeds this class the members' requests and the clock; it
answers with what each member should do. No Ray and no clock reading here, so the
rules are tested directly (``now`` is always an argument, in seconds).

The protocol is Kafka's classic group protocol with one simplification: the
coordinator runs the assignor itself (as Kafka's KIP-848 protocol does), so a join
answers with the member's assignment and there is no separate SyncGroup round trip.
Everything else keeps Kafka's meaning:

* **Generations.** Each completed rebalance bumps the generation; heartbeats and
  offset commits from an older generation are refused, which is what stops a member
  that was evicted (or paused too long) from committing over its successor.
* **States.** ``Empty`` (no members), ``PreparingRebalance`` (waiting for every
  member to rejoin, at most the largest rebalance timeout, i.e. the members'
  ``max_poll_interval_ms``; members that do not rejoin in time are removed),
  ``Stable`` (everyone has its assignment). Kafka's ``CompletingRebalance`` is not
  needed since the assignment is computed the moment the last member joins.
* **Triggers.** A new member, a member leaving, a member's session expiring
  (``session_timeout_ms`` without a heartbeat), a member rejoining with a changed
  subscription or owned set (the cooperative follow-up), and a change of the
  subscribed topics' partition counts all start a rebalance.
* **Static membership.** A member with a ``group_instance_id`` that comes back (with
  a new member id) while the group is stable and its subscription is unchanged takes
  over its old assignment without a rebalance; the old member id is fenced.

**Client-assigned groups** (Kafka's own clients, through the Kafka listener) follow the
classic protocol to the letter, since their assignor runs in the group leader: a join
carries a ``protocol_type`` ("consumer") and the member's protocols as (name, opaque
metadata) pairs; once every member rejoined, the coordinator picks the protocol all
members support (the one most members prefer), keeps or elects a leader and answers
the leader with every member's metadata (state ``CompletingRebalance``); the leader's
SyncGroup carries each member's assignment (opaque bytes), which the others' SyncGroups
receive (``Stable``). A first join that asks for it (JoinGroup v4+, KIP-394) gets its
member id back with MEMBER_ID_REQUIRED and must rejoin with it: until then the id is
*pending* (it expires after the session timeout, and a rebalance waits for it). A
group is raystream-assigned (``protocol_type`` None) or client-assigned, never both:
a member of the other kind is refused with InconsistentGroupProtocolError while the
group has members.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raystream.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from raystream.groups.assignors import MemberSubscription, choose_protocol, get_assignor
from raystream.groups.consumer_protocol import CONSUMER_PROTOCOL_TYPE, consumer_assignment
from raystream.types import TopicPartition

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
"""Client-assigned groups only: waiting for the leader's SyncGroup."""
STABLE = "Stable"

NO_GENERATION = -1
"""The generation of a commit from outside the group (admin, or a consumer with
``assign()``): accepted only while the group has no members."""


@dataclass(slots=True)
class Member:
    """A member as the coordinator knows it.

    ``joined`` says whether the member has (re)joined during the rebalance in progress;
    ``owned`` / ``owned_generation`` are what it reported holding when it joined (the
    sticky assignors keep them where balance allows). ``actor_id`` is the Ray actor the
    member runs in, if any: the coordinator can ask Ray whether it crashed rather than
    wait out the session.
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    topics: frozenset[str]
    strategies: tuple[str, ...]
    session_timeout_s: float
    rebalance_timeout_s: float
    last_seen: float
    owned: tuple[TopicPartition, ...] = ()
    owned_generation: int = NO_GENERATION
    assignment: list[TopicPartition] = field(default_factory=list)
    joined: bool = True
    actor_id: str | None = None
    protocols: tuple[tuple[str, bytes], ...] = ()
    """Client-assigned groups: the member's (protocol name, metadata) pairs, best first."""
    assignment_bytes: bytes = b""
    """Client-assigned groups: what the leader assigned it, opaque."""
    client_host: str = ""

    def metadata(self, protocol: str | None) -> bytes:
        """The member's metadata for ``protocol`` (b"" if it has none)."""
        return next((data for name, data in self.protocols if name == protocol), b"")

    def to_dict(self) -> dict[str, Any]:
        """The durable part (what a restarted coordinator needs), JSON-ready."""
        classic = {
            "protocols": [[name, _b64(data)] for name, data in self.protocols],
            "assignment_bytes": _b64(self.assignment_bytes),
            "client_host": self.client_host,
        }
        return classic | {
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "client_id": self.client_id,
            "topics": sorted(self.topics),
            "strategies": list(self.strategies),
            "session_timeout_s": self.session_timeout_s,
            "rebalance_timeout_s": self.rebalance_timeout_s,
            "assignment": [list(tp) for tp in self.assignment],
            "actor_id": self.actor_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], now: float) -> Member:
        """A member restored by a restarted coordinator; its session restarts at ``now``."""
        assignment = [TopicPartition(t, p) for t, p in data["assignment"]]
        return cls(
            member_id=data["member_id"],
            group_instance_id=data["group_instance_id"],
            client_id=data["client_id"],
            topics=frozenset(data["topics"]),
            strategies=tuple(data["strategies"]),
            session_timeout_s=data["session_timeout_s"],
            rebalance_timeout_s=data["rebalance_timeout_s"],
            last_seen=now,
            assignment=assignment,
            actor_id=data.get("actor_id"),
            protocols=tuple(
                (name, base64.b64decode(data)) for name, data in data.get("protocols", ())
            ),
            assignment_bytes=base64.b64decode(data.get("assignment_bytes", "")),
            client_host=data.get("client_host", ""),
        )


@dataclass(frozen=True, slots=True)
class JoinOutcome:
    """What a join did: the member's id and whether it must wait for the rebalance."""

    member_id: str
    wait: bool


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """One member as the leader of a client-assigned group sees it in a join answer."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class Joined:
    """A client-assigned member's join answer (Kafka's JoinGroup response): the
    generation, the chosen protocol, the leader and, for the leader only, every
    member with its metadata for that protocol."""

    member_id: str
    generation: int
    protocol_type: str | None
    protocol: str | None
    leader: str | None
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ClassicJoinOutcome:
    """What a client-assigned join did: the member's id, and either its answer now
    (``joined``) or None (wait for the rebalance)."""

    member_id: str
    joined: Joined | None


@dataclass(frozen=True, slots=True)
class Assigned:
    """A member's answer once a rebalance completed (or a static member came back)."""

    member_id: str
    generation: int
    protocol: str | None
    leader: str | None
    assignment: list[TopicPartition]


class Group:
    """Membership, generation and assignment of one consumer group.

    Not thread-safe: the coordinator calls it from its event loop only.
    """

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.generation = 0
        self.state = EMPTY
        self.protocol: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self.rebalance_deadline = 0.0
        self.partition_counts: dict[str, int] = {}
        """Partition counts of the subscribed topics at the last assignment."""
        self.protocol_type: str | None = None
        """None for a raystream-assigned group; the clients' type ("consumer") for a
        client-assigned one (kept while the group is empty, for listings)."""
        self.pending: dict[str, float] = {}
        """Client-assigned groups: member ids handed out with MEMBER_ID_REQUIRED and not
        yet used, with the time each expires."""

    # ---------------------------------------------------------------- requests

    def join(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        topics: Iterable[str],
        strategies: Iterable[str],
        owned: Iterable[TopicPartition],
        owned_generation: int,
        session_timeout_s: float,
        rebalance_timeout_s: float,
        now: float,
        actor_id: str | None = None,
    ) -> JoinOutcome:
        """Admit a (re)joining member; the outcome says whether to wait for the rebalance.

        ``member_id`` is "" for a member joining for the first time (or after it was
        evicted); the answer gives it its id. ``actor_id``: the Ray actor the member
        runs in, if any (see :meth:`silent_actors`).

        Raises:
            UnknownMemberIdError: ``member_id`` is not "" and not a member (evicted).
            FencedInstanceIdError: ``member_id`` lost its instance id to a newer member.
            InconsistentGroupProtocolError: no strategy in common with the members.
        """
        topics = frozenset(topics)
        strategies = tuple(strategies)
        owned = tuple(TopicPartition(*tp) for tp in owned)
        self._check_kind(None)
        self._check_protocol(member_id, strategies)
        static = self._static_member(group_instance_id)
        if member_id and member_id not in self.members:
            if static is not None:
                raise FencedInstanceIdError(
                    f"member {member_id!r} of group {self.group_id!r} was replaced by "
                    f"{static.member_id!r} with group_instance_id {group_instance_id!r}"
                )
            raise UnknownMemberIdError(
                f"group {self.group_id!r} has no member {member_id!r} (expired or left); "
                "rejoin as a new member"
            )
        if not member_id and static is not None:
            return self._static_rejoin(static, client_id, topics, strategies, now, actor_id)
        if not member_id:
            member_id = _new_member_id(client_id)
            self.protocol_type = None
            self.members[member_id] = Member(
                member_id,
                group_instance_id,
                client_id,
                topics,
                strategies,
                session_timeout_s,
                rebalance_timeout_s,
                now,
                owned,
                owned_generation,
                actor_id=actor_id,
            )
            if self.state != PREPARING_REBALANCE:
                self._prepare_rebalance(now, joining=member_id)
            return JoinOutcome(member_id, wait=True)
        member = self.members[member_id]
        changed = (
            member.topics != topics
            or member.strategies != strategies
            or set(owned) != set(member.owned)  # e.g. it revoked partitions (cooperative)
        )
        member.topics, member.strategies = topics, strategies
        member.owned, member.owned_generation = owned, owned_generation
        member.session_timeout_s, member.rebalance_timeout_s = (
            session_timeout_s,
            rebalance_timeout_s,
        )
        member.last_seen = now
        member.joined = True
        member.actor_id = actor_id
        if self.state == STABLE and not changed:
            return JoinOutcome(member_id, wait=False)  # nothing new: its assignment stands
        if self.state != PREPARING_REBALANCE:
            self._prepare_rebalance(now, joining=member_id)
        return JoinOutcome(member_id, wait=True)

    def join_classic(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_s: float,
        rebalance_timeout_s: float,
        now: float,
        require_known_member_id: bool = False,
    ) -> ClassicJoinOutcome:
        """Admit a (re)joining member of a client-assigned group (Kafka's JoinGroup).

        ``protocols`` are the member's (name, metadata) pairs, best first. A member
        joining for the first time (``member_id`` "") without a ``group_instance_id``
        and with ``require_known_member_id`` gets MemberIdRequiredError carrying its
        new id. A known member rejoining with unchanged protocols while the group is
        stable (or completing) is answered at once with the current generation, unless
        it is the leader, whose rejoin means its view of the topics changed; anything
        else starts (or joins) a rebalance, and the answer waits for it.

        Raises:
            MemberIdRequiredError: rejoin with the id in ``error.member_id``.
            UnknownMemberIdError: ``member_id`` is not "" and not a member (evicted).
            FencedInstanceIdError: the instance id belongs to another member id.
            InconsistentGroupProtocolError: the group is raystream-assigned or of
                another protocol type, or no protocol is shared with the members.
        """
        protocols = tuple((name, bytes(data)) for name, data in protocols)
        names = tuple(name for name, _ in protocols)
        if not protocol_type or not protocols:
            raise InconsistentGroupProtocolError(
                f"a join of group {self.group_id!r} needs a protocol type and at least one "
                f"protocol (got {protocol_type!r} and {list(names)})"
            )
        self._check_kind(protocol_type)
        self._check_shared(member_id, names)
        static = self._static_member(group_instance_id)
        if static is not None and member_id and member_id != static.member_id:
            raise FencedInstanceIdError(
                f"member {member_id!r} of group {self.group_id!r} was replaced by "
                f"{static.member_id!r} with group_instance_id {group_instance_id!r}"
            )
        if not member_id and static is not None:
            return self._static_rejoin_classic(static, client_id, protocols, now)
        if not member_id and group_instance_id is None and require_known_member_id:
            member_id = _new_member_id(client_id)
            self.pending[member_id] = now + session_timeout_s
            raise MemberIdRequiredError(
                f"group {self.group_id!r}: rejoin with member id {member_id!r}", member_id
            )
        if not member_id or self.pending.pop(member_id, None) is not None:
            member_id = member_id or _new_member_id(client_id)
            if not self.members:
                self.protocol_type = protocol_type
            self.members[member_id] = Member(
                member_id,
                group_instance_id,
                client_id,
                frozenset(),
                names,
                session_timeout_s,
                rebalance_timeout_s,
                now,
                protocols=protocols,
                client_host=client_host,
            )
            if self.state != PREPARING_REBALANCE:
                self._prepare_rebalance(now, joining=member_id)
            return ClassicJoinOutcome(member_id, None)
        member = self._member(member_id)
        changed = member.protocols != protocols
        member.protocols, member.strategies = protocols, names
        member.session_timeout_s, member.rebalance_timeout_s = (
            session_timeout_s,
            rebalance_timeout_s,
        )
        member.client_id, member.client_host = client_id, client_host
        member.last_seen, member.joined = now, True
        if self.state == COMPLETING_REBALANCE and not changed:
            return ClassicJoinOutcome(member_id, self.joined(member_id))
        if self.state == STABLE and not changed and member_id != self.leader:
            return ClassicJoinOutcome(member_id, self.joined(member_id))
        if self.state != PREPARING_REBALANCE:
            self._prepare_rebalance(now, joining=member_id)
        return ClassicJoinOutcome(member_id, None)

    def sync(
        self,
        member_id: str,
        generation: int,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol: str | None,
        assignments: Mapping[str, bytes],
        now: float,
    ) -> bytes | None:
        """A client-assigned member's SyncGroup: its assignment, or None to wait for
        the leader's. The leader's sync (in ``CompletingRebalance``) hands every member
        its bytes from ``assignments`` (b"" for a member it left out) and makes the
        group stable. ``protocol_type`` and ``protocol`` (SyncGroup v5+; None before)
        must be the group's.

        Raises:
            UnknownMemberIdError, FencedInstanceIdError: not (or no longer) a member.
            IllegalGenerationError: ``generation`` is not the current one (rejoin).
            RebalanceInProgressError: a rebalance started since the join (rejoin).
            InconsistentGroupProtocolError: not the group's protocol, or the group is
                raystream-assigned.
        """
        member = self._member(member_id, group_instance_id)
        member.last_seen = now
        if self.protocol_type is None:
            raise InconsistentGroupProtocolError(
                f"group {self.group_id!r} is assigned by raystream; it has no SyncGroup"
            )
        if generation != self.generation:
            raise IllegalGenerationError(
                f"generation {generation} of group {self.group_id!r} is stale "
                f"(current: {self.generation}); rejoin"
            )
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
            protocol is not None and protocol != self.protocol
        ):
            raise InconsistentGroupProtocolError(
                f"group {self.group_id!r} uses {self.protocol_type}/{self.protocol}, "
                f"not {protocol_type}/{protocol}"
            )
        if self.state == PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"group {self.group_id!r} is rebalancing; rejoin")
        if self.state == COMPLETING_REBALANCE:
            if member_id != self.leader:
                return None
            for other in self.members.values():
                other.assignment_bytes = bytes(assignments.get(other.member_id, b""))
                other.assignment = (
                    consumer_assignment(other.assignment_bytes)
                    if self.protocol_type == CONSUMER_PROTOCOL_TYPE
                    else []
                )
                other.last_seen = now
            self.state = STABLE
        return member.assignment_bytes

    def joined(self, member_id: str) -> Joined:
        """A client-assigned member's join answer in the current generation (the leader's
        lists every member with its metadata for the chosen protocol).

        Raises:
            UnknownMemberIdError: the member is gone (it did not rejoin in time).
        """
        self._member(member_id)
        members = ()
        if member_id == self.leader:
            members = tuple(
                JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol))
                for m in self.members.values()
            )
        return Joined(
            member_id, self.generation, self.protocol_type, self.protocol, self.leader, members
        )

    def heartbeat(
        self, member_id: str, generation: int, now: float, group_instance_id: str | None = None
    ) -> None:
        """Keep a member's session alive.

        Raises:
            UnknownMemberIdError: the member was evicted or left.
            FencedInstanceIdError: ``group_instance_id`` belongs to another member now.
            IllegalGenerationError: the member is a generation behind (rejoin).
            RebalanceInProgressError: the group is rebalancing (rejoin).
        """
        member = self._member(member_id, group_instance_id)
        member.last_seen = now
        if self.state == PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"group {self.group_id!r} is rebalancing; rejoin")
        if generation != self.generation:
            raise IllegalGenerationError(
                f"generation {generation} of group {self.group_id!r} is stale "
                f"(current: {self.generation}); rejoin"
            )

    def leave(self, member_id: str, now: float, group_instance_id: str | None = None) -> str:
        """Remove a member that is closing; the others rebalance. Returns its id.

        A static member may leave by its ``group_instance_id`` alone (``member_id``
        ""), as Kafka's LeaveGroup v3+ allows; a pending member id (see
        :meth:`join_classic`) just stops being pending.

        Raises:
            UnknownMemberIdError: no such member.
            FencedInstanceIdError: ``group_instance_id`` belongs to another member id.
        """
        if member_id and self.pending.pop(member_id, None) is not None:
            return member_id
        if not member_id and group_instance_id is not None:
            static = self._static_member(group_instance_id)
            if static is None:
                raise UnknownMemberIdError(
                    f"group {self.group_id!r} has no member with group_instance_id "
                    f"{group_instance_id!r}"
                )
            member_id = static.member_id
        self._member(member_id, group_instance_id)
        self._remove([member_id], now)
        return member_id

    def silent_actors(self, now: float, after_s: float) -> dict[str, str]:
        """Members in Ray actors not heard from for ``after_s``: member id -> actor id.

        A live member heartbeats every few hundred milliseconds; one that has been
        silent longer may have crashed, which Ray can confirm long before its session
        times out. The coordinator asks, and calls :meth:`evict` for the crashed.
        Static members are left out: their partitions wait for them (the point of a
        ``group_instance_id``) until the session times out.
        """
        return {
            m.member_id: m.actor_id
            for m in self.members.values()
            if m.actor_id is not None
            and m.group_instance_id is None
            and now - m.last_seen > after_s
        }

    def evict(self, member_ids: Iterable[str], now: float) -> list[str]:
        """Remove members known to have crashed; returns those that were members."""
        gone = [member_id for member_id in member_ids if member_id in self.members]
        if gone:
            self._remove(gone, now)
        return gone

    def expire(self, now: float) -> list[str]:
        """Remove members whose session timed out; returns their ids."""
        for member_id, deadline in list(self.pending.items()):
            if now > deadline:
                del self.pending[member_id]
        expired = [
            m.member_id for m in self.members.values() if now - m.last_seen > m.session_timeout_s
        ]
        if expired:
            self._remove(expired, now)
        return expired

    def check_commit(self, member_id: str, generation: int) -> None:
        """Refuse an offset commit that must not land.

        A member commits with its generation; outsiders (admin, a consumer using
        ``assign()``) commit with :data:`NO_GENERATION`, which only an empty group
        accepts.

        Raises:
            CommitFailedError: the member is unknown or its generation is stale, or an
                outsider commits while the group has members; the message says which.
        """
        if generation == NO_GENERATION and not member_id:
            if self.members:
                raise CommitFailedError(
                    f"group {self.group_id!r} has active members {sorted(self.members)}; "
                    "only they may commit its offsets"
                )
            return
        if member_id not in self.members:
            raise CommitFailedError(
                f"commit refused: member {member_id!r} is no longer in group "
                f"{self.group_id!r} (its partitions were reassigned)"
            )
        if generation != self.generation:
            raise CommitFailedError(
                f"commit refused: generation {generation} of group {self.group_id!r} is "
                f"stale (current: {self.generation}); the partitions may have moved"
            )
        if self.state == COMPLETING_REBALANCE:
            raise RebalanceInProgressError(
                f"commit refused: group {self.group_id!r} is waiting for its leader's "
                "assignment; commit after the SyncGroup"
            )

    def check_inactive(self, what: str) -> None:
        """Refuse ``what`` while the group has members (Kafka's rule for resets).

        Raises:
            NonEmptyGroupError: naming the members.
        """
        if self.members:
            raise NonEmptyGroupError(
                f"{what}: group {self.group_id!r} has active members "
                f"{sorted(self.members)}; stop them first"
            )

    # --------------------------------------------------------------- rebalance

    def subscribed_topics(self) -> set[str]:
        """Every topic some member subscribes to."""
        return set().union(*(m.topics for m in self.members.values()))

    def ready(self, now: float) -> bool:
        """Whether a rebalance in progress can complete now."""
        return self.state == PREPARING_REBALANCE and (
            (all(m.joined for m in self.members.values()) and not self.pending)
            or now >= self.rebalance_deadline
        )

    def complete(self, partition_counts: Mapping[str, int], now: float) -> list[str]:
        """Finish the rebalance: drop members that did not rejoin, assign, bump generation.

        Returns the ids of the members dropped for not rejoining in time.
        """
        late = [m.member_id for m in self.members.values() if not m.joined]
        for member_id in late:
            del self.members[member_id]
        self.generation += 1
        self.partition_counts = dict(partition_counts)
        if not self.members:
            self.state, self.protocol, self.leader = EMPTY, None, None
            return late
        if self.protocol_type is not None:
            self._complete_classic(now)
            return late
        members = sorted(self.members.values(), key=lambda m: m.member_id)
        self.protocol = choose_protocol([m.strategies for m in members])
        subscriptions = [
            MemberSubscription(
                m.member_id, m.topics, m.owned, m.owned_generation, m.group_instance_id
            )
            for m in members
        ]
        counts = {t: n for t, n in partition_counts.items() if t in self.subscribed_topics()}
        assignment = get_assignor(self.protocol).assign(counts, subscriptions)
        for member in members:
            member.assignment = assignment[member.member_id]
            member.last_seen = now
        self.leader = members[0].member_id
        self.state = STABLE
        return late

    def _complete_classic(self, now: float) -> None:
        """Pick the protocol and the leader; the leader's SyncGroup assigns."""
        self.pending.clear()  # those that did not rejoin in time start over
        members = list(self.members.values())
        self.protocol = _vote([m.strategies for m in members])
        if self.leader not in self.members:
            self.leader = members[0].member_id
        for member in members:
            member.assignment_bytes, member.assignment = b"", []
            member.last_seen = now
        self.state = COMPLETING_REBALANCE

    def assigned(self, member_id: str) -> Assigned:
        """A member's answer in the current generation.

        Raises:
            UnknownMemberIdError: the member is gone (it did not rejoin in time).
        """
        member = self._member(member_id)
        return Assigned(
            member_id, self.generation, self.protocol, self.leader, list(member.assignment)
        )

    def partitions_changed(self, partition_counts: Mapping[str, int], now: float) -> bool:
        """Start a rebalance if a subscribed topic's partition count changed."""
        if self.state != STABLE:
            return False
        relevant = {t: partition_counts.get(t, 0) for t in self.subscribed_topics()}
        known = {t: self.partition_counts.get(t, 0) for t in relevant}
        if relevant == known:
            return False
        self._prepare_rebalance(now, joining=None)
        return True

    # ----------------------------------------------------------------- snapshot

    def to_dict(self) -> dict[str, Any]:
        """The durable state (written to ``__consumer_offsets`` after each rebalance)."""
        return {
            "generation": self.generation,
            "protocol": self.protocol,
            "leader": self.leader,
            "partition_counts": self.partition_counts,
            "members": [m.to_dict() for m in self.members.values()],
            "protocol_type": self.protocol_type,
        }

    @classmethod
    def from_dict(cls, group_id: str, data: Mapping[str, Any], now: float) -> Group:
        """A group as a restarted coordinator finds it: stable, every session fresh."""
        group = cls(group_id)
        group.generation = data["generation"]
        group.protocol = data["protocol"]
        group.leader = data["leader"]
        group.partition_counts = dict(data["partition_counts"])
        group.protocol_type = data.get("protocol_type")
        for item in data["members"]:
            member = Member.from_dict(item, now)
            group.members[member.member_id] = member
        group.state = STABLE if group.members else EMPTY
        return group

    def describe(self) -> dict[str, Any]:
        """State, generation, protocol and each member's assignment (for a
        client-assigned group also each member's metadata and assignment bytes; the
        partitions are read out of the bytes of a "consumer" group)."""
        return {
            "state": self.state,
            "generation": self.generation,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "leader": self.leader,
            "members": {
                m.member_id: {
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "assignment": list(m.assignment),
                    "metadata": m.metadata(self.protocol),
                    "assignment_bytes": m.assignment_bytes,
                }
                for m in self.members.values()
            },
        }

    # ------------------------------------------------------------------ helpers

    def _member(self, member_id: str, group_instance_id: str | None = None) -> Member:
        static = self._static_member(group_instance_id)
        if static is not None and static.member_id != member_id:
            raise FencedInstanceIdError(
                f"member {member_id!r} of group {self.group_id!r} was replaced by "
                f"{static.member_id!r} with group_instance_id {group_instance_id!r}"
            )
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(
                f"group {self.group_id!r} has no member {member_id!r} (expired or left); "
                "rejoin as a new member"
            )
        return member

    def _static_member(self, group_instance_id: str | None) -> Member | None:
        if group_instance_id is None:
            return None
        for member in self.members.values():
            if member.group_instance_id == group_instance_id:
                return member
        return None

    def _static_rejoin(
        self,
        old: Member,
        client_id: str,
        topics: frozenset[str],
        strategies: tuple[str, ...],
        now: float,
        actor_id: str | None,
    ) -> JoinOutcome:
        """A static member is back with a new id: fence the old id, keep its place."""
        del self.members[old.member_id]
        member_id = _new_member_id(client_id)
        old.member_id, old.client_id, old.last_seen = member_id, client_id, now
        old.actor_id = actor_id
        self.members[member_id] = old
        if self.leader not in self.members:
            self.leader = member_id
        if self.state == STABLE and old.topics == topics and old.strategies == strategies:
            return JoinOutcome(member_id, wait=False)
        old.topics, old.strategies, old.joined = topics, strategies, True
        if self.state != PREPARING_REBALANCE:
            self._prepare_rebalance(now, joining=member_id)
        return JoinOutcome(member_id, wait=True)

    def _static_rejoin_classic(
        self, old: Member, client_id: str, protocols: tuple[tuple[str, bytes], ...], now: float
    ) -> ClassicJoinOutcome:
        """A static member of a client-assigned group is back with a new id: fence the
        old id and keep its place. Unchanged protocols in a stable group keep its
        assignment without a rebalance (its SyncGroup answers the old bytes), unless
        it leads the group: then the group rebalances so the new leader instance learns
        the members."""
        del self.members[old.member_id]
        member_id = _new_member_id(client_id)
        was_leader = self.leader == old.member_id
        old.member_id, old.client_id, old.last_seen = member_id, client_id, now
        self.members[member_id] = old
        if was_leader:
            self.leader = member_id
        if self.state == STABLE and old.protocols == protocols and not was_leader:
            return ClassicJoinOutcome(member_id, self.joined(member_id))
        old.protocols, old.strategies = protocols, tuple(name for name, _ in protocols)
        old.joined = True
        if self.state != PREPARING_REBALANCE:
            self._prepare_rebalance(now, joining=member_id)
        return ClassicJoinOutcome(member_id, None)

    def _check_kind(self, protocol_type: str | None) -> None:
        """Refuse a member of the other kind (raystream- or client-assigned, or another
        protocol type) while the group has members."""
        if not self.members or self.protocol_type == protocol_type:
            return

        def kind(value: str | None) -> str:
            return "assigned by raystream" if value is None else f"of protocol type {value!r}"

        raise InconsistentGroupProtocolError(
            f"group {self.group_id!r} is {kind(self.protocol_type)}; a member "
            f"{kind(protocol_type)} cannot join it (use another group id)"
        )

    def _check_protocol(self, member_id: str, strategies: tuple[str, ...]) -> None:
        if not strategies:
            raise InvalidRequestError("a member needs at least one assignment strategy")
        for name in strategies:
            try:
                get_assignor(name)
            except ValueError as error:
                raise InvalidRequestError(str(error)) from None
        self._check_shared(member_id, strategies)

    def _check_shared(self, member_id: str, strategies: tuple[str, ...]) -> None:
        others = [m.strategies for m in self.members.values() if m.member_id != member_id]
        if others and not set(strategies).intersection(*map(set, others)):
            raise InconsistentGroupProtocolError(
                f"assignment strategies {list(strategies)} share none with the other "
                f"members of group {self.group_id!r} ({sorted(set().union(*others))})"
            )

    def _prepare_rebalance(self, now: float, joining: str | None) -> None:
        self.state = PREPARING_REBALANCE
        for member in self.members.values():
            member.joined = member.member_id == joining
        self.rebalance_deadline = now + max(
            (m.rebalance_timeout_s for m in self.members.values()), default=0.0
        )

    def _remove(self, member_ids: list[str], now: float) -> None:
        for member_id in member_ids:
            del self.members[member_id]
        if self.state == PREPARING_REBALANCE:
            return  # the rebalance in progress goes on without them
        if self.members:
            self._prepare_rebalance(now, joining=None)
        else:
            self.generation += 1  # stale commits of the departed are refused
            self.state, self.protocol, self.leader = EMPTY, None, None


def _new_member_id(client_id: str) -> str:
    return f"{client_id or 'consumer'}-{uuid.uuid4().hex[:12]}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _vote(preferences: Sequence[tuple[str, ...]]) -> str:
    """The protocol of a client-assigned group, as Kafka picks it: among the protocols
    every member supports, the one most members list first of those (ties: the first
    member's order). Example: ``[("cooperative-sticky", "range"), ("range",)]`` ->
    "range"."""
    shared = set(preferences[0]).intersection(*map(set, preferences[1:]))
    votes = {name: 0 for name in preferences[0] if name in shared}
    for names in preferences:
        votes[next(name for name in names if name in shared)] += 1
    return max(votes, key=votes.__getitem__)
