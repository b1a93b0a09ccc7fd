"""The server side of SASL on a Kafka listener: mechanisms and a connection's session.

Kafka's order (KIP-152): ApiVersions (optional), SaslHandshake naming the mechanism,
then SaslAuthenticate requests carrying the mechanism's messages until it completes;
until then only those three APIs are served (anything else closes the connection).
KIP-368: the session lasts ``connections.max.reauth.ms`` (shorter if the OAUTHBEARER
token expires sooner), told to the client in SaslAuthenticate's answer; a client
re-authenticates with a new handshake on the same connection before it ends, and
one that does not is closed at its next request after it.

Mechanisms: PLAIN (checked against the user's stored SCRAM credential, so no clear
password is kept anywhere), SCRAM-SHA-256/512 (:mod:`raystream.security.scram`) and
OAUTHBEARER (RFC 7628 framing; :mod:`raystream.security.oauth` validates). Pure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from raystream.errors import (
    IllegalSaslStateError,
    InvalidConfigError,
    SaslAuthenticationError,
    UnsupportedSaslMechanismError,
)
from raystream.security.oauth import TokenValidator
from raystream.security.principal import ANONYMOUS, user_principal
from raystream.security.scram import MECHANISMS as SCRAM_MECHANISMS
from raystream.security.scram import ScramCredential, ScramServer, password_matches

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
SUPPORTED = (PLAIN, *SCRAM_MECHANISMS, OAUTHBEARER)
"""Mechanisms this server implements (``sasl.enabled.mechanisms`` picks among them)."""

Lookup = Callable[[str, str], "ScramCredential | None"]
"""``(user, mechanism) -> stored credential or None``."""


def parse_mechanisms(text: str, setting: str = "sasl.enabled.mechanisms") -> tuple[str, ...]:
    """The mechanisms of a comma-separated setting.

    Raises:
        InvalidConfigError: a mechanism is not supported (named in the message).
    """
    names = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    for name in names:
        if name not in SUPPORTED:
            raise InvalidConfigError(
                f"{setting}: mechanism {name!r} is not supported "
                f"(supported: {', '.join(SUPPORTED)})"
            )
    return names


class PlainServer:
    """SASL/PLAIN (RFC 4616): one message ``authzid NUL user NUL password``."""

    def __init__(self, lookup: Lookup) -> None:
        self._lookup = lookup
        self.done = False
        self.user: str | None = None

    def step(self, message: bytes) -> bytes:
        """Check the user's password against the stored credential; empty answer."""
        if self.done:
            raise IllegalSaslStateError("PLAIN: a message after the exchange ended")
        parts = message.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationError("PLAIN: malformed message")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if authzid and authzid != user:
            raise SaslAuthenticationError("PLAIN: authorization id differs from the user")
        credentials = [self._lookup(user, m) for m in SCRAM_MECHANISMS]
        if not any(c is not None and password_matches(c, password) for c in credentials):
            raise SaslAuthenticationError(
                "Authentication failed: Invalid username or password (PLAIN)"
            )
        self.user, self.done = user, True
        return b""


class OAuthBearerServer:
    """SASL/OAUTHBEARER (RFC 7628): the client's one message ``gs2-header \\x01
    auth=Bearer <token> \\x01 [key=value \\x01]* \\x01``."""

    def __init__(self, validator: TokenValidator) -> None:
        self._validator = validator
        self.done = False
        self.user: str | None = None
        self.expires_at_ms: int | None = None

    def step(self, message: bytes) -> bytes:
        """Validate the bearer token; empty answer."""
        if self.done:
            raise IllegalSaslStateError("OAUTHBEARER: a message after the exchange ended")
        text = message.decode("utf-8", "replace")
        header, sep, rest = text.partition("\x01")
        if not sep or not header.startswith(("n,", "y,")):
            raise SaslAuthenticationError("OAUTHBEARER: malformed client message")
        fields = dict(kv.split("=", 1) for kv in rest.split("\x01") if "=" in kv)
        auth = fields.get("auth", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise SaslAuthenticationError("OAUTHBEARER: no 'auth=Bearer <token>' in the message")
        validated = self._validator.validate(token.strip())
        self.user, self.expires_at_ms, self.done = (
            validated.principal_name,
            validated.expires_at_ms,
            True,
        )
        return b""


class SaslSession:
    """One connection's authentication state on a SASL listener.

    Args:
        mechanisms: the enabled mechanisms.
        lookup: stored SCRAM credentials by (user, mechanism).
        validator: OAUTHBEARER's token validator (None: OAUTHBEARER not enabled).
        max_reauth_ms: ``connections.max.reauth.ms`` (0: sessions do not expire).
        clock: epoch milliseconds (tests).
    """

    def __init__(
        self,
        mechanisms: tuple[str, ...],
        lookup: Lookup,
        validator: TokenValidator | None = None,
        max_reauth_ms: int = 0,
        clock: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.mechanisms = mechanisms
        self._lookup = lookup
        self._validator = validator
        self._max_reauth_ms = max_reauth_ms
        self._clock = clock
        self._exchange: Any = None
        self.principal = ANONYMOUS
        self.authenticated = False
        self.expires_at_ms: int | None = None
        self.authentications = 0
        self.failed = False

    def handshake(self, mechanism: str) -> None:
        """Start an exchange with ``mechanism`` (again, to re-authenticate).

        Raises:
            UnsupportedSaslMechanismError: the mechanism is not enabled.
        """
        if mechanism not in self.mechanisms:
            raise UnsupportedSaslMechanismError(
                f"SASL mechanism {mechanism!r} is not enabled "
                f"(enabled: {', '.join(self.mechanisms)})"
            )
        if mechanism == PLAIN:
            self._exchange = PlainServer(self._lookup)
        elif mechanism == OAUTHBEARER:
            if self._validator is None:
                raise UnsupportedSaslMechanismError("OAUTHBEARER has no token validator")
            self._exchange = OAuthBearerServer(self._validator)
        else:
            self._exchange = ScramServer(mechanism, lambda user: self._lookup(user, mechanism))
        self._mechanism = mechanism

    def authenticate(self, message: bytes) -> tuple[bytes, int]:
        """The answer to one SaslAuthenticate message, and the session lifetime in ms
        once the exchange completes (0: not complete yet, or no expiry).

        Raises:
            IllegalSaslStateError: no handshake came first.
            SaslAuthenticationError: the exchange failed (the connection is to be
                closed after the answer, as Kafka does).
        """
        exchange = self._exchange
        if exchange is None:
            self.failed = True
            raise IllegalSaslStateError("SaslAuthenticate before SaslHandshake")
        try:
            answer = exchange.step(message)
        except Exception:
            self._exchange, self.failed = None, True
            raise
        if not exchange.done:
            return answer, 0
        self._exchange = None
        principal = user_principal(exchange.user)
        if self.authenticated and principal != self.principal:
            self.failed = True
            raise SaslAuthenticationError("re-authentication must keep the principal (KIP-368)")
        now = self._clock()
        ends = [now + self._max_reauth_ms] if self._max_reauth_ms > 0 else []
        token_end = getattr(exchange, "expires_at_ms", None)
        if token_end is not None and self._max_reauth_ms > 0:
            ends.append(token_end)
        self.expires_at_ms = min(ends) if ends else None
        self.principal, self.authenticated = principal, True
        self.authentications += 1
        lifetime = 0 if self.expires_at_ms is None else max(1, self.expires_at_ms - now)
        return answer, lifetime

    def expired(self) -> bool:
        """Whether the session's lifetime is over (a request now closes the connection)."""
        return self.expires_at_ms is not None and self._clock() >= self.expires_at_ms
