"""Durability policy: flush.messages, flush.ms, and the recovery point."""

from __future__ import annotations

import os

import pytest

from raystream.log import LogConfig

START = 1_700_000_000_000


@pytest.fixture
def fsyncs(monkeypatch):
    """Counts data fsyncs of segment files."""
    calls = []
    original = os.fdatasync

    def fdatasync(fd):
        calls.append(fd)
        return original(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return calls


def read_recovery_checkpoint(log) -> int:
    with open(os.path.join(log.directory, "recovery-point-offset-checkpoint")) as f:
        return int(f.read())


def test_default_policy_never_flushes_on_its_own(make_log, batch, clock, fsyncs):
    log = make_log()
    for _ in range(10):
        log.append(batch([1, 2, 3]))
        clock.advance(60_000)
    assert not log.maybe_flush()
    assert log.recovery_point == 0
    assert fsyncs == []
    log.flush()
    assert log.recovery_point == 30
    assert len(fsyncs) == 1


def test_flush_messages_1_flushes_on_every_append(make_log, batch, fsyncs):
    log = make_log(flush_messages=1)
    for i in range(5):
        _, last = log.append(batch([i, i]))
        assert log.recovery_point == last + 1 == log.log_end_offset
        assert len(fsyncs) == i + 1
        assert not log._segments[-1].dirty


def test_flush_messages_counts_records(make_log, batch):
    log = make_log(flush_messages=5)
    log.append(batch([1, 2]))
    log.append(batch([3, 4]))
    assert log.recovery_point == 0
    log.append(batch([5]))
    assert log.recovery_point == 5
    log.append(batch([6, 7, 8, 9]))
    assert log.recovery_point == 5
    log.append(batch([10, 11]))
    assert log.recovery_point == 11


def test_flush_ms_with_maybe_flush(make_log, batch, clock):
    log = make_log(flush_ms=1000)
    assert not log.maybe_flush()  # nothing unflushed
    log.append(batch([1]))
    clock.advance(999)
    assert not log.maybe_flush()
    assert log.recovery_point == 0
    clock.advance(1)
    assert log.maybe_flush()
    assert log.recovery_point == 1
    assert not log.maybe_flush()
    # The clock starts at the oldest unflushed append, and an explicit now_ms works too.
    log.append(batch([2]))
    clock.advance(500)
    log.append(batch([3]))
    assert not log.maybe_flush(now_ms=clock() + 499)
    assert log.maybe_flush(now_ms=clock() + 500)
    assert log.recovery_point == 3


def test_an_append_after_flush_ms_flushes(make_log, batch, clock):
    log = make_log(flush_ms=1000)
    log.append(batch([1]))
    clock.advance(1000)
    log.append(batch([2]))
    assert log.recovery_point == 2


def test_flush_spans_every_dirty_segment(make_log, batch, fsyncs):
    log = make_log(segment_bytes=1024)
    for i in range(10):
        log.append(batch([f"value-{i}"] * 20))
    assert log.segment_count > 3
    log.flush()
    assert len(fsyncs) == log.segment_count
    assert not any(s.dirty for s in log._segments)
    fsyncs.clear()
    log.flush()
    assert fsyncs == []


def test_recovery_point_checkpoint_is_written_at_most_once_a_second(make_log, batch, clock):
    log = make_log()
    assert read_recovery_checkpoint(log) == 0
    log.append(batch([1, 2]))
    log.flush()
    assert log.recovery_point == 2
    assert read_recovery_checkpoint(log) == 0  # written at open, less than a second ago
    clock.advance(1000)
    log.append(batch([3]))
    log.flush()
    assert read_recovery_checkpoint(log) == 3
    log.close()
    assert read_recovery_checkpoint(log) == 3


def test_update_config_changes_the_flush_policy(make_log, batch):
    log = make_log()
    log.append(batch([1]))
    assert log.recovery_point == 0
    log.update_config(LogConfig(flush_messages=1))
    assert log.config.flush_messages == 1
    log.append(batch([2]))
    assert log.recovery_point == 2
