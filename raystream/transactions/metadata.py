"""The transaction coordinator's rules for one transactional id, as data and functions.

Kafka's ``TransactionMetadata`` without the clock or the I/O: each transition is a
function of the current :class:`TransactionMetadata` and ``now_ms`` that returns the
next one (or raises the error the producer gets), and the coordinator persists the
result in ``__transaction_state`` before acting on it. States::

    Empty ──add_partitions──▶ Ongoing ──end(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
      ▲                        ▲ │    ──end(abort)───▶ PrepareAbort  ──markers──▶ CompleteAbort
      │                        └─┼── markers, when the end carried partitions (epoch + 1) ◀┘
      └── init (epoch + 1) ◀─────┴─ (init or timeout: abort first, with the epoch bumped)

Complete* and Empty accept a new transaction (add_partitions) or a new producer
(init). An end may carry partitions into the next transaction: once its markers are
written the id goes straight to Ongoing with them, so a loop that writes the same
partitions in every transaction adds none of them again. That next transaction takes
the next epoch (a new producer id when the epochs run out), as Kafka's transactions
v2 do (KIP-890): a marker of the ended one that a restarted coordinator writes again
is then refused by a partition the next one already wrote to, instead of ending it
there. The producer numbers its ends, so a retry is answered as the first attempt
was, even from the epoch before.

Prepare* only finish: a producer asking anything meanwhile is told to retry
(ConcurrentTransactionsError). The coordinator has each request about the id wait for
the markers in flight first, so it is decided against the completed state. The epoch
is bumped by every init (which fences the previous producer with the same
transactional id: its calls carry the old epoch and get ProducerFencedError) and by a
timeout abort (so the vanished producer, if it comes back, is fenced rather than
mixing into the next transaction). Markers of an abort that follows a bump carry the
new epoch, which fences the old one on every partition of the transaction.

Example:
    >>> meta = new_transaction("orders-tx", 7, 60_000, now_ms=0)
    >>> meta = add_partitions(meta, 7, 0, [("out", 0)], now_ms=5)
    >>> meta.state, sorted(meta.partitions)
    (<TxnState.ONGOING: 'Ongoing'>, [('out', 0)])
    >>> meta = complete(prepare_end(meta, 7, 0, commit=True, now_ms=9), now_ms=12)
    >>> meta.state
    <TxnState.COMPLETE_COMMIT: 'CompleteCommit'>
    >>> meta = add_partitions(meta, 7, 0, [("out", 0)], now_ms=20)
    >>> meta = complete(prepare_end(meta, 7, 0, True, 25, number=1, carry=[("out", 0)]), 30)
    >>> meta.state, sorted(meta.partitions), meta.producer_epoch
    (<TxnState.ONGOING: 'Ongoing'>, [('out', 0)], 1)
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from raystream.errors import (
    ConcurrentTransactionsError,
    InvalidRequestError,
    InvalidTxnStateError,
    ProducerFencedError,
)

MAX_PRODUCER_EPOCH = (1 << 15) - 1
"""Producer epochs are int16; past the last one a transactional id gets a new id."""
MAX_TRANSACTION_TIMEOUT_MS = 900_000
"""Kafka's ``transaction.max.timeout.ms`` default: the longest timeout a producer may ask."""


class TxnState(str, enum.Enum):
    """Where a transactional id's current transaction stands (Kafka's names)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def preparing(self) -> bool:
        """Whether markers are being written (the outcome is decided, not yet done)."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    """One transactional id's producer and current transaction.

    Attributes:
        transactional_id: the id the producer was configured with.
        producer_id, producer_epoch: the producer the id maps to now.
        timeout_ms: the producer's ``transaction_timeout_ms``.
        state: see :class:`TxnState`.
        partitions: (topic, partition) of every partition written in the transaction.
        txn_start_ms: when the transaction began (its first partition), -1 if none.
        last_update_ms: when the metadata last changed.
        next_partitions: (Prepare* only) the partitions the next transaction starts
            with once this one completes, and ``next_producer`` its (producer id,
            epoch).
        ended: (number, producer id, epoch, commit) of the producer's last decided
            end since its init, to answer a retry of it.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    txn_start_ms: int = -1
    last_update_ms: int = -1
    next_partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    next_producer: tuple[int, int] | None = None
    ended: tuple[int, int, int, bool] | None = None

    def to_dict(self) -> dict:
        """The JSON-able form stored in ``__transaction_state``."""
        return {
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "timeout_ms": self.timeout_ms,
            "state": self.state.value,
            "partitions": sorted([t, p] for t, p in self.partitions),
            "txn_start_ms": self.txn_start_ms,
            "last_update_ms": self.last_update_ms,
            "next_partitions": sorted([t, p] for t, p in self.next_partitions),
            "next_producer": self.next_producer,
            "ended": self.ended,
        }

    @classmethod
    def from_dict(cls, transactional_id: str, data: dict) -> TransactionMetadata:
        """The inverse of :meth:`to_dict` (records written before the carried
        partitions and the ended number existed read as having none)."""
        next_producer, ended = data.get("next_producer"), data.get("ended")
        return cls(
            transactional_id,
            data["producer_id"],
            data["producer_epoch"],
            data["timeout_ms"],
            TxnState(data["state"]),
            frozenset((t, p) for t, p in data["partitions"]),
            data["txn_start_ms"],
            data["last_update_ms"],
            frozenset((t, p) for t, p in data.get("next_partitions", ())),
            None if next_producer is None else tuple(next_producer),
            None if ended is None else tuple(ended),
        )


