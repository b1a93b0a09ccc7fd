"""The records of ``__transaction_state``: each transactional id's latest metadata.

The transaction coordinator keeps its durable state in this internal, compacted,
replicated topic, as Kafka does: key = the transactional id (UTF-8), value = the
JSON of :meth:`TransactionMetadata.to_dict
<raystream.transactions.metadata.TransactionMetadata.to_dict>`. Compaction keeps the
latest state of each id; replaying the topic from the start rebuilds every id
(:class:`TransactionStore`). An id lives in one partition (:func:`partition_for`), so
its records stay in order.
"""

from __future__ import annotations

import json

import pyarrow as pa

from raystream.client.partitioner import murmur2
from raystream.transactions.metadata import TransactionMetadata

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


class TransactionStore:
    """Every transactional id of some ``__transaction_state`` partitions, by replay."""

    def __init__(self) -> None:
        self.transactions: dict[str, TransactionMetadata] = {}

    def replay(self, table: pa.Table) -> None:
        """Apply records read from the topic, in offset order (null value: deleted)."""
        for key, value in zip(
            table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
        ):
            if key is None:
                continue
            transactional_id = key.decode()
            if value is None:
                self.transactions.pop(transactional_id, None)
            else:
                self.transactions[transactional_id] = TransactionMetadata.from_dict(
                    transactional_id, json.loads(value)
                )


__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionStore", "partition_for", "transaction_record"]
