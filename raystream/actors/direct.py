"""How a server actor offers its direct path (:mod:`raystream.wire`).

Every actor with a :class:`~raystream.dispatch.Dispatcher` (replicas, both coordinators)
serves one method there, ``handle(request)``, the same method Ray calls reach: a
request takes the same dispatch path whichever way it came, and the direct path only
says so in the request's context (listener ``direct``). Everything but requests (roles,
admin, liveness) stays a Ray call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import ray

from raystream.dispatch import DIRECT_CONTEXT, HANDLE, RequestContext
from raystream.protocol import Response
from raystream.wire import Endpoint, Server

NODE_ADDRESS = "node"
"""``listener.host`` value meaning the Ray node's own address."""


class _Requests:
    """What the direct path's server calls: the actor's ``handle`` with the direct
    path's context."""

    def __init__(self, handle: Callable[[Any, RequestContext], Awaitable[Response]]) -> None:
        self._handle = handle

    async def handle(self, request: Any) -> Response:
        return await self._handle(request, DIRECT_CONTEXT)


class DirectPath:
    """An actor's direct path: started on the first request for its endpoint.

    ``handle`` is the actor's request method; ``listener_host`` is the broker's
    ``listener.host``: an address, ``node``, or empty for none (every call then goes
    through Ray).
    """

    def __init__(
        self,
        handle: Callable[[Any, RequestContext], Awaitable[Response]],
        listener_host: str,
    ) -> None:
        self._server = Server(_Requests(handle), (HANDLE,))
        self._host = listener_host
        self._started: asyncio.Task | None = None

    async def endpoint(self) -> Endpoint | None:
        """Where the actor listens, and its token; None without a listener host."""
        if not self._host:
            return None
        if self._started is None:
            host = ray.util.get_node_ip_address() if self._host == NODE_ADDRESS else self._host
            self._started = asyncio.get_running_loop().create_task(self._server.start(host))
        return await self._started
