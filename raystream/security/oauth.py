"""OAUTHBEARER token validation: pluggable, with a JWT-against-JWKS validator built in.

A validator is any object with ``validate(token: str) -> ValidatedToken`` raising
:class:`~raystream.errors.SaslAuthenticationError` for a token it refuses; the broker
setting ``sasl.oauthbearer.validator.class`` (``module:Class``, built with the broker's
security settings as keyword arguments) swaps in another. The default,
:class:`JwksValidator`, checks a JWT's signature against the keys of a JWKS (Kafka's
``sasl.oauthbearer.jwks.endpoint.url``), its ``exp`` (required), and the audience and
issuer when configured; the principal is the ``sub`` claim
(``sasl.oauthbearer.sub.claim.name``). PyJWT does the cryptography.

The JWKS is either

- an ``https://`` URL, the identity provider's endpoint, fetched with PyJWT's
  ``PyJWKClient``: one client per URL in a process (the listeners of a node share its
  cache), fetched once when the validator is built and again after
  ``sasl.oauthbearer.jwks.endpoint.refresh.ms`` (Kafka's default, an hour), or at
  once when a token names a key id the cached set lacks (a rotated key) unless the
  last fetch is less than 30 s old (PyJWKClient's cooldown: forged key ids cannot make
  it fetch on every login, and a key used within 30 s of a fetch that lacked it is
  refused until then; providers publish keys before they sign with them). The
  server's certificate is checked against the system's CAs (OpenSSL's defaults,
  which honour ``SSL_CERT_FILE``) unless an ``ssl_context`` is given. ``http://`` is
  refused: keys fetched in clear could be replaced on the way;
- or a file, as a path or a ``file:`` URL, re-read when it changes.

Pure (file reads and the JWKS fetch only).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import ssl
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from raystream.errors import InvalidConfigError, SaslAuthenticationError

logger = logging.getLogger(__name__)

ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"]
"""Signature algorithms accepted (asymmetric only: a JWKS holds public keys)."""
JWKS_REFRESH_MS = 3_600_000
"""``sasl.oauthbearer.jwks.endpoint.refresh.ms``'s default (Kafka's): how long a
fetched JWKS is used before it is fetched again."""
_SETTING = "sasl.oauthbearer.jwks.endpoint.url"


@dataclass(frozen=True, slots=True)
class ValidatedToken:
    """A token that passed: the user it names and when it expires (epoch ms)."""

    principal_name: str
    expires_at_ms: int


class TokenValidator(Protocol):
    """Validates an OAUTHBEARER token or raises SaslAuthenticationError."""

    def validate(self, token: str) -> ValidatedToken:
        """The token's user and expiry."""


def _path(url: str) -> str:
    return url[len("file://") :] if url.startswith("file://") else url


def _remote(jwks: str) -> bool:
    return jwks.startswith("https://")


REFETCH_COOLDOWN_S = 30.0
"""PyJWKClient's default: a key id the JWKS lacks fetches it again only this long
after the last fetch."""

_clients: dict[tuple[str, int, float, ssl.SSLContext | None], Any] = {}
_clients_lock = threading.Lock()


def jwks_client(
    url: str,
    refresh_ms: int = JWKS_REFRESH_MS,
    ssl_context: ssl.SSLContext | None = None,
    refetch_cooldown_s: float = REFETCH_COOLDOWN_S,
) -> Any:
    """The process's ``PyJWKClient`` of the JWKS at ``url`` (one per URL and settings),
    so every validator of that URL shares its cached keys."""
    import jwt

    key = (url, refresh_ms, refetch_cooldown_s, ssl_context)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = jwt.PyJWKClient(
                url,
                lifespan=refresh_ms / 1000,
                ssl_context=ssl_context,
                cooldown_duration=refetch_cooldown_s,
            )
            _clients[key] = client
        return client


