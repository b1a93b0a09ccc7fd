"""Ray Data on raystream topics (``rs.data``): batch reads and writes, and live batches.

::

    ds = rs.data.read_topic(cluster, "clicks")             # one read task per partition
    scored = ds.map_batches(model, batch_format="pyarrow")
    rs.data.write_topic(scored, "scores", cluster=cluster)  # send_batch from write tasks
    for batch in rs.data.iter_topic(cluster, "clicks", batch_size=512):
        train_step(batch)                                   # follows the live end

Offset options are Spark's Kafka source's (see :mod:`raystream.data.offsets`), shared
with ``rs.spark``; both read partitions with :func:`raystream.data.reader.read_range`.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raystream.data.live import iter_topic
    from raystream.data.sink import write_topic
    from raystream.data.source import read_topic

# Loaded on first use: Spark's read tasks import this package's reader, not Ray Data.
_LAZY = {
    "iter_topic": "raystream.data.live",
    "read_topic": "raystream.data.source",
    "write_topic": "raystream.data.sink",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'raystream.data' has no attribute {name!r}")


__all__ = ["iter_topic", "read_topic", "write_topic"]
