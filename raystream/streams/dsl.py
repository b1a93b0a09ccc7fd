"""The streams DSL: ``App``, ``KStream``, ``KTable`` and grouped and windowed streams.

Every call adds nodes to the application's :class:`~raystream.streams.topology.Topology`
and returns a new handle; nothing runs and nothing needs Ray until ``app.start()``. The
functions a user passes follow Kafka Streams' signatures, with Python callables:

- predicates, ``map``, ``flat_map``, ``select_key``, ``peek``, ``group_by``:
  ``fn(key, value)``; ``map`` returns ``(key, value)``, ``flat_map`` an iterable of them;
- ``map_values``, ``flat_map_values``: ``fn(value)``;
- ``reduce``: ``fn(aggregate, value)``; ``aggregate``: ``initializer()`` and
  ``aggregator(key, value, aggregate)`` (and ``merger(key, agg1, agg2)`` for sessions);
- joiners: ``fn(value, other_value)``, the missing side None in left and outer joins.

A key change (``map``, ``flat_map``, ``select_key``, ``group_by``) marks the stream;
a later aggregation or join sends it through an internal repartition topic
``<application_id>-<name>-repartition`` first, so that equal keys meet in one task.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from raystream.errors import InvalidConfigError, StreamsError, TopologyError
from raystream.streams.topology import Node, StoreSpec, SubTopology, Topology
from raystream.streams.windows import (
    HoppingWindows,
    JoinWindows,
    SessionWindows,
    SlidingWindows,
    Windows,
)

PROCESSING_GUARANTEES = ("at_least_once", "exactly_once")
_LEGAL_ID = re.compile(r"^[A-Za-z0-9._-]+$")


def _check_callable(op: str, **fns: Any) -> None:
    for name, fn in fns.items():
        if not callable(fn):
            raise TopologyError(f"{op}: {name} must be callable, got {fn!r}")


class App:
    """A streams application: its topology and how it runs.

    Building the topology is pure: ``App(None, "app")`` and every DSL call work without
    Ray; ``cluster`` is used only once the application starts.

    Args:
        cluster: The ``rs.Cluster`` to run on (None: ``rs.connect()`` at start).
        application_id: Names the consumer group, the internal topics
            (``<application_id>-<name>-repartition``, ``-changelog``) and the state dirs.
        processing_guarantee: "at_least_once" or "exactly_once" (each commit one
            transaction holding outputs, changelog writes and input offsets).
        num_workers: Worker actors to start (tasks spread over them).
        commit_interval_ms: How often tasks commit (Kafka's ``commit.interval.ms``).
        num_standby_replicas: Warm copies of each task's stores on other workers.
        auto_offset_reset: Where to start input partitions without a committed offset.
        cache_max_bytes: Record cache budget of each worker (Kafka's
            ``statestore.cache.max.bytes``), split across its tasks: the tables of
            aggregations and of ``table()`` forward (and log) only each key's latest
            update per commit, or sooner when the budget is full. 0: every update at once.

    Raises:
        InvalidConfigError: naming the bad argument.
    """

    def __init__(
        self,
        cluster: Any,
        application_id: str,
        processing_guarantee: str = "at_least_once",
        num_workers: int = 1,
        commit_interval_ms: int = 100,
        num_standby_replicas: int = 0,
        auto_offset_reset: str = "earliest",
        cache_max_bytes: int = 10 * 1024 * 1024,
    ) -> None:
        if not isinstance(application_id, str) or not _LEGAL_ID.match(application_id):
            raise InvalidConfigError(
                f"application_id must be a non-empty string of letters, digits, '.', '_' "
                f"and '-' (it names topics), got {application_id!r}"
            )
        if processing_guarantee not in PROCESSING_GUARANTEES:
            raise InvalidConfigError(
                f"processing_guarantee must be one of {PROCESSING_GUARANTEES}, got "
                f"{processing_guarantee!r}"
            )
        for name, value, least in (
            ("num_workers", num_workers, 1),
            ("commit_interval_ms", commit_interval_ms, 0),
            ("num_standby_replicas", num_standby_replicas, 0),
            ("cache_max_bytes", cache_max_bytes, 0),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise InvalidConfigError(f"{name} must be an int >= {least}, got {value!r}")
        if auto_offset_reset not in ("earliest", "latest"):
            raise InvalidConfigError(
                f"auto_offset_reset must be 'earliest' or 'latest', got {auto_offset_reset!r}"
            )
        self.cluster = cluster
        self.application_id = application_id
        self.processing_guarantee = processing_guarantee
        self.num_workers = num_workers
        self.commit_interval_ms = commit_interval_ms
        self.num_standby_replicas = num_standby_replicas
        self.auto_offset_reset = auto_offset_reset
        self.cache_max_bytes = cache_max_bytes
        self.topology = Topology(application_id)
        self._runner: Any = None

    def stream(
        self,
        topic_or_topics: str | Iterable[str],
        key_deserializer: Callable[[Any], Any] | None = None,
        value_deserializer: Callable[[Any], Any] | None = None,
        timestamp_extractor: Callable[[Any], int] | None = None,
    ) -> KStream:
        """A stream of the records of one or more topics.

        ``timestamp_extractor(record) -> ms`` takes the ``ConsumerRecord`` and returns
        its event time (default: the record timestamp).
        """
        topics = [topic_or_topics] if isinstance(topic_or_topics, str) else list(topic_or_topics)
        if not topics or not all(isinstance(t, str) and t for t in topics):
            raise TopologyError(f"stream: give one or more topic names, got {topic_or_topics!r}")
        node = self._source(topics, key_deserializer, value_deserializer, timestamp_extractor)
        return KStream(self, node.name, key_changed=False)

    def table(
        self,
        topic: str,
        key_deserializer: Callable[[Any], Any] | None = None,
        value_deserializer: Callable[[Any], Any] | None = None,
        timestamp_extractor: Callable[[Any], int] | None = None,
        name: str | None = None,
    ) -> KTable:
        """A table of the latest value per key of ``topic`` (a None value deletes).

        Its rows live in a key-value store named ``name`` (default
        ``<topic>-STATE-STORE-<index>``), backed by a changelog like every store.
        """
        if not isinstance(topic, str) or not topic:
            raise TopologyError(f"table: give one topic name, got {topic!r}")
        source = self._source([topic], key_deserializer, value_deserializer, timestamp_extractor)
        store = name or self.topology.new_name(f"{topic}-STATE-STORE")
        self.topology.add_store(StoreSpec(store, "kv"))
        node = self.topology.add(
            Node(
                self.topology.new_name("KTABLE-SOURCE"),
                "processor",
                "table_source",
                [source.name],
                {"store": store},
                [store],
            )
        )
        return KTable(self, node.name, store=store)

    def _source(
        self,
        topics: list[str],
        key_deserializer: Callable[[Any], Any] | None,
        value_deserializer: Callable[[Any], Any] | None,
        timestamp_extractor: Callable[[Any], int] | None,
    ) -> Node:
        for name, fn in (
            ("key_deserializer", key_deserializer),
            ("value_deserializer", value_deserializer),
            ("timestamp_extractor", timestamp_extractor),
        ):
            if fn is not None:
                _check_callable("stream", **{name: fn})
        return self.topology.add(
            Node(
                self.topology.new_name("KSTREAM-SOURCE"),
                "source",
                "source",
                params={
                    "key_deserializer": key_deserializer,
                    "value_deserializer": value_deserializer,
                    "timestamp_extractor": timestamp_extractor,
                },
                topics=topics,
            )
        )

    def add_store(
        self, name: str, kind: str = "kv", retention_ms: int = 0, window_size_ms: int = 1
    ) -> None:
        """Add a state store for custom processors (``KStream.process``): "kv", or
        "window" / "session" keeping entries ``retention_ms`` behind the latest."""
        if not isinstance(name, str) or not _LEGAL_ID.match(name):
            raise TopologyError(f"add_store: name must be letters, digits, '.', '_', '-': {name!r}")
        if kind not in ("kv", "window", "session"):
            raise TopologyError(f"add_store: kind must be 'kv', 'window' or 'session': {kind!r}")
        if not isinstance(retention_ms, int) or retention_ms < 0:
            raise TopologyError(f"add_store: retention_ms must be an int >= 0: {retention_ms!r}")
        if not isinstance(window_size_ms, int) or window_size_ms < 1:
            raise TopologyError(
                f"add_store: window_size_ms must be an int >= 1: {window_size_ms!r}"
            )
        self.topology.add_store(
            StoreSpec(name, kind, retention_ms, window_size_ms=window_size_ms)  # type: ignore[arg-type]
        )

    def subtopologies(self) -> list[SubTopology]:
        """The built topology: what the runtime makes tasks of."""
        return self.topology.build()

    def describe(self) -> str:
        """The topology as Kafka Streams' ``Topology.describe()`` prints it."""
        return self.topology.describe()

    # Running (raystream.streams.runner; needs Ray) ------------------------------------

    def start(self) -> None:
        """Create the internal topics, check co-partitioning and start the workers.

        Raises:
            TopologyError: a source topic is missing or co-partitioning is broken.
        """
        from raystream.streams.runner import AppRunner

        if self._runner is None:
            self._runner = AppRunner(self)
        self._runner.start()

    def stop(self) -> None:
        """Stop the workers: each commits, closes its tasks and leaves the group."""
        if self._runner is not None:
            self._runner.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the app stops or fails; True if it stopped, False on timeout.

        Raises:
            StreamsError: a worker failed (a user function raised), with its error.
        """
        if self._runner is None:
            raise StreamsError("wait: the application was not started")
        return self._runner.wait(timeout)

    @property
    def state(self) -> str:
        """CREATED, REBALANCING, RUNNING, ERROR or NOT_RUNNING (``KafkaStreams.State``)."""
        return "CREATED" if self._runner is None else self._runner.state

    def scale(self, num_workers: int) -> None:
        """Add or remove workers; the group rebalances, nothing is lost or duplicated
        beyond what the processing guarantee allows."""
        if self._runner is None:
            raise StreamsError("scale: the application was not started")
        self._runner.scale(num_workers)

    def store(self, name: str) -> Any:
        """Interactive queries of store ``name``: ``.get(key)``, ``.all()``,
        ``.range(lo, hi)``, and ``.fetch(key, from_ms, to_ms)`` on window stores."""
        if self._runner is None:
            raise StreamsError("store: the application was not started")
        return self._runner.store(name)

    def status(self) -> list[dict[str, Any] | None]:
        """Each worker's status: state, tasks, records processed and restored, commits."""
        return [] if self._runner is None else self._runner.statuses()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_runner"] = None  # the workers get the topology, not the driver's handles
        return state


class _Handle:
    """What KStream and KTable share: the app and the node whose output they are."""

    def __init__(self, app: App, node: str) -> None:
        self.app = app
        self.node = node

    @property
    def _topology(self) -> Topology:
        return self.app.topology

    def _add(
        self,
        kind: str,
        op: str,
        params: dict[str, Any] | None = None,
        parents: list[str] | None = None,
        stores: list[str] | None = None,
        name: str | None = None,
    ) -> str:
        node = Node(
            name or self._topology.new_name(kind),
            "processor",
            op,
            parents if parents is not None else [self.node],
            params or {},
            stores or [],
        )
        return self._topology.add(node).name

    def _check_same_app(self, other: _Handle, op: str) -> None:
        if not isinstance(other, _Handle) or other.app is not self.app:
            raise TopologyError(f"{op}: the other side must be a stream or table of this app")


class KStream(_Handle):
    """A record stream: every record is an event (Kafka Streams' ``KStream``)."""

    def __init__(self, app: App, node: str, key_changed: bool) -> None:
        super().__init__(app, node)
        self.key_changed = key_changed

    def _then(self, kind: str, op: str, key_changes: bool = False, **params: Any) -> KStream:
        return KStream(self.app, self._add(kind, op, params), self.key_changed or key_changes)

    def filter(self, predicate: Callable[[Any, Any], bool]) -> KStream:
        """Keep the records for which ``predicate(key, value)`` is true."""
        _check_callable("filter", predicate=predicate)
        return self._then("KSTREAM-FILTER", "filter", predicate=predicate, negate=False)

    def filter_not(self, predicate: Callable[[Any, Any], bool]) -> KStream:
        """Keep the records for which ``predicate(key, value)`` is false."""
        _check_callable("filter_not", predicate=predicate)
        return self._then("KSTREAM-FILTER", "filter", predicate=predicate, negate=True)

    def map(self, fn: Callable[[Any, Any], tuple[Any, Any]]) -> KStream:
        """Replace each record by ``fn(key, value) -> (key, value)`` (a key change)."""
        _check_callable("map", fn=fn)
        return self._then("KSTREAM-MAP", "map", key_changes=True, fn=fn)

    def map_values(self, fn: Callable[[Any], Any]) -> KStream:
        """Replace each value by ``fn(value)``; the key stays (no repartition)."""
        _check_callable("map_values", fn=fn)
        return self._then("KSTREAM-MAPVALUES", "map_values", fn=fn)

    def flat_map(self, fn: Callable[[Any, Any], Iterable[tuple[Any, Any]]]) -> KStream:
        """Replace each record by the ``(key, value)`` pairs ``fn(key, value)`` yields."""
        _check_callable("flat_map", fn=fn)
        return self._then("KSTREAM-FLATMAP", "flat_map", key_changes=True, fn=fn)

    def flat_map_values(self, fn: Callable[[Any], Iterable[Any]]) -> KStream:
        """Replace each record by one record per value ``fn(value)`` yields, same key."""
        _check_callable("flat_map_values", fn=fn)
        return self._then("KSTREAM-FLATMAPVALUES", "flat_map_values", fn=fn)

    def select_key(self, fn: Callable[[Any, Any], Any]) -> KStream:
        """Set each record's key to ``fn(key, value)`` (a key change)."""
        _check_callable("select_key", fn=fn)
        return self._then("KSTREAM-KEY-SELECT", "select_key", key_changes=True, fn=fn)

    def peek(self, fn: Callable[[Any, Any], Any]) -> KStream:
        """Call ``fn(key, value)`` on each record and pass it on unchanged."""
        _check_callable("peek", fn=fn)
        return self._then("KSTREAM-PEEK", "peek", fn=fn)

    def map_batches(self, fn: Callable[[Any], Any]) -> KStream:
        """The vectorized path: ``fn(pyarrow.Table) -> pyarrow.Table`` over the records a
        task received in one batch.

        The table has a ``key`` and a ``timestamp`` column and either a ``value``
        column or, when values are dicts (typed topics), one column per field. The
        table ``fn`` returns becomes records the same way: ``key`` and ``timestamp``
        columns if present (else None and the largest input timestamp), a ``value``
        column if it is the only other one, else a dict of the other columns. ``fn`` may
        change keys, so a later aggregation or join repartitions first.

        Vectorized end to end where it can be: a stream of one topic read as stored (no
        deserializers or timestamp extractor) straight into ``map_batches`` hands ``fn``
        the polled Arrow columns themselves (a typed topic's columns keep their schema's
        types), and a ``map_batches`` followed only by ``to(topic)`` without serializers
        produces ``fn``'s table with one ``send_batch``.
        """
        _check_callable("map_batches", fn=fn)
        return self._then("KSTREAM-MAPBATCHES", "map_batches", key_changes=True, fn=fn)

    def branch(self, *predicates: Callable[[Any, Any], bool]) -> list[KStream]:
        """Split the stream: each record goes to the first branch whose
        ``predicate(key, value)`` is true (to none if none is)."""
        if not predicates:
            raise TopologyError("branch: give at least one predicate")
        _check_callable("branch", **{f"predicate {i}": p for i, p in enumerate(predicates)})
        branch = self._add("KSTREAM-BRANCH", "branch", {"predicates": list(predicates)})
        return [
            KStream(
                self.app,
                self._add("KSTREAM-BRANCHCHILD", "branch_child", {"index": i}, [branch]),
                self.key_changed,
            )
            for i in range(len(predicates))
        ]

    def merge(self, other: KStream) -> KStream:
        """The records of both streams, each stream's order kept."""
        self._check_same_app(other, "merge")
        if not isinstance(other, KStream):
            raise TopologyError("merge: the other side must be a KStream")
        node = self._add("KSTREAM-MERGE", "merge", parents=[self.node, other.node])
        return KStream(self.app, node, self.key_changed or other.key_changed)

    def to(
        self,
        topic: str,
        key_serializer: Callable[[Any], Any] | None = None,
        value_serializer: Callable[[Any], Any] | None = None,
    ) -> None:
        """Write every record to ``topic`` (partitioned by the key, as a producer does)."""
        if not isinstance(topic, str) or not topic:
            raise TopologyError(f"to: give a topic name, got {topic!r}")
        for name, fn in (
            ("key_serializer", key_serializer),
            ("value_serializer", value_serializer),
        ):
            if fn is not None:
                _check_callable("to", **{name: fn})
        self._topology.add(
            Node(
                self._topology.new_name("KSTREAM-SINK"),
                "sink",
                "sink",
                [self.node],
                {"key_serializer": key_serializer, "value_serializer": value_serializer},
                topics=[topic],
            )
        )

    def process(self, processor_factory: Callable[[], Any], *store_names: str) -> KStream:
        """Run a custom processor (Kafka's ``KStream.process``).

        ``processor_factory()`` makes one :class:`~raystream.streams.processor.Processor`
        per task; it may use the stores named here (added with ``app.add_store``) and
        schedule stream-time or wall-clock punctuators through its context.
        """
        _check_callable("process", processor_factory=processor_factory)
        for name in store_names:
            if name not in self._topology.stores:
                raise TopologyError(f"process: unknown store {name!r}: add it with app.add_store")
        node = self._add(
            "KSTREAM-PROCESSOR", "custom", {"factory": processor_factory}, stores=list(store_names)
        )
        return KStream(self.app, node, key_changed=True)

    def _repartitioned(self, name: str) -> KStream:
        """This stream, through a repartition topic if its key changed."""
        if not self.key_changed:
            return self
        topic = self._topology.repartition_topic(name)
        self._topology.add(
            Node(
                self._topology.new_name("KSTREAM-SINK"),
                "sink",
                "sink",
                [self.node],
                {"internal": True},
                topics=[topic],
            )
        )
        source = self._topology.add(
            Node(
                self._topology.new_name("KSTREAM-SOURCE"),
                "source",
                "source",
                params={"internal": True},
                topics=[topic],
            )
        )
        return KStream(self.app, source.name, key_changed=False)

    def group_by_key(self) -> KGroupedStream:
        """Group by the current key (repartitioned first if the key changed)."""
        return KGroupedStream(self)

    def group_by(self, fn: Callable[[Any, Any], Any]) -> KGroupedStream:
        """Group by ``fn(key, value)``: a key change, so records go through a
        repartition topic before they are aggregated."""
        _check_callable("group_by", fn=fn)
        return KGroupedStream(self._then("KSTREAM-KEY-SELECT", "select_key", True, fn=fn))

    def join(
        self, other: KStream | KTable, joiner: Callable[[Any, Any], Any], windows: Any = None
    ) -> KStream:
        """Inner join with a table (each record meets the table's current row for its
        key; no row, no output) or with a stream within ``windows`` (JoinWindows)."""
        return self._join(other, joiner, windows, "inner")

    def left_join(
        self, other: KStream | KTable, joiner: Callable[[Any, Any], Any], windows: Any = None
    ) -> KStream:
        """Left join: like :meth:`join`, and a record with no match is joined with None
        (for a stream-stream join, once its window closes without a match)."""
        return self._join(other, joiner, windows, "left")

    def outer_join(
        self, other: KStream, joiner: Callable[[Any, Any], Any], windows: JoinWindows
    ) -> KStream:
        """Stream-stream outer join: matches, and each side's unmatched records joined
        with None once their window closes."""
        if isinstance(other, KTable):
            raise TopologyError("outer_join: a stream-table outer join does not exist")
        return self._join(other, joiner, windows, "outer")

    def _join(self, other: Any, joiner: Any, windows: Any, how: str) -> KStream:
        self._check_same_app(other, f"{how} join")
        _check_callable("join", joiner=joiner)
        if isinstance(other, KTable):
            if windows is not None:
                raise TopologyError("a stream-table join takes no windows")
            this = self._repartitioned(self._topology.new_name("KSTREAM-JOIN"))
            table = other._materialized()
            node = this._add(
                "KSTREAM-JOIN" if how == "inner" else "KSTREAM-LEFTJOIN",
                "stream_table_join",
                {"joiner": joiner, "how": how, "store": table.store},
                stores=[table.store],
            )
            self._topology.require_copartitioned(this.node, table.node)
            return KStream(self.app, node, key_changed=False)
        if not isinstance(windows, JoinWindows):
            raise TopologyError(
                f"a stream-stream join needs JoinWindows(before_ms, after_ms, grace_ms), "
                f"got {windows!r}"
            )
        this = self._repartitioned(self._topology.new_name("KSTREAM-JOINTHIS"))
        that = other._repartitioned(self._topology.new_name("KSTREAM-JOINOTHER"))
        # A record that is not late (t >= stream time - after - grace) reaches back to
        # t - before: older records of the other side are never read again.
        retention = windows.before_ms + windows.after_ms + windows.grace_ms + 1
        this_store = self._topology.new_name("KSTREAM-JOINTHIS-STORE")
        other_store = self._topology.new_name("KSTREAM-JOINOTHER-STORE")
        stores = [this_store, other_store]
        for store in stores:
            self._topology.add_store(
                StoreSpec(store, "window", retention, window_size_ms=1, retain_duplicates=True)
            )
        if how != "inner":
            outer_store = self._topology.new_name("KSTREAM-OUTERSHARED-STORE")
            self._topology.add_store(StoreSpec(outer_store, "kv"))
            stores.append(outer_store)
        common = {"joiner": joiner, "windows": windows, "how": how, "stores": stores}
        left = this._add(
            "KSTREAM-JOINTHIS" if how == "inner" else "KSTREAM-OUTERTHIS",
            "stream_stream_join",
            {**common, "side": "this"},
            stores=stores,
        )
        right = that._add(
            "KSTREAM-JOINOTHER" if how == "inner" else "KSTREAM-OUTEROTHER",
            "stream_stream_join",
            {**common, "side": "other"},
            stores=stores,
        )
        self._topology.require_copartitioned(this.node, that.node)
        node = self._add("KSTREAM-MERGE", "merge", parents=[left, right])
        return KStream(self.app, node, key_changed=False)


class KGroupedStream:
    """A stream grouped by key, ready to aggregate (Kafka's ``KGroupedStream``)."""

    def __init__(self, stream: KStream, windows: Windows | None = None) -> None:
        self.stream = stream
        self.windows = windows

    def window(self, windows: Windows) -> KGroupedStream:
        """Aggregate per window (Tumbling, Hopping, Sliding or Session windows)."""
        if not isinstance(windows, HoppingWindows | SlidingWindows | SessionWindows):
            raise TopologyError(
                f"window: give TumblingWindows, HoppingWindows, SlidingWindows or "
                f"SessionWindows, got {windows!r}"
            )
        if self.windows is not None:
            raise TopologyError("window: the stream is already windowed")
        return KGroupedStream(self.stream, windows)

    def count(self, name: str | None = None) -> KTable:
        """The number of records per key (per window)."""
        return self._aggregate(
            "count", name, lambda: 0, lambda k, v, a: a + 1, lambda k, a, b: a + b
        )

    def reduce(self, fn: Callable[[Any, Any], Any], name: str | None = None) -> KTable:
        """Combine each key's values with ``fn(aggregate, value)``; the first value is
        the first aggregate. Sessions merge with ``fn`` too."""
        _check_callable("reduce", fn=fn)

        def add(key: Any, value: Any, aggregate: Any) -> Any:
            return value if aggregate is None else fn(aggregate, value)

        def merge(key: Any, a: Any, b: Any) -> Any:
            return b if a is None else a if b is None else fn(a, b)

        return self._aggregate("reduce", name, lambda: None, add, merge)

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any] | None = None,
        name: str | None = None,
    ) -> KTable:
        """Fold each key's values: ``aggregator(key, value, aggregate)`` starting from
        ``initializer()``. Session windows need ``merger(key, agg1, agg2)``."""
        _check_callable("aggregate", initializer=initializer, aggregator=aggregator)
        if merger is not None:
            _check_callable("aggregate", merger=merger)
        if isinstance(self.windows, SessionWindows) and merger is None:
            raise TopologyError(
                "aggregate over SessionWindows needs merger(key, agg1, agg2): sessions "
                "merge when a record bridges them"
            )
        return self._aggregate("aggregate", name, initializer, aggregator, merger)

    def sum(self, column: str, name: str | None = None) -> KTable:
        """The sum of ``value[column]`` per key (values are dicts: a typed topic)."""
        get = _column_getter("sum", column)
        return self._aggregate(
            "sum", name, lambda: 0, lambda k, v, a: a + get(v), lambda k, a, b: a + b
        )

    def min(self, column: str, name: str | None = None) -> KTable:
        """The smallest ``value[column]`` per key."""
        return self._extreme("min", column, name, min)

    def max(self, column: str, name: str | None = None) -> KTable:
        """The largest ``value[column]`` per key."""
        return self._extreme("max", column, name, max)

    def mean(self, column: str, name: str | None = None) -> KTable:
        """The mean of ``value[column]`` per key. The table's values are the means; its
        aggregate store (queried by ``name``) holds ``(sum, count)``."""
        get = _column_getter("mean", column)
        table = self._aggregate(
            "mean",
            name,
            lambda: (0, 0),
            lambda k, v, a: (a[0] + get(v), a[1] + 1),
            lambda k, a, b: (a[0] + b[0], a[1] + b[1]),
        )
        return table.map_values(lambda a: a[0] / a[1] if a[1] else None)

    def _extreme(
        self, op: str, column: str, name: str | None, pick: Callable[[Any, Any], Any]
    ) -> KTable:
        get = _column_getter(op, column)

        def add(key: Any, value: Any, aggregate: Any) -> Any:
            return get(value) if aggregate is None else pick(aggregate, get(value))

        def merge(key: Any, a: Any, b: Any) -> Any:
            return b if a is None else a if b is None else pick(a, b)

        return self._aggregate(op, name, lambda: None, add, merge)

    def _aggregate(
        self,
        op: str,
        name: str | None,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any] | None,
    ) -> KTable:
        topology = self.stream.app.topology
        if name is not None and (not isinstance(name, str) or not _LEGAL_ID.match(name)):
            raise TopologyError(f"{op}: name must be letters, digits, '.', '_', '-': {name!r}")
        store = name or topology.new_name("KSTREAM-AGGREGATE-STATE-STORE")
        stream = self.stream._repartitioned(store)
        windows = self.windows
        params = {
            "initializer": initializer,
            "aggregator": aggregator,
            "merger": merger,
            "windows": windows,
            "store": store,
        }
        stores = [store]
        # Retentions: long enough behind the store's latest window start (session end)
        # that every window still open is kept, as Kafka's size + grace default.
        if windows is None:
            topology.add_store(StoreSpec(store, "kv"))
        elif isinstance(windows, SessionWindows):
            retention = windows.gap_ms + windows.grace_ms + 1
            topology.add_store(StoreSpec(store, "session", retention))
        elif isinstance(windows, SlidingWindows):
            d = windows.difference_ms
            retention = 2 * d + windows.grace_ms + 2
            topology.add_store(StoreSpec(store, "window", retention, window_size_ms=d))
            records = f"{store}-records"
            topology.add_store(StoreSpec(records, "window", retention, window_size_ms=1))
            params["records_store"] = records
            stores.append(records)
        else:
            retention = windows.size_ms + windows.grace_ms
            topology.add_store(
                StoreSpec(store, "window", retention, window_size_ms=windows.size_ms)
            )
        kind = "KSTREAM-AGGREGATE" if windows is None else "KSTREAM-WINDOWED-AGGREGATE"
        node = stream._add(kind, "aggregate", params, stores=stores)
        return KTable(stream.app, node, store=store, windows=windows)


