"""A consumer's side of the group protocol (Kafka's ConsumerCoordinator).

The consumer's thread drives everything that the application can observe: it sends
joins, applies their answers, revokes and assigns partitions, and runs the rebalance
listener, all from ``Consumer.poll()``. A join is an actor call left in flight (a Ray
ObjectRef that ``poll()`` checks without waiting), so under the cooperative protocol a
member keeps consuming the partitions it keeps while the group rebalances: no pause.

A background thread only heartbeats and raises flags ("rejoin", "fenced") for the
consumer's thread to act on. It also enforces ``max_poll_interval_ms``: a member whose
application stops calling ``poll()`` leaves the group, so its partitions move to live
members instead of stalling, as in Kafka.

Protocol choice follows Kafka: the member revokes partitions cooperatively (only what
moves away) when every configured assignor is cooperative, eagerly (everything, before
rejoining) otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from raystream.errors import (
    BrokerNotAvailableError,
    CommitFailedError,
    FencedInstanceIdError,
    IllegalGenerationError,
    RaystreamError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from raystream.groups.assignors import COOPERATIVE, get_assignor
from raystream.groups.group import NO_GENERATION
from raystream.requests import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from raystream.transport import answered, cancel, current_actor_id, wait_result
from raystream.types import TopicPartition

logger = logging.getLogger(__name__)

CommitCallback = Callable[[dict[TopicPartition, int], Exception | None], None]


class MembershipOwner(Protocol):
    """What the membership asks of its consumer when the assignment changes."""

    def revoke_partitions(self, partitions: set[TopicPartition]) -> None:
        """Commit (if auto-committing), tell the listener, stop reading ``partitions``."""

    def assign_partitions(
        self, added: set[TopicPartition], assignment: set[TopicPartition]
    ) -> None:
        """Read ``assignment`` (``added`` from their committed offsets), tell the listener."""

    def lose_partitions(self, partitions: set[TopicPartition]) -> None:
        """Stop reading ``partitions`` without committing (they may be someone else's)."""


class GroupMembership:
    """One consumer's membership of one group.

    Args:
        cluster: the cluster (its ``coordinator_call`` reaches the coordinator).
        group_id, group_instance_id, client_id: who the member is.
        strategies: assignment strategies in preference order.
        session_timeout_ms, heartbeat_interval_ms, max_poll_interval_ms: Kafka's.
        owner: the consumer the membership works for.
        require_stable: committed offsets are asked for only once no open transaction
            may still commit offsets of the group (KIP-447; read_committed consumers).
    """

    def __init__(
        self,
        cluster: Any,
        group_id: str,
        group_instance_id: str | None,
        client_id: str,
        strategies: list[str],
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        max_poll_interval_ms: int,
        owner: MembershipOwner,
        require_stable: bool = False,
    ) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.strategies = strategies
        self.cooperative = all(get_assignor(s).protocol == COOPERATIVE for s in strategies)
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.max_poll_interval_s = max_poll_interval_ms / 1000
        self.owner = owner
        self.require_stable = require_stable
        self.member_id = ""
        self.generation = NO_GENERATION
        self.owned: set[TopicPartition] = set()
        self.topics: list[str] = []
        self._join: Any = None
        self._rejoin = False
        self._fenced: RaystreamError | None = None
        self._last_poll = time.monotonic()
        self._commits: list[tuple[Any, dict[TopicPartition, int], CommitCallback | None]] = []
        self._stop = threading.Event()
        self._heartbeats: threading.Thread | None = None
        # A member inside a Ray actor tells the coordinator which one, so that a crash
        # of the actor moves its partitions as soon as Ray reports it.
        self._actor_id: str | None = current_actor_id()

    # ------------------------------------------------------------- the protocol

    @property
    def rebalancing(self) -> bool:
        """A join is in flight or due (the consumer polls in short slices meanwhile)."""
        return self._join is not None or self._rejoin or self._fenced is not None

    def subscribe(self, topics: list[str]) -> None:
        """Join with this subscription (at the next :meth:`step`)."""
        self.topics = list(topics)
        self._rejoin = True
        if self._heartbeats is None:
            self._heartbeats = threading.Thread(
                target=self._heartbeat_loop,
                name=f"raystream-heartbeat-{self.group_id}",
                daemon=True,
            )
            self._heartbeats.start()

    def step(self) -> None:
        """Do the group work due now; called by the consumer's thread from ``poll()``.

        Raises:
            FencedInstanceIdError: a newer member took this static member's instance id.
            RaystreamError: the coordinator refused the join for good (bad strategies).
        """
        self._last_poll = time.monotonic()
        self.finish_commits()
        fenced, self._fenced = self._fenced, None
        if fenced is not None:
            self._lose(fenced)
        if self._join is not None and answered([self._join]):
            self._complete_join()
        if self._rejoin and self._join is None and self.topics:
            self._send_join()

    def _send_join(self) -> None:
        if not self.cooperative and self.owned:
            revoked, self.owned = self.owned, set()
            self.owner.revoke_partitions(revoked)
        self._rejoin = False
        self._join = self.cluster.coordinator().handle.remote(
            JoinGroupRequest(
                self.group_id,
                self.member_id,
                self.group_instance_id,
                self.client_id,
                tuple(self.topics),
                tuple(self.strategies),
                tuple(sorted(self.owned)),
                self.generation,
                self.session_timeout_ms,
                int(self.max_poll_interval_s * 1000),
                self._actor_id,
            )
        )

    def _complete_join(self) -> None:
        ref, self._join = self._join, None
        try:
            assigned = wait_result(ref, None, "join_group").unwrap()
        except BrokerNotAvailableError:  # the coordinator restarts: find it again, rejoin
            self.cluster.coordinator(refresh=True)
            self._rejoin = True
            return
        except (UnknownMemberIdError, IllegalGenerationError) as error:
            self._lose(error)
            self._rejoin = True
            return
        except RebalanceInProgressError:
            self._rejoin = True
            return
        self.member_id, self.generation = assigned.member_id, assigned.generation
        assignment = set(assigned.assignment)
        revoked = self.owned - assignment
        if revoked:  # cooperative: give these up, then rejoin so others can take them
            self.owned -= revoked
            self.owner.revoke_partitions(revoked)
            self._rejoin = True
        added = assignment - self.owned
        self.owned = assignment
        self.owner.assign_partitions(added, set(assignment))

    def _lose(self, error: RaystreamError) -> None:
        """The coordinator no longer counts this member in: its partitions are lost."""
        if isinstance(error, FencedInstanceIdError):
            raise error
        logger.info(
            "group %s: member %s lost its partitions: %s", self.group_id, self.member_id, error
        )
        if isinstance(error, UnknownMemberIdError):
            self.member_id = ""
        self.generation = NO_GENERATION
        lost, self.owned = self.owned, set()
        if lost:
            self.owner.lose_partitions(lost)
        self._rejoin = True

    def leave(self) -> None:
        """Leave the group (static members stay: their session timeout covers a restart)."""
        if self._join is not None:
            cancel(self._join)
            self._join = None
        self._rejoin = False
        self.topics = []
        member_id, self.member_id = self.member_id, ""
        self.generation = NO_GENERATION
        self.owned = set()
        if member_id and self.group_instance_id is None:
            try:
                self.cluster.coordinator_call(
                    LeaveGroupRequest(self.group_id, member_id), timeout_s=5
                )
            except RaystreamError as error:  # it expires by session timeout instead
                logger.info("group %s: leave failed: %s", self.group_id, error)

    def close(self) -> None:
        """Leave and stop heartbeating."""
        self.finish_commits(wait=True)
        self.leave()
        self._stop.set()
        if self._heartbeats is not None:
            self._heartbeats.join(timeout=5)

    # --------------------------------------------------------------- heartbeats

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_interval_s):
            member_id, generation = self.member_id, self.generation
            if not member_id:
                continue
            if time.monotonic() - self._last_poll > self.max_poll_interval_s:
                self._poll_timeout(member_id)
                continue
            try:
                self.cluster.coordinator_call(
                    HeartbeatRequest(self.group_id, member_id, generation),
                    timeout_s=self.session_timeout_ms / 1000,
                )
            except RebalanceInProgressError:
                if self._join is None:
                    self._rejoin = True
            except (UnknownMemberIdError, IllegalGenerationError) as error:
                if self._join is None and (member_id, generation) == (
                    self.member_id,
                    self.generation,
                ):
                    self._fenced = error
            except RaystreamError as error:
                logger.info("group %s: heartbeat failed: %s", self.group_id, error)

    def _poll_timeout(self, member_id: str) -> None:
        """Leave: the application has not polled within max_poll_interval_ms."""
        logger.warning(
            "group %s: no poll() for over max_poll_interval_ms=%d; leaving the group so the "
            "partitions move on (the next poll() rejoins)",
            self.group_id,
            int(self.max_poll_interval_s * 1000),
        )
        with contextlib.suppress(RaystreamError):  # it expires by session timeout instead
            self.cluster.coordinator_call(LeaveGroupRequest(self.group_id, member_id), timeout_s=5)
        if member_id == self.member_id:
            self._fenced = UnknownMemberIdError("left after max_poll_interval_ms without poll()")

    # ------------------------------------------------------------------ commits

    def commit(
        self,
        offsets: dict[TopicPartition, int],
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        """Commit synchronously as this member (or as an outsider when not a member),
        with each partition's ``metadata`` note (default empty).

        Raises:
            CommitFailedError: the generation is stale or the member was evicted.
        """
        try:
            self.cluster.coordinator_call(self._commit_request(offsets, metadata))
        except (IllegalGenerationError, UnknownMemberIdError) as error:
            raise CommitFailedError(str(error)) from None

    def commit_async(
        self,
        offsets: dict[TopicPartition, int],
        callback: CommitCallback | None,
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        """Send a commit; ``callback(offsets, error)`` runs in a later ``poll()``."""
        ref = self.cluster.coordinator().handle.remote(self._commit_request(offsets, metadata))
        self._commits.append((ref, offsets, callback))

    def _commit_request(
        self, offsets: dict[TopicPartition, int], metadata: Mapping[TopicPartition, str] | None
    ) -> OffsetCommitRequest:
        notes = metadata or {}
        items = tuple(
            (tp.topic, tp.partition, offset, notes.get(tp, "")) for tp, offset in offsets.items()
        )
        if self.member_id:
            return OffsetCommitRequest(self.group_id, self.member_id, self.generation, items)
        return OffsetCommitRequest(self.group_id, "", NO_GENERATION, items)

    def finish_commits(self, wait: bool = False) -> None:
        """Run the callbacks of finished async commits (waiting up to 5 s with ``wait``)."""
        if not self._commits:
            return
        refs = [ref for ref, _, _ in self._commits]
        done = set(answered(refs, 5 if wait else 0, every=True))
        pending = []
        for ref, offsets, callback in self._commits:
            if ref not in done:
                pending.append((ref, offsets, callback))
                continue
            error: Exception | None = None
            try:
                wait_result(ref, None, "commit").unwrap()
            except IllegalGenerationError as e:
                error = CommitFailedError(str(e))
            except Exception as e:
                error = e
            if callback is not None:
                callback(offsets, error)
            elif error is not None:
                logger.warning(
                    "group %s: commit of %d offsets failed: %s", self.group_id, len(offsets), error
                )
        self._commits = pending

    def committed(
        self, partitions: list[TopicPartition], with_metadata: bool = False
    ) -> dict[TopicPartition, Any]:
        """The group's committed offsets of ``partitions`` (missing: none committed), as
        ``(offset, metadata)`` pairs ``with_metadata``."""
        return self.cluster.coordinator_call(
            OffsetFetchRequest(
                self.group_id,
                tuple(tuple(tp) for tp in partitions),
                self.require_stable,
                with_metadata,
            )
        )
