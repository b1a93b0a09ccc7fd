"""Kafka's consumer-group APIs: FindCoordinator, the classic group protocol (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup), offsets (OffsetCommit, OffsetFetch) and group admin
(ListGroups, DescribeGroups, DeleteGroups).

Translation only. Every handler turns the Kafka request into the typed requests of
:mod:`raystream.requests` for the group coordinator actor, which keeps the rules
(:class:`~raystream.groups.group.Group`: a Kafka client's group is client-assigned, its
leader's assignor decides, the coordinator passes metadata and assignments on unread)
and the state (``__consumer_offsets``, so raystream's tools see a Kafka group's
offsets). Raystream's own error codes are Kafka's, so an answer's code goes to the
client as it is. A coordinator that cannot be reached is COORDINATOR_NOT_AVAILABLE,
which makes clients look the coordinator up again and retry.

Batched versions (FindCoordinator v4+, LeaveGroup v3+, OffsetFetch v8+, DescribeGroups,
DeleteGroups) are served one item at a time, each with its own error. Pure: no Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raystream.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    InvalidRequestError,
    RaystreamError,
)
from raystream.kafka.call import NO_BROKER, NONE, Call, Endpoint
from raystream.protocol import Result, failure
from raystream.requests import (
    DeleteGroupRequest,
    DescribeGroupRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    Request,
    SyncGroupRequest,
)

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
CLASSIC_GROUP_TYPE = "classic"
DEAD = "Dead"
"""Kafka's state of a group that does not exist."""
NO_OFFSET = -1


async def _ask(call: Call, request: Request) -> Result:
    """``request``'s answer from the group coordinator; COORDINATOR_NOT_AVAILABLE if it
    cannot be reached (the client finds the coordinator again and retries)."""
    try:
        return await call.backend.coordinator(request)
    except RaystreamError as error:
        return failure(CoordinatorNotAvailableError(f"the group coordinator: {error}"))


# --------------------------------------------------------------- FindCoordinator


async def find_coordinator(call: Call, request: Any) -> Mapping[str, Any]:
    """Where the group (key_type 0) or transaction (1) coordinator is: the listener on
    the coordinator actor's node if that node runs one, else this listener (every
    listener reaches the coordinator). v4+ asks for several keys at once; they share
    the one coordinator."""
    batched = hasattr(request, "coordinator_keys")
    keys = request.coordinator_keys if batched else (request.key,)
    key_type = int(getattr(request, "key_type", GROUP_KEY_TYPE))
    found: dict[str, Any]
    try:
        if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
            raise InvalidRequestError(f"FindCoordinator key_type {key_type} is not 0 or 1")
        endpoint = await coordinator_endpoint(call, key_type == TRANSACTION_KEY_TYPE)
        found = {"error_code": NONE, "error_message": None, **_where(endpoint)}
    except RaystreamError as error:
        if not isinstance(error, InvalidRequestError):
            error = CoordinatorNotAvailableError(f"no coordinator yet: {error}")
        found = {"error_code": error.code, "error_message": str(error), "node_id": NO_BROKER}
        found |= {"host": "", "port": -1}
    if batched:
        return {"throttle_time": 0, "coordinators": [{"key": key, **found} for key in keys]}
    return {"throttle_time": 0, **found}


async def coordinator_endpoint(call: Call, transaction: bool) -> Endpoint:
    """The listener Kafka clients should send a coordinator's requests to.

    Raises:
        RaystreamError: the coordinator could not be started, or no listener is
            registered yet (retriable for the client).
    """
    backend = call.backend
    node = await backend.coordinator_node(transaction)
    brokers, node_ids = await backend.brokers()
    by_id = {b.broker_id: b for b in brokers}
    broker_id = node_ids.get(node or "", NO_BROKER)
    endpoint = by_id.get(broker_id) or by_id.get(backend.broker_id)
    if endpoint is None:
        raise CoordinatorNotAvailableError("no Kafka listener is registered yet")
    return endpoint


def _where(endpoint: Endpoint) -> dict[str, Any]:
    return {"node_id": endpoint.broker_id, "host": endpoint.host, "port": endpoint.port}


# --------------------------------------------------------- JoinGroup, SyncGroup


