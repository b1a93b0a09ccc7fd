"""The TLS side of a listener: its ``ssl.SSLContext`` from PEM files, reloaded live;
and raystream's side as a TLS client of its own servers (the direct path).

Settings (Kafka's names, PEM files): ``ssl.keystore.location`` (the certificate chain,
and the private key unless ``ssl.key.location`` names another file),
``ssl.key.password``, ``ssl.truststore.location`` (CA certificates trusted for client
certificates, and by raystream as a client for servers) and ``ssl.client.auth``
(``required``, ``requested`` or ``none``). As a client, raystream checks that the
server's certificate names the host it connected to unless
``ssl.endpoint.identification.algorithm`` is set empty (Kafka's setting and default,
``https``, since Kafka 2.0).

Reload without a restart (KIP-226's dynamic keystore): every TLS handshake checks the
files' modification times (a few ``stat`` calls) in the context's SNI callback, which
OpenSSL runs for every ClientHello, and when one changed builds a new context and
hands the connection to it; new connections use the new certificate, open ones keep
theirs. :meth:`TlsConfig.reload` does the same on demand. A reload that fails (a
half-written file) keeps the old context and logs. A client's context
(:func:`client_context`) is rebuilt the same way when its truststore changes, checked
when a connection is made. Pure (files only).
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from dataclasses import dataclass, field

from raystream.errors import InvalidConfigError

logger = logging.getLogger(__name__)

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
ENDPOINT_IDENTIFICATION = ("https", "")
"""``ssl.endpoint.identification.algorithm`` values: ``https`` checks the server's
certificate names the host (Kafka's default), empty does not."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """A listener's TLS settings (see the module doc)."""

    keystore_location: str
    key_location: str = ""
    key_password: str = field(default="", repr=False)
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


@dataclass(frozen=True, slots=True)
class ClientTlsSettings:
    """How raystream as a TLS client checks a server: the CAs it trusts (a PEM file;
    empty: the system's) and whether the certificate must name the host connected to
    (``ssl.endpoint.identification.algorithm``: ``https``, or empty for no check; the
    chain is verified either way)."""

    truststore_location: str = ""
    endpoint_identification_algorithm: str = "https"

    @property
    def check_hostname(self) -> bool:
        """Whether the server's certificate must name the host."""
        return self.endpoint_identification_algorithm == "https"

    def check(self) -> None:
        """Raise InvalidConfigError naming the setting that is wrong."""
        if self.endpoint_identification_algorithm not in ENDPOINT_IDENTIFICATION:
            raise InvalidConfigError(
                "ssl.endpoint.identification.algorithm="
                f"{self.endpoint_identification_algorithm!r}: expected 'https' (check the "
                "server's certificate names its host) or '' (do not)"
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
        load_truststore(context, settings.truststore_location)
    return context


def build_client_context(settings: ClientTlsSettings) -> ssl.SSLContext:
    """A client context from ``settings`` (TLS 1.2 at least, the server's certificate
    always verified).

    Raises:
        InvalidConfigError: the truststore is missing or holds no certificate.
    """
    settings.check()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = settings.check_hostname
    if not settings.truststore_location:
        context.load_default_certs()
        return context
    load_truststore(context, settings.truststore_location)
    return context


def load_truststore(context: ssl.SSLContext, location: str) -> None:
    """Trust the CA certificates of the PEM file at ``location`` (a listener's
    ``ssl.truststore.location``, or a client's).

    Raises:
        InvalidConfigError: the file is missing or holds no certificate.
    """
    try:
        context.load_verify_locations(location)
    except (OSError, ssl.SSLError) as error:
        raise InvalidConfigError(f"ssl.truststore.location={location!r}: {error}") from None


_client_contexts: dict[ClientTlsSettings, tuple[tuple[int, ...], ssl.SSLContext]] = {}
_client_contexts_lock = threading.Lock()


def client_context(settings: ClientTlsSettings) -> ssl.SSLContext:
    """The client context of ``settings``, shared by this process's connections and
    rebuilt when the truststore file changed since it was built (a few ``stat`` calls
    per connection), so a CA replaced on disk is trusted by the next connection.

    Raises:
        InvalidConfigError: the truststore does not load (see
            :func:`build_client_context`).
    """
    mtimes = _mtimes((settings.truststore_location,) if settings.truststore_location else ())
    with _client_contexts_lock:
        known = _client_contexts.get(settings)
        if known is not None and known[0] == mtimes:
            return known[1]
        context = build_client_context(settings)
        _client_contexts[settings] = mtimes, context
        return context


def _mtimes(paths: tuple[str, ...]) -> tuple[int, ...]:
    """The modification times of ``paths`` (-1 for one that is missing)."""
    out = []
    for path in paths:
        try:
            out.append(os.stat(path).st_mtime_ns)
        except OSError:
            out.append(-1)
    return tuple(out)


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
        return _mtimes(self.settings.files())

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
