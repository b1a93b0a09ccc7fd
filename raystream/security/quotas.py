"""Client quotas as Kafka's: which quota applies to a request, its measured rate, and
how long an over-quota client is throttled.

Kafka's model (KIP-13, KIP-55, KIP-124), kept here so a Kafka operator's habits hold:

- A quota is set on an *entity*: a user, a client id, or both, each either named or
  the default (``None`` here, Kafka's ``<default>``). Each quota key
  (:data:`PRODUCER_BYTE_RATE`, :data:`CONSUMER_BYTE_RATE`,
  :data:`REQUEST_PERCENTAGE`) is resolved on its own, first match in
  :data:`PRECEDENCE` order (``/config/users/<user>/clients/<client-id>`` down to
  ``/config/clients/<default>``).
- The match also says which clients share one measured rate: a user's quota is shared
  by all that user's client ids, a default-client-id quota is metered per client id.
- A rate is measured over :data:`WINDOW_NUM` samples of :data:`WINDOW_SIZE_S` (Kafka's
  ``quota.window.num`` and ``quota.window.size.seconds``) exactly as Kafka's
  ``Rate``/``SampledStat`` does, including its padding of a young window to
  ``num - 1`` full samples (so a new client's first bytes do not count as a burst).
- A request whose recorded value puts the rate over the bound is throttled for
  ``(rate - bound) / bound * window``, capped at the full window span (Kafka's
  ``ClientQuotaManager``). The response goes out at once carrying the throttle time,
  and the listener then stops reading the connection for that long (KIP-219).
- ``request_percentage`` meters handler time: one handler busy all the time is 100.

Pure: no Ray, no sockets, no clock of its own (a clock is passed in), so every line is
tested directly with a fake clock. The listener holds one :class:`QuotaManager` and
keeps its quotas in step with the controller's metadata log.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from raystream.errors import InvalidRequestError

USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)
"""Kafka's client quota entity types, in the order an entity names them."""
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
"""The quota keys served (Kafka's names; bytes per second, percent of one handler)."""
WINDOW_NUM = 11
"""Kafka's ``quota.window.num``: samples a rate is measured over."""
WINDOW_SIZE_S = 1
"""Kafka's ``quota.window.size.seconds``: the span of one sample."""
SENSOR_IDLE_S = 3600.0
"""A client's rate is forgotten after this long without a request (Kafka: 1 hour)."""
EXEMPT_APIS = frozenset((17, 18, 36))
"""APIs never metered for ``request_percentage`` (SaslHandshake, ApiVersions,
SaslAuthenticate: a client must be able to connect and learn it is throttled)."""
PRODUCE_API, FETCH_API = 0, 1

Entity = tuple[tuple[str, str | None], ...]
"""A quota entity: ``((type, name), ...)`` in :data:`ENTITY_TYPES` order; a name of
None is the default entity of its type."""

PRECEDENCE: tuple[tuple[str, str], ...] = (
    ("user", "client"),
    ("user", "default-client"),
    ("user", ""),
    ("default-user", "client"),
    ("default-user", "default-client"),
    ("default-user", ""),
    ("", "client"),
    ("", "default-client"),
)
"""Kafka's order of the eight entity shapes a request can match, most specific first
(``user``: the request's user; ``default-user``: ``<default>``; ``""``: absent)."""


def entity(spec: Any) -> Entity:
    """The canonical entity of ``spec``.

    Accepted: ``("user", "alice")``, ``("client-id", None)`` (the default), a tuple of
    such pairs (``(("user", "alice"), ("client-id", "app"))``) or a dict
    ``{"user": "alice", "client-id": "app"}``.

    Raises:
        InvalidRequestError: an unknown entity type, a type named twice, a name that is
            not a string, or no component at all.
    """
    if isinstance(spec, Mapping):
        pairs = list(spec.items())
    elif isinstance(spec, tuple | list) and len(spec) == 2 and isinstance(spec[0], str):
        pairs = [tuple(spec)]
    elif isinstance(spec, tuple | list):
        pairs = [tuple(p) if isinstance(p, tuple | list) else p for p in spec]
    else:
        raise InvalidRequestError(f"a quota entity must be a (type, name) pair, not {spec!r}")
    found: dict[str, str | None] = {}
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise InvalidRequestError(f"quota entity component {pair!r} is not a (type, name)")
        kind, name = pair
        if kind not in ENTITY_TYPES:
            raise InvalidRequestError(
                f"unknown quota entity type {kind!r} (known: {', '.join(ENTITY_TYPES)})"
            )
        if kind in found:
            raise InvalidRequestError(f"quota entity {spec!r} names {kind!r} twice")
        if name is not None and not isinstance(name, str):
            raise InvalidRequestError(f"quota entity {kind} name must be a string, not {name!r}")
        found[kind] = name
    if not found:
        raise InvalidRequestError("a quota entity needs a user, a client-id, or both")
    return tuple((kind, found[kind]) for kind in ENTITY_TYPES if kind in found)


