"""Tasks run sub-topologies over input records on real LMDB stores (tmp_path), no Ray:
ordering, windowed aggregation with late records, suppression, the three kinds of join,
punctuation, map_batches, restore from the changelog, and errors."""

from __future__ import annotations

import itertools
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raystream.errors import StreamsError
from raystream.records import build_batch, record_schema, to_user_table
from raystream.streams import Windowed
from raystream.streams.dsl import App
from raystream.streams.processors import STREAM_TIME, WALL_CLOCK, Processor, Record
from raystream.streams.task import (
    OutputBatch,
    OutputRecord,
    Task,
    TaskId,
    decode_stream_time,
    encode_stream_time,
    open_task_stores,
    processable,
)
from raystream.streams.windows import (
    JoinWindows,
    SessionWindows,
    TumblingWindows,
)
from raystream.types import ConsumerRecord, TopicPartition


class Runner:
    """Runs every sub-topology of ``app`` as the task of partition 0 and carries records
    through repartition topics, as the runtime will (one partition per topic)."""

    def __init__(self, app: App, state_dir: Path) -> None:
        self.app = app
        self.state_dir = state_dir
        self.offsets: Counter[str] = Counter()
        self.changelog: dict[TopicPartition, list] = defaultdict(list)
        self.tasks = [self._task(sub, state_dir / f"{sub.id}_0") for sub in app.subtopologies()]

    def _task(self, sub: Any, directory: Path) -> Task:
        return Task(TaskId(sub.id, 0), sub, open_task_stores(sub, directory), "app")

    def records(self, topic: str, items: list[tuple[Any, Any, int]]) -> list[ConsumerRecord]:
        result = []
        for key, value, ts in items:
            result.append(ConsumerRecord(topic, 0, self.offsets[topic], ts, 0, key, value, ()))
            self.offsets[topic] += 1
        return result

    def send(self, batch: list[ConsumerRecord], now_ms: int = 0) -> list[OutputRecord]:
        """Process ``batch`` and everything it sends through repartition topics; return
        the records for user topics."""
        outputs = []
        pending = list(batch)
        while pending:
            by_task: dict[int, list[ConsumerRecord]] = defaultdict(list)
            for record in pending:
                task = next(t for t in self.tasks if record.topic in t.subtopology.source_topics)
                by_task[task.task_id.subtopology].append(record)
            pending = []
            for index, records in by_task.items():
                result = self.tasks[index].process(records, now_ms)
                for tp, changes in result.changelog.items():
                    self.changelog[tp].extend(changes)
                for out in result.outputs:
                    if isinstance(out, OutputBatch):
                        outputs += rows_of(out)
                    elif out.topic in self.app.topology.repartition_topics:
                        pending += self.records(out.topic, [(out.key, out.value, out.timestamp)])
                    else:
                        outputs.append(out)
        return outputs

    def feed(self, topic: str, items: list[tuple[Any, Any, int]], now_ms: int = 0) -> list:
        return self.send(self.records(topic, items), now_ms)


def rows_of(batch: OutputBatch) -> list[OutputRecord]:
    """A map_batches result table as the records the record path would emit."""
    table = batch.table
    rest = table.drop_columns(["key", "timestamp"])
    values = (
        rest.column("value").to_pylist() if rest.column_names == ["value"] else rest.to_pylist()
    )
    keys, timestamps = table.column("key").to_pylist(), table.column("timestamp").to_pylist()
    return [OutputRecord(batch.topic, *row) for row in zip(keys, values, timestamps, strict=True)]


def polled_table(
    topic: str, items: list[tuple[Any, Any, int]], value_schema: pa.Schema | None = None
) -> pa.Table:
    """``items`` as ``Consumer.poll_arrow`` returns them: partition 0 from offset 0."""
    keys, values, timestamps = (list(column) for column in zip(*items, strict=True))
    batch = build_batch(record_schema(value_schema), keys, values, timestamps, None)
    stored = pa.Table.from_batches([batch]).append_column("offset", pa.array(range(len(items))))
    return to_user_table(stored, topic, 0)


