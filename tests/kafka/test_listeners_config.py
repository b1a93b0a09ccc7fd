"""``listeners``, ``advertised.listeners``, per-listener ``listener.name.<name>.*``
settings and the direct path's TLS: parsing, checks, and addresses (pure)."""

from __future__ import annotations

import re

import pytest

from raystream.config import BrokerConfig
from raystream.errors import InvalidConfigError
from raystream.kafka.listeners import (
    ListenerSpec,
    advertised_host,
    bind_host,
    parse_listeners,
)
from raystream.security.tls import ClientTlsSettings, TlsSettings
from raystream.wire import DirectListener


def test_listeners_parse_as_kafka_writes_them() -> None:
    assert parse_listeners("") == []
    assert parse_listeners("PLAINTEXT://127.0.0.1:9092") == [
        ListenerSpec("PLAINTEXT", "127.0.0.1", 9092)
    ]
    assert parse_listeners(" plaintext://:0 ") == [ListenerSpec("PLAINTEXT", "", 0)]
    assert parse_listeners("PLAINTEXT://[::1]:9092") == [ListenerSpec("PLAINTEXT", "::1", 9092)]
    assert str(parse_listeners("PLAINTEXT://node:9092")[0]) == "PLAINTEXT://node:9092"
    # names with digits, as Kafka allows, mapped to their protocol
    assert parse_listeners("CLIENT_2://:9094", protocol_map="CLIENT_2:SASL_SSL") == [
        ListenerSpec("CLIENT_2", "", 9094, "SASL_SSL")
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("127.0.0.1:9092", "is not PROTOCOL://host:port"),
        ("PLAINTEXT://host", "is not PROTOCOL://host:port"),
        ("PLAINTEXT://host:port", "is not PROTOCOL://host:port"),
        ("CLIENT-2://:9094", "is not PROTOCOL://host:port"),
        ("TLS://:9093", "protocol TLS is not supported"),
        ("PLAINTEXT://:70000", "port 70000 is above 65535"),
        ("PLAINTEXT://:9092,PLAINTEXT://:9093", "names protocol PLAINTEXT twice"),
    ],
)
def test_bad_listeners_are_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        parse_listeners(text)
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig.from_kafka({"listeners": text})


def test_advertised_listeners_must_match_an_opened_protocol() -> None:
    config = BrokerConfig.from_kafka(
        {
            "listeners": "PLAINTEXT://:9092",
            "advertised.listeners": "PLAINTEXT://kafka.example:19092",
        }
    )
    assert config.advertised_listeners == "PLAINTEXT://kafka.example:19092"
    with pytest.raises(InvalidConfigError, match=r"advertised.listeners.*does not open"):
        BrokerConfig.from_kafka({"advertised.listeners": "PLAINTEXT://kafka.example:9092"})
    with pytest.raises(InvalidConfigError, match="listeners=9092: expected a string"):
        BrokerConfig.from_kafka({"listeners": 9092})


def test_node_and_wildcards_bind_and_advertise_the_node_address() -> None:
    node = "10.1.2.3"
    for text, bound, advertised in [
        ("PLAINTEXT://node:9092", node, node),
        ("PLAINTEXT://:9092", "0.0.0.0", node),
        ("PLAINTEXT://0.0.0.0:9092", "0.0.0.0", node),
        ("PLAINTEXT://127.0.0.1:9092", "127.0.0.1", "127.0.0.1"),
    ]:
        (spec,) = parse_listeners(text)
        assert (bind_host(spec, node), advertised_host(spec, node)) == (bound, advertised)


# ------------------------------------------- per-listener settings, the direct path

TLS = {"ssl.keystore.location": "/etc/rs/server.pem", "ssl.key.location": "/etc/rs/server.key"}


