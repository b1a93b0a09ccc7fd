"""The data plane's direct path: an actor's requests sent over a socket.

A Ray actor call costs about a millisecond of scheduling and bookkeeping on each side
(``python -m benchmarks.bench_calls``); a request over a plain TCP connection costs a
tenth of that. Latency (an end-to-end record, an ``acks=all`` round of replication) is a
few such calls in a row, so requests (produce, fetch, replica fetch, a transaction's
and a commit's coordinator calls) take this path, while Ray keeps everything it is good
at: placing, starting, restarting and finding the actors, and every control-plane call.
A server actor serves one method here, ``handle(request)`` with a typed request of
:mod:`raystream.requests` (see :mod:`raystream.actors.direct`); the server below is
generic over the methods it is given.

An actor serving the path listens on an ephemeral port and hands out its
:class:`Endpoint` (address and a random token) through a Ray call, so only a process
that may call the actor through Ray can connect: the socket is exactly as trusted as the
Ray cluster. A connection starts with the token; the server answers :data:`HELLO` or
closes. Then both sides exchange frames: a header (call id, kind, body length, number
of buffers, their lengths), a pickle (protocol 5) and its out-of-band buffers, so Arrow
and numpy payloads cross without being copied into the pickle.

Requests on one connection start in the order they arrive (as an async actor starts
its calls in the order one caller made them), and may finish in any order. A lost
connection fails every call waiting on it with the retriable
:class:`BrokerNotAvailableError`, as the death of the actor does on the Ray path.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import pickle
import secrets
import socket
import struct
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any

from raystream.errors import BrokerNotAvailableError, InvalidRequestError, RaystreamError

HELLO = b"RSW1"
"""The server's answer to a valid token: the connection is open for calls."""
TOKEN_BYTES = 16
CONNECT_TIMEOUT_S = 5.0
_REQUEST, _ANSWER, _FAILURE = 0, 1, 2
_HEADER = struct.Struct("<QBIH")  # call id, kind, body length, buffer count
_LENGTH = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where an actor serves its direct path, the token that opens it, and the methods
    it serves there (its other methods are Ray calls)."""

    host: str
    port: int
    token: bytes
    methods: frozenset[str]


def _pickle(value: Any) -> tuple[bytes, list[memoryview]]:
    """``value`` as a pickle and the buffers it keeps out of band."""
    buffers: list[pickle.PickleBuffer] = []
    body = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    return body, [b.raw() for b in buffers]


def _header(call_id: int, kind: int, body: bytes, raws: list[memoryview]) -> bytes:
    lengths = b"".join(_LENGTH.pack(r.nbytes) for r in raws)
    return _HEADER.pack(call_id, kind, len(body), len(raws)) + lengths


def _sizes(lengths: bytes | bytearray) -> list[int]:
    """The buffer sizes a header's length block lists (read on both sides)."""
    return [size for (size,) in _LENGTH.iter_unpack(lengths)]


# ----------------------------------------------------------------------- server


