"""``rs.ConsumerGroup``: a consumer group whose members are Ray actors.

The Ray way to scale consumption: N actors (placed by Ray anywhere in the cluster),
each a member of one consumer group, each applying the same function to the batches
it polls and committing after the function succeeds (at-least-once). The group
coordinator shares the partitions among them and moves them when members come, go or
crash; Ray restarts crashed members.

Exactly-once mode: with ``output_topic``, ``fn`` returns each batch's output (a
``pyarrow.Table``, or None) and every batch is one transaction of the member's
transactional producer, holding the output and the consumed offsets: a read_committed
reader of ``output_topic`` sees each input's output exactly once, whatever crashes,
restarts and rebalances happen. Member ``i`` has the transactional id
``"<transactional_id_prefix or group_id>-member-<i>"``, the same after a Ray restart,
so a restarted member fences its zombie.

Example:
    >>> def score(table):                                        # doctest: +SKIP
    ...     print(table.num_rows)
    >>> group = rs.ConsumerGroup(cluster, ["orders"], "scorers", score, members=3)
    >>> group.scale(4)                                           # doctest: +SKIP
    >>> group.stop()                                             # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable
from typing import Any

from raystream.actors.member import ARROW, RECORDS, GroupMemberActor
from raystream.client.cluster import Cluster, resolve_cluster
from raystream.client.consumer import Consumer
from raystream.errors import (
    BrokerNotAvailableError,
    GroupIdNotFoundError,
    InvalidRequestError,
    RaystreamError,
    RaystreamTimeoutError,
)
from raystream.transport import CALL_ERRORS, stop_actor, wait_result
from raystream.types import TopicPartition

logger = logging.getLogger(__name__)

MODES = (ARROW, RECORDS)


class ConsumerGroup:
    """Run ``fn`` over ``topics`` with ``members`` Ray actors of consumer group ``group_id``.

    Args:
        cluster: the cluster (None: :func:`raystream.connect`).
        topics: a topic name or a list of them.
        group_id: the consumer group the actors join (its committed offsets are where
            a new member starts; ``auto_offset_reset`` defaults to "earliest").
        fn: the function applied to each polled batch: a ``pyarrow.Table`` with
            ``mode="arrow"`` (the columns of ``Consumer.poll_arrow()``), a list of
            ConsumerRecord with ``mode="records"``. It runs inside the actors, so it
            must be picklable (cloudpickle: closures and lambdas are fine).
        members: how many member actors to start.
        mode: "arrow" (default: columnar, no per-record objects) or "records".
        consumer_config: further Consumer options for every member (e.g.
            ``session_timeout_ms``, ``partition_assignment_strategy``).
        actor_options: Ray options for the member actors (e.g. ``num_cpus``,
            ``resources``); by default a member asks for no CPU, like the servers.
        autoscale: ``(min_members, max_members)`` to size the group by consumer lag:
            every ``autoscale_interval_s`` it aims at ``ceil(lag / lag_per_member)``
            members within those bounds. The check runs on a thread of this object.
        lag_per_member, autoscale_interval_s: autoscaling knobs.
        output_topic: exactly-once mode (see the module docstring): the topic ``fn``'s
            output tables go to, in one transaction per batch with its offsets.
        transactional_id_prefix: prefix of the members' transactional ids (default:
            the group id).
        producer_config: further Producer options for the members' producers.

    Raises:
        InvalidRequestError: a bad argument (the message names it).
    """

    def __init__(
        self,
        cluster: Cluster | None,
        topics: str | Iterable[str],
        group_id: str,
        fn: Callable[[Any], Any],
        members: int = 1,
        mode: str = ARROW,
        consumer_config: dict[str, Any] | None = None,
        actor_options: dict[str, Any] | None = None,
        autoscale: tuple[int, int] | None = None,
        lag_per_member: int = 100_000,
        autoscale_interval_s: float = 10.0,
        output_topic: str | None = None,
        transactional_id_prefix: str | None = None,
        producer_config: dict[str, Any] | None = None,
    ) -> None:
        self.cluster = resolve_cluster(cluster)
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics or not all(isinstance(t, str) and t for t in self.topics):
            raise InvalidRequestError(f"ConsumerGroup topics must be topic names: {topics!r}")
        for topic in self.topics:
            self.cluster.topic_metadata(topic)
        if not isinstance(group_id, str) or not group_id:
            raise InvalidRequestError(
                f"ConsumerGroup group_id must be a non-empty string: {group_id!r}"
            )
        if not callable(fn):
            raise InvalidRequestError(f"ConsumerGroup fn must be callable, not {fn!r}")
        if mode not in MODES:
            raise InvalidRequestError(f"ConsumerGroup mode={mode!r}: use 'arrow' or 'records'")
        _check_count(members, "members", 0)
        if autoscale is not None:
            low, high = autoscale
            _check_count(low, "autoscale minimum", 0)
            _check_count(high, "autoscale maximum", max(low, 1))
            members = min(max(members, low), high)
        if output_topic is not None:
            if not isinstance(output_topic, str) or not output_topic:
                raise InvalidRequestError(
                    f"ConsumerGroup output_topic must be a topic name: {output_topic!r}"
                )
            self.cluster.topic_metadata(output_topic)
        self.group_id = group_id
        self._output_topic = output_topic
        self._txn_prefix = transactional_id_prefix or group_id
        self._producer_config = dict(producer_config or {})
        self._fn = fn
        self._mode = mode
        self._consumer_config = dict(consumer_config or {})
        self._actor_options = {"num_cpus": 0, "max_restarts": -1, **(actor_options or {})}
        self._members: list[Any] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.scale(members)
        self._autoscaler: threading.Thread | None = None
        if autoscale is not None:
            self._autoscaler = threading.Thread(
                target=self._autoscale,
                args=(autoscale, lag_per_member, autoscale_interval_s),
                name=f"raystream-autoscale-{group_id}",
                daemon=True,
            )
            self._autoscaler.start()

    @property
    def members(self) -> list[Any]:
        """The member actors' handles (kill one to see the group rebalance)."""
        with self._lock:
            return list(self._members)

    def scale(self, members: int) -> None:
        """Add or remove member actors until there are ``members``; the group rebalances.

        Removed members finish their batch, commit and leave, so their partitions move
        without waiting for a session timeout.
        """
        _check_count(members, "members", 0)
        with self._lock:
            while len(self._members) < members:
                index = len(self._members)
                exactly_once = self._output_topic is not None
                self._members.append(
                    GroupMemberActor.options(**self._actor_options).remote(
                        self.cluster,
                        self.topics,
                        self.group_id,
                        self._fn,
                        self._mode,
                        self._consumer_config,
                        self._output_topic,
                        f"{self._txn_prefix}-member-{index}" if exactly_once else None,
                        self._producer_config,
                    )
                )
            removed = self._members[members:]
            del self._members[members:]
        for member, stopping in [(m, m.stop.remote()) for m in removed]:
            try:
                wait_result(stopping, 60, "member stop")
            except (RaystreamError, *CALL_ERRORS) as error:  # crashed or restarting: kill it
                logger.info("group %s: member did not stop cleanly: %s", self.group_id, error)
            stop_actor(member)

    def status(self) -> list[dict[str, Any]]:
        """Each member's status (processed, batches, failures, last_error, assignment);
        a member being restarted by Ray reports ``{"alive": False}``."""
        statuses = []
        for member in self.members:
            try:
                statuses.append(wait_result(member.status.remote(), 30, "member status"))
            except (BrokerNotAvailableError, RaystreamTimeoutError):
                statuses.append({"alive": False})
        return statuses

    def processed(self) -> int:
        """Records processed by the current members (restarted members start at 0)."""
        return sum(s.get("processed", 0) for s in self.status())

    def lag(self) -> int:
        """Records of the topics the group has still to process: per partition, the high
        watermark minus the committed offset, or minus the log start where nothing is
        committed yet (members start at the earliest offset by default)."""
        try:
            committed = self.cluster.admin().describe_group(self.group_id).offsets
        except GroupIdNotFoundError:
            committed = {}
        tps = [
            TopicPartition(topic, p.partition)
            for topic in self.topics
            for p in self.cluster.topic_metadata(topic, refresh=True).partitions
        ]
        with Consumer(cluster=self.cluster, enable_auto_commit=False) as consumer:
            ends = consumer.end_offsets(tps)
            earliest = self._consumer_config.get("auto_offset_reset", "earliest") == "earliest"
            starts = consumer.beginning_offsets(tps) if earliest else ends
        return sum(max(ends[tp] - committed.get(tp, starts[tp]), 0) for tp in tps)

    def stop(self) -> None:
        """Stop every member (each commits and leaves) and the autoscaler; idempotent."""
        self._stopped.set()
        if self._autoscaler is not None:
            self._autoscaler.join(timeout=30)
        self.scale(0)

    def __enter__(self) -> ConsumerGroup:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (
            f"ConsumerGroup({self.group_id!r}, topics={self.topics}, members={len(self.members)})"
        )

    def _autoscale(self, bounds: tuple[int, int], lag_per_member: int, interval_s: float) -> None:
        low, high = bounds
        while not self._stopped.wait(interval_s):
            try:
                target = min(max(math.ceil(self.lag() / lag_per_member), low), high)
                if target != len(self.members) and not self._stopped.is_set():
                    logger.info("group %s: scaling to %d members", self.group_id, target)
                    self.scale(target)
            except RaystreamError as error:  # the next round tries again
                logger.warning("group %s: autoscaling check failed: %s", self.group_id, error)


def _check_count(value: Any, what: str, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InvalidRequestError(f"ConsumerGroup {what}={value!r} must be an integer >= {low}")
