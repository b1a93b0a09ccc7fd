"""The one place client calls cross into Ray.

Waiting on an actor call turns Ray's failures into raystream errors: a dead or
unreachable actor becomes the retriable :class:`BrokerNotAvailableError` (refresh
metadata, retry), a timeout becomes :class:`RaystreamTimeoutError`.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.exceptions import ActorUnschedulableError, GetTimeoutError, RayActorError

from raystream.errors import BrokerNotAvailableError, RaystreamTimeoutError

DEAD_ACTOR_ERRORS = (RayActorError, ActorUnschedulableError)
"""Ray's ways of saying an actor is gone, restarting, or cannot be placed (its node is
gone): all mean "refresh metadata and retry" to a client."""


def wait_result(ref: Any, timeout_s: float | None = None, what: str = "request") -> Any:
    """The value of one actor call (or a list of them), with Ray's errors translated.

    Raises:
        BrokerNotAvailableError: the actor died or cannot be reached.
        RaystreamTimeoutError: no answer within ``timeout_s``.
    """
    try:
        return ray.get(ref, timeout=timeout_s)
    except GetTimeoutError:
        raise RaystreamTimeoutError(f"{what} got no answer within {timeout_s} s") from None
    except DEAD_ACTOR_ERRORS as error:
        raise BrokerNotAvailableError(
            f"{what} failed: the serving actor is gone ({error})"
        ) from None


def is_dead_actor_error(error: BaseException) -> bool:
    """Whether ``error`` (from ray.get) means the actor is gone or unreachable."""
    return isinstance(error, DEAD_ACTOR_ERRORS)
