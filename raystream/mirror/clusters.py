"""The clusters MirrorMaker reads from and writes to, behind one small interface.

A source is either another raystream cluster (a namespace on this process's Ray,
through raystream's own clients) or any Kafka-protocol cluster (Apache Kafka, Tansu,
or a raystream on another Ray cluster through its Kafka listener) through
confluent-kafka with the user's client properties: TLS and SASL settings pass through
as librdkafka reads them, and TLS hostname verification stays on
(:class:`~raystream.mirror.config.ClusterSpec` refuses to turn it off).

Reads come back as one Arrow table in the consumer's columnar layout (topic,
partition, offset, timestamp, key, value, headers), whichever client fetched them, so
the source task works on tables only. The target is a raystream cluster
(:class:`RaystreamCluster`), which also creates remote topics, follows partition
counts and configs, and takes synced group offsets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from raystream.errors import (
    ConnectError,
    GroupIdNotFoundError,
    NonEmptyGroupError,
    RetriableConnectError,
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
KAFKA_TIMEOUT_S = 15.0

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
    """The part of a source topic's config the remote topic follows."""
    return {
        key: str(value).lower() if isinstance(value, bool) else str(value)
        for key, value in config.items()
        if key in TOPIC_CONFIG_KEYS and key not in CONFIGS_NOT_SYNCED and value is not None
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


class Reader:
    """Reads assigned partitions from given positions, as Arrow tables."""

    def assign(self, positions: Mapping[TopicPartition, int | None]) -> None:
        """Read these partitions from these offsets (None: from the earliest)."""
        raise NotImplementedError

    def poll(self, max_records: int, timeout_s: float) -> pa.Table:
        """Records read since the last call, in :data:`READ_SCHEMA`'s layout."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def open_cluster(spec: ClusterSpec) -> SourceCluster:
    """The adapter for ``spec``: :class:`RaystreamCluster` or :class:`KafkaCluster`."""
    if spec.is_raystream:
        return RaystreamCluster.attach(spec)
    return KafkaCluster(spec)


# ------------------------------------------------------------------ raystream


class RaystreamCluster(SourceCluster):
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
        """A typed topic's value schema (None for a byte topic)."""
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
        """Whether the group has members now (their commits would win over a sync)."""
        try:
            return bool(self.admin.describe_group(group).members)
        except GroupIdNotFoundError:
            return False

    def set_group_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> bool:
        """Commit ``offsets`` for an inactive group; False if it has members (MM2 only
        syncs groups that are not consuming on the target)."""
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
        """Create ``name`` (or add partitions up to ``partitions``); True if it changed."""
        try:
            current = len(self.admin.describe_topic(name).partitions)
        except UnknownTopicOrPartitionError:
            try:
                self.admin.create_topic(
                    name, partitions, replication_factor, config=dict(config), schema=schema
                )
            except TopicAlreadyExistsError:
                return False
            return True
        if current < partitions:
            self.admin.create_partitions(name, partitions)
            return True
        return False

    def alter_config(self, name: str, config: Mapping[str, str]) -> bool:
        """Set the keys of ``config`` whose values differ; True if any did."""
        current = synced_configs(self.admin.describe_topic(name).config)
        changed = {k: v for k, v in config.items() if current.get(k) != v}
        if changed:
            self.admin.alter_topic_config(name, changed)
        return bool(changed)

    def reader(self) -> Reader:
        return _RaystreamReader(self.cluster)

    def close(self) -> None:
        if self._offsets_reader is not None:
            self._offsets_reader.close()
            self._offsets_reader = None
        self.admin.close()


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

    def close(self) -> None:
        self.consumer.close(autocommit=False)


# ------------------------------------------------------------------ Kafka protocol


class KafkaCluster(SourceCluster):
    """Any Kafka-protocol cluster, through confluent-kafka (librdkafka).

    ``spec.kafka`` are librdkafka properties (``bootstrap.servers``, ``security.protocol``,
    ``ssl.ca.location``, ``sasl.mechanism``, ``sasl.username``, ...), passed as given.
    """

    def __init__(self, spec: ClusterSpec) -> None:
        from confluent_kafka.admin import AdminClient

        self.alias = spec.alias
        self.properties = dict(spec.kafka)
        self.properties.setdefault("ssl.endpoint.identification.algorithm", "https")
        self.admin = AdminClient(self.properties)
        self._meta_consumer: Any = None

    def _metadata(self) -> Any:
        try:
            return self.admin.list_topics(timeout=KAFKA_TIMEOUT_S)
        except Exception as error:  # confluent's KafkaException: the cluster is unreachable
            raise RetriableConnectError(f"cluster {self.alias!r}: metadata: {error}") from None

    def list_topics(self) -> list[str]:
        return sorted(self._metadata().topics)

    def partitions(self, topic: str) -> int:
        found = self._metadata().topics.get(topic)
        if found is None or found.error is not None:
            raise UnknownTopicOrPartitionError(f"cluster {self.alias!r} has no topic {topic!r}")
        return len(found.partitions)

    def topic_config(self, topic: str) -> dict[str, str]:
        from confluent_kafka.admin import ConfigResource

        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        try:
            entries = self.admin.describe_configs([resource])[resource].result(
                timeout=KAFKA_TIMEOUT_S
            )
        except Exception:  # a broker without DescribeConfigs (some Kafka-protocol peers)
            return {}
        return synced_configs(
            {name: e.value for name, e in entries.items() if not e.is_default and e.value}
        )

    def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        from confluent_kafka import TopicPartition as KafkaTP

        if self._meta_consumer is None:
            self._meta_consumer = _kafka_consumer(self.properties)
        ends = {}
        for tp in tps:
            try:
                _, high = self._meta_consumer.get_watermark_offsets(
                    KafkaTP(tp.topic, tp.partition), timeout=KAFKA_TIMEOUT_S
                )
            except Exception as error:
                raise RetriableConnectError(f"cluster {self.alias!r}: offsets: {error}") from None
            ends[tp] = high
        return ends

    def group_ids(self) -> list[str]:
        try:
            listed = self.admin.list_consumer_groups().result(timeout=KAFKA_TIMEOUT_S)
        except Exception as error:
            raise RetriableConnectError(f"cluster {self.alias!r}: groups: {error}") from None
        return sorted(g.group_id for g in listed.valid)

    def group_offsets(self, group: str) -> dict[TopicPartition, int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        request = [ConsumerGroupTopicPartitions(group)]
        try:
            found = self.admin.list_consumer_group_offsets(request)[group].result(
                timeout=KAFKA_TIMEOUT_S
            )
        except Exception:
            return {}
        return {
            TopicPartition(tp.topic, tp.partition): tp.offset
            for tp in found.topic_partitions
            if tp.offset >= 0 and tp.error is None
        }

    def reader(self) -> Reader:
        return _KafkaReader(self.properties)

    def close(self) -> None:
        if self._meta_consumer is not None:
            self._meta_consumer.close()
            self._meta_consumer = None


def _kafka_consumer(properties: Mapping[str, str]) -> Any:
    from confluent_kafka import Consumer

    config: dict[str, Any] = {
        "group.id": "raystream-mirror",  # never joins nor commits: partitions are assigned
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "fetch.wait.max.ms": 50,
        "fetch.queue.backoff.ms": 10,
    }
    config.update(properties)
    return Consumer(config)


class _KafkaReader(Reader):
    def __init__(self, properties: Mapping[str, str]) -> None:
        self.consumer = _kafka_consumer(properties)
        self.assigned = False

    def assign(self, positions: Mapping[TopicPartition, int | None]) -> None:
        from confluent_kafka import OFFSET_BEGINNING
        from confluent_kafka import TopicPartition as KafkaTP

        self.consumer.assign(
            [
                KafkaTP(tp.topic, tp.partition, OFFSET_BEGINNING if offset is None else offset)
                for tp, offset in positions.items()
            ]
        )
        self.assigned = bool(positions)

    def poll(self, max_records: int, timeout_s: float) -> pa.Table:
        """One ``consume`` call's records as a table (librdkafka hands out messages one
        by one; this is the one per-record loop of the mirror, on the source's side)."""
        if not self.assigned:
            return READ_SCHEMA.empty_table()
        messages = self.consumer.consume(num_messages=max_records, timeout=timeout_s)
        topics, partitions, offsets, timestamps, keys, values, headers = [], [], [], [], [], [], []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.retriable() or not error.fatal():
                    continue
                raise ConnectError(f"reading {message.topic()}: {error}")
            topics.append(message.topic())
            partitions.append(message.partition())
            offsets.append(message.offset())
            timestamps.append(message.timestamp()[1])
            keys.append(message.key())
            values.append(message.value())
            found = message.headers()
            headers.append([{"key": k, "value": v} for k, v in found] if found else [])
        return pa.table(
            [topics, partitions, offsets, timestamps, keys, values, headers], schema=READ_SCHEMA
        )

    def close(self) -> None:
        self.consumer.close()
