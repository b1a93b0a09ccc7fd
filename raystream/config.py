"""Configuration objects shared by every role.

Each role (topic, producer, consumer, broker defaults) has a frozen dataclass whose
fields are Kafka's option names with ``.`` replaced by ``_``: ``retention.ms`` is
``retention_ms``. Values are validated on construction, and the error names the bad
key and value. Nothing here reads environment variables.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from raystream.errors import InvalidConfigError

C = TypeVar("C", bound="KafkaConfig")


@dataclasses.dataclass(frozen=True)
class KafkaConfig:
    """Base of the config dataclasses: conversion from and to Kafka's dotted names."""

    @classmethod
    def field_names(cls) -> set[str]:
        """The snake_case option names this config accepts."""
        return {f.name for f in dataclasses.fields(cls)}

    @classmethod
    def from_kafka(cls: type[C], options: Mapping[str, Any] | None = None, **kwargs: Any) -> C:
        """Build from a mapping keyed by Kafka's dotted names or our snake_case names.

        Raises:
            InvalidConfigError: a key is unknown or a value is invalid.
        """
        return cls().with_options(options, **kwargs)

    def with_options(self: C, options: Mapping[str, Any] | None = None, **kwargs: Any) -> C:
        """A copy with the given options (dotted or snake_case names) changed."""
        merged = {**dict(options or {}), **kwargs}
        known = self.field_names()
        changes: dict[str, Any] = {}
        for key, value in merged.items():
            if not isinstance(key, str):
                raise InvalidConfigError(f"config key {key!r} is not a string")
            name = key.replace(".", "_")
            if name not in known:
                raise InvalidConfigError(
                    f"unknown {type(self).__name__} key {key!r}; known keys: "
                    + ", ".join(sorted(k.replace("_", ".") for k in known))
                )
            changes[name] = _coerce(key, value, getattr(self, name))
        return dataclasses.replace(self, **changes)

    def to_kafka(self) -> dict[str, Any]:
        """The options under Kafka's dotted names."""
        return {f.name.replace("_", "."): getattr(self, f.name) for f in dataclasses.fields(self)}


def _coerce(key: str, value: Any, default: Any) -> Any:
    """Convert a value given as text (CLI, Kafka-style maps) to the option's type."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise InvalidConfigError(f"config {key}={value!r}: expected true or false")
    if isinstance(default, int):
        if isinstance(value, bool):
            raise InvalidConfigError(f"config {key}={value!r}: expected an integer")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"config {key}={value!r}: expected an integer") from None
    if isinstance(default, str) and not isinstance(value, str):
        raise InvalidConfigError(f"config {key}={value!r}: expected a string")
    return value


def require(condition: bool, owner: str, name: str, value: Any, expected: str) -> None:
    """Raise InvalidConfigError naming the option and value unless ``condition`` holds."""
    if not condition:
        raise InvalidConfigError(f"{owner} {name.replace('_', '.')}={value!r}: {expected}")


@dataclasses.dataclass(frozen=True)
class BrokerConfig(KafkaConfig):
    """Cluster-wide server settings, fixed when the controller starts.

    Attributes:
        data_dir: directory on every node under which replicas keep their logs
            (Kafka's ``log.dirs``); the controller keeps its metadata log there too.
        default_replication_factor: replication factor when create_topic gives none.
        min_insync_replicas: default for topics that do not set it.
        log_retention_check_interval_ms: how often replicas apply retention/compaction.
        log_flush_scheduler_interval_ms: how often replicas check ``flush.ms``.
        replica_lag_time_max_ms: a follower not caught up for this long leaves the ISR.
    """

    data_dir: str = ""
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    log_retention_check_interval_ms: int = 300_000
    log_flush_scheduler_interval_ms: int = 1000
    replica_lag_time_max_ms: int = 30_000

    def __post_init__(self) -> None:
        for name in (
            "default_replication_factor",
            "min_insync_replicas",
            "log_retention_check_interval_ms",
            "log_flush_scheduler_interval_ms",
            "replica_lag_time_max_ms",
        ):
            value = getattr(self, name)
            require(value >= 1, "broker config", name, value, "must be >= 1")
