"""Kafka Connect on Ray: connectors move data between topics and other systems by config.

``rs.connectors.Workers(cluster, group_id="connect", num_workers=1, rest_port=None)``
runs a group of worker actors and is the Python API of Kafka Connect's REST API.

``rs.connectors`` is this package. The connector API (``api``) is plain Python; worker
actors run the tasks, and connector configs, source offsets and statuses live in
compacted internal topics as Kafka Connect keeps them.
"""

import sys
import types
from typing import Any

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


class _Package(types.ModuleType):
    """This package, callable as :func:`raystream.connect` (the cluster function).

    Importing a submodule binds it as an attribute of its parent package, so once
    ``raystream.connect`` (this package) is imported, ``rs.connect`` is this module
    rather than the function ``rs.connect(...)`` that every program starts with.
    Calling the package calls that function, so both names keep working.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from raystream.client.cluster import connect

        return connect(*args, **kwargs)


sys.modules[__name__].__class__ = _Package
