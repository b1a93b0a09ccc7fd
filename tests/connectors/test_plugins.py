"""Every connector raystream ships resolves by its short name and by Kafka's class name."""

from __future__ import annotations

import pytest

from raystream.connectors import plugins
from raystream.connectors.api import Connector
from raystream.errors import InvalidConfigError


@pytest.mark.parametrize("name", sorted(plugins.BUILTINS))
def test_each_builtin_resolves_to_a_connector_class(name: str) -> None:
    cls = plugins.resolve(name)
    assert issubclass(cls, Connector)
    assert plugins.connector_type(cls) in ("source", "sink")
    assert plugins.resolve(f"{cls.__module__}.{cls.__qualname__}") is cls


@pytest.mark.parametrize("kafka_name", sorted(plugins.ALIASES))
def test_kafka_class_names_resolve(kafka_name: str) -> None:
    assert issubclass(plugins.resolve(kafka_name), Connector)


def test_an_unknown_class_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(InvalidConfigError, match="FileStreamSource"):
        plugins.resolve("NoSuchConnector")


def test_the_default_lifecycle_keeps_the_config_and_plans_the_usual_tasks() -> None:
    """A connector writes only what differs: a source is one task of its config, a
    sink's tasks share its partitions, and a single-file sink stays one task."""
    from raystream.connectors.api import SinkConnector, SourceConnector

    class Source(SourceConnector):
        def task_class(self) -> type:
            return object

    class Sink(SinkConnector):
        def task_class(self) -> type:
            return object

    source, sink = Source(), Sink()
    source.start({"topic": "t"})
    sink.start({"topics": "t"})
    assert source.task_configs(4) == [{"topic": "t"}]
    assert sink.task_configs(3) == [{"topics": "t"}] * 3
    file_sink = plugins.resolve("FileStreamSink")()
    file_sink.start({"file": "/tmp/x", "topics": "t"})
    assert len(file_sink.task_configs(3)) == 1
    source.stop()
