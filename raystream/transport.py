"""The one place client code touches Ray, shared with the server actors that call others.

Starting or attaching to Ray, finding and stopping named actors, sending requests to
server actors (:func:`send`: a typed request of :mod:`raystream.requests` to the actor's
``handle``, over its direct path where it serves one, see :mod:`raystream.wire`),
calling other actor methods (:func:`call`) and waiting on the calls. Waiting turns
Ray's failures into raystream errors: a dead or unreachable actor becomes the retriable
:class:`BrokerNotAvailableError` (refresh metadata, retry), a timeout becomes
:class:`RaystreamTimeoutError`. Keeping Ray here leaves the rest of the client plain
Python over opaque handles and call references.

It belongs to neither the client nor the actors package: clients call replicas and
coordinators through it, and so do server actors (a follower fetching from its leader,
the coordinators through :mod:`raystream.actors.partition_client`), while the client
package imports the actors package to start a cluster. Here, both depend on it and
neither on the other's side of that line.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future
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

from raystream.dispatch import HANDLE
from raystream.errors import BrokerNotAvailableError, RaystreamTimeoutError, SslAuthenticationError
from raystream.java import provide_java
from raystream.wire import Channel, Endpoint, LoopChannel, settle

logger = logging.getLogger(__name__)

DEAD_ACTOR_ERRORS = (RayActorError, ActorUnschedulableError)
"""Ray's ways of saying an actor is gone, restarting, or cannot be placed (its node is
gone): all mean "refresh metadata and retry" to a client."""
CALL_ERRORS = (RayError,)
"""Every way an actor call can fail inside Ray, beyond the method's own answer."""


WORKER_STARTUP_CONCURRENCY_PER_CPU = 4
"""Worker processes a Ray node starts at once, per CPU core (see
:func:`worker_startup_concurrency`)."""
WORKER_STARTUP_CONCURRENCY_ENV = "RAY_worker_maximum_startup_concurrency"
"""The environment variable through which ``ray start`` gives its node the same
setting (``raystream up`` and ``cluster.yaml`` set it)."""


def worker_startup_concurrency() -> int:
    """How many worker processes a node Ray starts for raystream starts at once.

    Every replica is an actor, so a process: creating a topic of 100 partitions
    starts 100 Python processes, and Ray by default starts only as many at once as
    the node has CPUs (``worker_maximum_startup_concurrency``), one wave after
    another. A start-up is mostly CPU (the interpreter, ``import ray``, the actor's
    modules), but also waits on Ray's control plane (registering with the raylet,
    the actor's creation task); a few starts per core in flight keep the cores busy
    through those waits, so creations finish sooner. More gains nothing on a
    CPU-bound start and holds more half-started processes in memory at once.
    """
    return WORKER_STARTUP_CONCURRENCY_PER_CPU * (os.cpu_count() or 1)


def local_ray_system_config() -> dict[str, Any]:
    """Ray system settings (``ray.init(_system_config=...)``) for a Ray that raystream
    starts in this process; Ray accepts them only when it starts a node."""
    return {"worker_maximum_startup_concurrency": worker_startup_concurrency()}


def starts_local_ray(address: str | None, temp_dir: str | None = None) -> bool:
    """Whether ``ray.init(address)`` starts a new local Ray (rather than attaching):
    "local", or None when neither ``RAY_ADDRESS`` nor a cluster recorded on this
    machine (under ``temp_dir``, Ray's ``_temp_dir``) names one to attach to."""
    from ray._private.services import canonicalize_bootstrap_address

    if address not in (None, "local"):
        return False
    return canonicalize_bootstrap_address(address, temp_dir) is None


def ensure_ray(address: str | None, **ray_init_kwargs: Any) -> None:
    """Start or attach to Ray unless this process is connected already.

    A Java runtime is provided first: Ray gives a node Java workers (Spark on Ray) only
    if it finds one when it starts. A Ray started here gets
    :func:`local_ray_system_config` under the caller's own ``_system_config``.
    """
    if ray.is_initialized():
        return
    provide_java()
    ray_init_kwargs.setdefault("logging_level", "warning")
    ray_init_kwargs.setdefault("log_to_driver", False)
    if starts_local_ray(address, ray_init_kwargs.get("_temp_dir")):
        system_config = local_ray_system_config()
        system_config.update(ray_init_kwargs.get("_system_config") or {})
        ray_init_kwargs["_system_config"] = system_config
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


# ------------------------------------------------------------------ direct path