def test_listener_name_settings_override_the_broker_wide_ones_option_by_option() -> None:
    config = BrokerConfig.from_kafka(
        {
            **TLS,
            "listeners": "INTERNAL://:0,EXTERNAL://:0",
            "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SSL",
            "ssl.truststore.location": "/etc/rs/ca.pem",
            "listener.name.external.ssl.keystore.location": "/etc/rs/external.pem",
            "listener_name_external_ssl_client_auth": "required",  # snake_case too
        }
    )
    internal, external = config.tls_settings("INTERNAL"), config.tls_settings("external")
    assert internal.keystore_location == "/etc/rs/server.pem"
    assert internal.client_auth == "none"
    assert external.keystore_location == "/etc/rs/external.pem"
    assert external.client_auth == "required"
    assert external.key_location == "/etc/rs/server.key"  # not overridden: broker-wide
    assert config.listener_option("EXTERNAL", "ssl.principal.mapping.rules") == "DEFAULT"
    dotted = config.to_kafka()
    assert dotted["listener.name.external.ssl.keystore.location"] == "/etc/rs/external.pem"
    assert dotted["listener.name.external.ssl.client.auth"] == "required"
    assert "listener.overrides" not in dotted
    assert BrokerConfig.from_kafka(dotted) == config
    changed = config.with_options({"listener.name.EXTERNAL.ssl.client.auth": "none"})
    assert changed.tls_settings("EXTERNAL").client_auth == "none"
    assert changed.tls_settings("EXTERNAL").keystore_location == "/etc/rs/external.pem"


def test_a_listener_key_password_stays_out_of_reprs() -> None:
    config = BrokerConfig.from_kafka(
        {**TLS, "listeners": "SSL://:0", "listener.name.ssl.ssl.key.password": "hunter2"}
    )
    assert config.tls_settings("SSL").key_password == "hunter2"
    assert "hunter2" not in repr(config)
    assert "hunter2" not in repr(config.tls_settings("SSL"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"listener.name.ssl.ssl.keystore.locaton": "x"}, "listener.name.<listener>.<option>"),
        ({"listener.name.ssl": "x"}, "listener.name.<listener>.<option>"),
        ({"listener.name.extrnal.ssl.keystore.location": "x"}, "no listener EXTRNAL"),
        ({"listener.name.ssl.ssl.client.auth": "sometimes"}, "listener SSL: ssl.client.auth"),
        ({"listener.name.ssl.ssl.keystore.location": ""}, "listener SSL: ssl.keystore.loc"),
        ({"listener.name.ssl.ssl.principal.mapping.rules": "NOPE"}, "mapping.rules"),
        ({"ssl.endpoint.identification.algorithm": "http"}, "'https'"),
        ({"listener.name.ssl.ssl.endpoint.identification.algorithm": "x"}, "listener SSL"),
        ({"listener.name.ssl.ssl.keystore.location": 3}, "expected a string"),
    ],
)
def test_bad_listener_settings_are_refused_by_name(options: dict, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(message)):
        BrokerConfig.from_kafka({**TLS, "listeners": "SSL://:0", **options})


def test_the_direct_path_is_plaintext_unless_the_protocol_map_says_ssl() -> None:
    assert BrokerConfig().direct_listener() == DirectListener("127.0.0.1")
    config = BrokerConfig.from_kafka(
        {
            **TLS,
            "listener.host": "node",
            "listener.security.protocol.map": "DIRECT:SSL",
            "ssl.truststore.location": "/etc/rs/ca.pem",
            "ssl.client.auth": "required",  # the Kafka listeners', not the direct path's
        }
    )
    direct = config.direct_listener()
    assert direct.host == "node"
    assert direct.tls == TlsSettings("/etc/rs/server.pem", "/etc/rs/server.key")
    assert direct.client_tls == ClientTlsSettings("/etc/rs/ca.pem", "https")
    assert direct.client_tls.check_hostname
    unchecked = config.with_options(
        {
            "listener.name.direct.ssl.endpoint.identification.algorithm": "",
            "listener.name.direct.ssl.keystore.location": "/etc/rs/direct.pem",
        }
    ).direct_listener()
    assert not unchecked.client_tls.check_hostname
    assert unchecked.tls.keystore_location == "/etc/rs/direct.pem"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"listener.security.protocol.map": "DIRECT:SASL_SSL"}, "speaks PLAINTEXT or SSL"),
        ({"listener.security.protocol.map": "DIRECT:SSL", "listener.host": ""}, "no direct"),
        (
            {"listener.security.protocol.map": "DIRECT:SSL", "ssl.keystore.location": ""},
            "listener DIRECT: ssl.keystore.location",
        ),
        ({"listener.name.direct.ssl.client.auth": "required"}, "asks no client certificate"),
        ({"listeners": "DIRECT://:0"}, "the name DIRECT is the direct path's"),
    ],
)
def test_bad_direct_path_settings_are_refused_by_name(options: dict, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(message)):
        BrokerConfig.from_kafka({**TLS, **options})
