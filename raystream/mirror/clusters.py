"""The clusters MirrorMaker reads from and writes to, behind two small interfaces.

A cluster is either another raystream cluster (a namespace on this process's Ray,
through raystream's own clients: :class:`RaystreamCluster`) or any Kafka-protocol
cluster (Apache Kafka, Tansu, or a raystream on another Ray cluster through its Kafka
listener) through confluent-kafka with the user's client properties
(:class:`~raystream.mirror.kafka_cluster.KafkaCluster`): TLS and SASL settings pass
through as librdkafka reads them, and TLS hostname verification stays on
(:class:`~raystream.mirror.config.ClusterSpec` refuses to turn it off). Either kind is
a :class:`SourceCluster` and a :class:`TargetCluster`, so a flow may go both ways.

Reads come back as one Arrow table in the consumer's columnar layout (topic,
partition, offset, timestamp, key, value, headers), whichever client fetched them, so
the source task works on tables only. Writes go through a :class:`Writer`, which takes
one Arrow table per remote partition and tells through a :class:`Delivery` where its
first and last rows landed (the offset syncs need it); transactional writers put the
records and the flow's source offsets in one transaction of the target.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from raystream.connectors.api import Delivery
from raystream.errors import (
    ConnectError,
    GroupIdNotFoundError,
    NonEmptyGroupError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raystream.log.config import LogConfig
from raystream.mirror.config import ClusterSpec
from raystream.types import TopicPartition

#: Topic config keys a raystream topic takes (Kafka's names).
TOPIC_CONFIG_KEYS = frozenset(f.name.replace("_", ".") for f in dataclasses.fields(LogConfig))
#: MM2's DefaultConfigPropertyFilter: configs that describe a cluster, not a topic's data.
CONFIGS_NOT_SYNCED = frozenset(
    {
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "message.timestamp.type",
        "message.timestamp.difference.max.ms",
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
    }
)
READ_TIMEOUT_S = 60.0

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
READ_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADERS_TYPE),
    ]
)


def synced_configs(config: Mapping[str, Any]) -> dict[str, str]:
    """The part of a source topic's config the remote topic follows (MM2's filter; the
    target keeps what it knows of it)."""
    return {
        key: str(value).lower() if isinstance(value, bool) else str(value)
        for key, value in config.items()
        if key not in CONFIGS_NOT_SYNCED and value is not None
    }


class SourceCluster:
    """What MirrorMaker reads of a cluster: topics, records, end offsets, group offsets."""

    alias: str

    def list_topics(self) -> list[str]:
        raise NotImplementedError

    def partitions(self, topic: str) -> int:
        """The topic's partition count (UnknownTopicOrPartitionError if it is gone)."""
        raise NotImplementedError

    def topic_config(self, topic: str) -> dict[str, str]:
        """The topic's non-default configs that a remote topic should follow."""
        raise NotImplementedError

    def topic_schema(self, topic: str) -> pa.Schema | None:
        """A typed topic's value schema (None for a byte topic, and on Kafka)."""
        return None

    def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        raise NotImplementedError

    def group_ids(self) -> list[str]:
        raise NotImplementedError

    def group_offsets(self, group: str) -> dict[TopicPartition, int]:
        """The group's committed offsets ({} for an unknown group)."""
        raise NotImplementedError

    def reader(self) -> Reader:
        raise NotImplementedError

    def close(self) -> None:
        """Release clients."""


