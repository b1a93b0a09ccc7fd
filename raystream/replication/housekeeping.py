"""When a replica's background duties are next due, so that a replica at rest sleeps.

A replica has five duties besides serving requests:

- **checkpoint**: persist what moved since the last time (the high watermark, the
  producer state's snapshot) and apply ``flush.ms``; due one checkpoint interval
  (``log.flush.scheduler.interval.ms``) after the first change since the last
  checkpoint, and not at all while nothing changes;
- **flush**: fsync the log once its oldest unflushed append is ``flush.ms`` old; due
  then, and never under the default ``flush.ms`` (Kafka's: replication, not fsync);
- **retention**: apply retention and compaction every
  ``log.retention.check.interval.ms``;
- **follower check**: on a leader with followers only, every interval: shrink the ISR
  of followers lagging past ``replica.lag.time.max.ms`` and report followers that went
  silent;
- **release**: hand the memory a burst of traffic freed back to the system, once the
  traffic stopped (no request served, no data copied from a leader) for ``release_s``;
  due only after traffic, so a replica at rest pays nothing for it.

A ticking loop pays for every duty at the rate of the most frequent one, in every
replica; this schedule lets the replica sleep until the earliest duty that is actually
due, and says when a change (an append, a new high watermark, a role change) must wake
it because it brings a duty forward.

Example (checkpoint interval 1 s, retention every 300 s, follower check every 1 s):
    >>> s = HousekeepingSchedule(now_s=0.0, retention_s=300.0, checkpoint_s=1.0,
    ...                          follower_check_s=1.0)
    >>> s.next_wake_s(now_s=0.0, flush_due_s=None, leads_followers=False)
    300.0
    >>> s.changed(now_s=5.0)  # an append: wake the sleeper, a checkpoint is due at 6
    True
    >>> s.next_wake_s(now_s=5.0, flush_due_s=None, leads_followers=False)
    6.0
    >>> sorted(s.take_due(now_s=6.0, flush_due_s=None, leads_followers=False))
    ['checkpoint']
    >>> s.next_wake_s(now_s=6.0, flush_due_s=None, leads_followers=False)
    300.0

The release after traffic (here 5 s of quiet), checked when the first request's due
time comes and pushed back to the last request's while traffic went on:
    >>> s = HousekeepingSchedule(now_s=0.0, retention_s=300.0, checkpoint_s=1.0,
    ...                          follower_check_s=1.0, release_s=5.0)
    >>> s.active(now_s=10.0), s.active(now_s=12.0)  # the first wakes the sleeper
    (True, False)
    >>> s.take_due(now_s=15.0, flush_due_s=None, leads_followers=False)
    set()
    >>> s.next_wake_s(now_s=15.0, flush_due_s=None, leads_followers=False)
    17.0
    >>> s.take_due(now_s=17.0, flush_due_s=None, leads_followers=False)
    {'release'}

Pure: time is passed in (monotonic seconds), nothing sleeps here.
"""

from __future__ import annotations

CHECKPOINT = "checkpoint"
FLUSH = "flush"
RETENTION = "retention"
FOLLOWER_CHECK = "follower_check"
RELEASE = "release"


class HousekeepingSchedule:
    """The due times of one replica's duties (see the module doc).

    Invariant: a due time that is None is not due at all; the planned wake-up is the
    earliest due time, and a change that brings a duty before it asks to be woken.
    """

    def __init__(
        self,
        now_s: float,
        retention_s: float,
        checkpoint_s: float,
        follower_check_s: float,
        release_s: float | None = None,
    ) -> None:
        """``release_s``: quiet time after traffic before the release (None: never)."""
        self.retention_s = retention_s
        self.checkpoint_s = checkpoint_s
        self.follower_check_s = follower_check_s
        self.release_s = release_s
        self.retention_due_s = now_s + retention_s
        self.checkpoint_due_s: float | None = None
        self.follower_check_due_s: float | None = None
        self.release_due_s: float | None = None
        self.active_s = now_s  # the last traffic
        self.wake_s = self.retention_due_s  # when the sleeper plans to wake

    def changed(self, now_s: float) -> bool:
        """Something to checkpoint appeared; whether the sleeper must be woken to plan
        for it (the checkpoint comes before its planned wake-up)."""
        if self.checkpoint_due_s is None:
            self.checkpoint_due_s = now_s + self.checkpoint_s
        return self.checkpoint_due_s < self.wake_s

    def active(self, now_s: float) -> bool:
        """Traffic (a request, data from a leader); whether the sleeper must be woken to
        plan the release after it. Costs a comparison while traffic goes on: the due
        time is set by the first request and pushed back only when it comes."""
        self.active_s = now_s
        if self.release_due_s is None and self.release_s is not None:
            self.release_due_s = now_s + self.release_s
            return self.release_due_s < self.wake_s
        return False

    def _follower_check(self, now_s: float, leads_followers: bool) -> float | None:
        if not leads_followers:
            self.follower_check_due_s = None
        elif self.follower_check_due_s is None:
            self.follower_check_due_s = now_s + self.follower_check_s
        return self.follower_check_due_s

    def next_wake_s(self, now_s: float, flush_due_s: float | None, leads_followers: bool) -> float:
        """When the earliest duty is due (at least ``now_s``); remembered as the plan."""
        times = [self.retention_due_s, self.checkpoint_due_s, flush_due_s, self.release_due_s]
        times.append(self._follower_check(now_s, leads_followers))
        self.wake_s = max(min(t for t in times if t is not None), now_s)
        return self.wake_s

    def take_due(self, now_s: float, flush_due_s: float | None, leads_followers: bool) -> set[str]:
        """The duties due at ``now_s``, each rescheduled as done (periodic ones one
        interval on; a checkpoint and a flush when the next change asks)."""
        due = set()
        if self.checkpoint_due_s is not None and self.checkpoint_due_s <= now_s:
            due.add(CHECKPOINT)
            self.checkpoint_due_s = None
        if flush_due_s is not None and flush_due_s <= now_s:
            due.add(FLUSH)
        if self.retention_due_s <= now_s:
            due.add(RETENTION)
            self.retention_due_s = now_s + self.retention_s
        check = self._follower_check(now_s, leads_followers)
        if check is not None and check <= now_s:
            due.add(FOLLOWER_CHECK)
            self.follower_check_due_s = now_s + self.follower_check_s
        release = self.release_due_s
        if release is not None and release <= now_s and self.release_s is not None:
            quiet_until = self.active_s + self.release_s
            if quiet_until <= now_s:
                due.add(RELEASE)
                self.release_due_s = None
            else:
                self.release_due_s = quiet_until
        return due
