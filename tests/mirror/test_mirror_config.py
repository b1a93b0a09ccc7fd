"""MirrorMaker 2 properties files and connector configs: pure, no Ray."""

from __future__ import annotations

import pytest

from raystream.errors import InvalidConfigError
from raystream.mirror.config import ClusterSpec, FlowSettings, flows_from_properties
from raystream.mirror.connectors import check_workers_target
from raystream.properties import parse_properties

MM2 = """
# two clusters, one direction enabled
clusters = primary, backup
primary.bootstrap.servers = kafka1:9092
primary.security.protocol: SASL_SSL
primary.sasl.mechanism = SCRAM-SHA-512
backup.raystream.namespace = raystream

primary->backup.enabled = true
primary->backup.topics = orders.*, \\
    payments
backup->primary.enabled = false
groups = .*
sync.group.offsets.enabled = true
emit.checkpoints.interval.seconds = 5
primary->backup.emit.checkpoints.interval.seconds = 2
replication.policy.class = org.apache.kafka.connect.mirror.DefaultReplicationPolicy
exactly.once.source.support = enabled
"""


def test_an_mm2_file_gives_its_enabled_flows_with_flow_settings_first() -> None:
    (flow,) = flows_from_properties(parse_properties(MM2))
    assert flow.name == "primary->backup"
    assert flow.source.kafka == {
        "bootstrap.servers": "kafka1:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
    }
    assert flow.target.namespace == "raystream" and flow.target.is_raystream
    assert flow.topics == "orders.*, payments"
    assert flow.sync_group_offsets_enabled and flow.exactly_once
    assert flow.emit_checkpoints_interval_seconds == 2.0  # the flow's own value wins
    assert flow.emit_heartbeats_enabled  # MM2's default


def test_a_flow_survives_the_round_trip_through_its_connector_config() -> None:
    (flow,) = flows_from_properties(parse_properties(MM2))
    config = flow.to_connector_config()
    assert config["source.cluster.alias"] == "primary"
    assert config["source.cluster.bootstrap.servers"] == "kafka1:9092"
    assert config["target.cluster.raystream.namespace"] == "raystream"
    assert config["exactly.once.source.support"] == "true"
    assert FlowSettings.from_connector_config(config) == flow


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("a.bootstrap.servers = x:1\n", "clusters is missing"),
        ("clusters = a, b\na.bootstrap.servers=x:1\nb.raystream.namespace=n\n", "no flow"),
        ("clusters = a\na->c.enabled = true\n", "'c' is not one of clusters"),
        (
            "clusters = a, b\nb.raystream.namespace=n\na->b.enabled = true\n",
            "a.bootstrap.servers",
        ),
        (
            "clusters=a,b\na.bootstrap.servers=x:1\nb.raystream.namespace=n\na->b.enabled=true\n"
            "emit.checkpoints.interval.seconds = soon\n",
            "emit.checkpoints.interval.seconds='soon'",
        ),
        ("clusters = a\nbroken = \\u00\n", r"\\u00"),
    ],
)
def test_bad_files_are_refused_naming_what_is_wrong(text: str, match: str) -> None:
    with pytest.raises(InvalidConfigError, match=match):
        flows_from_properties(parse_properties(text))


def test_a_kafka_cluster_alias_may_be_the_target_and_both_directions_run() -> None:
    text = (
        "clusters = ray, kafka\n"
        "ray.raystream.namespace = m\n"
        "kafka.bootstrap.servers = k:9092\n"
        "ray->kafka.enabled = true\n"
        "kafka->ray.enabled = true\n"
        "ray->kafka.exactly.once.source.support = enabled\n"
    )
    back, out = flows_from_properties(parse_properties(text))
    assert (back.name, out.name) == ("kafka->ray", "ray->kafka")
    assert out.source.is_raystream and not out.target.is_raystream
    assert out.target.kafka == {"bootstrap.servers": "k:9092"} and out.exactly_once
    assert not back.exactly_once
    assert FlowSettings.from_connector_config(out.to_connector_config()) == out


def test_a_kafka_target_needs_an_alias_in_mirror_maker() -> None:
    from raystream.mirror.maker import flow_of

    class Target:
        namespace = "ns"
        controller = None

    with pytest.raises(InvalidConfigError, match="target_alias="):
        flow_of(
            Target(), Target(), ".*", ".*", "ray", False, None, None, {"bootstrap.servers": "k:1"}
        )
    flow = flow_of(
        Target(), Target(), ".*", ".*", "ray", False, "kafka", None, {"bootstrap.servers": "k:1"}
    )
    assert flow.name == "ray->kafka" and flow.target.kafka["bootstrap.servers"] == "k:1"


def test_tls_hostname_verification_cannot_be_turned_off() -> None:
    props = {"bootstrap.servers": "k:9093", "ssl.endpoint.identification.algorithm": "none"}
    with pytest.raises(InvalidConfigError, match="hostname verification"):
        ClusterSpec("a", kafka=props)
    ok = ClusterSpec("a", kafka={"bootstrap.servers": "k:9093", "security.protocol": "SSL"})
    assert ok.kafka["security.protocol"] == "SSL"


def test_mirror_makers_source_argument_names_a_namespace_or_kafka_properties() -> None:
    from raystream.mirror.maker import source_spec

    raystream = source_spec("primary", {"namespace": "other"})
    assert raystream.is_raystream and raystream.namespace == "other"
    kafka = source_spec("primary", {"bootstrap.servers": "k:9092", "security.protocol": "SSL"})
    assert not kafka.is_raystream and kafka.kafka["security.protocol"] == "SSL"
    with pytest.raises(InvalidConfigError, match="source="):
        source_spec("primary", "k:9092")
    with pytest.raises(InvalidConfigError, match=r"primary\.bootstrap\.servers"):
        source_spec("primary", {"security.protocol": "SSL"})


def test_connector_configs_carry_bytes_converters_for_a_connect_worker() -> None:
    (flow,) = flows_from_properties(parse_properties(MM2))
    config = flow.to_connector_config()
    assert config["value.converter"].endswith("ByteArrayConverter")
    assert config["key.converter"] == config["value.converter"]


def test_on_connect_workers_a_flow_must_target_the_workers_cluster() -> None:
    """The workers write a MirrorMaker connector's records into their own cluster, so a
    flow aimed elsewhere is refused, naming the key, instead of splitting the remote
    topics (created on the target) from the records (written here)."""
    (into_raystream,) = flows_from_properties(parse_properties(MM2))
    check_workers_target(into_raystream, "raystream")
    with pytest.raises(InvalidConfigError, match=r"target\.cluster\.raystream\.namespace='rays"):
        check_workers_target(into_raystream, "elsewhere")
    into_kafka = FlowSettings(
        source=into_raystream.target, target=into_raystream.source, topics="orders"
    )
    with pytest.raises(
        InvalidConfigError,
        match=r"target\.cluster\.alias='primary' is a Kafka-protocol cluster "
        r"\(target\.cluster\.bootstrap\.servers='kafka1:9092'\).*raystream mirror",
    ):
        check_workers_target(into_kafka, "raystream")
