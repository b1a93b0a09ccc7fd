"""Where a follower must truncate before fetching from a new leader (KIP-101 / KIP-279).

The follower sends its latest leader epoch; the leader answers with the largest epoch
it knows that is <= that one, and the offset where that epoch ended in its log. If the
leader knows the follower's epoch, the follower keeps up to that end offset; if the
leader answered an older epoch, the follower's own log diverged inside that older
epoch's successors, so it keeps up to where *both* logs agree: the smaller of the
leader's end offset and the follower's own end of that epoch.

Example:
    follower epochs 0@0, 1@50, LEO 80; new leader knows 0@0, 2@60 (it never saw epoch
    1). The follower asks for epoch 1; the leader answers (0, 60). The follower's epoch
    0 ended at 50, so it truncates to min(60, 50) = 50 and fetches from there.
"""

from __future__ import annotations

from collections.abc import Callable


def truncation_offset(
    follower_latest_epoch: int,
    follower_log_end_offset: int,
    follower_high_watermark: int,
    follower_end_offset_for_epoch: Callable[[int], int],
    leader_epoch: int,
    leader_end_offset: int,
) -> int:
    """The offset to truncate the follower's log to (everything at or above goes).

    Args:
        follower_latest_epoch: the follower's newest epoch (-1 when it has none).
        follower_log_end_offset: the follower's LEO.
        follower_high_watermark: what the follower knows to be committed; the fallback
            when epochs cannot be compared (as Kafka before KIP-101).
        follower_end_offset_for_epoch: the follower's own end offset of an epoch.
        leader_epoch, leader_end_offset: the leader's answer for the follower's epoch
            ((-1, -1) when the leader knows no epoch that old).
    """
    if follower_latest_epoch < 0 or leader_epoch < 0:
        return min(follower_high_watermark, follower_log_end_offset)
    if leader_epoch == follower_latest_epoch:
        return min(leader_end_offset, follower_log_end_offset)
    return min(
        leader_end_offset, follower_end_offset_for_epoch(leader_epoch), follower_log_end_offset
    )
