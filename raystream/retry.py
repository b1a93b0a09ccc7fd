"""How long a retry loop waits before trying again: Kafka's exponential backoff (KIP-580).

A loop that retries a failing step at a fixed pause either hammers what is failing (a
short pause: a coordinator or leader that is restarting gets every loop's call every
few milliseconds) or recovers slowly (a long one). KIP-580 made Kafka's clients back
off exponentially instead, from ``retry.backoff.ms`` (default 100 ms) doubling with
each consecutive failure up to ``retry.backoff.max.ms`` (default 1000 ms), each pause
jittered by ±20% so that many clients failing together do not retry in lockstep::

    backoff = min(retry.backoff.max.ms, retry.backoff.ms * 2**attempts * random(0.8, 1.2))

where ``attempts`` counts the failures before this one (0 for the first retry). As in
Kafka, a ``retry.backoff.ms`` above ``retry.backoff.max.ms`` means the maximum, and
the cap applies after the jitter, so no pause exceeds it. A success resets the count.

Example (no jitter shown; the defaults):
    failures 1, 2, 3, 4, 5, 6 -> pauses of 100, 200, 400, 800, 1000, 1000 ms.

Every supervision loop of raystream (group members, Streams workers, Connect task
runners, MirrorMaker's runner and reads, Ray Data's reads) waits through
:class:`Backoff`. Pure: no clock, no sleep, no Ray; the random source is passed in so
tests can seed it.
"""

from __future__ import annotations

import random

from raystream.errors import InvalidConfigError

RETRY_BACKOFF_MS = 100
"""Kafka's default ``retry.backoff.ms``: the first pause."""
RETRY_BACKOFF_MAX_MS = 1000
"""Kafka's default ``retry.backoff.max.ms``: the longest pause."""
JITTER = 0.2
"""The pause is scaled by a random factor in ``[1 - JITTER, 1 + JITTER)``."""
_MAX_EXPONENT = 62
"""Doubling past this would overflow nothing in Python but means nothing either."""


def backoff_ms(
    attempts: int,
    base_ms: float = RETRY_BACKOFF_MS,
    max_ms: float = RETRY_BACKOFF_MAX_MS,
    rng: random.Random | None = None,
) -> float:
    """The pause before retrying after ``attempts + 1`` consecutive failures, in ms.

    Args:
        attempts: failures before the one just seen (0: the first retry).
        base_ms: ``retry.backoff.ms``, the first pause.
        max_ms: ``retry.backoff.max.ms``, the cap (a ``base_ms`` above it means it).
        rng: the random source of the jitter (the ``random`` module's by default).

    Raises:
        InvalidConfigError: a negative ``attempts``, ``base_ms`` or ``max_ms``.

    Example:
        >>> round(backoff_ms(3, 100, 1000, random.Random(1)))  # 800 ms, jittered
        683
    """
    if attempts < 0:
        raise InvalidConfigError(f"attempts must be >= 0, not {attempts!r}")
    _check(base_ms, max_ms)
    if max_ms == 0:
        return 0.0
    term = min(base_ms, max_ms) * 2 ** min(attempts, _MAX_EXPONENT)
    factor = (rng or random).uniform(1 - JITTER, 1 + JITTER)
    return min(float(max_ms), term * factor)


def _check(base_ms: float, max_ms: float) -> None:
    if base_ms < 0:
        raise InvalidConfigError(f"retry.backoff.ms must be >= 0, not {base_ms!r}")
    if max_ms < 0:
        raise InvalidConfigError(f"retry.backoff.max.ms must be >= 0, not {max_ms!r}")


class Backoff:
    """The pauses of one retry loop: :meth:`next_s` after each failure, :meth:`reset`
    after a success.

    Not thread-safe: one loop owns it.

    Args:
        base_ms: ``retry.backoff.ms``, the first pause.
        max_ms: ``retry.backoff.max.ms``, the longest.
        rng: the random source of the jitter (seed one in tests).

    Raises:
        InvalidConfigError: a negative ``base_ms`` or ``max_ms``.

    Example:
        >>> pauses = Backoff(100, 1000, random.Random(1))
        >>> [round(pauses.next_s() * 1000) for _ in range(6)]  # ~100, 200, 400, 800, cap
        [85, 228, 442, 722, 1000, 1000]
        >>> pauses.reset()
        >>> round(pauses.next_s() * 1000)  # from the first pause again
        106
    """

    def __init__(
        self,
        base_ms: float = RETRY_BACKOFF_MS,
        max_ms: float = RETRY_BACKOFF_MAX_MS,
        rng: random.Random | None = None,
    ) -> None:
        _check(base_ms, max_ms)
        self.base_ms = base_ms
        self.max_ms = max_ms
        self._rng = rng
        self.attempts = 0
        """Consecutive failures seen since the last success."""

    def next_s(self) -> float:
        """Count a failure; the pause before the next try, in seconds."""
        pause_ms = backoff_ms(self.attempts, self.base_ms, self.max_ms, self._rng)
        self.attempts += 1
        return pause_ms / 1000

    def reset(self) -> None:
        """A try succeeded: the next failure starts again from ``base_ms``."""
        self.attempts = 0
