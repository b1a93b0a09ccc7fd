"""The framework's keys of a connector config, checked as Kafka Connect checks them:
pure, no Ray (the connectors are the built-in plugins, instantiated, not started)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from raystream.connectors import plugins
from raystream.connectors.api import SourceConnector
from raystream.connectors.connector_config import (
    check_connector_config,
    exactly_once_required,
    transaction_boundary,
)
from raystream.errors import InvalidConfigError
from raystream.mirror.connectors import MirrorCheckpointConnector

PASSED_THROUGH = {
    "tasks.max": "2",
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false",
    "header.converter": "org.apache.kafka.connect.storage.SimpleHeaderConverter",
    "header.converter.charset": "UTF-8",
    "transforms": "stamp",
    "transforms.stamp.type": "org.apache.kafka.connect.transforms.InsertHeader",
    "transforms.stamp.header": "via",
    "transforms.stamp.value.literal": "connect",
    "transforms.stamp.predicate": "always",
    "predicates": "always",
    "predicates.always.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
    "predicates.always.pattern": ".*",
    "errors.tolerance": "all",
    "errors.log.enable": "true",
    "errors.retry.timeout": "0",
    "consumer.override.max.poll.records": "100",
    "consumer.override.fetch.min.bytes": "1",
    "producer.override.linger.ms": "5",
    "producer.override.compression.type": "zstd",
    "admin.override.request.timeout.ms": "1000",
    "topic.creation.default.replication.factor": "1",
    "topic.creation.default.partitions": "3",
    "topic.creation.groups": "",
    "offsets.storage.topic": "connect-offsets-own",
    "config.action.reload": "RESTART",
    "exactly.once.support": "requested",
    "transaction.boundary": "poll",
    "transaction.boundary.interval.ms": "1000",
}
"""Kafka Connect's framework-level and passed-through keys, values Kafka accepts."""

OWN = {
    "FileStreamSource": {"file": "/data/in.txt", "topic": "lines"},
    "DirectorySource": {"directory": "/landing", "topic": "files"},
    "HttpSource": {"http.url": "https://example.com/x", "topic": "polled"},
    "PostgresSource": {
        "connection.url": "postgresql://db/app",
        "mode": "incrementing",
        "incrementing.column.name": "id",
        "topic.prefix": "pg-",
    },
    "FileStreamSink": {"file": "/data/out.txt", "topics": "lines"},
    "DirectorySink": {"directory": "/export", "topics": "lines"},
    "DataLakeSink": {"directory": "/lake", "topics": "lines"},
    "PostgresSink": {"connection.url": "postgresql://db/app", "topics": "lines"},
}
"""Each built-in connector's own keys, enough for its ``validate``."""


def check(plugin: str, **config: str) -> None:
    """``check_connector_config`` then the connector's own ``validate``, as
    ``Workers.validate`` runs them, on ``plugin``'s config with ``config`` over it."""
    connector = plugins.resolve(plugin)()
    merged = {"connector.class": plugin, **OWN.get(plugin, {}), **config}
    check_connector_config("c", connector, merged)
    connector.validate(merged)


@pytest.mark.parametrize("plugin", sorted(OWN))
def test_kafka_connects_framework_and_passed_through_keys_are_accepted(plugin: str) -> None:
    check(plugin, **PASSED_THROUGH)


@pytest.mark.parametrize("plugin", ["DirectorySink", "DataLakeSink", "PostgresSink"])
def test_exactly_once_is_accepted_by_a_sink_that_stores_offsets_with_its_data(
    plugin: str,
) -> None:
    check(plugin, **{"exactly.once.support": "required"})
    check(plugin, **{"exactly.once.support": "Required"})  # any case, as Kafka


def test_exactly_once_is_refused_with_the_reason_by_a_sink_that_writes_at_least_once() -> None:
    with pytest.raises(InvalidConfigError) as refused:
        check("FileStreamSink", **{"exactly.once.support": "required"})
    message = str(refused.value)
    assert "exactly.once.support=required" in message
    assert "FileStreamSinkConnector writes at least once" in message
    assert "does not store its offsets with its data" in message
    check("FileStreamSink", **{"exactly.once.support": "requested"})


def test_exactly_once_is_refused_with_the_reason_by_a_source_that_cannot_give_it() -> None:
    connector = MirrorCheckpointConnector()  # checkpoints are not written transactionally
    config = {"connector.class": "MirrorCheckpointConnector", "exactly.once.support": "REQUIRED"}
    with pytest.raises(InvalidConfigError, match=r"MirrorCheckpointConnector cannot give"):
        check_connector_config("mm2", connector, config)
    check_connector_config("mm2", connector, {**config, "exactly.once.support": "requested"})
    check("FileStreamSource", **{"exactly.once.support": "REQUIRED"})


class _BoundedSource(SourceConnector):
    """A source whose tasks commit their own transactions (KIP-618's connector
    boundaries)."""

    def task_class(self) -> type:
        raise NotImplementedError("never started here")

    def can_define_transaction_boundaries(self, config: Mapping[str, str]) -> bool:
        return True


def test_connector_transaction_boundaries_need_a_source_that_defines_them() -> None:
    with pytest.raises(InvalidConfigError, match=r"does not define transaction boundaries"):
        check("FileStreamSource", **{"transaction.boundary": "connector"})
    config = {"transaction.boundary": "Connector", "exactly.once.support": "required"}
    check_connector_config("bounded", _BoundedSource(), config)
    check("FileStreamSource", **{"transaction.boundary": "INTERVAL"})
    check("FileStreamSink", **{"transaction.boundary": "not read by sinks"})  # as Kafka


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"tasks.max": "0"}, r"tasks.max='0'"),
        ({"exactly.once.support": "always"}, r"exactly.once.support='always'"),
        ({"transaction.boundary": "batch"}, r"transaction.boundary='batch'"),
        ({"transaction.boundary.interval.ms": "-1"}, r"transaction.boundary.interval.ms='-1'"),
        ({"config.action.reload": "sometimes"}, r"config.action.reload='sometimes'"),
        ({"offsets.storage.topic": " "}, r"offsets.storage.topic"),
        ({"value.converter": "com.example.NoSuchConverter"}, r"value.converter="),
        ({"transforms": "t"}, r"transforms.t.type"),
        ({"errors.tolerance": "some"}, r"errors.tolerance"),
    ],
)
def test_values_kafka_refuses_are_refused_naming_the_key(
    config: dict[str, str], match: str
) -> None:
    with pytest.raises(InvalidConfigError, match=match):
        check("FileStreamSource", **config)


def test_a_sinks_topics_exclude_its_dead_letter_queue() -> None:
    with pytest.raises(InvalidConfigError, match=r"exactly one of topics and topics.regex"):
        check("FileStreamSink", **{"topics.regex": "lines.*"})
    with pytest.raises(InvalidConfigError, match=r"errors.deadletterqueue.topic.name='lines'"):
        check("FileStreamSink", **{"errors.deadletterqueue.topic.name": "lines"})
    check("FileStreamSink", **{"errors.deadletterqueue.topic.name": "lines-dlq"})


def test_the_runtime_reads_the_guarantee_and_boundary_in_any_case() -> None:
    assert exactly_once_required({"exactly.once.support": " Required "})
    assert not exactly_once_required({})
    assert transaction_boundary({"transaction.boundary": "INTERVAL"}) == "interval"
    assert transaction_boundary({}) == "poll"
