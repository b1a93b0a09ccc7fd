"""The per-API ACL checks of the Kafka listener, without Ray: real kio requests, a
backend that only holds the authorizer, and a handler that records what reached it."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import kio.schema.create_topics.v7.request as create_topics
import kio.schema.join_group.v9.request as join_group
import kio.schema.metadata.v12.request as metadata
import kio.schema.produce.v9.request as produce
import pytest

from raystream.dispatch import RequestContext
from raystream.errors import GroupAuthorizationError
from raystream.kafka.acl_checks import authorized_handle
from raystream.kafka.call import Call
from raystream.kafka.codec import Header
from raystream.security.acls import CLUSTER_NAME, AclBinding, Authorizer

ALICE = "User:alice"


class _Backend:
    def __init__(self, authorizer: Authorizer | None) -> None:
        self.authorizer = authorizer

    async def topic_by_id(self, topic_id: str) -> None:
        return None


def _run(api_key: int, request: Any, bindings: list[AclBinding] | None, answer: dict) -> tuple:
    """(the handler's request or None if not called, the answer)."""
    seen: list[Any] = []

    async def handler(call: Call, req: Any) -> dict:
        seen.append(req)
        return answer

    authorizer = None if bindings is None else Authorizer(bindings)
    call = Call(
        Header(api_key, 9, 1, "c"), RequestContext(ALICE, "kafka", "10.0.0.1"), _Backend(authorizer)
    )
    values = asyncio.run(authorized_handle(api_key, handler, call, request))
    return (seen[0] if seen else None), values


def _allow(op: str, rtype: str, name: str) -> AclBinding:
    return AclBinding(ALICE, "*", op, "Allow", rtype, name)


def _produce(*topics: str, txn: str | None = None) -> Any:
    return produce.ProduceRequest(
        transactional_id=txn,
        acks=1,
        timeout=datetime.timedelta(seconds=1),
        topic_data=tuple(
            produce.TopicProduceData(
                name=t, partition_data=(produce.PartitionProduceData(index=0, records=b"x"),)
            )
            for t in topics
        ),
    )


def test_produce_sends_on_only_the_writable_topics() -> None:
    seen, values = _run(
        0, _produce("ok", "secret"), [_allow("Write", "Topic", "ok")], {"responses": []}
    )
    assert [t.name for t in seen.topic_data] == ["ok"]
    assert values["responses"] == [
        {
            "name": "secret",
            "partition_responses": [
                {"index": 0, "error_code": 29, "base_offset": -1, "log_start_offset": -1}
            ],
        }
    ]


def test_transactional_produce_needs_write_on_the_transactional_id() -> None:
    seen, values = _run(
        0, _produce("ok", txn="tx"), [_allow("Write", "Topic", "ok")], {"responses": []}
    )
    assert seen.topic_data == ()
    assert values["responses"][0]["partition_responses"][0]["error_code"] == 53


def test_without_an_authorizer_the_request_is_untouched() -> None:
    request = _produce("secret")
    seen, _ = _run(0, request, None, {"responses": []})
    assert seen is request


def test_metadata_hides_listed_topics_and_refuses_named_ones() -> None:
    everything = metadata.MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    listed = {"topics": [{"name": "ok"}, {"name": "secret"}]}
    _, values = _run(3, everything, [_allow("Read", "Topic", "ok")], listed)
    assert values["topics"] == [{"name": "ok"}]
    named = metadata.MetadataRequest(
        topics=(metadata.MetadataRequestTopic(topic_id=None, name="secret"),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    seen, values = _run(3, named, [], {"topics": []})
    assert seen.topics == ()
    assert values["topics"][0]["error_code"] == 29


def test_a_single_group_api_is_refused_whole() -> None:
    request = join_group.JoinGroupRequest(
        group_id="g",
        session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(),
        reason=None,
    )
    with pytest.raises(GroupAuthorizationError, match="User:alice may not Read Group 'g'"):
        _run(11, request, [], {})
    seen, _ = _run(11, request, [_allow("Read", "Group", "g")], {})
    assert seen is request


@pytest.mark.parametrize(
    ("bindings", "created"),
    [
        ([_allow("Create", "Cluster", CLUSTER_NAME)], ["a", "b"]),
        ([_allow("Create", "Topic", "a")], ["a"]),
        ([], []),
    ],
)
def test_create_topics_needs_create_on_the_cluster_or_the_topic(
    bindings: list[AclBinding], created: list[str]
) -> None:
    request = create_topics.CreateTopicsRequest(
        topics=tuple(
            create_topics.CreatableTopic(
                name=n, num_partitions=1, replication_factor=1, assignments=(), configs=()
            )
            for n in ("a", "b")
        ),
        timeout=datetime.timedelta(seconds=1),
        validate_only=False,
    )
    seen, values = _run(19, request, bindings, {"topics": []})
    assert [t.name for t in seen.topics] == created
    refused = [t["name"] for t in values["topics"] if t["error_code"] == 29]
    assert refused == [n for n in ("a", "b") if n not in created]
