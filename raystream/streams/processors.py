"""The processors a task runs, one per topology node (pure: no Ray, no clock).

Records flow as :class:`Record` values from a node to its children through the task's
:class:`ProcessorContext`. Table nodes (a table's source, aggregates, a table's filter,
joins) forward changes: ``value`` is the new row (None: deleted) and ``old`` the row it
replaced, which downstream table nodes need to retract what they emitted before.

Join rules, as Kafka Streams defines them:

- stream-table: a record meets the table's current row for its key (a later table
  update does not re-trigger it); records with a None key or value are dropped; inner
  drops a record without a row, left joins it with None.
- stream-stream within ``JoinWindows``: each side's records are kept for the window; a
  record joins every record of the other side in its window, in either arrival order;
  left and outer joins emit a record joined with None only once its window has closed
  without a match (no spurious early None results, KIP-633).
- table-table: the result row of a key is ``joiner(this, other)`` whenever the sides it
  needs are present (inner: both; left: this; outer: either), else deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from raystream.errors import StreamsError
from raystream.streams.windows import (
    Aggregation,
    JoinWindows,
    SessionWindows,
    SlidingWindows,
    StreamTime,
    SuppressBuffer,
    WindowedAggregator,
    WindowStoreState,
    close_time_for,
)

if TYPE_CHECKING:
    from raystream.streams.topology import Node

STREAM_TIME = "stream_time"
WALL_CLOCK = "wall_clock"
"""Punctuation types (Kafka's ``PunctuationType``): stream-time punctuators run when the
task's stream time passes their next time, wall-clock ones when ``now_ms`` does."""


class Record(NamedTuple):
    """A record inside a topology.

    Attributes:
        key, value: After deserialization (a table change: the new row, None deletes).
        timestamp: Event time, ms.
        headers: ``(str, bytes)`` pairs, carried to sinks.
        old: For a table change, the row it replaced (None: there was none).
    """

    key: Any
    value: Any
    timestamp: int
    headers: tuple[tuple[str, bytes], ...] = ()
    old: Any = None


class Context(Protocol):
    """What a processor may do, given by its task (Kafka's ``ProcessorContext``).

    The task implements it; processors get it at :meth:`Processor.init`.
    """

    @property
    def stream_time_ms(self) -> int:
        """The task's stream time (the largest timestamp seen; -1 before any record)."""
        ...

    def forward(self, record: Record, child: str | None = None) -> None:
        """Pass ``record`` to every child of the current node, or to ``child`` only."""
        ...

    def store(self, name: str) -> Any:
        """The task's state store ``name`` (a ``KeyValueStore``)."""
        ...

    def clock(self, name: str) -> StreamTime:
        """The stream-time tracker ``name``: shared by the processors that ask for the
        same name, it starts at the task's stream time and advances only with what
        they observe (Kafka's per-processor observed stream time)."""
        ...

    def schedule(self, interval_ms: int, punctuation_type: str, fn: Callable[[int], Any]) -> None:
        """Call ``fn(time_ms)`` every ``interval_ms`` of stream time or wall-clock time."""
        ...

    def record_dropped(self, reason: str) -> None:
        """Count a record the node dropped (late, null key) in the task's metrics."""
        ...

    def caching(self, name: str) -> bool:
        """Whether store ``name`` is behind the task's record cache, whose flushes
        forward this node's updates (see :attr:`Processor.cached_store`)."""
        ...


class Processor:
    """A node's record handler; custom processors (``KStream.process``) subclass it.

    ``init`` is called once per task before any record; ``process`` for each record in
    order; ``flush`` at the end of each batch of input records (a node that buffers, as
    ``map_batches`` does, empties its buffer there).
    """

    context: Context
    children: list[str]
    """The node's children, in the order they were added (set by the task)."""
    cached_store: str | None = None
    """The table store whose updates this node forwards. A task with a record cache
    puts that store behind it and forwards the store's updates for the node when the
    cache flushes (``context.caching(name)`` then holds), so the node only writes."""

    def init(self, context: Context) -> None:
        """Keep the context; open stores and schedule punctuators here."""
        self.context = context

    def process(self, record: Record) -> None:
        """Handle one record (forward results through ``self.context.forward``)."""
        raise NotImplementedError

    def flush(self) -> None:
        """End of an input batch: forward anything buffered."""


def build_processor(node: Node) -> Processor:
    """The processor for ``node`` (sources and sinks are handled by the task)."""
    try:
        factory = _PROCESSORS[node.op]
    except KeyError:
        raise StreamsError(f"node {node.name}: no processor for op {node.op!r}") from None
    return factory(node.params)


class _Stateless(Processor):
    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params


class _Filter(_Stateless):
    def process(self, record: Record) -> None:
        if bool(self.params["predicate"](record.key, record.value)) != self.params["negate"]:
            self.context.forward(record)


class _Map(_Stateless):
    def process(self, record: Record) -> None:
        key, value = self.params["fn"](record.key, record.value)
        self.context.forward(record._replace(key=key, value=value))


class _MapValues(_Stateless):
    def process(self, record: Record) -> None:
        self.context.forward(record._replace(value=self.params["fn"](record.value)))


class _FlatMap(_Stateless):
    def process(self, record: Record) -> None:
        for key, value in self.params["fn"](record.key, record.value):
            self.context.forward(record._replace(key=key, value=value))


class _FlatMapValues(_Stateless):
    def process(self, record: Record) -> None:
        for value in self.params["fn"](record.value):
            self.context.forward(record._replace(value=value))


class _SelectKey(_Stateless):
    def process(self, record: Record) -> None:
        self.context.forward(record._replace(key=self.params["fn"](record.key, record.value)))


class _Peek(_Stateless):
    def process(self, record: Record) -> None:
        self.params["fn"](record.key, record.value)
        self.context.forward(record)


class _Forward(_Stateless):
    """Merge and branch children: records pass unchanged."""

    def process(self, record: Record) -> None:
        self.context.forward(record)


class _Branch(_Stateless):
    """Sends each record to the first branch child whose predicate holds."""

    def process(self, record: Record) -> None:
        for index, predicate in enumerate(self.params["predicates"]):
            if predicate(record.key, record.value):
                self.context.forward(record, self.children[index])
                return


class _ToStream(_Stateless):
    def process(self, record: Record) -> None:
        self.context.forward(Record(record.key, record.value, record.timestamp, record.headers))


class _TableFilter(_Stateless):
    def process(self, record: Record) -> None:
        predicate = self.params["predicate"]

        def keep(value: Any) -> Any:
            return value if value is not None and predicate(record.key, value) else None

        new, old = keep(record.value), keep(record.old)
        if new is not None or old is not None:
            self.context.forward(record._replace(value=new, old=old))


class _TableMapValues(_Stateless):
    def process(self, record: Record) -> None:
        fn = self.params["fn"]
        new = None if record.value is None else fn(record.value)
        old = None if record.old is None else fn(record.old)
        self.context.forward(record._replace(value=new, old=old))


class _MapBatches(_Stateless):
    """Runs ``fn`` over the batch's records as one Arrow table (at ``flush``).

    The input comes as records (buffered, then made into columns ``key``, ``timestamp``
    and ``value`` or, when every value is a dict, one column per field) or, on the
    task's Arrow path, as tables in those columns already (``add_table``). The result
    goes to ``table_sink`` as a whole when the task set one (the node's only child
    writes to a user topic), else becomes records: ``key`` and ``timestamp`` columns if
    present (else None and the largest input timestamp), a ``value`` column if it is
    the only other one, else a dict of the other columns.
    """

    table_sink: Callable[[pa.Table], None] | None = None

    def init(self, context: Context) -> None:
        super().init(context)
        self.buffer: list[Record] = []
        self.tables: list[pa.Table] = []

    def process(self, record: Record) -> None:
        self.buffer.append(record)

    def add_table(self, table: pa.Table) -> None:
        """Take a table of records (the Arrow path) for the next ``fn`` call."""
        self.tables.append(table)

    def flush(self) -> None:
        if not (self.buffer or self.tables):
            return
        if self.tables:
            tables, self.tables = self.tables, []
            table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
            latest = pc.max(table.column("timestamp")).as_py()
        else:
            table, latest = self._table_of_records()
        result = self.params["fn"](table)
        if isinstance(result, pa.RecordBatch):
            result = pa.Table.from_batches([result])
        if not isinstance(result, pa.Table):
            raise StreamsError(
                f"map_batches: fn must return a pyarrow.Table, got {type(result).__name__} "
                f"{result!r:.80}"
            )
        n = result.num_rows
        if not n:
            return
        if self.table_sink is not None:
            if "key" not in result.column_names:
                result = result.append_column("key", pa.nulls(n, pa.binary()))
            if "timestamp" not in result.column_names:
                result = result.append_column("timestamp", pa.repeat(pa.scalar(latest), n))
            self.table_sink(result)
            return
        names = result.column_names
        keys = result.column("key").to_pylist() if "key" in names else [None] * n
        timestamps = (
            result.column("timestamp").to_pylist() if "timestamp" in names else [latest] * n
        )
        rest = result.drop_columns([c for c in ("key", "timestamp") if c in names])
        if rest.column_names == ["value"]:
            values = rest.column("value").to_pylist()
        else:
            values = rest.to_pylist()
        forward = self.context.forward
        for key, value, timestamp in zip(keys, values, timestamps, strict=True):
            forward(Record(key, value, timestamp))

    def _table_of_records(self) -> tuple[pa.Table, int]:
        records, self.buffer = self.buffer, []
        columns: dict[str, list[Any]] = {
            "key": [r.key for r in records],
            "timestamp": [r.timestamp for r in records],
        }
        if all(isinstance(r.value, dict) for r in records):
            for name in records[0].value:
                columns[name] = [r.value.get(name) for r in records]
        else:
            columns["value"] = [r.value for r in records]
        return pa.table(columns), max(r.timestamp for r in records)


class _TableSource(_Stateless):
    """Writes each record as the key's row (a None value deletes) and forwards the change
    (the record cache does, when the store is behind one)."""

    def init(self, context: Context) -> None:
        super().init(context)
        self.store = context.store(self.params["store"])
        self.caching = context.caching(self.params["store"])

    @property
    def cached_store(self) -> str:  # type: ignore[override]
        return self.params["store"]

    def process(self, record: Record) -> None:
        if record.key is None:
            self.context.record_dropped("null key")
            return
        if self.caching:
            self.store.put(record.key, record.value)
            return
        old = self.store.get(record.key)
        self.store.put(record.key, record.value)
        if old is not None or record.value is not None:
            self.context.forward(record._replace(old=old))


class _Aggregate(_Stateless):
    """count, reduce, aggregate and the column aggregations, windowed or not. Behind a
    record cache it only writes its store; the cache's flushes forward the updates."""

    def init(self, context: Context) -> None:
        super().init(context)
        p = self.params
        self.aggregation = Aggregation(p["initializer"], p["aggregator"], p["merger"])
        self.store = context.store(p["store"])
        self.caching = context.caching(p["store"])
        self.windowed = None
        self.clock = context.clock(p["store"])
        windows = p["windows"]
        if isinstance(windows, SessionWindows):
            self.windowed = WindowedAggregator(windows, self.aggregation, self.store)
        elif isinstance(windows, SlidingWindows):
            records = WindowStoreState(context.store(p["records_store"]), 1)
            state = WindowStoreState(self.store, windows.difference_ms)
            self.windowed = WindowedAggregator(windows, self.aggregation, state, records)
        elif windows is not None:
            state = WindowStoreState(self.store, windows.size_ms)
            self.windowed = WindowedAggregator(windows, self.aggregation, state)

    @property
    def cached_store(self) -> str:  # type: ignore[override]
        return self.params["store"]

    def process(self, record: Record) -> None:
        if record.key is None or record.value is None:
            self.context.record_dropped("null key or value")  # as Kafka Streams skips them
            return
        if self.windowed is None:
            old = self.store.get(record.key)
            base = self.aggregation.initializer() if old is None else old
            new = self.aggregation.aggregator(record.key, record.value, base)
            self.store.put(record.key, new)
            if not self.caching:
                self.context.forward(record._replace(value=new, old=old))
            return
        updates = self.windowed.process(
            record.key, record.value, record.timestamp, self.clock.observe(record.timestamp)
        )
        if updates is None:
            self.context.record_dropped("late")
            return
        if self.caching:
            return
        for window, old, new in updates:
            self.context.forward(Record(window, new, record.timestamp, record.headers, old))


class _Suppress(_Stateless):
    """Buffers a windowed table's rows; emits each once its window has closed, judged by
    the stream time of the rows reaching it (as Kafka's suppression processor)."""

    def init(self, context: Context) -> None:
        super().init(context)
        self.buffer = SuppressBuffer(
            close_time_for(self.params["windows"]), context.store(self.params["store"])
        )
        self.clock = context.clock(self.params["store"])

    def process(self, record: Record) -> None:
        self.buffer.add(record.key, record.value)
        for window, value in self.buffer.emit(self.clock.observe(record.timestamp)):
            self.context.forward(Record(window, value, window.end_ms))


class _Materialize(_Stateless):
    """Keeps a computed table's rows in a store, so that a join can read them."""

    def init(self, context: Context) -> None:
        super().init(context)
        self.store = context.store(self.params["store"])

    def process(self, record: Record) -> None:
        self.store.put(record.key, record.value)
        self.context.forward(record)


class _StreamTableJoin(_Stateless):
    def init(self, context: Context) -> None:
        super().init(context)
        self.table = context.store(self.params["store"])

    def process(self, record: Record) -> None:
        if record.key is None or record.value is None:
            self.context.record_dropped("null key or value")
            return
        row = self.table.get(record.key)
        if row is None and self.params["how"] == "inner":
            return
        self.context.forward(record._replace(value=self.params["joiner"](record.value, row)))


class _StreamStreamJoin(_Stateless):
    """One side of a windowed stream-stream join.

    Each side's window store keeps every record by key and timestamp (duplicates
    retained) for as long as a record of the other side may still join it. The shared
    outer store of a left or outer join holds the records still without a match, keyed
    ``(close_time, side, key, timestamp) -> [values]`` so that those whose window closed
    are one range scan; a match deletes the entry.
    """

    def init(self, context: Context) -> None:
        super().init(context)
        p = self.params
        this, other, *outer = p["stores"]
        self.this_side = p["side"] == "this"
        self.own = context.store(this if self.this_side else other)
        self.other = context.store(other if self.this_side else this)
        self.outer = context.store(outer[0]) if outer else None
        self.windows: JoinWindows = p["windows"]
        # Does this side emit its unmatched records (with None for the other side)?
        self.emits_unmatched = p["how"] == "outer" or (p["how"] == "left" and self.this_side)
        # Both sides share one stream time: the records reaching either of them.
        self.clock = context.clock(this)

    def _bounds(self, timestamp_ms: int) -> tuple[int, int]:
        """The other side's timestamps a record at ``timestamp_ms`` joins."""
        w = self.windows
        if self.this_side:
            return timestamp_ms - w.before_ms, timestamp_ms + w.after_ms
        return timestamp_ms - w.after_ms, timestamp_ms + w.before_ms

    def _close_time(self, timestamp_ms: int, this_side: bool) -> int:
        w = self.windows
        reach = w.after_ms if this_side else w.before_ms
        return timestamp_ms + reach + w.grace_ms + 1

    def process(self, record: Record) -> None:
        if record.key is None or record.value is None:
            self.context.record_dropped("null key or value")
            return
        key, ts = record.key, record.timestamp
        stream_time_ms = self.clock.observe(ts)
        if stream_time_ms >= self._close_time(ts, self.this_side):
            self.context.record_dropped("late")
            return
        self.own.put(key, record.value, ts)
        lo, hi = self._bounds(ts)
        joiner = self.params["joiner"]
        matched = False
        for other_ts, value in self.other.fetch(key, lo, hi):
            matched = True
            if self.outer is not None:
                close = self._close_time(other_ts, not self.this_side)
                self.outer.put((close, not self.this_side, key, other_ts), None)
            pair = (record.value, value) if self.this_side else (value, record.value)
            self.context.forward(record._replace(value=joiner(*pair), timestamp=max(ts, other_ts)))
        if self.emits_unmatched and not matched:
            entry = (self._close_time(ts, self.this_side), self.this_side, key, ts)
            self.outer.put(entry, [*(self.outer.get(entry) or []), record.value])
        if self.outer is not None:
            self._emit_unmatched(stream_time_ms)

    def _emit_unmatched(self, stream_time_ms: int) -> None:
        """Emit the unmatched records (of either side: the store is shared) whose window
        has closed, joined with None."""
        assert self.outer is not None
        joiner = self.params["joiner"]
        closed = list(self.outer.range(None, (stream_time_ms + 1,)))
        for entry, values in closed:
            self.outer.put(entry, None)
            _, this_side, key, ts = entry
            for value in values:
                pair = (value, None) if this_side else (None, value)
                self.context.forward(Record(key, joiner(*pair), ts))


class _TableTableJoin(_Stateless):
    """One side of a table-table join: recompute the key's result row on a change."""

    def init(self, context: Context) -> None:
        super().init(context)
        this, other = self.params["stores"]
        self.this_side = self.params["side"] == "this"
        self.other = context.store(other if self.this_side else this)

    def _result(self, mine: Any, theirs: Any) -> Any:
        this, other = (mine, theirs) if self.this_side else (theirs, mine)
        how = self.params["how"]
        present = {
            "inner": this is not None and other is not None,
            "left": this is not None,
            "outer": this is not None or other is not None,
        }[how]
        return self.params["joiner"](this, other) if present else None

    def process(self, record: Record) -> None:
        if record.key is None:
            return
        theirs = self.other.get(record.key)
        new = self._result(record.value, theirs)
        old = self._result(record.old, theirs)
        if new is not None or old is not None:
            self.context.forward(record._replace(value=new, old=old))


class _Custom(_Stateless):
    """A user's Processor from ``KStream.process``."""

    def init(self, context: Context) -> None:
        super().init(context)
        self.inner: Processor = self.params["factory"]()
        if not isinstance(self.inner, Processor):
            raise StreamsError(f"process: the factory must return a Processor, got {self.inner!r}")
        self.inner.init(context)

    def process(self, record: Record) -> None:
        self.inner.process(record)

    def flush(self) -> None:
        self.inner.flush()


_PROCESSORS: dict[str, Callable[[dict[str, Any]], Processor]] = {
    "filter": _Filter,
    "map": _Map,
    "map_values": _MapValues,
    "flat_map": _FlatMap,
    "flat_map_values": _FlatMapValues,
    "select_key": _SelectKey,
    "peek": _Peek,
    "merge": _Forward,
    "branch": _Branch,
    "branch_child": _Forward,
    "map_batches": _MapBatches,
    "to_stream": _ToStream,
    "table_filter": _TableFilter,
    "table_map_values": _TableMapValues,
    "table_source": _TableSource,
    "aggregate": _Aggregate,
    "suppress": _Suppress,
    "materialize": _Materialize,
    "stream_table_join": _StreamTableJoin,
    "stream_stream_join": _StreamStreamJoin,
    "table_table_join": _TableTableJoin,
    "custom": _Custom,
}
