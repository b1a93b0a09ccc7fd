"""The storage engine: one partition replica's durable, Arrow-native log.

A plain library with no Ray import, so it is tested directly and reused by every actor
(partition replicas, and the internal topics that hold offsets and transaction state).

- :class:`Log` — open/recover, append, read, truncate, retention, compaction, flush.
- :class:`LogConfig` — the topic-level configuration it obeys (Kafka's names).
- :class:`LeaderEpochCache` — epoch -> start offset, for replica truncation.
"""

from raystream.log.batch import OFFSET_COLUMN, BatchHeader
from raystream.log.cleaner import CleanerStats
from raystream.log.config import LogConfig
from raystream.log.epoch import LeaderEpochCache
from raystream.log.log import Log, StoredBatch

__all__ = [
    "OFFSET_COLUMN",
    "BatchHeader",
    "CleanerStats",
    "LeaderEpochCache",
    "Log",
    "LogConfig",
    "StoredBatch",
]