async def join_group(call: Call, request: Any) -> Mapping[str, Any]:
    """Join a client-assigned group; v4+ first answers MEMBER_ID_REQUIRED with the id
    to rejoin with (KIP-394). The leader's answer lists every member's metadata."""
    version = call.header.api_version
    session_ms = _ms(request.session_timeout)
    rebalance = getattr(request, "rebalance_timeout", None)  # v0: the session timeout
    joining = JoinGroupRequest(
        request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=call.header.client_id or "",
        protocols=tuple(p.name for p in request.protocols),
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=session_ms if rebalance is None else _ms(rebalance),
        protocol_type=request.protocol_type,
        protocol_metadata=tuple(bytes(p.metadata) for p in request.protocols),
        require_known_member_id=version >= 4,
    )
    answer = await _ask(call, joining)
    if answer.error_code != NONE:
        return {
            "throttle_time": 0,
            "error_code": answer.error_code,
            "generation_id": -1,
            "protocol_type": request.protocol_type,
            "protocol_name": "" if version < 7 else None,
            "leader": "",
            "member_id": answer.value if isinstance(answer.value, str) else request.member_id,
            "members": [],
        }
    joined = answer.value
    return {
        "throttle_time": 0,
        "error_code": NONE,
        "generation_id": joined.generation,
        "protocol_type": joined.protocol_type,
        "protocol_name": joined.protocol,
        "leader": joined.leader,
        "skip_assignment": False,
        "member_id": joined.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in joined.members
        ],
    }


async def sync_group(call: Call, request: Any) -> Mapping[str, Any]:
    """A member's SyncGroup: the leader's carries the assignments; each member's answer
    is its own, once the leader's arrived."""
    protocol_type = getattr(request, "protocol_type", None)
    protocol_name = getattr(request, "protocol_name", None)
    answer = await _ask(
        call,
        SyncGroupRequest(
            request.group_id,
            member_id=request.member_id,
            generation_id=request.generation_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=tuple((a.member_id, bytes(a.assignment)) for a in request.assignments),
        ),
    )
    return {
        "throttle_time": 0,
        "error_code": answer.error_code,
        "protocol_type": protocol_type,
        "protocol_name": protocol_name,
        "assignment": answer.value if answer.error_code == NONE else b"",
    }


# ------------------------------------------------------- Heartbeat, LeaveGroup