def check_timeout(timeout_ms: object) -> int:
    """A valid transaction timeout, or InvalidRequestError naming the bad value."""
    if (
        not isinstance(timeout_ms, int)
        or isinstance(timeout_ms, bool)
        or not 1 <= timeout_ms <= MAX_TRANSACTION_TIMEOUT_MS
    ):
        raise InvalidRequestError(
            f"transaction_timeout_ms={timeout_ms!r} must be an integer in "
            f"[1, {MAX_TRANSACTION_TIMEOUT_MS}]"
        )
    return timeout_ms


def new_transaction(
    transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int
) -> TransactionMetadata:
    """The metadata of a transactional id seen for the first time (epoch 0)."""
    return TransactionMetadata(
        transactional_id, producer_id, 0, check_timeout(timeout_ms), last_update_ms=now_ms
    )


def needs_abort_before_init(meta: TransactionMetadata) -> bool:
    """Whether a new producer's init must first abort the open transaction."""
    return meta.state is TxnState.ONGOING


def bump_epoch(meta: TransactionMetadata, now_ms: int) -> TransactionMetadata:
    """Abort the open transaction with a bumped epoch (init or timeout fencing).

    Returns the PrepareAbort metadata whose markers fence the previous epoch.

    Raises:
        InvalidTxnStateError: there is no open transaction to abort.
    """
    if meta.state is not TxnState.ONGOING:
        raise InvalidTxnStateError(
            f"transactional id {meta.transactional_id!r}: cannot abort in state {meta.state.value}"
        )
    return dataclasses.replace(
        meta,
        producer_epoch=min(meta.producer_epoch + 1, MAX_PRODUCER_EPOCH),
        state=TxnState.PREPARE_ABORT,
        next_partitions=frozenset(),
        next_producer=None,
        ended=None,
        last_update_ms=now_ms,
    )


def init_producer(
    meta: TransactionMetadata, timeout_ms: int, new_producer_id: int | None, now_ms: int
) -> TransactionMetadata:
    """A new producer takes the transactional id: the epoch goes up by one.

    ``new_producer_id`` is used when the epoch is exhausted (Kafka's rule: a fresh id
    at epoch 0). The state must be Empty or Complete* (call :func:`bump_epoch` and
    finish the abort first when a transaction is open).

    Raises:
        ConcurrentTransactionsError: markers are being written; retry shortly.
        InvalidTxnStateError: a transaction is still open.
    """
    timeout_ms = check_timeout(timeout_ms)
    if meta.state.preparing:
        raise ConcurrentTransactionsError(
            f"transactional id {meta.transactional_id!r} is in state {meta.state.value}; "
            "retry once it completes"
        )
    if meta.state is TxnState.ONGOING:
        raise InvalidTxnStateError(
            f"transactional id {meta.transactional_id!r} has an open transaction to abort first"
        )
    producer_id, epoch = _next_producer(meta, new_producer_id)
    return dataclasses.replace(
        meta,
        producer_id=producer_id,
        producer_epoch=epoch,
        timeout_ms=timeout_ms,
        state=TxnState.EMPTY,
        partitions=frozenset(),
        txn_start_ms=-1,
        last_update_ms=now_ms,
        ended=None,
    )


def check_producer(meta: TransactionMetadata, producer_id: int, producer_epoch: int) -> None:
    """Refuse a call from anyone but the id's current producer.

    Raises:
        ProducerFencedError: another producer id or an older epoch (a zombie).
    """
    if producer_id != meta.producer_id or producer_epoch < meta.producer_epoch:
        raise ProducerFencedError(
            f"transactional id {meta.transactional_id!r}: producer {producer_id} epoch "
            f"{producer_epoch} was fenced by producer {meta.producer_id} epoch "
            f"{meta.producer_epoch}"
        )
    if producer_epoch > meta.producer_epoch:
        raise InvalidRequestError(
            f"transactional id {meta.transactional_id!r}: epoch {producer_epoch} was never "
            f"given out (current {meta.producer_epoch})"
        )


