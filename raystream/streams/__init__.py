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

from raystream.streams.windowed import Windowed

__all__ = ["Windowed"]
