"""Property test: random operation sequences agree with a plain list model of the log."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raystream.errors import CorruptRecordError
from raystream.log import OFFSET_COLUMN, Log, LogConfig
from raystream.log.batch import HEADER_SIZE

START = 1_700_000_000_000


@dataclass
class Model:
    """The log as a list of batches of (offset, value) rows, and its start and end."""

    start: int = 0
    end: int = 0
    batches: list[list[tuple[int, int]]] = field(default_factory=list)

    def rows(self) -> list[tuple[int, int]]:
        return [row for rows in self.batches for row in rows if row[0] >= self.start]

    def batch_ends(self) -> set[int]:
        return {rows[-1][0] for rows in self.batches}

    def append(self, values: list[int]) -> tuple[int, int]:
        first = self.end
        self.batches.append([(first + i, v) for i, v in enumerate(values)])
        self.end += len(values)
        return first, self.end - 1

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end:
            return
        if offset <= self.start:
            self.start = self.end = offset
            self.batches = []
            return
        kept = [[row for row in rows if row[0] < offset] for rows in self.batches]
        self.batches = [rows for rows in kept if rows]
        self.end = offset

    def delete_records_before(self, offset: int) -> None:
        self.start = max(self.start, offset)


appends = st.tuples(
    st.just("append"),
    st.integers(min_value=1, max_value=12),
    st.sampled_from([None, None, None, "lz4", "zstd"]),
)
rolls = st.tuples(st.just("roll"))
truncates = st.tuples(st.just("truncate"), st.floats(min_value=-0.2, max_value=1.1))
reopens = st.tuples(st.just("reopen"), st.booleans())
reads = st.tuples(
    st.just("read"),
    st.floats(min_value=0, max_value=1),
    st.sampled_from([1, 300, 1000, 4000, 1 << 30]),
    st.one_of(st.none(), st.floats(min_value=0, max_value=1.2)),
)
deletes = st.tuples(st.just("delete_before"), st.floats(min_value=0, max_value=1))
flushes = st.tuples(st.just("flush"))
operations = st.one_of(
    appends, appends, appends, rolls, truncates, reopens, reads, reads, deletes, flushes
)


def between(low: int, high: int, fraction: float) -> int:
    return max(0, low + int(fraction * (high - low)))


def check_read(log: Log, model: Model, start: int, max_bytes: int, max_offset: int | None):
    table = log.read(start, max_bytes=max_bytes, max_offset=max_offset)
    limit = model.end if max_offset is None else min(max_offset, model.end)
    expected = [row for row in model.rows() if start <= row[0] < limit]
    got = []
    if table.num_rows:
        offsets = table.column(OFFSET_COLUMN).to_pylist()
        got = list(zip(offsets, table.column("value").to_pylist(), strict=True))
    assert table.schema.field(OFFSET_COLUMN).type == pa.int64()
    # A prefix of the expected rows, never empty when rows exist, ending where a batch
    # ends (max_bytes stops at whole batches) or at the limit.
    assert got == expected[: len(got)]
    assert bool(got) == bool(expected)
    if got:
        last = got[-1][0]
        assert last + 1 == limit or last in model.batch_ends()
    if max_bytes == 1 << 30:
        assert got == expected


def check_all(log: Log, model: Model) -> None:
    assert (log.log_start_offset, log.log_end_offset) == (model.start, model.end)
    check_read(log, model, model.start, 1 << 30, None)


def abandon(log: Log) -> None:
    """Drop a log as a crash would (index files not trimmed, no marker)."""
    for segment in log._segments:
        for index in (segment.index, segment.time_index):
            index._unmap()  # as a crash leaves it: not trimmed
        segment.close()
    log._closed = True


@settings(
    derandomize=True,
    max_examples=70,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    ops=st.lists(operations, min_size=20, max_size=60),
    segment_bytes=st.sampled_from([1024, 2048, 4096]),
    index_interval_bytes=st.sampled_from([0, 300, 4096]),
)
def test_random_operations_match_a_list_model(ops, segment_bytes, index_interval_bytes):
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes)
    now = [START]

    def clock() -> int:
        return now[0]

    with tempfile.TemporaryDirectory() as directory:
        log = Log.open(directory, config, clock)
        model = Model()
        counter = 0
        try:
            for op in ops:
                now[0] += 7
                kind = op[0]
                if kind == "append":
                    values = list(range(counter, counter + op[1]))
                    counter += op[1]
                    data = pa.record_batch({"value": pa.array(values, pa.int64())})
                    assert log.append(data, compression=op[2]) == model.append(values)
                elif kind == "roll":
                    log.roll()
                elif kind == "truncate":
                    offset = between(model.start, model.end + 1, op[1])
                    log.truncate_to(offset)
                    model.truncate_to(offset)
                elif kind == "reopen":
                    if op[1]:
                        log.close()
                    else:
                        abandon(log)
                    log = Log.open(directory, config, clock)
                elif kind == "read":
                    start = between(model.start, model.end, op[1])
                    max_offset = None if op[3] is None else between(0, model.end, op[3])
                    check_read(log, model, start, op[2], max_offset)
                elif kind == "delete_before":
                    offset = between(model.start, model.end, op[1])
                    assert log.delete_records_before(offset) == max(model.start, offset)
                    model.delete_records_before(offset)
                elif kind == "flush":
                    log.flush()
                    assert log.recovery_point == model.end
                assert (log.log_start_offset, log.log_end_offset) == (model.start, model.end)
            check_all(log, model)
            log.close()
            log = Log.open(directory, config, clock)
            check_all(log, model)
            first, _ = log.append(pa.record_batch({"value": pa.array([-1], pa.int64())}))
            assert first == model.end
        finally:
            log.close()


def read_whole_log(log: Log, max_bytes: int) -> tuple[list[tuple[int, int]], bool]:
    """Every row from the log start on, in reads of ``max_bytes``, and whether a read
    raised CorruptRecordError (reading stops there)."""
    rows: list[tuple[int, int]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        try:
            table = log.read(offset, max_bytes=max_bytes)
        except CorruptRecordError:
            return rows, True
        if not table.num_rows:
            break
        offsets = table.column(OFFSET_COLUMN).to_pylist()
        rows.extend(zip(offsets, table.column("value").to_pylist(), strict=True))
        offset = offsets[-1] + 1
    return rows, False


def assert_intact(rows: list[tuple[int, int]], appended: dict[int, int]) -> None:
    """Every row is what was appended at its offset, and offsets strictly increase."""
    offsets = [offset for offset, _ in rows]
    assert offsets == sorted(set(offsets))
    for offset, value in rows:
        assert appended.get(offset) == value, (offset, value)


@settings(
    derandomize=True,
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    batch_sizes=st.lists(st.integers(min_value=1, max_value=12), min_size=3, max_size=25),
    rolls=st.sets(st.integers(min_value=0, max_value=24), max_size=3),
    codec=st.sampled_from([None, None, "lz4"]),
    segment_bytes=st.sampled_from([1024, 4096]),
    index_interval_bytes=st.sampled_from([0, 300, 4096]),
    clean=st.booleans(),
    which=st.floats(min_value=0, max_value=1, exclude_max=True),
    where=st.floats(min_value=0, max_value=1, exclude_max=True),
    near_header=st.booleans(),
    mask=st.integers(min_value=1, max_value=255),
    max_bytes=st.sampled_from([1, 700, 1 << 30]),
)
def test_a_flipped_byte_is_an_error_or_never_served(
    batch_sizes,
    rolls,
    codec,
    segment_bytes,
    index_interval_bytes,
    clean,
    which,
    where,
    near_header,
    mask,
    max_bytes,
):
    """Flip one byte anywhere in a segment's files (log, offset index, time index),
    after a clean or an unclean shutdown; reopen and read everything: a read either
    raises CorruptRecordError or returns only records as appended, at their offsets.
    The open after that recovers the log to a prefix that reads back whole."""
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes)
    now = [START]

    def clock() -> int:
        now[0] += 7
        return now[0]

    with tempfile.TemporaryDirectory() as directory:
        log = Log.open(directory, config, clock)
        appended: dict[int, int] = {}
        for i, size in enumerate(batch_sizes):
            if i in rolls:
                log.roll()
            values = list(range(len(appended) * 10, len(appended) * 10 + size))
            first, _ = log.append(pa.record_batch({"value": values}), compression=codec)
            appended.update((first + j, v) for j, v in enumerate(values))
        end = log.log_end_offset
        files = sorted(
            name
            for name in os.listdir(directory)
            if name.endswith((".log", ".index", ".timeindex"))
            and os.path.getsize(os.path.join(directory, name))
        )
        headers = {
            segment.path: [position for position, _ in segment.headers()]
            for segment in log._segments
        }
        if clean:
            log.close()
        else:
            log.flush()
            abandon(log)
        path = os.path.join(directory, files[int(which * len(files))])
        size = os.path.getsize(path)
        if near_header and path in headers:  # a byte of a header, often outside the CRC
            starts = headers[path]
            position = starts[int(where * len(starts))] + int(where * 997) % HEADER_SIZE
        else:
            position = int(where * size)
        with open(path, "r+b") as f:
            f.seek(position)
            byte = f.read(1)[0]
            f.seek(position)
            f.write(bytes([byte ^ mask]))

        log = Log.open(directory, config, clock)
        try:
            assert log.log_end_offset <= end
            rows, failed = read_whole_log(log, max_bytes)
            assert_intact(rows, appended)
            if not failed:
                assert [offset for offset, _ in rows] == list(range(log.log_end_offset))
            log.close()
            log = Log.open(directory, config, clock)
            rows, failed = read_whole_log(log, max_bytes)
            assert not failed
            assert rows == [(offset, appended[offset]) for offset in range(log.log_end_offset)]
        finally:
            log.close()