class JwksValidator:
    """Validates JWTs against a JWKS (see the module doc).

    Args:
        jwks: ``https://`` URL, path or ``file:`` URL of the JWKS (JSON
            ``{"keys": [...]}``).
        audience: required ``aud`` (empty: not checked).
        issuer: required ``iss`` (empty: not checked).
        sub_claim: the claim naming the principal.
        leeway_s: clock skew tolerated on ``exp``/``nbf``.
        refresh_ms: how long a JWKS fetched from a URL is used.
        ssl_context: how the URL's server is checked (None: the system's CAs).
        refetch_cooldown_s: how old the last fetch must be for a key id the JWKS
            lacks to fetch it again.

    Raises:
        InvalidConfigError: no JWKS, an ``http://`` URL, a missing or malformed file,
            or an endpoint that answers something else than a JWKS. An endpoint that
            cannot be reached now is logged and fetched again at the first login.
    """

    def __init__(
        self,
        jwks: str,
        audience: str = "",
        issuer: str = "",
        sub_claim: str = "sub",
        leeway_s: float = 0.0,
        refresh_ms: int = JWKS_REFRESH_MS,
        ssl_context: ssl.SSLContext | None = None,
        refetch_cooldown_s: float = REFETCH_COOLDOWN_S,
    ) -> None:
        if not jwks:
            raise InvalidConfigError(
                f"{_SETTING} is required for OAUTHBEARER (or set sasl.oauthbearer.validator.class)"
            )
        if jwks.startswith("http://"):
            raise InvalidConfigError(
                f"{_SETTING}={jwks!r}: use https (keys fetched in clear could be replaced on "
                "the way, and with them who may log in)"
            )
        if refresh_ms <= 0:
            raise InvalidConfigError(
                f"sasl.oauthbearer.jwks.endpoint.refresh.ms={refresh_ms}: must be > 0"
            )
        self._url = jwks
        self._client = None
        if _remote(jwks):
            self._client = jwks_client(jwks, refresh_ms, ssl_context, refetch_cooldown_s)
        self._path = _path(jwks)
        self._audience = [a.strip() for a in audience.split(",") if a.strip()]
        self._issuer = issuer
        self._sub_claim = sub_claim
        self._leeway = leeway_s
        self._lock = threading.Lock()
        self._loaded: tuple[float, Any] | None = None
        self._warm()  # a bad file or answer is a config error now, not at first use

    def _warm(self) -> None:
        import jwt

        if self._client is None:
            self._keys()
            return
        try:
            self._client.get_jwk_set()
        except jwt.PyJWKClientConnectionError as error:
            logger.warning("OAUTHBEARER: %s=%s not reachable yet: %s", _SETTING, self._url, error)
        except jwt.PyJWTError as error:
            raise InvalidConfigError(f"{_SETTING}={self._url!r}: not a JWKS: {error}") from None

    def _keys(self) -> Any:
        """The JWKS as it is now (the client's cache, or the file when it changed)."""
        import jwt

        if self._client is not None:
            return self._client.get_jwk_set()
        try:
            mtime = os.stat(self._path).st_mtime_ns
        except OSError as error:
            raise InvalidConfigError(f"{_SETTING}={self._path!r}: {error}") from None
        with self._lock:
            if self._loaded is None or self._loaded[0] != mtime:
                try:
                    with open(self._path) as f:
                        keys = jwt.PyJWKSet.from_dict(json.load(f))
                except (OSError, ValueError, jwt.PyJWTError) as error:
                    raise InvalidConfigError(
                        f"{_SETTING}={self._path!r}: not a JWKS: {error}"
                    ) from None
                self._loaded = (mtime, keys)
            return self._loaded[1]

    def _key(self, kid: str | None) -> Any:
        """The key to check a token of key id ``kid`` with (any key when it names
        none); a URL's JWKS is fetched again for a key id it lacks (a rotated key)."""
        candidates = [k for k in self._keys().keys if kid is None or k.key_id == kid]
        if candidates:
            return candidates[0].key
        if self._client is not None and kid is not None:
            return self._client.get_signing_key(kid).key  # refetched, with a cooldown
        raise SaslAuthenticationError(f"OAUTHBEARER: no key {kid!r} in the JWKS")

    def validate(self, token: str) -> ValidatedToken:
        """The token's principal name and expiry. May fetch the JWKS of a URL (see
        the module doc), so it may block for that long.

        Raises:
            SaslAuthenticationError: bad signature, unknown key, expired, wrong
                audience or issuer, no ``exp`` or no principal claim, or a JWKS that
                cannot be fetched now.
        """
        import jwt

        try:
            kid = jwt.get_unverified_header(token).get("kid")
            claims = jwt.decode(
                token,
                self._key(kid),
                algorithms=ALGORITHMS,
                audience=self._audience or None,
                issuer=self._issuer or None,
                leeway=self._leeway,
                options={"require": ["exp"], "verify_aud": bool(self._audience)},
            )
        except jwt.PyJWKClientConnectionError as error:
            raise SaslAuthenticationError(
                f"OAUTHBEARER: the JWKS at {self._url} cannot be fetched: {error}"
            ) from None
        except jwt.PyJWTError as error:
            raise SaslAuthenticationError(f"OAUTHBEARER: invalid token: {error}") from None
        name = claims.get(self._sub_claim)
        if not isinstance(name, str) or not name:
            raise SaslAuthenticationError(
                f"OAUTHBEARER: the token has no {self._sub_claim!r} claim"
            )
        return ValidatedToken(name, int(claims["exp"]) * 1000)


def load_validator(
    class_path: str, jwks_refresh_ms: int = JWKS_REFRESH_MS, **settings: Any
) -> TokenValidator:
    """The validator named ``module:Class``, built with ``settings``; empty: a
    :class:`JwksValidator` of ``settings`` whose URL's JWKS is fetched again after
    ``jwks_refresh_ms`` (``sasl.oauthbearer.jwks.endpoint.refresh.ms``, not given to
    another class).

    Raises:
        InvalidConfigError: the class cannot be imported or built.
    """
    if not class_path:
        return JwksValidator(**settings, refresh_ms=jwks_refresh_ms)
    module, _, name = class_path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)(**settings)
    except (ImportError, AttributeError, TypeError) as error:
        raise InvalidConfigError(
            f"sasl.oauthbearer.validator.class={class_path!r}: {error}"
        ) from None
