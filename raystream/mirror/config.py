"""MirrorMaker 2's configuration: the properties file, its flows and the connector configs.

A MirrorMaker 2 file names clusters by alias and enables flows between them::

    clusters = primary, backup
    primary.bootstrap.servers = kafka1:9092
    primary.security.protocol = SSL
    backup.raystream.namespace = raystream        # a raystream cluster on this Ray
    primary->backup.enabled = true
    primary->backup.topics = orders.*, payments
    groups = .*
    sync.group.offsets.enabled = true

A setting is looked up as ``<src>-><dst>.<key>``, then ``<key>``, then MM2's default.
A cluster's client settings are its ``<alias>.``-prefixed keys: Kafka client properties
(librdkafka's names: ``bootstrap.servers``, ``security.protocol``, ``ssl.ca.location``,
``sasl.mechanism``, ...; the Java client's ``ssl.truststore.*`` and ``ssl.keystore.*``
too, PEM or PKCS12) for any Kafka-protocol cluster, or ``raystream.namespace``
(and optionally ``raystream.address``, the Ray address) for a raystream cluster.
Hostname verification stays on for TLS: turning it off is refused.

Each flow becomes a :class:`FlowSettings`, and its connectors' configs are plain
``str -> str`` dicts with MM2's connector keys (``source.cluster.alias``,
``source.cluster.bootstrap.servers``, ``topics``, ...), so they could be posted to a
Connect worker as they are. Pure code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raystream.errors import InvalidConfigError
from raystream.mirror.policy import (
    DEFAULT_GROUPS_EXCLUDE,
    DEFAULT_SEPARATOR,
    DEFAULT_TOPICS_EXCLUDE,
    ReplicationPolicy,
    TopicFilter,
    policy_from_config,
    split_list,
)
from raystream.security.tls import store_type

RAYSTREAM_PREFIX = "raystream."
BYTES_CONVERTER = "org.apache.kafka.connect.converters.ByteArrayConverter"
_HOSTNAME_CHECK = "ssl.endpoint.identification.algorithm"


@dataclass(frozen=True)
class ClusterSpec:
    """Where a cluster is and how to reach it.

    ``namespace`` set: a raystream cluster (on this Ray, or the Ray at ``address``).
    Otherwise a Kafka-protocol cluster reached with the client properties ``kafka``
    (``bootstrap.servers`` at least): Apache Kafka, Tansu, or another raystream on
    another Ray cluster through its Kafka listener.
    """

    alias: str
    namespace: str | None = None
    address: str | None = None
    kafka: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.alias or any(c in self.alias for c in " ,>"):
            raise InvalidConfigError(f"cluster alias {self.alias!r} must be a non-empty word")
        if self.namespace is None and not self.kafka.get("bootstrap.servers"):
            raise InvalidConfigError(
                f"cluster {self.alias!r} needs {self.alias}.bootstrap.servers (a Kafka-protocol "
                f"cluster) or {self.alias}.raystream.namespace (a raystream cluster)"
            )
        for store in ("keystore", "truststore"):  # JKS refused now, with how to convert
            declared = self.kafka.get(f"ssl.{store}.type")
            if declared is not None:
                try:
                    store_type(
                        f"ssl.{store}.type", declared, self.kafka.get(f"ssl.{store}.location", "")
                    )
                except InvalidConfigError as error:
                    raise InvalidConfigError(f"cluster {self.alias!r}: {error}") from None
        check = self.kafka.get(_HOSTNAME_CHECK, "https").strip().lower()
        if check != "https":
            raise InvalidConfigError(
                f"{self.alias}.{_HOSTNAME_CHECK}={self.kafka[_HOSTNAME_CHECK]!r}: MirrorMaker "
                "keeps TLS hostname verification on ('https'); fix the certificate instead"
            )

    @property
    def is_raystream(self) -> bool:
        return self.namespace is not None

    @classmethod
    def from_properties(cls, alias: str, props: Mapping[str, str]) -> ClusterSpec:
        """The cluster of ``alias`` from keys without the alias prefix."""
        kafka = {k: v for k, v in props.items() if not k.startswith(RAYSTREAM_PREFIX)}
        return cls(
            alias=alias,
            namespace=props.get(RAYSTREAM_PREFIX + "namespace") or None,
            address=props.get(RAYSTREAM_PREFIX + "address") or None,
            kafka=kafka,
        )

    def to_properties(self) -> dict[str, str]:
        """The inverse of :meth:`from_properties`."""
        props = dict(self.kafka)
        if self.namespace is not None:
            props[RAYSTREAM_PREFIX + "namespace"] = self.namespace
        if self.address is not None:
            props[RAYSTREAM_PREFIX + "address"] = self.address
        return props


def _bool(value: str, key: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "enabled", "required", "1", "yes"):
        return True
    if lowered in ("false", "disabled", "0", "no", ""):
        return False
    raise InvalidConfigError(f"{key}={value!r} must be true or false")


def _seconds(value: str, key: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise InvalidConfigError(f"{key}={value!r} must be a number of seconds") from None
    if seconds <= 0:
        raise InvalidConfigError(f"{key}={value!r} must be > 0 seconds")
    return seconds


def _int(value: str, key: str, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise InvalidConfigError(f"{key}={value!r} must be an integer") from None
    if number < minimum:
        raise InvalidConfigError(f"{key}={value!r} must be >= {minimum}")
    return number


@dataclass(frozen=True)
class FlowSettings:
    """One replication flow ``source -> target`` and MM2's settings for it.

    Field names are MM2's keys with ``.`` as ``_`` (``*.interval.seconds`` in seconds,
    fractions allowed). ``topics``/``groups`` and their excludes are comma-separated
    regexes; ``exactly_once`` is KIP-618's ``exactly.once.source.support``.
    """

    source: ClusterSpec
    target: ClusterSpec
    topics: str = ".*"
    topics_exclude: str = ",".join(DEFAULT_TOPICS_EXCLUDE)
    groups: str = ".*"
    groups_exclude: str = ",".join(DEFAULT_GROUPS_EXCLUDE)
    replication_policy_class: str = "DefaultReplicationPolicy"
    replication_policy_separator: str = DEFAULT_SEPARATOR
    replication_factor: int | None = None
    sync_topic_configs_enabled: bool = True
    sync_topic_configs_interval_seconds: float = 600.0
    refresh_topics_interval_seconds: float = 600.0
    refresh_groups_interval_seconds: float = 600.0
    emit_checkpoints_enabled: bool = True
    emit_checkpoints_interval_seconds: float = 60.0
    sync_group_offsets_enabled: bool = False
    sync_group_offsets_interval_seconds: float = 60.0
    emit_heartbeats_enabled: bool = True
    emit_heartbeats_interval_seconds: float = 1.0
    offset_lag_max: int = 100
    exactly_once: bool = False

    def __post_init__(self) -> None:
        if self.source.alias == self.target.alias:
            raise InvalidConfigError(f"flow {self.name}: source and target are the same alias")
        TopicFilter(self.topics, self.topics_exclude)  # validates the regexes
        TopicFilter(self.groups, self.groups_exclude)
        self.policy()

    @property
    def name(self) -> str:
        """``<source>-><target>``, MM2's flow name."""
        return f"{self.source.alias}->{self.target.alias}"

    def policy(self) -> ReplicationPolicy:
        """The flow's replication policy."""
        return policy_from_config(
            self.replication_policy_class, self.source.alias, self.replication_policy_separator
        )

    def topic_filter(self) -> TopicFilter:
        return TopicFilter(self.topics, self.topics_exclude)

    def group_filter(self) -> TopicFilter:
        return TopicFilter(self.groups, self.groups_exclude)

    def to_connector_config(self) -> dict[str, str]:
        """MM2's connector config of this flow (the keys of :meth:`from_connector_config`)."""
        config = {
            "source.cluster.alias": self.source.alias,
            "target.cluster.alias": self.target.alias,
            # Records travel as the bytes they are, as MM2 configures its connectors.
            "key.converter": BYTES_CONVERTER,
            "value.converter": BYTES_CONVERTER,
        }
        for key, value in self.source.to_properties().items():
            config[f"source.cluster.{key}"] = value
        for key, value in self.target.to_properties().items():
            config[f"target.cluster.{key}"] = value
        for f in dataclasses.fields(self):
            if f.name in ("source", "target"):
                continue
            value = getattr(self, f.name)
            if value is None:
                continue
            key = _KEY_OF.get(f.name, f.name.replace("_", "."))
            config[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return config

    @classmethod
    def from_connector_config(cls, config: Mapping[str, str]) -> FlowSettings:
        """A flow from MM2's connector keys; unknown keys are ignored, as Connect does.

        Raises:
            InvalidConfigError: a missing alias or a bad value, naming the key.
        """
        clusters = {}
        for side in ("source", "target"):
            prefix = f"{side}.cluster."
            alias = config.get(prefix + "alias")
            if not alias:
                raise InvalidConfigError(f"{prefix}alias is missing")
            props = {k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix)}
            props.pop("alias")
            clusters[side] = ClusterSpec.from_properties(alias, props)
        return cls(
            source=clusters["source"], target=clusters["target"], **settings_from_keys(config)
        )


