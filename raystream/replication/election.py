"""Leader election: which replica leads a partition after a failure or on request.

Kafka's rules: the new leader comes from the ISR, in replica-list order (so the
preferred replica wins when it can); only with ``unclean.leader.election.enable`` may
an out-of-sync live replica lead, accepting the loss of what it lacks. Otherwise the
partition stays offline rather than lose acknowledged records.

Example:
    replicas [0, 1, 2], ISR [1, 2], alive {0, 2}: the leader is 2. ISR [1], alive
    {0, 2}: offline (-1) unless unclean election is on, then 0.
"""

from __future__ import annotations

from dataclasses import dataclass

OFFLINE = -1


@dataclass(frozen=True)
class Election:
    """The outcome of an election: the leader (-1 offline) and the ISR it starts with."""

    leader: int
    isr: list[int]
    unclean: bool = False


def elect_leader(
    replicas: list[int], isr: list[int], alive: set[int], unclean_allowed: bool
) -> Election:
    """Elect a leader among live replicas, from the ISR unless unclean election is on."""
    live_isr = [r for r in replicas if r in isr and r in alive]
    if live_isr:
        return Election(live_isr[0], live_isr)
    if unclean_allowed:
        live = [r for r in replicas if r in alive]
        if live:
            return Election(live[0], [live[0]], unclean=True)
    return Election(OFFLINE, [r for r in isr if r in alive])


def preferred_leader(replicas: list[int], isr: list[int], alive: set[int]) -> int | None:
    """The preferred replica (first in the list) when it may lead now, else None."""
    preferred = replicas[0]
    return preferred if preferred in isr and preferred in alive else None
