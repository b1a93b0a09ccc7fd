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
