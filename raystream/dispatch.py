"""The one path every request to a server actor goes through.

Why one path: a replica and both coordinators used to decode, check and answer each
call in the method that served it, so nothing could be said of every request at once.
Now each actor has a :class:`Dispatcher` mapping request types
(:mod:`raystream.requests`) to its handlers, and every request, whether it came as a
Ray call or over the direct path (:mod:`raystream.wire`), takes the same steps:

1. decode: the request must be one of the types the actor serves (anything else is
   answered with InvalidRequestError naming its type);
2. validate: :meth:`Request.validate <raystream.requests.Request.validate>` checks its
   fields before anything is touched;
3. authorize, then quota: the hooks of :class:`RequestHooks`, each called with the
   :class:`RequestContext` (who asks, over which listener) and the request, refusing by
   raising a :class:`~raystream.errors.RaystreamError` (an ACL check raises
   AuthorizationError); none are installed today;
4. handle: the actor's handler answers, or raises;
5. metrics: each metrics hook sees the request, its answer and the seconds it took;
6. answer: an exception becomes an error answer of the request's response type. A
   :class:`~raystream.errors.RaystreamError` keeps its code; anything else is a bug or
   an unforeseen failure, logged with its traceback here and answered as
   :class:`~raystream.errors.UnknownServerError` naming the request type and the
   original error, so a client never sees the bare base class.

Cost, on the produce and fetch hot paths: a dict lookup by type, the field checks, and
an empty loop per hook list; the clock is read only when a metrics hook is installed.
Pure logic: no Ray here, so the whole path is tested directly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from raystream.errors import InvalidRequestError, RaystreamError, UnknownServerError
from raystream.protocol import Response, Result, failure
from raystream.requests import Request

logger = logging.getLogger(__name__)

HANDLE = "handle"
"""The actor method every request is sent to, over Ray and over the direct path."""
ANONYMOUS = "User:ANONYMOUS"
"""The principal of every request today (Kafka's name for an unauthenticated one)."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent a request and how: what the authorization and quota hooks decide on.

    ``listener`` is ``ray`` (an actor call), ``direct`` (the direct socket path) or
    ``kafka`` (a Kafka-protocol listener); ``host`` is the client's address where the
    request came over a socket (Kafka's ACLs match on it), ``*`` inside Ray.
    """

    principal: str = ANONYMOUS
    listener: str = "ray"
    host: str = "*"


RAY_CONTEXT = RequestContext()
DIRECT_CONTEXT = RequestContext(listener="direct")

Check = Callable[[RequestContext, Request], None]
"""An authorization or quota hook: returns to let the request on, raises a
RaystreamError (AuthorizationError, ...) to refuse it."""
Observe = Callable[[RequestContext, Request, Response, float], None]
"""A metrics hook: the request, its answer and the seconds it took to handle."""
Handler = Callable[[Any], Awaitable[Response]]


@dataclass
class RequestHooks:
    """The extension points of the dispatch path, run in list order; empty by default.

    An ACL is one function appended to ``authorize``, a quota one appended to
    ``quota``, per-request metrics one appended to ``metrics``.
    """

    authorize: list[Check] = field(default_factory=list)
    quota: list[Check] = field(default_factory=list)
    metrics: list[Observe] = field(default_factory=list)


class Dispatcher:
    """Serves one actor's requests: ``handlers`` maps each request type it serves to the
    coroutine function answering it.

    Args:
        server: how log lines name the actor (e.g. ``replica 2 of orders-0``).
        handlers: request type -> handler; a handler answers or raises.
        hooks: the authorization, quota and metrics hooks (new, empty ones by default).
    """

    def __init__(
        self,
        server: str,
        handlers: Mapping[type[Request], Handler],
        hooks: RequestHooks | None = None,
    ) -> None:
        self.server = server
        self.hooks = hooks if hooks is not None else RequestHooks()
        self._handlers = dict(handlers)

    def serves(self, request_type: type[Request]) -> bool:
        """Whether this dispatcher has a handler for ``request_type``."""
        return request_type in self._handlers

    async def dispatch(self, request: Any, context: RequestContext = RAY_CONTEXT) -> Response:
        """Answer ``request`` (see the module's steps); never raises but for cancellation."""
        handler = self._handlers.get(type(request))
        if handler is None:
            return failure(
                InvalidRequestError(
                    f"{self.server} does not serve {type(request).__name__} requests"
                ),
                Result,
            )
        hooks = self.hooks
        started = time.perf_counter() if hooks.metrics else 0.0
        try:
            request.validate()
            for check in hooks.authorize:
                check(context, request)
            for check in hooks.quota:
                check(context, request)
            response = await handler(request)
        except RaystreamError as error:
            response = failure(error, request.response)
        except Exception as error:  # a bug or an unforeseen failure: logged, answered
            logger.exception("%s failed on %s", self.server, type(request).__name__)
            response = failure(
                UnknownServerError(
                    f"{type(request).__name__} failed on {self.server}: "
                    f"{type(error).__name__}: {error}"
                ),
                request.response,
            )
        if hooks.metrics:
            elapsed = time.perf_counter() - started
            for observe in hooks.metrics:
                try:
                    observe(context, request, response, elapsed)
                except Exception:  # a metrics failure never fails a request
                    logger.exception("%s: a metrics hook failed", self.server)
        return response


__all__ = [
    "DIRECT_CONTEXT",
    "HANDLE",
    "RAY_CONTEXT",
    "Dispatcher",
    "RequestContext",
    "RequestHooks",
]
