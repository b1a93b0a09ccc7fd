"""Hostile requests against a live replica and both live coordinators (real Ray).

Hypothesis starts from a well-formed request of every type an actor serves and puts
hostile values into one or two of its fields (wrong types, None, negative and huge
numbers, NaN, odd unicode, bytes that are no Arrow stream, a batch of another schema,
unknown topics and partitions, values at and just past a field's limits), or sends
something that is no request at all, over Ray and over the direct path. After each
request:

- the actor still answers (and, checked at the end, is the same process: nothing died
  and was restarted);
- a refusal is a specific :class:`~raystream.errors.RaystreamError` subclass with a
  message: neither the base class nor UnknownServerError (an unforeseen failure);
- a refused request changed nothing: the replica's log start, high watermark and log
  end offset, the group's description (offsets, members, generation), the
  transactional id's description.

A request whose hostile values happen to be valid is served; what it changes is then
the new state the next request is checked against.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import ray
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raystream import requests as rq
from raystream.errors import InvalidTopicError, RaystreamError, UnknownServerError
from raystream.groups.offsets_topic import OFFSETS_TOPIC
from raystream.log.batch import BatchEncoder
from raystream.protocol import encode_records
from raystream.records import build_batch
from raystream.transactions.state_topic import TRANSACTION_STATE_TOPIC
from raystream.transport import outcome, send
from raystream.types import TopicPartition

TOPIC = "fuzz"
GROUP = "fuzz-group"
TXN = "fuzz-txn"
EXAMPLES = {"replica": 300, "group": 150, "txn": 150}
"""Examples per actor: a few seconds each on an idle machine."""

ODD_TEXT = st.text(
    alphabet=st.sampled_from(["\x00", "\u202e", "\ud7ff", "\ufeff", "\U0001f600", "é", "/", "_"]),
    min_size=0,
    max_size=12,
)
HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(max_value=-1, min_value=-(1 << 70)),
    st.integers(min_value=1 << 31, max_value=1 << 70),
    st.integers(min_value=0, max_value=50),  # valid numbers too: small, so nothing waits long
    st.floats(allow_nan=True, allow_infinity=True),
    ODD_TEXT,
    st.binary(max_size=64),
    st.lists(st.one_of(st.integers(-3, 3), ODD_TEXT), max_size=3),
    st.tuples(ODD_TEXT, st.integers(-3, 3)).map(lambda t: (t,)),
    st.dictionaries(ODD_TEXT, st.integers(), max_size=2),
    st.sampled_from(["all", "read_committed", "lz4", "zstd", "group_coordinator", "__x"]),
)


def _near(name: str, value: Any) -> st.SearchStrategy[Any]:
    """Values of the same kind as a well-formed field's ``value``, at and past its edges:
    those get past the request's own checks into the handler (waits and timeouts stay
    short, or the actor would rightly wait for them)."""
    if isinstance(value, bool):
        return st.booleans()
    if name.endswith("_ms"):
        return st.sampled_from([-1, 1 << 31, 1 << 63]) | st.integers(0, 50)
    if isinstance(value, int):
        edges = [-2, -1, 0, 1, value - 1, value + 1, (1 << 31) - 1, (1 << 63) - 1]
        return st.sampled_from(edges) | st.integers(0, 50)
    if isinstance(value, str):
        return st.sampled_from([TOPIC, GROUP, TXN, "__consumer_offsets", "x" * 300]) | ODD_TEXT
    if isinstance(value, tuple):
        topics = st.sampled_from([TOPIC, "missing", "__consumer_offsets"])
        item = st.tuples(topics, st.integers(0, 3))
        return st.lists(item, max_size=2).map(tuple)
    return HOSTILE


def _pid(actor: Any) -> int:
    return ray.get(actor.__ray_call__.remote(lambda _self: os.getpid()), timeout=60)


@pytest.fixture(scope="module")
def live(shared_cluster: Any) -> Iterator[dict[str, Any]]:
    """A topic with records, a group with committed offsets, an initialized transactional
    id, and well-formed requests of every type to start from."""
    cluster = shared_cluster
    cluster.coordinator_call("ping", timeout_s=120)  # both load their topics first
    cluster.transaction_coordinator_call("ping", timeout_s=120)
    cluster.admin().create_topic(TOPIC)
    with cluster.producer(acks="all") as producer:
        for i in range(3):
            producer.send(TOPIC, b"record %d" % i).get(timeout=60)
    cluster.coordinator_call(rq.OffsetCommitRequest(GROUP, "", -1, ((TOPIC, 0, 1, "m"),)))
    producer = cluster.producer(transactional_id=TXN, transaction_timeout_ms=900_000)
    producer.init_transactions()
    pid, epoch = producer._txn.producer_id, producer._txn.producer_epoch
    metadata = cluster.topic_metadata(TOPIC, refresh=True)
    leader = metadata.partitions[0].leader_handle
    leader_epoch = metadata.partitions[0].leader_epoch
    good = encode_records(
        BatchEncoder(), build_batch(metadata.record_schema, [None], [b"ok"], [1], None)
    )
    other = pa.record_batch({"x": [1, 2]})
    replica = [
        rq.ProduceRequest(TOPIC, 0, good, 1),
        rq.ProduceRequest(TOPIC, 0, other, "all"),
        rq.ProduceRequest(TOPIC, 0, b"\xff" * 40, 1),
        rq.ProduceRequest(TOPIC, 0, good, 1, 1000, None, 777, 0, 0, True),
        rq.FetchRequest(TOPIC, 0, 0, 1 << 20, 0),
        rq.ListOffsetsRequest(TOPIC, 0, -1, "read_committed"),
        rq.ReplicaFetchRequest(TOPIC, 0, 9, 0, leader_epoch, 0),
        rq.OffsetForLeaderEpochRequest(TOPIC, 0, leader_epoch),
        rq.WriteTxnMarkerRequest(TOPIC, 0, 777, 0, False, 0, 1000),
        rq.DeleteRecordsRequest(TOPIC, 0, 0),
        rq.ProduceRequest("__consumer_offsets", 0, good, 1),
    ]
    group = [
        rq.JoinGroupRequest("fuzz-join", "", None, "c", (TOPIC,), ("range",), (), -1, 100, 50),
        rq.HeartbeatRequest(GROUP, "member-1", 1),
        rq.LeaveGroupRequest(GROUP, "member-1"),
        rq.OffsetCommitRequest(GROUP, "m", 3, ((TOPIC, 0, 2, ""),)),
        rq.OffsetFetchRequest(GROUP, ((TOPIC, 0),), True),
        rq.TxnOffsetCheckRequest(GROUP, "m", 3),
        rq.ResetOffsetsRequest(GROUP, ((TOPIC, 0, 0, ""),)),
        rq.DescribeGroupRequest(GROUP),
        rq.ListGroupsRequest(),
    ]
    txn = [
        rq.InitProducerIdRequest("fuzz-init", 900_000),
        rq.AddPartitionsToTxnRequest(TXN, pid, epoch, ((TOPIC, 0),)),
        rq.AddOffsetsToTxnRequest(TXN, pid, epoch + 1, GROUP),
        rq.EndTxnRequest(TXN, pid, epoch, True, 0, ()),
        rq.DescribeTransactionRequest(TXN),
    ]
    coordinator = cluster.coordinator()
    txn_coordinator = cluster.transaction_coordinator()
    describe_group = rq.DescribeGroupRequest(GROUP)
    describe_txn = rq.DescribeTransactionRequest(TXN)
    actors = {"replica": leader, "group": coordinator, "txn": txn_coordinator}
    yield {
        "replica": (leader, replica, lambda: _replica_state(leader)),
        "group": (coordinator, group, lambda: _described(coordinator, describe_group)),
        "txn": (txn_coordinator, txn, lambda: _described(txn_coordinator, describe_txn)),
        "actors": actors,
        "pids": {name: _pid(actor) for name, actor in actors.items()},
    }
    producer.close()


def _replica_state(leader: Any) -> tuple[int, int, int]:
    state = ray.get(leader.state.remote(), timeout=60)
    return state["log_start_offset"], state["high_watermark"], state["log_end_offset"]


def _described(actor: Any, request: rq.Request) -> Any:
    return ray.get(actor.handle.remote(request), timeout=60).unwrap()


def _ask(actor: Any, request: Any, direct: bool) -> Any:
    if direct:
        return outcome(send(actor, request), 60)
    return ray.get(actor.handle.remote(request), timeout=60)


def _same(a: Any, b: Any) -> bool:
    """Equality that takes NaN as equal to itself (a described request may carry one)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def fuzz(live: dict[str, Any], name: str, data: st.DataObject) -> None:
    actor, bases, state = live[name]
    direct = data.draw(st.booleans(), label="direct path")
    if data.draw(st.integers(0, 9), label="no request") == 0:
        request: Any = data.draw(HOSTILE, label="not a request")
    else:
        base = data.draw(st.sampled_from(bases), label="request type")
        # The request's own fields first, the topic and partition (common to all) last:
        # Hypothesis draws the first choices most.
        fields = [f.name for f in reversed(dataclasses.fields(base))]
        chosen = (
            data.draw(st.lists(st.sampled_from(fields), min_size=1, max_size=2, unique=True))
            if fields
            else []
        )
        values = {f: data.draw(_near(f, getattr(base, f)) | HOSTILE, label=f) for f in chosen}
        request = dataclasses.replace(base, **values)
    before = state()
    answer = _ask(actor, request, direct)
    error = answer.error()
    if error is not None:
        assert isinstance(error, RaystreamError)
        assert type(error) not in (RaystreamError, UnknownServerError), (request, answer)
        assert answer.message, (request, answer)
        assert _same(state(), before), (request, answer)


