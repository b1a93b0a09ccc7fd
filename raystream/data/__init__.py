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

from raystream.data.live import iter_topic
from raystream.data.sink import write_topic
from raystream.data.source import read_topic

__all__ = ["iter_topic", "read_topic", "write_topic"]
