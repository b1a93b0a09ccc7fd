"""The typed requests' own checks and the dispatch path, without Ray.

The dispatcher is the real one, with real handlers (coroutines) and hooks: every
request an actor serves goes through exactly this code.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import types
import typing
from typing import Any

import pytest

from raystream import requests as rq
from raystream.dispatch import DIRECT_CONTEXT, Dispatcher, RequestContext, RequestHooks
from raystream.errors import (
    AuthorizationError,
    IllegalStateError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTopicError,
    NotLeaderError,
    RaystreamError,
    UnknownServerError,
    error_for_code,
)
from raystream.protocol import FetchResponse, ProduceResponse, Result, failure

# ------------------------------------------------------------------ validation


def refused(request: rq.Request, error: type[RaystreamError] = InvalidRequestError) -> str:
    with pytest.raises(error) as caught:
        request.validate()
    assert type(caught.value) is error
    return str(caught.value)


@pytest.mark.parametrize(
    ("request_", "named"),
    [
        (rq.FetchRequest("t", -1), "partition=-1"),
        (rq.FetchRequest("", 0), "topic=''"),
        (rq.FetchRequest("t", 0, fetch_offset=-5), "fetch_offset=-5"),
        (rq.FetchRequest("t", 0, max_wait_ms=1 << 40), "max_wait_ms=1099511627776"),
        (rq.FetchRequest("t", 0, isolation_level="dirty"), "isolation_level='dirty'"),
        (rq.FetchRequest("t", True), "partition=True"),
        (rq.ListOffsetsRequest("t", 0, timestamp=-7), "timestamp=-7"),
        (rq.ReplicaFetchRequest("t", 0, replica_id=None), "replica_id=None"),
        (rq.OffsetForLeaderEpochRequest("t", 0, leader_epoch="1"), "leader_epoch='1'"),
        (rq.WriteTxnMarkerRequest("t", 0, 5, 0, committed=1), "committed=1"),
        (rq.DeleteRecordsRequest("t", 0, -2), "offset=-2"),
        (rq.ProduceRequest("t", 0, b"", acks=7), "acks=7"),
        (rq.ProduceRequest("t", 0, b"", timeout_ms=-1), "timeout_ms=-1"),
        (rq.ProduceRequest("t", 0, b"", producer_id=9, base_sequence=0), "epoch"),
        (rq.ProduceRequest("t", 0, b"", producer_epoch=1 << 15), "producer_epoch=32768"),
        (rq.ProduceRequest("t", 0, b"", transactional=True), "producer id"),
        (rq.ProduceRequest("t", 0, b"", internal_writer="me"), "internal_writer='me'"),
        (rq.JoinGroupRequest("g", protocols=()), "protocols=()"),
        (rq.JoinGroupRequest("g", topics=("a", 3), protocols=("range",)), "topics"),
        (rq.JoinGroupRequest("g", protocols=("r",), session_timeout_ms=0), "session_timeout"),
        (
            rq.JoinGroupRequest("g", protocols=("range",), protocol_type="consumer"),
            "protocol_metadata=()",
        ),
        (rq.JoinGroupRequest("g", protocols=("range",), protocol_metadata=(b"",)), "0 items"),
        (rq.SyncGroupRequest("g", "m", 1, assignments=(("", b""),)), "assignments="),
        (rq.LeaveGroupRequest("g", ""), "member_id=''"),
        (rq.HeartbeatRequest("g", "", 1), "member_id=''"),
        (rq.HeartbeatRequest(None, "m", 1), "group_id=None"),
        (rq.OffsetCommitRequest("g", offsets=()), "offsets=()"),
        (rq.OffsetCommitRequest("g", offsets=(("t", 0, -1, ""),)), "('t', 0, -1, '')"),
        (rq.OffsetFetchRequest("g", partitions=(("t", -1),)), "('t', -1)"),
        (rq.OffsetFetchRequest("g", require_stable="yes"), "require_stable='yes'"),
        (rq.InitProducerIdRequest("", 1000), "transactional_id=''"),
        (rq.InitProducerIdRequest("x", 0), "transaction_timeout_ms=0"),
        (rq.AddPartitionsToTxnRequest("x", 1, 0, ()), "partitions=()"),
        (rq.AddOffsetsToTxnRequest("x", 1, 0, ""), "group_id=''"),
        (rq.EndTxnRequest("x", -1, 0), "producer_id=-1"),
        (rq.EndTxnRequest("x", 1, 0, committed=None), "committed=None"),
    ],
)
def test_a_malformed_field_is_refused_naming_the_request_field_and_value(
    request_: rq.Request, named: str
) -> None:
    message = refused(request_)
    assert type(request_).__name__ in message or "ProduceRequest" in message
    assert named in message


def test_well_formed_requests_pass_their_checks() -> None:
    for request in (
        rq.ProduceRequest("t", 0, b"x", "all", producer_id=3, producer_epoch=0, base_sequence=0),
        rq.FetchRequest("t", 2, 10, 1 << 20, 0, 1, "read_committed"),
        rq.ListOffsetsRequest("t", 0, -2),
        rq.ReplicaFetchRequest("t", 0, 1, 0, 3, 0),
        rq.OffsetForLeaderEpochRequest("t", 0, -1),
        rq.WriteTxnMarkerRequest("t", 0, 5, 1, True, 2),
        rq.JoinGroupRequest("g", "", None, "c", ("t",), ("range",), (("t", 0),)),
        rq.OffsetCommitRequest("g", "", -1, (("t", 0, 5, ""),)),
        rq.OffsetFetchRequest("g", None, True),
        rq.ListGroupsRequest(),
        rq.EndTxnRequest("x", 1, 0, True, 0, (("t", 0),)),
        rq.DescribeTransactionRequest("\u00e9\u6f22\U0001f600"),  # any string is an id
    ):
        request.validate()


def test_produce_records_must_be_arrow_data() -> None:
    message = refused(rq.ProduceRequest("t", 0, "text"), InvalidRecordError)
    assert "not str" in message


def test_a_client_produce_to_an_internal_topic_is_refused_naming_it() -> None:
    for topic in ("__consumer_offsets", "__transaction_state", "__cluster_metadata"):
        message = refused(rq.ProduceRequest(topic, 0, b"x"), InvalidTopicError)
        assert repr(topic) in message and "internal" in message
        message = refused(rq.DeleteRecordsRequest(topic, 0, 3), InvalidTopicError)
        assert repr(topic) in message and "internal" in message
    assert not InvalidTopicError.retriable


def test_only_the_trusted_writers_write_internal_topics() -> None:
    rq.ProduceRequest("__transaction_state", 0, b"x", internal_writer="transaction_coordinator")
    rq.ProduceRequest("__consumer_offsets", 0, b"x", internal_writer="group_coordinator")
    offsets = rq.ProduceRequest(
        "__consumer_offsets",
        3,
        b"x",
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
        internal_writer=rq.TRANSACTIONAL_OFFSETS_WRITER,
    )
    offsets.validate()
    # A producer's offsets outside a transaction, or to another internal topic: refused.
    outside = rq.ProduceRequest(
        "__consumer_offsets", 3, b"x", internal_writer=rq.TRANSACTIONAL_OFFSETS_WRITER
    )
    refused(outside, InvalidTopicError)
    elsewhere = rq.ProduceRequest(
        "__transaction_state",
        0,
        b"x",
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
        internal_writer=rq.TRANSACTIONAL_OFFSETS_WRITER,
    )
    refused(elsewhere, InvalidTopicError)
    # A writer's name on a user topic is a mistake too.
    assert "not internal" in refused(
        rq.ProduceRequest("orders", 0, b"x", internal_writer="group_coordinator")
    )


def test_a_huge_hostile_value_is_named_but_cut_short() -> None:
    message = refused(rq.HeartbeatRequest("g", "m", "x" * 100_000))
    assert "generation_id=" in message and len(message) < 500


# -------------------------------------------------------------------- errors


def test_code_minus_one_reads_back_as_unknown_server_error_not_the_base_class() -> None:
    error = Result(error_code=-1, message="boom").error()
    assert type(error) is UnknownServerError and not error.retriable
    unknown = error_for_code(4242, "from a newer server")
    assert type(unknown) is UnknownServerError and "4242" in str(unknown)


def test_an_error_that_does_not_round_trip_keeps_its_class_name() -> None:
    answer = failure(IllegalStateError("log /x is closed"))
    assert answer.error_code == -1
    assert "IllegalStateError: log /x is closed" in str(answer.error())
    assert failure(NotLeaderError("moved")).message == "moved"


# ------------------------------------------------------------------ dispatch


class Server:
    """Handlers as an actor has them: answer or raise."""

    def __init__(self) -> None:
        self.handled: list[rq.Request] = []

    async def produce(self, request: rq.ProduceRequest) -> ProduceResponse:
        self.handled.append(request)
        if request.partition == 1:
            raise NotLeaderError("replica 2 is not the leader of t-1")
        if request.partition == 2:
            raise KeyError("a bug")
        return ProduceResponse(base_offset=41)

    async def fetch(self, request: rq.FetchRequest) -> FetchResponse:
        self.handled.append(request)
        return FetchResponse(fetch_offset=request.fetch_offset)


def dispatcher(hooks: RequestHooks | None = None) -> tuple[Dispatcher, Server]:
    server = Server()
    handlers: dict[Any, Any] = {rq.ProduceRequest: server.produce, rq.FetchRequest: server.fetch}
    return Dispatcher("test server", handlers, hooks), server


def run(dispatch: Dispatcher, request: Any, context: RequestContext | None = None) -> Any:
    if context is None:
        return asyncio.run(dispatch.dispatch(request))
    return asyncio.run(dispatch.dispatch(request, context))


def test_a_request_is_handled_and_answered() -> None:
    dispatch, server = dispatcher()
    assert run(dispatch, rq.ProduceRequest("t", 0, b"x")).base_offset == 41
    assert run(dispatch, rq.FetchRequest("t", 0, 7)).fetch_offset == 7
    assert len(server.handled) == 2


def test_an_unserved_or_undecodable_request_is_refused_naming_its_type() -> None:
    dispatch, server = dispatcher()
    for request in (rq.ListGroupsRequest(), "produce", None, {"topic": "t"}):
        answer = run(dispatch, request)
        assert type(answer.error()) is InvalidRequestError
        assert type(request).__name__ in answer.message
    assert not server.handled


def test_an_invalid_request_is_answered_in_its_response_type_and_never_handled() -> None:
    dispatch, server = dispatcher()
    answer = run(dispatch, rq.FetchRequest("t", 0, -1))
    assert isinstance(answer, FetchResponse) and "fetch_offset=-1" in answer.message
    assert not server.handled


def test_a_refusal_of_the_handler_keeps_its_code() -> None:
    dispatch, _ = dispatcher()
    answer = run(dispatch, rq.ProduceRequest("t", 1, b"x"))
    assert isinstance(answer, ProduceResponse) and type(answer.error()) is NotLeaderError


def test_an_unexpected_failure_is_logged_and_answered_as_unknown_server_error(caplog) -> None:
    dispatch, _ = dispatcher()
    with caplog.at_level(logging.ERROR, logger="raystream.dispatch"):
        answer = run(dispatch, rq.ProduceRequest("t", 2, b"x"))
    error = answer.error()
    assert isinstance(answer, ProduceResponse) and type(error) is UnknownServerError
    assert "ProduceRequest" in str(error) and "KeyError" in str(error) and "a bug" in str(error)
    assert not error.retriable
    logged = [r for r in caplog.records if r.exc_info]
    assert logged and logged[0].exc_info[0] is KeyError  # with its traceback


def test_hooks_see_every_request_with_its_context_and_can_refuse_it() -> None:
    seen: list[tuple[str, str, str]] = []

    def acl(context: RequestContext, request: rq.Request) -> None:
        seen.append(("authorize", context.listener, type(request).__name__))
        if isinstance(request, rq.ProduceRequest) and request.topic == "secret":
            raise AuthorizationError(f"{context.principal} may not write {request.topic!r}")

    def quota(context: RequestContext, request: rq.Request) -> None:
        seen.append(("quota", context.listener, type(request).__name__))

    timings: list[float] = []

    def metrics(context: RequestContext, request: rq.Request, answer: Any, seconds: float) -> None:
        seen.append(("metrics", context.listener, type(answer).__name__))
        timings.append(seconds)

    def broken_metrics(*_: Any) -> None:
        raise RuntimeError("a metrics backend is down")

    hooks = RequestHooks(authorize=[acl], quota=[quota], metrics=[metrics, broken_metrics])
    dispatch, server = dispatcher(hooks)
    assert run(dispatch, rq.FetchRequest("t", 0, 3), DIRECT_CONTEXT).error_code == 0
    refusal = run(dispatch, rq.ProduceRequest("secret", 0, b"x"))
    assert type(refusal.error()) is AuthorizationError
    assert "User:ANONYMOUS may not write 'secret'" in refusal.message
    assert [type(r).__name__ for r in server.handled] == ["FetchRequest"]
    assert seen == [
        ("authorize", "direct", "FetchRequest"),
        ("quota", "direct", "FetchRequest"),
        ("metrics", "direct", "FetchResponse"),
        ("authorize", "ray", "ProduceRequest"),
        ("metrics", "ray", "ProduceResponse"),
    ]
    assert all(t >= 0 for t in timings)


# ------------------------------------------------------------- every field, swept


WELL_FORMED: list[rq.Request] = [
    rq.ProduceRequest("t", 0, b"x", 1, 10, "lz4", 3, 0, 0, True),
    rq.FetchRequest("t", 0),
    rq.ReplicaFetchRequest("t", 0, 1, 0, 0, 0),
    rq.ListOffsetsRequest("t", 0),
    rq.OffsetForLeaderEpochRequest("t", 0, 1),
    rq.WriteTxnMarkerRequest("t", 0, 1, 0),
    rq.DeleteRecordsRequest("t", 0, 5),
    rq.JoinGroupRequest("g", "m", "i", "c", ("t",), ("range",), (("t", 0),), 1, 10, 10, "a"),
    rq.JoinGroupRequest(
        "g",
        "",
        "i",
        "c",
        (),
        ("range", "sticky"),
        (),
        -1,
        10,
        10,
        None,
        "consumer",
        (b"a", b"b"),
        True,
        "h",
    ),
    rq.SyncGroupRequest("g", "m", 1, "i", "consumer", "range", (("m", b"x"),)),
    rq.HeartbeatRequest("g", "m", 1, "i"),
    rq.LeaveGroupRequest("g", "m", "i"),
    rq.DeleteGroupRequest("g"),
    rq.ListGroupsRequest(True),
    rq.OffsetCommitRequest("g", "m", 1, (("t", 0, 1, ""),)),
    rq.OffsetFetchRequest("g", (("t", 0),)),
    rq.TxnOffsetCheckRequest("g", "m", 1),
    rq.ResetOffsetsRequest("g", (("t", 0, 1, ""),)),
    rq.DescribeGroupRequest("g"),
    rq.InitProducerIdRequest("x", 10),
    rq.AddPartitionsToTxnRequest("x", 1, 0, (("t", 0),)),
    rq.AddOffsetsToTxnRequest("x", 1, 0, "g"),
    rq.EndTxnRequest("x", 1, 0, True, 0, (("t", 0),)),
    rq.DescribeTransactionRequest("x"),
]
WRONG_TYPES = [None, True, 1, 1.5, float("nan"), "x", b"x", [], {}, ("t",), object()]


def _allowed(hint: Any) -> tuple[type, ...]:
    """The Python types a field's annotation allows (a list stands for a tuple)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return tuple(t for arg in typing.get_args(hint) for t in _allowed(arg))
    if hint is type(None):
        return (type(None),)
    if origin is tuple or hint is tuple:
        return (tuple, list)
    return (hint,)


def _fits(value: Any, allowed: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in allowed
    return isinstance(value, allowed)


def test_every_field_of_every_request_refuses_a_value_of_the_wrong_type() -> None:
    served = {type(r) for r in WELL_FORMED}
    concrete = {
        cls
        for cls in vars(rq).values()
        if isinstance(cls, type) and issubclass(cls, rq.Request) and cls.__doc__
    }
    bases = {rq.Request, rq.PartitionRequest, rq.GroupRequest, rq.TransactionRequest}
    assert concrete - bases - {rq.ProducerTransactionRequest} == served
    swept = 0
    for request in WELL_FORMED:
        request.validate()
        hints = typing.get_type_hints(type(request))
        for field in dataclasses.fields(request):
            if field.name == "records":  # Any: checked as Arrow data (see above)
                continue
            allowed = _allowed(hints[field.name])
            for value in WRONG_TYPES:
                if _fits(value, allowed):
                    continue
                with pytest.raises(InvalidRequestError, match=f"{field.name}="):
                    dataclasses.replace(request, **{field.name: value}).validate()
                swept += 1
    assert swept > 800  # every request type, every field, ~8 wrong types each