async def heartbeat(call: Call, request: Any) -> Mapping[str, Any]:
    """Keep a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
    answer = await _ask(
        call,
        HeartbeatRequest(
            request.group_id,
            member_id=request.member_id,
            generation_id=request.generation_id,
            group_instance_id=getattr(request, "group_instance_id", None),
        ),
    )
    return {"throttle_time": 0, "error_code": answer.error_code}


async def leave_group(call: Call, request: Any) -> Mapping[str, Any]:
    """Members leave (v3+: several, a static one by its instance id alone), each with
    its own error; the others rebalance."""
    if not hasattr(request, "members"):
        answer = await _ask(call, LeaveGroupRequest(request.group_id, request.member_id))
        return {"throttle_time": 0, "error_code": answer.error_code}
    members = []
    for member in request.members:
        answer = await _ask(
            call,
            LeaveGroupRequest(
                request.group_id,
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
            ),
        )
        members.append(
            {
                "member_id": answer.value or member.member_id,
                "group_instance_id": member.group_instance_id,
                "error_code": answer.error_code,
            }
        )
    return {"throttle_time": 0, "error_code": NONE, "members": members}


# ---------------------------------------------------------------------- offsets


async def offset_commit(call: Call, request: Any) -> Mapping[str, Any]:
    """Commit offsets, all or none (one error for every partition): a member with its
    id and generation, anyone else with "" and -1 while the group has no members."""
    items = tuple(
        (topic.name, p.partition_index, p.committed_offset, p.committed_metadata or "")
        for topic in request.topics
        for p in topic.partitions
    )
    code = NONE
    if items:
        answer = await _ask(
            call,
            OffsetCommitRequest(
                request.group_id,
                member_id=request.member_id,
                generation_id=request.generation_id_or_member_epoch,
                offsets=items,
            ),
        )
        code = answer.error_code
    return {
        "throttle_time": 0,
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": code}
                    for p in topic.partitions
                ],
            }
            for topic in request.topics
        ],
    }


async def offset_fetch(call: Call, request: Any) -> Mapping[str, Any]:
    """Committed offsets of a group (v8+: of several groups), of the asked partitions
    or (topics null) of every committed one; -1 where nothing is committed. With
    ``require_stable`` a group with a transaction open on its offsets answers
    UNSTABLE_OFFSET_COMMIT (retriable)."""
    require_stable = bool(getattr(request, "require_stable", False))
    if hasattr(request, "groups"):
        groups = [
            await _group_offsets(call, g.group_id, g.topics, require_stable) for g in request.groups
        ]
        return {"throttle_time": 0, "groups": groups}
    found = await _group_offsets(call, request.group_id, request.topics, require_stable)
    return {"throttle_time": 0, "topics": found["topics"], "error_code": found["error_code"]}


async def _group_offsets(
    call: Call, group_id: str, topics: Any, require_stable: bool
) -> dict[str, Any]:
    """One group of an OffsetFetch answer."""
    wanted = (
        None
        if topics is None
        else tuple((t.name, int(p)) for t in topics for p in t.partition_indexes)
    )
    answer = await _ask(
        call, OffsetFetchRequest(group_id, wanted, require_stable, with_metadata=True)
    )
    committed: dict[tuple[str, int], tuple[int, str]] = (
        {(tp.topic, tp.partition): v for tp, v in answer.value.items()}
        if answer.error_code == NONE
        else {}
    )
    keys = sorted(committed) if wanted is None else list(wanted)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition in keys:
        offset, metadata = committed.get((topic, partition), (NO_OFFSET, ""))
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "metadata": metadata,
                "error_code": answer.error_code,
            }
        )
    return {
        "group_id": group_id,
        "error_code": answer.error_code,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }


# -------------------------------------------------------------------- group admin


async def list_groups(call: Call, request: Any) -> Mapping[str, Any]:
    """Every group with members or committed offsets, with its protocol type and state
    (v4+: only the asked states; v5+: only the asked types, all classic here).

    Kafka's admin clients ask every broker and join the answers, so only the listener
    FindCoordinator names lists the groups; the others answer an empty list.
    """
    try:
        endpoint = await coordinator_endpoint(call, transaction=False)
    except RaystreamError as error:
        return {"throttle_time": 0, "error_code": error.code, "groups": []}
    if endpoint.broker_id != call.backend.broker_id:
        return {"throttle_time": 0, "error_code": NONE, "groups": []}
    answer = await _ask(call, ListGroupsRequest(with_state=True))
    if answer.error_code != NONE:
        return {"throttle_time": 0, "error_code": answer.error_code, "groups": []}
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    groups = [
        {
            "group_id": g["group_id"],
            "protocol_type": g["protocol_type"],
            "group_state": g["state"],
            "group_type": CLASSIC_GROUP_TYPE,
        }
        for g in answer.value
        if (not states or g["state"].lower() in states)
        and (not types or CLASSIC_GROUP_TYPE in types)
    ]
    return {"throttle_time": 0, "error_code": NONE, "groups": groups}


async def describe_groups(call: Call, request: Any) -> Mapping[str, Any]:
    """State, protocol and members (with their metadata and assignment bytes) of each
    asked group; a group that does not exist is "Dead" (v6+: with GROUP_ID_NOT_FOUND)."""
    version = call.header.api_version
    described = []
    for group_id in request.groups:
        answer = await _ask(call, DescribeGroupRequest(group_id))
        if answer.error_code != NONE:
            missing = answer.error_code == GroupIdNotFoundError.code
            code = NONE if missing and version < 6 else answer.error_code
            described.append(
                {
                    "error_code": code,
                    "error_message": answer.message or None,
                    "group_id": group_id,
                    "group_state": DEAD,
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                }
            )
            continue
        info = answer.value
        described.append(
            {
                "error_code": NONE,
                "group_id": group_id,
                "group_state": info["state"],
                "protocol_type": info["protocol_type"] or "",
                "protocol_data": info["protocol"] or "",
                "members": [
                    {
                        "member_id": member_id,
                        "group_instance_id": m["group_instance_id"],
                        "client_id": m["client_id"],
                        "client_host": m["client_host"],
                        "member_metadata": m["metadata"],
                        "member_assignment": m["assignment_bytes"],
                    }
                    for member_id, m in info["members"].items()
                ],
            }
        )
    return {"throttle_time": 0, "groups": described}


async def delete_groups(call: Call, request: Any) -> Mapping[str, Any]:
    """Delete groups without members (their offsets too), each with its own error
    (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND)."""
    results = []
    for group_id in request.groups_names:
        answer = await _ask(call, DeleteGroupRequest(group_id))
        results.append({"group_id": group_id, "error_code": answer.error_code})
    return {"throttle_time": 0, "results": results}


def _ms(value: Any) -> int:
    """Milliseconds of a kio duration (a timedelta)."""
    return int(value.total_seconds() * 1000)


__all__ = [
    "coordinator_endpoint",
    "delete_groups",
    "describe_groups",
    "find_coordinator",
    "heartbeat",
    "join_group",
    "leave_group",
    "list_groups",
    "offset_commit",
    "offset_fetch",
    "sync_group",
]
