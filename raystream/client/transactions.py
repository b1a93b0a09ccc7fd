"""The transactional producer's side of a transaction: its states and coordinator calls.

Kafka's ``TransactionManager``, reduced to what raystream's producer needs. States::

    UNINITIALIZED ──init_transactions──▶ READY ──begin──▶ IN_TRANSACTION
                                          ▲                 │ commit: flush, end_txn(commit)
                                          │                 │ abort:  flush, end_txn(abort)
                                          └─────────────────┘
    IN_TRANSACTION ──a send failed──▶ ABORTABLE_ERROR ──abort──▶ READY
    any ──fenced (a newer producer, or a timeout abort)──▶ FATAL_ERROR (for good)

A call made in a state that does not allow it raises InvalidTxnStateError naming the
state. The partitions a transaction writes to are added at the coordinator before
their first batch goes out (by the sender, one call for every partition of a drain, so
a ``send_batch`` over many partitions costs one call); commit and abort flush first,
so every batch is acknowledged (or failed) before the outcome is asked for. A failed
batch makes the transaction abortable only: its sequence numbers leave a gap, so
after the abort the producer takes a new epoch (``init_producer_id`` again), which
restarts every partition's sequence at 0.

Consume-transform-produce loops send their offsets for the same group in every
transaction. So the group's ``__consumer_offsets`` partition, once learned from the
coordinator, is added with the first partitions of the next transaction, in the same
call, and ``send_offsets_to_transaction`` then needs no coordinator call of its own:
one replicated state write per transaction fewer. A transaction that then sends no
offsets for that group costs a marker on that partition at its end, and the next one
goes back to asking.

Thread-safety: the application's thread drives the states, the sender thread adds
partitions; a lock guards what both touch.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable
from typing import Any

from raystream.errors import InvalidTxnStateError, ProducerFencedError, RaystreamError
from raystream.groups.offsets_topic import OFFSETS_TOPIC

Partition = tuple[str, int]


class TxnClientState(str, enum.Enum):
    """Where a transactional producer stands (Kafka's client states)."""

    UNINITIALIZED = "UNINITIALIZED"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING = "COMMITTING_TRANSACTION"
    ABORTING = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class TransactionManager:
    """State and coordinator calls of one transactional producer.

    Args:
        cluster: the cluster (its transaction coordinator is asked).
        transactional_id: the producer's transactional id.
        timeout_ms: the producer's ``transaction_timeout_ms``.
        request_timeout_ms: how long one coordinator call may take, retries included.
    """

    def __init__(
        self, cluster: Any, transactional_id: str, timeout_ms: int, request_timeout_ms: int
    ) -> None:
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.request_timeout_s = request_timeout_ms / 1000
        self.state = TxnClientState.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self.partitions: set[Partition] = set()
        self._results: set[Any] = set()
        self._error: BaseException | None = None
        self._offsets_partitions: dict[str, int] = {}  # group -> its offsets partition
        self._groups: set[str] = set()  # groups whose offsets this transaction sent
        self._expected: set[str] = set()  # the previous transaction's groups
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ states

    def _require(self, what: str, *states: TxnClientState) -> None:
        if self.state is TxnClientState.FATAL_ERROR:
            assert self._error is not None
            raise self._error
        if self.state not in states:
            raise InvalidTxnStateError(
                f"{what}() is not allowed in state {self.state.value} of transactional "
                f"producer {self.transactional_id!r}"
                + (f" (cause: {self._error})" if self._error is not None else "")
            )

    def require_open(self, what: str) -> None:
        """Refuse ``what`` unless a transaction is open (sends belong to one)."""
        if self.state is not TxnClientState.IN_TRANSACTION:
            self._require(what, TxnClientState.IN_TRANSACTION)

    def track(self, result: Any) -> None:
        """Remember a send's shared result: commit checks that it succeeded."""
        self._results.add(result)

    def init(self) -> tuple[int, int]:
        """Get the producer id and a new epoch (fencing older producers of the id).

        An open transaction of an older producer with the same id is aborted by the
        coordinator first.
        """
        self._require("init_transactions", TxnClientState.UNINITIALIZED)
        self._take_identity()
        self.state = TxnClientState.READY
        return self.producer_id, self.producer_epoch

    def _take_identity(self) -> None:
        self.producer_id, self.producer_epoch = self._call(
            "init_producer_id", self.transactional_id, self.timeout_ms
        )

    def begin(self) -> None:
        """Open a transaction (locally: the coordinator learns of it with its first
        partition)."""
        self._require("begin_transaction", TxnClientState.READY)
        with self._lock:
            self.partitions = set()
            self._results = set()
            self._error = None
        self.state = TxnClientState.IN_TRANSACTION

    def begin_end(self, commit: bool) -> None:
        """Check that the transaction may end this way; the producer flushes next."""
        if commit:
            self._require("commit_transaction", TxnClientState.IN_TRANSACTION)
            self.state = TxnClientState.COMMITTING
        else:
            self._require(
                "abort_transaction", TxnClientState.IN_TRANSACTION, TxnClientState.ABORTABLE_ERROR
            )
            self.state = TxnClientState.ABORTING

    def end(self, commit: bool) -> bool:
        """Ask the coordinator to commit or abort (after the flush); returns whether the
        producer must take the new epoch it now has (after a failed send)."""
        failed = self._first_failure()
        if commit and failed is not None:
            self._fail(failed)
            raise failed
        with self._lock:
            partitions = set(self.partitions)
            bump = failed is not None or self._error is not None
        if partitions:
            try:
                self._call(
                    "end_txn", self.transactional_id, self.producer_id, self.producer_epoch, commit
                )
            except RaystreamError as error:
                self._fail(error)
                raise
        if bump:
            self._take_identity()
        with self._lock:
            self.partitions = set()
            self._results = set()
            self._error = None
            self._expected, self._groups = self._groups, set()
        self.state = TxnClientState.READY
        return bump

    def _first_failure(self) -> BaseException | None:
        """The first error of a send of this transaction, if any failed."""
        for result in self._results:
            if result.error is not None:
                return result.error
            for error in result.record_errors.values():
                return error
            for request in result.requests:
                if request.error is not None:
                    return request.error
        return None

    def _fail(self, error: BaseException) -> None:
        """Enter ABORTABLE_ERROR, or FATAL_ERROR when the producer was fenced."""
        with self._lock:
            if self._error is None or isinstance(error, ProducerFencedError):
                self._error = error
        if isinstance(error, ProducerFencedError):
            self.state = TxnClientState.FATAL_ERROR
        elif self.state is not TxnClientState.FATAL_ERROR:
            self.state = TxnClientState.ABORTABLE_ERROR

    # ------------------------------------------------------------ coordinator

    def add_partitions(self, partitions: Iterable[Partition]) -> BaseException | None:
        """Add the partitions not in the transaction yet (sender thread); the error
        that failed it, or None."""
        with self._lock:
            missing = set(partitions) - self.partitions
            if missing and not self.partitions:  # the transaction's first partitions
                missing.update(
                    (OFFSETS_TOPIC, self._offsets_partitions[group]) for group in self._expected
                )
        if not missing:
            return None
        missing = sorted(missing)
        try:
            self._call(
                "add_partitions",
                self.transactional_id,
                self.producer_id,
                self.producer_epoch,
                missing,
            )
        except RaystreamError as error:
            self._fail(error)
            return error
        with self._lock:
            self.partitions.update(missing)
        return None

    def add_offsets(self, group_id: str) -> int:
        """Add the group's ``__consumer_offsets`` partition (unless it came with the
        transaction's first partitions); returns its number."""
        self.require_open("send_offsets_to_transaction")
        with self._lock:
            partition = self._offsets_partitions.get(group_id)
            if partition is not None and (OFFSETS_TOPIC, partition) in self.partitions:
                self._groups.add(group_id)
                return partition
        try:
            partition = self._call(
                "add_offsets",
                self.transactional_id,
                self.producer_id,
                self.producer_epoch,
                group_id,
            )
        except RaystreamError as error:
            self._fail(error)
            raise
        with self._lock:
            self.partitions.add((OFFSETS_TOPIC, partition))
            self._offsets_partitions[group_id] = partition
            self._groups.add(group_id)
        return partition

    def fail(self, error: BaseException) -> None:
        """A step of the transaction failed outside the coordinator calls."""
        self._fail(error)

    def _call(self, method: str, *args: Any) -> Any:
        return self.cluster.transaction_coordinator_call(
            method, *args, timeout_s=self.request_timeout_s
        )


__all__ = ["TransactionManager", "TxnClientState"]
