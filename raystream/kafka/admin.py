"""Kafka's admin APIs: topics, partitions, configs and the cluster's description.

CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs and DescribeCluster, each a translation into the controller
calls raystream's own :class:`~raystream.client.admin.Admin` makes (``create_topic``,
``delete_topic``, ``create_partitions``, ``alter_topic_config``, ``topic_config``,
``broker_config``), so a topic made by a Kafka admin is the same thing as one made by
raystream's, and the controller's checks (names, counts, config values, internal
topics) answer both. Errors go into each topic's or resource's own entry, as Kafka
answers them: one bad topic of a CreateTopics does not fail the others.

Configs: a topic's keys are Kafka's (``retention.ms``, ``cleanup.policy``, ...: the
controller stores them under those names). DescribeConfigs tells a topic's overrides
(DYNAMIC_TOPIC_CONFIG) from the defaults (DEFAULT_CONFIG; ``min.insync.replicas``
comes from the broker config, STATIC_BROKER_CONFIG); a broker resource lists the
cluster's broker config, read-only: raystream fixes it when the cluster starts. AlterConfigs
replaces a topic's overrides as a whole (keys it does not name fall back to their
defaults, as in Kafka); IncrementalAlterConfigs SETs, DELETEs (back to the default),
APPENDs to or SUBTRACTs from list values (``cleanup.policy``) one key at a time. The
config arithmetic is pure (:func:`incremental_changes`, :func:`config_entries`).

Pure: no Ray here; the listener actor provides the Backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from raystream.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    RaystreamError,
)
from raystream.kafka.call import NO_BROKER, NONE, Call
from raystream.log import LogConfig

DEFAULT_PARTITIONS = 1
"""Partitions of a CreateTopics topic asking for -1 (Kafka's ``num.partitions`` default)."""
INVALID_REPLICA_ASSIGNMENT = 39
UNKNOWN_TOPIC_ID = 100

# Resource types (Kafka's ConfigResource.Type).
TOPIC = 2
BROKER = 4

# Config sources (Kafka's DescribeConfigsResponse.ConfigSource).
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# Config types (Kafka's ConfigDef.Type as DescribeConfigs v3+ numbers them).
BOOLEAN, STRING, INT, LONG, LIST = 1, 2, 3, 5, 7
_INT_KEYS = frozenset({"segment.bytes", "index.interval.bytes", "max.message.bytes"})
_INT_KEYS |= {"min.insync.replicas"}
_LIST_KEYS = frozenset({"cleanup.policy"})

# IncrementalAlterConfigs operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _error(error: RaystreamError) -> dict[str, Any]:
    return {"error_code": error.code, "error_message": str(error)}


def _ms(value: Any) -> int:
    """Milliseconds of a kio duration (a timedelta) or of a plain number."""
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    return int(value)


# ------------------------------------------------------------------ CreateTopics


async def create_topics(call: Call, request: Any) -> Mapping[str, Any]:
    """Create each topic (concurrently: each is its replicas' start-up), or with
    ``validate_only`` make every check a creation makes and create nothing."""
    broker = await call.backend.controller("broker_config")
    results = await asyncio.gather(
        *(_create_topic(call, topic, request.validate_only, broker) for topic in request.topics)
    )
    return {"throttle_time": 0, "topics": list(results)}


async def _create_topic(
    call: Call, topic: Any, validate_only: bool, broker: Mapping[str, Any]
) -> dict[str, Any]:
    name = topic.name
    entry: dict[str, Any] = {"name": name, "topic_config_error_code": NONE}
    try:
        if topic.assignments:
            return {
                **entry,
                "error_code": INVALID_REPLICA_ASSIGNMENT,
                "error_message": f"topic {name!r}: manual replica assignments are not "
                "supported; raystream places replicas itself (give a replication factor)",
            }
        partitions = DEFAULT_PARTITIONS if topic.num_partitions == -1 else topic.num_partitions
        replication = None if topic.replication_factor == -1 else topic.replication_factor
        overrides: dict[str, Any] = {}
        for config in topic.configs:
            if config.name in overrides:
                raise InvalidConfigError(f"topic {name!r}: config {config.name!r} given twice")
            if config.value is None:
                raise InvalidConfigError(f"topic {name!r}: config {config.name!r} has no value")
            overrides[config.name] = config.value
        created = await call.backend.controller(
            "create_topic", name, partitions, replication, overrides, None, None, validate_only
        )
    except RaystreamError as error:
        return {**entry, **_error(error)}
    if created is None:  # validate_only: the values the topic would have
        rf = replication or int(broker.get("default.replication.factor", 1))
        config = _topic_defaults(broker).with_options(overrides).to_kafka()
        topic_id = None
    else:
        partitions, rf = len(created.partitions), len(created.partitions[0].replicas)
        config, topic_id = created.config, created.topic_id or None
    return {
        **entry,
        "error_code": NONE,
        "topic_id": topic_id,
        "num_partitions": partitions,
        "replication_factor": rf,
        "configs": [
            {
                "name": e["name"],
                "value": e["value"],
                "read_only": e["read_only"],
                "config_source": e["config_source"],
                "is_sensitive": False,
            }
            for e in config_entries(config, overrides, broker)
        ],
    }


def _topic_defaults(broker: Mapping[str, Any]) -> LogConfig:
    """A topic's config with no overrides: LogConfig's defaults and the broker's
    ``min.insync.replicas`` (as the controller makes them)."""
    return LogConfig(min_insync_replicas=int(broker.get("min.insync.replicas", 1)))


# ------------------------------------------------------------------ DeleteTopics


async def delete_topics(call: Call, request: Any) -> Mapping[str, Any]:
    """Delete each topic, named or (v6+) given by its topic id."""
    if hasattr(request, "topic_names"):  # v1-v5: names only
        wanted = [(name, None) for name in request.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    by_id: dict[str, str] | None = None
    if any(name is None for name, _ in wanted):
        found = await call.backend.topics(None)
        by_id = {
            m.topic_id.replace("-", ""): m.name
            for m in found
            if not isinstance(m, RaystreamError) and m.topic_id
        }
    results = []
    for name, topic_id in wanted:
        if name is None:
            assert by_id is not None
            name = by_id.get(topic_id.hex if topic_id is not None else "")
            if name is None:
                unknown = {
                    "name": None,
                    "topic_id": topic_id,
                    "error_code": UNKNOWN_TOPIC_ID,
                    "error_message": f"no topic has id {topic_id}",
                }
                results.append(_done(unknown))
                continue
        results.append(_delete_topic(call, name, topic_id))
    return {"throttle_time": 0, "responses": list(await asyncio.gather(*results))}


async def _delete_topic(call: Call, name: str, topic_id: Any) -> dict[str, Any]:
    entry = {"name": name, "topic_id": topic_id}
    try:
        await call.backend.controller("delete_topic", name)
    except RaystreamError as error:
        return {**entry, **_error(error)}
    return {**entry, "error_code": NONE}


async def _done(value: dict[str, Any]) -> dict[str, Any]:
    return value


# -------------------------------------------------------------- CreatePartitions


async def create_partitions(call: Call, request: Any) -> Mapping[str, Any]:
    """Grow each topic to its new count (``validate_only``: only check the count)."""
    results = await asyncio.gather(
        *(_grow(call, topic, request.validate_only) for topic in request.topics)
    )
    return {"throttle_time": 0, "results": list(results)}


async def _grow(call: Call, topic: Any, validate_only: bool) -> dict[str, Any]:
    entry = {"name": topic.name}
    try:
        if topic.assignments:
            return {
                **entry,
                "error_code": INVALID_REPLICA_ASSIGNMENT,
                "error_message": f"topic {topic.name!r}: manual replica assignments are not "
                "supported; raystream places replicas itself",
            }
        if validate_only:
            (meta,) = await call.backend.topics([topic.name])
            if isinstance(meta, RaystreamError):
                raise meta
            if topic.count <= len(meta.partitions):
                raise InvalidPartitionsError(
                    f"topic {topic.name!r} has {len(meta.partitions)} partitions; the new "
                    f"total {topic.count} must be larger"
                )
        else:
            await call.backend.controller("create_partitions", topic.name, topic.count)
    except RaystreamError as error:
        return {**entry, **_error(error)}
    return {**entry, "error_code": NONE, "error_message": None}


# --------------------------------------------------------------- DescribeConfigs


def config_value(value: Any) -> str:
    """A config value as Kafka's text (booleans lower-case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def config_type(name: str, value: Any) -> int:
    """Kafka's type number of a config (DescribeConfigs v3+)."""
    if name in _LIST_KEYS:
        return LIST
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        return INT if name in _INT_KEYS else LONG
    return STRING


def config_entries(
    config: Mapping[str, Any], overrides: Mapping[str, Any], broker: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """A topic's config as DescribeConfigs entries: value, source and synonyms.

    ``config`` is every key in force, ``overrides`` the keys set on the topic,
    ``broker`` the broker config. Synonyms go from the most to the least specific,
    as Kafka lists them: the topic's override, the broker's setting, the default.

    Example:
        >>> [e["config_source"] for e in config_entries(
        ...     {"retention.ms": 5, "cleanup.policy": "delete", "min.insync.replicas": 2},
        ...     {"retention.ms": 5}, {"min.insync.replicas": 2})]
        [1, 5, 4]
    """
    defaults = LogConfig().to_kafka()
    entries = []
    for name, value in config.items():
        synonyms = []
        if name in overrides:
            synonyms.append((name, value, DYNAMIC_TOPIC_CONFIG))
        if name == "min.insync.replicas" and name in broker:
            synonyms.append((name, broker[name], STATIC_BROKER_CONFIG))
        synonyms.append((name, defaults.get(name, value), DEFAULT_CONFIG))
        entries.append(
            {
                "name": name,
                "value": config_value(value),
                "read_only": False,
                "config_source": synonyms[0][2],
                "is_sensitive": False,
                "synonyms": [
                    {"name": n, "value": config_value(v), "source": s} for n, v, s in synonyms
                ],
                "config_type": config_type(name, value),
                "documentation": None,
            }
        )
    return entries


def broker_entries(broker: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The broker config as DescribeConfigs entries: read-only, fixed at start-up; a
    password (``ssl.key.password``) is marked sensitive and its value withheld, as
    Kafka does."""
    entries = []
    for name, value in sorted(broker.items()):
        sensitive = "password" in name
        shown = None if sensitive else config_value(value)
        entries.append(
            {
                "name": name,
                "value": shown,
                "read_only": True,
                "config_source": STATIC_BROKER_CONFIG,
                "is_sensitive": sensitive,
                "synonyms": [{"name": name, "value": shown, "source": STATIC_BROKER_CONFIG}],
                "config_type": config_type(name, value),
                "documentation": None,
            }
        )
    return entries


async def describe_configs(call: Call, request: Any) -> Mapping[str, Any]:
    """The configs of each topic or broker resource (only the asked keys, if any)."""
    broker = await call.backend.controller("broker_config")
    include_synonyms = getattr(request, "include_synonyms", False)
    results = []
    for resource in request.resources:
        entry = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
        try:
            if resource.resource_type == TOPIC:
                found = await call.backend.controller("topic_config", resource.resource_name)
                configs = config_entries(found["config"], found["overrides"], broker)
            elif resource.resource_type == BROKER:
                _broker_id(resource.resource_name)
                configs = broker_entries(broker)
            else:
                raise InvalidRequestError(
                    f"config resource type {resource.resource_type} is not served (only topics "
                    f"({TOPIC}) and brokers ({BROKER}))"
                )
        except RaystreamError as error:
            results.append({**entry, **_error(error), "configs": []})
            continue
        keys = resource.configuration_keys
        if keys is not None:
            configs = [c for c in configs if c["name"] in keys]
        if not include_synonyms:
            configs = [{**c, "synonyms": []} for c in configs]
        results.append({**entry, "error_code": NONE, "error_message": None, "configs": configs})
    return {"throttle_time": 0, "results": results}


def _broker_id(name: str) -> int:
    """A broker resource's name: a broker id, or empty for the cluster-wide default."""
    if name == "":
        return NO_BROKER
    try:
        return int(name)
    except ValueError:
        raise InvalidRequestError(f"broker resource name {name!r} is not a broker id") from None


# ---------------------------------------------------------- AlterConfigs (both)


def replace_changes(
    overrides: Mapping[str, Any], wanted: Mapping[str, str | None]
) -> dict[str, Any]:
    """AlterConfigs' changes: ``wanted`` becomes the topic's whole set of overrides,
    so every other override is removed (None).

    Example:
        >>> replace_changes({"retention.ms": 5, "flush.ms": 9}, {"retention.ms": "7"})
        {'flush.ms': None, 'retention.ms': '7'}
    """
    changes: dict[str, Any] = {k: None for k in overrides if k not in wanted}
    changes.update(wanted)
    return changes


def incremental_changes(config: Mapping[str, Any], operations: list[Any]) -> dict[str, Any]:
    """IncrementalAlterConfigs' changes from ``(name, op, value)`` operations over a
    topic's config in force: SET a value, DELETE (None: back to the default), APPEND
    to or SUBTRACT from a list value (Kafka's comma-separated lists).

    Raises:
        InvalidRequestError: a key named twice, an unknown operation, or APPEND/SUBTRACT
            on a key that is not a list.

    Example:
        >>> incremental_changes({"cleanup.policy": "delete"},
        ...                     [("cleanup.policy", APPEND, "compact"), ("flush.ms", DELETE, None)])
        {'cleanup.policy': 'delete,compact', 'flush.ms': None}
    """
    changes: dict[str, Any] = {}
    for name, op, value in operations:
        if name in changes:
            raise InvalidRequestError(f"config {name!r} is altered twice in one request")
        if op == SET:
            changes[name] = value
        elif op == DELETE:
            changes[name] = None
        elif op in (APPEND, SUBTRACT):
            if name not in _LIST_KEYS:
                raise InvalidRequestError(
                    f"config {name!r} is not a list: APPEND and SUBTRACT apply to "
                    f"{', '.join(sorted(_LIST_KEYS))} only"
                )
            current = [v for v in str(config.get(name, "")).split(",") if v]
            given = [v.strip() for v in (value or "").split(",") if v.strip()]
            if op == APPEND:
                current += [v for v in given if v not in current]
            else:
                current = [v for v in current if v not in given]
            changes[name] = ",".join(current)
        else:
            raise InvalidRequestError(f"config {name!r}: unknown operation {op}")
    return changes


async def alter_configs(call: Call, request: Any) -> Mapping[str, Any]:
    """Replace each topic's overrides with the given ones."""

    async def changes_of(resource: Any) -> dict[str, Any]:
        wanted: dict[str, Any] = {}
        for config in resource.configs:
            if config.name in wanted:
                raise InvalidRequestError(f"config {config.name!r} is given twice")
            wanted[config.name] = config.value
        found = await call.backend.controller("topic_config", resource.resource_name)
        return replace_changes(found["overrides"], wanted)

    return await _alter(call, request, changes_of)


async def incremental_alter_configs(call: Call, request: Any) -> Mapping[str, Any]:
    """Apply each topic's SET/DELETE/APPEND/SUBTRACT operations."""

    async def changes_of(resource: Any) -> dict[str, Any]:
        found = await call.backend.controller("topic_config", resource.resource_name)
        operations = [(c.name, c.config_operation, c.value) for c in resource.configs]
        return incremental_changes(found["config"], operations)

    return await _alter(call, request, changes_of)


async def _alter(call: Call, request: Any, changes_of: Any) -> Mapping[str, Any]:
    responses = []
    for resource in request.resources:
        entry = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
        try:
            if resource.resource_type == BROKER:
                raise InvalidRequestError(
                    "raystream's broker config is fixed when the cluster starts "
                    "(raystream up --config); it cannot be altered"
                )
            if resource.resource_type != TOPIC:
                raise InvalidRequestError(
                    f"config resource type {resource.resource_type} cannot be altered (only "
                    f"topics ({TOPIC}))"
                )
            changes = await changes_of(resource)
            await call.backend.controller(
                "alter_topic_config", resource.resource_name, changes, request.validate_only
            )
        except RaystreamError as error:
            responses.append({**entry, **_error(error)})
            continue
        responses.append({**entry, "error_code": NONE, "error_message": None})
    return {"throttle_time": 0, "responses": responses}


# --------------------------------------------------------------- DescribeCluster


async def describe_cluster(call: Call, request: Any) -> Mapping[str, Any]:
    """The live listeners as brokers, the controller id Metadata gives, the cluster id."""
    brokers, _ = await call.backend.brokers()
    live = sorted({b.broker_id for b in brokers})
    return {
        "throttle_time": 0,
        "error_code": NONE,
        "error_message": None,
        "endpoint_type": getattr(request, "endpoint_type", 1),
        "cluster_id": call.backend.cluster_id,
        "controller_id": live[0] if live else NO_BROKER,
        "brokers": [
            {
                "broker_id": b.broker_id,
                "host": b.host,
                "port": b.port,
                "rack": b.rack,
                "is_fenced": False,
            }
            for b in brokers
        ],
        "cluster_authorized_operations": -2147483648,
    }


__all__ = [
    "alter_configs",
    "broker_entries",
    "config_entries",
    "create_partitions",
    "create_topics",
    "delete_topics",
    "describe_cluster",
    "describe_configs",
    "incremental_alter_configs",
    "incremental_changes",
    "replace_changes",
]
