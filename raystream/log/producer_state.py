"""Idempotent producers' state on one partition replica: who wrote which sequences.

Kafka's ``ProducerStateManager``, as plain data and rules (no Ray, no clock). For every
producer id that wrote to the partition it keeps the producer's epoch and the metadata
of its last :data:`BATCHES_TO_RETAIN` batches (first/last sequence, first/last offset),
which is what the leader needs to decide about an incoming batch:

- **append** — the batch's first sequence follows the producer's last one (or it is
  the first batch of a new epoch, sequence 0, or of an unknown producer, sequence 0);
- **duplicate** — same epoch and exactly the sequences of a retained batch: a retry of
  a batch already written; the leader answers with the original offsets;
- **gap** — the sequence is ahead of the next expected one: an earlier batch has not
  arrived yet (Ray may run pipelined calls out of order) or was lost; the leader waits
  a little for it, then refuses with OutOfOrderSequenceError;
- **unknown** — no state for the producer and a sequence other than 0: either a
  reordered successor of the producer's first batch, or a producer whose state was
  lost (its batches deleted by retention, or an unclean leader change); the leader
  waits a little for the predecessor, then accepts, as Kafka accepts any sequence
  from a producer it has no state for;
- **out of order** — behind the expected sequence but not a retained batch, or a new
  epoch that does not start at 0 (after the wait);
- **fenced** — an epoch older than the producer's current one;
- **previous transaction open** — a transactional batch of a newer epoch while the
  producer's transaction of its older epoch is still open here: the coordinator
  answers a commit once its outcome is durable and writes the markers after, and a
  transactional producer takes the next epoch for its next transaction at once (see
  :mod:`raystream.transactions.metadata`), so its first batches may overtake the
  marker. Appending one would fence the older epoch here and pull the ended
  transaction's batches into the new one (its marker then refused); the leader waits
  a little for the marker instead, then refuses with ConcurrentTransactionsError
  (retriable; the producer sends the batch again).

Every replica keeps this state, leader and followers alike: the leader updates it as it
appends, a follower from the headers of the batches it copies (producer id, epoch and
base sequence travel in every batch header), so a new leader knows every producer at
once. A replica that restarts rebuilds it from its newest snapshot (written now and
then and on close, as ``<offset>.snapshot`` beside the log) plus the headers of the
batches after it, not from a scan of the whole log.

Sequences are int32 and wrap to 0 after 2**31 - 1, as in Kafka.

Transactions: a producer's first transactional batch opens its transaction on the
partition (the entry keeps the transaction's first offset); a marker (a control batch,
commit or abort, written by the transaction coordinator) closes it. The smallest first
offset of the open transactions is the *first unstable offset*: a read_committed
consumer reads below ``min(high watermark, first unstable offset)``, the last stable
offset. An abort marker adds ``(producer id, first offset, marker offset)`` to the
*aborted-transaction index*, which a read_committed fetch asks for the aborted
transactions overlapping the offsets it reads (no scan of the log), so it can skip
their batches. A marker whose epoch is newer than the producer's fences the older epoch
on this partition (the coordinator aborts a fenced or timed-out producer's transaction
with its bumped epoch), and a marker from an older coordinator epoch than one seen is
refused. Both the open transactions and the index are saved in snapshots (version 2)
and rebuilt from the batch headers after them, like the rest.

Example:
    >>> state = ProducerStateManager()
    >>> state.check(7, 0, 0, 9).verdict
    <Verdict.APPEND: 'append'>
    >>> state.append(7, 0, 0, 9, 100, 109, 1_700_000_000_000)
    >>> check = state.check(7, 0, 0, 9)  # a retry of the same batch
    >>> check.verdict, check.first_offset, check.last_offset
    (<Verdict.DUPLICATE: 'duplicate'>, 100, 109)
    >>> state.check(7, 0, 20, 29).verdict  # 10..19 has not arrived yet
    <Verdict.GAP: 'gap'>
"""

from __future__ import annotations

import bisect
import contextlib
import enum
import json
import os
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import crc32c

from raystream.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    RaystreamError,
    TransactionCoordinatorFencedError,
)
from raystream.log.batch import BatchHeader
from raystream.log.checkpoint import write_atomically

