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

TLS (optional, the broker's ``listener.security.protocol.map`` entry ``DIRECT:SSL``, see
:meth:`raystream.config.BrokerConfig.direct_listener`): the server wraps its
connections in TLS, and its endpoint tells clients how to check it (the truststore,
and whether the certificate must name the endpoint's host: yes unless turned off). The
token then travels inside TLS. A client whose check fails gets
:class:`SslAuthenticationError`, never a plaintext connection. A client's TLS is
an ``ssl.SSLObject`` over memory buffers rather than an ``SSLSocket``: a channel sends
from its callers' threads while its reader thread receives, and an SSL object must not
be used by two threads at once (:class:`_TlsLink` says how that is kept). Without
TLS, frames go to the socket as before: no lock, buffer or copy is added.

Two clients: :class:`Channel`, shared by the threads of a process (a reader thread
settles its futures), and :class:`LoopChannel`, for the coroutines of one event loop
(a server actor's hop to a leader), which reads its answers on that loop.

Requests on one connection start in the order they arrive (as an async actor starts
its calls in the order one caller made them), and may finish in any order. A lost
connection fails every call waiting on it with the retriable
:class:`BrokerNotAvailableError`, as the death of the actor does on the Ray path.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import itertools
import pickle
import secrets
import socket
import ssl
import struct
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any

from raystream import framing
from raystream.errors import (
    BrokerNotAvailableError,
    InvalidConfigError,
    InvalidRequestError,
    RaystreamError,
    SslAuthenticationError,
)
from raystream.security.tls import ClientTlsSettings, TlsSettings, client_context

HELLO = b"RSW1"
"""The server's answer to a valid token: the connection is open for calls."""
TOKEN_BYTES = 16
CONNECT_TIMEOUT_S = 5.0
_REQUEST, _ANSWER, _FAILURE = 0, 1, 2
_HEADER = struct.Struct("<QBIH")  # call id, kind, body length, buffer count
_LENGTH = struct.Struct("<Q")
TLS_CHUNK_BYTES = 256 << 10
"""Plaintext a TLS channel encrypts (or ciphertext it receives) per step: large
payloads go out in pieces of this size rather than all encrypted in memory first."""
TLS_SMALL_BYTES = 16 << 10
"""Parts of a frame up to this size are joined before they are encrypted, so a small
request is one TLS record (and one send), not one per part."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where an actor serves its direct path, the token that opens it, the methods it
    serves there (its other methods are Ray calls), and, if it speaks TLS, how a client
    checks its certificate (the host checked is :attr:`host`)."""

    host: str
    port: int
    token: bytes
    methods: frozenset[str]
    tls: ClientTlsSettings | None = None


@dataclass(frozen=True, slots=True)
class DirectListener:
    """How server actors offer their direct path, from the broker config
    (:meth:`raystream.config.BrokerConfig.direct_listener`): the host to listen on
    (``listener.host``: an address, ``node``, or empty for no direct path) and, for
    TLS, the server's certificate settings and how clients are to check it."""

    host: str
    tls: TlsSettings | None = None
    client_tls: ClientTlsSettings | None = None


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
    """Serves ``methods`` of ``target`` (coroutine methods) on the running event loop.

    With ``tls`` (a server context) every connection is TLS, and the endpoint tells
    clients to check the server as ``client_tls`` says (by default: the system's CAs,
    the host checked).
    """

    def __init__(
        self,
        target: Any,
        methods: Iterable[str],
        tls: ssl.SSLContext | None = None,
        client_tls: ClientTlsSettings | None = None,
    ) -> None:
        self._target = target
        self._methods = frozenset(methods)
        self._tls = tls
        self._client_tls = (client_tls or ClientTlsSettings()) if tls is not None else None
        self._token = secrets.token_bytes(TOKEN_BYTES)
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, host: str) -> Endpoint:
        """Listen on ``host`` (an ephemeral port) and return the endpoint to hand out."""
        self._server = await framing.start_server(self._serve, host, 0, ssl=self._tls)
        port = self._server.sockets[0].getsockname()[1]
        return Endpoint(host, port, self._token, self._methods, self._client_tls)

    def close(self) -> None:
        """Stop listening and close the open connections (their callers' waiting calls
        fail as lost)."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()

    async def _serve(self, reader: framing.FrameReader, writer: asyncio.StreamWriter) -> None:
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


def _decode_answer(kind: int, body: bytes, buffers: list[Any]) -> tuple[int, Any]:
    """An answer frame's (kind, value); one that cannot be unpickled becomes a failure
    naming why, for the call waiting on it (both channels read answers this way)."""
    try:
        return kind, pickle.loads(body, buffers=buffers)
    except Exception as error:
        return _FAILURE, RaystreamError(f"undecodable answer: {error!r}")


def _lost(name: str, error: BaseException) -> BrokerNotAvailableError:
    """The retriable error of a call whose connection to ``name`` was lost."""
    return BrokerNotAvailableError(f"connection to {name} lost: {error}")


class Channel:
    """One connection to one actor's endpoint, shared by the threads of a process.

    ``call`` sends from the calling thread and returns a future; a reader thread
    completes the futures as answers arrive. ``on_close`` runs once when the
    connection is lost.

    An endpoint with TLS is connected with TLS (see :class:`_TlsLink`), its certificate
    checked as the endpoint says.

    Raises:
        OSError: the endpoint cannot be reached, or refused the token.
        SslAuthenticationError: the TLS handshake failed (the certificate is not
            trusted, or does not name the endpoint's host).
    """

    def __init__(self, endpoint: Endpoint, name: str, on_close: Callable[[Channel], None]) -> None:
        self.name = name
        self.methods = endpoint.methods
        self._on_close = on_close
        where = f"{endpoint.host}:{endpoint.port}"
        sock = socket.create_connection((endpoint.host, endpoint.port), CONNECT_TIMEOUT_S)
        self._send_lock = threading.Lock()  # one frame at a time on the socket
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if endpoint.tls is None:
                self._send_parts = functools.partial(_send, sock)
                self._receive = functools.partial(_receive, sock)
            else:
                link = _connect_tls(sock, endpoint.tls, endpoint.host, self._send_lock, where)
                self._send_parts, self._receive = link.send, link.receive
            self._send_parts([endpoint.token])
            if bytes(self._receive(len(HELLO))) != HELLO:
                raise ConnectionError(f"{where} refused the token")
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._lock = threading.Lock()  # guards the calls waiting and the closed state
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
                    future.set_exception(_lost(self.name, self._closed))
                    return future
                call_id = next(self._ids)
                self._pending[call_id] = future
            try:
                self._send_parts([_header(call_id, _REQUEST, body, raws), body, *raws])
                return future
            except OSError as error:
                failed = error
        self._fail(failed)
        return future

    def close(self) -> None:
        """Close the connection; calls still waiting fail as lost."""
        self._fail(ConnectionAbortedError("closed by the client"))

    def _read(self) -> None:
        receive = self._receive
        try:
            while True:
                call_id, kind, size, count = _HEADER.unpack(receive(_HEADER.size))
                lengths = receive(_LENGTH.size * count)
                body = receive(size)
                buffers = [receive(size) for size in _sizes(lengths)]
                kind, value = _decode_answer(kind, body, buffers)
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
            settle(future, False, _lost(self.name, error))
        self._on_close(self)


class LoopChannel:
    """One connection to one actor's endpoint for the coroutines of one event loop.

    The same frames as :class:`Channel`, without its reader thread: an answer is read
    and its future settled on the loop that awaits it, so it costs no thread wake-up,
    no GIL hand-over and no ``call_soon_threadsafe`` (the Kafka listener's hop to a
    leader measured 0.5 ms p50 for those on the benchmark machine, paid by every
    answer). :meth:`call` writes at once, so calls leave in the order they are made.
    Open with :meth:`connect`; ``on_close`` runs once when the connection is lost.
    """

    def __init__(
        self,
        reader: framing.FrameReader,
        writer: asyncio.StreamWriter,
        endpoint: Endpoint,
        name: str,
        on_close: Callable[[LoopChannel], None],
    ) -> None:
        self.name = name
        self.methods = endpoint.methods
        self._writer = writer
        self._on_close = on_close
        self._ids = itertools.count()
        self._pending: dict[int, asyncio.Future] = {}
        self._closed: BaseException | None = None
        self._reading = asyncio.ensure_future(self._read(reader))

    @classmethod
    async def connect(
        cls, endpoint: Endpoint, name: str, on_close: Callable[[LoopChannel], None]
    ) -> LoopChannel:
        """Connect (with TLS as the endpoint says) and present the token.

        Raises:
            OSError: the endpoint cannot be reached, or refused the token.
            SslAuthenticationError: the TLS handshake failed.
        """
        where = f"{endpoint.host}:{endpoint.port}"
        context = None
        if endpoint.tls is not None:
            try:
                context = client_context(endpoint.tls)
            except (ssl.SSLError, InvalidConfigError) as error:
                raise SslAuthenticationError(f"TLS with {where} failed: {error}") from None
        try:
            reader, writer = await asyncio.wait_for(
                framing.open_connection(
                    endpoint.host,
                    endpoint.port,
                    ssl=context,
                    server_hostname=endpoint.host if context is not None else None,
                ),
                CONNECT_TIMEOUT_S,
            )
        except ssl.SSLError as error:
            raise SslAuthenticationError(f"TLS with {where} failed: {error}") from None
        except TimeoutError:
            raise ConnectionError(f"{where} did not answer within {CONNECT_TIMEOUT_S} s") from None
        try:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            writer.write(endpoint.token)
            hello = await asyncio.wait_for(reader.readexactly(len(HELLO)), CONNECT_TIMEOUT_S)
            if hello != HELLO:
                raise ConnectionError(f"{where} refused the token")
        except (asyncio.IncompleteReadError, TimeoutError):
            writer.close()
            raise ConnectionError(f"{where} refused the token") from None
        except BaseException:
            writer.close()
            raise
        return cls(reader, writer, endpoint, name, on_close)

    def call(self, method: str, args: tuple[Any, ...]) -> asyncio.Future:
        """Send ``method(*args)`` now; the future gets its answer or its exception."""
        future = asyncio.get_running_loop().create_future()
        if self._closed is not None:
            future.set_exception(_lost(self.name, self._closed))
            return future
        body, raws = _pickle((method, args))
        call_id = next(self._ids)
        self._pending[call_id] = future
        head = _header(call_id, _REQUEST, body, raws)
        try:
            self._writer.write(head + body)
            for raw in raws:  # each on its own: the socket takes it from where it is
                self._writer.write(raw)
        except (OSError, RuntimeError) as error:  # RuntimeError: the transport is closed
            self._fail(error)
        return future

    def close(self) -> None:
        """Close the connection; calls still waiting fail as lost."""
        self._fail(ConnectionAbortedError("closed by the client"))

    async def _read(self, reader: framing.FrameReader) -> None:
        try:
            while True:
                call_id, kind, size, count = _HEADER.unpack(await reader.readexactly(_HEADER.size))
                lengths = await reader.readexactly(_LENGTH.size * count) if count else b""
                body = await reader.readexactly(size)
                buffers = [await reader.readexactly(size) for size in _sizes(lengths)]
                kind, value = _decode_answer(kind, body, buffers)
                future = self._pending.pop(call_id, None)
                if future is not None and not future.done():
                    if kind == _ANSWER:
                        future.set_result(value)
                    else:
                        future.set_exception(value)
        except (asyncio.IncompleteReadError, OSError) as error:
            self._fail(error)
        except asyncio.CancelledError:
            self._fail(ConnectionAbortedError("closed"))
            raise

    def _fail(self, error: BaseException) -> None:
        """Close and fail every waiting call."""
        if self._closed is not None:
            return
        self._closed = error
        pending, self._pending = self._pending, {}
        self._writer.close()
        for future in pending.values():
            if not future.done():
                future.set_exception(_lost(self.name, error))
        self._on_close(self)


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


# -------------------------------------------------------------------------- TLS


def _connect_tls(
    sock: socket.socket,
    settings: ClientTlsSettings,
    host: str,
    send_lock: threading.Lock,
    where: str,
) -> _TlsLink:
    """TLS over ``sock``, the server's certificate checked as ``settings`` say.

    Raises:
        SslAuthenticationError: the handshake failed or the client's own TLS settings
            do not load (the message names the endpoint and why).
    """
    try:
        context = client_context(settings)
        return _TlsLink(sock, context, host, send_lock)
    except (ssl.SSLError, InvalidConfigError) as error:
        raise SslAuthenticationError(f"TLS with {where} failed: {error}") from None


class _TlsLink:
    """TLS over a blocking socket for a :class:`Channel`: senders in callers' threads
    (one at a time, under the channel's send lock) and one reader thread.

    The SSL object works on memory buffers (``ssl.MemoryBIO``), never on the socket,
    and every use of it and its buffers is under ``_lock``, held only while it encrypts
    or decrypts (never while the socket blocks). Ciphertext leaves in the order the SSL
    object produced it: only a holder of the send lock takes it out of the outgoing
    buffer and sends it before letting go, so the reader, when decrypting produced
    bytes to send (a TLS 1.3 key update), takes the send lock to send them. Lock order
    is send lock, then ``_lock``; the reader holds ``_lock`` alone or after the send
    lock, so neither waits on the other in a circle.
    """

    def __init__(
        self, sock: socket.socket, context: ssl.SSLContext, host: str, send_lock: threading.Lock
    ) -> None:
        self._sock = sock
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_hostname=host)
        self._lock = threading.Lock()
        self._send_lock = send_lock
        self._raw = bytearray(TLS_CHUNK_BYTES)  # the reader's: ciphertext as received
        self._handshake()

    def _handshake(self) -> None:
        """Run the handshake (before the reader thread starts: one thread only)."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                self._fill()
        self._flush()

    def send(self, parts: list[Any]) -> None:
        """Encrypt and send every part (the caller holds the send lock)."""
        small: list[memoryview] = []
        joined = 0
        for part in parts:
            view = memoryview(part).cast("B")
            if view.nbytes <= TLS_SMALL_BYTES:
                small.append(view)
                joined += view.nbytes
                if joined < TLS_CHUNK_BYTES:
                    continue
            if small:
                self._encrypt(b"".join(small))
                small, joined = [], 0
            if view.nbytes > TLS_SMALL_BYTES:
                for start in range(0, view.nbytes, TLS_CHUNK_BYTES):
                    self._encrypt(view[start : start + TLS_CHUNK_BYTES])
        if small:
            self._encrypt(b"".join(small))
        self._flush()

    def receive(self, size: int) -> bytearray:
        """Exactly ``size`` bytes of plaintext (reader thread; ConnectionError if the
        peer closes first)."""
        data = bytearray(size)
        view = memoryview(data)
        got = 0
        while got < size:
            with self._lock:
                try:
                    count = self._tls.read(size - got, view[got:])
                except ssl.SSLWantReadError:
                    count = -1
                except ssl.SSLZeroReturnError:
                    count = 0
                answer = self._out.pending
            if answer:
                with self._send_lock:
                    self._flush()
            if count == 0:
                raise ConnectionResetError("the peer closed the connection")
            if count > 0:
                got += count
            else:
                self._fill()
        return data

    def _encrypt(self, data: Any) -> None:
        with self._lock:
            self._tls.write(data)
            full = self._out.pending >= TLS_CHUNK_BYTES
        if full:
            self._flush()

    def _flush(self) -> None:
        """Send the ciphertext waiting (the caller holds the send lock, or is the only
        thread, in the handshake)."""
        with self._lock:
            data = self._out.read()
        if data:
            self._sock.sendall(data)

    def _fill(self) -> None:
        """Receive ciphertext for the SSL object (reader thread, or the handshake)."""
        count = self._sock.recv_into(self._raw)
        if count == 0:
            raise ConnectionResetError("the peer closed the connection")
        with self._lock:
            self._in.write(memoryview(self._raw)[:count])


__all__ = ["HELLO", "Channel", "DirectListener", "Endpoint", "LoopChannel", "Server", "settle"]
