"""TLS and SASL on the Kafka listener, with confluent-kafka and kafka-python.

ONE cluster for the module with three listeners: SASL_SSL (SCRAM, PLAIN,
OAUTHBEARER), SSL with client certificates requested (mutual TLS names the
principal) and SASL_PLAINTEXT. Credentials are set through the admin API (and the
Kafka protocol's AlterUserScramCredentials), tokens signed by a test key, the CA and
certificates made by the package's fixtures.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from typing import Any

import pytest

from raystream.security.principal import subject_dn

PASSWORD = "alice-secret-1"


@pytest.fixture(scope="module")
def secure(module_cluster, pki, jwt_issuer) -> dict[str, Any]:
    """The cluster, its bootstrap addresses by listener, and the server's cert paths."""
    cert, key = pki.issue("listener", "listener-one", ("127.0.0.1",))
    cluster = module_cluster(
        {
            "listeners": "SASL_SSL://127.0.0.1:0,MTLS://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "listener.security.protocol.map": "MTLS:SSL",
            "ssl.keystore.location": cert,
            "ssl.key.location": key,
            "ssl.truststore.location": pki.ca_path,
            "ssl.client.auth": "requested",
            "ssl.principal.mapping.rules": r"RULE:^CN=([^,]*),OU=clients,.*$/$1/,DEFAULT",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            "sasl.oauthbearer.jwks.endpoint.url": f"file://{jwt_issuer.jwks_path}",
            "connections.max.reauth.ms": 600_000,
        }
    )
    admin = cluster.admin()
    admin.alter_user_scram_credentials("alice", "SCRAM-SHA-512", PASSWORD)
    admin.alter_user_scram_credentials("alice", "SCRAM-SHA-256", PASSWORD)
    admin.create_topic("secured", partitions=1)
    return {
        "cluster": cluster,
        "sasl_ssl": cluster.bootstrap_servers("SASL_SSL"),
        "mtls": cluster.bootstrap_servers("MTLS"),
        "sasl_plaintext": cluster.bootstrap_servers("SASL_PLAINTEXT"),
        "cert": cert,
        "key": key,
        "ca": pki.ca_path,
    }


