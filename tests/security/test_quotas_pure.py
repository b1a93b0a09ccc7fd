"""Client quotas' arithmetic, tested directly with a fake clock: Kafka's entity
precedence, its sampled Rate and its throttle time."""

from __future__ import annotations

import itertools

import pytest

from raystream.errors import InvalidRequestError
from raystream.security.quotas import (
    CONSUMER_BYTE_RATE,
    PRECEDENCE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaManager,
    Rate,
    apply_changes,
    describe,
    entity,
    from_json,
    public_entity,
    resolve,
    throttle_ms,
    to_json,
    user_of,
    validate_changes,
    without_users,
)


class Clock:
    """Seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _shape_entity(user_shape: str, client_shape: str) -> tuple:
    parts = []
    if user_shape:
        parts.append(("user", "alice" if user_shape == "user" else None))
    if client_shape:
        parts.append(("client-id", "app" if client_shape == "client" else None))
    return tuple(parts)


def test_entities_are_canonical_and_bad_ones_are_named() -> None:
    assert entity(("user", "alice")) == (("user", "alice"),)
    both = (("user", "alice"), ("client-id", "app"))
    assert entity((("client-id", "app"), ("user", "alice"))) == both
    assert entity({"client-id": None, "user": "alice"}) == (("user", "alice"), ("client-id", None))
    assert public_entity(entity(("user", None))) == ("user", None)
    assert public_entity(both) == both
    with pytest.raises(InvalidRequestError, match="'ip'"):
        entity(("ip", "1.2.3.4"))
    with pytest.raises(InvalidRequestError, match="twice"):
        entity((("user", "a"), ("user", "b")))
    with pytest.raises(InvalidRequestError, match="unknown quota key 'producer_rate'"):
        validate_changes({("user", "a"): {"producer_rate": 1}})
    with pytest.raises(InvalidRequestError, match="positive"):
        validate_changes({("user", "a"): {PRODUCER_BYTE_RATE: -5}})
    with pytest.raises(InvalidRequestError, match="number"):
        validate_changes({("user", "a"): {PRODUCER_BYTE_RATE: "fast"}})


def test_precedence_is_kafkas_order_of_the_eight_shapes() -> None:
    quotas = {
        _shape_entity(u, c): {PRODUCER_BYTE_RATE: float(rank)}
        for rank, (u, c) in enumerate(PRECEDENCE)
    }
    for rank, (user_shape, client_shape) in enumerate(PRECEDENCE):
        bound, user_tag, client_tag = resolve(quotas, PRODUCER_BYTE_RATE, "alice", "app")
        assert bound == rank
        assert user_tag == ("alice" if user_shape else "")
        assert client_tag == ("app" if client_shape else "")
        del quotas[_shape_entity(user_shape, client_shape)]  # the next one applies now
    assert resolve(quotas, PRODUCER_BYTE_RATE, "alice", "app") is None
    # each key resolves on its own; others' entities do not match
    quotas = {
        (("user", "alice"),): {CONSUMER_BYTE_RATE: 5.0},
        (("client-id", None),): {PRODUCER_BYTE_RATE: 7.0},
    }
    assert resolve(quotas, PRODUCER_BYTE_RATE, "alice", "x") == (7.0, "", "x")
    assert resolve(quotas, CONSUMER_BYTE_RATE, "alice", "x") == (5.0, "alice", "")
    assert resolve(quotas, CONSUMER_BYTE_RATE, "bob", "x") is None
    assert user_of("User:alice") == "alice"


def test_rate_pads_a_young_window_and_expires_old_samples() -> None:
    rate = Rate(num=11, window_ms=1000)
    rate.record(1000, 0)
    assert rate.window(0) == 10_000  # padded to num - 1 full samples
    assert rate.measure(0) == 100.0
    rate.record(1000, 1500)  # a second sample
    assert rate.measure(1500) == 2000 / 10.5  # 1.5 s elapsed + 9 s of padding
    assert rate.window(12_000) == 12_000 - 1500  # first sample (t=0) expired at 11 s
    assert rate.measure(12_000) == 1000 / 10.5
    assert rate.measure(30_000) == 0.0


def test_throttle_time_is_kafkas_formula_capped_at_the_window_span() -> None:
    assert throttle_ms(100, 100, 10_000, 11_000) == 0
    assert throttle_ms(200, 100, 10_000, 11_000) == 10_000
    assert throttle_ms(150, 100, 10_000, 11_000) == 5_000
    assert throttle_ms(10_000, 100, 10_000, 11_000) == 11_000
    clock = Clock()
    manager = QuotaManager(clock=clock)
    manager.update({(("client-id", "app"),): {PRODUCER_BYTE_RATE: 100.0}})
    assert manager.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "app", 1000) == 0  # 100 B/s
    assert manager.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "app", 500) == 5000
    assert manager.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "other", 10**9) == 0


def test_no_quota_means_inactive_and_sharing_follows_the_matched_entity() -> None:
    clock = Clock()
    manager = QuotaManager(clock=clock)
    assert not manager.active
    assert manager.on_request(0, "User:alice", "app", 10**9, 5.0) == 0
    manager.update(
        {
            (("user", "alice"),): {PRODUCER_BYTE_RATE: 100.0},
            (("client-id", None),): {PRODUCER_BYTE_RATE: 100.0},
        }
    )
    assert manager.active
    # alice's clients share her rate: 600 + 600 bytes over the 10 s window is over
    assert manager.record(PRODUCER_BYTE_RATE, "alice", "a", 600) == 0
    assert manager.record(PRODUCER_BYTE_RATE, "alice", "b", 600) == 2000
    # the default client-id quota meters each client id on its own
    assert manager.record(PRODUCER_BYTE_RATE, "bob", "a", 600) == 0
    assert manager.record(PRODUCER_BYTE_RATE, "bob", "b", 600) == 0
    manager.update({})
    assert not manager.active
    assert manager.record(PRODUCER_BYTE_RATE, "alice", "a", 10**9) == 0


def test_request_percentage_meters_handler_time_except_exempt_apis() -> None:
    clock = Clock()
    manager = QuotaManager(clock=clock)
    manager.update({(("user", None),): {REQUEST_PERCENTAGE: 10.0}})  # 10% of a handler
    assert manager.on_request(18, "User:ANONYMOUS", "c", 0, 100.0) == 0  # ApiVersions
    assert manager.on_request(3, "User:ANONYMOUS", "c", 0, 0.5) == 0  # 50 %-s / 10 s = 5 %
    # another 1.5 s of handler time: 200 %-s over 10 s = 20 %, twice the bound
    assert manager.on_request(3, "User:ANONYMOUS", "c", 0, 1.5) == 10_000


def test_a_greedy_client_averages_its_quota() -> None:
    """A client sending 100 KB as fast as it may (honouring its throttle) against
    1 MB/s, for a minute of fake time: held near 1 MB/s, as Kafka holds it."""
    clock = Clock()
    start = clock.now
    manager = QuotaManager(clock=clock)
    manager.update({(("client-id", "greedy"),): {PRODUCER_BYTE_RATE: 1_000_000.0}})
    sent = 0
    throttled = 0
    while clock.now - start < 60:
        throttle = manager.on_request(0, "User:ANONYMOUS", "greedy", 100_000, 0.0)
        sent += 100_000
        throttled += throttle > 0
        clock.now += 0.001 + throttle / 1000
    rate = sent / (clock.now - start)
    assert throttled > 0
    assert 0.8e6 <= rate <= 1.2e6, rate


@pytest.mark.parametrize("bytes_per_s", [2e6, 30e6])
@pytest.mark.parametrize("delay_s", [0.0, 0.7, 3.0])
def test_a_flat_out_client_over_two_window_spans_after_the_first(
    bytes_per_s: float, delay_s: float
) -> None:
    """The listener test's measure, in fake time: a client sending 64 kB requests flat
    out (a listener taking ``bytes_per_s``, the first request ``delay_s`` after the
    start) bursts ten seconds' worth each time its burst's samples expire, never sooner
    than 11 s after the burst before began; so (11 s, 33 s] holds two whole bursts and
    averages the quota, wherever the bursts fall."""
    quota = 1_048_576.0
    clock = Clock()
    start = clock.now
    manager = QuotaManager(clock=clock)
    manager.update({(("client-id", "flat-out"),): {PRODUCER_BYTE_RATE: quota}})
    clock.now += delay_s
    delivered: list[tuple[float, int]] = []  # (seconds since the start, throttle ms)
    while clock.now - start < 40:
        throttle = manager.on_request(0, "User:ANONYMOUS", "flat-out", 65_536, 0.0)
        clock.now += 65_536 / bytes_per_s
        delivered.append((clock.now - start, throttle))
        clock.now += throttle / 1000
    # A burst: requests let through unthrottled, after throttled ones (or the first).
    bursts = [
        t for (_, before), (t, throttle) in itertools.pairwise(delivered) if before and not throttle
    ]
    bursts.insert(0, delivered[0][0])
    assert len(bursts) >= 4
    assert all(b - a >= 11 for a, b in itertools.pairwise(bursts)), bursts
    rate = sum(65_536 for t, _ in delivered if 11 < t <= 33) / 22
    assert 0.97 * quota <= rate <= 1.03 * quota, rate


def test_changes_apply_remove_round_trip_and_filter() -> None:
    current = apply_changes(
        {},
        validate_changes(
            {
                ("user", "alice"): {PRODUCER_BYTE_RATE: 10, CONSUMER_BYTE_RATE: 20},
                (("user", "alice"), ("client-id", "app")): {REQUEST_PERCENTAGE: 50},
                ("client-id", None): {PRODUCER_BYTE_RATE: 5},
            }
        ),
    )
    current = apply_changes(
        current, validate_changes({("user", "alice"): {CONSUMER_BYTE_RATE: None}})
    )
    assert current[(("user", "alice"),)] == {PRODUCER_BYTE_RATE: 10.0}
    gone = apply_changes(
        current, validate_changes({("client-id", None): {PRODUCER_BYTE_RATE: None}})
    )
    assert (("client-id", None),) not in gone
    assert from_json(to_json(current)) == current
    assert set(describe(current)) == set(current)
    assert set(describe(current, [("user", 0, "alice")])) == {
        (("user", "alice"),),
        (("user", "alice"), ("client-id", "app")),
    }
    assert set(describe(current, [("user", 0, "alice")], strict=True)) == {(("user", "alice"),)}
    assert set(describe(current, [("client-id", 1, None)])) == {(("client-id", None),)}
    assert set(describe(current, [("client-id", 2, None)])) == {
        (("client-id", None),),
        (("user", "alice"), ("client-id", "app")),
    }
    with pytest.raises(InvalidRequestError, match="'ip'"):
        describe(current, [("ip", 2, None)])


def test_without_users_keeps_only_the_client_id_entities() -> None:
    quotas = {
        (("user", "alice"),): {PRODUCER_BYTE_RATE: 1.0},
        (("user", None), ("client-id", "app")): {PRODUCER_BYTE_RATE: 2.0},
        (("client-id", "app"),): {PRODUCER_BYTE_RATE: 3.0},
        (("client-id", None),): {CONSUMER_BYTE_RATE: 4.0},
    }
    kept = without_users(quotas)
    assert kept == {
        (("client-id", "app"),): {PRODUCER_BYTE_RATE: 3.0},
        (("client-id", None),): {CONSUMER_BYTE_RATE: 4.0},
    }
    # the default user's quota would otherwise win over the client id's for ""
    assert resolve(quotas, PRODUCER_BYTE_RATE, "", "app") == (2.0, "", "app")
    assert resolve(kept, PRODUCER_BYTE_RATE, "", "app") == (3.0, "", "app")
