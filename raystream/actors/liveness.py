"""Ray's own word on whether an actor is alive: faster than any timeout.

A call to an actor that Ray is restarting neither answers nor fails until the restart
is done, so a caller that only waits sees a crash as mere slowness. Ray's actor table
knows better: the controller uses it for replicas that miss a ping, and the group
coordinator for member consumers that run inside Ray actors and miss heartbeats.
"""

from __future__ import annotations

DOWN_STATES = frozenset({"RESTARTING", "DEAD"})


def actor_state(actor_id: str) -> str | None:
    """Ray's state of an actor ("ALIVE", "RESTARTING", "DEAD", ...), None if unknown.

    ``actor_id`` is the hex id. Read from the GCS actor table through
    ``ray._private.state``: the public ``ray.util.state`` API needs the dashboard,
    which embedded clusters do not start.
    """
    from ray._private import state

    try:
        info = state.actors(actor_id=actor_id)
    except Exception:  # the lookup only speeds detection up; timeouts still apply
        return None
    return info.get("State") if isinstance(info, dict) else None


def is_down(actor_id: str) -> bool:
    """Whether Ray reports the actor crashed (being restarted, or gone for good)."""
    return actor_state(actor_id) in DOWN_STATES
