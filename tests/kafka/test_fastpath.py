"""The listener's Produce and Fetch answers written without kio
(:mod:`raystream.kafka.fastpath`) are kio's bytes exactly, and anything unusual is left
to kio. Pure: no Ray."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from raystream.kafka.codec import Header, build, encode_response, response_schema
from raystream.kafka.fastpath import FETCH_VERSIONS, PRODUCE_VERSIONS, encode_fast

_codes = st.sampled_from([int(code) for code in ErrorCode])
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)
_offsets = st.integers(-1, 2**62)
_text = st.none() | st.text(max_size=20)


def _maybe(key: str, strategy: st.SearchStrategy) -> st.SearchStrategy:
    """A dict of ``key`` (or none: the field's default then applies)."""
    return st.just({}) | strategy.map(lambda value: {key: value})


def _entry(required: dict[str, st.SearchStrategy], optional: dict[str, st.SearchStrategy]):
    parts = [st.fixed_dictionaries(required)] + [_maybe(k, s) for k, s in optional.items()]
    return st.tuples(*parts).map(lambda dicts: {k: v for d in dicts for k, v in d.items()})


_produce_partition = _entry(
    {"index": _i32, "error_code": _codes, "base_offset": _i64},
    {
        "error_message": _text,
        "log_start_offset": _i64,
        "log_append_time": st.none() | st.integers(0, 2**43),
    },
)
_fetch_partition = _entry(
    {"partition_index": _i32, "error_code": _codes, "high_watermark": _offsets},
    {
        "last_stable_offset": _offsets,
        "log_start_offset": _offsets,
        "aborted_transactions": st.none()
        | st.lists(st.fixed_dictionaries({"producer_id": _i64, "first_offset": _i64}), max_size=3),
        "records": st.none() | st.binary(max_size=300),
    },
)


def _topics(key: Any, name: str, partitions: Any, by_id: bool) -> st.SearchStrategy:
    topic = st.uuids() if by_id else st.text(max_size=30)
    return st.lists(
        st.fixed_dictionaries({key: topic, name: st.lists(partitions, max_size=4)}), max_size=3
    )


def _kio(header: Header, values: dict[str, Any]) -> bytes:
    return encode_response(
        header, build(response_schema(header.api_key, header.api_version), values)
    )


@settings(max_examples=400, deadline=None, derandomize=True)
@given(data=st.data(), version=st.sampled_from(list(PRODUCE_VERSIONS)), correlation=_i32)
def test_produce_answers_are_kio_s_bytes(
    data: st.DataObject, version: int, correlation: int
) -> None:
    by_id = version >= 13
    topics = _topics(
        "topic_id" if by_id else "name", "partition_responses", _produce_partition, by_id
    )
    values = data.draw(_entry({"responses": topics}, {"throttle_time": st.integers(0, 2**31 - 1)}))
    header = Header(0, version, correlation, "client")
    assert encode_fast(header, values) == _kio(header, values)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(data=st.data(), version=st.sampled_from(list(FETCH_VERSIONS)), correlation=_i32)
def test_fetch_answers_are_kio_s_bytes(data: st.DataObject, version: int, correlation: int) -> None:
    by_id = version >= 13
    topics = _topics("topic_id" if by_id else "topic", "partitions", _fetch_partition, by_id)
    values = data.draw(
        _entry(
            {"responses": topics},
            {"throttle_time": st.integers(0, 2**31 - 1), "error_code": _codes, "session_id": _i32},
        )
    )
    header = Header(1, version, correlation, None)
    assert encode_fast(header, values) == _kio(header, values)


PARTITION = {"partition_index": 0, "error_code": 0, "high_watermark": 5, "records": b"x"}


@pytest.mark.parametrize(
    ("header", "values"),
    [
        # versions and APIs the fast path does not write
        (Header(1, 11, 1, None), {"responses": []}),
        (Header(0, 8, 1, None), {"responses": []}),
        (Header(3, 12, 1, None), {"brokers": []}),
        # a tagged field, a field the module does not know, types other than plain ones
        (
            Header(1, 16, 1, None),
            {
                "responses": [
                    {"topic_id": uuid.uuid4(), "partitions": [{**PARTITION, "current_leader": {}}]}
                ]
            },
        ),
        (Header(1, 16, 1, None), {"responses": [], "node_endpoints": []}),
        (
            Header(1, 16, 1, None),
            {"responses": [{"topic_id": str(uuid.uuid4()), "partitions": []}]},
        ),
        (Header(1, 12, 1, None), {"responses": [{"topic_id": uuid.uuid4(), "partitions": []}]}),
        (
            Header(1, 16, 1, None),
            {
                "responses": [
                    {
                        "topic_id": uuid.uuid4(),
                        "partitions": [{**PARTITION, "records": memoryview(b"x")}],
                    }
                ]
            },
        ),
        (Header(0, 10, 1, None), {"responses": [], "throttle_time": 1.5}),
        (
            Header(0, 10, 1, None),
            {"responses": [{"name": "t", "partition_responses": [{"index": 2**40}]}]},
        ),
    ],
)
def test_unusual_answers_are_left_to_kio(header: Header, values: dict[str, Any]) -> None:
    assert encode_fast(header, values) is None
