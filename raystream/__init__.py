"""raystream: a Kafka-grade streaming log whose servers are Ray actors.

Topics split into partitions; each partition is an ordered, durable log of Arrow record
batches served by replica actors and managed by a controller actor. The public names
follow kafka-python::

    import raystream as rs

    cluster = rs.connect()                        # embedded local cluster by default
    cluster.admin().create_topic("orders", partitions=3)
    producer = cluster.producer()
    producer.send("orders", b"hello", key=b"customer-1").get()
    consumer = cluster.consumer("orders", auto_offset_reset="earliest")
    for record in consumer: ...

``rs.spark`` (Spark on Ray through RayDP) and ``rs.data`` (Ray Data) read and write
topics as Arrow; ``rs.streams`` runs stream processing, ``rs.connectors`` Kafka Connect's
connectors and ``rs.mirror`` MirrorMaker; all are imported on first use.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from raystream import errors
from raystream.types import (
    ConsumerRecord,
    GroupDescription,
    PartitionDescription,
    RecordMetadata,
    TopicDescription,
    TopicPartition,
)

if TYPE_CHECKING:
    from raystream import connectors, data, mirror, spark, streams
    from raystream.client.admin import Admin
    from raystream.client.cluster import Cluster, connect
    from raystream.client.consumer import Consumer
    from raystream.client.consumer_group import ConsumerGroup
    from raystream.client.producer import Producer
    from raystream.log import Log, LogConfig
    from raystream.security.acls import AclBinding, AclBindingFilter

__version__ = "0.1.0"

# Names that need Ray (or the storage engine, or pyspark) are imported on first use, so
# that ``import raystream.log`` stays a plain library import without Ray. ("mirror"
# joins ``__all__`` with its package.)
_SUBMODULES = {
    "connectors": "raystream.connectors",
    "data": "raystream.data",
    "mirror": "raystream.mirror",
    "spark": "raystream.spark",
    "streams": "raystream.streams",
}
_LAZY = {
    "AclBinding": "raystream.security.acls",
    "AclBindingFilter": "raystream.security.acls",
    "Admin": "raystream.client.admin",
    "Cluster": "raystream.client.cluster",
    "connect": "raystream.client.cluster",
    "Consumer": "raystream.client.consumer",
    "ConsumerGroup": "raystream.client.consumer_group",
    "Producer": "raystream.client.producer",
    "Log": "raystream.log",
    "LogConfig": "raystream.log",
}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return import_module(_SUBMODULES[name])
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'raystream' has no attribute {name!r}")


__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "Admin",
    "Cluster",
    "Consumer",
    "ConsumerGroup",
    "ConsumerRecord",
    "GroupDescription",
    "Log",
    "LogConfig",
    "PartitionDescription",
    "Producer",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
    "__version__",
    "connect",
    "connectors",
    "data",
    "errors",
    "mirror",
    "spark",
    "streams",
]
