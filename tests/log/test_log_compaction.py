"""Compaction (cleanup.policy=compact): the latest record per key survives, offsets kept."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from raystream.log import OFFSET_COLUMN
from raystream.log.producer_state import ProducerStateManager
from raystream.records import BYTES_SCHEMA
from raystream.transactions.markers import marker_batch

START = 1_700_000_000_000
HOUR = 3600 * 1000


def rows_of(table: pa.Table) -> list[tuple[int, str | None, str | None]]:
    return list(
        zip(
            table.column(OFFSET_COLUMN).to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )


def build(log, batch) -> None:
    """Three closed segments and an active one::

    segment 0: 0 a=a1, 1 b=b1, 2 a=a2, 3 c=c1, 4 b=b2      (one batch)
    segment 1: 5 a=a3, 6 (no key)=n1, 7 d=d1               (one batch)
    segment 2: 8 c=<tombstone>, 9 e=e1                     (two batches)
    active:    10 a=a4, 11 a=a5
    """
    log.append(batch(["a1", "b1", "a2", "c1", "b2"], keys=list("abacb"), timestamps=START))
    log.roll()
    log.append(batch(["a3", "n1", "d1"], keys=["a", None, "d"], timestamps=START))
    log.roll()
    log.append(batch([None], keys=["c"], timestamps=START))
    log.append(batch(["e1"], keys=["e"], timestamps=START))
    log.roll()
    log.append(batch(["a4", "a5"], keys=["a", "a"], timestamps=START))


SURVIVORS = [
    (4, "b", "b2"),
    (5, "a", "a3"),
    (6, None, "n1"),
    (7, "d", "d1"),
    (8, "c", None),
    (9, "e", "e1"),
    (10, "a", "a4"),
    (11, "a", "a5"),
]


def test_keeps_the_latest_record_per_key_with_offsets_unchanged(make_log, batch):
    log = make_log(cleanup_policy="compact", delete_retention_ms=HOUR)
    build(log, batch)
    stats = log.compact(now_ms=START)
    assert stats.records_removed == 4
    assert stats.segments_rewritten == 1
    assert stats.segments_deleted == 0
    assert stats.bytes_before > 0 and stats.bytes_after == log._segments[0].size
    assert rows_of(log.read(0)) == SURVIVORS
    assert (log.log_start_offset, log.log_end_offset) == (0, 12)
    # A second pass has nothing left to do.
    assert log.compact(now_ms=START).records_removed == 0


def test_tombstones_are_kept_until_delete_retention_passes(make_log, batch, clock):
    log = make_log(cleanup_policy="compact", delete_retention_ms=HOUR)
    build(log, batch)
    clock.set(START + HOUR)
    log.compact()
    assert (8, "c", None) in rows_of(log.read(0))
    clock.set(START + HOUR + 1)
    stats = log.compact()
    assert stats.records_removed == 1
    assert stats.segments_rewritten == 1
    assert rows_of(log.read(0)) == [r for r in SURVIVORS if r[0] != 8]


def test_the_active_segment_is_untouched(make_log, batch):
    log = make_log(cleanup_policy="compact")
    build(log, batch)
    active = log._segments[-1]
    size = active.size
    log.compact(now_ms=START)
    assert log._segments[-1] is active and active.size == size
    # a4 is superseded by a5, but both live in the active segment.
    assert rows_of(log.read(10)) == [(10, "a", "a4"), (11, "a", "a5")]
    # Keys in the active segment do not remove their older records yet.
    assert (5, "a", "a3") in rows_of(log.read(0))


def test_segments_with_nothing_to_drop_are_left_alone(make_log, batch):
    log = make_log(cleanup_policy="compact")
    build(log, batch)
    untouched = log._segments[1].path
    inode = os.stat(untouched).st_ino
    log.compact(now_ms=START)
    assert os.stat(untouched).st_ino == inode


def test_a_segment_with_no_survivors_is_deleted(make_log, batch):
    log = make_log(cleanup_policy="compact")
    log.append(batch(["x1", "y1"], keys=["x", "y"], timestamps=START))
    log.roll()
    log.append(batch(["x2", "y2"], keys=["x", "y"], timestamps=START))
    log.roll()
    log.append(batch(["z"], keys=["z"], timestamps=START))
    stats = log.compact(now_ms=START)
    assert stats.segments_deleted == 1
    assert log.segment_count == 2
    assert not os.path.exists(os.path.join(log.directory, f"{0:020d}.log"))
    # The log start does not move (as in Kafka); reading from it skips the gap.
    assert log.log_start_offset == 0
    assert rows_of(log.read(0)) == [(2, "x", "x2"), (3, "y", "y2"), (4, "z", "z")]
    assert rows_of(log.read(1, max_bytes=1)) == [(2, "x", "x2"), (3, "y", "y2")]
    log = make_log.reopen(log)
    assert log.log_start_offset == 0
    assert rows_of(log.read(0)) == [(2, "x", "x2"), (3, "y", "y2"), (4, "z", "z")]


def test_reading_inside_a_gap_returns_the_next_surviving_record(make_log, batch):
    log = make_log(cleanup_policy="compact", delete_retention_ms=HOUR)
    build(log, batch)
    log.compact(now_ms=START)
    for offset in range(0, 5):
        assert rows_of(log.read(offset))[0] == (4, "b", "b2")
        assert rows_of(log.read(offset, max_bytes=1)) == [(4, "b", "b2")]
    assert rows_of(log.read(5, max_bytes=1))[0] == (5, "a", "a3")


@pytest.mark.parametrize("survivor", [0, 1, 3])
def test_reading_past_the_last_survivor_of_a_compacted_batch(make_log, batch, survivor):
    """A compacted batch keeps its offset range; rows past its survivors come from the next."""
    keys = ["x", "y", "z"]
    keys.insert(survivor, "k")
    log = make_log(cleanup_policy="compact")
    log.append(batch(["v0", "v1", "v2", "v3"], keys=keys, timestamps=START))
    log.append(batch(["q1"], keys=["q"], timestamps=START))
    log.roll()
    log.append(batch(["x2", "y2", "z2"], keys=list("xyz"), timestamps=START))
    log.roll()
    log.append(batch(["w"], keys=["w"], timestamps=START))
    log.compact(now_ms=START)
    # Batch 0 (offsets 0-3) keeps only k's record but still spans 0-3.
    header = log.read_batches(0)[0].header
    assert (header.base_offset, header.last_offset, header.record_count) == (0, 3, 1)
    assert header.has_explicit_offsets == (survivor != 0)
    kept = (survivor, "k", f"v{survivor}")
    for offset in range(survivor + 1):
        assert rows_of(log.read(offset, max_bytes=1)) == [kept]
    for offset in range(survivor + 1, 5):
        assert rows_of(log.read(offset, max_bytes=1)) == [(4, "q", "q1")]
        assert rows_of(log.read(offset))[0] == (4, "q", "q1")
    # Only the high watermark limits what is visible.
    assert log.read(survivor + 1, max_offset=4).num_rows == 0


def test_records_without_key_or_key_column_are_kept(make_log, batch):
    log = make_log(cleanup_policy="compact")
    log.append(batch(["n1", "n2"], keys=[None, None], timestamps=START))
    log.append(pa.record_batch({"value": ["plain"]}))
    log.append(batch(["k1"], keys=["k"], timestamps=START))
    log.roll()
    log.append(batch(["k2"], keys=["k"], timestamps=START))
    log.roll()
    log.append(batch(["k3"], keys=["x"], timestamps=START))
    assert log.compact(now_ms=START).records_removed == 1
    assert log.read(0).column("value").to_pylist() == ["n1", "n2"]
    assert log.read(2).column("value").to_pylist() == ["plain"]
    assert rows_of(log.read(3)) == [(4, "k", "k2"), (5, "x", "k3")]


def test_compacted_log_survives_reopen(make_log, batch, crash):
    log = make_log(cleanup_policy="compact", delete_retention_ms=HOUR)
    build(log, batch)
    log.compact(now_ms=START)
    log = make_log.reopen(log)
    assert rows_of(log.read(0)) == SURVIVORS
    assert rows_of(log.read(2, max_bytes=1)) == [(4, "b", "b2")]
    # And after an unclean shutdown, recovery accepts the compacted batches.
    crash(log)
    log = make_log(cleanup_policy="compact", delete_retention_ms=HOUR)
    assert log.log_end_offset == 12
    assert rows_of(log.read(0)) == SURVIVORS
    assert log.append(batch(["f1"], keys=["f"], timestamps=START)) == (12, 12)


def test_compaction_keeps_batch_metadata(make_log, batch):
    log = make_log(cleanup_policy="compact")
    log.append(
        batch(["a1", "a2"], keys=["a", "a"], timestamps=[START + 1, START + 2]),
        partition_leader_epoch=3,
        producer_id=9,
        producer_epoch=1,
        base_sequence=40,
        compression="zstd",
    )
    log.roll()
    log.append(batch(["b"], keys=["b"], timestamps=START))
    log.compact(now_ms=START)
    stored = log.read_batches(0)[0]
    header = stored.header
    assert (header.base_offset, header.last_offset, header.record_count) == (0, 1, 1)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 1, 40)
    assert header.partition_leader_epoch == 3
    assert header.compression == "zstd"
    assert header.max_timestamp == START + 2
    assert rows_of(log.read(0)) == [(1, "a", "a2"), (2, "b", "b")]


def test_compaction_then_offset_for_timestamp_and_truncation(make_log, batch):
    log = make_log(cleanup_policy="compact")
    log.append(
        batch(["a1", "b1", "a2"], keys=list("aba"), timestamps=[START, START + 1, START + 2])
    )
    log.append(batch(["b2"], keys=["b"], timestamps=START + 3))
    log.roll()
    log.append(batch(["c"], keys=["c"], timestamps=START + 4))
    log.compact(now_ms=START)
    assert log.offset_for_timestamp(START) == 2
    assert log.offset_for_timestamp(START + 3) == 3
    log.truncate_to(1)  # inside the compacted batch, below its only survivor (2)
    assert log.log_end_offset == 1
    assert log.read(0).num_rows == 0
    assert log.append(batch(["d"], keys=["d"], timestamps=START + 5)) == (1, 1)
    assert rows_of(log.read(0)) == [(1, "d", "d")]
    log = make_log.reopen(log)
    assert log.log_end_offset == 2
    assert rows_of(log.read(0)) == [(1, "d", "d")]


def test_truncate_into_a_compacted_away_first_segment(make_log, batch):
    log = make_log(cleanup_policy="compact")
    log.append(batch(["x1", "y1"], keys=["x", "y"], timestamps=START))
    log.roll()
    log.append(batch(["x2", "y2"], keys=["x", "y"], timestamps=START))
    log.roll()
    log.append(batch(["z"], keys=["z"], timestamps=START))
    log.compact(now_ms=START)
    assert [s.base_offset for s in log._segments] == [2, 4]
    log.truncate_to(1)  # above the log start (0), below every remaining segment
    assert (log.log_start_offset, log.log_end_offset) == (0, 1)
    assert log.read(0).num_rows == 0
    assert log.append(batch(["w"], keys=["w"], timestamps=START)) == (1, 1)
    assert rows_of(log.read(0)) == [(1, "w", "w")]


def test_compaction_while_a_reader_holds_data(make_log, batch):
    log = make_log(cleanup_policy="compact", delete_retention_ms=HOUR)
    build(log, batch)
    held = log.read(0)
    log.compact(now_ms=START)
    assert held.column(OFFSET_COLUMN).to_pylist() == list(range(12))
    assert held.column("value").to_pylist()[:3] == ["a1", "b1", "a2"]
    assert rows_of(log.read(0)) == SURVIVORS


@pytest.mark.parametrize("rows_per_batch", [1, 3])
def test_compaction_matches_a_dict_model(make_log, batch, rows_per_batch):
    log = make_log(cleanup_policy="compact", segment_bytes=2048)
    records: list[tuple[str, str]] = []  # (key, value) by offset
    for i in range(60):
        keys = [f"k{(i * 7 + j * 3) % 11}" for j in range(rows_per_batch)]
        values = [f"v{i}-{j}" for j in range(rows_per_batch)]
        log.append(batch(values, keys=keys, timestamps=START))
        records.extend(zip(keys, values, strict=True))
    assert log.segment_count > 3
    active_base = log._segments[-1].base_offset
    log.compact(now_ms=START)
    # Closed segments keep each key's latest record among them; the active one keeps all.
    latest = {key: offset for offset, (key, _) in enumerate(records[:active_base])}
    expected = sorted(latest.values()) + list(range(active_base, len(records)))
    table = log.read(0, max_bytes=1 << 30)
    assert table.column(OFFSET_COLUMN).to_pylist() == expected
    assert table.column("value").to_pylist() == [records[o][1] for o in expected]
    log = make_log.reopen(log)
    position, seen = 0, []
    while position < log.log_end_offset:
        table = log.read(position, max_bytes=1)
        assert table.num_rows > 0
        seen.extend(table.column(OFFSET_COLUMN).to_pylist())
        position = seen[-1] + 1
    assert seen == expected


class _Transactions:
    """A log and its producer state, written as a replica writes them."""

    def __init__(self, log, batch) -> None:
        self.log, self.batch = log, batch
        self.state = ProducerStateManager()
        self.sequences: dict[int, int] = {}

    def write(self, key: str, value: str, pid: int = -1) -> None:
        """One record, in a transaction of producer ``pid`` (or plain with -1)."""
        metadata = {}
        if pid >= 0:
            seq = self.sequences.get(pid, 0)
            self.sequences[pid] = seq + 1
            metadata = dict(
                producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True
            )
        base, last = self.log.append(self.batch([value], keys=[key], timestamps=START), **metadata)
        if pid >= 0:
            self.state.append(pid, 0, seq, seq, base, last, START, True)

    def end(self, pid: int, commit: bool) -> None:
        marker = marker_batch(BYTES_SCHEMA, commit, 0, START)
        base, _ = self.log.append(
            marker, producer_id=pid, producer_epoch=0, is_control=True, is_commit=commit
        )
        self.state.complete_txn(pid, 0, commit, base, START)

    def compact(self):
        """Compact as the replica does: below the last stable offset, aborted batches out."""
        stable = self.state.last_stable_offset(self.log.log_end_offset)
        skip = self.state.aborted_filter(self.log.log_start_offset, stable)
        return self.log.compact(now_ms=START, max_offset=stable, skip=skip)

    def committed(self) -> list[tuple[int, str | None, str | None]]:
        """What a read_committed reader sees, from the start."""
        end = self.log.log_end_offset
        stable = self.state.last_stable_offset(end)
        skip = self.state.aborted_filter(0, stable)
        table, _ = self.log.read_until(0, max_offset=stable, skip=skip)
        return rows_of(table)


def test_an_aborted_write_never_replaces_the_committed_record_of_its_key(make_log, batch):
    """The __consumer_offsets case: a group's committed offset, then an aborted
    send_offsets_to_transaction for the same key. Compaction must drop the aborted
    record, not the committed one it was meant to replace."""
    txns = _Transactions(make_log(cleanup_policy="compact"), batch)
    txns.write("g/t/0", "committed-10")  # offset 0
    txns.write("g/t/0", "aborted-20", pid=7)  # offset 1
    txns.write("other", "x", pid=7)  # offset 2
    txns.end(7, commit=False)  # offset 3
    txns.write("g/t/0", "committed-30", pid=8)  # offset 4: a later, committed one
    txns.log.roll()
    txns.end(8, commit=True)  # offset 5, in the active segment
    before = txns.committed()
    assert [value for _, _, value in before] == ["committed-10", "committed-30"]
    stats = txns.compact()
    # committed-10 goes (superseded by committed-30); both aborted records go too.
    assert stats.records_removed == 3
    assert txns.committed() == [(4, "g/t/0", "committed-30")]
    # read_uncommitted sees no aborted records any more either; the markers stay hidden.
    assert rows_of(txns.log.read(0)) == [(4, "g/t/0", "committed-30")]


def test_only_aborted_writes_of_a_key_leave_its_committed_record_alone(make_log, batch):
    txns = _Transactions(make_log(cleanup_policy="compact"), batch)
    txns.write("g/t/0", "committed-10")
    txns.write("g/t/0", "aborted-20", pid=7)
    txns.end(7, commit=False)
    txns.log.roll()
    txns.write("z", "z1")
    assert txns.compact().records_removed == 1
    assert txns.committed() == [(0, "g/t/0", "committed-10"), (3, "z", "z1")]


def test_an_open_transaction_blocks_compaction_from_its_first_offset_on(make_log, batch):
    """A record of a transaction still open may yet be aborted: segments from the last
    stable offset on are not cleaned, so it cannot push out the committed record."""
    txns = _Transactions(make_log(cleanup_policy="compact"), batch)
    txns.write("g/t/0", "committed-10")  # offset 0
    txns.log.roll()
    txns.write("g/t/0", "open-20", pid=7)  # offset 1: transaction still open
    txns.log.roll()
    txns.write("g/t/0", "committed-30")  # offset 2 (plain), beyond the open transaction
    txns.log.roll()
    txns.write("z", "z1")
    assert txns.state.last_stable_offset(txns.log.log_end_offset) == 1
    assert txns.compact().records_removed == 0
    txns.end(7, commit=False)  # offset 4; now every transaction is decided
    stats = txns.compact()
    assert stats.records_removed == 2  # committed-10 (superseded) and the aborted one
    assert txns.committed() == [(2, "g/t/0", "committed-30"), (3, "z", "z1")]