def fuzzing(actor: str) -> settings:
    return settings(
        max_examples=EXAMPLES[actor],
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


@pytest.mark.slow
@fuzzing("replica")
@given(data=st.data())
def test_hostile_requests_to_a_replica_are_refused_cleanly(live, data) -> None:
    fuzz(live, "replica", data)


@pytest.mark.slow
@fuzzing("group")
@given(data=st.data())
def test_hostile_requests_to_the_group_coordinator_are_refused_cleanly(live, data) -> None:
    fuzz(live, "group", data)


@pytest.mark.slow
@fuzzing("txn")
@given(data=st.data())
def test_hostile_requests_to_the_transaction_coordinator_are_refused_cleanly(live, data) -> None:
    fuzz(live, "txn", data)


@pytest.mark.slow
def test_no_actor_died_or_restarted_under_the_fuzzing(live) -> None:
    """Runs after the fuzz tests (file order): the same processes still serve."""
    assert {name: _pid(actor) for name, actor in live["actors"].items()} == live["pids"]


def test_clients_cannot_write_internal_topics_but_the_trusted_writers_still_do(
    shared_cluster, live
) -> None:
    """Finding 3: a client's produce to an internal topic is refused, naming the topic,
    and the log is untouched; the coordinators' writes and a transaction's offsets
    (send_offsets_to_transaction) still go in."""
    offsets_leader = shared_cluster.topic_metadata(OFFSETS_TOPIC, refresh=True).partitions[0]
    before = _replica_state(offsets_leader.leader_handle)
    bad = pa.table({"value": [b"not a group record"]})
    with shared_cluster.producer() as producer:
        for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            # The producer refuses before sending anything ...
            with pytest.raises(InvalidTopicError, match=f"produce to topic '{topic}'.*internal"):
                producer.send(topic, b"not a group record", partition=0)
            with pytest.raises(InvalidTopicError, match=f"produce to topic '{topic}'.*internal"):
                producer.send_batch(topic, bad, partition=0)
            # ... and the replica refuses a request that bypasses the producer.
            metadata = shared_cluster.topic_metadata(topic, refresh=True)
            batch = build_batch(metadata.record_schema, [None], [b"x"], [1], None)
            request = rq.ProduceRequest(topic, 0, encode_records(BatchEncoder(), batch), 1)
            answer = outcome(send(metadata.partitions[0].leader_handle, request))
            with pytest.raises(InvalidTopicError, match=f"internal topic '{topic}'"):
                answer.raise_for_error()
    with shared_cluster.producer(transactional_id="internal-sender") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        with pytest.raises(InvalidTopicError, match=f"produce to topic '{OFFSETS_TOPIC}'"):
            producer.send(OFFSETS_TOPIC, b"not a group record", partition=0)
        producer.abort_transaction()
    assert _replica_state(offsets_leader.leader_handle) == before
    # The group coordinator writes its commits, the transaction coordinator its state,
    # and a transactional producer its offsets, as records of its transaction.
    commit = rq.OffsetCommitRequest("internal", "", -1, ((TOPIC, 0, 1, ""),))
    shared_cluster.coordinator_call(commit)
    with shared_cluster.producer(transactional_id="internal-writer") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(TOPIC, b"transformed")
        producer.send_offsets_to_transaction({TopicPartition(TOPIC, 0): 3}, "internal")
        producer.commit_transaction()
    committed = shared_cluster.coordinator_call(rq.OffsetFetchRequest("internal", None, True))
    assert committed == {TopicPartition(TOPIC, 0): 3}
