"""LogConfig: Kafka's topic option names, defaults and validation."""

from __future__ import annotations

import re

import pytest

from raystream.errors import InvalidConfigError
from raystream.log import LogConfig


def test_defaults_are_kafkas():
    config = LogConfig()
    assert config.segment_bytes == 1024**3
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.retention_bytes == -1
    assert config.cleanup_policy == "delete"
    assert config.delete and not config.compact
    assert config.max_message_bytes == 1048588
    assert config.flush_messages == config.flush_ms == 2**63 - 1
    assert config.message_timestamp_type == "CreateTime"


def test_from_kafka_accepts_dotted_names_and_text_values():
    config = LogConfig.from_kafka(
        {
            "segment.bytes": "2048",
            "segment.ms": 60000,
            "retention.ms": "-1",
            "retention.bytes": 10_000,
            "cleanup.policy": "compact,delete",
            "delete.retention.ms": "5",
            "flush.messages": "1",
            "compression.type": "zstd",
            "max.message.bytes": "4096",
            "min.insync.replicas": 2,
            "unclean.leader.election.enable": "TRUE",
            "message.timestamp.type": "LogAppendTime",
            "index.interval.bytes": 0,
        }
    )
    assert config.segment_bytes == 2048
    assert config.segment_ms == 60000
    assert config.retention_ms == -1
    assert config.retention_bytes == 10_000
    assert config.compact and config.delete
    assert config.delete_retention_ms == 5
    assert config.flush_messages == 1
    assert config.compression_type == "zstd"
    assert config.max_message_bytes == 4096
    assert config.min_insync_replicas == 2
    assert config.unclean_leader_election_enable is True
    assert config.message_timestamp_type == "LogAppendTime"
    assert config.index_interval_bytes == 0


def test_snake_case_names_and_keyword_arguments_work_too():
    config = LogConfig.from_kafka({"segment_bytes": 4096}, retention_ms=10)
    assert (config.segment_bytes, config.retention_ms) == (4096, 10)
    changed = config.with_options({"cleanup.policy": "compact"})
    assert changed.compact and not changed.delete
    assert config.cleanup_policy == "delete"  # frozen: with_options copies


def test_to_kafka_round_trips():
    config = LogConfig.from_kafka({"segment.bytes": 4096, "cleanup.policy": "compact"})
    options = config.to_kafka()
    assert options["segment.bytes"] == 4096
    assert options["cleanup.policy"] == "compact"
    assert LogConfig.from_kafka(options) == config


def test_unknown_key_is_named():
    with pytest.raises(InvalidConfigError, match=re.escape("'segment.byte'")):
        LogConfig.from_kafka({"segment.byte": 1})
    with pytest.raises(InvalidConfigError):
        LogConfig.from_kafka({1: 1})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", 100),
        ("segment.bytes", 2**31),
        ("segment.bytes", "lots"),
        ("segment.ms", 0),
        ("index.interval.bytes", -1),
        ("retention.ms", -2),
        ("retention.bytes", -5),
        ("cleanup.policy", "forever"),
        ("delete.retention.ms", -1),
        ("flush.messages", 0),
        ("flush.ms", 0),
        ("max.message.bytes", 0),
        ("min.insync.replicas", 0),
        ("compression.type", "gzip"),
        ("message.timestamp.type", "WallClock"),
        ("unclean.leader.election.enable", "maybe"),
        ("segment.bytes", True),
        ("retention.ms", "1.5"),
    ],
)
def test_bad_values_name_the_key_and_value(key, value):
    with pytest.raises(InvalidConfigError) as info:
        LogConfig.from_kafka({key: value})
    message = str(info.value)
    # The option may be named in Kafka's or in snake_case spelling.
    assert re.search(key.replace(".", "[._]"), message), message
    assert repr(value) in message, message


def test_direct_construction_is_validated_too():
    with pytest.raises(InvalidConfigError, match=r"segment\.bytes=10"):
        LogConfig(segment_bytes=10)
