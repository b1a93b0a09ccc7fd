"""Replication policies: how a mirrored topic is named, and how a loop is recognised.

MirrorMaker 2's model. A topic ``orders`` of the cluster aliased ``primary`` becomes the
*remote topic* ``primary.orders`` on the target (:class:`DefaultReplicationPolicy`), so
the target keeps its own ``orders`` apart from the mirrored one, and an active/active
pair cannot loop: the flow ``backup -> primary`` meets ``primary.orders`` on ``backup``,
sees that it came from ``primary`` (its own target) and leaves it alone.
:class:`IdentityReplicationPolicy` keeps names (a migration, a one-way backup): it
cannot tell a mirrored topic from a local one, so it must not run in both directions.

Also MirrorMaker 2's names of the internal topics (offset syncs, checkpoints,
heartbeats) and of its default topic and group filters. Pure code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from raystream.errors import InvalidConfigError

HEARTBEATS_TOPIC = "heartbeats"
DEFAULT_SEPARATOR = "."

#: MM2's ``topics.exclude`` default: internal and replica topics are never mirrored.
DEFAULT_TOPICS_EXCLUDE = (r".*[\-\.]internal", r".*\.replica", r"__.*")
#: MM2's ``groups.exclude`` default.
DEFAULT_GROUPS_EXCLUDE = (r"console-consumer-.*", r"connect-.*", r"__.*")


class ReplicationPolicy:
    """Names remote topics and reads them back: MM2's ``ReplicationPolicy`` interface."""

    separator: str = DEFAULT_SEPARATOR

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        """The name ``topic`` of the cluster ``source_alias`` takes on the target."""
        raise NotImplementedError

    def topic_source(self, topic: str) -> str | None:
        """The alias of the cluster ``topic`` was mirrored from, or None if it is local."""
        raise NotImplementedError

    def upstream_topic(self, topic: str) -> str | None:
        """The name ``topic`` had on the cluster it was mirrored from (None if local)."""
        raise NotImplementedError

    def original_topic(self, topic: str) -> str:
        """The topic's name on the cluster it was first written to, through every hop."""
        upstream = self.upstream_topic(topic)
        if upstream is None or upstream == topic:
            return topic
        return self.original_topic(upstream)

    def offset_syncs_topic(self, alias: str) -> str:
        """Where the source task records which target offset a source offset became."""
        return f"mm2-offset-syncs{self.separator}{alias}{self.separator}internal"

    def checkpoints_topic(self, source_alias: str) -> str:
        """Where translated consumer group offsets of ``source_alias`` are kept."""
        return f"{source_alias}{self.separator}checkpoints{self.separator}internal"

    def offsets_topic(self, target_alias: str) -> str:
        """Where the flows into ``target_alias`` keep their source offsets
        (MM2's dedicated-mode ``connect-offsets`` topic)."""
        return f"mm2-offsets{self.separator}{target_alias}{self.separator}internal"

    def heartbeats_topic(self) -> str:
        """The heartbeats topic (the same name on every cluster)."""
        return HEARTBEATS_TOPIC

    def is_internal_topic(self, topic: str) -> bool:
        """Whether ``topic`` is MirrorMaker's or Kafka's own (never mirrored)."""
        return (
            topic.startswith("__")
            or topic.startswith(".")
            or topic.startswith("mm2-")
            or topic.endswith(".internal")
            or topic.endswith("-internal")
        )

    def is_cycle(self, topic: str, target_alias: str) -> bool:
        """Whether mirroring ``topic`` into ``target_alias`` would send it home: it came,
        over any number of hops, from ``target_alias`` itself (MM2's ``isCycle``).

        Example: with the default policy, ``primary.orders`` and
        ``backup.primary.orders`` are cycles for target ``primary``; ``orders`` is not.
        """
        source = self.topic_source(topic)
        if source is None:
            return False
        if source == target_alias:
            return True
        upstream = self.upstream_topic(topic)
        if upstream is None or upstream == topic:
            return False
        return self.is_cycle(upstream, target_alias)


class DefaultReplicationPolicy(ReplicationPolicy):
    """``<source-alias><separator><topic>``: MM2's default.

    Args:
        separator: ``replication.policy.separator`` (default ".").
    """

    def __init__(self, separator: str = DEFAULT_SEPARATOR) -> None:
        if not separator:
            raise InvalidConfigError("replication.policy.separator must not be empty")
        self.separator = separator

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        source, sep, rest = topic.partition(self.separator)
        if not sep or not source or not rest or self.is_internal_topic(topic):
            return None
        return source

    def upstream_topic(self, topic: str) -> str | None:
        if self.topic_source(topic) is None:
            return None
        return topic.partition(self.separator)[2]

    def __repr__(self) -> str:
        return f"DefaultReplicationPolicy(separator={self.separator!r})"


