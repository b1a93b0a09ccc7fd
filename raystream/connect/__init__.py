"""Kafka Connect on Ray: connectors move data between topics and other systems by config.

``rs.connectors`` is this package. The connector API (``api``) is plain Python; worker
actors run the tasks, and connector configs, source offsets and statuses live in
compacted internal topics as Kafka Connect keeps them.
"""

from raystream.connect.api import (
    Connector,
    SinkConnector,
    SinkRecord,
    SinkTask,
    SourceBatch,
    SourceConnector,
    SourceRecord,
    SourceTask,
    Task,
)

__all__ = [
    "Connector",
    "SinkConnector",
    "SinkRecord",
    "SinkTask",
    "SourceBatch",
    "SourceConnector",
    "SourceRecord",
    "SourceTask",
    "Task",
]