NO_PRODUCER_ID = -1
"""Producer id of a batch from a producer without idempotence."""
BATCHES_TO_RETAIN = 5
"""Batches remembered per producer: as many as a producer may have in flight per
partition, so any retry of an unanswered batch is recognised."""
NO_SEQUENCE = -1
"""Base sequence of a producer's batch that the broker side wrote on its behalf: the
offsets of a Kafka client's TxnOffsetCommit, which Kafka's group coordinator appends
without one (its AppendOrigin.Coordinator). Such a batch is fenced by epoch and opens
the producer's transaction, but takes no part in sequence checks: a retry writes the
same offsets again, which changes nothing."""
SEQUENCE_LIMIT = 1 << 31
"""Sequences run over [0, 2**31) and wrap."""
MAX_PRODUCER_EPOCH = (1 << 15) - 1
"""Epochs are int16, as in Kafka."""
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_TO_KEEP = 2
"""The newest and one older snapshot: a follower truncating below the newest one still
starts from a snapshot."""
SNAPSHOT_VERSION = 2
"""Version 2 added the open transactions' first offsets, the coordinator epochs and the
aborted-transaction index; an older snapshot is ignored (the state is rebuilt from the
log's batch headers instead)."""


def next_sequence(sequence: int, count: int = 1) -> int:
    """The sequence ``count`` after ``sequence``, wrapping at 2**31."""
    return (sequence + count) % SEQUENCE_LIMIT


def last_sequence(base_sequence: int, count: int) -> int:
    """The sequence of the last of ``count`` records from ``base_sequence``
    (:data:`NO_SEQUENCE` for a batch without sequences)."""
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return next_sequence(base_sequence, count - 1)