def kv(outputs: list[OutputRecord]) -> list[tuple[Any, Any]]:
    return [(o.key, o.value) for o in outputs]


def test_records_of_co_partitioned_inputs_are_processed_by_timestamp(tmp_path: Path) -> None:
    app = App(None, "app")
    seen = []
    app.stream("a").merge(app.stream("b")).peek(lambda k, v: seen.append(v)).to("out")
    runner = Runner(app, tmp_path)
    batch = runner.records("a", [(None, "a1", 1), (None, "a5", 5), (None, "a9", 9)])
    batch += runner.records("b", [(None, "b2", 2), (None, "b3", 3), (None, "b10", 10)])
    result = runner.tasks[0].process(batch, now_ms=0)
    assert seen == ["a1", "b2", "b3", "a5", "a9", "b10"]
    assert [o.value for o in result.outputs] == seen
    assert result.offsets == {TopicPartition("a", 0): 3, TopicPartition("b", 0): 3}
    assert result.stream_time_ms == 10


def test_each_partitions_order_is_kept_even_when_timestamps_go_back(tmp_path: Path) -> None:
    app = App(None, "app")
    app.stream("a").to("out")
    runner = Runner(app, tmp_path)
    out = runner.feed("a", [(None, 1, 5), (None, 2, 3), (None, 3, 4)])
    assert [o.value for o in out] == [1, 2, 3]


def test_stateless_operations(tmp_path: Path) -> None:
    app = App(None, "app")
    words = app.stream("lines").flat_map_values(lambda v: v.split())
    short, long = words.filter_not(lambda k, v: v == "the").branch(
        lambda k, v: len(v) <= 3, lambda k, v: True
    )
    short.select_key(lambda k, v: v.upper()).to("short")
    long.map(lambda k, v: (len(v), v + "!")).to("long")
    runner = Runner(app, tmp_path)
    out = runner.feed("lines", [(None, "the quick fox jumps", 1)])
    assert [(o.topic, o.key, o.value) for o in out] == [
        ("long", 5, "quick!"),
        ("short", "FOX", "fox"),
        ("long", 5, "jumps!"),
    ]


def test_windowed_count_with_out_of_order_and_late_records_emits_final_counts(
    tmp_path: Path,
) -> None:
    app = App(None, "app")
    (
        app.stream("clicks")
        .group_by(lambda k, v: v)
        .window(TumblingWindows(10, grace_ms=5))
        .count(name="per-window")
        .suppress()
        .to_stream()
        .to("counts")
    )
    runner = Runner(app, tmp_path)
    items = [(None, "p", t) for t in (3, 12, 8, 16, 4)] + [(None, "q", 11), (None, "p", 40)]
    out = runner.feed("clicks", items)
    assert kv(out) == [
        (Windowed("p", 0, 10), 2),  # closed at stream time 16; the record at 4 was late
        (Windowed("p", 10, 20), 2),  # closed at 40
        (Windowed("q", 10, 20), 1),
    ]
    aggregating = runner.tasks[1]
    assert aggregating.dropped_records == {"late": 1}
    assert set(runner.changelog) == {
        TopicPartition(f"app-{store.name}-changelog", 0) for store in aggregating.subtopology.stores
    }
    assert len(aggregating.subtopology.stores) == 2  # the window store and the suppression


def test_session_windows_merge_and_retract_the_sessions_they_replace(tmp_path: Path) -> None:
    app = App(None, "app")
    app.stream("t").group_by_key().window(SessionWindows(6, grace_ms=100)).count().to_stream().to(
        "out"
    )
    runner = Runner(app, tmp_path)
    out = runner.feed("t", [("k", 1, 0), ("k", 1, 12), ("k", 1, 6)])
    assert kv(out) == [
        (Windowed("k", 0, 0), 1),
        (Windowed("k", 12, 12), 1),
        (Windowed("k", 0, 0), None),
        (Windowed("k", 12, 12), None),
        (Windowed("k", 0, 12), 3),
    ]


