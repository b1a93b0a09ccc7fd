"""Producer id allocation: ids never repeat, across controller restarts included.

The controller hands out producer ids from blocks, as Kafka's ``ProducerIdManager``
does: before the first id of a block is given out, the block's end is made durable in
the metadata log; a restarted controller starts at the last durable end. Ids of a block
that was reserved but not used up before a restart are skipped, never reused.

Example:
    >>> ids = ProducerIdBlocks(reserved_end=0, block_size=3)
    >>> ids.block_to_reserve()   # persist this end durably, then confirm it
    3
    >>> ids.reserved(3)
    >>> [ids.next_id() for _ in range(3)], ids.block_to_reserve()
    ([0, 1, 2], 6)
"""

from __future__ import annotations

from raystream.errors import IllegalStateError

PRODUCER_ID_BLOCK_SIZE = 1000
"""Ids reserved per durable write."""


class ProducerIdBlocks:
    """The next producer id and the durable end of the reserved block.

    Invariant: every id handed out is below a block end confirmed durable.

    Args:
        reserved_end: the last durable block end (0 for a new cluster).
        block_size: ids reserved at a time.
    """

    def __init__(self, reserved_end: int, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        self.next = reserved_end
        self.reserved_end = reserved_end
        self.block_size = block_size

    def block_to_reserve(self) -> int | None:
        """The block end to make durable before the next id, or None if it has room."""
        return self.next + self.block_size if self.next >= self.reserved_end else None

    def reserved(self, end: int) -> None:
        """Record that ``end`` is durable: ids below it may be handed out."""
        self.reserved_end = max(self.reserved_end, end)

    def next_id(self) -> int:
        """A producer id never handed out before.

        Raises:
            IllegalStateError: the block is used up (reserve one first).
        """
        if self.next >= self.reserved_end:
            raise IllegalStateError(f"producer id {self.next} is not reserved yet")
        producer_id = self.next
        self.next += 1
        return producer_id
