"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials and the server side.

Only salted keys are ever stored (:class:`ScramCredential`: salt, iterations,
StoredKey, ServerKey), never a password; a password given to :func:`make_credential`
is used once and dropped. Nothing here logs, and no message carries a password, a
proof or a key. Pure.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from typing import Any

from raystream.errors import (
    IllegalSaslStateError,
    ResourceNotFoundError,
    SaslAuthenticationError,
    UnacceptableCredentialError,
)

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
"""SCRAM mechanisms and their hash."""
MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
"""Kafka's ScramMechanism numbers (DescribeUserScramCredentials and friends)."""
MIN_ITERATIONS = 4096
"""Kafka's (and RFC 7677's) floor."""
MAX_ITERATIONS = 16384
"""Kafka's ceiling."""
DEFAULT_ITERATIONS = 8192


def _check_mechanism(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise UnacceptableCredentialError(
            f"SCRAM mechanism {mechanism!r} is not one of {', '.join(MECHANISMS)}"
        ) from None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server keeps of a SCRAM password (RFC 5802 section 3)."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (bytes as base64) for the controller's metadata log."""
        return {
            "mechanism": self.mechanism,
            "salt": base64.b64encode(self.salt).decode(),
            "iterations": self.iterations,
            "stored_key": base64.b64encode(self.stored_key).decode(),
            "server_key": base64.b64encode(self.server_key).decode(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScramCredential:
        """The credential :meth:`to_json` wrote."""
        return cls(
            data["mechanism"],
            base64.b64decode(data["salt"]),
            int(data["iterations"]),
            base64.b64decode(data["stored_key"]),
            base64.b64decode(data["server_key"]),
        )

    def __repr__(self) -> str:  # keys stay out of logs and tracebacks
        return f"ScramCredential({self.mechanism}, iterations={self.iterations})"


def salted_keys(
    hash_name: str, password: bytes, salt: bytes, iterations: int
) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of a password: RFC 5802's SaltedPassword = Hi(...),
    ClientKey = HMAC(SaltedPassword, "Client Key"), StoredKey = H(ClientKey)."""
    salted = hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    server_key = hmac.digest(salted, b"Server Key", hash_name)
    return hashlib.new(hash_name, client_key).digest(), server_key


def make_credential(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """A new salted credential for ``password`` (a fresh random salt unless given).

    Raises:
        UnacceptableCredentialError: unknown mechanism, empty password, or iterations
            outside [4096, 16384].
    """
    hash_name = _check_mechanism(mechanism)
    if not isinstance(password, str) or not password:
        raise UnacceptableCredentialError("a SCRAM password must be a non-empty string")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UnacceptableCredentialError(
            f"SCRAM iterations={iterations}: must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]"
        )
    salt = os.urandom(32) if salt is None else salt
    stored, server = salted_keys(hash_name, password.encode(), salt, iterations)
    return ScramCredential(mechanism, salt, iterations, stored, server)


def password_matches(credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (SASL/PLAIN is
    checked against the stored SCRAM credentials this way: no clear password kept)."""
    hash_name = MECHANISMS[credential.mechanism]
    stored, _ = salted_keys(hash_name, password.encode(), credential.salt, credential.iterations)
    return hmac.compare_digest(stored, credential.stored_key)


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslAuthenticationError("malformed SCRAM message")
        out.setdefault(part[0], part[2:])
    return out


def _unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """The server side of one SCRAM exchange: client-first -> server-first ->
    client-final -> server-final.

    Args:
        mechanism: SCRAM-SHA-256 or SCRAM-SHA-512.
        lookup: the credential of a user name (None: no such user or mechanism).
        nonce: the server's nonce part (random unless given: tests).
    """

    def __init__(self, mechanism: str, lookup: Any, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._hash = _check_mechanism(mechanism)
        self._lookup = lookup
        self._server_nonce = nonce or base64.b64encode(os.urandom(24)).decode()
        self._state = "first"
        self.user: str | None = None
        self.extensions: dict[str, str] = {}

    @property
    def done(self) -> bool:
        """Whether the exchange completed successfully."""
        return self._state == "done"

    def step(self, message: bytes) -> bytes:
        """The answer to the client's next message.

        Raises:
            SaslAuthenticationError: malformed message, unknown user, wrong proof.
            IllegalSaslStateError: a message after the exchange ended.
        """
        if self._state == "first":
            return self._first(message.decode("utf-8", "replace"))
        if self._state == "final":
            return self._final(message.decode("utf-8", "replace"))
        raise IllegalSaslStateError(f"{self.mechanism}: a message after the exchange ended")

    def _first(self, message: str) -> bytes:
        parts = message.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise SaslAuthenticationError(f"{self.mechanism}: malformed client-first message")
        self._gs2_header = f"{parts[0]},{parts[1]},"
        self._client_first_bare = parts[2]
        attrs = _attributes(parts[2])
        if "n" not in attrs or "r" not in attrs:
            raise SaslAuthenticationError(f"{self.mechanism}: client-first lacks n= or r=")
        self.user = _unescape(attrs["n"])
        # Kafka's delegation tokens ride on the extension "tokenauth"; not served here.
        self.extensions = {k: v for k, v in attrs.items() if k not in ("n", "r")}
        self._credential = self._lookup(self.user)
        self._nonce = attrs["r"] + self._server_nonce
        if self._credential is None:  # answer anyway with a fake salt: no user probing
            salt, iterations = hashlib.sha256(self.user.encode()).digest(), DEFAULT_ITERATIONS
        else:
            salt, iterations = self._credential.salt, self._credential.iterations
        self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        self._state = "final"
        return self._server_first.encode()

    def _final(self, message: str) -> bytes:
        self._state = "failed"
        attrs = _attributes(message)
        if "p" not in attrs or "r" not in attrs or "c" not in attrs:
            raise SaslAuthenticationError(f"{self.mechanism}: client-final lacks c=, r= or p=")
        if attrs["r"] != self._nonce:
            raise SaslAuthenticationError(f"{self.mechanism}: nonce mismatch")
        if base64.b64decode(attrs["c"]) != self._gs2_header.encode():
            raise SaslAuthenticationError(f"{self.mechanism}: channel binding mismatch")
        without_proof = message[: message.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        failed = SaslAuthenticationError(
            f"Authentication failed during authentication due to invalid credentials "
            f"with SASL mechanism {self.mechanism}"
        )
        if credential is None:
            raise failed
        proof = base64.b64decode(attrs["p"])
        signature = hmac.digest(credential.stored_key, auth_message, self._hash)
        if len(proof) != len(signature):
            raise failed
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(
            hashlib.new(self._hash, client_key).digest(), credential.stored_key
        ):
            raise failed
        server_signature = hmac.digest(credential.server_key, auth_message, self._hash)
        self._state = "done"
        return f"v={base64.b64encode(server_signature).decode()}".encode()


RECORD_PREFIX = b"@scram:"
"""Controller metadata-log key prefix of a user's SCRAM credentials ('@' is in no topic
name): ``@scram:<user>`` -> JSON ``{mechanism: credential}``, None once all deleted."""


class CredentialStore:
    """Every user's SCRAM credentials, as the controller keeps them (and replays them
    from its metadata log) and listeners cache them. Only salted keys."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, ScramCredential]] = {}

    @staticmethod
    def is_record(key: bytes) -> bool:
        """Whether a metadata-log key is a SCRAM record."""
        return key.startswith(RECORD_PREFIX)

    def replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one metadata-log record (as :meth:`record` made it)."""
        user = key[len(RECORD_PREFIX) :].decode()
        if value is None:
            self.users.pop(user, None)
        else:
            self.users[user] = {
                m: ScramCredential.from_json(c) for m, c in json.loads(value).items()
            }

    def record(self, user: str) -> tuple[bytes, bytes | None]:
        """The metadata-log record of ``user``'s credentials as they are now."""
        key = RECORD_PREFIX + user.encode()
        found = self.users.get(user)
        if not found:
            return key, None
        return key, json.dumps({m: c.to_json() for m, c in found.items()}).encode()

    def upsert(self, user: str, credential: ScramCredential) -> None:
        """Set ``user``'s credential for its mechanism.

        Raises:
            UnacceptableCredentialError: empty user name.
        """
        if not user:
            raise UnacceptableCredentialError("a SCRAM user name must not be empty")
        self.users.setdefault(user, {})[credential.mechanism] = credential

    def delete(self, user: str, mechanism: str) -> None:
        """Drop ``user``'s credential for ``mechanism``.

        Raises:
            ResourceNotFoundError: there is none.
        """
        _check_mechanism(mechanism)
        found = self.users.get(user, {})
        if mechanism not in found:
            raise ResourceNotFoundError(f"user {user!r} has no {mechanism} credential")
        del found[mechanism]
        if not found:
            self.users.pop(user, None)

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        """The credential of ``user`` for ``mechanism``, None if there is none."""
        return self.users.get(user, {}).get(mechanism)

    def describe(self, users: list[str] | None = None) -> dict[str, list[tuple[str, int]]]:
        """``{user: [(mechanism, iterations)]}`` of the named users (None: all); a
        named user without credentials maps to an empty list."""
        names = sorted(self.users) if users is None else users
        return {
            u: [(m, c.iterations) for m, c in sorted(self.users.get(u, {}).items())] for u in names
        }

    def to_json(self) -> dict[str, dict[str, Any]]:
        """Everything, JSON-ready (what a listener's cache is loaded from)."""
        return {u: {m: c.to_json() for m, c in cs.items()} for u, cs in self.users.items()}

    @classmethod
    def from_json(cls, data: dict[str, dict[str, Any]]) -> CredentialStore:
        """The store :meth:`to_json` described."""
        store = cls()
        store.users = {
            u: {m: ScramCredential.from_json(c) for m, c in cs.items()} for u, cs in data.items()
        }
        return store


def credential_from_salted(
    mechanism: str, salt: bytes, iterations: int, salted_password: bytes
) -> ScramCredential:
    """The credential of a salted password as Kafka's AlterUserScramCredentials sends
    it (clients salt the password themselves; the broker never sees it).

    Raises:
        UnacceptableCredentialError: unknown mechanism, iterations out of range, or
            empty salt or salted password.
    """
    hash_name = _check_mechanism(mechanism)
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UnacceptableCredentialError(
            f"SCRAM iterations={iterations}: must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]"
        )
    if not salt or not salted_password:
        raise UnacceptableCredentialError("SCRAM salt and salted password must not be empty")
    client_key = hmac.digest(salted_password, b"Client Key", hash_name)
    server_key = hmac.digest(salted_password, b"Server Key", hash_name)
    return ScramCredential(
        mechanism, salt, iterations, hashlib.new(hash_name, client_key).digest(), server_key
    )