def _is_ahead(sequence: int, expected: int) -> bool:
    """Whether ``sequence`` lies ahead of ``expected`` (within half the sequence space)."""
    return 0 < (sequence - expected) % SEQUENCE_LIMIT < SEQUENCE_LIMIT // 2


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Where one producer batch landed: its sequences and offsets."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    """What a partition remembers of one producer id.

    Invariant: ``batches`` holds at most :data:`BATCHES_TO_RETAIN` batches of the
    current epoch, in sequence order, each following the previous one.
    """

    producer_id: int
    producer_epoch: int
    last_timestamp: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))
    current_txn_first_offset: int = -1
    """First offset of the producer's open transaction on the partition, or -1."""
    coordinator_epoch: int = -1
    """The newest transaction coordinator epoch whose marker the partition took."""

    @property
    def last_seq(self) -> int:
        """The last sequence written in the current epoch, or -1."""
        return self.batches[-1].last_seq if self.batches else -1

    def find(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly these sequences, or None."""
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction on the partition: its producer, its first offset there and
    the offset of its abort marker (the transaction's batches lie in between)."""

    producer_id: int
    first_offset: int
    last_offset: int


class Verdict(enum.Enum):
    """What a leader does with an incoming idempotent batch (see the module docstring)."""

    APPEND = "append"
    DUPLICATE = "duplicate"
    GAP = "gap"
    UNKNOWN = "unknown"
    OUT_OF_ORDER = "out_of_order"
    FENCED = "fenced"
    PREVIOUS_TXN_OPEN = "previous_txn_open"


@dataclass(frozen=True, slots=True)
class AppendCheck:
    """A verdict, with the original offsets of a duplicate and a message for refusals."""

    verdict: Verdict
    first_offset: int = -1
    last_offset: int = -1
    message: str = ""

    @property
    def waits(self) -> bool:
        """Whether the leader should wait (for a predecessor, or a marker) before deciding."""
        return self.verdict in (Verdict.GAP, Verdict.UNKNOWN, Verdict.PREVIOUS_TXN_OPEN)

    def error(self) -> RaystreamError | None:
        """The refusal to answer with once waiting is over (None: append or duplicate).

        A gap that outlived the wait is out of order; an unknown producer is accepted.
        """
        if self.verdict in (Verdict.GAP, Verdict.OUT_OF_ORDER):
            return OutOfOrderSequenceError(self.message)
        if self.verdict is Verdict.FENCED:
            return InvalidProducerEpochError(self.message)
        if self.verdict is Verdict.PREVIOUS_TXN_OPEN:
            return ConcurrentTransactionsError(self.message)
        return None


class ProducerStateManager:
    """The producers of one partition replica, and their snapshots (if ``directory``).

    ``map_end_offset`` is the offset up to which the state has taken in the log's
    batches: appends and copied batches move it forward, rebuilding sets it.
    Not thread-safe: one replica's event loop owns it.

    Args:
        directory: where snapshots are kept (the log's directory); None keeps none.
    """

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        self.map_end_offset = 0
        self.ongoing: dict[int, int] = {}
        """Producer id -> first offset of its open transaction."""
        self.aborted: list[AbortedTxn] = []
        """The aborted-transaction index, in marker (``last_offset``) order."""
        self._min_first: list[int] = []
        """``_min_first[i]``: the smallest ``first_offset`` of ``aborted[i:]`` (see
        :meth:`aborted_between`)."""
        self._dirty = False

    # ---------------------------------------------------------------- rules

    def check(
        self,
        producer_id: int,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        transactional: bool = False,
    ) -> AppendCheck:
        """Decide about a batch of ``producer_id`` with sequences first..last.

        A ``transactional`` batch of a newer epoch waits while the producer's
        transaction of its older epoch is open here (:data:`Verdict.PREVIOUS_TXN_OPEN`).
        """
        if producer_id == NO_PRODUCER_ID:
            return AppendCheck(Verdict.APPEND)
        name = f"producer {producer_id} epoch {producer_epoch}"
        entry = self.producers.get(producer_id)
        if entry is None:
            if first_seq in (0, NO_SEQUENCE):
                return AppendCheck(Verdict.APPEND)
            return AppendCheck(
                Verdict.UNKNOWN,
                message=f"{name}: no state for the producer and first sequence {first_seq}",
            )
        if producer_epoch < entry.producer_epoch:
            return AppendCheck(
                Verdict.FENCED,
                message=f"{name} is older than the producer's epoch {entry.producer_epoch}",
            )
        if producer_epoch > entry.producer_epoch:
            if transactional and entry.current_txn_first_offset >= 0:
                return AppendCheck(
                    Verdict.PREVIOUS_TXN_OPEN,
                    message=f"{name}: the transaction of epoch {entry.producer_epoch} is "
                    "still open here (its marker is on the way)",
                )
            if first_seq in (0, NO_SEQUENCE):
                return AppendCheck(Verdict.APPEND)
            return AppendCheck(
                Verdict.GAP,
                message=f"{name}: a new epoch must start at sequence 0, not {first_seq}",
            )
        if first_seq == NO_SEQUENCE:
            return AppendCheck(Verdict.APPEND)
        duplicate = entry.find(first_seq, last_seq)
        if duplicate is not None:
            return AppendCheck(Verdict.DUPLICATE, duplicate.first_offset, duplicate.last_offset)
        expected = next_sequence(entry.last_seq) if entry.batches else 0
        if first_seq == expected:
            return AppendCheck(Verdict.APPEND)
        verdict = Verdict.GAP if _is_ahead(first_seq, expected) else Verdict.OUT_OF_ORDER
        return AppendCheck(
            verdict,
            message=f"{name}: first sequence {first_seq} where {expected} was expected "
            f"(last batches {[(b.first_seq, b.last_seq) for b in entry.batches]})",
        )

    def append(
        self,
        producer_id: int,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp: int,
        transactional: bool = False,
    ) -> None:
        """Take in a batch written at first_offset..last_offset (leader or follower);
        a ``transactional`` one opens its producer's transaction if none is open."""
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)
        if producer_id == NO_PRODUCER_ID:
            return
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(
                producer_id, producer_epoch, timestamp
            )
        elif producer_epoch > entry.producer_epoch:
            entry.producer_epoch = producer_epoch
            entry.batches.clear()
        elif producer_epoch < entry.producer_epoch:
            return  # an older epoch's batch in a replicated log: nothing to learn
        if first_seq != NO_SEQUENCE:
            entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset))
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        if transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self.ongoing[producer_id] = first_offset
        self._dirty = True

    # ---------------------------------------------------------- transactions

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Refuse a marker the partition must not take (the leader asks before writing).

        Raises:
            InvalidProducerEpochError: the producer's epoch here is newer than the marker's.
            TransactionCoordinatorFencedError: a newer coordinator wrote a marker already.
        """
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} epoch {producer_epoch} is older than "
                f"the producer's epoch {entry.producer_epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} from coordinator epoch "
                f"{coordinator_epoch}, older than {entry.coordinator_epoch}"
            )

    def complete_txn(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        marker_offset: int,
        timestamp: int,
        coordinator_epoch: int = -1,
    ) -> None:
        """Take in a marker written at ``marker_offset``: close the producer's open
        transaction (an abort enters the aborted index) and adopt a newer epoch."""
        self.map_end_offset = max(self.map_end_offset, marker_offset + 1)
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(
                producer_id, producer_epoch, timestamp
            )
        elif producer_epoch > entry.producer_epoch:
            entry.producer_epoch = producer_epoch  # fences the older epoch
            entry.batches.clear()
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        first = entry.current_txn_first_offset
        if first >= 0:
            if not commit:
                self._add_aborted(AbortedTxn(producer_id, first, marker_offset))
            entry.current_txn_first_offset = -1
            self.ongoing.pop(producer_id, None)
        self._dirty = True

    def _add_aborted(self, txn: AbortedTxn) -> None:
        self.aborted.append(txn)
        self._min_first.append(txn.first_offset)
        i = len(self._min_first) - 2
        while i >= 0 and self._min_first[i] > txn.first_offset:  # usually no step
            self._min_first[i] = txn.first_offset
            i -= 1

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, or None when none is open."""
        return min(self.ongoing.values()) if self.ongoing else None

    def last_stable_offset(self, high_watermark: int) -> int:
        """Where read_committed reading stops: below the high watermark and every open
        transaction."""
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(high_watermark, first)

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping offsets [start, end).

        The index is in marker order, so the transactions ending at or after ``start``
        are a suffix found by bisection; among them, the walk stops where no later
        transaction starts before ``end`` (``_min_first``, the suffix minima of first
        offsets, tells), so a fetch looks only at transactions near what it reads.
        """
        lo = bisect.bisect_left(self.aborted, start, key=lambda t: t.last_offset)
        found = []
        for i in range(lo, len(self.aborted)):
            if self._min_first[i] >= end:
                break
            txn = self.aborted[i]
            if txn.first_offset < end:
                found.append(txn)
        return found

    def aborted_filter(self, start: int, end: int) -> Callable[[BatchHeader], bool] | None:
        """A ``skip(header)`` predicate for batches of aborted transactions in
        [start, end), or None when none overlaps."""
        ranges: dict[int, list[tuple[int, int]]] = {}
        for txn in self.aborted_between(start, end):
            ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
        if not ranges:
            return None

        def skip(header: BatchHeader) -> bool:
            spans = ranges.get(header.producer_id) if header.is_transactional else None
            return spans is not None and any(
                first <= header.base_offset <= last for first, last in spans
            )

        return skip

    def prune_aborted(self, log_start_offset: int) -> None:
        """Forget aborted transactions whose marker lies below the log start."""
        drop = bisect.bisect_left(self.aborted, log_start_offset, key=lambda t: t.last_offset)
        if drop:
            del self.aborted[:drop]
            del self._min_first[:drop]
            self._dirty = True

    def apply(self, header: BatchHeader) -> None:
        """Take in a stored batch from its header (copied batches, rebuilding)."""
        if header.producer_id == NO_PRODUCER_ID:
            self.map_end_offset = max(self.map_end_offset, header.next_offset)
            return
        if header.is_control:
            # The coordinator epoch travels in the marker's value, not its header: a
            # replica rebuilding from headers keeps the epochs its snapshot had.
            self.complete_txn(
                header.producer_id,
                header.producer_epoch,
                header.is_commit,
                header.base_offset,
                header.max_timestamp,
            )
            return
        self.append(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            last_sequence(header.base_sequence, header.last_offset_delta + 1),
            header.base_offset,
            header.last_offset,
            header.max_timestamp,
            header.is_transactional,
        )

    def apply_all(self, headers: Iterable[BatchHeader]) -> None:
        """:meth:`apply` each header, in log order."""
        for header in headers:
            self.apply(header)

    # ------------------------------------------------------------ snapshots

    @property
    def needs_snapshot(self) -> bool:
        """Whether a producer's state changed since the last snapshot was made or loaded.

        Batches without a producer id change nothing worth a snapshot: replaying their
        headers after the last one is cheap.
        """
        return self.directory is not None and self._dirty

    def snapshot_text(self) -> tuple[int, str]:
        """(offset, file text) of a snapshot of the current state; clears the change flag."""
        self._dirty = False
        body = json.dumps(
            {
                "version": SNAPSHOT_VERSION,
                "offset": self.map_end_offset,
                "producers": [_snapshot_row(e) for e in self.producers.values()],
                "aborted": [[t.producer_id, t.first_offset, t.last_offset] for t in self.aborted],
            },
            separators=(",", ":"),
        )
        return self.map_end_offset, f"{crc32c.crc32c(body.encode()):08x}\n{body}\n"

    def write_snapshot(self, offset: int, text: str) -> None:
        """Write a snapshot made by :meth:`snapshot_text` and drop the oldest ones.

        May run on another thread than the one changing the state: it only writes files.
        """
        assert self.directory is not None
        write_atomically(os.path.join(self.directory, snapshot_file_name(offset)), text)
        for old in self.snapshot_offsets()[:-SNAPSHOTS_TO_KEEP]:
            _remove(os.path.join(self.directory, snapshot_file_name(old)))

    def forget_snapshot(self, offset: int) -> None:
        """Delete the snapshot at ``offset`` (one written from a state since undone)."""
        if self.directory is not None:
            _remove(os.path.join(self.directory, snapshot_file_name(offset)))

    def take_snapshot(self) -> None:
        """Write a snapshot of the current state now (a clean shutdown does this)."""
        if self.needs_snapshot:
            self.write_snapshot(*self.snapshot_text())

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshots on disk, oldest first."""
        if self.directory is None:
            return []
        offsets = []
        for name in os.listdir(self.directory):
            stem = name[: -len(SNAPSHOT_SUFFIX)]
            if name.endswith(SNAPSHOT_SUFFIX) and stem.isdigit():
                offsets.append(int(stem))
        return sorted(offsets)

    def load(self, log_start_offset: int, log_end_offset: int) -> int:
        """Reset to the newest valid snapshot at or below ``log_end_offset``.

        Snapshots past the log end (the log lost its tail) and unreadable ones are
        deleted. Returns the offset the caller must replay batch headers from (the
        snapshot's offset, or the log start when there is no usable snapshot), after
        which :meth:`apply_all` brings the state up to date.
        """
        self._reset({}, [])
        for offset in reversed(self.snapshot_offsets()):
            path = os.path.join(self.directory or "", snapshot_file_name(offset))
            if offset > log_end_offset:
                _remove(path)
                continue
            loaded = _read_snapshot(path)
            if loaded is None:
                _remove(path)
                continue
            self._reset(*loaded)
            self.prune_aborted(log_start_offset)
            self._dirty = False
            self.map_end_offset = max(offset, log_start_offset)
            return self.map_end_offset
        self.map_end_offset = log_start_offset
        return log_start_offset

    def _reset(self, producers: dict[int, ProducerEntry], aborted: list[AbortedTxn]) -> None:
        self.producers = producers
        self.ongoing = {
            e.producer_id: e.current_txn_first_offset
            for e in producers.values()
            if e.current_txn_first_offset >= 0
        }
        self.aborted = []
        self._min_first = []
        for txn in aborted:
            self._add_aborted(txn)
        self._dirty = False

    def clear(self, offset: int) -> None:
        """Forget every producer and snapshot (the log restarts empty at ``offset``)."""
        self._reset({}, [])
        self.map_end_offset = offset
        for old in self.snapshot_offsets():
            _remove(os.path.join(self.directory or "", snapshot_file_name(old)))


