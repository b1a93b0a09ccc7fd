"""The leader-epoch cache: epoch -> start offset, as replication uses it (KIP-101)."""

from __future__ import annotations

import os

from raystream.log import LeaderEpochCache


def test_end_offset_for_epoch_docstring_example(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    for epoch, start in ((0, 0), (2, 150), (3, 170)):
        cache.assign(epoch, start)
    assert cache.end_offset_for_epoch(2, 200) == (2, 170)
    assert cache.end_offset_for_epoch(1, 200) == (0, 150)
    assert cache.end_offset_for_epoch(3, 200) == (3, 200)
    assert cache.end_offset_for_epoch(0, 200) == (0, 150)
    assert cache.end_offset_for_epoch(9, 200) == (3, 200)
    assert cache.latest_epoch == 3


def test_unknown_epochs(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    assert cache.latest_epoch == -1
    assert cache.end_offset_for_epoch(0, 10) == (-1, -1)
    cache.assign(5, 100)
    assert cache.end_offset_for_epoch(4, 200) == (-1, -1)


def test_assign_ignores_older_or_equal_epochs_and_negative(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    cache.assign(-1, 0)
    assert cache.entries() == []
    cache.assign(1, 10)
    cache.assign(1, 20)
    cache.assign(0, 30)
    assert cache.entries() == [(1, 10)]


def test_assign_a_newer_epoch_at_a_lower_offset_replaces_later_entries(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    cache.assign(1, 10)
    cache.assign(2, 20)
    cache.assign(3, 15)
    assert cache.entries() == [(1, 10), (3, 15)]


def test_survives_reopen_in_kafka_checkpoint_format(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    cache.assign(0, 0)
    cache.assign(4, 57)
    with open(os.path.join(tmp_path, "leader-epoch-checkpoint")) as f:
        assert f.read() == "0\n2\n0 0\n4 57\n"
    assert LeaderEpochCache(str(tmp_path)).entries() == [(0, 0), (4, 57)]


def test_truncate_from_end(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    for epoch, start in ((0, 0), (2, 150), (3, 170)):
        cache.assign(epoch, start)
    cache.truncate_from_end(171)
    assert cache.entries() == [(0, 0), (2, 150), (3, 170)]
    cache.truncate_from_end(170)
    assert cache.entries() == [(0, 0), (2, 150)]
    cache.truncate_from_end(100)
    assert cache.entries() == [(0, 0)]
    assert LeaderEpochCache(str(tmp_path)).entries() == [(0, 0)]


def test_truncate_from_start(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    for epoch, start in ((0, 0), (2, 150), (3, 170)):
        cache.assign(epoch, start)
    cache.truncate_from_start(0)
    assert cache.entries() == [(0, 0), (2, 150), (3, 170)]
    cache.truncate_from_start(100)
    assert cache.entries() == [(0, 100), (2, 150), (3, 170)]
    cache.truncate_from_start(150)
    assert cache.entries() == [(2, 150), (3, 170)]
    cache.truncate_from_start(180)
    assert cache.entries() == [(3, 180)]
    assert LeaderEpochCache(str(tmp_path)).entries() == [(3, 180)]


def test_clear(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    cache.assign(1, 1)
    cache.clear()
    assert cache.entries() == []
    assert LeaderEpochCache(str(tmp_path)).entries() == []


def test_log_assigns_epochs_on_append(make_log, batch):
    log = make_log()
    log.append(batch([1, 2]))  # no epoch: not recorded
    log.append(batch([3, 4]), partition_leader_epoch=0)
    log.append(batch([5]), partition_leader_epoch=0)
    log.append(batch([6, 7, 8]), partition_leader_epoch=2)
    log.append(batch([9]), partition_leader_epoch=1)  # stale epoch: ignored
    log.append(batch([10]), partition_leader_epoch=3)
    assert log.leader_epochs.entries() == [(0, 2), (2, 5), (3, 9)]
    assert log.leader_epochs.end_offset_for_epoch(2, log.log_end_offset) == (2, 9)
    assert log.leader_epochs.end_offset_for_epoch(3, log.log_end_offset) == (3, 10)
    assert log.leader_epochs.end_offset_for_epoch(1, log.log_end_offset) == (0, 5)
    log = make_log.reopen(log)
    assert log.leader_epochs.entries() == [(0, 2), (2, 5), (3, 9)]


def test_log_retention_truncates_epochs_from_start(make_log, batch):
    log = make_log()
    log.append(batch([1, 2, 3]), partition_leader_epoch=0)
    log.append(batch([4, 5, 6]), partition_leader_epoch=1)
    log.roll()
    log.append(batch([7]), partition_leader_epoch=2)
    log.delete_records_before(4)
    assert log.leader_epochs.entries() == [(1, 4), (2, 6)]
    log.delete_records_before(6)
    assert log.leader_epochs.entries() == [(2, 6)]
    log = make_log.reopen(log)
    assert log.leader_epochs.entries() == [(2, 6)]


def test_log_open_drops_epochs_past_the_recovered_end(make_log, batch, crash):
    log = make_log()
    log.append(batch([1, 2, 3]), partition_leader_epoch=0)
    log.append(batch([4, 5, 6]), partition_leader_epoch=1)
    log.flush()
    path = log._segments[-1].path
    size = os.path.getsize(path)
    crash(log)
    with open(path, "r+b") as f:  # tear the last batch
        f.truncate(size - 10)
    log = make_log()
    assert log.log_end_offset == 3
    assert log.leader_epochs.entries() == [(0, 0)]
