"""Kafka Connect's REST API on aiohttp, served from the process holding ``Workers``.

Routes and JSON shapes are Kafka Connect's, so its users' scripts and tools work::

    GET    /                                  {"version", "commit", "kafka_cluster_id"}
    GET    /connectors[?expand=status|info]   ["name", ...] (or {"name": {"status"|"info"}})
    POST   /connectors                        {"name", "config"} -> 201 info
    GET    /connectors/{name}                 {"name", "config", "tasks", "type"}
    GET    /connectors/{name}/config          {config}
    PUT    /connectors/{name}/config          {config} -> 200 info (201 when created)
    GET    /connectors/{name}/status          {"name", "connector", "tasks", "type"}
    PUT    /connectors/{name}/pause           202
    PUT    /connectors/{name}/resume          202
    POST   /connectors/{name}/restart[?includeTasks=&onlyFailed=]   204
    GET    /connectors/{name}/tasks           [{"id": {"connector", "task"}, "config"}]
    GET    /connectors/{name}/tasks/{id}/status
    POST   /connectors/{name}/tasks/{id}/restart   204
    DELETE /connectors/{name}                 204
    GET    /connector-plugins                 [{"class", "type", "version"}]

Errors answer ``{"error_code": status, "message": ...}``: 404 for an unknown connector,
409 for a name taken, 400 for a bad config or body, 500 otherwise. The handlers call
the (blocking) ``Workers`` methods on a thread pool. The server listens on 127.0.0.1
only: the API changes what runs on the cluster and has no authentication.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from raystream.connectors.workers import ConnectorExistsError, ConnectorNotFoundError
from raystream.errors import ConnectError, InvalidConfigError, RaystreamError

HOST = "127.0.0.1"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error_code": status, "message": message}, status=status)


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


def make_app(workers: Any) -> web.Application:
    """The aiohttp application answering for ``workers`` (a ``Workers``)."""

    async def call(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except ConnectorNotFoundError as error:
            return _error(404, str(error))
        except ConnectorExistsError as error:
            return _error(409, str(error))
        except (InvalidConfigError, ValueError) as error:
            return _error(400, str(error))
        except (ConnectError, RaystreamError) as error:
            return _error(500, str(error))

    async def body(request: web.Request) -> Any:
        try:
            return await request.json()
        except json.JSONDecodeError as error:
            raise InvalidConfigError(f"the request body is not JSON: {error}") from None

    async def root(request: web.Request) -> web.Response:
        from raystream import __version__

        return web.json_response(
            {"version": __version__, "commit": "", "kafka_cluster_id": workers.cluster.namespace}
        )

    async def list_connectors(request: web.Request) -> web.Response:
        names = await call(workers.list)
        expand = request.query.getall("expand", [])
        if not expand:
            return web.json_response(names)
        result: dict[str, Any] = {}
        for name in names:
            entry = {}
            if "status" in expand:
                entry["status"] = await call(workers.status, name)
            if "info" in expand:
                entry["info"] = await call(workers.info, name)
            result[name] = entry
        return web.json_response(result)

    async def create(request: web.Request) -> web.Response:
        document = await body(request)
        if not isinstance(document, dict) or not isinstance(document.get("config"), dict):
            raise InvalidConfigError('POST /connectors takes {"name": ..., "config": {...}}')
        name = document.get("name") or document["config"].get("name")
        return web.json_response(await call(workers.create, name, document["config"]), status=201)

    async def info(request: web.Request) -> web.Response:
        return web.json_response(await call(workers.info, request.match_info["name"]))

    async def get_config(request: web.Request) -> web.Response:
        return web.json_response(await call(workers.config, request.match_info["name"]))

    async def put_config(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        config = await body(request)
        if not isinstance(config, dict):
            raise InvalidConfigError(f"PUT /connectors/{name}/config takes a JSON object")
        existed = name in await call(workers.list)
        result = await call(workers.update, name, config)
        return web.json_response(result, status=200 if existed else 201)

    async def status(request: web.Request) -> web.Response:
        return web.json_response(await call(workers.status, request.match_info["name"]))

    async def pause(request: web.Request) -> web.Response:
        await call(workers.pause, request.match_info["name"])
        return web.Response(status=202)

    async def resume(request: web.Request) -> web.Response:
        await call(workers.resume, request.match_info["name"])
        return web.Response(status=202)

    async def restart(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        include, only = _flag(request, "includeTasks"), _flag(request, "onlyFailed")
        await call(workers.restart, name, include, only)
        if include:
            return web.json_response(await call(workers.status, name), status=202)
        return web.Response(status=204)

    async def tasks(request: web.Request) -> web.Response:
        return web.json_response(await call(workers.tasks, request.match_info["name"]))

    def task_id(request: web.Request) -> int:
        text = request.match_info["task"]
        if not text.isdigit():
            raise InvalidConfigError(f"task id {text!r} is not a number")
        return int(text)

    async def task_status(request: web.Request) -> web.Response:
        name, task = request.match_info["name"], task_id(request)
        document = await call(workers.status, name)
        for entry in document["tasks"]:
            if entry["id"] == task:
                return web.json_response(entry)
        return _error(404, f"connector {name!r} has no task {task}")

    async def task_restart(request: web.Request) -> web.Response:
        await call(workers.restart, request.match_info["name"], False, False, task_id(request))
        return web.Response(status=204)

    async def delete(request: web.Request) -> web.Response:
        await call(workers.delete, request.match_info["name"])
        return web.Response(status=204)

    async def connector_plugins(request: web.Request) -> web.Response:
        return web.json_response(await call(workers.describe_plugins))

    app = web.Application(middlewares=[errors])
    app.add_routes(
        [
            web.get("/", root),
            web.get("/connectors", list_connectors),
            web.post("/connectors", create),
            web.get("/connectors/{name}", info),
            web.delete("/connectors/{name}", delete),
            web.get("/connectors/{name}/config", get_config),
            web.put("/connectors/{name}/config", put_config),
            web.get("/connectors/{name}/status", status),
            web.put("/connectors/{name}/pause", pause),
            web.put("/connectors/{name}/resume", resume),
            web.post("/connectors/{name}/restart", restart),
            web.get("/connectors/{name}/tasks", tasks),
            web.get("/connectors/{name}/tasks/{task}/status", task_status),
            web.post("/connectors/{name}/tasks/{task}/restart", task_restart),
            web.get("/connector-plugins", connector_plugins),
        ]
    )
    return app


class RestServer:
    """The app on its own event loop thread, listening on loopback ``port`` (0: any)."""

    def __init__(self, workers: Any, port: int = 8083) -> None:
        self.workers = workers
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="connect-rest", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        """Bind and serve; returns once the port listens."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)

    async def _start(self) -> None:
        self._runner = web.AppRunner(make_app(self.workers), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST, self.port)
        await site.start()
        server = site._server
        if server is not None and server.sockets:  # the port 0 took
            self.port = server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
            self._runner = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
