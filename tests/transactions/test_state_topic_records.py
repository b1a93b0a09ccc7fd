"""Replaying ``__transaction_state`` skips and reports a record it cannot decode, and
applies every other record as before (pure: no Ray)."""

from __future__ import annotations

import dataclasses
import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raystream.errors import InvalidRecordError
from raystream.transactions.metadata import TxnState, add_partitions, new_transaction
from raystream.transactions.state_topic import (
    TransactionStore,
    decode_record,
    transaction_record,
)


def fetched(records: list[tuple[bytes | None, bytes | None]], first_offset: int = 0) -> pa.Table:
    """Records as a fetch returns them: key, value and their offsets."""
    return pa.table(
        {
            "key": pa.array([k for k, _ in records], pa.binary()),
            "value": pa.array([v for _, v in records], pa.binary()),
            "offset": pa.array(range(first_offset, first_offset + len(records)), pa.int64()),
        }
    )


def record_of(meta) -> tuple[bytes, bytes]:
    table = transaction_record(meta)
    return table["key"][0].as_py(), table["value"][0].as_py()


GOOD = add_partitions(new_transaction("tx", 5, 1000, now_ms=0), 5, 0, [("t", 0)], now_ms=1)
FIELDS = json.loads(record_of(GOOD)[1])

BAD = [
    (None, b"{}"),
    (b"\xff\xfe", record_of(GOOD)[1]),
    (b"", record_of(GOOD)[1]),
    (b"tx", b"not json"),
    (b"tx", b"[1, 2]"),
    (b"tx", json.dumps({**FIELDS, "producer_id": "5"}).encode()),
    (b"tx", json.dumps({**FIELDS, "state": "Sleeping"}).encode()),
    (b"tx", json.dumps({**FIELDS, "partitions": [["t", "0"]]}).encode()),
    (b"tx", json.dumps({**FIELDS, "next_producer": [1]}).encode()),
    (b"tx", json.dumps({**FIELDS, "ended": [1, 2, 3, "yes"]}).encode()),
    (b"tx", json.dumps({**FIELDS, "surprise": 1}).encode()),
    (b"tx", json.dumps({k: v for k, v in FIELDS.items() if k != "timeout_ms"}).encode()),
]


@pytest.mark.parametrize("record", BAD, ids=[repr(k)[:20] + repr(v)[-30:] for k, v in BAD])
def test_a_record_that_does_not_fit_is_refused_with_the_reason(record) -> None:
    with pytest.raises(InvalidRecordError):
        decode_record(*record)


def test_bad_records_are_skipped_with_their_offsets_and_the_rest_applied() -> None:
    later = dataclasses.replace(GOOD, state=TxnState.PREPARE_COMMIT, last_update_ms=2)
    other = new_transaction("other", 6, 1000, now_ms=0)
    records = [record_of(GOOD), record_of(other), *BAD, record_of(later)]
    store = TransactionStore()
    skipped = store.replay(fetched(records, first_offset=10))
    assert [offset for offset, _ in skipped] == list(range(12, 12 + len(BAD)))
    assert all(reason for _, reason in skipped)
    assert store.transactions == {"tx": later, "other": other}


def test_records_written_before_the_later_fields_existed_still_decode() -> None:
    later_fields = ("next_partitions", "next_producer", "ended")
    old = {k: v for k, v in FIELDS.items() if k not in later_fields}
    assert decode_record(b"tx", json.dumps(old).encode()) == ("tx", GOOD)
    assert decode_record(b"tx", None) == ("tx", None)  # a tombstone


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=20), st.sampled_from([k for k, _ in BAD])),
            st.one_of(st.none(), st.binary(max_size=40), st.sampled_from([v for _, v in BAD])),
        ),
        max_size=8,
    )
)
def test_no_record_stops_a_replay(records) -> None:
    skipped = TransactionStore().replay(fetched(records))
    for offset, reason in skipped:
        assert 0 <= offset < len(records) and reason