class TargetCluster:
    """What MirrorMaker does to a target: remote and internal topics kept in shape,
    records written, group offsets synced into groups that are not consuming there."""

    alias: str

    def list_topics(self) -> list[str]:
        raise NotImplementedError

    def partitions(self, topic: str) -> int:
        """The topic's partition count (UnknownTopicOrPartitionError if there is none)."""
        raise NotImplementedError

    def ensure_topic(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, str],
        replication_factor: int | None = None,
        schema: pa.Schema | None = None,
    ) -> bool:
        """Create ``name`` (or add partitions up to ``partitions``); True if it changed."""
        raise NotImplementedError

    def alter_config(self, name: str, config: Mapping[str, str]) -> bool:
        """Set the keys of ``config`` whose values differ; True if any did."""
        raise NotImplementedError

    def group_is_active(self, group: str) -> bool:
        """Whether the group has members now (their commits would win over a sync)."""
        raise NotImplementedError

    def group_offsets(self, group: str) -> dict[TopicPartition, int]:
        raise NotImplementedError

    def set_group_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> bool:
        """Commit ``offsets`` for an inactive group; False if it has members (MM2 only
        syncs groups that are not consuming on the target)."""
        raise NotImplementedError

    def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        raise NotImplementedError

    def writer(self, transactional_id: str | None = None) -> Writer:
        """A writer of this cluster (transactional with ``transactional_id``)."""
        raise NotImplementedError

    def reader(self) -> Reader:
        """A read_committed reader (internal topics: offsets, offset syncs, checkpoints)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release clients."""