class IdentityReplicationPolicy(ReplicationPolicy):
    """Remote topics keep their names (MM2's ``IdentityReplicationPolicy``).

    Only the heartbeats topic is renamed as by the default policy (MM2 does the same:
    heartbeats from several sources must stay apart). With this policy a topic's origin
    is unknown, so loops are not detected: run it in one direction only.

    Args:
        source_alias: the source cluster's alias (``source.cluster.alias``).
        separator: used for the heartbeats topic and the internal topics.
    """

    def __init__(self, source_alias: str | None = None, separator: str = DEFAULT_SEPARATOR) -> None:
        self.source_alias = source_alias
        self.separator = separator

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        if topic == HEARTBEATS_TOPIC:
            return f"{source_alias}{self.separator}{topic}"
        return topic

    def topic_source(self, topic: str) -> str | None:
        if topic.endswith(f"{self.separator}{HEARTBEATS_TOPIC}"):
            return topic[: -len(HEARTBEATS_TOPIC) - len(self.separator)] or None
        return self.source_alias

    def upstream_topic(self, topic: str) -> str | None:
        if topic.endswith(f"{self.separator}{HEARTBEATS_TOPIC}"):
            return HEARTBEATS_TOPIC
        return topic

    def is_cycle(self, topic: str, target_alias: str) -> bool:
        """Only heartbeats can be told apart; every other topic looks local."""
        if not topic.endswith(f"{self.separator}{HEARTBEATS_TOPIC}"):
            return False
        return super().is_cycle(topic, target_alias)

    def __repr__(self) -> str:
        return f"IdentityReplicationPolicy(source_alias={self.source_alias!r})"


_POLICIES = {
    "DefaultReplicationPolicy": DefaultReplicationPolicy,
    "IdentityReplicationPolicy": IdentityReplicationPolicy,
}


def policy_from_config(
    class_name: str | None, source_alias: str, separator: str | None = None
) -> ReplicationPolicy:
    """The policy ``replication.policy.class`` names: a short name, MM2's Java class
    name (``org.apache.kafka.connect.mirror.DefaultReplicationPolicy``) or a dotted
    Python path to a :class:`ReplicationPolicy` subclass taking ``separator``.

    Raises:
        InvalidConfigError: an unknown class, naming it.
    """
    sep = DEFAULT_SEPARATOR if separator is None else separator
    short = (class_name or "DefaultReplicationPolicy").rsplit(".", 1)[-1]
    if short == "DefaultReplicationPolicy":
        return DefaultReplicationPolicy(sep)
    if short == "IdentityReplicationPolicy":
        return IdentityReplicationPolicy(source_alias, sep)
    import importlib

    module_name, _, attr = (class_name or "").rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr) if module_name else None
    except (ImportError, AttributeError):
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, ReplicationPolicy)):
        raise InvalidConfigError(
            f"replication.policy.class {class_name!r} is neither one of "
            f"{sorted(_POLICIES)} nor a ReplicationPolicy subclass"
        )
    return cls(separator=sep)


class TopicFilter:
    """MM2's ``topics`` / ``topics.exclude`` (or ``groups`` / ``groups.exclude``) pair:
    comma-separated regexes matched against the whole name; excludes win.

    Example: ``TopicFilter("orders.*, payments")`` takes ``orders-eu`` and ``payments``,
    not ``payments-eu`` nor ``__consumer_offsets`` (excluded by default).
    """

    def __init__(self, include: str | Iterable[str], exclude: str | Iterable[str] = ()) -> None:
        self.include = _compile(include, "include")
        self.exclude = _compile(exclude, "exclude")

    def matches(self, name: str) -> bool:
        """Whether ``name`` is included and not excluded."""
        return bool(self.include and self.include.fullmatch(name)) and not (
            self.exclude and self.exclude.fullmatch(name)
        )


def split_list(value: str | Iterable[str]) -> list[str]:
    """A Kafka list value: comma-separated, spaces around items ignored, empties dropped."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return [item.strip() for item in items if item.strip()]


def _compile(patterns: str | Iterable[str], what: str) -> re.Pattern[str] | None:
    items = split_list(patterns)
    if not items:
        return None
    for item in items:
        try:
            re.compile(item)
        except re.error as error:
            raise InvalidConfigError(f"{what} pattern {item!r} is not a regex: {error}") from None
    return re.compile("|".join(f"(?:{item})" for item in items))