def public_entity(key: Entity) -> Any:
    """The entity as callers write it: one ``(type, name)`` pair, or a tuple of two."""
    return key[0] if len(key) == 1 else key


def validate_quota(key: str, value: Any) -> float | None:
    """``value`` for quota ``key`` as a float (None: remove the quota).

    Raises:
        InvalidRequestError: an unknown key or a value that is not a positive number.
    """
    if key not in QUOTA_KEYS:
        raise InvalidRequestError(f"unknown quota key {key!r} (known: {', '.join(QUOTA_KEYS)})")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequestError(f"quota {key} must be a number, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise InvalidRequestError(f"quota {key} must be a positive number, not {value!r}")
    return float(value)


def validate_changes(changes: Any) -> dict[Entity, dict[str, float | None]]:
    """``{entity spec: {quota key: value or None}}`` checked and made canonical.

    Raises:
        InvalidRequestError: anything :func:`entity` or :func:`validate_quota` refuses.
    """
    if not isinstance(changes, Mapping):
        raise InvalidRequestError(
            f"client quota changes must be a dict of entity -> quotas, not {changes!r}"
        )
    checked: dict[Entity, dict[str, float | None]] = {}
    for spec, quotas in changes.items():
        if not isinstance(quotas, Mapping):
            raise InvalidRequestError(f"the quotas of {spec!r} must be a dict, not {quotas!r}")
        checked[entity(spec)] = {str(k): validate_quota(str(k), v) for k, v in quotas.items()}
    return checked


def apply_changes(
    current: Mapping[Entity, Mapping[str, float]],
    changes: Mapping[Entity, Mapping[str, float | None]],
) -> dict[Entity, dict[str, float]]:
    """The quotas after ``changes`` (validated): None removes a key, an entity left
    with no key is gone."""
    result = {k: dict(v) for k, v in current.items()}
    for key, quotas in changes.items():
        merged = result.get(key, {})
        for name, value in quotas.items():
            if value is None:
                merged.pop(name, None)
            else:
                merged[name] = value
        if merged:
            result[key] = merged
        else:
            result.pop(key, None)
    return result


def to_json(quotas: Mapping[Entity, Mapping[str, float]]) -> str:
    """The quotas as the JSON the metadata log keeps."""
    return json.dumps(
        [{"entity": [list(c) for c in key], "quotas": dict(q)} for key, q in quotas.items()]
    )


def from_json(text: str | bytes) -> dict[Entity, dict[str, float]]:
    """Quotas read back from :func:`to_json`."""
    return {
        tuple((str(t), n) for t, n in item["entity"]): {
            str(k): float(v) for k, v in item["quotas"].items()
        }
        for item in json.loads(text)
    }


MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
"""DescribeClientQuotas' component match types (a name, the default, any)."""


def matches(key: Entity, components: Iterable[tuple[str, int, str | None]], strict: bool) -> bool:
    """Whether entity ``key`` matches a DescribeClientQuotas filter: every component
    ``(entity_type, match_type, match)`` must hold of it, and with ``strict`` it may
    name no other type."""
    names = dict(key)
    types = set()
    for kind, match_type, match in components:
        types.add(kind)
        if kind not in names:
            return False
        if match_type == MATCH_EXACT and names[kind] != match:
            return False
        if match_type == MATCH_DEFAULT and names[kind] is not None:
            return False
    return not strict or set(names) <= types


def describe(
    quotas: Mapping[Entity, Mapping[str, float]],
    components: Iterable[tuple[str, int, str | None]] = (),
    strict: bool = False,
) -> dict[Entity, dict[str, float]]:
    """The quotas of the entities matching the filter (none given: every one).

    Raises:
        InvalidRequestError: a component of an unknown type or match type.
    """
    components = list(components)
    for kind, match_type, _ in components:
        if kind not in ENTITY_TYPES:
            raise InvalidRequestError(f"unknown quota entity type {kind!r}")
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise InvalidRequestError(f"unknown quota filter match type {match_type!r}")
    return {k: dict(v) for k, v in quotas.items() if matches(k, components, strict)}


def without_users(quotas: Mapping[Entity, Mapping[str, float]]) -> dict[Entity, dict[str, float]]:
    """The quotas whose entity names no user (named or default).

    For a client that has no principal of its own to be metered as: raystream's own
    clients inside Ray are matched by client id only, so a user's quota (or the
    default user's) must not catch them as if they were that user.
    """
    return {k: dict(v) for k, v in quotas.items() if all(kind != USER for kind, _ in k)}


def user_of(principal: str) -> str:
    """Kafka's quota user of a principal: its name (``User:alice`` -> ``alice``)."""
    return principal.partition(":")[2] or principal


def resolve(
    quotas: Mapping[Entity, Mapping[str, float]], key: str, user: str, client_id: str
) -> tuple[float, str, str] | None:
    """The bound of quota ``key`` for ``(user, client_id)`` and the metering tags
    ``(bound, user tag, client-id tag)``: the first entity in :data:`PRECEDENCE`
    order that sets ``key``; None when no quota applies.

    The tags say who shares the measured rate, as Kafka's metric tags do: the
    request's user when the match names a user (or the default user), else ``""``,
    likewise for the client id.
    """
    for user_shape, client_shape in PRECEDENCE:
        parts: list[tuple[str, str | None]] = []
        if user_shape:
            parts.append((USER, user if user_shape == "user" else None))
        if client_shape:
            parts.append((CLIENT_ID, client_id if client_shape == "client" else None))
        bound = quotas.get(tuple(parts), {}).get(key)
        if bound is not None:
            return bound, user if user_shape else "", client_id if client_shape else ""
    return None


class Rate:
    """Kafka's ``Rate`` over a ``SampledStat`` (a windowed sum): the sum of the
    retained samples divided by the window they span, in units per second.

    Args:
        num: samples kept (``quota.window.num``).
        window_ms: span of one sample (``quota.window.size.seconds`` in ms).
    """

    __slots__ = ("current", "num", "samples", "window_ms")

    def __init__(self, num: int = WINDOW_NUM, window_ms: float = WINDOW_SIZE_S * 1000) -> None:
        self.num = num
        self.window_ms = window_ms
        self.samples: list[list[float]] = []  # [window start ms, value]
        self.current = 0

    def record(self, value: float, now_ms: float) -> None:
        """Add ``value`` at ``now_ms`` to the current sample (a new one when it is
        complete, reusing the oldest slot once ``num`` exist)."""
        if not self.samples:
            self.samples.append([now_ms, 0.0])
        sample = self.samples[self.current]
        if now_ms - sample[0] >= self.window_ms:
            self.current = (self.current + 1) % self.num
            if self.current >= len(self.samples):
                sample = [now_ms, 0.0]
                self.samples.append(sample)
            else:
                sample = self.samples[self.current]
                sample[0], sample[1] = now_ms, 0.0
        sample[1] += value

    def _purge(self, now_ms: float) -> None:
        expire = self.num * self.window_ms
        for sample in self.samples:
            if now_ms - sample[0] >= expire:
                sample[0], sample[1] = now_ms, 0.0

    def window(self, now_ms: float) -> float:
        """The span in ms the rate divides by: since the oldest sample began, padded to
        ``num - 1`` full samples while younger (Kafka's ``Rate.windowSize``)."""
        self._purge(now_ms)
        if not self.samples:
            return (self.num - 1) * self.window_ms
        elapsed = now_ms - min(s[0] for s in self.samples)
        full = int(elapsed // self.window_ms)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now_ms: float) -> float:
        """The rate per second at ``now_ms``."""
        span = self.window(now_ms)
        return sum(s[1] for s in self.samples) / (span / 1000.0)


def throttle_ms(rate: float, bound: float, window_ms: float, max_ms: float) -> int:
    """Kafka's throttle time of a client measured at ``rate`` against ``bound``: the
    time for the window's average to fall back to the bound, capped at ``max_ms``;
    0 when within the bound."""
    if rate <= bound:
        return 0
    return int(min(round((rate - bound) / bound * window_ms), max_ms))


@dataclass(slots=True)
class _Sensor:
    rate: Rate
    used: float


class QuotaManager:
    """Meters clients against the quotas in force and says how long to throttle.

    :attr:`active` is False while no quota is set: the listener then skips all of
    this, so quotas cost nothing until one is configured.

    Args:
        clock: seconds, monotonic (tests pass a fake one).
        window_num, window_size_s: Kafka's ``quota.window.num`` and
            ``quota.window.size.seconds``.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        window_num: int = WINDOW_NUM,
        window_size_s: float = WINDOW_SIZE_S,
    ) -> None:
        self.clock = clock
        self.window_num = window_num
        self.window_ms = window_size_s * 1000.0
        self.max_throttle_ms = self.window_num * self.window_ms
        self.quotas: dict[Entity, dict[str, float]] = {}
        self.active = False
        self._keys: frozenset[str] = frozenset()
        self._sensors: dict[tuple[str, str, str], _Sensor] = {}
        self._resolved: dict[tuple[str, str, str], tuple[float, str, str] | None] = {}

    def update(self, quotas: Mapping[Entity, Mapping[str, float]]) -> None:
        """Put ``quotas`` in force (measured rates are kept); forget idle clients."""
        self.quotas = {k: dict(v) for k, v in quotas.items()}
        self._keys = frozenset(k for q in self.quotas.values() for k in q)
        self.active = bool(self._keys)
        self._resolved.clear()
        idle = self.clock() - SENSOR_IDLE_S
        for tags in [t for t, s in self._sensors.items() if s.used < idle]:
            del self._sensors[tags]

    def record(self, key: str, user: str, client_id: str, value: float) -> int:
        """Record ``value`` (bytes, or percent-seconds of handler time) for a client
        and answer its throttle time in ms (0: within its quota, or none applies)."""
        if key not in self._keys:
            return 0
        lookup = (key, user, client_id)
        if lookup in self._resolved:
            found = self._resolved[lookup]
        else:
            found = self._resolved[lookup] = resolve(self.quotas, key, user, client_id)
        if found is None:
            return 0
        bound, user_tag, client_tag = found
        now = self.clock()
        tags = (key, user_tag, client_tag)
        sensor = self._sensors.get(tags)
        if sensor is None:
            sensor = self._sensors[tags] = _Sensor(Rate(self.window_num, self.window_ms), now)
        sensor.used = now
        now_ms = now * 1000.0
        sensor.rate.record(value, now_ms)
        rate = sensor.rate.measure(now_ms)
        return throttle_ms(rate, bound, sensor.rate.window(now_ms), self.max_throttle_ms)

    def on_request(
        self, api_key: int, principal: str, client_id: str, request_bytes: int, handler_s: float
    ) -> int:
        """Meter one Kafka request as it is answered: produce bytes (the request's
        size, as Kafka counts them) and handler time; the throttle time in ms. Fetch
        bytes are metered by :meth:`on_fetch_response` once the response's size is
        known."""
        user = user_of(principal)
        throttle = 0
        if api_key == PRODUCE_API:
            throttle = self.record(PRODUCER_BYTE_RATE, user, client_id, request_bytes)
        if api_key not in EXEMPT_APIS:
            spent = self.record(REQUEST_PERCENTAGE, user, client_id, handler_s * 100.0)
            throttle = max(throttle, spent)
        return throttle

    def on_fetch_response(self, principal: str, client_id: str, response_bytes: int) -> int:
        """Meter a fetch response's size against ``consumer_byte_rate``; throttle ms."""
        return self.record(CONSUMER_BYTE_RATE, user_of(principal), client_id, response_bytes)


__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "ENTITY_TYPES",
    "PRECEDENCE",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "USER",
    "WINDOW_NUM",
    "WINDOW_SIZE_S",
    "Entity",
    "QuotaManager",
    "Rate",
    "apply_changes",
    "describe",
    "entity",
    "from_json",
    "public_entity",
    "resolve",
    "throttle_ms",
    "to_json",
    "user_of",
    "validate_changes",
    "without_users",
]