def listener_stats(secure: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What the listener saw, by listener port: counters and the principals of its
    latest authenticated connections."""
    import ray

    from raystream.kafka.listeners import listener_actor_name

    cluster = secure["cluster"]
    (entry,) = cluster.call("kafka_listeners")
    actor = ray.get_actor(listener_actor_name(entry["node"]), namespace=cluster.namespace)
    described = ray.get(actor.describe.remote())
    return {
        str(e["port"]): s for e, s in zip(described["endpoints"], described["stats"], strict=True)
    }


def listener_principals(secure: dict[str, Any]) -> dict[str, list[str]]:
    """The principals of the latest authenticated connections, by listener port."""
    return {port: s["principals"] for port, s in listener_stats(secure).items()}


def port_of(bootstrap: str) -> str:
    return bootstrap.rsplit(":", 1)[1]


def confluent_config(secure: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": secure["sasl_ssl"],
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": secure["ca"],
        **extra,
    }


def confluent_round_trip(config: dict[str, Any], value: bytes) -> None:
    """Produce ``value`` and read it back from the start of "secured"."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer(config)
    producer.produce("secured", value)
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"g-{time.monotonic_ns()}"})
    consumer.assign([TopicPartition("secured", 0, 0)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while value not in seen and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            seen.append(message.value())
    consumer.close()
    assert value in seen


def confluent_refused(config: dict[str, Any]) -> Any:
    """The error librdkafka reports when the listener refuses its login."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer({**config, "error_cb": errors.append})
    producer.produce("secured", b"never")
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "the login was not refused"
    producer.purge()
    return errors[0]


def test_scram_sha_512_over_sasl_ssl_with_confluent_kafka(secure) -> None:
    from confluent_kafka import KafkaError

    login = {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice"}
    confluent_round_trip(
        confluent_config(secure, **login, **{"sasl.password": PASSWORD}), b"scram-confluent"
    )
    assert "User:alice" in listener_principals(secure)[port_of(secure["sasl_ssl"])]
    error = confluent_refused(confluent_config(secure, **login, **{"sasl.password": "wrong"}))
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert "wrong" not in error.str()


def test_scram_and_plain_with_kafka_python(secure) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import KafkaError

    common = {"security_protocol": "SASL_SSL", "ssl_cafile": secure["ca"]}
    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        login = {
            "sasl_mechanism": mechanism,
            "sasl_plain_username": "alice",
            "sasl_plain_password": PASSWORD,
        }
        producer = KafkaProducer(bootstrap_servers=secure["sasl_ssl"], **common, **login)
        producer.send("secured", mechanism.encode()).get(timeout=30)
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=secure["sasl_ssl"], **common, **login)
        consumer.assign([TopicPartition("secured", 0)])
        consumer.seek_to_beginning()
        values = [r.value for rs in consumer.poll(10_000).values() for r in rs]
        consumer.close()
        assert mechanism.encode() in values
        wrong = {**login, "sasl_plain_password": "wrong"}
        port = port_of(secure["sasl_ssl"])
        failures = listener_stats(secure)[port]["auth_failures"]
        with pytest.raises(KafkaError):  # kafka-python gives up bootstrapping
            producer = KafkaProducer(
                bootstrap_servers=secure["sasl_ssl"], max_block_ms=5_000, **common, **wrong
            )
            producer.send("secured", b"never").get(timeout=10)
        assert listener_stats(secure)[port]["auth_failures"] > failures


def test_plain_over_sasl_plaintext_with_confluent_kafka(secure) -> None:
    config = {
        "bootstrap.servers": secure["sasl_plaintext"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": PASSWORD,
    }
    confluent_round_trip(config, b"plain-confluent")
    assert "User:alice" in listener_principals(secure)[port_of(secure["sasl_plaintext"])]


def test_oauthbearer_tokens_are_validated(secure, jwt_issuer) -> None:
    from confluent_kafka import KafkaError
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as PythonKafkaError
    from kafka.net.sasl.oauth import AbstractTokenProvider

    def oauth(expires_in_s: float) -> dict[str, Any]:
        token = jwt_issuer.token("carol", expires_in_s)
        # librdkafka is told a future expiry either way: the broker must judge the JWT
        return {"sasl.mechanism": "OAUTHBEARER", "oauth_cb": lambda _: (token, time.time() + 60)}

    confluent_round_trip(confluent_config(secure, **oauth(300)), b"oauth-confluent")
    assert "User:carol" in listener_principals(secure)[port_of(secure["sasl_ssl"])]
    error = confluent_refused(confluent_config(secure, **oauth(-60)))
    assert error.code() == KafkaError._AUTHENTICATION, error

    class Tokens(AbstractTokenProvider):
        def __init__(self, expires_in_s: float) -> None:
            self.expires_in_s = expires_in_s

        def token(self) -> str:
            return jwt_issuer.token("dave", self.expires_in_s)

    def producer(expires_in_s: float) -> Any:
        return KafkaProducer(
            bootstrap_servers=secure["sasl_ssl"],
            security_protocol="SASL_SSL",
            ssl_cafile=secure["ca"],
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=Tokens(expires_in_s),
        )

    ok = producer(300)
    ok.send("secured", b"oauth-python").get(timeout=30)
    ok.close()
    assert "User:dave" in listener_principals(secure)[port_of(secure["sasl_ssl"])]
    with pytest.raises(PythonKafkaError):
        producer(-60).send("secured", b"never").get(timeout=20)


def test_mutual_tls_maps_the_client_certificate_to_its_principal(secure, pki) -> None:
    from kafka import KafkaProducer

    cert, key = pki.issue("client-erin", "erin", org_unit="clients")
    producer = KafkaProducer(
        bootstrap_servers=secure["mtls"],
        security_protocol="SSL",
        ssl_cafile=secure["ca"],
        ssl_certfile=cert,
        ssl_keyfile=key,
    )
    producer.send("secured", b"mtls").get(timeout=30)
    producer.close()
    assert "User:erin" in listener_principals(secure)[port_of(secure["mtls"])]


def test_a_client_checking_hostnames_refuses_a_certificate_for_another_name(secure) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    port = port_of(secure["mtls"])
    with pytest.raises(KafkaError):  # the certificate names 127.0.0.1 only
        KafkaProducer(
            bootstrap_servers=f"localhost:{port}",
            security_protocol="SSL",
            ssl_cafile=secure["ca"],
            ssl_check_hostname=True,
            max_block_ms=5_000,
        ).send("secured", b"never").get(timeout=10)
    context = ssl.create_default_context(cafile=secure["ca"])
    with (
        socket.create_connection(("127.0.0.1", int(port)), timeout=10) as raw,
        pytest.raises(ssl.SSLCertVerificationError, match=r"(?i)hostname|match"),
    ):
        context.wrap_socket(raw, server_hostname="localhost")


def server_subject(port: int, ca: str) -> str:
    context = ssl.create_default_context(cafile=ca)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return subject_dn(tls.getpeercert(binary_form=True))


def test_certificates_replaced_on_disk_serve_new_connections(secure, pki) -> None:
    port = int(port_of(secure["mtls"]))
    before = server_subject(port, secure["ca"])
    assert before.startswith("CN=listener-")
    pki.issue("listener", "listener-renewed", ("127.0.0.1",))  # same paths, new cert
    assert server_subject(port, secure["ca"]) == "CN=listener-renewed,O=raystream-tests"


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, 1, 1) + b"t"
    return struct.pack(">i", len(header + body)) + header + body


def test_sasl_listener_closes_a_connection_that_skips_authentication(secure) -> None:
    host, port = secure["sasl_plaintext"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(_frame(3, 0, struct.pack(">i", 0)))  # Metadata v0, no topics
        assert sock.recv(4) == b""  # closed without an answer


def test_scram_credentials_through_kafka_admin_clients(secure) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(
        confluent_config(
            secure,
            **{
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "alice",
                "sasl.password": PASSWORD,
            },
        )
    )
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    upsert = UserScramCredentialUpsertion("frank", info, b"frank-pw")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    described = admin.describe_user_scram_credentials(["frank"])["frank"].result(30)
    assert [c.mechanism for c in described.scram_credential_infos] == [ScramMechanism.SCRAM_SHA_256]
    assert secure["cluster"].admin().describe_user_scram_credentials(["frank"]) == {
        "frank": [("SCRAM-SHA-256", 4096)]
    }
    confluent_round_trip(
        confluent_config(
            secure,
            **{
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "frank",
                "sasl.password": "frank-pw",
            },
        ),
        b"frank",
    )
    deletion = UserScramCredentialDeletion("frank", ScramMechanism.SCRAM_SHA_256)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        future.result(30)
    assert secure["cluster"].admin().describe_user_scram_credentials(["frank"]) == {"frank": []}


def test_a_new_users_first_login_succeeds(secure) -> None:
    """The login that makes the listener fetch the new credentials uses them (it
    once checked against the cache of its connection's start and was refused)."""
    from kafka import KafkaProducer

    from raystream.actors.kafka_listener import CREDENTIALS_TTL_S

    secure["cluster"].admin().alter_user_scram_credentials("grace", "SCRAM-SHA-512", "grace-pw")
    time.sleep(CREDENTIALS_TTL_S)  # the listener's cache is due a refresh
    port = port_of(secure["sasl_ssl"])
    failures = listener_stats(secure)[port]["auth_failures"]
    producer = KafkaProducer(  # kafka-python does not retry a refused login
        bootstrap_servers=secure["sasl_ssl"],
        security_protocol="SASL_SSL",
        ssl_cafile=secure["ca"],
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="grace",
        sasl_plain_password="grace-pw",
        max_block_ms=10_000,
    )
    producer.send("secured", b"grace").get(timeout=30)
    producer.close()
    assert listener_stats(secure)[port]["auth_failures"] == failures
    assert "User:grace" in listener_principals(secure)[port]
