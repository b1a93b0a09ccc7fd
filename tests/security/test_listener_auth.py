"""The listener's TLS and SASL with real Kafka clients, without Ray: a
:class:`~raystream.kafka.server.KafkaServer` on its own event loop thread, over a
Backend that knows one broker and no topics. Cheap (no cluster), and it covers the
handshakes themselves: SCRAM, PLAIN and OAUTHBEARER logins with confluent-kafka and
kafka-python, refusals, the principal each connection ends up with, and KIP-368's
session expiry.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from raystream.kafka.call import Endpoint
from raystream.kafka.server import KafkaServer
from raystream.security.oauth import JwksValidator
from raystream.security.principal import certificate_principal, parse_mapping_rules, subject_dn
from raystream.security.sasl import SaslSession
from raystream.security.scram import CredentialStore, make_credential
from raystream.security.tls import TlsConfig, TlsSettings

PASSWORD = "pw-of-alice"


class OneBroker:
    """The Backend: this server is the only broker; there are no topics."""

    broker_id = 0
    cluster_id = "auth-tests"

    def __init__(self) -> None:
        self.port = 0
        self.refreshed = 0

    async def refresh_credentials(self) -> None:
        self.refreshed += 1

    async def brokers(self) -> tuple[list[Endpoint], dict[str, int]]:
        return [Endpoint(0, "127.0.0.1", self.port)], {}

    async def topics(self, names: list[str] | None) -> list[Any]:
        return []


@pytest.fixture(scope="module")
def servers(pki, jwt_issuer) -> Iterator[dict[str, Any]]:
    """A SASL_SSL server, an SSL one (client certificates requested: mutual TLS), a
    SASL_PLAINTEXT one whose sessions last 1.5 s, and their loop."""
    cert, key = pki.issue("auth-server", "auth-server", ("127.0.0.1",))
    store = CredentialStore()
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        store.upsert("alice", make_credential(mechanism, PASSWORD, iterations=4096))
    validator = JwksValidator(jwt_issuer.jwks_path)
    mechanisms = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
    tls = TlsConfig(TlsSettings(cert, key, "", pki.ca_path, "requested"))
    rules = parse_mapping_rules(r"RULE:^CN=([^,]*),OU=clients,.*$/$1/,DEFAULT")
    loop = asyncio.new_event_loop()
    made = {}
    for name, context, lifetime_ms in (
        ("sasl_ssl", tls.context, 0),
        ("ssl", tls.context, None),
        ("sasl_plain", None, 1500),
    ):
        backend = OneBroker()
        server = KafkaServer(
            backend,
            "127.0.0.1",
            0,
            context,
            None
            if lifetime_ms is None
            else lambda lifetime_ms=lifetime_ms: SaslSession(
                mechanisms, store.lookup, validator, lifetime_ms
            ),
            lambda der: certificate_principal(subject_dn(der), rules),
        )
        loop.run_until_complete(server.start())
        backend.port = server.port
        made[name] = server
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield {**made, "ca": pki.ca_path}
    for server in made.values():
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def bootstrap(server: KafkaServer) -> str:
    return f"127.0.0.1:{server.port}"


def confluent(servers: dict[str, Any], **login: Any) -> Any:
    """A confluent-kafka admin client over SASL_SSL; its errors collected."""
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    client = AdminClient(
        {
            "bootstrap.servers": bootstrap(servers["sasl_ssl"]),
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": servers["ca"],
            "error_cb": errors.append,
            **login,
        }
    )
    client.poll(0.5)  # serves oauth_cb
    client.errors = errors
    return client


def refused(client: Any) -> Any:
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException):
        client.list_topics(timeout=3)
    deadline = time.monotonic() + 10
    while not client.errors and time.monotonic() < deadline:
        client.poll(0.2)
    assert client.errors
    return client.errors[0]


def test_confluent_kafka_scram_plain_and_oauthbearer(servers, jwt_issuer) -> None:
    from confluent_kafka import KafkaError

    server = servers["sasl_ssl"]
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"):
        login = {"sasl.mechanism": mechanism, "sasl.username": "alice"}
        metadata = confluent(servers, **login, **{"sasl.password": PASSWORD}).list_topics(
            timeout=20
        )
        assert [b.port for b in metadata.brokers.values()] == [server.port]
        assert server.stats()["principals"][-1] == "User:alice"
    wrong = confluent(
        servers,
        **{"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice"},
        **{"sasl.password": "not-it"},
    )
    error = refused(wrong)
    assert error.code() == KafkaError._AUTHENTICATION and "not-it" not in error.str()

    def oauth(expires_in_s: float) -> dict[str, Any]:
        token = jwt_issuer.token("carol", expires_in_s)
        return {"sasl.mechanism": "OAUTHBEARER", "oauth_cb": lambda _: (token, time.time() + 60)}

    confluent(servers, **oauth(300)).list_topics(timeout=20)
    assert server.stats()["principals"][-1] == "User:carol"
    assert refused(confluent(servers, **oauth(-60))).code() == KafkaError._AUTHENTICATION


def test_kafka_python_scram_and_oauthbearer(servers, jwt_issuer) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError
    from kafka.net.sasl.oauth import AbstractTokenProvider

    server = servers["sasl_ssl"]
    common = {
        "bootstrap_servers": bootstrap(server),
        "security_protocol": "SASL_SSL",
        "ssl_cafile": servers["ca"],
    }
    consumer = KafkaConsumer(
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password=PASSWORD,
        **common,
    )
    assert consumer.topics() == set()
    consumer.close()
    assert server.stats()["principals"][-1] == "User:alice"

    class Tokens(AbstractTokenProvider):
        def __init__(self, expires_in_s: float) -> None:
            self.expires_in_s = expires_in_s

        def token(self) -> str:
            return jwt_issuer.token("dave", self.expires_in_s)

    consumer = KafkaConsumer(
        sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Tokens(300), **common
    )
    assert consumer.topics() == set()
    consumer.close()
    assert server.stats()["principals"][-1] == "User:dave"
    failures = server.stats()["auth_failures"]
    with pytest.raises(KafkaError) as raised:
        KafkaConsumer(
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=Tokens(-60),
            request_timeout_ms=3000,
            **common,
        ).topics()
    assert server.stats()["auth_failures"] > failures, (raised.value, server.stats())


def test_mutual_tls_principal_and_hostname_checking(servers, pki) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    server = servers["ssl"]
    cert, key = pki.issue("auth-client-erin", "erin", org_unit="clients")
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap(server),
        security_protocol="SSL",
        ssl_cafile=servers["ca"],
        ssl_certfile=cert,
        ssl_keyfile=key,
    )
    assert consumer.topics() == set()
    consumer.close()
    assert server.stats()["principals"][-1] == "User:erin"
    connections = server.stats()["connections"]
    with pytest.raises(KafkaError):  # the certificate is for 127.0.0.1, not localhost
        KafkaConsumer(
            bootstrap_servers=f"localhost:{server.port}",
            security_protocol="SSL",
            ssl_cafile=servers["ca"],
            ssl_check_hostname=True,
            request_timeout_ms=3000,
        ).topics()
    assert server.stats()["connections"] == connections  # no TLS session came of it


def _frame(api_key: int, version: int, body: bytes, correlation_id: int = 1) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, 1) + b"t"
    return struct.pack(">i", len(header + body)) + header + body


def _answer(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    return sock.recv(size, socket.MSG_WAITALL)


def _string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def test_order_and_session_expiry_on_a_raw_connection(servers) -> None:
    """Nothing but ApiVersions/SaslHandshake/SaslAuthenticate before authentication;
    after a PLAIN login the session lasts 1.5 s (told in the answer), and a request
    after that closes the connection (KIP-368)."""
    port = servers["sasl_plain"].port
    metadata_v0 = _frame(3, 0, struct.pack(">i", 0))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(metadata_v0)
        assert sock.recv(4) == b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_frame(17, 1, _string("PLAIN"), 2))
        assert _answer(sock)[4:6] == b"\0\0"  # correlation id, then error 0
        token = b"\0alice\0" + PASSWORD.encode()
        sock.sendall(_frame(36, 1, struct.pack(">i", len(token)) + token, 3))
        answer = _answer(sock)
        assert answer[4:6] == b"\0\0"
        (lifetime,) = struct.unpack(">q", answer[-8:])
        assert 0 < lifetime <= 1500
        sock.sendall(_frame(3, 0, struct.pack(">i", 0), 4))
        assert struct.unpack(">i", _answer(sock)[:4]) == (4,)  # served while valid
        time.sleep(lifetime / 1000 + 0.2)
        sock.sendall(_frame(3, 0, struct.pack(">i", 0), 5))
        assert sock.recv(4) == b""  # expired: closed without an answer