def test_column_aggregations_on_dict_values(tmp_path: Path) -> None:
    app = App(None, "app")
    grouped = app.stream("sales").group_by(lambda k, v: v["cat"])
    grouped.sum("amount").to_stream().to("sum")
    grouped.min("amount").to_stream().to("min")
    grouped.max("amount").to_stream().to("max")
    grouped.mean("amount").to_stream().to("mean")
    runner = Runner(app, tmp_path)
    sales = [(None, {"cat": "a", "amount": x}, i) for i, x in enumerate((4, 1, 7))]
    out = runner.feed("sales", sales)
    last = {o.topic: o.value for o in out}
    assert last == {"sum": 12, "min": 1, "max": 7, "mean": 4.0}


def test_stream_table_join_inner_and_left(tmp_path: Path) -> None:
    app = App(None, "app")
    orders, customers = app.stream("orders"), app.table("customers")
    orders.join(customers, lambda o, c: f"{o}@{c}").to("inner")
    orders.left_join(customers, lambda o, c: f"{o}@{c}").to("left")
    runner = Runner(app, tmp_path)
    assert runner.feed("customers", [("c1", "Ann", 1)]) == []
    out = runner.feed("orders", [("c1", "o1", 2), ("c2", "o2", 3)])
    assert [(o.topic, o.value) for o in out] == [
        ("inner", "o1@Ann"),
        ("left", "o1@Ann"),
        ("left", "o2@None"),
    ]
    # A table update does not re-trigger old records; a tombstone deletes the row.
    assert runner.feed("customers", [("c1", "Bob", 4), ("c2", "Cy", 5)]) == []
    runner.feed("customers", [("c1", None, 6)])
    out = runner.feed("orders", [("c1", "o3", 7), ("c2", "o4", 8)])
    assert [(o.topic, o.value) for o in out] == [
        ("left", "o3@None"),
        ("inner", "o4@Cy"),
        ("left", "o4@Cy"),
    ]


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("inner", [("A", "B"), ("A", "E")]),
        ("left", [("A", "B"), ("A", "E"), ("C", None)]),
        ("outer", [("A", "B"), ("A", "E"), ("C", None), (None, "D")]),
    ],
)
def test_stream_stream_joins_within_join_windows(tmp_path: Path, how: str, expected) -> None:
    app = App(None, "app")
    left, right = app.stream("l"), app.stream("r")
    join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[how]
    join(right, lambda a, b: (a, b), JoinWindows(before_ms=5, after_ms=2)).to("out")
    runner = Runner(app, tmp_path)
    batch = runner.records("l", [("k", "A", 10), ("k", "C", 30)])
    # B (12) is 2 after A: in the window; E (6) is 4 before A: in; D (50) matches nothing;
    # F (100) only advances stream time so that the windows of C and D close.
    batch += runner.records("r", [("k", "E", 6), ("k", "B", 12), ("k", "D", 50)])
    batch += runner.records("r", [("x", "F", 100)])
    out = runner.send(batch)
    assert sorted(kv(out), key=str) == sorted([("k", pair) for pair in expected], key=str)
    # Unmatched results come only once their window has closed, never before a match.
    if how != "inner":
        assert kv(out).index(("k", ("C", None))) > kv(out).index(("k", ("A", "B")))


