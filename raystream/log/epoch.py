"""The leader-epoch cache: at which offset each leader epoch began.

Replication uses it to find where a follower's log diverges from a new leader's
(KIP-101 / KIP-279): the follower asks the leader for the end offset of its latest
epoch and truncates everything past it. Kept with the log in a checkpoint file in
Kafka's format (version, count, then ``epoch start_offset`` lines).

Example:
    epochs 0 @ 0, 2 @ 150, 3 @ 170 and log end offset 200:
    ``end_offset_for_epoch(2)`` is (2, 170), ``end_offset_for_epoch(1)`` is (0, 150),
    ``end_offset_for_epoch(3)`` is (3, 200).
"""

from __future__ import annotations

import bisect
import os

from raystream.log.checkpoint import write_atomically

CHECKPOINT_FILE = "leader-epoch-checkpoint"


class LeaderEpochCache:
    """Epoch -> start offset entries; both strictly increase (invariant)."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, CHECKPOINT_FILE)
        self._epochs: list[int] = []
        self._start_offsets: list[int] = []
        self._load()

    def entries(self) -> list[tuple[int, int]]:
        """All (epoch, start_offset) pairs, oldest first."""
        return list(zip(self._epochs, self._start_offsets, strict=True))

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or -1 when none is known."""
        return self._epochs[-1] if self._epochs else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` began at ``start_offset`` (ignored unless newer)."""
        if epoch < 0 or (self._epochs and epoch <= self._epochs[-1]):
            return
        while self._start_offsets and self._start_offsets[-1] >= start_offset:
            self._epochs.pop()
            self._start_offsets.pop()
        self._epochs.append(epoch)
        self._start_offsets.append(start_offset)
        self._save()

    def end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch``, the offset where it ended), or (-1, -1)."""
        i = bisect.bisect_right(self._epochs, epoch) - 1
        if i < 0:
            return -1, -1
        if i == len(self._epochs) - 1:
            return self._epochs[i], log_end_offset
        return self._epochs[i], self._start_offsets[i + 1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after ``end_offset`` (the log was truncated)."""
        keep = bisect.bisect_left(self._start_offsets, end_offset)
        if keep < len(self._epochs):
            del self._epochs[keep:]
            del self._start_offsets[keep:]
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop epochs wholly below ``start_offset``; the one spanning it starts there."""
        i = bisect.bisect_right(self._start_offsets, start_offset) - 1
        if i < 0:
            return
        changed = i > 0 or self._start_offsets[0] != start_offset
        del self._epochs[:i]
        del self._start_offsets[:i]
        self._start_offsets[0] = start_offset
        if changed:
            self._save()

    def clear(self) -> None:
        """Forget every epoch."""
        self._epochs.clear()
        self._start_offsets.clear()
        self._save()

    def _load(self) -> None:
        try:
            with open(self.path) as f:
                lines = f.read().split("\n")
        except FileNotFoundError:
            return
        count = int(lines[1])
        for line in lines[2 : 2 + count]:
            epoch, start = line.split()
            self._epochs.append(int(epoch))
            self._start_offsets.append(int(start))

    def _save(self) -> None:
        body = "".join(f"{e} {o}\n" for e, o in self.entries())
        write_atomically(self.path, f"0\n{len(self._epochs)}\n{body}")