def call(actor: Any, method: str, *args: Any) -> Future:
    """``actor.method(*args)`` over the actor's direct path if it serves the method
    there (see :mod:`raystream.wire`), else as a Ray call; either way a future of the
    answer.

    The path is chosen once per actor (its first call asks for its endpoint) and the
    calls of one caller keep their order on it. Errors are Ray's or the wire's:
    :func:`outcome` translates both.
    """
    return _ROUTES.call(actor, method, args)


def send(actor: Any, request: Any) -> Future:
    """Send a typed request (:mod:`raystream.requests`) to a server actor's ``handle``,
    over its direct path where it serves one, else as a Ray call; a future of the answer
    (see :func:`call`, :func:`outcome`)."""
    return _ROUTES.call(actor, HANDLE, (request,))


def outcome(future: Future, timeout_s: float | None = None, what: str = "request") -> Any:
    """The answer of a :func:`call`, with Ray's and the wire's errors translated.

    Raises:
        BrokerNotAvailableError: the actor died, cannot be reached, or the call was lost.
        RaystreamTimeoutError: no answer within ``timeout_s``.
    """
    try:
        return future.result(timeout_s)
    except concurrent.futures.TimeoutError:
        raise RaystreamTimeoutError(f"{what} got no answer within {timeout_s} s") from None
    except DEAD_ACTOR_ERRORS as error:
        raise BrokerNotAvailableError(
            f"{what} failed: the serving actor is gone ({error})"
        ) from None
    except (RaySystemError, ObjectLostError) as error:
        raise BrokerNotAvailableError(f"{what} was lost: {error}") from None


class _Lookup:
    """An actor's endpoint being asked for, and the calls made meanwhile, in order."""

    def __init__(self) -> None:
        self.waiting: list[tuple[str, tuple[Any, ...], Future | asyncio.Future]] = []
        self.ref: Any = None  # the endpoint call: it must outlive its future
        self.task: Any = None  # LoopRoutes: the task that awaits the endpoint


_RAY = object()
"""Route of an actor without a reachable direct path: plain Ray calls."""


_LOOKUP_ERRORS = (*DEAD_ACTOR_ERRORS, SslAuthenticationError, OSError, RayError)
"""What asking an actor for its endpoint and connecting to it may raise."""


def _lookup_failure(actor: Any, error: BaseException) -> BaseException | None:
    """What a failed endpoint lookup or connection (one of ``_LOOKUP_ERRORS``) means
    for the calls waiting on it: the exception they fail with, or None when the actor
    is only unreachable from here and Ray calls serve instead. Shared by the threads'
    and the event loops' routes."""
    if isinstance(error, DEAD_ACTOR_ERRORS):
        return BrokerNotAvailableError(f"{actor!r} is gone: {error}")
    if isinstance(error, SslAuthenticationError):  # never a quiet way round TLS: fail, ask again
        logger.error("direct path to %r: %s", actor, error)
        return error
    logger.info("no direct path to %r (%s): using Ray calls", actor, error)
    return None


def _by_ray(route: Any, method: str) -> bool:
    """Whether a call of ``method`` on ``route`` goes as a Ray call: the actor has no
    reachable direct path, or does not serve that method on it."""
    return route is _RAY or method not in route.methods