def test_stream_stream_left_join_emits_no_unmatched_result_for_a_late_match(
    tmp_path: Path,
) -> None:
    app = App(None, "app")
    left, right = app.stream("l"), app.stream("r")
    left.left_join(right, lambda a, b: (a, b), JoinWindows(5, 5, grace_ms=10)).to("out")
    runner = Runner(app, tmp_path)
    assert runner.feed("l", [("k", "A", 10)]) == []
    assert runner.feed("r", [("z", "Z", 18)]) == []  # A's window is still open (grace)
    assert kv(runner.feed("r", [("k", "B", 14)])) == [("k", ("A", "B"))]
    assert runner.feed("r", [("z", "Z", 100)]) == []  # A matched: no ("A", None)


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("inner", [("k", "1+a"), ("k", None)]),
        ("left", [("k", "1+None"), ("k", "1+a"), ("k", None)]),
        ("outer", [("k", "1+None"), ("k", "1+a"), ("k", "None+a")]),
    ],
)
def test_table_table_joins(tmp_path: Path, how: str, expected) -> None:
    app = App(None, "app")
    this, other = app.table("l"), app.table("r")
    join = {"inner": this.join, "left": this.left_join, "outer": this.outer_join}[how]
    join(other, lambda a, b: f"{a}+{b}").to_stream().to("out")
    runner = Runner(app, tmp_path)
    out = runner.feed("l", [("k", "1", 1)])
    out += runner.feed("r", [("k", "a", 2)])
    out += runner.feed("l", [("k", None, 3)])
    assert kv(out) == expected


def test_table_filter_and_map_values_retract_rows(tmp_path: Path) -> None:
    app = App(None, "app")
    table = app.table("t").filter(lambda k, v: v > 1).map_values(lambda v: v * 10)
    table.to_stream().to("out")
    runner = Runner(app, tmp_path)
    out = runner.feed("t", [("k", 1, 1), ("k", 2, 2), ("k", 0, 3)])
    assert kv(out) == [("k", 20), ("k", None)]


class Ticker(Processor):
    """Forwards each record and, on punctuation, a record saying which clock ticked."""

    def init(self, context: Any) -> None:
        super().init(context)
        context.schedule(100, WALL_CLOCK, lambda ms: self.tick("wall", ms))
        context.schedule(10, STREAM_TIME, lambda ms: self.tick("stream", ms))
        self.count = context.store("ticks")

    def tick(self, clock: str, ms: int) -> None:
        self.context.forward(Record(clock, ms, max(ms, 0)))

    def process(self, record: Record) -> None:
        self.count.put("n", (self.count.get("n") or 0) + 1)
        self.context.forward(record)


def test_custom_processor_punctuates_on_stream_time_and_wall_clock(tmp_path: Path) -> None:
    app = App(None, "app")
    app.add_store("ticks")
    app.stream("in").process(Ticker, "ticks").to("out")
    runner = Runner(app, tmp_path)
    out = runner.feed("in", [(None, "a", 1), (None, "b", 5), (None, "c", 12)], now_ms=1_000)
    # Stream-time punctuation runs after the record that advanced stream time past it.
    assert kv(out) == [(None, "a"), ("stream", 1), (None, "b"), (None, "c"), ("stream", 12)]
    task = runner.tasks[0]
    assert kv(task.punctuate(now_ms=1_050).outputs) == []
    result = task.punctuate(now_ms=1_100)
    assert kv(result.outputs) == [("wall", 1_100)]
    assert kv(task.process([], now_ms=1_150).outputs) == []
    assert task.stores["ticks"].get("n") == 3


def test_map_batches_runs_over_the_batch_as_an_arrow_table(tmp_path: Path) -> None:
    app = App(None, "app")
    calls = []

    def double(table: pa.Table) -> pa.Table:
        calls.append(table.num_rows)
        return table.append_column("y", pc.multiply(table["x"], 2))

    app.stream("in").map_batches(double).to("out")
    runner = Runner(app, tmp_path)
    out = runner.feed("in", [(b"k", {"x": i}, 10 + i) for i in range(3)])
    assert calls == [3]
    assert [(o.key, o.value, o.timestamp) for o in out] == [
        (b"k", {"x": i, "y": 2 * i}, 10 + i) for i in range(3)
    ]


