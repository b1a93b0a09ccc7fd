"""Pure controller logic: topic naming rules, placement, metadata records (no Ray)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from raystream.controller.metadata import (
    PartitionState,
    TopicState,
    check_not_internal,
    is_internal,
    topic_counts,
    validate_count,
    validate_topic_name,
)
from raystream.controller.placement import (
    REPLICA_MEMORY_BYTES,
    check_capacity,
    is_spread,
    place_replicas,
    rebind_restarted_nodes,
    replica_limits,
)
from raystream.controller.producer_ids import ProducerIdBlocks
from raystream.errors import (
    IllegalStateError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
)


@pytest.mark.parametrize("name", ["orders", "a.b_c-d", "X" * 249, "__consumer_offsets", "0"])
def test_legal_topic_names_are_accepted(name: str) -> None:
    assert validate_topic_name(name) == name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "empty"),
        (".", "not allowed"),
        ("..", "not allowed"),
        ("a" * 250, "over 249"),
        ("has space", "outside"),
        ("slash/name", "outside"),
        ("ünicode", "outside"),
        (42, "must be a string"),
    ],
)
def test_illegal_topic_names_are_refused_with_the_reason(name: object, reason: str) -> None:
    with pytest.raises(InvalidTopicError, match=reason):
        validate_topic_name(name)


@pytest.mark.parametrize("value", [0, -1, 1.5, "3", True, None])
def test_partition_counts_must_be_positive_integers(value: object) -> None:
    with pytest.raises(InvalidPartitionsError, match="partitions"):
        validate_count(value, "partitions")


def test_replication_factor_errors_have_their_own_type() -> None:
    with pytest.raises(
        InvalidReplicationFactorError, match="replication_factor must be >= 1, not 0"
    ):
        validate_count(0, "replication_factor")


def test_internal_topics_start_with_two_underscores() -> None:
    assert is_internal("__consumer_offsets")
    assert not is_internal("_private")


def test_placement_rotates_leaders_and_spreads_replicas() -> None:
    placement = place_replicas(["a", "b", "c"], partitions=4, replication_factor=2)
    assert placement == [["a", "b"], ["b", "c"], ["c", "a"], ["a", "b"]]
    assert all(is_spread(p) for p in placement)


def test_placement_continues_the_rotation_when_partitions_are_added() -> None:
    first = place_replicas(["a", "b", "c"], 2, 1)
    more = place_replicas(["a", "b", "c"], 2, 1, first=2)
    assert first + more == place_replicas(["a", "b", "c"], 4, 1)


def test_placement_shares_nodes_when_there_are_too_few() -> None:
    (placement,) = place_replicas(["only"], 1, 3)
    assert placement == ["only", "only", "only"]
    assert not is_spread(placement)


def test_placement_needs_a_node() -> None:
    with pytest.raises(ValueError, match="no alive nodes"):
        place_replicas([], 1, 1)


def test_topic_state_round_trips_through_its_metadata_record() -> None:
    schema = pa.schema([("amount", pa.float64()), ("customer", pa.string())])
    state = TopicState(
        name="orders",
        topic_id="abc",
        partitions=[
            PartitionState(
                0, [0, 1], {0: "n1", 1: "n2"}, leader=1, leader_epoch=3, isr=[1], hosts={0: "h1"}
            )
        ],
        config={"retention.ms": 1000},
        value_schema=schema.serialize().to_pybytes(),
    )
    again = TopicState.from_json(state.to_json())
    assert again == state
    assert again.schema().equals(schema)
    assert again.partitions[0].nodes == {0: "n1", 1: "n2"}
    assert again.partitions[0].hosts == {0: "h1"}


def test_a_record_written_before_hosts_were_kept_reads_with_none() -> None:
    state = TopicState("t", "id", [PartitionState(0, [0], {0: "n1"}, leader=0)])
    record = state.to_json().replace('"hosts": {}, ', "")
    assert '"hosts"' not in record
    assert TopicState.from_json(record).partitions[0].hosts == {}


def _topic(name: str, nodes: dict[int, str], hosts: dict[int, str]) -> TopicState:
    return TopicState(
        name, name, [PartitionState(0, sorted(nodes), dict(nodes), leader=0, hosts=dict(hosts))]
    )


def test_replicas_of_a_restarted_ray_find_their_nodes_again_by_address() -> None:
    # Ray restarted: every node has a new id; the addresses stayed.
    moved = _topic("moved", {0: "old-a", 1: "old-b"}, {0: "10.0.0.1", 1: "10.0.0.2"})
    live = _topic("live", {0: "new-a"}, {0: "10.0.0.1"})
    gone = _topic("gone", {0: "old-c"}, {0: "10.0.0.3"})  # that machine is gone
    hosts = {"new-a": "10.0.0.1", "new-b": "10.0.0.2"}
    assert rebind_restarted_nodes([moved, live, gone], hosts) == [moved]
    assert moved.partitions[0].nodes == {0: "new-a", 1: "new-b"}
    assert live.partitions[0].nodes == {0: "new-a"}
    assert gone.partitions[0].nodes == {0: "old-c"}  # lost with its node


def test_replicas_recorded_without_an_address_move_only_to_a_single_machine() -> None:
    legacy = _topic("legacy", {0: "old"}, {})
    assert rebind_restarted_nodes([legacy], {"x": "10.0.0.1", "y": "10.0.0.2"}) == []
    assert legacy.partitions[0].nodes == {0: "old"}
    # Several nodes of one machine (one address): the disk can only be there.
    assert rebind_restarted_nodes([legacy], {"y": "10.0.0.1", "x": "10.0.0.1"}) == [legacy]
    assert legacy.partitions[0].nodes == {0: "x"}


def test_producer_ids_come_from_blocks_reserved_before_use() -> None:
    ids = ProducerIdBlocks(reserved_end=0, block_size=2)
    with pytest.raises(IllegalStateError):
        ids.next_id()  # nothing reserved yet
    assert ids.block_to_reserve() == 2
    ids.reserved(2)
    assert [ids.next_id(), ids.next_id()] == [0, 1]
    assert ids.block_to_reserve() == 4


def test_a_restart_from_the_durable_block_end_never_repeats_an_id() -> None:
    first = ProducerIdBlocks(reserved_end=0, block_size=10)
    first.reserved(first.block_to_reserve())
    handed = [first.next_id() for _ in range(3)]
    again = ProducerIdBlocks(reserved_end=first.reserved_end, block_size=10)
    again.reserved(again.block_to_reserve())
    assert again.next_id() == 10 and 10 not in handed


INTERNAL = ["__consumer_offsets", "__transaction_state", "__cluster_metadata"]


@pytest.mark.parametrize("name", INTERNAL)
@pytest.mark.parametrize("action", ["create", "delete", "add partitions to", "alter the config of"])
def test_client_changes_to_internal_topics_are_refused_by_name(name: str, action: str) -> None:
    with pytest.raises(InvalidTopicError, match=f"cannot {action} topic '{name}'.*internal"):
        check_not_internal(name, action)
    assert not InvalidTopicError.retriable


def test_other_topics_may_be_changed() -> None:
    for name in ("orders", "_single_underscore", "a__b"):
        check_not_internal(name, "delete")


def test_a_topic_being_created_shows_clients_only_its_finished_partitions() -> None:
    partitions = [PartitionState(p, [0], {0: "n1"}, leader=0) for p in range(3)]
    topic = TopicState("t", "id", partitions, creating_from=0)
    assert topic.visible_partitions() == []
    topic.creating_from = 2  # partitions 2.. are being added
    assert topic.visible_partitions() == partitions[:2]
    assert TopicState.from_json(topic.to_json()) == topic
    topic.creating_from = None
    assert topic.visible_partitions() == partitions


def test_visible_partitions_do_not_grow_under_a_caller_that_holds_them() -> None:
    """describe_topic reads them outside the lock while create_partitions appends."""
    topic = TopicState("t", "id", [PartitionState(0, [0], {0: "n1"}, leader=0)])
    seen = topic.visible_partitions()
    topic.partitions.append(PartitionState(1, [0], {0: "n1"}, leader=0))
    assert len(seen) == 1


def test_a_record_written_before_atomic_creation_reads_as_created() -> None:
    record = TopicState("t", "id", []).to_json().replace('"creating_from": null, ', "")
    assert "creating_from" not in record
    assert TopicState.from_json(record).creating_from is None


def test_replica_limits_come_from_node_memory_unless_configured() -> None:
    memory = {"big": 64 * REPLICA_MEMORY_BYTES + 1, "tiny": 1000.0}
    assert replica_limits(memory, 0) == {"big": 64, "tiny": 1}
    assert replica_limits(memory, 5) == {"big": 5, "tiny": 5}


def test_placement_up_to_each_nodes_limit_is_accepted() -> None:
    placement = place_replicas(["a", "b"], 4, 2)  # 4 replicas on each node
    check_capacity("t", placement, Counter({"a": 1, "b": 1}), {"a": 5, "b": 5})


def test_placement_over_a_nodes_limit_is_refused_naming_count_and_limit() -> None:
    placement = place_replicas(["a", "b"], 6, 1)  # 3 replicas on each node
    existing = Counter({"a": 2, "b": 0})
    with pytest.raises(InvalidPartitionsError) as refused:
        check_capacity("big", placement, existing, {"a": 4, "b": 4})
    message = str(refused.value)
    assert "6 new partitions of topic 'big'" in message
    assert "5 replicas on node a, over its limit of 4" in message
    assert "room for 6 more replicas" in message
    assert not refused.value.retriable


def _sized_topic(
    name: str, partitions: int, replicas: int, creating_from: int | None = None
) -> TopicState:
    return TopicState(
        name=name,
        topic_id=f"id-{name}",
        partitions=[
            PartitionState(p, list(range(replicas)), dict.fromkeys(range(replicas), "n"), 0)
            for p in range(partitions)
        ],
        creating_from=creating_from,
    )


def test_topic_counts_count_the_same_topics_in_every_figure_internal_ones_apart() -> None:
    """A 3-partition topic and the offsets topic: 1 topic of 3 partitions and 3 replicas,
    not 4 and 4 (the offsets topic was once counted in two figures and not the third)."""
    topics = [_sized_topic("orders", 3, 1), _sized_topic("__consumer_offsets", 1, 1)]
    assert topic_counts(topics) == {
        "topics": 1,
        "partitions": 3,
        "replicas": 3,
        "internal_topics": 1,
        "internal_partitions": 1,
        "internal_replicas": 1,
    }


def test_topic_counts_leave_out_what_clients_do_not_see_yet() -> None:
    """A topic being created is not counted; of one being grown from 2 to 4 partitions,
    the 2 clients see are, with their replicas."""
    topics = [
        _sized_topic("new", 5, 3, creating_from=0),
        _sized_topic("growing", 4, 3, creating_from=2),
    ]
    counts = topic_counts(topics)
    assert (counts["topics"], counts["partitions"], counts["replicas"]) == (1, 2, 6)
    assert counts["internal_topics"] == counts["internal_partitions"] == 0
