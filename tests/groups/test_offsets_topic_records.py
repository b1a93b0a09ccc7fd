"""Replaying ``__consumer_offsets`` skips and reports a record it cannot decode, and
applies every other record as before (pure: no Ray)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raystream.errors import InvalidRecordError
from raystream.groups.group import NO_GENERATION, Group
from raystream.groups.offsets_topic import (
    GroupStore,
    OffsetAndMetadata,
    decode_record,
    group_record,
    offset_records,
)
from raystream.types import TopicPartition

TP = TopicPartition("t", 0)


def key(*parts: object) -> bytes:
    return json.dumps(parts, separators=(",", ":")).encode()


def fetched(records: list[tuple[bytes | None, bytes | None]], first_offset: int = 0) -> pa.Table:
    """Records as a fetch returns them: key, value and their offsets."""
    return pa.table(
        {
            "key": pa.array([k for k, _ in records], pa.binary()),
            "value": pa.array([v for _, v in records], pa.binary()),
            "offset": pa.array(range(first_offset, first_offset + len(records)), pa.int64()),
        }
    )


def a_group() -> Group:
    group = Group("g")
    group.join("", None, "c", ["t"], ("range",), (), NO_GENERATION, 10.0, 30.0, 0.0, None)
    group.complete({"t": 2}, 0.0)
    return group


def rows(table: pa.Table) -> list[tuple[bytes, bytes]]:
    return list(zip(table["key"].to_pylist(), table["value"].to_pylist(), strict=True))


BAD = [
    (None, b"{}"),
    (b"not json", b"{}"),
    (key("offset", "g"), b"{}"),
    (key("offset", "g", "t", -1), json.dumps({"offset": 1}).encode()),
    (key("offset", "g", "t", 0), b"not json"),
    (key("offset", "g", "t", 0), json.dumps({"offset": "7"}).encode()),
    (key("offset", "g", "t", 0), json.dumps({"offset": 7, "extra": 1}).encode()),
    (key("offset", "g", "t", 0), json.dumps([7]).encode()),
    (key("group", "g"), json.dumps({"generation": "one"}).encode()),
    (key("group", "g"), json.dumps({**a_group().to_dict(), "members": [{"id": 3}]}).encode()),
    (key("somethingelse", "g"), b"{}"),
    (key("offset", "", "t", 0), json.dumps({"offset": 1}).encode()),
]


@pytest.mark.parametrize("record", BAD, ids=[repr(k)[:40] + repr(v)[:30] for k, v in BAD])
def test_a_record_that_does_not_fit_is_refused_with_the_reason(record) -> None:
    with pytest.raises(InvalidRecordError):
        decode_record(*record)


def test_bad_records_are_skipped_with_their_offsets_and_the_rest_applied() -> None:
    group = a_group()
    good_offset = offset_records("g", {TP: OffsetAndMetadata(42, "m", 7)})
    later_offset = offset_records("g", {TP: OffsetAndMetadata(50, "", 9)})
    records = [*rows(group_record(group)), *rows(good_offset), *BAD, *rows(later_offset)]
    store = GroupStore()
    skipped = store.replay(fetched(records, first_offset=100), now=5.0)
    assert [offset for offset, _ in skipped] == list(range(102, 102 + len(BAD)))
    assert all(reason for _, reason in skipped)
    assert store.offsets["g"] == {TP: OffsetAndMetadata(50, "", 9)}
    assert store.groups["g"].to_dict() == group.to_dict()


def test_well_formed_records_decode_as_they_were_written() -> None:
    group = a_group()
    ((k, v),) = rows(group_record(group))
    assert decode_record(k, v) == ("group", "g", group.to_dict())
    ((k, v),) = rows(offset_records("g", {TP: OffsetAndMetadata(3, "x", 4)}))
    assert decode_record(k, v) == ("offset", "g", TP, OffsetAndMetadata(3, "x", 4))
    assert decode_record(k, None) == ("offset", "g", TP, None)  # a tombstone


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=40), st.sampled_from([k for k, _ in BAD])),
            st.one_of(st.none(), st.binary(max_size=40), st.sampled_from([v for _, v in BAD])),
        ),
        max_size=8,
    )
)
def test_no_record_stops_a_replay(records) -> None:
    store = GroupStore()
    skipped = store.replay(fetched(records), now=0.0)
    for offset, reason in skipped:
        assert 0 <= offset < len(records) and reason
