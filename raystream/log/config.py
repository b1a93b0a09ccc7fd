"""Topic-level configuration: what the log, the replicas and the clients obey per topic.

As in Kafka, the log's configuration *is* the topic configuration: segment size and age,
retention, compaction, flush policy, and the replication settings a partition needs.
"""

from __future__ import annotations

import dataclasses

from raystream.config import KafkaConfig, require

NEVER = 2**63 - 1
"""Sentinel for "no limit" in ms/message-count options (Kafka uses Long.MAX_VALUE)."""

COMPRESSION_TYPES = ("producer", "none", "uncompressed", "lz4", "zstd")
CLEANUP_POLICIES = ("delete", "compact", "compact,delete", "delete,compact")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclasses.dataclass(frozen=True)
class LogConfig(KafkaConfig):
    """Per-topic configuration, with Kafka's names and defaults.

    Flush policy default: like Kafka, ``flush_messages`` and ``flush_ms`` are unlimited,
    so the engine never fsyncs on its own and durability comes from replication
    (``acks=all`` with ``min.insync.replicas`` > 1) plus the OS flushing dirty pages.
    Forcing an fsync per append costs ~0.2 ms per batch on this class of disk; a topic
    that must survive a machine crash with a single replica sets ``flush.messages=1``.

    Attributes:
        segment_bytes: roll to a new segment when the active one would exceed this.
        segment_ms: roll when the active segment's first batch is older than this.
        index_interval_bytes: bytes of log between two offset/time index entries.
        retention_ms: delete closed segments whose newest record is older (-1: never).
        retention_bytes: delete oldest closed segments while the log is bigger (-1: never).
        cleanup_policy: "delete" (retention), "compact", or both.
        delete_retention_ms: how long a compacted topic keeps tombstones.
        flush_messages: fsync after this many appended records.
        flush_ms: fsync when the oldest unflushed append is older than this.
        compression_type: codec for stored batches; "producer" keeps the producer's.
        max_message_bytes: largest batch the partition accepts.
        min_insync_replicas: ISR size an acks=all produce needs.
        unclean_leader_election_enable: allow electing an out-of-sync replica.
        message_timestamp_type: "CreateTime" (producer's) or "LogAppendTime" (broker's).
    """

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * 3600 * 1000
    flush_messages: int = NEVER
    flush_ms: int = NEVER
    compression_type: str = "producer"
    max_message_bytes: int = 1048588
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    message_timestamp_type: str = "CreateTime"

    def __post_init__(self) -> None:
        name = "topic config"
        require(
            1024 <= self.segment_bytes < 2**31,
            name,
            "segment_bytes",
            self.segment_bytes,
            "must be between 1024 and 2147483647",
        )
        require(self.segment_ms >= 1, name, "segment_ms", self.segment_ms, "must be >= 1")
        require(
            self.index_interval_bytes >= 0,
            name,
            "index_interval_bytes",
            self.index_interval_bytes,
            "must be >= 0",
        )
        for field in ("retention_ms", "retention_bytes"):
            value = getattr(self, field)
            require(value >= -1, name, field, value, "must be -1 (unlimited) or >= 0")
        require(
            self.cleanup_policy in CLEANUP_POLICIES,
            name,
            "cleanup_policy",
            self.cleanup_policy,
            f"must be one of {', '.join(CLEANUP_POLICIES)}",
        )
        for field in ("delete_retention_ms",):
            value = getattr(self, field)
            require(value >= 0, name, field, value, "must be >= 0")
        for field in ("flush_messages", "flush_ms", "max_message_bytes", "min_insync_replicas"):
            value = getattr(self, field)
            require(value >= 1, name, field, value, "must be >= 1")
        require(
            self.compression_type in COMPRESSION_TYPES,
            name,
            "compression_type",
            self.compression_type,
            f"must be one of {', '.join(COMPRESSION_TYPES)}",
        )
        require(
            self.message_timestamp_type in TIMESTAMP_TYPES,
            name,
            "message_timestamp_type",
            self.message_timestamp_type,
            f"must be one of {', '.join(TIMESTAMP_TYPES)}",
        )

    @property
    def compact(self) -> bool:
        """Whether the cleaner keeps only the latest record per key."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Whether time/size retention deletes old segments."""
        return "delete" in self.cleanup_policy
