"""Offset sync translation (MM2's rules) and MM2's record layouts: pure, no Ray."""

from __future__ import annotations

import random

import pytest

from raystream.errors import ConnectError
from raystream.mirror.connectors import _PartitionSyncs
from raystream.mirror.offsets import (
    Checkpoint,
    Heartbeat,
    OffsetSync,
    OffsetSyncStore,
    latest_checkpoints,
)
from raystream.types import TopicPartition

TP = TopicPartition("orders", 0)


def store_of(*pairs: tuple[int, int]) -> OffsetSyncStore:
    store = OffsetSyncStore()
    store.add_all(OffsetSync(TP, u, d) for u, d in pairs)
    return store


def test_translation_is_exact_at_a_sync_and_one_past_it_between_syncs() -> None:
    store = store_of((0, 0), (100, 90), (200, 190))
    assert store.translate(TP, 100) == 90
    assert store.translate(TP, 150) == 91
    assert store.translate(TP, 250) == 191
    assert store.translate(TP, 0) == 0
    assert store.translate(TopicPartition("other", 0), 5) is None


def test_an_offset_below_every_sync_does_not_translate() -> None:
    assert store_of((50, 10)).translate(TP, 49) is None


def test_a_sync_behind_the_last_starts_the_partition_afresh() -> None:
    store = store_of((100, 100), (200, 200), (5, 7))  # the source topic was re-created
    assert store.translate(TP, 150) == 8
    assert store.translate(TP, 4) is None


def test_the_store_keeps_the_first_and_the_newest_syncs() -> None:
    store = OffsetSyncStore(kept=4)
    store.add_all(OffsetSync(TP, u, u) for u in range(0, 1000, 10))
    assert store.translate(TP, 5) == 1  # the first is kept: old groups still translate
    assert store.translate(TP, 990) == 990
    assert store.translate(TP, 500) == 1  # middle dropped: conservative, never ahead


def test_translation_never_skips_a_record_consumed_or_not() -> None:
    """Seeded model check: a source partition with gaps (compaction) is mirrored into
    consecutive target offsets; with syncs at random rows, every translated offset is
    at or before the target offset of the first record the group had not consumed."""
    rng = random.Random(21)
    for _ in range(50):
        upstream = sorted(rng.sample(range(2000), 300))  # offsets that survived
        downstream = {u: d for d, u in enumerate(upstream)}
        store = OffsetSyncStore(kept=1000)
        store.add_all(OffsetSync(TP, u, downstream[u]) for u in upstream if rng.random() < 0.1)
        for committed in rng.sample(range(2000), 50):
            translated = store.translate(TP, committed)
            if translated is None:
                continue
            unread = [downstream[u] for u in upstream if u >= committed]
            first_unread = unread[0] if unread else len(upstream)
            assert translated <= first_unread, (committed, translated, first_unread)


def test_partition_syncs_follow_mm2s_rule() -> None:
    state = _PartitionSyncs()
    assert state.update(0, 0, 100)  # first
    state.sent()
    assert not state.update(50, 50, 100)  # no gap, under the lag
    assert state.update(60, 59, 100)  # a gap in the source
    assert state.sent() == (60, 59)
    assert not state.update(100, 99, 100)
    assert state.update(160, 159, 100)  # offset.lag.max passed


def test_records_round_trip_in_mm2s_layouts() -> None:
    sync = OffsetSync(TopicPartition("orders", 3), 12345, 678)
    assert sync.key() == b"\x00\x06orders\x00\x00\x00\x03"
    assert OffsetSync.decode(sync.key(), sync.value()) == sync
    checkpoint = Checkpoint("billing", TopicPartition("a.orders", 1), 10, 9, "meta")
    assert Checkpoint.decode(checkpoint.key(), checkpoint.value()) == checkpoint
    assert checkpoint.value()[:2] == b"\x00\x00"  # version 0
    beat = Heartbeat("a", "b", 1_700_000_000_000)
    assert Heartbeat.decode(beat.key(), beat.value()) == beat
    with pytest.raises(ConnectError, match="offset sync"):
        OffsetSync.decode(b"\x00\x09short", b"")


def test_latest_checkpoints_take_the_last_per_partition_of_the_group() -> None:
    tp = TopicPartition("a.orders", 0)
    found = latest_checkpoints(
        [
            Checkpoint("g", tp, 5, 5),
            Checkpoint("other", tp, 9, 9),
            Checkpoint("g", tp, 7, 6),
        ],
        "g",
    )
    assert found == {tp: 6}
