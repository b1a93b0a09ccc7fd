"""Configuration objects: Kafka's dotted names, validation that names the bad value."""

from __future__ import annotations

import re

import pytest

from raystream.config import BrokerConfig, ConsumerConfig, ProducerConfig, unknown_option
from raystream.errors import InvalidConfigError
from raystream.log import LogConfig


def test_dotted_and_snake_case_names_are_both_accepted() -> None:
    config = LogConfig.from_kafka({"retention.ms": "1000"}, segment_bytes=2048)
    assert config.retention_ms == 1000
    assert config.segment_bytes == 2048
    assert config.to_kafka()["retention.ms"] == 1000


def test_unknown_keys_are_refused_by_name() -> None:
    with pytest.raises(InvalidConfigError, match=re.escape("'retention.hours'")):
        LogConfig.from_kafka({"retention.hours": 1})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("retention.ms", "soon", "retention.ms='soon': expected an integer"),
        ("cleanup.policy", "shred", "cleanup.policy='shred'"),
        ("segment.bytes", 10, "segment.bytes=10"),
        ("min.insync.replicas", 0, "min.insync.replicas=0"),
        ("unclean.leader.election.enable", "maybe", "expected true or false"),
        ("compression.type", "gzip", "compression.type='gzip'"),
        ("message.timestamp.type", "Now", "message.timestamp.type='Now'"),
    ],
)
def test_bad_values_are_refused_with_key_and_value(key: str, value: object, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message.replace("(", r"\(")):
        LogConfig.from_kafka({key: value})


def test_boolean_options_accept_text() -> None:
    assert LogConfig.from_kafka(
        {"unclean.leader.election.enable": "true"}
    ).unclean_leader_election_enable


def test_broker_config_validates_its_intervals() -> None:
    with pytest.raises(InvalidConfigError, match=re.escape("log.retention.check.interval.ms=0")):
        BrokerConfig.from_kafka({"log.retention.check.interval.ms": 0})


@pytest.mark.parametrize(
    ("config", "key", "message"),
    [
        (LogConfig, "retention.msec", "key 'retention.msec' (did you mean 'retention.ms'?)"),
        (LogConfig, "retention_msec", "key 'retention_msec' (did you mean 'retention_ms'?)"),
        (ProducerConfig, "linger", "key 'linger' (did you mean 'linger_ms'?)"),
        (ConsumerConfig, "auto_offset_rest", "(did you mean 'auto_offset_reset'?)"),
        (BrokerConfig, "data.dirs", "(did you mean 'data.dir'?)"),
        (ConsumerConfig, "bootstrap.servers", "a raystream client reaches its cluster"),
        (ProducerConfig, "qqq", "key 'qqq'; known keys: acks, batch_size, "),
    ],
)
def test_unknown_options_name_the_closest_known_one(config, key: str, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(message)) as raised:
        config.from_kafka({key: 1})
    assert not raised.value.retriable


def test_unknown_option_messages_keep_the_spelling_the_user_chose() -> None:
    known = ["max_poll_records", "linger_ms"]
    assert "'max.poll.records'" in unknown_option("C", "max.poll.record", known)
    assert "'max_poll_records'" in unknown_option("C", "max_poll_record", known)
