"""The leader's view of its followers: who is caught up, the ISR, the high watermark.

Kafka's rules (``ReplicaState.isCaughtUp``): a follower is caught up at the time of a
fetch if it asked for the leader's log end offset (it has everything), and it stays
caught up as of its previous fetch if that fetch asked for the leader's log end offset
*as it was at that previous fetch*. A follower whose last caught-up time is older than
``replica.lag.time.max.ms`` leaves the ISR; one that reaches the high watermark (and the
current leader epoch's start) may rejoin.

Example:
    leader LEO 100, follower fetches at 100 at t=0: caught up at 0. The leader appends
    to 150; the follower fetches at 120 at t=5: not at the end, but 120 >= 100 (the LEO
    at its previous fetch), so caught up as of t=0... and at t=31000 with lag max 30000
    it is out of the ISR unless a later fetch reached the end.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FollowerState:
    """What the leader knows about one follower.

    Attributes:
        log_end_offset: the follower's LEO (its last fetch offset), -1 before any fetch.
        last_caught_up_ms: the last time the follower was known to be caught up.
        last_fetch_leader_leo: the leader's LEO when the follower last fetched.
        last_fetch_ms: when the follower last fetched (0 before any fetch).
        last_fetch_wait_ms: how long that fetch may wait for data before it is answered.
    """

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0
    last_fetch_wait_ms: int = 0

    def on_fetch(
        self, fetch_offset: int, leader_log_end_offset: int, now_ms: int, max_wait_ms: int = 0
    ) -> None:
        """Record a fetch at ``fetch_offset`` (the follower's LEO) at ``now_ms`` that may
        wait up to ``max_wait_ms`` for data."""
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_leo >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_leo = leader_log_end_offset
        self.last_fetch_ms = now_ms
        self.last_fetch_wait_ms = max_wait_ms

    def is_caught_up(self, now_ms: int, lag_max_ms: int) -> bool:
        """Whether the follower was caught up within the last ``lag_max_ms``."""
        return now_ms - self.last_caught_up_ms <= lag_max_ms


def high_watermark(
    leader_id: int,
    leader_log_end_offset: int,
    isr: list[int],
    followers: dict[int, FollowerState],
) -> int:
    """The smallest LEO among the ISR members (the leader counts with its own LEO)."""
    offsets = [leader_log_end_offset]
    for replica in isr:
        if replica != leader_id:
            state = followers.get(replica)
            offsets.append(state.log_end_offset if state is not None else -1)
    return max(min(offsets), 0)


def shrunk_isr(
    leader_id: int,
    isr: list[int],
    followers: dict[int, FollowerState],
    now_ms: int,
    lag_max_ms: int,
) -> list[int]:
    """The ISR without followers that lag for longer than ``lag_max_ms``."""
    return [
        r
        for r in isr
        if r == leader_id or (r in followers and followers[r].is_caught_up(now_ms, lag_max_ms))
    ]


def silent_followers(followers: dict[int, FollowerState], now_ms: int, grace_ms: int) -> list[int]:
    """Followers that fetched before but not again within their last fetch's wait plus
    ``grace_ms``: a fetch is answered within its wait and a live follower fetches again
    at once, so such a follower is hung or unreachable (or its leader is).

    Example: a fetch at t=10000 that may wait 1000 ms, grace 1000 ms: the follower is
    silent from t=12001 on unless it fetched again.
    """
    return sorted(
        r
        for r, state in followers.items()
        if state.last_fetch_ms
        and now_ms > state.last_fetch_ms + state.last_fetch_wait_ms + grace_ms
    )


def expanded_isr(
    isr: list[int],
    replicas: list[int],
    fetching: int,
    follower: FollowerState,
    high_watermark_offset: int,
    leader_epoch_start_offset: int,
) -> list[int]:
    """The ISR, plus the follower that is fetching now if it caught up: its LEO reached
    the high watermark and the start of the current leader epoch (so it holds this
    leader's history, not a divergent one). Only a fetching follower can join: a dead
    one's last known offset says nothing about the present."""
    if fetching in isr or fetching not in replicas:
        return list(isr)
    if follower.log_end_offset < max(high_watermark_offset, leader_epoch_start_offset):
        return list(isr)
    return [r for r in replicas if r in isr or r == fetching]
