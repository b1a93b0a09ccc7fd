"""Replication policies, loop detection and topic filters: pure, no Ray."""

from __future__ import annotations

import pytest

from raystream.errors import InvalidConfigError
from raystream.mirror.config import ClusterSpec, FlowSettings
from raystream.mirror.connectors import mirrored_topics, spread
from raystream.mirror.policy import (
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    TopicFilter,
    policy_from_config,
)


def test_default_policy_prefixes_the_source_alias_and_reads_it_back() -> None:
    policy = DefaultReplicationPolicy()
    assert policy.format_remote_topic("primary", "orders") == "primary.orders"
    assert policy.topic_source("primary.orders") == "primary"
    assert policy.upstream_topic("primary.orders") == "orders"
    assert policy.topic_source("orders") is None
    assert policy.original_topic("backup.primary.orders") == "orders"
    assert policy.topic_source("primary.checkpoints.internal") is None  # MM2's own


def test_a_custom_separator_names_remote_and_internal_topics() -> None:
    policy = DefaultReplicationPolicy("_")
    assert policy.format_remote_topic("eu", "orders.v2") == "eu_orders.v2"
    assert policy.topic_source("eu_orders.v2") == "eu"
    assert policy.offset_syncs_topic("eu") == "mm2-offset-syncs_eu_internal"
    assert policy.checkpoints_topic("eu") == "eu_checkpoints_internal"


def test_a_topic_on_its_way_home_is_a_cycle_over_any_number_of_hops() -> None:
    policy = DefaultReplicationPolicy()
    assert policy.is_cycle("primary.orders", "primary")
    assert policy.is_cycle("backup.primary.orders", "primary")
    assert not policy.is_cycle("backup.orders", "primary")
    assert not policy.is_cycle("orders", "primary")


def test_identity_policy_keeps_names_and_only_knows_heartbeats_origin() -> None:
    policy = IdentityReplicationPolicy("primary")
    assert policy.format_remote_topic("primary", "orders") == "orders"
    assert policy.format_remote_topic("primary", "heartbeats") == "primary.heartbeats"
    assert policy.upstream_topic("orders") == "orders"
    assert policy.original_topic("orders") == "orders"
    assert not policy.is_cycle("orders", "primary")
    assert policy.is_cycle("primary.heartbeats", "primary")


def test_policy_from_config_takes_short_java_and_python_names() -> None:
    java = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
    assert isinstance(policy_from_config(java, "a"), IdentityReplicationPolicy)
    python = "raystream.mirror.policy.DefaultReplicationPolicy"
    assert policy_from_config(python, "a", "-").separator == "-"
    with pytest.raises(InvalidConfigError, match="NoSuchPolicy"):
        policy_from_config("com.example.NoSuchPolicy", "a")


def test_topic_filter_matches_whole_names_and_excludes_win() -> None:
    wanted = TopicFilter("orders.*, payments", r"orders\.tmp")
    assert wanted.matches("orders-eu") and wanted.matches("payments")
    assert not wanted.matches("payments-eu") and not wanted.matches("orders.tmp")
    with pytest.raises(InvalidConfigError, match=r"\[oops"):
        TopicFilter("[oops")


def flow(**settings: object) -> FlowSettings:
    return FlowSettings(
        source=ClusterSpec("a", kafka={"bootstrap.servers": "h:9092"}),
        target=ClusterSpec("b", namespace="ns"),
        **settings,
    )


def test_mirrored_topics_leave_out_internal_topics_and_loops_but_keep_heartbeats() -> None:
    topics = [
        "orders",
        "b.orders",  # came from the target: going home
        "c.b.orders",  # came from the target over c
        "c.orders",
        "heartbeats",
        "b.heartbeats",
        "c.heartbeats",
        "mm2-offset-syncs.b.internal",
        "a.checkpoints.internal",
        "__consumer_offsets",
        "logs",
    ]
    assert mirrored_topics(flow(topics="orders, c.orders"), topics) == [
        "c.heartbeats",
        "c.orders",
        "heartbeats",
        "orders",
    ]


def test_spread_deals_round_robin_into_at_most_max_tasks() -> None:
    assert spread([1, 2, 3, 4, 5], 2) == [[1, 3, 5], [2, 4]]
    assert spread([1], 4) == [[1]]
    assert spread([], 3) == []
