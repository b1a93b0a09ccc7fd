"""The records of ``__transaction_state``: each transactional id's latest metadata.

The transaction coordinator keeps its durable state in this internal, compacted,
replicated topic, as Kafka does: key = the transactional id (UTF-8), value = the
JSON of :meth:`TransactionMetadata.to_dict
<raystream.transactions.metadata.TransactionMetadata.to_dict>`. Compaction keeps the
latest state of each id; replaying the topic from the start rebuilds every id
(:class:`TransactionStore`). An id lives in one partition (:func:`partition_for`), so
its records stay in order.

A record that does not decode (a key that is not UTF-8, a value that is not the JSON
of a metadata, a field of the wrong type) is skipped by the replay and reported, never
in the way of the records after it: one bad record must not stop the coordinator from
loading every other id.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from raystream.client.partitioner import murmur2
from raystream.errors import InvalidRecordError
from raystream.records import keyed_rows
from raystream.transactions.metadata import TransactionMetadata, TxnState

TRANSACTION_STATE_TOPIC = "__transaction_state"


def partition_for(transactional_id: str, partitions: int) -> int:
    """The partition of ``__transaction_state`` that holds ``transactional_id``."""
    return (murmur2(transactional_id.encode()) & 0x7FFFFFFF) % partitions


def transaction_record(meta: TransactionMetadata) -> pa.Table:
    """One id's metadata as a one-row table for ``Producer.send_batch``."""
    return pa.table(
        {
            "key": pa.array([meta.transactional_id.encode()], pa.binary()),
            "value": pa.array([json.dumps(meta.to_dict()).encode()], pa.binary()),
        }
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_partitions(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and _is_int(p[1])
        for p in value
    )


def _is_ints(count: int, last: type | None = None) -> Any:
    def check(value: Any) -> bool:
        if value is None:
            return True
        if not isinstance(value, list) or len(value) != count:
            return False
        head = value[:-1] if last is not None else value
        return all(map(_is_int, head)) and (last is None or isinstance(value[-1], last))

    return check


_FIELDS = {
    "producer_id": _is_int,
    "producer_epoch": _is_int,
    "timeout_ms": _is_int,
    "state": lambda v: v in {s.value for s in TxnState},
    "partitions": _is_partitions,
    "txn_start_ms": _is_int,
    "last_update_ms": _is_int,
    "next_partitions": _is_partitions,
    "next_producer": _is_ints(2),
    "ended": _is_ints(4, bool),
}
_LATER_FIELDS = frozenset({"next_partitions", "next_producer", "ended"})
"""Fields that records written before they existed lack."""


def decode_record(key: bytes | None, value: bytes | None) -> tuple[str, TransactionMetadata | None]:
    """One record of the topic, checked: (transactional id, its metadata, or None for a
    tombstone).

    Raises:
        InvalidRecordError: the record is not one this topic holds; says what is wrong.
    """
    if key is None:
        raise InvalidRecordError("a record without a key")
    try:
        transactional_id = key.decode()
    except UnicodeDecodeError as error:
        raise InvalidRecordError(f"key {key[:80]!r} is not UTF-8: {error}") from None
    if not transactional_id:
        raise InvalidRecordError("an empty transactional id")
    if value is None:
        return transactional_id, None
    try:
        data = json.loads(value)
    except ValueError as error:
        raise InvalidRecordError(f"value of {transactional_id!r} is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise InvalidRecordError(f"value of {transactional_id!r} is not a JSON object: {data!r}")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise InvalidRecordError(f"value of {transactional_id!r} has unknown fields {unknown}")
    for name, check in _FIELDS.items():
        if name not in data and name not in _LATER_FIELDS:
            raise InvalidRecordError(f"value of {transactional_id!r} lacks {name!r}")
        if name in data and not check(data[name]):
            raise InvalidRecordError(
                f"value of {transactional_id!r} has a bad {name}: {data[name]!r}"
            )
    return transactional_id, TransactionMetadata.from_dict(transactional_id, data)


class TransactionStore:
    """Every transactional id of some ``__transaction_state`` partitions, by replay."""

    def __init__(self) -> None:
        self.transactions: dict[str, TransactionMetadata] = {}

    def replay(self, table: pa.Table) -> list[tuple[int, str]]:
        """Apply records read from the topic, in offset order (null value: deleted);
        the ones that do not decode are left out and returned as (offset, reason) pairs
        (offsets from the table's ``offset`` column, -1 without one)."""
        skipped: list[tuple[int, str]] = []
        for offset, key, value in keyed_rows(table):
            try:
                transactional_id, meta = decode_record(key, value)
            except InvalidRecordError as error:
                skipped.append((offset, str(error)))
                continue
            if meta is None:
                self.transactions.pop(transactional_id, None)
            else:
                self.transactions[transactional_id] = meta
        return skipped


__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "TransactionStore",
    "decode_record",
    "partition_for",
    "transaction_record",
]