def add_partitions(
    meta: TransactionMetadata,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[tuple[str, int]],
    now_ms: int,
) -> TransactionMetadata:
    """Add partitions to the transaction, starting one if none is open.

    Raises:
        ProducerFencedError: not the current producer.
        ConcurrentTransactionsError: the previous transaction is completing.
    """
    check_producer(meta, producer_id, producer_epoch)
    if meta.state.preparing:
        raise ConcurrentTransactionsError(
            f"transactional id {meta.transactional_id!r} is in state {meta.state.value}"
        )
    added = frozenset(partitions)
    if meta.state is TxnState.ONGOING:
        if added <= meta.partitions:
            return meta
        return dataclasses.replace(meta, partitions=meta.partitions | added, last_update_ms=now_ms)
    return dataclasses.replace(
        meta,
        state=TxnState.ONGOING,
        partitions=added,
        txn_start_ms=now_ms,
        last_update_ms=now_ms,
    )


def prepare_end(
    meta: TransactionMetadata,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    now_ms: int,
    number: int = -1,
    carry: Iterable[tuple[str, int]] = (),
    new_producer_id: int | None = None,
) -> TransactionMetadata:
    """Decide the transaction's outcome: Ongoing -> PrepareCommit or PrepareAbort.

    ``number`` is the producer's number for this end (-1: none). ``carry`` lists the
    partitions the next transaction starts with (see :func:`complete`); it takes the
    next epoch, or ``new_producer_id`` at epoch 0 when the epochs are used up
    (:func:`needs_new_producer_id`). A retry of an end already decided the same way
    (the same number from the same producer, or the same state) returns ``meta``
    unchanged: the caller waits for, or finds, its completion.

    Raises:
        ProducerFencedError: not the current producer.
        InvalidTxnStateError: no open transaction, it was decided the other way, or
            carrying needs a new producer id and none was given.
    """
    verb = "commit" if commit else "abort"
    retry = (number, producer_id, producer_epoch)
    if number >= 0 and meta.ended is not None and meta.ended[:3] == retry:
        if commit != meta.ended[3]:
            raise InvalidTxnStateError(
                f"transactional id {meta.transactional_id!r}: cannot {verb} transaction "
                f"{number}, it was {'committed' if meta.ended[3] else 'aborted'}"
            )
        return meta
    check_producer(meta, producer_id, producer_epoch)
    wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    if meta.state in (wanted, done):
        return meta
    if meta.state is not TxnState.ONGOING:
        raise InvalidTxnStateError(
            f"transactional id {meta.transactional_id!r}: cannot {verb} in state {meta.state.value}"
        )
    carried = frozenset(carry)
    next_producer = _next_producer(meta, new_producer_id) if carried else None
    return dataclasses.replace(
        meta,
        state=wanted,
        next_partitions=carried,
        next_producer=next_producer,
        ended=(number, producer_id, producer_epoch, commit) if number >= 0 else None,
        last_update_ms=now_ms,
    )


def needs_new_producer_id(meta: TransactionMetadata) -> bool:
    """Whether the id's next epoch would pass the last one (a new producer id then)."""
    return meta.producer_epoch + 1 > MAX_PRODUCER_EPOCH


def _next_producer(meta: TransactionMetadata, new_producer_id: int | None) -> tuple[int, int]:
    """The (producer id, epoch) after the id's current one: the next epoch, or
    ``new_producer_id`` at epoch 0 once the epochs are used up (Kafka's rule).

    Raises:
        InvalidTxnStateError: the epochs are used up and no new producer id was given.
    """
    if not needs_new_producer_id(meta):
        return meta.producer_id, meta.producer_epoch + 1
    if new_producer_id is None:
        raise InvalidTxnStateError(
            f"transactional id {meta.transactional_id!r} needs a new producer id"
        )
    return new_producer_id, 0


def complete(meta: TransactionMetadata, now_ms: int) -> TransactionMetadata:
    """Markers are written everywhere: Prepare* -> Complete*, no partitions left; or,
    when the end carried partitions, straight to the next transaction: Ongoing with
    them from ``now_ms``, under the next producer epoch."""
    if not meta.state.preparing:
        return meta
    if meta.next_producer is not None:
        producer_id, producer_epoch = meta.next_producer
        return dataclasses.replace(
            meta,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            state=TxnState.ONGOING,
            partitions=meta.next_partitions,
            next_partitions=frozenset(),
            next_producer=None,
            txn_start_ms=now_ms,
            last_update_ms=now_ms,
        )
    state = (
        TxnState.COMPLETE_COMMIT
        if meta.state is TxnState.PREPARE_COMMIT
        else TxnState.COMPLETE_ABORT
    )
    return dataclasses.replace(
        meta, state=state, partitions=frozenset(), txn_start_ms=-1, last_update_ms=now_ms
    )


def timed_out(meta: TransactionMetadata, now_ms: int) -> bool:
    """Whether an open transaction has outlived its producer's timeout."""
    return meta.state is TxnState.ONGOING and now_ms - meta.txn_start_ms > meta.timeout_ms


__all__ = [
    "MAX_PRODUCER_EPOCH",
    "TransactionMetadata",
    "TxnState",
    "add_partitions",
    "bump_epoch",
    "check_producer",
    "check_timeout",
    "complete",
    "init_producer",
    "needs_abort_before_init",
    "needs_new_producer_id",
    "new_transaction",
    "prepare_end",
    "timed_out",
]