class Reader:
    """Reads assigned partitions from given positions, as Arrow tables."""

    def assign(self, positions: Mapping[TopicPartition, int | None]) -> None:
        """Read these partitions from these offsets (None: from the earliest)."""
        raise NotImplementedError

    def poll(self, max_records: int, timeout_s: float) -> pa.Table:
        """Records read since the last call, in :data:`READ_SCHEMA`'s layout."""
        raise NotImplementedError

    def position(self, tp: TopicPartition) -> int:
        """The next offset to read of ``tp`` (past transaction markers); -1 before the
        first fetch told it."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Writer:
    """Writes MirrorMaker's batches and small records to a target.

    A round: ``send_batch`` per remote partition, ``settle`` (every batch acknowledged
    and its delivery known, or an error), then the source offsets with ``send`` and,
    for a transactional writer, ``commit_transaction``.
    """

    def init_transactions(self) -> None:
        """Fence older writers of the transactional id; abort what they left open."""
        raise NotImplementedError

    def begin_transaction(self) -> None:
        raise NotImplementedError

    def commit_transaction(self) -> None:
        raise NotImplementedError

    def abort_transaction(self) -> None:
        raise NotImplementedError

    def send_batch(self, topic: str, partition: int, table: pa.Table) -> Delivery:
        """Write ``table`` (columns timestamp, key, value or a typed topic's columns,
        headers) to ``topic``'s ``partition``, rows in order."""
        raise NotImplementedError

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> None:
        """Buffer one small record (an offset, a sync, a checkpoint, a heartbeat)."""
        raise NotImplementedError

    def send_many(self, topic: str, partition: int, records: Sequence[tuple[bytes, bytes]]) -> None:
        """Write many small ``(key, value)`` records to ``topic``'s ``partition``, in
        order (the offset syncs of a batch): as :meth:`send` each, unless the writer
        has a cheaper way for many."""
        for key, value in records:
            self.send(topic, value, key, partition=partition)

    def settle(self) -> None:
        """Return once every batch sent is acknowledged and its :class:`Delivery` known.

        Raises:
            RetriableConnectError: a row was not written (the round must be read again).
        """
        raise NotImplementedError

    def flush(self) -> None:
        """Return once everything buffered is written."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def open_cluster(spec: ClusterSpec) -> RaystreamCluster | Any:
    """The adapter for ``spec``: :class:`RaystreamCluster` or
    :class:`~raystream.mirror.kafka_cluster.KafkaCluster` (both a source and a target)."""
    if spec.is_raystream:
        return RaystreamCluster.attach(spec)
    from raystream.mirror.kafka_cluster import KafkaCluster

    return KafkaCluster(spec)


def read_records(
    cluster: SourceCluster | TargetCluster, topic: str, timeout_s: float = READ_TIMEOUT_S
) -> list[tuple[bytes | None, bytes | None]]:
    """``(key, value)`` of every committed record of ``topic``'s partition 0, up to its
    end now ([] if the topic does not exist): how the offsets, offset-syncs and
    checkpoints topics are read back.

    Raises:
        ConnectError: the end was not reached within ``timeout_s`` (an open
            transaction of another writer holds it back).
    """
    if topic not in cluster.list_topics():
        return []
    tp = TopicPartition(topic, 0)
    end = cluster.end_offsets([tp])[tp]
    found: list[tuple[bytes | None, bytes | None]] = []
    if end <= 0:
        return found
    reader = cluster.reader()
    try:
        reader.assign({tp: None})
        deadline = time.monotonic() + timeout_s
        while reader.position(tp) < end:
            if time.monotonic() > deadline:
                raise ConnectError(f"reading {topic} stalled at offset {reader.position(tp)}")
            table = reader.poll(100_000, 0.2)
            found += zip(
                table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
            )
    finally:
        reader.close()
    return found


# ------------------------------------------------------------------ raystream


class RaystreamCluster(SourceCluster, TargetCluster):
    """A raystream cluster, through raystream's clients (source and target)."""

    def __init__(self, alias: str, cluster: Any) -> None:
        self.alias = alias
        self.cluster = cluster
        self.admin = cluster.admin()
        self._offsets_reader: Any = None

    @classmethod
    def attach(cls, spec: ClusterSpec) -> RaystreamCluster:
        """The running cluster of ``spec.namespace``; never starts one (a typo would make
        an empty cluster to mirror from).

        Raises:
            ConnectError: no raystream cluster runs in that namespace.
        """
        from raystream.actors import CONTROLLER_NAME
        from raystream.client.cluster import Cluster
        from raystream.transport import ensure_ray, named_actor, wait_result

        ensure_ray(spec.address)
        controller = named_actor(CONTROLLER_NAME, spec.namespace)
        if controller is None:
            raise ConnectError(
                f"cluster {spec.alias!r}: no raystream cluster runs in namespace "
                f"{spec.namespace!r} of this Ray"
            )
        config = wait_result(controller.broker_config.remote(), 60, "controller config")
        return cls(spec.alias, Cluster(spec.namespace, config["data.dir"], controller))

    def list_topics(self) -> list[str]:
        return self.admin.list_topics()

    def partitions(self, topic: str) -> int:
        return len(self.admin.describe_topic(topic).partitions)

    def topic_config(self, topic: str) -> dict[str, str]:
        return synced_configs(self.admin.describe_topic(topic).config)

    def topic_schema(self, topic: str) -> pa.Schema | None:
        return self.admin.describe_topic(topic).schema

    def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        tps = list(tps)
        if not tps:
            return {}
        if self._offsets_reader is None:
            self._offsets_reader = self.cluster.consumer(enable_auto_commit=False)
        return self._offsets_reader.end_offsets(tps)

    def group_ids(self) -> list[str]:
        return self.admin.list_groups()

    def group_offsets(self, group: str) -> dict[TopicPartition, int]:
        try:
            return dict(self.admin.describe_group(group).offsets)
        except GroupIdNotFoundError:
            return {}

    def group_is_active(self, group: str) -> bool:
        try:
            return bool(self.admin.describe_group(group).members)
        except GroupIdNotFoundError:
            return False

    def set_group_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> bool:
        by_topic: dict[str, dict[int, int]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, {})[tp.partition] = offset
        try:
            for topic, partitions in sorted(by_topic.items()):
                self.admin.reset_offsets(group, topic, partitions)
        except NonEmptyGroupError:
            return False
        return True

    def ensure_topic(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, str],
        replication_factor: int | None = None,
        schema: pa.Schema | None = None,
    ) -> bool:
        """As :meth:`TargetCluster.ensure_topic`; keys raystream does not know (a Kafka
        source's broker-specific configs) are left out."""
        try:
            current = len(self.admin.describe_topic(name).partitions)
        except UnknownTopicOrPartitionError:
            try:
                self.admin.create_topic(
                    name, partitions, replication_factor, config=_known(config), schema=schema
                )
            except TopicAlreadyExistsError:
                return False
            return True
        if current < partitions:
            self.admin.create_partitions(name, partitions)
            return True
        return False

    def alter_config(self, name: str, config: Mapping[str, str]) -> bool:
        current = synced_configs(self.admin.describe_topic(name).config)
        changed = {k: v for k, v in _known(config).items() if current.get(k) != v}
        if changed:
            self.admin.alter_topic_config(name, changed)
        return bool(changed)

    def writer(self, transactional_id: str | None = None) -> Writer:
        return RaystreamWriter(self.cluster, transactional_id)

    def reader(self) -> Reader:
        return _RaystreamReader(self.cluster)

    def close(self) -> None:
        if self._offsets_reader is not None:
            self._offsets_reader.close()
            self._offsets_reader = None
        self.admin.close()


