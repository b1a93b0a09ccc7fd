"""The one place client code touches Ray.

Starting or attaching to Ray, finding and stopping named actors, shipping payloads to
the object store, and waiting on actor calls. Waiting turns Ray's failures into
raystream errors: a dead or unreachable actor becomes the retriable
:class:`BrokerNotAvailableError` (refresh metadata, retry), a timeout becomes
:class:`RaystreamTimeoutError`. Keeping Ray here leaves the rest of the client plain
Python over opaque handles and call references.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import ray
from ray.exceptions import (
    ActorUnschedulableError,
    GetTimeoutError,
    ObjectLostError,
    RayActorError,
    RayError,
    RaySystemError,
)
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raystream.errors import BrokerNotAvailableError, RaystreamTimeoutError
from raystream.java import provide_java

DEAD_ACTOR_ERRORS = (RayActorError, ActorUnschedulableError)
"""Ray's ways of saying an actor is gone, restarting, or cannot be placed (its node is
gone): all mean "refresh metadata and retry" to a client."""
CALL_ERRORS = (RayError,)
"""Every way an actor call can fail inside Ray, beyond the method's own answer."""


def ensure_ray(address: str | None, **ray_init_kwargs: Any) -> None:
    """Start or attach to Ray unless this process is connected already.

    A Java runtime is provided first: Ray gives a node Java workers (Spark on Ray) only
    if it finds one when it starts.
    """
    if ray.is_initialized():
        return
    provide_java()
    ray_init_kwargs.setdefault("logging_level", "warning")
    ray_init_kwargs.setdefault("log_to_driver", False)
    ray.init(address=address, **ray_init_kwargs)


def on_this_node() -> NodeAffinitySchedulingStrategy:
    """A scheduling strategy that keeps an actor on this process's node for good."""
    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


def named_actor(name: str, namespace: str) -> Any | None:
    """The named actor if it is alive or restarting, else None."""
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None


def stop_actor(actor: Any) -> None:
    """Kill ``actor`` for good (Ray does not restart it)."""
    ray.kill(actor, no_restart=True)


def current_actor_id() -> str | None:
    """The id of the actor this code runs in, or None outside an actor."""
    return ray.get_runtime_context().get_actor_id()


def put(value: Any) -> Any:
    """Place ``value`` in the object store now; the reference travels in its place."""
    return ray.put(value)


def answered(refs: Sequence[Any], timeout_s: float = 0.0, every: bool = False) -> list[Any]:
    """Those of ``refs`` (actor calls) that have answered.

    Waits up to ``timeout_s`` for the first answer, or with ``every`` for all of them,
    and takes whatever else has answered by then.
    """
    refs = list(refs)
    if not refs:
        return []
    if every:
        return ray.wait(refs, num_returns=len(refs), timeout=timeout_s)[0]
    ready, rest = ray.wait(refs, num_returns=1, timeout=timeout_s)
    if ready and rest:
        ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
    return ready


def cancel(ref: Any) -> None:
    """Cancel an actor call if it has not run yet; best effort (it may have answered,
    or its actor may be gone)."""
    with contextlib.suppress(Exception):
        ray.cancel(ref)


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


def is_lost_call_error(error: BaseException) -> bool:
    """Whether ``error`` means the call or its answer was lost inside Ray (the request
    may or may not have been carried out)."""
    return isinstance(error, RaySystemError | ObjectLostError)
