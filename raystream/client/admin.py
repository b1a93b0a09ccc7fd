"""The Admin client: topics, configs, consumer groups, ACLs and client quotas.

Names follow kafka-python's KafkaAdminClient where they exist. Topic calls go to the
controller actor and group calls to the group coordinator; both validate and answer
with an error code that becomes one of :mod:`raystream.errors`.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import pyarrow as pa

from raystream.client.cluster import CONTROL_TIMEOUT_S, Cluster, resolve_cluster
from raystream.client.consumer import Consumer
from raystream.config import unknown_option
from raystream.errors import (
    InvalidConfigError,
    InvalidRequestError,
    LeaderNotAvailableError,
    PartitionOutOfRangeError,
    RaystreamError,
)
from raystream.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raystream.requests import (
    DeleteRecordsRequest,
    DescribeGroupRequest,
    ListGroupsRequest,
    ResetOffsetsRequest,
)
from raystream.retry import Backoff
from raystream.security.acls import AclBinding, AclBindingFilter
from raystream.security.quotas import (
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    public_entity,
    validate_changes,
)
from raystream.transport import outcome, send
from raystream.types import GroupDescription, TopicDescription, TopicPartition


def _call_timeout_s(timeout_ms: int | None) -> float:
    """How long to wait for the controller's answer to a call that may wait
    ``timeout_ms`` itself (the controller answers the timeout first)."""
    if isinstance(timeout_ms, int) and timeout_ms > 0:
        return max(CONTROL_TIMEOUT_S, timeout_ms / 1000 + 60)
    return CONTROL_TIMEOUT_S


class Admin:
    """Create, inspect, alter and delete topics.

    Example:
        >>> admin = rs.connect().admin()                        # doctest: +SKIP
        >>> admin.create_topic("orders", partitions=3)           # doctest: +SKIP
    """

    def __init__(self, cluster: Cluster | None = None, **options: Any) -> None:
        for key in options:  # kafka-python's admin options (bootstrap_servers, ...)
            raise InvalidConfigError(unknown_option("Admin", key, ()))
        self.cluster = resolve_cluster(cluster)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: dict[str, Any] | None = None,
        schema: pa.Schema | None = None,
        timeout_ms: int | None = None,
    ) -> TopicDescription:
        """Create a topic; a ``schema`` makes a typed topic whose values are columns.

        Returns once every replica serves. The topic is created whole or not at all:
        other clients do not see it before then, and a creation that fails or takes
        longer than ``timeout_ms`` (kafka-python's name) is rolled back, so the name
        can be used again at once. Without ``timeout_ms`` it is rolled back once no
        replica has started for 120 s (each replica is a process: a topic of many
        partitions takes a while), and this call waits up to 300 s for it.

        Raises:
            TopicAlreadyExistsError, InvalidTopicError, InvalidPartitionsError,
            InvalidReplicationFactorError, InvalidConfigError: naming the bad value.
            InvalidTopicError also for names starting with "__" (internal topics);
            InvalidPartitionsError also for more partitions than the nodes can hold
            (the broker's ``max.replicas.per.node``).
            RaystreamTimeoutError: the replicas did not all start within ``timeout_ms``.
        """
        if schema is not None and not isinstance(schema, pa.Schema):
            raise InvalidRequestError(
                f"schema must be a pyarrow.Schema, not {type(schema).__name__}"
            )
        if schema is not None and len(schema) == 0:
            raise InvalidRequestError("schema has no fields")
        serialized = None if schema is None else schema.serialize().to_pybytes()
        self.cluster.call(
            "create_topic",
            name,
            partitions,
            replication_factor,
            config or {},
            serialized,
            timeout_ms,
            timeout_s=_call_timeout_s(timeout_ms),
        )
        return self.describe_topic(name)

    def delete_topic(self, name: str) -> None:
        """Delete a topic and all its data (internal topics are refused with
        InvalidTopicError)."""
        self.cluster.call("delete_topic", name)
        self.cluster.forget(name)

    def list_topics(self) -> list[str]:
        """Topic names, sorted; internal topics (``__`` prefix) excluded."""
        return self.cluster.call("list_topics")

    def describe_topic(self, name: str) -> TopicDescription:
        """Partitions (leader, replicas, ISR, epoch, offsets) and effective config."""
        return self.cluster.call("describe_topic", name)

    def create_partitions(
        self, name: str, total: int, timeout_ms: int | None = None
    ) -> TopicDescription:
        """Grow ``name`` to ``total`` partitions (keyed records may map elsewhere after).

        As with :meth:`create_topic`, the new partitions appear once all their replicas
        serve, or are rolled back after a failure or ``timeout_ms``. Internal topics are
        refused (InvalidTopicError).
        """
        self.cluster.call(
            "create_partitions", name, total, timeout_ms, timeout_s=_call_timeout_s(timeout_ms)
        )
        self.cluster.forget(name)
        return self.describe_topic(name)

    def alter_topic_config(self, name: str, config: dict[str, Any]) -> dict[str, Any]:
        """Change topic config keys (Kafka's dotted names); returns the effective config.

        Internal topics are refused (InvalidTopicError): the broker config sizes them."""
        effective = self.cluster.call("alter_topic_config", name, config)
        self.cluster.forget(name)
        return effective

    def elect_leaders(self, topics: list[str] | None = None) -> int:
        """Preferred leader election: give leadership back to each partition's first
        replica where it is alive and in sync; returns how many partitions moved."""
        moved = self.cluster.call("elect_leaders", topics)
        for topic in topics or self.list_topics():
            self.cluster.forget(topic)
        return moved

    def reassign_partitions(
        self, topic: str, assignments: dict[int, list[str]]
    ) -> dict[int, list[int]]:
        """Move partitions' replicas onto the given Ray node ids (the first leads).

        Returns each partition's new replica ids. New replicas catch up before old
        ones are removed, so the partition stays fully replicated throughout.
        """
        result = {
            partition: self.cluster.call("reassign_partition", topic, partition, list(nodes))
            for partition, nodes in assignments.items()
        }
        self.cluster.forget(topic)
        return result

    def list_groups(self) -> list[str]:
        """Ids of the consumer groups with members or committed offsets, sorted."""
        return self.cluster.coordinator_call(ListGroupsRequest())

    def describe_group(self, group_id: str) -> GroupDescription:
        """A consumer group's state, generation, members' partitions, offsets and lag.

        Lag is the high watermark minus the committed offset, per committed partition.

        Raises:
            GroupIdNotFoundError: no such group.
        """
        info = self.cluster.coordinator_call(DescribeGroupRequest(group_id))
        offsets: dict[TopicPartition, int] = info["offsets"]
        ends = self._offsets_of(sorted(offsets), LATEST_TIMESTAMP)
        return GroupDescription(
            group_id=group_id,
            state=info["state"],
            generation=info["generation"],
            members={m: list(d["assignment"]) for m, d in info["members"].items()},
            offsets=dict(sorted(offsets.items())),
            lag={tp: max(ends[tp] - offset, 0) for tp, offset in sorted(offsets.items())},
            protocol=info["protocol"],
            instance_ids={m: d["group_instance_id"] for m, d in info["members"].items()},
        )

    def reset_offsets(
        self, group_id: str, topic: str, to: str | int | datetime.datetime | dict[int, int]
    ) -> dict[TopicPartition, int]:
        """Set a group's committed offsets on every partition of ``topic``.

        ``to`` is "earliest", "latest", an offset (every partition), a
        ``datetime`` (the first offset at or after it; the end where nothing is that
        new) or ``{partition: offset}``. Refused while the group has active members, as
        in Kafka (they would overwrite the reset with their next commit). Returns the
        offsets set.

        Raises:
            NonEmptyGroupError: the group has members; stop them first.
            InvalidRequestError: ``to`` is none of the above (the message names it).
            PartitionOutOfRangeError: ``to`` names a partition the topic lacks.
            UnknownTopicOrPartitionError: the topic does not exist.
        """
        tps = [
            TopicPartition(topic, p.partition)
            for p in self.cluster.topic_metadata(topic, refresh=True).partitions
        ]
        if to in ("earliest", "latest"):
            offsets = self._offsets_of(
                tps, EARLIEST_TIMESTAMP if to == "earliest" else LATEST_TIMESTAMP
            )
        elif isinstance(to, datetime.datetime):
            offsets = self._offsets_at(tps, int(to.timestamp() * 1000))
        elif isinstance(to, int) and not isinstance(to, bool) and to >= 0:
            offsets = dict.fromkeys(tps, to)
        elif isinstance(to, dict):
            offsets = {}
            for partition, offset in to.items():
                tp = TopicPartition(topic, partition)
                if tp not in tps:
                    raise PartitionOutOfRangeError.of(topic, partition, len(tps))
                if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                    raise InvalidRequestError(
                        f"reset_offsets: offset {offset!r} for partition {partition} of "
                        f"{topic!r} must be an integer >= 0"
                    )
                offsets[tp] = offset
        else:
            raise InvalidRequestError(
                f"reset_offsets to={to!r}: use 'earliest', 'latest', an offset >= 0, a "
                "datetime or {partition: offset}"
            )
        items = tuple((tp.topic, tp.partition, offset, "") for tp, offset in offsets.items())
        self.cluster.coordinator_call(ResetOffsetsRequest(group_id, items))
        return offsets

    def _offsets_of(self, tps: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        consumer = Consumer(cluster=self.cluster, enable_auto_commit=False)
        try:
            if timestamp == EARLIEST_TIMESTAMP:
                return consumer.beginning_offsets(tps)
            return consumer.end_offsets(tps)
        finally:
            consumer.close()

    def _offsets_at(
        self, tps: list[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int]:
        consumer = Consumer(cluster=self.cluster, enable_auto_commit=False)
        try:
            found = consumer.offsets_for_times(dict.fromkeys(tps, timestamp_ms))
            ends = consumer.end_offsets(tps)
        finally:
            consumer.close()
        return {tp: ends[tp] if found[tp] is None else found[tp] for tp in tps}

    def alter_client_quotas(self, changes: dict[Any, dict[str, Any]]) -> None:
        """Set client quotas as Kafka's ``kafka-configs --alter --entity-type users``:
        ``{entity: {key: value}}`` with a value of None removing the key. An entity
        is ``("user", "alice")``, ``("client-id", "app")``, both as a tuple of pairs
        (``(("user", "alice"), ("client-id", "app"))``), a name of None meaning the
        default; keys are ``producer_byte_rate``, ``consumer_byte_rate`` (bytes/s)
        and ``request_percentage``. All apply together, on every listener within a
        second.

        Raises:
            InvalidRequestError: an unknown entity type or key, or a value that is not
                a positive number (nothing is changed).
        """
        self.cluster.call("alter_client_quotas", validate_changes(changes))

    def describe_client_quotas(
        self, filter: list[tuple[Any, ...]] | None = None, strict: bool = False
    ) -> dict[Any, dict[str, float]]:
        """The client quotas set, ``{entity: {key: value}}`` (entities written as
        :meth:`alter_client_quotas` takes them).

        ``filter`` components: ``(type, name)`` matches that name, ``(type, None)`` the
        default, ``(type,)`` any name; every component must match, and with ``strict``
        an entity may name no other type. None: every quota.

        Raises:
            InvalidRequestError: a component of an unknown type.
        """
        components = []
        for component in filter or []:
            if not isinstance(component, tuple | list) or len(component) not in (1, 2):
                raise InvalidRequestError(
                    f"a quota filter component is (type,) or (type, name), not {component!r}"
                )
            if len(component) == 1:
                components.append((component[0], MATCH_ANY, None))
            elif component[1] is None:
                components.append((component[0], MATCH_DEFAULT, None))
            else:
                components.append((component[0], MATCH_EXACT, component[1]))
        found = self.cluster.call("describe_client_quotas", components, strict)
        return {public_entity(key): values for key, values in found.items()}

    def close(self) -> None:
        """Nothing to release; kept for kafka-python compatibility."""

    def alter_user_scram_credentials(
        self,
        user: str,
        mechanism: str = "SCRAM-SHA-512",
        password: str | None = None,
        iterations: int = 8192,
    ) -> None:
        """Set ``user``'s SCRAM credential for ``mechanism`` (SCRAM-SHA-256 or
        SCRAM-SHA-512), or delete it when ``password`` is None. The password is
        salted here and only the salted keys travel and are stored (in the
        controller's metadata log); it is never logged. SASL/PLAIN logins check
        against these credentials too.

        Raises:
            UnacceptableCredentialError: unknown mechanism, empty user or password,
                iterations outside [4096, 16384].
            ResourceNotFoundError: deleting a credential the user does not have.
        """
        from raystream.errors import error_for_code
        from raystream.security.scram import make_credential

        if password is None:
            upsertions, deletions = [], [(user, mechanism)]
            make_credential(mechanism, "-", iterations)  # checks the mechanism
        else:
            upsertions = [(user, make_credential(mechanism, password, iterations).to_json())]
            deletions = []
        outcome = self.cluster.call("alter_scram_credentials", upsertions, deletions)
        failed = outcome.get(user)
        if failed is not None:
            raise error_for_code(*failed)

    def describe_user_scram_credentials(
        self, users: list[str] | None = None
    ) -> dict[str, list[tuple[str, int]]]:
        """``{user: [(mechanism, iterations), ...]}`` of the named users (None: every
        user with credentials); never the keys."""
        return self.cluster.call("describe_scram_credentials", users)

    def delete_records(
        self, offsets: dict[TopicPartition, int], timeout_ms: int = 30_000
    ) -> dict[TopicPartition, int]:
        """Delete the records of each partition below the given offset (Kafka's
        DeleteRecords): its log start offset moves there, so they are never served
        again and whole segments below it free their disk. -1 means the high watermark.

        Returns each partition's new log start offset (Kafka's low watermark). A leader
        that moves or restarts is found again until ``timeout_ms`` has passed.

        Raises:
            OffsetOutOfRangeError: an offset is above the partition's high watermark.
            UnknownTopicOrPartitionError: no such topic or partition.
            InvalidRequestError: an offset below -1 or not an integer.
            RaystreamTimeoutError: a partition's leader did not answer within the time.
        """
        deadline = time.monotonic() + timeout_ms / 1000
        result: dict[TopicPartition, int] = {}
        for tp, offset in offsets.items():
            backoff = Backoff()
            while True:
                # A partition that does not exist fails here, without a retry.
                leader = self.cluster.require_partition(tp.topic, tp.partition).leader_handle
                try:
                    if leader is None:
                        raise LeaderNotAvailableError(f"{tp.topic}-{tp.partition} has no leader")
                    remaining = max(deadline - time.monotonic(), 0.001)
                    answer = outcome(
                        send(leader, DeleteRecordsRequest(tp.topic, tp.partition, offset)),
                        remaining,
                        f"delete_records of {tp.topic}-{tp.partition}",
                    )
                    answer.raise_for_error()
                    result[tp] = answer.low_watermark
                    break
                except RaystreamError as error:
                    if not error.retriable or time.monotonic() >= deadline:
                        raise
                    time.sleep(min(backoff.next_s(), max(deadline - time.monotonic(), 0.0)))
                    self.cluster.forget(tp.topic)
        return result

    # ------------------------------------------------------------------------ ACLs

    def create_acls(self, bindings: list[AclBinding]) -> None:
        """Add ACL bindings (Kafka's CreateAcls); in force on every Kafka listener
        within a second. One already there is kept once.

        Raises:
            SecurityDisabledError: the broker's ``authorizer.class.name`` is empty.
            InvalidRequestError: an entry is not an AclBinding.
        """
        self.cluster.call("create_acls", [_binding(b) for b in bindings])

    def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The bindings ``acl_filter`` matches (None: all), in creation order.

        Raises:
            SecurityDisabledError: the broker's ``authorizer.class.name`` is empty.
        """
        return self.cluster.call("describe_acls", _filter(acl_filter))

    def delete_acls(
        self, acl_filter: AclBindingFilter | list[AclBindingFilter]
    ) -> list[AclBinding]:
        """Delete the bindings the filter (or any of the filters) matches; returns them.

        Raises:
            SecurityDisabledError: the broker's ``authorizer.class.name`` is empty.
        """
        filters = acl_filter if isinstance(acl_filter, list) else [acl_filter]
        deleted = self.cluster.call("delete_acls", [_filter(f) for f in filters])
        return [b for matched in deleted for b in matched]


def _binding(value: Any) -> AclBinding:
    if not isinstance(value, AclBinding):
        raise InvalidRequestError(f"create_acls takes AclBinding objects, not {value!r}")
    return value


def _filter(value: Any) -> AclBindingFilter:
    if value is None:
        return AclBindingFilter()
    if not isinstance(value, AclBindingFilter):
        raise InvalidRequestError(f"expected an AclBindingFilter (or None), not {value!r}")
    return value
