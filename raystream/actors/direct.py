"""How a server actor offers its direct path (:mod:`raystream.wire`).

Replicas serve the data plane on it (produce, fetch, replica fetch, markers), the
coordinators their per-transaction and per-commit calls, which a transactional
producer makes several times per transaction. Everything else stays a Ray call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import ray

from raystream.wire import Endpoint, Server

NODE_ADDRESS = "node"
"""``listener.host`` value meaning the Ray node's own address."""


class DirectPath:
    """An actor's direct path: started on the first request for its endpoint.

    ``listener_host`` is the broker's ``listener.host``: an address, ``node``, or empty
    for none (every call then goes through Ray).
    """

    def __init__(self, target: Any, methods: Iterable[str], listener_host: str) -> None:
        self._server = Server(target, methods)
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