def _column_getter(op: str, column: str) -> Callable[[Any], Any]:
    if not isinstance(column, str) or not column:
        raise TopologyError(f"{op}: column must be a column name, got {column!r}")

    def get(value: Any) -> Any:
        try:
            return value[column]
        except (KeyError, TypeError, IndexError):
            raise TopologyError(
                f"{op}({column!r}): a record value has no column {column!r} (values must "
                f"be dicts with that field: a typed topic), got {value!r}"
            ) from None

    return get


class KTable(_Handle):
    """A changelog stream seen as a table: the latest value per key (Kafka's ``KTable``).

    Attributes:
        store: The key-value (or window, session) store holding its rows, or None when
            the table is computed on the fly (a ``filter`` or ``map_values`` of another);
            such a table is materialized into a store of its own when a join needs it.
        windows: The windows of a windowed aggregation's table (keys are ``Windowed``).
    """

    def __init__(
        self, app: App, node: str, store: str | None = None, windows: Windows | None = None
    ) -> None:
        super().__init__(app, node)
        self.store = store
        self.windows = windows

    def to_stream(self) -> KStream:
        """The table's updates as a stream of ``(key, new value)`` (None: deleted)."""
        return KStream(self.app, self._add("KTABLE-TOSTREAM", "to_stream"), key_changed=False)

    def filter(self, predicate: Callable[[Any, Any], bool]) -> KTable:
        """Keep the rows for which ``predicate(key, value)`` holds (a row that stops
        holding it is deleted downstream)."""
        _check_callable("filter", predicate=predicate)
        node = self._add("KTABLE-FILTER", "table_filter", {"predicate": predicate})
        return KTable(self.app, node, windows=self.windows)

    def map_values(self, fn: Callable[[Any], Any]) -> KTable:
        """Replace each row's value by ``fn(value)``."""
        _check_callable("map_values", fn=fn)
        node = self._add("KTABLE-MAPVALUES", "table_map_values", {"fn": fn})
        return KTable(self.app, node, windows=self.windows)

    def suppress(self, until_window_closes: bool = True) -> KTable:
        """Hold a windowed table's updates and emit one final row per window when it
        closes (stream time >= end + grace)."""
        if until_window_closes is not True:
            raise TopologyError("suppress: only until_window_closes=True is supported")
        if self.windows is None:
            raise TopologyError(
                "suppress(until_window_closes=True) needs a windowed table (the result of "
                "a windowed aggregation): a plain table's rows never close"
            )
        store = self._topology.new_name("KTABLE-SUPPRESS-STATE-STORE")
        self._topology.add_store(StoreSpec(store, "kv"))
        node = self._add(
            "KTABLE-SUPPRESS",
            "suppress",
            {"windows": self.windows, "store": store},
            stores=[store],
        )
        return KTable(self.app, node, windows=self.windows)

    def _materialized(self) -> KTable:
        """This table with a key-value store of its rows (adds one if it has none)."""
        if self.windows is not None:
            raise TopologyError("joins with a windowed table are not supported")
        if self.store is not None:
            return self
        store = self._topology.new_name("KTABLE-MATERIALIZE-STATE-STORE")
        self._topology.add_store(StoreSpec(store, "kv"))
        node = self._add("KTABLE-MATERIALIZE", "materialize", {"store": store}, stores=[store])
        return KTable(self.app, node, store=store)

    def join(self, other: KTable, joiner: Callable[[Any, Any], Any]) -> KTable:
        """Inner table-table join: a row per key present in both tables."""
        return self._table_join(other, joiner, "inner")

    def left_join(self, other: KTable, joiner: Callable[[Any, Any], Any]) -> KTable:
        """Left table-table join: a row per key of this table (other side None if absent)."""
        return self._table_join(other, joiner, "left")

    def outer_join(self, other: KTable, joiner: Callable[[Any, Any], Any]) -> KTable:
        """Outer table-table join: a row per key of either table."""
        return self._table_join(other, joiner, "outer")

    def _table_join(self, other: Any, joiner: Any, how: str) -> KTable:
        self._check_same_app(other, f"table {how} join")
        if not isinstance(other, KTable):
            raise TopologyError("a table join needs a KTable on the other side")
        _check_callable("join", joiner=joiner)
        this, that = self._materialized(), other._materialized()
        stores = [this.store, that.store]
        prefix = {"inner": "KTABLE-JOIN", "left": "KTABLE-LEFTJOIN", "outer": "KTABLE-OUTERJOIN"}
        left = this._add(
            f"{prefix[how]}THIS",
            "table_table_join",
            {"joiner": joiner, "how": how, "side": "this", "stores": stores},
            stores=stores,
        )
        right = that._add(
            f"{prefix[how]}OTHER",
            "table_table_join",
            {"joiner": joiner, "how": how, "side": "other", "stores": stores},
            stores=stores,
        )
        self._topology.require_copartitioned(this.node, that.node)
        node = self._add("KTABLE-MERGE", "merge", parents=[left, right])
        return KTable(self.app, node)
