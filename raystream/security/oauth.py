"""OAUTHBEARER token validation: pluggable, with a JWT-against-JWKS validator built in.

A validator is any object with ``validate(token: str) -> ValidatedToken`` raising
:class:`~raystream.errors.SaslAuthenticationError` for a token it refuses; the broker
setting ``sasl.oauthbearer.validator.class`` (``module:Class``, built with the broker's
security settings as keyword arguments) swaps in another. The default,
:class:`JwksValidator`, checks a JWT's signature against the keys of a JWKS file
(Kafka's ``sasl.oauthbearer.jwks.endpoint.url``, a ``file:`` URL or a path; re-read
when the file changes), its ``exp`` (required), and the audience and issuer when
configured; the principal is the ``sub`` claim (``sasl.oauthbearer.sub.claim.name``).
PyJWT does the cryptography. Pure (file reads only).
"""

from __future__ import annotations

import importlib
import json
import os
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from raystream.errors import InvalidConfigError, SaslAuthenticationError

ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"]
"""Signature algorithms accepted (asymmetric only: a JWKS holds public keys)."""


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


class JwksValidator:
    """Validates JWTs against a JWKS file (see the module doc).

    Args:
        jwks: path or ``file:`` URL of the JWKS (JSON ``{"keys": [...]}``).
        audience: required ``aud`` (empty: not checked).
        issuer: required ``iss`` (empty: not checked).
        sub_claim: the claim naming the principal.
        leeway_s: clock skew tolerated on ``exp``/``nbf``.
    """

    def __init__(
        self,
        jwks: str,
        audience: str = "",
        issuer: str = "",
        sub_claim: str = "sub",
        leeway_s: float = 0.0,
    ) -> None:
        if not jwks:
            raise InvalidConfigError(
                "sasl.oauthbearer.jwks.endpoint.url is required for OAUTHBEARER "
                "(or set sasl.oauthbearer.validator.class)"
            )
        self._path = _path(jwks)
        self._audience = [a.strip() for a in audience.split(",") if a.strip()]
        self._issuer = issuer
        self._sub_claim = sub_claim
        self._leeway = leeway_s
        self._lock = threading.Lock()
        self._loaded: tuple[float, Any] | None = None
        self._keys()  # a missing or malformed file is a config error now, not at first use

    def _keys(self) -> Any:
        import jwt

        try:
            mtime = os.stat(self._path).st_mtime_ns
        except OSError as error:
            raise InvalidConfigError(
                f"sasl.oauthbearer.jwks.endpoint.url={self._path!r}: {error}"
            ) from None
        with self._lock:
            if self._loaded is None or self._loaded[0] != mtime:
                try:
                    with open(self._path) as f:
                        keys = jwt.PyJWKSet.from_dict(json.load(f))
                except (OSError, ValueError, jwt.PyJWTError) as error:
                    raise InvalidConfigError(
                        f"sasl.oauthbearer.jwks.endpoint.url={self._path!r}: not a JWKS: {error}"
                    ) from None
                self._loaded = (mtime, keys)
            return self._loaded[1]

    def validate(self, token: str) -> ValidatedToken:
        """The token's principal name and expiry.

        Raises:
            SaslAuthenticationError: bad signature, unknown key, expired, wrong
                audience or issuer, no ``exp`` or no principal claim.
        """
        import jwt

        try:
            header = jwt.get_unverified_header(token)
            keys = self._keys()
            kid = header.get("kid")
            candidates = [k for k in keys.keys if kid is None or k.key_id == kid]
            if not candidates:
                raise SaslAuthenticationError(f"OAUTHBEARER: no key {kid!r} in the JWKS")
            claims = jwt.decode(
                token,
                candidates[0].key,
                algorithms=ALGORITHMS,
                audience=self._audience or None,
                issuer=self._issuer or None,
                leeway=self._leeway,
                options={"require": ["exp"], "verify_aud": bool(self._audience)},
            )
        except jwt.PyJWTError as error:
            raise SaslAuthenticationError(f"OAUTHBEARER: invalid token: {error}") from None
        name = claims.get(self._sub_claim)
        if not isinstance(name, str) or not name:
            raise SaslAuthenticationError(
                f"OAUTHBEARER: the token has no {self._sub_claim!r} claim"
            )
        return ValidatedToken(name, int(claims["exp"]) * 1000)


def load_validator(class_path: str, **settings: Any) -> TokenValidator:
    """The validator named ``module:Class`` (empty: :class:`JwksValidator`), built with
    ``settings``.

    Raises:
        InvalidConfigError: the class cannot be imported or built.
    """
    if not class_path:
        return JwksValidator(**settings)
    module, _, name = class_path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)(**settings)
    except (ImportError, AttributeError, TypeError) as error:
        raise InvalidConfigError(
            f"sasl.oauthbearer.validator.class={class_path!r}: {error}"
        ) from None
