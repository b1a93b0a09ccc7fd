"""The Admin client: topics, configs and (with consumer groups) groups.

Names follow kafka-python's KafkaAdminClient where they exist; every call goes to the
controller actor, which validates and answers with an error code that becomes one of
:mod:`raystream.errors`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from raystream.client.cluster import Cluster, resolve_cluster
from raystream.errors import InvalidRequestError, UnsupportedError
from raystream.types import GroupDescription, TopicDescription


class Admin:
    """Create, inspect, alter and delete topics.

    Example:
        >>> admin = rs.connect().admin()                        # doctest: +SKIP
        >>> admin.create_topic("orders", partitions=3)           # doctest: +SKIP
    """

    def __init__(self, cluster: Cluster | None = None) -> None:
        self.cluster = resolve_cluster(cluster)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: dict[str, Any] | None = None,
        schema: pa.Schema | None = None,
    ) -> TopicDescription:
        """Create a topic; a ``schema`` makes a typed topic whose values are columns.

        Raises:
            TopicAlreadyExistsError, InvalidTopicError, InvalidPartitionsError,
            InvalidReplicationFactorError, InvalidConfigError: naming the bad value.
        """
        if schema is not None and not isinstance(schema, pa.Schema):
            raise InvalidRequestError(
                f"schema must be a pyarrow.Schema, not {type(schema).__name__}"
            )
        if schema is not None and len(schema) == 0:
            raise InvalidRequestError("schema has no fields")
        serialized = None if schema is None else schema.serialize().to_pybytes()
        self.cluster.call(
            "create_topic", name, partitions, replication_factor, config or {}, serialized
        )
        return self.describe_topic(name)

    def delete_topic(self, name: str) -> None:
        """Delete a topic and all its data."""
        self.cluster.call("delete_topic", name)
        self.cluster.forget(name)

    def list_topics(self) -> list[str]:
        """Topic names, sorted; internal topics (``__`` prefix) excluded."""
        return self.cluster.call("list_topics")

    def describe_topic(self, name: str) -> TopicDescription:
        """Partitions (leader, replicas, ISR, epoch, offsets) and effective config."""
        return self.cluster.call("describe_topic", name)

    def create_partitions(self, name: str, total: int) -> TopicDescription:
        """Grow ``name`` to ``total`` partitions (keyed records may map elsewhere after)."""
        self.cluster.call("create_partitions", name, total)
        self.cluster.forget(name)
        return self.describe_topic(name)

    def alter_topic_config(self, name: str, config: dict[str, Any]) -> dict[str, Any]:
        """Change topic config keys (Kafka's dotted names); returns the effective config."""
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
        """Consumer group ids."""
        raise UnsupportedError(_GROUPS)

    def describe_group(self, group_id: str) -> GroupDescription:
        """A consumer group's state, members, offsets and lag."""
        raise UnsupportedError(_GROUPS)

    def reset_offsets(self, group_id: str, topic: str, to: str | int) -> None:
        """Move a group's committed offsets on ``topic``."""
        raise UnsupportedError(_GROUPS)

    def close(self) -> None:
        """Nothing to release; kept for kafka-python compatibility."""


_GROUPS = (
    "consumer groups are not supported by this raystream version yet; use "
    "Consumer.assign() with offsets the application keeps"
)
