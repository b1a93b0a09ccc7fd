"""The TLS side of a listener: its ``ssl.SSLContext`` from PEM files, reloaded live.

Settings (Kafka's names, PEM files): ``ssl.keystore.location`` (the certificate chain,
and the private key unless ``ssl.key.location`` names another file),
``ssl.key.password``, ``ssl.truststore.location`` (CA certificates trusted for client
certificates) and ``ssl.client.auth`` (``required``, ``requested`` or ``none``).

Reload without a restart (KIP-226's dynamic keystore): every TLS handshake checks the
files' modification times (a few ``stat`` calls) in the context's SNI callback, which
OpenSSL runs for every ClientHello, and when one changed builds a new context and
hands the connection to it; new connections use the new certificate, open ones keep
theirs. :meth:`TlsConfig.reload` does the same on demand. A reload that fails (a
half-written file) keeps the old context and logs. Pure (files only).
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from dataclasses import dataclass

from raystream.errors import InvalidConfigError

logger = logging.getLogger(__name__)

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """A listener's TLS settings (see the module doc)."""

    keystore_location: str
    key_location: str = ""
    key_password: str = ""
    truststore_location: str = ""
    client_auth: str = "none"

    def check(self) -> None:
        """Raise InvalidConfigError naming the setting that is wrong."""
        if not self.keystore_location:
            raise InvalidConfigError("ssl.keystore.location is required for SSL/SASL_SSL listeners")
        if self.client_auth not in CLIENT_AUTH:
            raise InvalidConfigError(
                f"ssl.client.auth={self.client_auth!r}: expected one of {', '.join(CLIENT_AUTH)}"
            )
        if self.client_auth != "none" and not self.truststore_location:
            raise InvalidConfigError(
                f"ssl.client.auth={self.client_auth} needs ssl.truststore.location "
                "(the CAs client certificates are checked against)"
            )

    def files(self) -> tuple[str, ...]:
        """The files the context is built from."""
        return tuple(
            f for f in (self.keystore_location, self.key_location, self.truststore_location) if f
        )


def build_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server context from ``settings`` (TLS 1.2 at least).

    Raises:
        InvalidConfigError: a file is missing or does not hold what it should (the
            message names the setting).
    """
    settings.check()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(
            settings.keystore_location,
            settings.key_location or None,
            settings.key_password or None,
        )
    except (OSError, ssl.SSLError) as error:
        raise InvalidConfigError(
            f"ssl.keystore.location={settings.keystore_location!r}"
            f"{f' / ssl.key.location={settings.key_location!r}' if settings.key_location else ''}: "
            f"cannot load the certificate and key: {error}"
        ) from None
    context.verify_mode = CLIENT_AUTH[settings.client_auth]
    if settings.truststore_location:
        try:
            context.load_verify_locations(settings.truststore_location)
        except (OSError, ssl.SSLError) as error:
            raise InvalidConfigError(
                f"ssl.truststore.location={settings.truststore_location!r}: {error}"
            ) from None
    return context


class TlsConfig:
    """The live context of one listener: :attr:`context` is what the server binds
    with; its SNI callback swaps in a rebuilt context when the files changed."""

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._current = build_context(settings)
        self._mtimes = self._stat()
        self.reloads = 0
        self.context = build_context(settings)  # the bound one: only its callback matters
        self.context.sni_callback = self._on_hello

    def _stat(self) -> tuple[int, ...]:
        out = []
        for path in self.settings.files():
            try:
                out.append(os.stat(path).st_mtime_ns)
            except OSError:
                out.append(-1)
        return tuple(out)

    def reload(self, force: bool = True) -> bool:
        """Rebuild the context if the files changed (or ``force``); whether it did.

        A file that does not load keeps the old context (logged), so replacing a
        certificate in two writes never takes the listener down.
        """
        mtimes = self._stat()
        if not force and mtimes == self._mtimes:
            return False
        with self._lock:
            try:
                context = build_context(self.settings)
            except InvalidConfigError as error:
                logger.warning("TLS reload failed, keeping the old certificate: %s", error)
                return False
            self._current, self._mtimes = context, mtimes
            self.reloads += 1
        logger.info("TLS: reloaded %s", ", ".join(self.settings.files()))
        return True

    def _on_hello(self, sslobj: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        self.reload(force=False)
        sslobj.context = self._current
