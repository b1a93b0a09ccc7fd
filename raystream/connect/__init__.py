"""Kafka Connect on Ray: connectors move data between topics and other systems by config.

``rs.connectors.Workers(cluster, group_id="connect", num_workers=1, rest_port=None)``
runs a group of worker actors and is the Python API of Kafka Connect's REST API.

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
from raystream.connect.workers import Workers

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
    "Workers",
]
