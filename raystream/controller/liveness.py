"""What the controller knows of its replicas' health, and how it learns it at no cost at rest.

Polling every replica (a ping each half second) costs CPU in every replica, in the
controller and in Ray's GCS for each replica alive, even when nothing happens. Instead
the controller is told:

- **crashes** by Ray: every actor state change reaches it (see
  :class:`~raystream.actors.liveness.ActorStateWatch`), so a replica whose process died
  counts as down within milliseconds (a ping found it after 0.2-0.7 s);
- **hangs** by the replicas' peers: a follower whose long-polling fetch the leader
  leaves unanswered past its wait, and a leader whose follower stops fetching, report
  that replica as a *suspect*; so do the partition's clients (a producer whose request
  the leader leaves unanswered past ``request_timeout_ms``, an admin's
  ``describe_topic`` that the leader does not answer in time), which are the only
  peers a leader without followers has. The controller then probes just that replica,
  and one that does not answer its probe counts as hung (down) until a later probe
  answers: a partition it led passes to another in-sync replica, or, with none (a
  single replica), goes offline, as Kafka fences a broker whose session expired.
  A replica hung for :data:`HUNG_RESTART_S` whose partition is offline for want of it
  is restarted (:meth:`Liveness.hung_for`): no other replica can serve the partition,
  and a process stuck that long is not coming back by itself.

Both end in the same question a monitor pass asks: which replicas are down now. A
crash is latched until the next pass reads it, even if Ray restarted the replica in
between: a restarted replica lost its memory (and maybe the unflushed tail of its log),
so it must leave the ISR and, if it led, lose leadership, just as a Kafka broker whose
session ended.

Example:
    >>> health = Liveness()
    >>> health.on_state("a1", "RESTARTING"), health.on_state("a1", "ALIVE")
    (True, True)
    >>> sorted(health.take_down({"a1", "a2"}))  # back already, but crashed since the last pass
    ['a1']
    >>> sorted(health.take_down({"a1", "a2"}))
    []
    >>> sorted(health.take_recovered({"a1", "a2"}))  # to be woken by a first call
    ['a1']
    >>> health.suspect("r"); health.probed("r", answered=False, now_s=100.0)
    >>> health.hung_for(9.0, now_s=108.0), health.hung_for(9.0, now_s=109.0)
    (set(), {'r'})

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable

DOWN_STATES = frozenset({"RESTARTING", "DEAD"})
"""Ray's actor states of a crashed actor (being restarted, or gone for good)."""
HUNG_RESTART_S = 9.0
"""How long a replica may stay hung, its partition offline for want of it, before it is
restarted: Kafka's ``broker.session.timeout.ms`` (9 s), the time Kafka gives a silent
broker before fencing it."""


class Liveness:
    """Crashed actors (by Ray actor id), suspects and hung replicas (by any key)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down: set[str] = set()  # down as Ray last said
        self._crashed: set[str] = set()  # went down since the last take_down
        self._recovered: set[str] = set()  # back up since the last take_recovered
        self._suspects: set[Hashable] = set()
        self._hung: dict[Hashable, float] = {}  # hung replica -> since when (s)

    def on_state(self, actor_id: str, state: str) -> bool:
        """Record Ray's new ``state`` of an actor; whether a monitor pass should run."""
        with self._lock:
            if state in DOWN_STATES:
                self._down.add(actor_id)
                self._crashed.add(actor_id)
                return True
            if state == "ALIVE" and actor_id in self._down:
                self._down.discard(actor_id)
                self._recovered.add(actor_id)
                return True
            return False

    def take_down(self, watched: Iterable[str]) -> set[str]:
        """The ids among ``watched`` that are down now or crashed since the last call.

        Forgets every other id: actors the caller no longer watches (deleted replicas,
        other applications' actors) do not accumulate.
        """
        watched = set(watched)
        with self._lock:
            down = (self._down | self._crashed) & watched
            self._down &= watched
            self._crashed = set()
            return down

    def take_recovered(self, watched: Iterable[str]) -> set[str]:
        """The ids among ``watched`` that Ray restarted since the last call: a restarted
        replica waits for a first call before it asks for its role, so the caller
        sends it one."""
        with self._lock:
            recovered = self._recovered & set(watched)
            self._recovered = set()
            return recovered

    def suspect(self, key: Hashable) -> None:
        """A peer reports ``key`` unresponsive: probe it in the next pass."""
        with self._lock:
            self._suspects.add(key)

    def to_probe(self) -> set[Hashable]:
        """Replicas to probe: suspects, and hung ones (to notice that they are back)."""
        with self._lock:
            return self._suspects | set(self._hung)

    def probed(self, key: Hashable, answered: bool, now_s: float) -> None:
        """Record a probe's outcome at ``now_s`` (any monotonic clock): unanswered
        makes the replica hung (since then, if it was not already), answered clears it."""
        with self._lock:
            self._suspects.discard(key)
            if answered:
                self._hung.pop(key, None)
            else:
                self._hung.setdefault(key, now_s)

    def hung(self) -> set[Hashable]:
        """Replicas that left their last probe unanswered."""
        with self._lock:
            return set(self._hung)

    def hung_for(self, at_least_s: float, now_s: float) -> set[Hashable]:
        """Replicas that have left every probe unanswered for ``at_least_s`` or more."""
        with self._lock:
            return {key for key, since in self._hung.items() if now_s - since >= at_least_s}

    def forget(self, keys: Iterable[Hashable]) -> None:
        """Drop suspects and hung replicas among ``keys`` (replicas removed or replaced)."""
        with self._lock:
            for key in keys:
                self._suspects.discard(key)
                self._hung.pop(key, None)