@pytest.mark.parametrize("typed", [False, True])
def test_map_batches_arrow_path_gives_what_the_record_path_gives(
    tmp_path: Path, typed: bool
) -> None:
    seen: list[list[str]] = []

    def scaled(table: pa.Table) -> pa.Table:
        seen.append(table.column_names)
        amount = table["x"] if typed else pc.binary_length(table["value"])
        return pa.table(
            {
                "key": table["key"],
                "timestamp": table["timestamp"],
                "value": pc.cast(amount, pa.string()),
            }
        ).filter(pc.greater(amount, 1))

    def build() -> App:
        app = App(None, "app")
        stream = app.stream("in")
        stream.map_batches(scaled).to("out")  # a user sink: one table output
        stream.map_batches(scaled).filter(lambda k, v: v != "3").to("filtered")  # records
        return app

    schema = pa.schema([("x", pa.int64()), ("name", pa.string())]) if typed else None
    values = [{"x": i, "name": f"n{i}"} if typed else b"v" * i for i in range(5)]
    items = [(b"k%d" % (i % 2), values[i], 10 + i) for i in range(5)]
    items[2] = (b"k0", values[2], -1)  # an invalid timestamp: dropped on either path
    by_records = Runner(build(), tmp_path / "records")
    expected = by_records.feed("in", items)

    by_tables = Runner(build(), tmp_path / "tables")
    task = by_tables.tasks[0]
    assert task.arrow_topics == {"in"}
    result = task.process([], 0, [polled_table("in", items, schema)])
    assert isinstance(result.outputs[0], OutputBatch)
    outputs = [
        r for o in result.outputs for r in (rows_of(o) if isinstance(o, OutputBatch) else [o])
    ]
    assert outputs == expected
    assert {o.topic for o in outputs} == {"out", "filtered"}
    assert result.offsets == {TopicPartition("in", 0): 5}
    assert result.dropped_records == 1 and task.dropped_records == {"invalid timestamp": 1}
    assert task.stream_time_ms == by_records.tasks[0].stream_time_ms == 14
    assert task.processed_records_total == 5
    # fn saw the same columns either way: key, timestamp, then value or the typed fields.
    columns = ["key", "timestamp", "x", "name"] if typed else ["key", "timestamp", "value"]
    assert seen == [columns] * 4


def test_only_map_batches_sources_read_as_stored_take_the_arrow_path(tmp_path: Path) -> None:
    app = App(None, "app")
    app.stream("a").map_batches(lambda t: t).to("out")
    app.stream("b", value_deserializer=bytes.decode).map_batches(lambda t: t).to("out")
    app.stream("c").filter(lambda k, v: True).to("out")
    app.stream(["d", "e"]).map_batches(lambda t: t).to("out")
    tasks = [Runner(app, tmp_path).tasks[i].arrow_topics for i in range(4)]
    assert tasks == [{"a"}, set(), set(), set()]


def test_map_batches_returning_no_table_is_a_clear_streams_error(
    tmp_path: Path,
) -> None:
    app = App(None, "app")
    app.stream("in").map_batches(lambda table: table.to_pydict()).to("out")
    task = Runner(app, tmp_path).tasks[0]
    with pytest.raises(
        StreamsError, match=r"map_batches: fn must return a pyarrow.Table, got dict"
    ):
        task.process([], 0, [polled_table("in", [(b"k", b"v", 1)])])


