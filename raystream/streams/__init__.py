"""Streams: stateful stream processing on raystream topics (``rs.streams``).

An application consumes input topics, transforms records, aggregates them over event-time
windows, joins streams and tables with fault-tolerant state, and produces output topics,
without a consumer loop of its own. The shape follows Kafka Streams:

- building a topology is pure (``App.stream`` and the KStream/KTable DSL add nodes and
  edges; ``App.describe()`` prints them as Kafka Streams' ``Topology.describe()`` does);
- window assignment, grace, suppression and join rules are pure functions of records and
  stream time;
- state stores are a library (``raystream.streams.stores``), each backed by a compacted
  changelog topic ``<application_id>-<store>-changelog``;
- tasks (one per input partition, or per co-partitioned group) run in worker actors that
  are members of the consumer group named by ``application_id``.
"""

from raystream.streams.dsl import App, KGroupedStream, KStream, KTable
from raystream.streams.processors import STREAM_TIME, WALL_CLOCK, Processor, Record
from raystream.streams.windowed import Windowed
from raystream.streams.windows import (
    HoppingWindows,
    JoinWindows,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
)

__all__ = [
    "STREAM_TIME",
    "WALL_CLOCK",
    "App",
    "HoppingWindows",
    "JoinWindows",
    "KGroupedStream",
    "KStream",
    "KTable",
    "Processor",
    "Record",
    "SessionWindows",
    "SlidingWindows",
    "TumblingWindows",
    "Windowed",
]
