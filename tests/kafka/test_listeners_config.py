"""``listeners`` and ``advertised.listeners``: parsing, checks, and addresses (pure)."""

from __future__ import annotations

import pytest

from raystream.config import BrokerConfig
from raystream.errors import InvalidConfigError
from raystream.kafka.listeners import (
    ListenerSpec,
    advertised_host,
    bind_host,
    parse_listeners,
)


def test_listeners_parse_as_kafka_writes_them() -> None:
    assert parse_listeners("") == []
    assert parse_listeners("PLAINTEXT://127.0.0.1:9092") == [
        ListenerSpec("PLAINTEXT", "127.0.0.1", 9092)
    ]
    assert parse_listeners(" plaintext://:0 ") == [ListenerSpec("PLAINTEXT", "", 0)]
    assert parse_listeners("PLAINTEXT://[::1]:9092") == [ListenerSpec("PLAINTEXT", "::1", 9092)]
    assert str(parse_listeners("PLAINTEXT://node:9092")[0]) == "PLAINTEXT://node:9092"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("127.0.0.1:9092", "is not PROTOCOL://host:port"),
        ("PLAINTEXT://host", "is not PROTOCOL://host:port"),
        ("PLAINTEXT://host:port", "is not PROTOCOL://host:port"),
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
