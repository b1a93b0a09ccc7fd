"""How a server actor offers its direct path (:mod:`raystream.wire`).

Every actor with a :class:`~raystream.dispatch.Dispatcher` (replicas, both coordinators)
serves one method there, ``handle(request)``, the same method Ray calls reach: a
request takes the same dispatch path whichever way it came, and the direct path only
says so in the request's context (listener ``direct``). Everything but requests (roles,
admin, liveness) stays a Ray call.

With TLS configured for the direct path (``DIRECT:SSL``, see
:meth:`raystream.config.BrokerConfig.direct_listener`) the server speaks TLS with a
live context (:class:`~raystream.security.tls.TlsConfig`: certificate files replaced on
disk serve the next connection); a certificate that does not load is logged as an
error and the endpoint call fails, so clients use Ray calls until it is fixed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import ray

from raystream.dispatch import DIRECT_CONTEXT, HANDLE, RequestContext
from raystream.errors import InvalidConfigError
from raystream.protocol import Response
from raystream.security.tls import TlsConfig
from raystream.wire import DirectListener, Endpoint, Server

logger = logging.getLogger(__name__)

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

    ``handle`` is the actor's request method; ``listener`` the broker's direct path:
    its host is ``listener.host``, an address, ``node``, or empty for none (every call
    then goes through Ray).
    """

    def __init__(
        self,
        handle: Callable[[Any, RequestContext], Awaitable[Response]],
        listener: DirectListener,
    ) -> None:
        self._handle = handle
        self._listener = listener
        self._started: asyncio.Task | None = None

    async def endpoint(self) -> Endpoint | None:
        """Where the actor listens, its token and TLS; None without a listener host.

        Raises:
            InvalidConfigError: the direct path's certificate does not load.
        """
        if not self._listener.host:
            return None
        if self._started is None:
            self._started = asyncio.get_running_loop().create_task(self._start())
        return await self._started

    async def _start(self) -> Endpoint:
        listener = self._listener
        context = None
        if listener.tls is not None:
            try:  # the context's handshake callback keeps its TlsConfig alive
                context = TlsConfig(listener.tls).context
            except InvalidConfigError as error:
                logger.error("direct path: TLS certificate does not load: %s", error)
                self._started = None  # asked again, it tries again (a fixed file)
                raise
        server = Server(_Requests(self._handle), (HANDLE,), context, listener.client_tls)
        host = ray.util.get_node_ip_address() if listener.host == NODE_ADDRESS else listener.host
        return await server.start(host)