class _Routes:
    """How this process reaches each actor: a :class:`Channel`, Ray, or being found out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._routes: dict[Any, Any] = {}
        self._node: str | None = None

    def call(self, actor: Any, method: str, args: tuple[Any, ...]) -> Future:
        node = ray.get_runtime_context().get_node_id()
        lookup: _Lookup | None = None
        with self._lock:
            if node != self._node:  # a new Ray cluster, whose actor ids may repeat the last's
                self._routes, self._node = {}, node
            route = self._routes.get(actor)
            if route is None or isinstance(route, _Lookup):
                future: Future = Future()
                if route is None:
                    route = lookup = self._routes[actor] = _Lookup()
                route.waiting.append((method, args, future))
        if lookup is not None:  # outside the lock: a call that failed at once answers here
            lookup.ref = actor.endpoint.remote()
            lookup.ref.future().add_done_callback(lambda answer: self._found(actor, lookup, answer))
        if isinstance(route, _Lookup):
            return future
        if _by_ray(route, method):
            return _ray_call(actor, method, args)
        return route.call(method, args)

    def _found(self, actor: Any, lookup: _Lookup, answer: Future) -> None:
        """The endpoint answer came: connect, then send what waited, in order."""
        route: Any = _RAY
        failure: BaseException | None = None
        try:
            endpoint: Endpoint | None = answer.result()
            if endpoint is not None:
                route = Channel(endpoint, repr(actor), lambda ch: self._forget(actor, ch))
        except _LOOKUP_ERRORS as error:
            failure = _lookup_failure(actor, error)
        answers: list[tuple[Future | BaseException, Future]] = []
        with self._lock:  # sent under the lock: no later call overtakes them
            if self._routes.get(actor) is lookup:
                if failure is None:
                    self._routes[actor] = route
                else:  # the next call asks again (a restarted actor has a new endpoint)
                    del self._routes[actor]
            for method, args, future in lookup.waiting:
                if failure is not None:
                    answers.append((failure, future))
                elif _by_ray(route, method):
                    answers.append((_ray_call(actor, method, args), future))
                else:
                    answers.append((route.call(method, args), future))
        for source, future in answers:  # callbacks run outside the lock
            if isinstance(source, BaseException):
                settle(future, False, source)
            else:
                _chain(source, future)

    def _forget(self, actor: Any, channel: Channel) -> None:
        """A lost connection: the next call asks the actor for its endpoint again."""
        with self._lock:
            if self._routes.get(actor) is channel:
                del self._routes[actor]


class LoopRoutes:
    """How the coroutines of one event loop (a server actor's) reach each actor: a
    :class:`~raystream.wire.LoopChannel`, Ray, or being found out.

    :func:`send` for code on an event loop: the answer is read on that loop, with no
    reader thread handing it over (see :class:`~raystream.wire.LoopChannel`). As with
    :func:`send`, a call leaves when it is made, so the calls of the loop keep their
    order to each actor: those made while the actor's endpoint is being asked for
    wait in a list and leave in that order once it is known. Not thread-safe: one
    loop's.
    """

    def __init__(self) -> None:
        self._routes: dict[Any, Any] = {}

    def send(self, actor: Any, request: Any) -> asyncio.Future:
        """Send a typed request to the actor's ``handle`` now (over its direct path
        where it serves one, else as a Ray call); a future of the answer (errors as
        :func:`send`'s)."""
        route = self._routes.get(actor)
        if route is None or isinstance(route, _Lookup):
            future = asyncio.get_running_loop().create_future()
            if route is None:
                route = self._routes[actor] = _Lookup()
                route.ref = actor.endpoint.remote()
                route.task = asyncio.ensure_future(self._find(actor, route))
            route.waiting.append((HANDLE, (request,), future))
            return future
        return self._call(actor, route, HANDLE, (request,))

    def _call(self, actor: Any, route: Any, method: str, args: tuple[Any, ...]) -> asyncio.Future:
        if _by_ray(route, method):
            return asyncio.wrap_future(_ray_call(actor, method, args))
        return route.call(method, args)

    async def _find(self, actor: Any, lookup: _Lookup) -> None:
        """The endpoint answer came: connect, then send what waited, in order."""
        route: Any = _RAY
        failure: BaseException | None = None
        try:
            endpoint: Endpoint | None = await lookup.ref
            if endpoint is not None:
                route = await LoopChannel.connect(
                    endpoint, repr(actor), lambda channel: self._forget(actor, channel)
                )
        except _LOOKUP_ERRORS as error:
            failure = _lookup_failure(actor, error)
        if self._routes.get(actor) is lookup:
            if failure is None:
                self._routes[actor] = route
            else:  # the next call asks again (a restarted actor has a new endpoint)
                del self._routes[actor]
        for method, args, future in lookup.waiting:
            if failure is not None:
                if not future.done():
                    future.set_exception(failure)
            else:
                _chain_loop(self._call(actor, route, method, args), future)

    def _forget(self, actor: Any, channel: Any) -> None:
        """A lost connection: the next call asks the actor for its endpoint again."""
        if self._routes.get(actor) is channel:
            del self._routes[actor]


def _chain_loop(source: asyncio.Future, target: asyncio.Future) -> None:
    def copy(done: asyncio.Future) -> None:
        if target.done():
            return
        if done.cancelled():
            target.cancel()
        elif done.exception() is not None:
            target.set_exception(done.exception())
        else:
            target.set_result(done.result())

    source.add_done_callback(copy)


def _ray_call(actor: Any, method: str, args: tuple[Any, ...]) -> Future:
    ref = getattr(actor, method).remote(*args)
    future = ref.future()
    future.ref = ref  # the ObjectRef must outlive its future
    return future


def _chain(source: Future, target: Future) -> None:
    def copy(done: Future) -> None:
        error = done.exception()
        settle(target, error is None, done.result() if error is None else error)

    source.add_done_callback(copy)


_ROUTES = _Routes()
os.register_at_fork(after_in_child=_ROUTES.__init__)
"""A forked child (PySpark forks its Python workers) has none of the parent's reader
threads: it starts with no routes, and leaves the parent's connections alone."""
