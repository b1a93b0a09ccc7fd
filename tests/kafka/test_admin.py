"""Kafka's admin APIs on the listener: confluent-kafka's AdminClient and kafka-python's
KafkaAdminClient against raystream's controller, and raystream's own Admin seeing what
they did (and the reverse)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from raystream.errors import InvalidRequestError
from raystream.kafka.admin import (
    APPEND,
    DEFAULT_CONFIG,
    DELETE,
    DYNAMIC_TOPIC_CONFIG,
    SET,
    STATIC_BROKER_CONFIG,
    SUBTRACT,
    config_entries,
    incremental_changes,
    replace_changes,
)

_names = itertools.count()


def _name(prefix: str) -> str:
    return f"kadmin-{prefix}-{next(_names)}"


# ------------------------------------------------------------------ pure


def test_incremental_changes_set_delete_append_subtract() -> None:
    config = {"cleanup.policy": "delete", "retention.ms": 5}
    assert incremental_changes(
        config,
        [("cleanup.policy", APPEND, "compact,delete"), ("retention.ms", DELETE, None)],
    ) == {"cleanup.policy": "delete,compact", "retention.ms": None}
    assert incremental_changes(
        {"cleanup.policy": "delete,compact"}, [("cleanup.policy", SUBTRACT, "delete")]
    ) == {"cleanup.policy": "compact"}
    assert incremental_changes(config, [("flush.ms", SET, "9")]) == {"flush.ms": "9"}
    with pytest.raises(InvalidRequestError, match=r"'retention\.ms' is not a list"):
        incremental_changes(config, [("retention.ms", APPEND, "1")])
    with pytest.raises(InvalidRequestError, match="altered twice"):
        incremental_changes(config, [("flush.ms", SET, "1"), ("flush.ms", DELETE, None)])
    with pytest.raises(InvalidRequestError, match="unknown operation 7"):
        incremental_changes(config, [("flush.ms", 7, "1")])


def test_alter_configs_replaces_the_whole_set_of_overrides() -> None:
    assert replace_changes({"retention.ms": 5, "flush.ms": 9}, {"segment.ms": "7"}) == {
        "retention.ms": None,
        "flush.ms": None,
        "segment.ms": "7",
    }


def test_config_entries_tell_overrides_broker_settings_and_defaults_apart() -> None:
    entries = {
        e["name"]: e
        for e in config_entries(
            {
                "retention.ms": 5,
                "cleanup.policy": "delete",
                "min.insync.replicas": 2,
                "unclean.leader.election.enable": False,
            },
            {"retention.ms": 5},
            {"min.insync.replicas": 2},
        )
    }
    retention = entries["retention.ms"]
    assert (retention["value"], retention["config_source"]) == ("5", DYNAMIC_TOPIC_CONFIG)
    assert [s["source"] for s in retention["synonyms"]] == [DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG]
    assert retention["synonyms"][1]["value"] == str(7 * 24 * 3600 * 1000)
    assert entries["cleanup.policy"]["config_source"] == DEFAULT_CONFIG
    assert entries["min.insync.replicas"]["config_source"] == STATIC_BROKER_CONFIG
    assert entries["unclean.leader.election.enable"]["value"] == "false"


# ------------------------------------------------------- confluent-kafka


def _error_code(future: Any) -> int:
    from confluent_kafka import KafkaException

    try:
        future.result(timeout=120)
    except KafkaException as error:
        return error.args[0].code()
    return 0


def test_confluent_admin_creates_describes_alters_grows_and_deletes(
    bootstrap: str, kafka_cluster: Any, kafka_topic: Callable[..., str]
) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        NewPartitions,
        NewTopic,
        ResourceType,
    )

    client = AdminClient({"bootstrap.servers": bootstrap})
    rs_admin = kafka_cluster.admin()
    existing = kafka_topic()
    made, checked = _name("made"), _name("checked")

    # Create: one topic for real (-1: the defaults), one validate_only, and the errors.
    futures = client.create_topics(
        [NewTopic(made, num_partitions=2, replication_factor=-1, config={"retention.ms": "60000"})],
        request_timeout=120,
    )
    assert _error_code(futures[made]) == 0
    futures = client.create_topics(
        [
            NewTopic(checked, num_partitions=-1, replication_factor=-1),
            NewTopic(existing, num_partitions=1),
            NewTopic(_name("zero"), num_partitions=0),
            NewTopic(_name("rf"), num_partitions=1, replication_factor=0),
            NewTopic(_name("cfg"), num_partitions=1, config={"retention.ms": "soon"}),
            NewTopic(_name("key"), num_partitions=1, config={"no.such.key": "1"}),
        ],
        validate_only=True,
        request_timeout=60,
    )
    codes = {name: _error_code(f) for name, f in futures.items()}
    assert codes.pop(checked) == 0
    assert codes.pop(existing) == 36  # TOPIC_ALREADY_EXISTS
    assert sorted(codes.values()) == [37, 38, 40, 40]  # partitions, RF, two configs
    assert checked not in rs_admin.list_topics()

    described = rs_admin.describe_topic(made)
    assert len(described.partitions) == 2
    assert described.config["retention.ms"] == 60000

    # Describe configs: a topic (override vs default) and a broker.
    resource = ConfigResource(ResourceType.TOPIC, made)
    (entries,) = client.describe_configs([resource], request_timeout=30).values()
    entries = entries.result(timeout=30)
    assert entries["retention.ms"].value == "60000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].is_default
    (broker,) = client.describe_configs(
        [ConfigResource(ResourceType.BROKER, "0")], request_timeout=30
    ).values()
    broker = broker.result(timeout=30)
    assert broker["min.insync.replicas"].is_read_only

    # Incremental alter: SET, APPEND to a list, DELETE the override.
    changes = [
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("segment.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ]
    resource = ConfigResource(ResourceType.TOPIC, made, incremental_configs=changes)
    (future,) = client.incremental_alter_configs([resource], request_timeout=30).values()
    future.result(timeout=30)
    config = rs_admin.describe_topic(made).config
    assert config["cleanup.policy"] == "delete,compact"
    assert config["segment.ms"] == 3600000
    assert config["retention.ms"] == 7 * 24 * 3600 * 1000

    # Grow, then delete; raystream's Admin sees both.
    (future,) = client.create_partitions([NewPartitions(made, 3)], request_timeout=120).values()
    future.result(timeout=120)
    assert len(rs_admin.describe_topic(made).partitions) == 3
    (future,) = client.create_partitions([NewPartitions(made, 2)], request_timeout=30).values()
    assert _error_code(future) == 37
    (future,) = client.delete_topics([made], request_timeout=60).values()
    future.result(timeout=60)
    assert made not in rs_admin.list_topics()
    (future,) = client.delete_topics([made], request_timeout=60).values()
    assert _error_code(future) == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_confluent_describe_cluster_names_the_listener(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": bootstrap})  # kept alive for the future
    cluster = client.describe_cluster(request_timeout=30).result(timeout=30)
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    assert [(n.host, n.port) for n in cluster.nodes] == [(host, int(port))]
    assert cluster.controller.id == cluster.nodes[0].id
    assert cluster.cluster_id.startswith("raystream-")


# ---------------------------------------------------------- kafka-python


def test_kafka_python_admin_and_raystream_admin_see_each_other(
    bootstrap: str, kafka_cluster: Any, kafka_topic: Callable[..., str]
) -> None:
    from kafka.admin import (
        ConfigResource,
        ConfigResourceType,
        KafkaAdminClient,
        NewPartitions,
        NewTopic,
    )
    from kafka.errors import TopicAlreadyExistsError

    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
    rs_admin = kafka_cluster.admin()
    try:
        made = _name("kp")
        client.create_topics([NewTopic(made, 1, 1, topic_configs={"cleanup.policy": "compact"})])
        assert rs_admin.describe_topic(made).config["cleanup.policy"] == "compact"
        with pytest.raises(TopicAlreadyExistsError):
            client.create_topics([NewTopic(made, 1, 1)])

        # A topic raystream made, configured by raystream, read and altered by Kafka.
        theirs = kafka_topic(partitions=1, config={"retention.ms": 120000})
        described = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, theirs)])
        modified = described["topic"][theirs]  # kafka-python lists the overrides only
        assert set(modified) == {"retention.ms"}
        assert modified["retention.ms"]["value"] == "120000"
        # AlterConfigs (kafka-python re-sends the other overrides, as AlterConfigs
        # replaces the whole set).
        client.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, theirs, configs={"flush.ms": "1000"})],
            incremental=False,
        )
        config = rs_admin.describe_topic(theirs).config
        assert (config["flush.ms"], config["retention.ms"]) == (1000, 120000)

        client.create_partitions({theirs: NewPartitions(2)})
        assert len(rs_admin.describe_topic(theirs).partitions) == 2
        cluster = client.describe_cluster()
        assert len(cluster["brokers"]) == 1
        client.delete_topics([made, theirs])
        assert not {made, theirs} & set(rs_admin.list_topics())
    finally:
        client.close()
