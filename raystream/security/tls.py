"""The TLS side of a listener: its ``ssl.SSLContext`` from its key and certificate
stores, reloaded live; and raystream's side as a TLS client of its own servers (the
direct path).

Settings (Kafka's names): ``ssl.keystore.location`` (the certificate chain and the
private key), ``ssl.keystore.type``, ``ssl.keystore.password``, ``ssl.key.password``,
``ssl.truststore.location`` (CA certificates trusted for client certificates, and by
raystream as a client for servers), ``ssl.truststore.type``,
``ssl.truststore.password`` and ``ssl.client.auth`` (``required``, ``requested`` or
``none``). As a client, raystream checks that the server's certificate names the host
it connected to unless ``ssl.endpoint.identification.algorithm`` is set empty
(Kafka's setting and default, ``https``, since Kafka 2.0).

Store types (:data:`STORE_TYPES`, any case):

- ``PEM`` (the default here; Kafka's is JKS): a keystore is a PEM file of the
  certificate chain and the private key, or of the chain alone with the key in the
  file ``ssl.key.location`` names; an encrypted key opens with ``ssl.key.password``.
  A truststore is a PEM file of CA certificates.
- ``PKCS12`` (``.p12``/``.pfx``, what ``keytool`` writes by default since Java 9):
  read with ``cryptography``; the keystore's key and certificate chain open with
  ``ssl.keystore.password`` (``ssl.key.password`` when that is empty: a PKCS12 file
  has one password for its entries), the truststore's certificates with
  ``ssl.truststore.password``.
- ``JKS`` (and JCEKS) is Java's own format, which nothing outside a JVM reads: it is
  refused with the ``keytool`` command that converts it to PKCS12 once
  (:func:`jks_hint`), also when a JKS file is given under another type.

librdkafka clients (MirrorMaker's Kafka-protocol clusters) read their own stores:
:func:`librdkafka_tls` gives them a Java client's store settings in librdkafka's terms.

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
import secrets
import ssl
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raystream.errors import InvalidConfigError

logger = logging.getLogger(__name__)

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
ENDPOINT_IDENTIFICATION = ("https", "")
"""``ssl.endpoint.identification.algorithm`` values: ``https`` checks the server's
certificate names the host (Kafka's default), empty does not."""
STORE_TYPES = ("PEM", "PKCS12")
"""The ``ssl.keystore.type`` / ``ssl.truststore.type`` values read here (any case)."""
_JAVA_STORE_TYPES = ("JKS", "JCEKS")
_JAVA_STORE_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")
"""The first bytes of a JKS and of a JCEKS file."""


def jks_hint(store: str, location: str = "") -> str:
    """How to turn the Java KeyStore of ``store`` (``keystore`` or ``truststore``) at
    ``location`` into the PKCS12 file raystream reads (the message of the refusal).

    Example:
        >>> jks_hint("truststore", "ca.jks")[:60]
        'a JKS (Java KeyStore) file is read by Java alone: convert ca'
    """
    source = location or f"server.{store}.jks"
    target = (source[:-4] if source.endswith(".jks") else source) + ".p12"
    return (
        f"a JKS (Java KeyStore) file is read by Java alone: convert {source} to PKCS12 once "
        f"with `keytool -importkeystore -srcstoretype JKS -srckeystore {source} "
        f"-deststoretype PKCS12 -destkeystore {target}`, then set "
        f"ssl.{store}.location={target}, ssl.{store}.type=PKCS12 and "
        f"ssl.{store}.password=<the destination password given to keytool>"
    )


def store_type(setting: str, value: str, location: str = "") -> str:
    """``value`` of ``setting`` (``ssl.keystore.type`` or ``ssl.truststore.type``) in
    upper case, one of :data:`STORE_TYPES`.

    Raises:
        InvalidConfigError: JKS or JCEKS (the message says how to convert the store at
            ``location``), or another type.
    """
    normalized = value.strip().upper()
    if normalized in STORE_TYPES:
        return normalized
    store = setting.split(".")[1]
    if normalized in _JAVA_STORE_TYPES:
        raise InvalidConfigError(f"{setting}={value}: {jks_hint(store, location)}")
    raise InvalidConfigError(
        f"{setting}={value!r}: expected one of {', '.join(STORE_TYPES)} (JKS: convert it "
        "to PKCS12 with keytool)"
    )


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """A listener's TLS settings (see the module doc)."""

    keystore_location: str
    key_location: str = ""
    key_password: str = field(default="", repr=False)
    truststore_location: str = ""
    client_auth: str = "none"
    keystore_type: str = "PEM"
    keystore_password: str = field(default="", repr=False)
    truststore_type: str = "PEM"
    truststore_password: str = field(default="", repr=False)

    def check(self) -> None:
        """Raise InvalidConfigError naming the setting that is wrong."""
        if not self.keystore_location:
            raise InvalidConfigError("ssl.keystore.location is required for SSL/SASL_SSL listeners")
        keystore = store_type("ssl.keystore.type", self.keystore_type, self.keystore_location)
        store_type("ssl.truststore.type", self.truststore_type, self.truststore_location)
        if keystore == "PKCS12" and self.key_location:
            raise InvalidConfigError(
                f"ssl.key.location={self.key_location!r} is for a PEM keystore: a PKCS12 "
                "keystore holds its private key (leave ssl.key.location empty)"
            )
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
    """How raystream as a TLS client checks a server: the CAs it trusts (a truststore
    of a type of :data:`STORE_TYPES`; no location: the system's) and whether the
    certificate must name the host connected to (``ssl.endpoint.identification.
    algorithm``: ``https``, or empty for no check; the chain is verified either way)."""

    truststore_location: str = ""
    endpoint_identification_algorithm: str = "https"
    truststore_type: str = "PEM"
    truststore_password: str = field(default="", repr=False)

    @property
    def check_hostname(self) -> bool:
        """Whether the server's certificate must name the host."""
        return self.endpoint_identification_algorithm == "https"

    def check(self) -> None:
        """Raise InvalidConfigError naming the setting that is wrong."""
        store_type("ssl.truststore.type", self.truststore_type, self.truststore_location)
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
    if store_type("ssl.keystore.type", settings.keystore_type) == "PKCS12":
        password = settings.keystore_password or settings.key_password
        key, chain = _pkcs12_key_and_chain(settings.keystore_location, password)
        _load_key_and_chain(context, key, chain)
    else:
        try:
            context.load_cert_chain(
                settings.keystore_location,
                settings.key_location or None,
                settings.key_password or None,
            )
        except (OSError, ssl.SSLError) as error:
            _refuse_java_store("keystore", settings.keystore_location)
            key = f" / ssl.key.location={settings.key_location!r}" if settings.key_location else ""
            raise InvalidConfigError(
                f"ssl.keystore.location={settings.keystore_location!r}{key}: "
                f"cannot load the certificate and key: {error}"
            ) from None
    context.verify_mode = CLIENT_AUTH[settings.client_auth]
    if settings.truststore_location:
        load_truststore(
            context,
            settings.truststore_location,
            settings.truststore_type,
            settings.truststore_password,
        )
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
    load_truststore(
        context,
        settings.truststore_location,
        settings.truststore_type,
        settings.truststore_password,
    )
    return context


def load_truststore(
    context: ssl.SSLContext, location: str, type_: str = "PEM", password: str = ""
) -> None:
    """Trust the CA certificates of the truststore at ``location`` (a listener's
    ``ssl.truststore.location``, or a client's): a PEM file, or a PKCS12 file opened
    with ``password`` (``type_``, one of :data:`STORE_TYPES`).

    Raises:
        InvalidConfigError: the file is missing, holds no certificate, does not open
            with the password, or is a JKS file (with how to convert it).
    """
    if store_type("ssl.truststore.type", type_, location) == "PKCS12":
        certificates = _pkcs12_certificates(location, password)
        if not certificates:
            raise InvalidConfigError(
                f"ssl.truststore.location={location!r} (PKCS12) holds no certificate"
            )
        context.load_verify_locations(cadata="".join(map(_pem, certificates)))
        return
    try:
        context.load_verify_locations(location)
    except (OSError, ssl.SSLError) as error:
        _refuse_java_store("truststore", location)
        raise InvalidConfigError(f"ssl.truststore.location={location!r}: {error}") from None


def _read_store(store: str, location: str) -> bytes:
    """The bytes of the ``store`` (keystore or truststore) file, refused if a JKS one."""
    try:
        with open(location, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise InvalidConfigError(
            f"ssl.{store}.location={location!r}: {error.strerror or error}"
        ) from None
    if data[:4] in _JAVA_STORE_MAGIC:
        raise InvalidConfigError(f"ssl.{store}.location={location!r}: {jks_hint(store, location)}")
    return data


def _refuse_java_store(store: str, location: str) -> None:
    """Raise the JKS refusal when the file that did not load as PEM is a JKS file."""
    try:
        with open(location, "rb") as handle:
            head = handle.read(4)
    except OSError:
        return
    if head in _JAVA_STORE_MAGIC:
        raise InvalidConfigError(f"ssl.{store}.location={location!r}: {jks_hint(store, location)}")


def _open_pkcs12(store: str, location: str, password: str) -> Any:
    """The PKCS12 file of ``store`` opened with ``password`` (cryptography's
    ``PKCS12KeyAndCertificates``)."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    data = _read_store(store, location)
    try:
        return pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        raise InvalidConfigError(
            f"ssl.{store}.location={location!r} (ssl.{store}.type=PKCS12): does not open "
            f"with ssl.{store}.password{' (empty)' if not password else ''}: a wrong "
            "password, or not a PKCS12 file"
        ) from None


def _pkcs12_key_and_chain(location: str, password: str) -> tuple[Any, list[Any]]:
    """The private key and certificate chain (its own certificate first) of a PKCS12
    keystore."""
    opened = _open_pkcs12("keystore", location, password)
    if opened.key is None or opened.cert is None:
        raise InvalidConfigError(
            f"ssl.keystore.location={location!r} (PKCS12) holds no private key with its "
            "certificate (is it a truststore?)"
        )
    return opened.key, [opened.cert.certificate] + [c.certificate for c in opened.additional_certs]


def _pkcs12_certificates(location: str, password: str) -> list[Any]:
    """Every certificate of a PKCS12 truststore (Java's trusted-certificate entries, or
    any other)."""
    opened = _open_pkcs12("truststore", location, password)
    found = [opened.cert] if opened.cert is not None else []
    return [c.certificate for c in found + list(opened.additional_certs)]


def _pem(certificate: Any) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding

    return certificate.public_bytes(Encoding.PEM).decode("ascii")


def _load_key_and_chain(context: ssl.SSLContext, key: Any, chain: Sequence[Any]) -> None:
    """Load a private key and its certificate chain held in memory into ``context``.

    Python's ``ssl`` loads a certificate chain from a file only, so they are written to
    a file of a private temporary directory and loaded from it, the key encrypted
    under a one-time random password (never in clear on disk), and the file removed.
    """
    from cryptography.hazmat.primitives.serialization import (
        BestAvailableEncryption,
        Encoding,
        PrivateFormat,
    )

    one_time = secrets.token_urlsafe(32).encode()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(one_time))
    pem += "".join(map(_pem, chain)).encode("ascii")
    with tempfile.TemporaryDirectory(prefix="raystream-tls-") as directory:
        path = os.path.join(directory, "keystore.pem")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
            handle.write(pem)
        try:
            context.load_cert_chain(path, password=one_time)
        except ssl.SSLError as error:
            raise InvalidConfigError(
                f"ssl.keystore.location (PKCS12): its key and certificate do not load: {error}"
            ) from None


def librdkafka_tls(properties: Mapping[str, str]) -> dict[str, str]:
    """Kafka client ``properties`` with the Java client's TLS stores given as librdkafka
    (confluent-kafka) takes them, so a Kafka client file works as it is:

    - ``ssl.truststore.location`` (``ssl.truststore.type``, ``ssl.truststore.password``)
      becomes ``ssl.ca.location`` for a PEM file, ``ssl.ca.pem`` (its certificates)
      for a PKCS12 one;
    - ``ssl.keystore.location`` stays librdkafka's PKCS12 keystore (with
      ``ssl.keystore.password``) unless it is a PEM file, which becomes
      ``ssl.certificate.location`` and ``ssl.key.location`` (``ssl.key.password``
      opens an encrypted key, both clients' name);
    - without a ``.type``, a store is PEM when its file starts as PEM does, else
      PKCS12; a JKS store is refused with the ``keytool`` command that converts it.

    Properties without these keys are returned as they are (librdkafka's own
    ``ssl.ca.location``, ``ssl.certificate.location``, ... included). Reads the store
    files, so it runs where the client does.

    Raises:
        InvalidConfigError: a JKS store, a store type or password that does not open
            its file, or both ``ssl.truststore.location`` and ``ssl.ca.location``.
    """
    out = {k: v for k, v in properties.items() if k != "ssl.keystore.type"}
    truststore = out.pop("ssl.truststore.location", "")
    truststore_type = out.pop("ssl.truststore.type", "")
    truststore_password = out.pop("ssl.truststore.password", "")
    if truststore:
        if "ssl.ca.location" in out:
            raise InvalidConfigError(
                "ssl.truststore.location and ssl.ca.location both name the trusted CAs: keep one"
            )
        if _kind("truststore", truststore, truststore_type) == "PEM":
            out["ssl.ca.location"] = truststore
        else:
            certificates = _pkcs12_certificates(truststore, truststore_password)
            out["ssl.ca.pem"] = "".join(map(_pem, certificates))
    keystore = out.get("ssl.keystore.location", "")
    if keystore and _kind("keystore", keystore, properties.get("ssl.keystore.type", "")) == "PEM":
        del out["ssl.keystore.location"]
        out.pop("ssl.keystore.password", None)
        out["ssl.certificate.location"] = keystore
        out.setdefault("ssl.key.location", keystore)
    return out


def _kind(store: str, location: str, declared: str) -> str:
    """PEM or PKCS12: the declared ``ssl.<store>.type``, else what the file holds (a
    JKS file is refused either way)."""
    kind = store_type(f"ssl.{store}.type", declared, location) if declared else ""
    data = _read_store(store, location)
    return kind or ("PEM" if data.lstrip()[:10] == b"-----BEGIN" else "PKCS12")


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