def snapshot_file_name(offset: int) -> str:
    """``<offset, 20 digits>.snapshot``, as Kafka names producer snapshots."""
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def _snapshot_row(entry: ProducerEntry) -> list:
    batches = [[b.first_seq, b.last_seq, b.first_offset, b.last_offset] for b in entry.batches]
    return [
        entry.producer_id,
        entry.producer_epoch,
        entry.last_timestamp,
        batches,
        entry.current_txn_first_offset,
        entry.coordinator_epoch,
    ]


def _read_snapshot(path: str) -> tuple[dict[int, ProducerEntry], list[AbortedTxn]] | None:
    """The producers and aborted transactions in a snapshot file, or None when it is
    unreadable, corrupt or of another version."""
    try:
        with open(path) as f:
            crc, body = f.read().split("\n", 1)
        body = body.rstrip("\n")
        if int(crc, 16) != crc32c.crc32c(body.encode()):
            return None
        data = json.loads(body)
        if data["version"] != SNAPSHOT_VERSION:
            return None
        producers = {}
        for producer_id, epoch, timestamp, batches, txn_first, coordinator_epoch in data[
            "producers"
        ]:
            entry = ProducerEntry(producer_id, epoch, timestamp)
            entry.batches.extend(BatchMetadata(*b) for b in batches)
            entry.current_txn_first_offset = txn_first
            entry.coordinator_epoch = coordinator_epoch
            producers[producer_id] = entry
        return producers, [AbortedTxn(*t) for t in data["aborted"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


__all__ = [
    "BATCHES_TO_RETAIN",
    "MAX_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "AbortedTxn",
    "AppendCheck",
    "BatchMetadata",
    "ProducerEntry",
    "ProducerStateManager",
    "Verdict",
    "next_sequence",
    "snapshot_file_name",
]