def _known(config: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in config.items() if k in TOPIC_CONFIG_KEYS}


class _RaystreamReader(Reader):
    def __init__(self, cluster: Any) -> None:
        self.consumer = cluster.consumer(
            enable_auto_commit=False, auto_offset_reset="earliest", isolation_level="read_committed"
        )

    def assign(self, positions: Mapping[TopicPartition, int | None]) -> None:
        self.consumer.assign(list(positions))
        for tp, offset in positions.items():
            if offset is None:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, offset)

    def poll(self, max_records: int, timeout_s: float) -> pa.Table:
        if not self.consumer.assignment():
            return READ_SCHEMA.empty_table()
        return self.consumer.poll_arrow(timeout_ms=timeout_s * 1000, max_records=max_records)

    def position(self, tp: TopicPartition) -> int:
        return self.consumer.position(tp)

    def close(self) -> None:
        self.consumer.close(autocommit=False)


class RaystreamWriter(Writer):
    """raystream's producer (acks=all; idempotent, and transactional when asked).

    ``send_batch`` returns once the batch is acknowledged, so ``settle`` has nothing to
    wait for; a batch's rows land at consecutive offsets (one writer per remote topic).
    """

    def __init__(self, cluster: Any, transactional_id: str | None) -> None:
        options: dict[str, Any] = {"linger_ms": 5, "acks": "all"}
        if transactional_id is not None:
            options["transactional_id"] = transactional_id
        self.producer = cluster.producer(**options)

    def init_transactions(self) -> None:
        self.producer.init_transactions()

    def begin_transaction(self) -> None:
        self.producer.begin_transaction()

    def commit_transaction(self) -> None:
        self.producer.commit_transaction()

    def abort_transaction(self) -> None:
        self.producer.abort_transaction()

    def send_batch(self, topic: str, partition: int, table: pa.Table) -> Delivery:
        metadata = self.producer.send_batch(topic, table, partition=partition)
        first = metadata[0].offset if metadata and metadata[0].offset >= 0 else None
        return Delivery(table.num_rows, first)

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> None:
        self.producer.send(
            topic,
            value=value,
            key=key,
            partition=partition,
            timestamp_ms=timestamp_ms,
            headers=list(headers) if headers else None,
        )

    def send_many(self, topic: str, partition: int, records: Sequence[tuple[bytes, bytes]]) -> None:
        """As :meth:`Writer.send_many`, as one table in one request (acknowledged on
        return): hundreds of ``send`` calls would cost more than the batch they sync."""
        if len(records) < 2:
            super().send_many(topic, partition, records)
            return
        keys, values = zip(*records, strict=True)
        table = pa.table(
            {"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())}
        )
        self.producer.send_batch(topic, table, partition=partition)

    def settle(self) -> None:
        pass

    def flush(self) -> None:
        self.producer.flush()

    def close(self) -> None:
        self.producer.close()
