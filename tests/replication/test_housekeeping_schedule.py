"""When a replica's background duties are due: a replica at rest sleeps (pure, no Ray)."""

from __future__ import annotations

import pytest

from raystream.replication.housekeeping import (
    CHECKPOINT,
    FLUSH,
    FOLLOWER_CHECK,
    RELEASE,
    RETENTION,
    HousekeepingSchedule,
)


def schedule(now_s: float = 0.0) -> HousekeepingSchedule:
    return HousekeepingSchedule(now_s, retention_s=300.0, checkpoint_s=1.0, follower_check_s=1.0)


def test_a_replica_at_rest_sleeps_until_its_retention_check() -> None:
    s = schedule()
    assert s.next_wake_s(0.0, flush_due_s=None, leads_followers=False) == 300.0
    assert s.take_due(299.9, None, False) == set()
    assert s.take_due(300.0, None, False) == {RETENTION}
    assert s.next_wake_s(300.0, None, False) == 600.0


def test_a_change_brings_one_checkpoint_and_wakes_the_sleeper_once() -> None:
    s = schedule()
    s.next_wake_s(0.0, None, False)
    assert s.changed(10.0)  # due at 11, before the planned wake at 300
    assert s.next_wake_s(10.0, None, False) == 11.0
    assert not s.changed(10.5)  # already due at 11: no new wake
    assert s.next_wake_s(10.5, None, False) == 11.0
    assert s.take_due(11.0, None, False) == {CHECKPOINT}
    assert s.take_due(11.5, None, False) == set()  # done until the next change
    assert s.next_wake_s(11.5, None, False) == 300.0


def test_changes_under_load_checkpoint_once_per_interval() -> None:
    s = schedule()
    checkpoints = []
    for step in range(40):  # an append every 125 ms
        now = step * 0.125
        s.changed(now)
        if CHECKPOINT in s.take_due(now, None, False):
            checkpoints.append(now)
    assert checkpoints == [1.0, 2.125, 3.25, 4.375]


def test_a_flush_is_due_when_flush_ms_says_and_never_by_default() -> None:
    s = schedule()
    assert s.next_wake_s(0.0, flush_due_s=2.5, leads_followers=False) == 2.5
    assert s.take_due(2.5, 2.5, False) == {FLUSH}
    assert s.next_wake_s(2.5, flush_due_s=None, leads_followers=False) == 300.0


def test_a_flush_already_overdue_wakes_at_once() -> None:
    s = schedule()
    assert s.next_wake_s(5.0, flush_due_s=4.0, leads_followers=False) == 5.0


def test_only_a_leader_with_followers_checks_them() -> None:
    s = schedule()
    assert s.next_wake_s(0.0, None, leads_followers=False) == 300.0
    assert s.next_wake_s(0.0, None, leads_followers=True) == 1.0
    assert s.take_due(1.0, None, True) == {FOLLOWER_CHECK}
    assert s.next_wake_s(1.0, None, True) == 2.0
    # Leadership lost: the check stops, and starts one interval after leading again.
    assert s.take_due(2.0, None, False) == set()
    assert s.next_wake_s(2.0, None, False) == 300.0
    assert s.next_wake_s(7.0, None, True) == 8.0


def test_duties_due_together_run_together() -> None:
    s = schedule()
    s.changed(299.0)
    assert s.take_due(300.0, 300.0, True) == {CHECKPOINT, FLUSH, RETENTION}


def releasing(now_s: float = 0.0) -> HousekeepingSchedule:
    return HousekeepingSchedule(
        now_s, retention_s=300.0, checkpoint_s=1.0, follower_check_s=1.0, release_s=5.0
    )


def test_a_replica_at_rest_plans_no_release() -> None:
    s = releasing()
    assert s.next_wake_s(0.0, None, False) == 300.0
    assert s.take_due(300.0, None, False) == {RETENTION}


def test_the_release_comes_once_traffic_stopped_for_its_quiet_time() -> None:
    s = releasing()
    s.next_wake_s(0.0, None, False)
    assert s.active(10.0)  # the first request of a burst wakes the sleeper to plan
    releases = []
    for step in range(1, 80):  # a request every 100 ms until 17.9
        now = 10.0 + step * 0.1
        assert not s.active(now)  # ...and no other does
        if RELEASE in s.take_due(now, None, False):
            releases.append(now)
    assert releases == []
    # Checked at 15 (due 5 s after the first request), pushed back to 5 s after the
    # last request then (15.0), checked at 20 and pushed back to 5 s after 17.9.
    assert s.next_wake_s(17.9, None, False) == pytest.approx(20.0)
    assert s.take_due(20.0, None, False) == set()
    assert s.next_wake_s(20.0, None, False) == pytest.approx(22.9)
    assert s.take_due(22.8, None, False) == set()
    assert s.take_due(22.9, None, False) == {RELEASE}
    assert s.next_wake_s(23.0, None, False) == 300.0  # at rest again: nothing planned


def test_without_a_quiet_time_there_is_no_release() -> None:
    s = schedule()
    assert not s.active(1.0)
    assert s.next_wake_s(1.0, None, False) == 300.0
    assert RELEASE not in s.take_due(300.0, None, False)
