"""Which ACL each Kafka API needs, in one table: :data:`CHECKS`, API key -> check.

Why one table in front of the handlers: every rule is in one place, as in Kafka's
KafkaApis, and a refused entry never reaches a handler, so nothing a refused request
carried is sent on (a refused produce appends nothing). The server calls
:func:`authorized_handle` with the listener's
:class:`~raystream.security.acls.Authorizer` (None: the authorizer is off and every
request goes straight to its handler).

A check either lets the request through (returns None), refuses all of it by raising
an :class:`~raystream.errors.AuthorizationError` (for responses with a top-level error
code), or returns a :class:`Verdict`: the request with the refused entries removed for
the handler, and the answers of the refused entries (Kafka's
TOPIC/GROUP/CLUSTER/TRANSACTIONAL_ID_AUTHORIZATION_FAILED per partition or entry)
merged into the handler's answer. Denials are audited by the Authorizer. Pure: no Ray.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from raystream.errors import (
    AuthorizationError,
    ClusterAuthorizationError,
    GroupAuthorizationError,
    TransactionalIdAuthorizationError,
)
from raystream.kafka.call import Call, Handler
from raystream.security.acls import CLUSTER_NAME, Authorizer

TOPIC_DENIED = AuthorizationError.code
GROUP_DENIED = GroupAuthorizationError.code
CLUSTER_DENIED = ClusterAuthorizationError.code
TXN_DENIED = TransactionalIdAuthorizationError.code
TOPIC_CONFIG, BROKER_CONFIG, BROKER_LOGGER_CONFIG = 2, 4, 8
"""DescribeConfigs/AlterConfigs resource types."""


@dataclass(frozen=True, slots=True)
class Who:
    """The requester, and the authorizer that judges it."""

    authorizer: Authorizer
    principal: str
    host: str

    def allows(self, operation: str, resource_type: str, name: str, audit: bool = True) -> bool:
        """Whether the requester may do ``operation`` on the resource."""
        return self.authorizer.authorize(
            self.principal, self.host, operation, resource_type, name, audit
        )

    def require(self, operation: str, resource_type: str, name: str) -> None:
        """Raise the resource type's AuthorizationError unless allowed."""
        if not self.allows(operation, resource_type, name):
            raise REFUSALS[resource_type](
                f"{self.principal} may not {operation} {resource_type} {name!r}"
            )


