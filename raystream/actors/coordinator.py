"""The group coordinator actor: consumer-group membership and committed offsets.

One per cluster, detached and named, started by the controller the first time a client
asks for it (``find_coordinator``), restarted by Ray when it dies. A thin async shell:
:class:`~raystream.groups.group.Group` holds the rules, the internal topic
``__consumer_offsets`` holds the state (written with ``acks=all`` before a commit is
acknowledged), and a restarted coordinator rebuilds every group by replaying that
topic, so committed offsets and stable memberships survive it.

Transactional producers write offsets into ``__consumer_offsets`` themselves, as
records of their transaction (exactly-once consume-transform-produce). The coordinator
reads its partitions read_committed (the load replays up to the last stable offset,
and the memberships past it, which are never transactional), and reads the group's
partition on from where it stopped before it answers for a group's offsets (an offset
fetch, a describe), rather than being told after every transaction: a transaction
costs the coordinator nothing, and a fetch one read of what was appended since. A fetch
that asks for stable offsets is answered UnstableOffsetCommitError (retried by the
client) while a transaction is open on the group's partition, so a new owner of a
partition never starts from an offset a committing transaction is about to replace.
Before a producer adds a consumer's offsets to its transaction it asks
``check_txn_offsets`` whether that consumer is still a member of the current
generation (KIP-447), so a zombie's offsets never enter a transaction.

A join is a call that stays open until the group's rebalance completes (every member
rejoined, or the rebalance timeout passed), then answers with the member's assignment.
Kafka clients' groups (client-assigned, the classic protocol: see
:class:`~raystream.groups.group.Group`) answer a join with the generation and, to the
leader, the members; a member's SyncGroup then stays open until the leader's brings the
assignments, and is answered RebalanceInProgressError if a rebalance starts first.
A background tick expires sessions, completes timed-out rebalances, and starts a
rebalance when a subscribed topic gains partitions. Every request (the typed messages
of :mod:`raystream.requests`: joins, heartbeats, leaves, commits, offset fetches, the
KIP-447 check, admin) goes through the coordinator's
:class:`~raystream.dispatch.Dispatcher` and is answered with a
:class:`~raystream.protocol.Result` (an error code, never an exception), so bad input
never kills the actor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any

import ray

from raystream.actors.direct import DirectPath
from raystream.actors.liveness import is_down
from raystream.actors.partition_client import EARLIEST_TIMESTAMP, PartitionClient, RetriedLoad
from raystream.dispatch import RAY_CONTEXT, Dispatcher, RequestContext
from raystream.errors import (
    GroupIdNotFoundError,
    MemberIdRequiredError,
    OffsetOutOfRangeError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    UnstableOffsetCommitError,
)
from raystream.groups.group import PREPARING_REBALANCE, STABLE, Group
from raystream.groups.offsets_topic import (
    OFFSETS_TOPIC,
    GroupStore,
    OffsetAndMetadata,
    deletion_records,
    group_record,
    offset_records,
    partition_for,
)
from raystream.protocol import Response, Result, failure
from raystream.records import batch_from_table
from raystream.requests import (
    GROUP_COORDINATOR_WRITER,
    DeleteGroupRequest,
    DescribeGroupRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    ResetOffsetsRequest,
    SyncGroupRequest,
    TxnOffsetCheckRequest,
)
from raystream.types import TopicPartition
from raystream.wire import DirectListener, Endpoint

logger = logging.getLogger(__name__)

COORDINATOR_NAME = "raystream-group-coordinator"
TICK_S = 0.1
CRASH_CHECK_AFTER_S = 0.5
"""Silence after which a member in a Ray actor is looked up in Ray's actor table."""
METADATA_CHECK_S = 2.0
"""How often stable groups look for new partitions of their topics."""
WRITE_TIMEOUT_S = 30.0
"""How long a write to ``__consumer_offsets`` may take, retries included."""