#: Field names whose MM2 key is not the field name with dots.
_KEY_OF = {"exactly_once": "exactly.once.source.support"}


def settings_from_keys(lookup: Mapping[str, str]) -> dict[str, Any]:
    """FlowSettings fields (but the clusters) from MM2 keys, validated."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(FlowSettings):
        if f.name in ("source", "target"):
            continue
        key = _KEY_OF.get(f.name, f.name.replace("_", "."))
        if key not in lookup:
            continue
        raw = lookup[key]
        if f.name.endswith("_enabled") or f.name == "exactly_once":
            values[f.name] = _bool(raw, key)
        elif f.name.endswith("_seconds"):
            values[f.name] = _seconds(raw, key)
        elif f.name in ("offset_lag_max", "replication_factor"):
            values[f.name] = _int(raw, key, 1 if f.name == "replication_factor" else 0)
        else:
            values[f.name] = raw.strip()
    return values


def flows_from_properties(props: Mapping[str, str]) -> list[FlowSettings]:
    """The enabled flows of a MirrorMaker 2 properties file's settings (as
    :func:`raystream.properties.read_properties` gives them).

    Raises:
        InvalidConfigError: no ``clusters``, a flow naming an unknown alias, a cluster
            without a way to reach it, or a bad value; the message names the key.
    """
    aliases = split_list(props.get("clusters", ""))
    if not aliases:
        raise InvalidConfigError("clusters is missing: list the cluster aliases, e.g. 'a, b'")
    specs = {}
    for alias in aliases:
        prefix = f"{alias}."
        specs[alias] = {k[len(prefix) :]: v for k, v in props.items() if k.startswith(prefix)}
    flows: list[FlowSettings] = []
    for key, value in props.items():
        head, arrow, rest = key.partition("->")
        if not arrow or "." not in rest:
            continue
        target_alias, _, setting = rest.partition(".")
        for alias in (head, target_alias):
            if alias not in specs:
                raise InvalidConfigError(f"{key}: {alias!r} is not one of clusters {aliases}")
        if setting != "enabled" or not _bool(value, key):
            continue
        flow_prefix = f"{head}->{target_alias}."
        lookup = {k: v for k, v in props.items() if "->" not in k and k.split(".")[0] not in specs}
        lookup.update(
            {k[len(flow_prefix) :]: v for k, v in props.items() if k.startswith(flow_prefix)}
        )
        flows.append(
            FlowSettings(
                source=ClusterSpec.from_properties(head, specs[head]),
                target=ClusterSpec.from_properties(target_alias, specs[target_alias]),
                **settings_from_keys(lookup),
            )
        )
    if not flows:
        raise InvalidConfigError("no flow is enabled: set e.g. 'a->b.enabled = true'")
    return sorted(flows, key=lambda flow: flow.name)