def test_a_moved_task_restored_from_its_changelog_continues_exactly(tmp_path: Path) -> None:
    def build() -> App:
        app = App(None, "app")
        app.stream("t").group_by_key().window(TumblingWindows(10, grace_ms=5)).count(
            name="c"
        ).suppress().to_stream().to("out")
        return app

    items = [("k", 1, t) for t in (1, 4, 12, 3, 19, 25, 14, 31, 60)]
    straight = Runner(build(), tmp_path / "straight")
    expected = straight.feed("t", items)

    first = Runner(build(), tmp_path / "first")
    out = first.feed("t", items[:5])
    # The task moves: a new one on empty stores restores them from the changelog.
    app = build()
    sub = app.subtopologies()[0]
    stores = open_task_stores(sub, tmp_path / "moved")
    for name, tp in Task(TaskId(0, 0), sub, stores, "app").changelog_partitions().items():
        stores[name].restore(first.changelog[tp])
    # Its stream time comes back from the commit metadata the old task's offsets carried.
    metadata = encode_stream_time(first.tasks[0].stream_time_ms)
    assert decode_stream_time(metadata) == 19
    assert decode_stream_time("") == decode_stream_time("a note from elsewhere") == -1
    moved = Task(TaskId(0, 0), sub, stores, "app", stream_time_ms=decode_stream_time(metadata))
    records = first.records("t", items[5:])
    out += moved.process(records, now_ms=0).outputs
    assert kv(out) == kv(expected)
    assert kv(expected) == [  # 14 came after stream time 25 had closed [10, 20)
        (Windowed("k", 0, 10), 3),
        (Windowed("k", 10, 20), 2),
        (Windowed("k", 20, 30), 1),
        (Windowed("k", 30, 40), 1),
    ]


def test_a_failing_user_function_raises_a_streams_error_naming_node_and_record(
    tmp_path: Path,
) -> None:
    app = App(None, "app")
    app.stream("in").map_values(lambda v: 1 / v).to("out")
    runner = Runner(app, tmp_path)
    with pytest.raises(StreamsError, match=r"KSTREAM-MAPVALUES-0000000001.*in-0@1.*Zero"):
        runner.feed("in", [(None, 1, 1), (None, 0, 2)])


def test_a_record_of_another_partition_is_refused(tmp_path: Path) -> None:
    app = App(None, "app")
    app.stream("in").to("out")
    runner = Runner(app, tmp_path)
    with pytest.raises(StreamsError, match="does not read"):
        runner.tasks[0].process([ConsumerRecord("in", 1, 0, 0, 0, None, b"", ())], now_ms=0)


def test_repartition_records_carry_keys_any_partitioner_hashes_alike(tmp_path: Path) -> None:
    app = App(None, "app")
    app.stream("in").group_by(lambda k, v: ("user", v)).count(name="c")
    runner = Runner(app, tmp_path)
    result = runner.tasks[0].process(
        runner.records("in", [(None, 7, 1), (None, 7, 2), (None, 8, 3)]), now_ms=0
    )
    keys = [o.key for o in result.outputs]
    assert all(isinstance(k, bytes) for k in keys)
    assert keys[0] == keys[1] != keys[2]
    assert [k for k, _ in itertools.groupby(o.topic for o in result.outputs)] == [
        "app-c-repartition"
    ]


# -- property tests: tasks on LMDB give the batch answer for in-grace disorder ----------


