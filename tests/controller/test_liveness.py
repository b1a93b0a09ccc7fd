"""What the controller knows of its replicas' health (pure, no Ray)."""

from __future__ import annotations

from raystream.controller.liveness import Liveness
from raystream.replication.isr import FollowerState, silent_followers


def test_a_crash_counts_until_the_next_pass_even_if_the_replica_is_back() -> None:
    health = Liveness()
    assert health.on_state("a", "RESTARTING")
    assert health.on_state("a", "ALIVE")
    assert health.take_down({"a", "b"}) == {"a"}
    assert health.take_down({"a", "b"}) == set()


def test_a_replica_still_restarting_stays_down_across_passes() -> None:
    health = Liveness()
    health.on_state("a", "RESTARTING")
    assert health.take_down({"a"}) == {"a"}
    assert health.take_down({"a"}) == {"a"}
    health.on_state("a", "ALIVE")
    assert health.take_down({"a"}) == set()


def test_other_actors_changes_do_not_wake_the_monitor_or_accumulate() -> None:
    health = Liveness()
    assert not health.on_state("new", "PENDING_CREATION")
    assert not health.on_state("new", "ALIVE")  # a creation, not a recovery
    health.on_state("gone", "DEAD")  # not a replica the caller watches
    assert health.take_down({"a"}) == set()
    assert health.take_down({"gone"}) == set()  # forgotten by the previous pass


def test_a_suspect_is_probed_once_and_hung_until_it_answers() -> None:
    health = Liveness()
    health.suspect(("t", 0, 1))
    assert health.to_probe() == {("t", 0, 1)}
    health.probed(("t", 0, 1), answered=True, now_s=1.0)  # busy, not hung
    assert health.to_probe() == set() and health.hung() == set()
    health.suspect(("t", 0, 1))
    health.probed(("t", 0, 1), answered=False, now_s=2.0)
    assert health.hung() == {("t", 0, 1)}
    assert health.to_probe() == {("t", 0, 1)}  # probed again until it answers
    health.probed(("t", 0, 1), answered=True, now_s=3.0)
    assert health.hung() == set()


def test_a_replica_is_hung_for_as_long_as_every_probe_goes_unanswered() -> None:
    """The hang counts from the first unanswered probe; later unanswered probes do not
    restart the count, and an answer ends it (a later hang counts afresh)."""
    health = Liveness()
    key = ("t", 0, 0)
    health.suspect(key)
    health.probed(key, answered=False, now_s=10.0)
    health.probed(key, answered=False, now_s=15.0)
    assert health.hung_for(9.0, now_s=18.9) == set()
    assert health.hung_for(9.0, now_s=19.0) == {key}
    health.probed(key, answered=True, now_s=19.5)
    health.probed(key, answered=False, now_s=20.0)
    assert health.hung_for(9.0, now_s=28.0) == set()
    assert health.hung_for(9.0, now_s=29.0) == {key}
    health.forget([key])
    assert health.hung_for(0.0, now_s=100.0) == set()


def test_a_removed_replica_is_forgotten() -> None:
    health = Liveness()
    health.suspect(("t", 0, 1))
    health.probed(("t", 0, 2), answered=False, now_s=1.0)
    health.forget([("t", 0, 1), ("t", 0, 2)])
    assert health.to_probe() == set() and health.hung() == set()


def test_a_follower_is_silent_once_it_misses_its_next_fetch_by_the_grace() -> None:
    fetched = FollowerState()
    fetched.on_fetch(100, 100, now_ms=10_000, max_wait_ms=1000)
    never = FollowerState(last_caught_up_ms=10_000)  # no fetch yet: no judgement
    followers = {1: fetched, 2: never}
    assert silent_followers(followers, now_ms=12_000, grace_ms=1000) == []
    assert silent_followers(followers, now_ms=12_001, grace_ms=1000) == [1]
    fetched.on_fetch(100, 100, now_ms=12_001, max_wait_ms=1000)
    assert silent_followers(followers, now_ms=12_002, grace_ms=1000) == []
