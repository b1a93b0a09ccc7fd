"""Client quotas kept by raystream's own Producer and Consumer themselves.

A producer's ``producer_byte_rate`` and a consumer's ``consumer_byte_rate`` set for
its client id (``("client-id", id)`` or the default client-id entity) hold on the
direct path too: the client meters the bytes of each produce call (each fetch answer)
with the listener's own :class:`~raystream.security.quotas.QuotaManager`, over Kafka's
samples, and when that says throttle it sends nothing more for the throttle time, as
Kafka's broker mutes an over-quota client's channel (KIP-219). The quotas are read
from the controller when the client starts and again every :data:`REFRESH_S` (one
small controller call per client, answered with nothing when they did not change);
nothing is asked of the replicas and nothing is done per record.

Why the client enforces it, and not the replica: the trust model. Processes inside
the Ray cluster are trusted, as Kafka trusts its inter-broker listener (Ray's cluster
authentication guards them); there a quota is a fairness tool among cooperating
tenants that share the cluster, so the cooperating client may keep it itself, at no
cost to the replicas' hot path. Untrusted tenants come in through the Kafka-protocol
listeners, which meter and mute them on the server side.

What differs from Kafka's broker-side metering:

- The rate is metered per client instance: two producers with the same client id
  each get the quota (Kafka's broker would share it among them), and it spans the
  whole cluster (Kafka's holds per broker).
- raystream's clients have no principal of their own, so quotas set on a user (or
  the default user) do not apply to them; the client-id ones do.
- Until the first read answers (a controller round trip after start) the client is
  not metered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from raystream.security.quotas import QuotaManager, without_users

logger = logging.getLogger(__name__)

REFRESH_S = 5.0
"""How often a client reads the quotas again (a change is in force within this)."""
READ_TIMEOUT_S = 30.0
"""How long one read of the quotas may take (the controller restarting)."""


class ClientQuotas:
    """One client's quota on ``key`` (bytes per second) for its ``client_id``.

    Thread-safe: the client's I/O thread calls :meth:`record` and
    :meth:`maybe_refresh`; a refresh thread puts new quotas in force.

    Args:
        cluster: the cluster whose controller holds the quotas.
        client_id: the client id the quotas are matched against.
        key: :data:`~raystream.security.quotas.PRODUCER_BYTE_RATE` or
            :data:`~raystream.security.quotas.CONSUMER_BYTE_RATE`.
        clock: monotonic seconds, the clock the caller passes as ``now``.
    """

    def __init__(
        self,
        cluster: Any,
        client_id: str,
        key: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.client_id = client_id
        self.key = key
        self.manager = QuotaManager(clock)
        self.version: str | None = None
        self.lock = threading.Lock()
        self.muted_until = 0.0
        """No request goes out before this time (the clock's seconds)."""
        self._next_refresh = 0.0
        self._refreshing = False

    def record(self, size_bytes: int, now: float) -> int:
        """Meter one request's bytes; the throttle time in ms (0: within the quota, or
        none applies), during which the client sends nothing more."""
        if not self.manager.active:
            return 0
        with self.lock:
            throttle_ms = self.manager.record(self.key, "", self.client_id, size_bytes)
        if throttle_ms:
            self.muted_until = max(self.muted_until, now + throttle_ms / 1000)
        return throttle_ms

    def maybe_refresh(self, now: float) -> None:
        """Read the quotas again, on a thread of its own, if :data:`REFRESH_S` passed
        since the last read (the first call reads them at once). Never blocks: a
        controller that is restarting must not hold up the client's requests."""
        if now < self._next_refresh or self._refreshing:
            return
        self._next_refresh = now + REFRESH_S
        self._refreshing = True
        threading.Thread(target=self.refresh, name="raystream-client-quotas", daemon=True).start()

    def refresh(self) -> None:
        """Read the quotas from the controller and put them in force (blocking); a
        failure keeps the ones in force and is tried again at the next refresh."""
        try:
            version, quotas = self.cluster.call(
                "client_quotas", self.version, timeout_s=READ_TIMEOUT_S
            )
            if quotas is not None:
                with self.lock:
                    self.manager.update(without_users(quotas))
                    self.version = version
        except Exception as error:
            logger.debug("reading client quotas for %r failed: %s", self.client_id, error)
        finally:
            self._refreshing = False


__all__ = ["READ_TIMEOUT_S", "REFRESH_S", "ClientQuotas"]