@st.composite
def in_grace(draw: Any, grace_ms: int, topics: tuple[str, ...]) -> list[tuple[str, str, int]]:
    """``(topic, key, timestamp)`` records, out of order by at most ``grace_ms``."""
    base, records = 0, []
    for _ in range(draw(st.integers(0, 30))):
        base += draw(st.integers(0, 8))
        ts = max(0, base - draw(st.integers(0, grace_ms)))
        records.append((draw(st.sampled_from(topics)), draw(st.sampled_from("xyz")), ts))
    return records


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 20), st.integers(0, 10), st.data())
def test_suppressed_windowed_sum_through_a_repartition_is_the_batch_answer(
    size: int, grace: int, data: Any
) -> None:
    records = data.draw(in_grace(grace, ("in",)))
    app = App(None, "app")
    app.stream("in").group_by(lambda k, v: v["k"]).window(TumblingWindows(size, grace)).sum(
        "n"
    ).suppress().to_stream().to("out")
    with tempfile.TemporaryDirectory() as directory:
        runner = Runner(app, Path(directory))
        out = []
        for i, (_, key, ts) in enumerate(records):
            out += runner.feed("in", [(None, {"k": key, "n": i}, ts)])
        out += runner.feed("in", [(None, {"k": "flush", "n": 0}, 10**9)])
    expected: dict[Windowed, int] = defaultdict(int)
    for i, (_, key, ts) in enumerate(records):
        start = ts - ts % size
        expected[Windowed(key, start, start + size)] += i
    assert dict(kv(out)) == dict(expected)
    assert len(out) == len(expected)  # one final result per window


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 6), st.integers(0, 6), st.integers(0, 10), st.data())
def test_stream_stream_inner_join_is_the_batch_answer(
    before: int, after: int, grace: int, data: Any
) -> None:
    records = data.draw(in_grace(grace, ("l", "r")))
    app = App(None, "app")
    app.stream("l").join(
        app.stream("r"), lambda a, b: (a, b), JoinWindows(before, after, grace)
    ).to("out")
    with tempfile.TemporaryDirectory() as directory:
        runner = Runner(app, Path(directory))
        out = []
        for i, (topic, key, ts) in enumerate(records):
            out += runner.feed(topic, [(key, i, ts)])
    lefts = [(i, k, t) for i, (topic, k, t) in enumerate(records) if topic == "l"]
    rights = [(i, k, t) for i, (topic, k, t) in enumerate(records) if topic == "r"]
    expected = [
        (k, (i, j))
        for i, k, t in lefts
        for j, k2, t2 in rights
        if k == k2 and t - before <= t2 <= t + after
    ]
    assert sorted(kv(out)) == sorted(expected)


def test_windows_close_on_the_stream_time_of_the_records_that_reach_them(
    tmp_path: Path,
) -> None:
    app = App(None, "app")
    app.stream("t").filter(lambda k, v: v != "skip").group_by_key().window(
        TumblingWindows(10)
    ).count().suppress().to_stream().to("out")
    runner = Runner(app, tmp_path)
    # The filtered record at 100 moves the task's stream time, not the aggregate's.
    assert runner.feed("t", [("k", "a", 1), ("k", "skip", 100), ("k", "a", 5)]) == []
    assert runner.tasks[0].stream_time_ms == 100
    assert kv(runner.feed("t", [("k", "a", 20)])) == [(Windowed("k", 0, 10), 2)]


def _records(topic: str, timestamps: list[int]) -> list[ConsumerRecord]:
    return [ConsumerRecord(topic, 0, i, ts, 0, b"k", b"v", ()) for i, ts in enumerate(timestamps)]


def test_a_multi_partition_task_waits_for_a_partition_that_has_records_to_come() -> None:
    """KIP-695: the merge by timestamp stops where a partition not caught up runs dry."""
    table, stream = TopicPartition("table", 0), TopicPartition("stream", 0)
    orders = _records("stream", [10, 11, 12])

    def caught_up(tp: TopicPartition) -> bool:
        return tp != table

    # The table has records to come and none here: every order waits.
    assert processable(orders, [table, stream], caught_up) == ([], orders)
    # Its first rows came (timestamps 0 and 11): the orders up to its last row go, the
    # rest waits for the table's next rows, which may come before them.
    rows = _records("table", [0, 11])
    now, later = processable(rows + orders, [table, stream], caught_up)
    assert [(r.topic, r.timestamp) for r in now] == [("table", 0), ("table", 11), ("stream", 10)]
    assert later == orders[1:]
    # Caught up: nothing more to come, everything goes, each partition in offset order.
    now, later = processable(rows + orders, [table, stream], lambda tp: True)
    assert now == rows + orders and later == []
    # A stream without a table record here, with the table caught up, goes at once.
    assert processable(orders, [table, stream], lambda tp: True) == (orders, [])
