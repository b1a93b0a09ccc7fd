"""A raystream client's own quota (no Ray): metering its requests' bytes mutes it for
Kafka's throttle time, and only quotas matching its client id apply."""

from __future__ import annotations

from raystream.client.quotas import ClientQuotas
from raystream.security.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, without_users


class Clock:
    """Seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def quotas_for(client_id: str, clock: Clock) -> ClientQuotas:
    quotas = ClientQuotas(None, client_id, PRODUCER_BYTE_RATE, clock)
    quotas.manager.update(
        without_users(
            {
                (("client-id", "app"),): {PRODUCER_BYTE_RATE: 1000.0},
                (("user", None),): {PRODUCER_BYTE_RATE: 1.0},  # no principal: ignored
                (("client-id", None),): {CONSUMER_BYTE_RATE: 1.0},  # another key
            }
        )
    )
    return quotas


def test_an_over_quota_request_mutes_the_client_for_the_throttle_time() -> None:
    clock = Clock()
    quotas = quotas_for("app", clock)
    # 10 kB over Kafka's padded 10 s window is 1000 B/s: at the bound, not over it
    assert quotas.record(10_000, clock.now) == 0
    assert quotas.muted_until == 0.0
    # 11 kB: 1100 B/s, 10 % over for a 10 s window: 1 s
    assert quotas.record(1_000, clock.now) == 1000
    assert quotas.muted_until == clock.now + 1.0
    clock.now += 0.5
    assert quotas.record(0, clock.now) > 0  # still over: the mute only grows
    assert quotas.muted_until >= clock.now + 0.5


def test_other_client_ids_and_user_quotas_do_not_apply() -> None:
    clock = Clock()
    other = quotas_for("other", clock)
    assert other.manager.active  # the client-id quota of "app" is known...
    assert other.record(10_000_000, clock.now) == 0  # ...but is not this client's
    assert other.muted_until == 0.0
