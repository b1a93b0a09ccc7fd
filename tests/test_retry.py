"""The retry loops' backoff (KIP-580): pure, seeded, no Ray."""

from __future__ import annotations

import random

import pytest

from raystream.errors import InvalidConfigError
from raystream.retry import JITTER, Backoff, backoff_ms


def test_pauses_double_from_the_base_within_the_jitter_up_to_the_cap() -> None:
    rng = random.Random(580)
    for _ in range(200):
        for attempts, nominal in enumerate([100, 200, 400, 800]):
            pause = backoff_ms(attempts, 100, 1000, rng)
            assert nominal * (1 - JITTER) <= pause < nominal * (1 + JITTER)
        for attempts in (4, 5, 10, 100, 10_000):
            pause = backoff_ms(attempts, 100, 1000, rng)
            assert 1000 * (1 - JITTER) <= pause <= 1000, "the cap holds after the jitter"


def test_the_jitter_spreads_pauses_over_the_whole_band() -> None:
    """Clients failing together must not retry in lockstep: the factors cover
    [0.8, 1.2), not a point."""
    rng = random.Random(1)
    factors = [backoff_ms(0, 100, 1000, rng) / 100 for _ in range(2000)]
    assert min(factors) < 0.81 and max(factors) > 1.19
    assert all(1 - JITTER <= f < 1 + JITTER for f in factors)
    mean = sum(factors) / len(factors)
    assert 0.98 < mean < 1.02


def test_the_same_seed_gives_the_same_pauses() -> None:
    first = Backoff(50, 2000, random.Random(42))
    second = Backoff(50, 2000, random.Random(42))
    assert [first.next_s() for _ in range(10)] == [second.next_s() for _ in range(10)]


def test_a_success_resets_the_loop_to_the_first_pause() -> None:
    pauses = Backoff(100, 1000, random.Random(3))
    grown = [pauses.next_s() for _ in range(5)]
    assert pauses.attempts == 5 and grown[-1] > 0.6
    pauses.reset()
    assert pauses.attempts == 0
    assert 0.08 <= pauses.next_s() < 0.12


def test_a_base_above_the_cap_means_the_cap_and_zero_means_no_pause() -> None:
    rng = random.Random(9)
    assert all(backoff_ms(0, 5000, 1000, rng) <= 1000 for _ in range(100))
    assert all(backoff_ms(n, 0, 1000, rng) == 0 for n in range(5))
    assert backoff_ms(3, 100, 0, rng) == 0


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((-1, 100, 1000), "attempts must be >= 0, not -1"),
        ((0, -5, 1000), r"retry\.backoff\.ms must be >= 0, not -5"),
        ((0, 100, -1), r"retry\.backoff\.max\.ms must be >= 0, not -1"),
    ],
)
def test_bad_settings_are_refused_naming_the_value(args: tuple, match: str) -> None:
    with pytest.raises(InvalidConfigError, match=match):
        backoff_ms(*args)
    if args[0] >= 0:
        with pytest.raises(InvalidConfigError, match=match):
            Backoff(args[1], args[2])
