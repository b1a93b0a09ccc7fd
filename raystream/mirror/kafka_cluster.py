"""Any Kafka-protocol cluster as a MirrorMaker source and target, through confluent-kafka.

Apache Kafka, Tansu, or a raystream on another Ray cluster through its Kafka listener:
librdkafka speaks to each the same way, with the user's client properties.

As a target, records are written by :class:`KafkaWriter`: one Arrow table per remote
partition, produced in a tight loop (``produce`` per row is librdkafka's only way in;
nothing else happens per row), with one ``flush`` per round. The producer is idempotent
(order kept and no duplicates under retries) and, for exactly-once, transactional: the
records and the flow's source offsets (in an offsets topic of the same target) commit
together, as MirrorMaker 2 does with KIP-618; ``send_offsets_to_transaction`` is not
used, the source offsets are not a consumer group's of this cluster.

Where a batch landed is asked of its first and last rows only (a delivery report per
row would cost a Python call per record). With one idempotent writer per remote
partition the rows in between sit at consecutive offsets; a span shorter than the
batch means rows were lost and the round is read again; a longer span means something
else wrote there, and the offset syncs then pin only the first and last rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raystream.errors import (
    ConnectError,
    InvalidConfigError,
    ProducerFencedError,
    RaystreamError,
    RetriableConnectError,
    UnknownTopicOrPartitionError,
)
from raystream.mirror.clusters import (
    READ_SCHEMA,
    Delivery,
    Reader,
    SourceCluster,
    TargetCluster,
    Writer,
    synced_configs,
)
from raystream.mirror.config import ClusterSpec
from raystream.security.tls import librdkafka_tls
from raystream.types import TopicPartition

KAFKA_TIMEOUT_S = 15.0
#: How long a round's records may take to be acknowledged before it is read again.
SETTLE_TIMEOUT_S = 60.0
#: The writer's producer settings; the cluster's own properties override them.
PRODUCER_DEFAULTS: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
}
#: Columns of a mirror batch that are not the value (a typed topic's value is the rest).
_NOT_VALUE = frozenset({"partition", "timestamp", "key", "headers"})


def kafka_error(what: str, error: BaseException) -> RaystreamError:
    """``error`` (confluent's KafkaException) as a raystream error naming ``what``:
    RetriableConnectError when librdkafka calls it retriable or abortable."""
    found = error.args[0] if error.args else None
    text = found.str() if hasattr(found, "str") else str(error)
    if getattr(found, "fatal", lambda: False)():
        return _fatal_error(f"{what}: {text}")
    retriable = bool(
        getattr(found, "retriable", lambda: False)()
        or getattr(found, "txn_requires_abort", lambda: False)()
    )
    return (RetriableConnectError if retriable else ConnectError)(f"{what}: {text}")


def _fatal_error(text: str) -> RaystreamError:
    """A fatal producer error of librdkafka: fenced (a newer instance of the flow took
    the transactional id) as ProducerFencedError, which fails the flow as Kafka Connect
    fails a fenced task; any other as ConnectError."""
    if "fenced" in text.lower() or "old epoch" in text.lower():
        return ProducerFencedError(f"the producer was fenced: {text}")
    return ConnectError(f"the producer failed for good: {text}")


def _code(error: BaseException) -> int | None:
    found = error.args[0] if error.args else None
    return found.code() if hasattr(found, "code") else None


class KafkaCluster(SourceCluster, TargetCluster):
    """Any Kafka-protocol cluster, through confluent-kafka (librdkafka).

    ``spec.kafka`` are librdkafka properties (``bootstrap.servers``, ``security.protocol``,
    ``ssl.ca.location``, ``sasl.mechanism``, ``sasl.username``, ...), passed as given,
    but for the Java client's TLS stores (``ssl.truststore.*``, ``ssl.keystore.type``),
    given as librdkafka takes them (:func:`~raystream.security.tls.librdkafka_tls`).

    Raises:
        InvalidConfigError: a TLS store that cannot be used (a JKS one, a wrong
            password), naming the cluster.
    """

    def __init__(self, spec: ClusterSpec) -> None:
        from confluent_kafka.admin import AdminClient

        self.alias = spec.alias
        try:
            self.properties = librdkafka_tls(spec.kafka)
        except InvalidConfigError as error:
            raise InvalidConfigError(f"cluster {spec.alias!r}: {error}") from None
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

    def _configs(self, topic: str) -> Any:
        from confluent_kafka.admin import ConfigResource

        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        return self.admin.describe_configs([resource])[resource].result(timeout=KAFKA_TIMEOUT_S)

    def topic_config(self, topic: str) -> dict[str, str]:
        try:
            entries = self._configs(topic)
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

    # ------------------------------------------------------------ as a target

    def ensure_topic(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, str],
        replication_factor: int | None = None,
        schema: pa.Schema | None = None,
    ) -> bool:
        """As :meth:`TargetCluster.ensure_topic` (``schema`` is not Kafka's: a typed
        topic's values are written as JSON objects, as raystream's Kafka listener
        shows them).

        Raises:
            ConnectError: the broker refused the topic, or cannot add partitions
                (CreatePartitions unsupported): the message says which.
        """
        from confluent_kafka import KafkaError
        from confluent_kafka.admin import NewPartitions, NewTopic

        found = self._metadata().topics.get(name)
        if found is None or found.error is not None:
            new = NewTopic(name, partitions, replication_factor or -1, config=dict(config))
            try:
                self.admin.create_topics([new], operation_timeout=KAFKA_TIMEOUT_S)[name].result(
                    timeout=KAFKA_TIMEOUT_S
                )
            except Exception as error:
                if _code(error) == KafkaError.TOPIC_ALREADY_EXISTS:
                    return False
                raise kafka_error(
                    f"cluster {self.alias!r}: creating topic {name!r}", error
                ) from None
            return True
        if len(found.partitions) >= partitions:
            return False
        try:
            self.admin.create_partitions(
                [NewPartitions(name, partitions)], operation_timeout=KAFKA_TIMEOUT_S
            )[name].result(timeout=KAFKA_TIMEOUT_S)
        except Exception as error:
            raise kafka_error(
                f"cluster {self.alias!r}: growing {name!r} from {len(found.partitions)} to "
                f"{partitions} partitions",
                error,
            ) from None
        return True

    def alter_config(self, name: str, config: Mapping[str, str]) -> bool:
        """As :meth:`TargetCluster.alter_config`, with IncrementalAlterConfigs (SET per
        key, other keys untouched); values are compared whether or not the broker calls
        them defaults.

        Raises:
            ConnectError: the broker refused a key or value.
        """
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        try:
            current = {key: entry.value for key, entry in self._configs(name).items()}
        except Exception as error:
            raise kafka_error(f"cluster {self.alias!r}: configs of {name!r}", error) from None
        changed = {k: v for k, v in config.items() if current.get(k) != v}
        if not changed:
            return False
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in sorted(changed.items())
        ]
        resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=entries)
        try:
            self.admin.incremental_alter_configs([resource])[resource].result(
                timeout=KAFKA_TIMEOUT_S
            )
        except Exception as error:
            raise kafka_error(
                f"cluster {self.alias!r}: altering {sorted(changed)}", error
            ) from None
        return True

    def group_is_active(self, group: str) -> bool:
        """Whether the group is anything but Empty or Dead (some brokers report a
        consuming group without its members)."""
        from confluent_kafka import ConsumerGroupState

        try:
            found = self.admin.describe_consumer_groups([group])[group].result(
                timeout=KAFKA_TIMEOUT_S
            )
        except Exception as error:
            raise kafka_error(
                f"cluster {self.alias!r}: describing group {group!r}", error
            ) from None
        return found.state not in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)

    def set_group_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> bool:
        """As :meth:`TargetCluster.set_group_offsets`, with AlterConsumerGroupOffsets
        (which a broker refuses for a group with members)."""
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka import TopicPartition as KafkaTP

        request = ConsumerGroupTopicPartitions(
            group, [KafkaTP(tp.topic, tp.partition, o) for tp, o in sorted(offsets.items())]
        )
        try:
            done = self.admin.alter_consumer_group_offsets([request])[group].result(
                timeout=KAFKA_TIMEOUT_S
            )
        except Exception:  # a group with members, or one that is rebalancing
            return False
        return all(tp.error is None for tp in done.topic_partitions)

    def writer(self, transactional_id: str | None = None) -> Writer:
        return KafkaWriter(self.properties, transactional_id)

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

    def position(self, tp: TopicPartition) -> int:
        from confluent_kafka import TopicPartition as KafkaTP

        (found,) = self.consumer.position([KafkaTP(tp.topic, tp.partition)])
        return found.offset if found.offset >= 0 else -1

    def close(self) -> None:
        self.consumer.close()


# ------------------------------------------------------------------ writing


class KafkaWriter(Writer):
    """confluent-kafka's Producer writing mirror batches (module docstring).

    Args:
        properties: the cluster's client properties (over :data:`PRODUCER_DEFAULTS`).
        transactional_id: makes the writer transactional.
    """

    def __init__(self, properties: Mapping[str, str], transactional_id: str | None) -> None:
        from confluent_kafka import Producer

        config: dict[str, Any] = {**PRODUCER_DEFAULTS, **properties, "error_cb": self._on_error}
        if transactional_id is not None:
            config["transactional.id"] = transactional_id
        self.producer = Producer(config)
        self._deliveries: list[Delivery] = []
        self._failed: list[str] = []
        self._fatal: str | None = None

    def _on_error(self, error: Any) -> None:
        if error.fatal():
            self._fatal = error.str()

    def _call(self, what: str, call: Any, *args: Any) -> None:
        try:
            call(*args)
        except Exception as error:
            raise kafka_error(what, error) from None

    def init_transactions(self) -> None:
        self._call("init_transactions", self.producer.init_transactions, SETTLE_TIMEOUT_S)

    def begin_transaction(self) -> None:
        self._call("begin_transaction", self.producer.begin_transaction)

    def commit_transaction(self) -> None:
        self._call("commit_transaction", self.producer.commit_transaction, SETTLE_TIMEOUT_S)

    def abort_transaction(self) -> None:
        self._deliveries, self._failed = [], []
        self._call("abort_transaction", self.producer.abort_transaction, SETTLE_TIMEOUT_S)

    def send_batch(self, topic: str, partition: int, table: pa.Table) -> Delivery:
        rows = table.num_rows
        delivery = Delivery(rows)
        if not rows:
            return delivery
        values = kafka_values(table).to_pylist()
        keys = table.column("key").to_pylist()
        stamps = pc.fill_null(table.column("timestamp"), 0).to_pylist()
        headers = header_lists(table.column("headers"), rows)
        last = rows - 1
        first_report = self._report(delivery, 0)
        self._produce(topic, partition, values[0], keys[0], stamps[0], headers[0], first_report)
        produce = self.producer.produce
        for i in range(1, last):  # the tight loop: nothing but produce per row
            try:
                produce(
                    topic,
                    values[i],
                    keys[i],
                    partition=partition,
                    timestamp=stamps[i],
                    headers=headers[i],
                )
            except BufferError:
                self._produce(topic, partition, values[i], keys[i], stamps[i], headers[i], None)
        if last:
            report = self._report(delivery, last)
            self._produce(
                topic, partition, values[last], keys[last], stamps[last], headers[last], report
            )
        self._deliveries.append(delivery)
        self.producer.poll(0)
        return delivery

    def _produce(
        self,
        topic: str,
        partition: int,
        value: bytes | None,
        key: bytes | None,
        timestamp: int,
        headers: list[tuple[str, bytes]] | None,
        on_delivery: Any,
    ) -> None:
        while True:
            try:
                self.producer.produce(
                    topic,
                    value,
                    key,
                    partition=partition,
                    timestamp=timestamp,
                    headers=headers,
                    on_delivery=on_delivery,
                )
                return
            except BufferError:  # the local queue is full: let librdkafka send some
                self.producer.poll(0.05)

    def _report(self, delivery: Delivery, row: int) -> Any:
        """The delivery callback of row ``row`` (the first or the last) of a batch."""

        def report(error: Any, message: Any) -> None:
            if error is not None:
                self._failed.append(f"{message.topic()}[{message.partition()}]: {error.str()}")
                return
            if row == 0:
                delivery.first_offset = message.offset()
            if row == delivery.rows - 1:
                delivery.last_offset = message.offset()

        return report

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> None:
        def report(error: Any, message: Any) -> None:
            if error is not None:
                self._failed.append(f"{message.topic()}: {error.str()}")

        options: dict[str, Any] = {"on_delivery": report}
        if partition is not None:
            options["partition"] = partition
        if timestamp_ms is not None:
            options["timestamp"] = timestamp_ms
        if headers:
            options["headers"] = list(headers)
        try:
            self.producer.produce(topic, value, key, **options)
        except BufferError:
            self.producer.poll(0.05)
            self.producer.produce(topic, value, key, **options)
        except Exception as error:  # KafkaException: an unknown topic, a fatal producer
            raise kafka_error(f"writing to {topic!r}", error) from None

    def settle(self) -> None:
        """As :meth:`Writer.settle`: one ``flush``, then the deliveries checked.

        Raises:
            RetriableConnectError: a row failed, was not acknowledged in time, or rows
                are missing between a batch's first and last offsets.
            ProducerFencedError: a newer producer took the transactional id.
            ConnectError: the producer hit another fatal error (the idempotent
                producer lost its sequence): it cannot write any more.
        """
        remaining = self.producer.flush(SETTLE_TIMEOUT_S)
        deliveries, self._deliveries = self._deliveries, []
        failed, self._failed = self._failed, []
        if self._fatal is not None:
            raise _fatal_error(self._fatal)
        if remaining:
            raise RetriableConnectError(
                f"{remaining} records not acknowledged within {SETTLE_TIMEOUT_S:g} s"
            )
        if failed:
            raise RetriableConnectError(f"{len(failed)} writes failed, first: {failed[0]}")
        for delivery in deliveries:
            if delivery.rows and (delivery.first_offset is None or delivery.last_offset is None):
                raise RetriableConnectError("a batch was acknowledged without its offsets")
            if delivery.rows and delivery.last_offset - delivery.first_offset < delivery.rows - 1:
                raise RetriableConnectError(
                    f"a batch of {delivery.rows} rows landed between offsets "
                    f"{delivery.first_offset} and {delivery.last_offset}: rows are missing"
                )

    def flush(self) -> None:
        remaining = self.producer.flush(SETTLE_TIMEOUT_S)
        failed, self._failed = self._failed, []
        if remaining or failed:
            raise RetriableConnectError(
                f"flush: {remaining} records unacknowledged, {len(failed)} failed {failed[:1]}"
            )

    def close(self) -> None:
        self.producer.flush(SETTLE_TIMEOUT_S)


def kafka_values(table: pa.Table) -> pa.ChunkedArray | pa.Array:
    """A mirror batch's values as Kafka's bytes: the ``value`` column of a byte topic; a
    typed topic's columns as one JSON object per row, as raystream's Kafka listener
    gives them to Kafka clients."""
    if "value" in table.column_names:
        return table.column("value")
    from raystream.kafka.records import values_to_json

    names = [n for n in table.column_names if n not in _NOT_VALUE]
    columns = [table.column(n).combine_chunks() for n in names]
    return values_to_json(pa.StructArray.from_arrays(columns, names=names))


def header_lists(column: pa.ChunkedArray, rows: int) -> list[list[tuple[str, bytes]] | None]:
    """Each row's headers as confluent-kafka takes them (None for a row without any):
    flattened once, then cut per row."""
    headers = column.combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(headers), 0)
    if not pc.sum(lengths).as_py():
        return [None] * rows
    keys, values = pc.list_flatten(headers).flatten()
    pairs = list(zip(keys.to_pylist(), values.to_pylist(), strict=True))
    ends = np.cumsum(lengths.to_numpy(zero_copy_only=False))
    starts = ends - lengths.to_numpy(zero_copy_only=False)
    return [pairs[s:e] or None for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