class GroupCoordinator:
    """Kafka's group coordinator for every group of one raystream cluster.

    Args:
        namespace: the cluster's namespace (to find the controller).
        direct: the broker's direct path (``listener.host`` and its TLS, see
            :class:`DirectPath`).
        partitions: how many partitions ``__consumer_offsets`` has.
    """

    def __init__(self, namespace: str, direct: DirectListener, partitions: int) -> None:
        self._namespace = namespace
        self._dispatcher = Dispatcher(
            "the group coordinator",
            {
                JoinGroupRequest: self._join_group,
                SyncGroupRequest: self._sync_group,
                HeartbeatRequest: self._heartbeat,
                LeaveGroupRequest: self._leave_group,
                OffsetCommitRequest: self._commit_offsets,
                OffsetFetchRequest: self._fetch_offsets,
                TxnOffsetCheckRequest: self._check_txn_offsets,
                ResetOffsetsRequest: self._reset_offsets,
                ListGroupsRequest: self._list_groups,
                DescribeGroupRequest: self._describe_group,
                DeleteGroupRequest: self._delete_group,
            },
        )
        self._direct = DirectPath(self.handle, direct)
        self._partitions = partitions
        self._store = GroupStore()
        self._positions = [0] * partitions
        """Where reading each partition of ``__consumer_offsets`` goes on from."""
        self._reading = [asyncio.Lock() for _ in range(partitions)]
        self._writing: dict[str, asyncio.Lock] = {}
        """One per group: a group's records are appended one at a time, so that a
        write retried after a lost answer never lands after a newer one."""
        self._client = PartitionClient(namespace)
        self._loading = RetriedLoad(
            self._load, f"the group coordinator could not load {OFFSETS_TOPIC}"
        )
        self._waiters: dict[str, dict[str, asyncio.Future]] = {}
        self._syncs: dict[str, dict[str, asyncio.Future]] = {}
        """Client-assigned groups' SyncGroups waiting for the leader's, by member."""
        self._locks: dict[str, asyncio.Lock] = {}
        self._tick_task: asyncio.Task | None = None

    async def handle(self, request: Any, context: RequestContext = RAY_CONTEXT) -> Response:
        """Answer a group request (:mod:`raystream.requests`) through the coordinator's
        dispatcher, over Ray and over the direct path alike; the groups are loaded
        from ``__consumer_offsets`` before the first one is handled."""
        return await self._dispatcher.dispatch(request, context)

    # ------------------------------------------------------------------ startup

    async def _ready(self) -> None:
        """Load the groups from ``__consumer_offsets`` once, before the first request.

        A load that failed (its partitions unreachable for too long) is tried again by
        the next request.

        Raises:
            CoordinatorNotAvailableError: the load failed (retriable).
        """
        await self._loading.wait()

    async def _load(self) -> None:
        await asyncio.gather(
            *(self._read_committed(p, loading=True) for p in range(self._partitions))
        )
        if self._tick_task is None:
            self._tick_task = asyncio.ensure_future(self._tick_loop())
        logger.info("group coordinator loaded %d groups", len(self._store.groups))

    async def _read_committed(self, partition: int, loading: bool = False) -> bool:
        """Read a partition of ``__consumer_offsets`` on, read_committed, up to its last
        stable offset. Returns whether it is stable (no transaction open on it).

        At load every record is applied; later only offsets (see
        :meth:`GroupStore.replay <raystream.groups.offsets_topic.GroupStore.replay>`).
        A record that does not decode is skipped and logged.

        Raises:
            RaystreamTimeoutError: the partition could not be read for too long.
        """
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        async with self._reading[partition]:
            while True:
                try:
                    answer = await self._client.fetch(
                        tp, self._positions[partition], "read_committed"
                    )
                except OffsetOutOfRangeError:  # removed below us: go on from the start
                    self._positions[partition] = await self._client.list_offset(
                        tp, EARLIEST_TIMESTAMP
                    )
                    continue
                table, after = answer.decode()
                if table.num_rows:
                    skipped = self._store.replay(table, time.monotonic(), offsets_only=not loading)
                    _report(partition, skipped)
                position = max(after, self._positions[partition])
                self._positions[partition] = position
                if position >= answer.last_stable_offset:
                    stable = answer.last_stable_offset >= answer.high_watermark
                    if loading and not stable:
                        await self._read_membership(tp, position, answer.high_watermark)
                    return stable

    async def _read_membership(self, tp: TopicPartition, start: int, end: int) -> None:
        """At load, apply the membership records between the last stable offset and the
        high watermark: a transaction open on the partition holds read_committed reading
        back, but memberships are never part of one (the coordinator writes them
        itself), and a later catch-up reads offsets only. Without this a restarted
        coordinator would forget the rebalances that followed the transaction's start."""
        position = start
        try:
            while position < end:
                answer = await self._client.fetch(tp, position, "read_uncommitted")
                table, after = answer.decode()
                if table.num_rows:
                    skipped = self._store.replay(table, time.monotonic(), membership_only=True)
                    _report(tp.partition, skipped)
                if after <= position:
                    return
                position = after
        except Exception as error:  # best effort: members of a forgotten rebalance rejoin
            logger.warning("memberships past the last stable offset not loaded: %s", error)

    async def _check_txn_offsets(self, request: TxnOffsetCheckRequest) -> Result:
        """Whether a member may add offsets of the group to a transaction (KIP-447).

        Raises:
            CommitFailedError: an evicted member or a stale generation.
        """
        await self._ready()
        self._store.groups.setdefault(request.group_id, Group(request.group_id)).check_commit(
            request.member_id, request.generation_id
        )
        return Result()

    # ------------------------------------------------------------------ members

    async def _join_group(self, request: JoinGroupRequest) -> Result:
        """Join (or rejoin) a group; answers once the rebalance gives an assignment.

        ``actor_id``: the Ray actor the member runs in, if any; a crash of that actor
        evicts the member as soon as Ray reports it, not a session timeout later.
        The answer's value is an :class:`~raystream.groups.group.Assigned`.
        """
        await self._ready()
        if request.protocol_type is not None:
            return await self._join_classic(request)
        group_id = request.group_id
        group = self._store.groups.setdefault(group_id, Group(group_id))
        old_member = request.member_id
        outcome = group.join(
            request.member_id,
            request.group_instance_id,
            request.client_id,
            list(request.topics),
            list(request.protocols),
            [tuple(p) for p in request.owned_partitions],
            request.owned_generation,
            request.session_timeout_ms / 1000,
            request.rebalance_timeout_ms / 1000,
            time.monotonic(),
            request.actor_id,
        )
        if not outcome.wait:
            if outcome.member_id != old_member:  # a static member came back
                await self._write(group_id, group_record(group))
            return Result(value=group.assigned(outcome.member_id))
        return await self._wait_for_rebalance(group, outcome.member_id)

    async def _join_classic(self, request: JoinGroupRequest) -> Result:
        """A Kafka client's join (client-assigned group); the answer's value is a
        :class:`~raystream.groups.group.Joined`, at once or after the rebalance."""
        group_id = request.group_id
        group = self._store.groups.setdefault(group_id, Group(group_id))
        try:
            outcome = group.join_classic(
                request.member_id,
                request.group_instance_id,
                request.client_id,
                request.client_host,
                request.protocol_type,
                list(zip(request.protocols, request.protocol_metadata, strict=True)),
                request.session_timeout_ms / 1000,
                request.rebalance_timeout_ms / 1000,
                time.monotonic(),
                request.require_known_member_id,
            )
        except MemberIdRequiredError as error:
            return failure(error, value=error.member_id)
        self._settle_syncs(group)
        if outcome.joined is not None:
            if outcome.member_id != request.member_id:  # a static member came back
                await self._write(group_id, group_record(group))
            return Result(value=outcome.joined)
        return await self._wait_for_rebalance(group, outcome.member_id)

    async def _wait_for_rebalance(self, group: Group, member_id: str) -> Result:
        """Hold a join until the group's rebalance completes (see :meth:`_maybe_complete`)."""
        waiters = self._waiters.setdefault(group.group_id, {})
        previous = waiters.pop(member_id, None)
        if previous is not None and not previous.done():
            previous.set_result(failure(UnknownMemberIdError("superseded by a newer join")))
        answer = asyncio.get_running_loop().create_future()
        waiters[member_id] = answer
        await self._maybe_complete(group)
        return await answer

    async def _sync_group(self, request: SyncGroupRequest) -> Result:
        """A client-assigned member's SyncGroup; its value is the member's assignment
        bytes, once the leader's SyncGroup brought them."""
        await self._ready()
        group = self._group(request.group_id)
        assignment = group.sync(
            request.member_id,
            request.generation_id,
            request.group_instance_id,
            request.protocol_type,
            request.protocol_name,
            dict(request.assignments),
            time.monotonic(),
        )
        if assignment is None:
            answer = asyncio.get_running_loop().create_future()
            previous = self._syncs.setdefault(group.group_id, {}).pop(request.member_id, None)
            if previous is not None and not previous.done():
                previous.set_result(failure(UnknownMemberIdError("superseded by a newer sync")))
            self._syncs[group.group_id][request.member_id] = answer
            return await answer
        if request.assignments or self._syncs.get(group.group_id):
            self._settle_syncs(group)
            try:
                await self._write(group.group_id, group_record(group))
            except Exception:  # the members still get their assignment; logged
                logger.exception("group %s: could not store its assignment", group.group_id)
        return Result(value=assignment)

    def _settle_syncs(self, group: Group) -> None:
        """Answer the SyncGroups waiting in ``group``: their assignments once it is
        stable, RebalanceInProgressError once a new rebalance started, and
        UnknownMemberIdError to members that are gone."""
        waiting = self._syncs.get(group.group_id)
        if not waiting:
            return
        for member_id in list(waiting):
            answer = waiting[member_id]
            member = group.members.get(member_id)
            if member is None:
                result = failure(UnknownMemberIdError(f"{member_id} left the group"))
            elif group.state == PREPARING_REBALANCE:
                result = failure(
                    RebalanceInProgressError(f"group {group.group_id!r} is rebalancing; rejoin")
                )
            elif group.state == STABLE:
                result = Result(value=member.assignment_bytes)
            else:
                continue
            del waiting[member_id]
            if not answer.done():
                answer.set_result(result)

    async def _heartbeat(self, request: HeartbeatRequest) -> Result:
        """Keep a member's session alive; the error says when to rejoin."""
        await self._ready()
        self._group(request.group_id).heartbeat(
            request.member_id, request.generation_id, time.monotonic(), request.group_instance_id
        )
        return Result()

    async def _leave_group(self, request: LeaveGroupRequest) -> Result:
        """A closing member leaves; the others rebalance at once."""
        await self._ready()
        group = self._group(request.group_id)
        member_id = group.leave(request.member_id, time.monotonic(), request.group_instance_id)
        self._fail_waiter(request.group_id, member_id)
        self._settle_syncs(group)
        if not group.members:
            await self._write(request.group_id, group_record(group))
        await self._maybe_complete(group)
        return Result(value=member_id)

    # ------------------------------------------------------------------ offsets

    async def _commit_offsets(self, request: OffsetCommitRequest) -> Result:
        """Commit ``(topic, partition, offset, metadata)`` items, all or none.

        Members pass their id and generation; others (admin, consumers using
        ``assign()``) pass "" and -1, accepted only while the group has no members.
        """
        await self._ready()
        group_id = request.group_id
        committed = _offsets(request.offsets)
        group = self._store.groups.setdefault(group_id, Group(group_id))
        group.check_commit(request.member_id, request.generation_id)
        await self._write(group_id, offset_records(group_id, committed))
        self._store.offsets.setdefault(group_id, {}).update(committed)
        return Result()

    async def _fetch_offsets(self, request: OffsetFetchRequest) -> Result:
        """The group's committed offsets (of ``partitions``, default all), by TopicPartition
        (``(offset, metadata)`` pairs with ``with_metadata``).

        The group's partition is read up to its last stable offset first (offsets that
        transactions committed). With ``require_stable`` the answer is
        UnstableOffsetCommitError (retriable) while a transaction is open on it.
        """
        await self._ready()
        group_id = request.group_id
        stable = await self._read_committed(partition_for(group_id, self._partitions))
        if request.require_stable and not stable:
            raise UnstableOffsetCommitError(
                f"group {group_id!r}: a transaction may still commit its offsets"
            )
        committed = self._store.offsets.get(group_id, {})
        wanted = (
            committed
            if request.partitions is None
            else [TopicPartition(*p) for p in request.partitions]
        )
        if request.with_metadata:
            return Result(
                value={
                    tp: (committed[tp].offset, committed[tp].metadata)
                    for tp in wanted
                    if tp in committed
                }
            )
        return Result(value={tp: committed[tp].offset for tp in wanted if tp in committed})

    async def _reset_offsets(self, request: ResetOffsetsRequest) -> Result:
        """Overwrite committed offsets of a group without active members (admin)."""
        await self._ready()
        group_id = request.group_id
        committed = _offsets(request.offsets)
        group = self._store.groups.setdefault(group_id, Group(group_id))
        group.check_inactive("reset_offsets")
        await self._write(group_id, offset_records(group_id, committed))
        self._store.offsets.setdefault(group_id, {}).update(committed)
        return Result()

    # -------------------------------------------------------------------- admin

    async def _list_groups(self, request: ListGroupsRequest) -> Result:
        """Ids of the groups that have members or committed offsets, sorted (with
        ``with_state``: dicts of id, protocol type and state)."""
        await self._ready()
        ids = {g for g, group in self._store.groups.items() if group.members}
        ids.update(g for g, offsets in self._store.offsets.items() if offsets)
        if not request.with_state:
            return Result(value=sorted(ids))
        listed = []
        for group_id in sorted(ids):
            group = self._store.groups.get(group_id) or Group(group_id)
            listed.append(
                {
                    "group_id": group_id,
                    "protocol_type": group.protocol_type or "",
                    "state": group.state,
                }
            )
        return Result(value=listed)

    async def _describe_group(self, request: DescribeGroupRequest) -> Result:
        """State, generation, protocol, members and their partitions, committed offsets."""
        await self._ready()
        group_id = request.group_id
        await self._read_committed(partition_for(group_id, self._partitions))
        group = self._group(group_id)  # known by its offsets alone, if need be
        description = group.describe()
        description["offsets"] = {
            tp: o.offset for tp, o in self._store.offsets.get(group_id, {}).items()
        }
        return Result(value=description)

    async def _delete_group(self, request: DeleteGroupRequest) -> Result:
        """Delete a group without members: tombstones for its record and its offsets."""
        await self._ready()
        group_id = request.group_id
        await self._read_committed(partition_for(group_id, self._partitions))
        group = self._group(group_id)
        group.check_inactive("delete group")
        offsets = self._store.offsets.get(group_id, {})
        await self._write(group_id, deletion_records(group_id, offsets))
        self._store.groups.pop(group_id, None)
        self._store.offsets.pop(group_id, None)
        return Result()

    async def endpoint(self) -> Endpoint | None:
        """Where this coordinator serves its offset calls directly (see
        :mod:`raystream.wire`), or None when ``listener.host`` is empty."""
        return await self._direct.endpoint()

    async def ping(self) -> bool:
        """Liveness check (and load trigger)."""
        await self._ready()
        return True

    # ---------------------------------------------------------------- rebalance

    async def _maybe_complete(self, group: Group) -> None:
        """Complete the group's rebalance if it is ready, and answer the waiting joins."""
        lock = self._locks.setdefault(group.group_id, asyncio.Lock())
        async with lock:
            if not group.ready(time.monotonic()):
                return
            counts = await self._partition_counts(group.subscribed_topics())
            if not group.ready(time.monotonic()):
                return
            late = group.complete(counts, time.monotonic())
            if late:
                logger.info("group %s: %s did not rejoin in time", group.group_id, late)
            try:
                await self._write(group.group_id, group_record(group))
            except Exception:  # the members still get their assignment; logged
                logger.exception("group %s: could not store its membership", group.group_id)
            waiters = self._waiters.pop(group.group_id, {})
            for member_id, answer in waiters.items():
                if answer.done():
                    continue
                if member_id in group.members:
                    assigned = (
                        group.assigned(member_id)
                        if group.protocol_type is None
                        else group.joined(member_id)
                    )
                    answer.set_result(Result(value=assigned))
                else:
                    answer.set_result(
                        failure(UnknownMemberIdError(f"{member_id} was removed from the group"))
                    )

    async def _partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """Partition counts of the existing topics among ``topics``, asked afresh."""
        counts = {}
        for topic in topics:
            with contextlib.suppress(UnknownTopicOrPartitionError):
                metadata = await self._client.topic_metadata(topic, refresh=True)
                counts[topic] = len(metadata.partitions)
        return counts

    async def _tick_loop(self) -> None:
        """Expire sessions, finish timed-out rebalances, notice new partitions."""
        next_metadata_check = time.monotonic() + METADATA_CHECK_S
        while True:
            await asyncio.sleep(TICK_S)
            try:
                now = time.monotonic()
                for group in list(self._store.groups.values()):
                    for member_id in group.expire(now):
                        logger.info("group %s: session of %s expired", group.group_id, member_id)
                        self._fail_waiter(group.group_id, member_id)
                    await self._evict_crashed(group, now)
                    self._settle_syncs(group)
                    if group.ready(now):
                        await self._maybe_complete(group)
                if now >= next_metadata_check:
                    next_metadata_check = now + METADATA_CHECK_S
                    await self._check_partition_counts()
            except Exception:  # the loop must survive anything; logged
                logger.exception("group coordinator tick failed")

    async def _evict_crashed(self, group: Group, now: float) -> None:
        """Evict members whose Ray actor crashed (see :meth:`Group.silent_actors`)."""
        silent = group.silent_actors(now, CRASH_CHECK_AFTER_S)
        if not silent:
            return
        crashed = await asyncio.to_thread(
            lambda: [member for member, actor in silent.items() if is_down(actor)]
        )
        for member_id in group.evict(crashed, time.monotonic()):
            logger.info("group %s: member %s crashed (Ray)", group.group_id, member_id)
            self._fail_waiter(group.group_id, member_id)

    async def _check_partition_counts(self) -> None:
        stable = [g for g in self._store.groups.values() if g.state == STABLE and g.members]
        if not stable:
            return
        topics = set().union(*(g.subscribed_topics() for g in stable))
        counts = await self._partition_counts(topics)
        for group in stable:
            if group.partitions_changed(counts, time.monotonic()):
                logger.info("group %s: partitions changed, rebalancing", group.group_id)

    def _fail_waiter(self, group_id: str, member_id: str) -> None:
        answer = self._waiters.get(group_id, {}).pop(member_id, None)
        if answer is not None and not answer.done():
            answer.set_result(failure(UnknownMemberIdError(f"{member_id} left the group")))

    # ------------------------------------------------------------------ helpers

    async def _write(self, group_id: str, table: Any) -> None:
        """Append to the group's partition of ``__consumer_offsets`` with acks=all, after
        the group's previous write.

        Raises:
            RaystreamTimeoutError: not written within :data:`WRITE_TIMEOUT_S`.
            RaystreamError: a non-retriable refusal.
        """
        tp = TopicPartition(OFFSETS_TOPIC, partition_for(group_id, self._partitions))
        metadata = await self._client.topic_metadata(OFFSETS_TOPIC)
        batch = batch_from_table(table, metadata.record_schema, None, int(time.time() * 1000))
        async with self._writing.setdefault(group_id, asyncio.Lock()):
            await self._client.produce(tp, batch, WRITE_TIMEOUT_S, GROUP_COORDINATOR_WRITER)

    def _group(self, group_id: str) -> Group:
        group = self._store.groups.get(group_id)
        if group is None:
            if group_id in self._store.offsets:
                group = self._store.groups[group_id] = Group(group_id)
                return group
            raise GroupIdNotFoundError(f"consumer group {group_id!r} does not exist")
        return group


def _report(partition: int, skipped: list[tuple[int, str]]) -> None:
    """Log the records of a partition that a replay skipped (they do not decode)."""
    for offset, reason in skipped:
        logger.warning(
            "%s-%d offset %d: skipped a record that does not decode: %s",
            OFFSETS_TOPIC,
            partition,
            offset,
            reason,
        )


def _offsets(items: Any) -> dict[TopicPartition, OffsetAndMetadata]:
    """Validated (see :class:`~raystream.requests.OffsetCommitRequest`) ``(topic,
    partition, offset, metadata)`` items as a commit."""
    now_ms = int(time.time() * 1000)
    return {
        TopicPartition(topic, partition): OffsetAndMetadata(offset, metadata, now_ms)
        for topic, partition, offset, metadata in items
    }


GroupCoordinatorActor = ray.remote(GroupCoordinator)
"""The coordinator as a Ray actor class (the one place it becomes one)."""

__all__ = ["COORDINATOR_NAME", "GroupCoordinator", "GroupCoordinatorActor"]
