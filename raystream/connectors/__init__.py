"""Kafka Connect on Ray: connectors move data between topics and other systems by config.

``rs.connectors.Workers(cluster, group_id="connect", num_workers=1, rest_port=None)``
runs a group of worker actors and is the Python API of Kafka Connect's REST API.

``rs.connectors`` is this package. (It is not named ``raystream.connect``, the layout
first sketched: importing a package binds it as its parent's attribute, so
``raystream.connect`` the package would have replaced ``rs.connect``, the function every
program starts with.) The connector API (``api``) is plain Python; worker
actors run the tasks, and connector configs, source offsets and statuses live in
compacted internal topics as Kafka Connect keeps them.
"""

from raystream.connectors.api import (
    Connector,
    Delivery,
    SinkConnector,
    SinkRecord,
    SinkTask,
    SourceBatch,
    SourceConnector,
    SourceRecord,
    SourceTask,
    Task,
)
from raystream.connectors.workers import Workers

__all__ = [
    "Connector",
    "Delivery",
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