REFUSALS: dict[str, type[AuthorizationError]] = {
    "Topic": AuthorizationError,
    "Group": GroupAuthorizationError,
    "Cluster": ClusterAuthorizationError,
    "TransactionalId": TransactionalIdAuthorizationError,
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """A request partly (or wholly) refused: what the handler gets and what to add to
    its answer."""

    request: Any
    merge: Callable[[Mapping[str, Any] | None], Mapping[str, Any] | None]


Check = Callable[[Call, Who, Any], Awaitable[Verdict | None]]


async def authorized_handle(
    api_key: int, handler: Handler, call: Call, request: Any
) -> Mapping[str, Any] | None:
    """The handler's answer to the request, after its API's check (see the module).
    A backend without an ``authorizer`` attribute has ACLs off (test and embedded
    backends that serve one broker need not know of them)."""
    authorizer = getattr(call.backend, "authorizer", None)
    check = CHECKS.get(api_key)
    if authorizer is None or check is None:
        return await handler(call, request)
    who = Who(authorizer, call.context.principal, call.context.host)
    verdict = await check(call, who, request)
    if verdict is None:
        return await handler(call, request)
    return verdict.merge(await handler(call, verdict.request))


def _added(field: str, entries: list[dict[str, Any]]) -> Callable[[Any], Any]:
    """A merge adding ``entries`` to the answer's list ``field``."""

    def merge(values: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        if values is None or not entries:
            return values
        return {**values, field: [*values.get(field, ()), *entries]}

    return merge


def _split(
    request: Any, field: str, refused: Callable[[Any], bool]
) -> tuple[Any, list[Any]] | None:
    """``request`` without the entries of list ``field`` that ``refused`` says are
    refused, and those entries; None if none is."""
    entries = getattr(request, field)
    denied = [e for e in entries if refused(e)]
    if not denied:
        return None
    kept = tuple(e for e in entries if not refused(e))
    return dataclasses.replace(request, **{field: kept}), denied


async def _names(call: Call, entries: Any, *attrs: str) -> dict[int, tuple[str, Any]]:
    """Each entry's topic name (from the first attribute of ``attrs`` it has, else from
    its ``topic_id``) and the key the response names it by, by ``id()``."""
    found: dict[int, tuple[str, Any]] = {}
    for entry in entries:
        for attr in attrs:
            value = getattr(entry, attr, None)
            if value is not None:
                found[id(entry)] = (value, value)
                break
        else:
            meta = await call.backend.topic_by_id(entry.topic_id.hex)
            # an unknown id is judged as a name nobody is granted: refused, not revealed
            found[id(entry)] = ("" if meta is None else meta.name, entry.topic_id)
    return found


def _topic_check(
    field: str,
    operation: str,
    name_attrs: tuple[str, ...],
    response_field: str,
    entry: Callable[[Any, Any, int], dict[str, Any]],
) -> Check:
    """A check of an API whose request lists topics (``field``): each topic needs
    ``operation``; a refused one is answered with ``entry(topic, key, code)`` in the
    response's ``response_field``."""

    async def check(call: Call, who: Who, request: Any) -> Verdict | None:
        entries = getattr(request, field)
        names = await _names(call, entries, *name_attrs)
        split = _split(
            request, field, lambda t: not who.allows(operation, "Topic", names[id(t)][0])
        )
        if split is None:
            return None
        kept, denied = split
        answers = [entry(t, names[id(t)][1], TOPIC_DENIED) for t in denied]
        return Verdict(kept, _added(response_field, answers))

    return check


def _key_field(key: Any, name_field: str) -> str:
    return name_field if isinstance(key, str) else "topic_id"


# ---------------------------------------------------------------------- data APIs


async def _produce(call: Call, who: Who, request: Any) -> Verdict | None:
    txn = request.transactional_id
    if txn is not None and not who.allows("Write", "TransactionalId", txn):
        answers = [_produce_entry(t, _produce_key(t), TXN_DENIED) for t in request.topic_data]
        return Verdict(dataclasses.replace(request, topic_data=()), _added("responses", answers))
    return await _produce_topics(call, who, request)


def _produce_key(topic: Any) -> Any:
    return topic.name if hasattr(topic, "name") else topic.topic_id


def _produce_entry(topic: Any, key: Any, code: int) -> dict[str, Any]:
    return {
        _key_field(key, "name"): key,
        "partition_responses": [
            {"index": p.index, "error_code": code, "base_offset": -1, "log_start_offset": -1}
            for p in topic.partition_data
        ],
    }


_produce_topics = _topic_check("topic_data", "Write", ("name",), "responses", _produce_entry)


def _fetch_entry(topic: Any, key: Any, code: int) -> dict[str, Any]:
    return {
        _key_field(key, "topic"): key,
        "partitions": [
            {
                "partition_index": p.partition,
                "error_code": code,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
            }
            for p in topic.partitions
        ],
    }


def _partitions_entry(name_field: str, index_field: str, **extra: Any) -> Callable:
    def entry(topic: Any, key: Any, code: int) -> dict[str, Any]:
        return {
            name_field: key,
            "partitions": [
                {index_field: getattr(p, index_field), "error_code": code, **extra}
                for p in topic.partitions
            ],
        }

    return entry


def _error_entry(name_field: str) -> Callable:
    def entry(topic: Any, key: Any, code: int) -> dict[str, Any]:
        return {_key_field(key, name_field): key, "error_code": code}

    return entry


# -------------------------------------------------------------------- group APIs


def _group_check(operation: str = "Read") -> Check:
    """A single-group API (whose response has a top-level error code)."""

    async def check(call: Call, who: Who, request: Any) -> Verdict | None:
        who.require(operation, "Group", request.group_id)
        return None

    return check


async def _offset_commit(call: Call, who: Who, request: Any) -> Verdict | None:
    group_allowed = who.allows("Read", "Group", request.group_id)
    split = _split(
        request, "topics", lambda t: not group_allowed or not who.allows("Read", "Topic", t.name)
    )
    if split is None:
        return None
    kept, denied = split
    code = TOPIC_DENIED if group_allowed else GROUP_DENIED
    entry = _partitions_entry("name", "partition_index")
    return Verdict(kept, _added("topics", [entry(t, t.name, code) for t in denied]))


async def _txn_offset_commit(call: Call, who: Who, request: Any) -> Verdict | None:
    code = None
    if not who.allows("Write", "TransactionalId", request.transactional_id):
        code = TXN_DENIED
    elif not who.allows("Read", "Group", request.group_id):
        code = GROUP_DENIED
    split = _split(
        request, "topics", lambda t: code is not None or not who.allows("Read", "Topic", t.name)
    )
    if split is None:
        return None
    kept, denied = split
    entry = _partitions_entry("name", "partition_index")
    answers = [entry(t, t.name, code or TOPIC_DENIED) for t in denied]
    return Verdict(kept, _added("topics", answers))


async def _offset_fetch(call: Call, who: Who, request: Any) -> Verdict | None:
    if not hasattr(request, "groups"):  # v0-7: one group, a top-level error code
        who.require("Describe", "Group", request.group_id)
        return None
    split = _split(request, "groups", lambda g: not who.allows("Describe", "Group", g.group_id))
    if split is None:
        return None
    kept, denied = split
    answers = [{"group_id": g.group_id, "error_code": GROUP_DENIED} for g in denied]
    return Verdict(kept, _added("groups", answers))


def _groups_list_check(field: str, operation: str, response_field: str) -> Check:
    """DescribeGroups / DeleteGroups: each named group needs ``operation``."""

    async def check(call: Call, who: Who, request: Any) -> Verdict | None:
        names = getattr(request, field)
        denied = [g for g in names if not who.allows(operation, "Group", g)]
        if not denied:
            return None
        kept = tuple(g for g in names if g not in denied)
        answers = [{"group_id": g, "error_code": GROUP_DENIED} for g in denied]
        return Verdict(
            dataclasses.replace(request, **{field: kept}), _added(response_field, answers)
        )

    return check


async def _list_groups(call: Call, who: Who, request: Any) -> Verdict | None:
    """Only the groups the requester may describe are listed (nothing is refused)."""

    def merge(values: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        if values is None:
            return None
        groups = [
            g
            for g in values.get("groups", ())
            if who.allows("Describe", "Group", g["group_id"], audit=False)
        ]
        return {**values, "groups": groups}

    return Verdict(request, merge)


async def _find_coordinator(call: Call, who: Who, request: Any) -> Verdict | None:
    resource = "TransactionalId" if request.key_type == 1 else "Group"
    if not hasattr(request, "coordinator_keys"):  # v0-3: one key, a top-level error code
        who.require("Describe", resource, request.key)
        return None
    split = _split(request, "coordinator_keys", lambda k: not who.allows("Describe", resource, k))
    if split is None:
        return None
    kept, denied = split
    code = REFUSALS[resource].code
    answers = [
        {"key": k, "error_code": code, "node_id": -1, "host": "", "port": -1} for k in denied
    ]
    return Verdict(kept, _added("coordinators", answers))


# ---------------------------------------------------------------------- txn APIs


async def _init_producer_id(call: Call, who: Who, request: Any) -> Verdict | None:
    """Transactional: Write on the id. Idempotent only: IdempotentWrite on the cluster,
    or Write on some topic (as Kafka 2.8+ accepts)."""
    if request.transactional_id is not None:
        who.require("Write", "TransactionalId", request.transactional_id)
    elif not who.allows("IdempotentWrite", "Cluster", CLUSTER_NAME) and not (
        who.authorizer.allows_any(who.principal, who.host, "Write", "Topic")
    ):
        raise ClusterAuthorizationError(
            f"{who.principal} may not IdempotentWrite Cluster (nor Write any topic)"
        )
    return None


def _txn_check(group: bool = False) -> Check:
    async def check(call: Call, who: Who, request: Any) -> Verdict | None:
        who.require("Write", "TransactionalId", request.transactional_id)
        if group:
            who.require("Read", "Group", request.group_id)
        return None

    return check


async def _add_partitions_to_txn(call: Call, who: Who, request: Any) -> Verdict | None:
    txn_allowed = who.allows("Write", "TransactionalId", request.v3_and_below_transactional_id)
    field = "v3_and_below_topics"
    split = _split(
        request, field, lambda t: not txn_allowed or not who.allows("Write", "Topic", t.name)
    )
    if split is None:
        return None
    kept, denied = split
    code = TOPIC_DENIED if txn_allowed else TXN_DENIED
    answers = [
        {
            "name": t.name,
            "results_by_partition": [
                {"partition_index": p, "partition_error_code": code} for p in t.partitions
            ],
        }
        for t in denied
    ]
    return Verdict(kept, _added("results_by_topic_v3_and_below", answers))


# -------------------------------------------------------------------- admin APIs


def _cluster_check(operation: str) -> Check:
    async def check(call: Call, who: Who, request: Any) -> Verdict | None:
        who.require(operation, "Cluster", CLUSTER_NAME)
        return None

    return check


async def _create_topics(call: Call, who: Who, request: Any) -> Verdict | None:
    if who.allows("Create", "Cluster", CLUSTER_NAME, audit=False):
        return None
    return await _create_topic_each(call, who, request)


_create_topic_each = _topic_check("topics", "Create", ("name",), "topics", _error_entry("name"))


async def _delete_topics(call: Call, who: Who, request: Any) -> Verdict | None:
    if hasattr(request, "topic_names"):  # v1-5: names only
        split = _split(request, "topic_names", lambda n: not who.allows("Delete", "Topic", n))
        if split is None:
            return None
        kept, denied = split
        answers = [{"name": n, "error_code": TOPIC_DENIED} for n in denied]
        return Verdict(kept, _added("responses", answers))
    return await _delete_topic_states(call, who, request)


_delete_topic_states = _topic_check(
    "topics", "Delete", ("name",), "responses", _error_entry("name")
)


def _configs_check(operation: str, response_field: str) -> Check:
    """DescribeConfigs / AlterConfigs / IncrementalAlterConfigs: a topic's configs need
    ``operation`` on it, a broker's on the cluster."""

    async def check(call: Call, who: Who, request: Any) -> Verdict | None:
        def refused(r: Any) -> bool:
            if r.resource_type == TOPIC_CONFIG:
                return not who.allows(operation, "Topic", r.resource_name)
            return not who.allows(operation, "Cluster", CLUSTER_NAME)

        split = _split(request, "resources", refused)
        if split is None:
            return None
        kept, denied = split
        answers = [
            {
                "error_code": TOPIC_DENIED if r.resource_type == TOPIC_CONFIG else CLUSTER_DENIED,
                "error_message": f"{who.principal} may not {operation} {r.resource_name!r}",
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
            }
            for r in denied
        ]
        return Verdict(kept, _added(response_field, answers))

    return check


async def _metadata(call: Call, who: Who, request: Any) -> Verdict | None:
    """Topics the requester may not describe are hidden from a listing of all topics,
    and answered TOPIC_AUTHORIZATION_FAILED when named."""
    if request.topics is None:

        def hide(values: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
            if values is None:
                return None
            topics = [
                t
                for t in values.get("topics", ())
                if who.allows("Describe", "Topic", t["name"], audit=False)
            ]
            return {**values, "topics": topics}

        return Verdict(request, hide)
    names = await _names(call, request.topics, "name")
    split = _split(
        request,
        "topics",
        lambda t: not who.allows("Describe", "Topic", names[id(t)][0]),
    )
    if split is None:
        return None
    kept, denied = split
    answers = [{"error_code": TOPIC_DENIED, "name": t.name, "partitions": ()} for t in denied]
    return Verdict(kept, _added("topics", answers))


async def _create_acls(call: Call, who: Who, request: Any) -> Verdict | None:
    if who.allows("Alter", "Cluster", CLUSTER_NAME):
        return None
    answers = [
        {"error_code": CLUSTER_DENIED, "error_message": f"{who.principal} may not Alter Cluster"}
        for _ in request.creations
    ]
    return Verdict(dataclasses.replace(request, creations=()), _added("results", answers))


async def _delete_acls(call: Call, who: Who, request: Any) -> Verdict | None:
    if who.allows("Alter", "Cluster", CLUSTER_NAME):
        return None
    answers = [
        {
            "error_code": CLUSTER_DENIED,
            "error_message": f"{who.principal} may not Alter Cluster",
            "matching_acls": (),
        }
        for _ in request.filters
    ]
    return Verdict(dataclasses.replace(request, filters=()), _added("filter_results", answers))


CHECKS: dict[int, Check] = {
    0: _produce,
    1: _topic_check("topics", "Read", ("topic",), "responses", _fetch_entry),
    2: _topic_check(
        "topics",
        "Describe",
        ("name",),
        "topics",
        _partitions_entry("name", "partition_index", offset=-1, timestamp=-1),
    ),
    3: _metadata,
    8: _offset_commit,
    9: _offset_fetch,
    10: _find_coordinator,
    11: _group_check(),
    12: _group_check(),
    13: _group_check(),
    14: _group_check(),
    15: _groups_list_check("groups", "Describe", "groups"),
    16: _list_groups,
    19: _create_topics,
    20: _delete_topics,
    21: _topic_check(
        "topics",
        "Delete",
        ("name",),
        "topics",
        _partitions_entry("name", "partition_index", low_watermark=-1),
    ),
    22: _init_producer_id,
    23: _topic_check(
        "topics", "Describe", ("topic",), "topics", _partitions_entry("topic", "partition")
    ),
    24: _add_partitions_to_txn,
    25: _txn_check(group=True),
    26: _txn_check(),
    28: _txn_offset_commit,
    29: _cluster_check("Describe"),
    30: _create_acls,
    31: _delete_acls,
    32: _configs_check("DescribeConfigs", "results"),
    33: _configs_check("AlterConfigs", "responses"),
    37: _topic_check("topics", "Alter", ("name",), "results", _error_entry("name")),
    42: _groups_list_check("groups_names", "Delete", "results"),
    44: _configs_check("AlterConfigs", "responses"),
    60: _cluster_check("Describe"),
}
"""The check of each API by key; an API not here (ApiVersions) needs no ACL."""