class Server:
    """Serves ``methods`` of ``target`` (coroutine methods) on the running event loop."""

    def __init__(self, target: Any, methods: Iterable[str]) -> None:
        self._target = target
        self._methods = frozenset(methods)
        self._token = secrets.token_bytes(TOKEN_BYTES)
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, host: str) -> Endpoint:
        """Listen on ``host`` (an ephemeral port) and return the endpoint to hand out."""
        self._server = await asyncio.start_server(self._serve, host, 0)
        port = self._server.sockets[0].getsockname()[1]
        return Endpoint(host, port, self._token, self._methods)

    def close(self) -> None:
        """Stop listening and close the open connections (their callers' waiting calls
        fail as lost)."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        write_lock = asyncio.Lock()
        self._writers.add(writer)
        try:
            token = await reader.readexactly(TOKEN_BYTES)
            if not hmac.compare_digest(token, self._token):
                return
            writer.write(HELLO)
            while True:
                header = await reader.readexactly(_HEADER.size)
                call_id, _, size, count = _HEADER.unpack(header)
                lengths = await reader.readexactly(_LENGTH.size * count)
                body = await reader.readexactly(size)
                buffers = [await reader.readexactly(size) for size in _sizes(lengths)]
                task = asyncio.get_running_loop().create_task(
                    self._answer(writer, write_lock, call_id, body, buffers)
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                # The answer holds the request; waiting for the next one must not keep
                # it (a produce's batch, held by an idle connection for good).
                del body, buffers
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(
        self,
        writer: asyncio.StreamWriter,
        write_lock: asyncio.Lock,
        call_id: int,
        body: bytes,
        buffers: list[bytes],
    ) -> None:
        try:
            method, args = pickle.loads(body, buffers=buffers)
            if method not in self._methods:
                raise InvalidRequestError(f"{method!r} is not served on the direct path")
            kind, value = _ANSWER, await getattr(self._target, method)(*args)
        except Exception as error:  # the caller gets the exception, as from a Ray call
            kind, value = _FAILURE, error
        try:
            body, raws = _pickle(value)
        except Exception as error:  # an answer that cannot be pickled
            kind, (body, raws) = _FAILURE, _pickle(RaystreamError(f"unsendable answer: {error!r}"))
        if writer.is_closing():
            return
        async with write_lock:
            writer.write(_header(call_id, kind, body, raws) + body)
            for raw in raws:
                writer.write(raw)
            with contextlib.suppress(ConnectionError):
                await writer.drain()


# ----------------------------------------------------------------------- client


class Channel:
    """One connection to one actor's endpoint, shared by the threads of a process.

    ``call`` sends from the calling thread and returns a future; a reader thread
    completes the futures as answers arrive. ``on_close`` runs once when the
    connection is lost.
    """

    def __init__(self, endpoint: Endpoint, name: str, on_close: Callable[[Channel], None]) -> None:
        self.name = name
        self.methods = endpoint.methods
        self._on_close = on_close
        sock = socket.create_connection((endpoint.host, endpoint.port), CONNECT_TIMEOUT_S)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.sendall(endpoint.token)
            if bytes(_receive(sock, len(HELLO))) != HELLO:
                raise ConnectionError(f"{endpoint.host}:{endpoint.port} refused the token")
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._lock = threading.Lock()  # guards the calls waiting and the closed state
        self._send_lock = threading.Lock()  # one frame at a time on the socket
        self._ids = itertools.count()
        self._pending: dict[int, Future] = {}
        self._closed: BaseException | None = None
        threading.Thread(target=self._read, name=f"raystream-wire-{name}", daemon=True).start()

    def call(self, method: str, args: tuple[Any, ...]) -> Future:
        """Send ``method(*args)``; the future gets its answer or its exception."""
        future: Future = Future()
        body, raws = _pickle((method, args))
        with self._send_lock:
            with self._lock:
                if self._closed is not None:
                    future.set_exception(self._lost(self._closed))
                    return future
                call_id = next(self._ids)
                self._pending[call_id] = future
            try:
                _send(self._sock, [_header(call_id, _REQUEST, body, raws), body, *raws])
                return future
            except OSError as error:
                failed = error
        self._fail(failed)
        return future

    def close(self) -> None:
        """Close the connection; calls still waiting fail as lost."""
        self._fail(ConnectionAbortedError("closed by the client"))

    def _read(self) -> None:
        sock = self._sock
        try:
            while True:
                call_id, kind, size, count = _HEADER.unpack(_receive(sock, _HEADER.size))
                lengths = _receive(sock, _LENGTH.size * count)
                body = _receive(sock, size)
                buffers = [_receive(sock, size) for size in _sizes(lengths)]
                try:
                    value = pickle.loads(body, buffers=buffers)
                except Exception as error:
                    kind, value = _FAILURE, RaystreamError(f"undecodable answer: {error!r}")
                with self._lock:
                    future = self._pending.pop(call_id, None)
                if future is not None:
                    settle(future, kind == _ANSWER, value)
        except OSError as error:
            self._fail(error)

    def _fail(self, error: BaseException) -> None:
        """Close and fail every waiting call (their callbacks run outside the lock)."""
        with self._lock:
            if self._closed is not None:
                return
            self._closed = error
            pending, self._pending = self._pending, {}
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
        for future in pending.values():
            settle(future, False, self._lost(error))
        self._on_close(self)

    def _lost(self, error: BaseException) -> BrokerNotAvailableError:
        return BrokerNotAvailableError(f"connection to {self.name} lost: {error}")


def settle(future: Future, ok: bool, value: Any) -> None:
    """Give ``future`` its answer (``ok``) or exception, unless its caller cancelled it
    (an asyncio task awaiting it was cancelled)."""
    with contextlib.suppress(InvalidStateError):
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


def _receive(sock: socket.socket, size: int) -> bytearray:
    """Exactly ``size`` bytes from ``sock`` (ConnectionError if it closes first)."""
    data = bytearray(size)
    view = memoryview(data)
    got = 0
    while got < size:
        count = sock.recv_into(view[got:])
        if count == 0:
            raise ConnectionResetError("the peer closed the connection")
        got += count
    return data


def _send(sock: socket.socket, parts: list[Any]) -> None:
    """Send every part, however the kernel splits the writes."""
    views = [memoryview(p).cast("B") for p in parts]
    views = [v for v in views if v.nbytes]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= views[0].nbytes:
            sent -= views.pop(0).nbytes
        if sent:
            views[0] = views[0][sent:]


__all__ = ["HELLO", "Channel", "Endpoint", "Server", "settle"]
