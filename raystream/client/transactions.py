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
so every batch is acknowledged (or failed) before the outcome is asked for. The
coordinator answers an end once the outcome is persisted and writes the markers after
(see :mod:`raystream.actors.txn_coordinator`): the next transaction's calls and
batches wait for them, at the coordinator and at each partition. A failed
batch makes the transaction abortable only: its sequence numbers leave a gap, so
after the abort the producer takes a new epoch (``init_producer_id`` again), which
restarts every partition's sequence at 0.

Consume-transform-produce loops write the same partitions (output, and the group's
``__consumer_offsets`` partition) in every transaction. So an end carries the
partitions its transaction wrote into the next one: the coordinator answers with the
next transaction already open on them, under the next epoch, and a loop adds no
partition and makes no ``send_offsets_to_transaction`` call of its own: one
replicated state write and one coordinator call per transaction fewer (Kafka's
transactions v2, KIP-890, get rid of the add in the same spirit). The carried
transaction is there for the taking for :data:`CARRY_TTL_MS` (a tenth of the
transaction timeout if that is less), so a transaction that takes it keeps nearly all
of its timeout; past that a background thread ends it as an abort (it has no records),
so an idle producer is never fenced by the coordinator's timeout, and ``begin`` starts
afresh.

Thread-safety: the application's thread drives the states, the sender thread adds
partitions, the release thread ends carried transactions nobody took; a lock guards
what the first two touch, a condition what the last one does.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from raystream.errors import InvalidTxnStateError, ProducerFencedError, RaystreamError
from raystream.groups.offsets_topic import OFFSETS_TOPIC
from raystream.requests import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    Request,
)

logger = logging.getLogger(__name__)

