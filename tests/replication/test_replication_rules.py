"""Kafka's replication rules as pure functions: ISR, high watermark, election, truncation."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from raystream.replication.election import OFFLINE, elect_leader, preferred_leader
from raystream.replication.isr import FollowerState, expanded_isr, high_watermark, shrunk_isr
from raystream.replication.truncation import truncation_offset


def test_a_follower_fetching_at_the_end_is_caught_up_now() -> None:
    state = FollowerState()
    state.on_fetch(100, leader_log_end_offset=100, now_ms=1000)
    assert state.last_caught_up_ms == 1000
    assert state.is_caught_up(now_ms=31000, lag_max_ms=30000)
    assert not state.is_caught_up(now_ms=31001, lag_max_ms=30000)


def test_a_follower_behind_is_caught_up_as_of_its_previous_fetch() -> None:
    state = FollowerState()
    state.on_fetch(100, leader_log_end_offset=100, now_ms=0)
    state.on_fetch(120, leader_log_end_offset=150, now_ms=5)  # reached the LEO of t=0
    assert state.last_caught_up_ms == 0
    state.on_fetch(150, leader_log_end_offset=200, now_ms=10)  # reached the LEO of t=5
    assert state.last_caught_up_ms == 5
    state.on_fetch(190, leader_log_end_offset=250, now_ms=20)  # short of 200
    assert state.last_caught_up_ms == 5


def test_high_watermark_is_the_smallest_log_end_offset_of_the_isr() -> None:
    followers = {1: FollowerState(log_end_offset=80), 2: FollowerState(log_end_offset=50)}
    assert high_watermark(0, 100, [0, 1, 2], followers) == 50
    assert high_watermark(0, 100, [0, 1], followers) == 80
    assert high_watermark(0, 100, [0], followers) == 100
    assert high_watermark(0, 100, [0, 3], followers) == 0  # a member that never fetched


def test_lagging_followers_leave_the_isr_and_caught_up_ones_rejoin() -> None:
    followers = {
        1: FollowerState(log_end_offset=100, last_caught_up_ms=9000),
        2: FollowerState(log_end_offset=40, last_caught_up_ms=1000),
    }
    assert shrunk_isr(0, [0, 1, 2], followers, now_ms=12000, lag_max_ms=10000) == [0, 1]
    assert expanded_isr([0, 1], [0, 1, 2], 2, followers[2], 90, 0) == [0, 1]
    followers[2].log_end_offset = 95
    assert expanded_isr([0, 1], [0, 1, 2], 2, followers[2], 90, 0) == [0, 1, 2]
    assert expanded_isr([0, 1], [0, 1, 2], 2, followers[2], 90, 96) == [0, 1]  # epoch start
    assert expanded_isr([0, 1], [0, 1, 2], 5, followers[2], 90, 0) == [0, 1]  # not a replica


def test_elections_take_the_first_live_isr_member() -> None:
    assert elect_leader([0, 1, 2], [1, 2], {0, 2}, False).leader == 2
    assert elect_leader([0, 1, 2], [0, 1, 2], {0, 1, 2}, False).leader == 0


def test_without_unclean_election_a_partition_stays_offline_rather_than_lose_data() -> None:
    clean = elect_leader([0, 1, 2], [1], {0, 2}, unclean_allowed=False)
    assert clean.leader == OFFLINE
    unclean = elect_leader([0, 1, 2], [1], {0, 2}, unclean_allowed=True)
    assert (unclean.leader, unclean.isr, unclean.unclean) == (0, [0], True)
    assert elect_leader([0, 1], [0, 1], set(), True).leader == OFFLINE


def test_preferred_leader_only_when_alive_and_in_sync() -> None:
    assert preferred_leader([2, 0, 1], [0, 1, 2], {0, 1, 2}) == 2
    assert preferred_leader([2, 0, 1], [0, 1], {0, 1, 2}) is None
    assert preferred_leader([2, 0, 1], [0, 1, 2], {0, 1}) is None


def test_truncation_follows_kip_279() -> None:
    follower_epochs = {0: 50, 1: 80}  # epoch 0 ended at 50, epoch 1 at the LEO 80
    end_of = follower_epochs.__getitem__
    # The leader knows the follower's epoch 1 and ended it at 70.
    assert truncation_offset(1, 80, 40, end_of, 1, 70) == 70
    # The leader never saw epoch 1: it answers epoch 0 ending at 60; we keep up to 50.
    assert truncation_offset(1, 80, 40, end_of, 0, 60) == 50
    # The leader's epoch goes further than the follower's log: nothing to cut.
    assert truncation_offset(1, 80, 40, end_of, 1, 500) == 80
    # No comparable epochs: fall back to the high watermark.
    assert truncation_offset(1, 80, 40, end_of, -1, -1) == 40
    assert truncation_offset(-1, 0, 0, end_of, 3, 10) == 0


@settings(derandomize=True, max_examples=200, deadline=None)
@given(
    leo=st.integers(0, 1000),
    offsets=st.lists(st.integers(0, 1000), min_size=0, max_size=4),
    extra=st.lists(st.integers(0, 1000), min_size=1, max_size=4),
)
def test_the_high_watermark_never_passes_any_isr_member(leo, offsets, extra) -> None:
    followers = {i + 1: FollowerState(log_end_offset=o) for i, o in enumerate(offsets)}
    isr = [0, *followers]
    hw = high_watermark(0, leo, isr, followers)
    assert hw <= leo
    assert all(hw <= f.log_end_offset for f in followers.values())
    # Followers only move forward, so the high watermark only moves forward.
    for i, more in enumerate(extra):
        if followers:
            member = followers[1 + i % len(followers)]
            member.log_end_offset = min(member.log_end_offset + more, leo)
        again = high_watermark(0, leo, isr, followers)
        assert again >= hw
        hw = again