Partition = tuple[str, int]
CARRY_TTL_MS = 1_000
"""How long a carried transaction waits to be taken by the next ``begin`` (at most a
tenth of the transaction timeout): a loop takes it within milliseconds."""
RELEASE_RETRY_S = 1.0
CLOSE_RELEASE_S = 2.0
"""How long ``close`` tries to end a carried transaction (the cluster may be gone)."""


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
        self._written: set[Partition] = set()  # what this transaction sent to
        self._number = 0  # this producer's number for its next end
        self._lock = threading.Lock()
        self._carry = threading.Condition()
        self._carried: frozenset[Partition] = frozenset()  # the open next transaction's
        self._carried_at = 0.0
        self._carry_ttl_s = min(CARRY_TTL_MS, timeout_ms / 10) / 1000
        self._releaser: threading.Thread | None = None
        self._closed = False

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
            InitProducerIdRequest(self.transactional_id, self.timeout_ms)
        )
        self._number = 0

    def begin(self) -> None:
        """Open a transaction: the one the last end carried if it is fresh (its
        partitions are in it already), else locally (the coordinator learns of it
        with its first partition)."""
        self._require("begin_transaction", TxnClientState.READY)
        with self._carry:
            carried = self._carried
            if carried and time.monotonic() - self._carried_at > self._carry_ttl_s:
                self._release()
                carried = frozenset()
            self._carried = frozenset()
        with self._lock:
            self.partitions = set(carried)
            self._written = set()
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
        """Ask the coordinator to commit or abort (after the flush), carrying the
        partitions written into the next transaction; returns whether the producer
        must take the id and epoch it now has (the next epoch, or a new one after a
        failed send)."""
        failed = self._first_failure()
        if commit and failed is not None:
            self._fail(failed)
            raise failed
        with self._lock:
            partitions = set(self.partitions)
            bump = failed is not None or self._error is not None
            carry = [] if bump else sorted(self._written)
        identity = (self.producer_id, self.producer_epoch)
        if partitions:
            try:
                self.producer_id, self.producer_epoch = self._call(
                    EndTxnRequest(
                        self.transactional_id,
                        self.producer_id,
                        self.producer_epoch,
                        commit,
                        self._number,
                        tuple(carry),
                    )
                )
            except RaystreamError as error:
                self._fail(error)
                raise
            self._number += 1
        if bump:
            self._take_identity()
        with self._lock:
            self.partitions = set()
            self._written = set()
            self._results = set()
            self._error = None
        if partitions and carry:
            self._hold(frozenset(carry))
        self.state = TxnClientState.READY
        return (self.producer_id, self.producer_epoch) != identity

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
            self._written.update(partitions)
            missing = self._written - self.partitions
        if not missing:
            return None
        missing = sorted(missing)
        try:
            self._call(
                AddPartitionsToTxnRequest(
                    self.transactional_id, self.producer_id, self.producer_epoch, tuple(missing)
                )
            )
        except RaystreamError as error:
            self._fail(error)
            return error
        with self._lock:
            self.partitions.update(missing)
        return None

    def add_offsets(self, group_id: str) -> int:
        """Add the group's ``__consumer_offsets`` partition (unless the transaction
        has it, carried from the last one); returns its number."""
        self.require_open("send_offsets_to_transaction")
        with self._lock:
            partition = self._offsets_partitions.get(group_id)
            if partition is not None and (OFFSETS_TOPIC, partition) in self.partitions:
                return partition
        try:
            partition = self._call(
                AddOffsetsToTxnRequest(
                    self.transactional_id, self.producer_id, self.producer_epoch, group_id
                )
            )
        except RaystreamError as error:
            self._fail(error)
            raise
        with self._lock:
            self.partitions.add((OFFSETS_TOPIC, partition))
            self._offsets_partitions[group_id] = partition
        return partition

    # ----------------------------------------------------------- carried transactions

    def _hold(self, carried: frozenset[Partition]) -> None:
        """Keep the transaction the last end opened for the next ``begin``, and have the
        release thread end it if nobody takes it in time."""
        with self._carry:
            self._carried, self._carried_at = carried, time.monotonic()
            if self._releaser is None:
                self._releaser = threading.Thread(
                    target=self._release_untaken,
                    name=f"raystream-txn-release-{self.transactional_id}",
                    daemon=True,
                )
                self._releaser.start()
            self._carry.notify()

    def _release(self, timeout_s: float | None = None) -> None:
        """End the carried transaction as an abort (it wrote nothing); the caller holds
        the carry condition. A fencing is fatal; other errors leave it carried."""
        try:
            self._call(
                EndTxnRequest(
                    self.transactional_id,
                    self.producer_id,
                    self.producer_epoch,
                    False,
                    self._number,
                ),
                timeout_s=timeout_s,
            )
        except ProducerFencedError as error:
            self._carried = frozenset()
            self._fail(error)
            raise
        self._number += 1
        self._carried = frozenset()

    def _release_untaken(self) -> None:
        """Release thread: end each carried transaction that outlives its wait."""
        with self._carry:
            while not self._closed:
                if not self._carried:
                    self._carry.wait()
                    continue
                left = self._carried_at + self._carry_ttl_s - time.monotonic()
                if left > 0:
                    self._carry.wait(left)
                    continue
                try:
                    self._release()
                except RaystreamError as error:
                    logger.warning(
                        "could not end the carried transaction of %r: %s",
                        self.transactional_id,
                        error,
                    )
                    self._carry.wait(RELEASE_RETRY_S)

    def close(self) -> None:
        """Stop the release thread, ending a carried transaction first (best effort,
        within :data:`CLOSE_RELEASE_S`: the coordinator's timeout ends it otherwise)."""
        with self._carry:
            self._closed = True
            self._carry.notify()
            if self._carried and self.state is TxnClientState.READY:
                try:
                    self._release(min(self.request_timeout_s, CLOSE_RELEASE_S))
                except RaystreamError as error:
                    logger.warning(
                        "closing: could not end the carried transaction of %r: %s",
                        self.transactional_id,
                        error,
                    )

    def fail(self, error: BaseException) -> None:
        """A step of the transaction failed outside the coordinator calls."""
        self._fail(error)

    def _call(self, request: Request, timeout_s: float | None = None) -> Any:
        return self.cluster.transaction_coordinator_call(
            request, timeout_s=timeout_s or self.request_timeout_s
        )


__all__ = ["TransactionManager", "TxnClientState"]
