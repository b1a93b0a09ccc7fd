"""asyncio connections whose large reads land in place: the Kafka listener's and the
direct path's sockets.

Both protocols read frames whose size comes first: a Kafka request (a producer's is up
to a megabyte), a produce call's Arrow payload on the direct path. ``asyncio.StreamReader``
copies every byte three times on its way to the caller (into its buffer, out of it as a
slice, and the slice into ``bytes``), moves what is left after each read to the front
of its buffer, and wakes the reading coroutine for every chunk the socket gives: 3.3 ms
of CPU per 1 MB frame on the benchmark machine, against 0.2 ms for the socket's own
copy. :class:`FrameReader` has the same ``readexactly``, but a read of more than
:data:`LARGE_READ_BYTES` gets its own buffer of exactly that size, which the socket
writes into (``BufferedProtocol``), and its coroutine wakes once, when it is full. Small
reads (headers, small frames) come out of one reused buffer, as before.

:func:`start_server` and :func:`open_connection` are ``asyncio.start_server`` and
``asyncio.open_connection`` with this reader (TLS included); the writer is asyncio's
``StreamWriter``. Flow control as asyncio's: reading pauses while more than
:data:`PAUSE_BYTES` of small reads wait for the caller; writes are drained as before.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from collections.abc import Awaitable, Callable
from typing import Any

LARGE_READ_BYTES = 64 << 10
"""A read of more than this many bytes gets its own buffer, filled by the socket."""
CHUNK_BYTES = 16 << 10
"""The small reads' buffer starts this large, grows (doubling) while what waits in it
needs room, and goes back to this size once read empty: an idle connection (a Kafka
listener may hold thousands) keeps only this much."""
MIN_FREE_BYTES = 4 << 10
"""Room the small reads' buffer offers the socket at least, per read."""
PAUSE_BYTES = 256 << 10
"""Reading pauses while more than this many bytes wait for the caller (asyncio's
streams pause at twice their 64 KiB limit)."""

ClientConnected = Callable[["FrameReader", asyncio.StreamWriter], Awaitable[None] | None]


class FrameReader:
    """The reading half of a connection: :meth:`readexactly`, as ``asyncio.StreamReader``
    has it (``IncompleteReadError`` at an early end, the connection's error raised), for
    one reading coroutine at a time.

    A read of more than :data:`LARGE_READ_BYTES` that has not arrived yet answers a
    read-only ``memoryview`` of a buffer of exactly its size that the socket wrote into
    (read-only, as ``bytes`` are: kio's readers insist on it); other reads answer
    ``bytes``.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._buffer = bytearray(CHUNK_BYTES)
        self._start = 0
        self._end = 0
        """Bytes received and not read yet: ``_buffer[_start:_end]``."""
        self._target: bytearray | None = None
        """A large read's own buffer while it fills (the socket writes there)."""
        self._filled = 0
        self._wanted = 0
        """Bytes the waiting small read needs in the buffer before it is woken."""
        self._waiter: asyncio.Future | None = None
        self._eof = False
        self._exception: BaseException | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._paused = False

    def exception(self) -> BaseException | None:
        """The error the connection ended with, if any."""
        return self._exception

    def at_eof(self) -> bool:
        """Whether the peer has closed and everything received has been read."""
        return self._eof and self._start == self._end and self._target is None

    async def readexactly(self, n: int) -> bytes | memoryview:
        """Exactly ``n`` bytes.

        Raises:
            asyncio.IncompleteReadError: the connection ended first (with what came).
            OSError: the connection failed.
        """
        if n < 0:
            raise ValueError(f"readexactly size can not be negative: {n}")
        if self._exception is not None:
            raise self._exception
        held = self._end - self._start
        if n > LARGE_READ_BYTES and held < n:
            return await self._read_large(n, held)
        while self._end - self._start < n:
            if self._exception is not None:
                raise self._exception
            if self._eof:
                incomplete = bytes(self._buffer[self._start : self._end])
                self._start = self._end = 0
                raise asyncio.IncompleteReadError(incomplete, n)
            self._wanted = n
            self._resume()
            await self._wait()
        start = self._start
        data = bytes(memoryview(self._buffer)[start : start + n])
        self._start = start + n
        if self._paused and self._end - self._start <= PAUSE_BYTES:
            self._resume()
        return data

    async def _read_large(self, n: int, held: int) -> memoryview:
        target = bytearray(n)
        target[:held] = memoryview(self._buffer)[self._start : self._end]
        self._start = self._end = 0
        self._target, self._filled = target, held
        try:
            while self._target is not None:  # handed back when full (buffer_updated)
                if self._exception is not None:
                    raise self._exception
                if self._eof:
                    raise asyncio.IncompleteReadError(bytes(target[: self._filled]), n)
                self._resume()
                await self._wait()
        finally:
            self._target = None
        return memoryview(target).toreadonly()

    async def _wait(self) -> None:
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _resume(self) -> None:
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    # ------------------------------------------------------------ the protocol's side

    def get_buffer(self) -> memoryview:
        """Where the socket writes next: the large read's buffer, or the small reads'
        (made room in, growing it only when what waits there fills it)."""
        if self._target is not None:
            return memoryview(self._target)[self._filled :]
        if self._start == self._end:
            self._start = self._end = 0
            if len(self._buffer) > CHUNK_BYTES:
                self._buffer = bytearray(CHUNK_BYTES)
        if len(self._buffer) - self._end < MIN_FREE_BYTES:
            held = self._end - self._start
            if self._start:
                self._buffer[:held] = self._buffer[self._start : self._end]
                self._start, self._end = 0, held
            if len(self._buffer) - held < MIN_FREE_BYTES:
                grown = bytearray(2 * len(self._buffer))
                grown[:held] = self._buffer[:held]
                self._buffer = grown
        return memoryview(self._buffer)[self._end :]

    def buffer_updated(self, count: int) -> None:
        """``count`` bytes arrived where :meth:`get_buffer` said."""
        if self._target is not None:
            self._filled += count
            if self._filled == len(self._target):
                # Full: what comes next goes to the small reads' buffer, even before the
                # reader runs (a buffer handed to the socket is never empty: TLS takes
                # an empty one for the peer's close).
                self._target = None
                self._wake()
            return
        self._end += count
        held = self._end - self._start
        if held >= self._wanted:
            self._wake()
        if held > PAUSE_BYTES and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def feed_eof(self) -> None:
        """The peer closed its side."""
        self._eof = True
        self._wake()

    def set_exception(self, error: BaseException) -> None:
        """The connection failed with ``error`` (raised to the reader)."""
        self._exception = error
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)


class _Protocol(asyncio.streams.FlowControlMixin, asyncio.BufferedProtocol):
    """Feeds a :class:`FrameReader` from the socket and gives the writer asyncio's
    drain (``FlowControlMixin``), as ``asyncio.StreamReaderProtocol`` does for its reader."""

    def __init__(self, connected: ClientConnected | None = None) -> None:
        loop = asyncio.get_running_loop()
        super().__init__(loop)
        self.reader = FrameReader(loop)
        self.writer: asyncio.StreamWriter | None = None
        self._connected = connected
        self._task: asyncio.Task | None = None
        self._closed = loop.create_future()
        self._over_ssl = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.reader._transport = transport
        self._over_ssl = transport.get_extra_info("sslcontext") is not None
        self.writer = asyncio.StreamWriter(transport, self, None, self._loop)  # type: ignore[arg-type]
        if self._connected is not None:
            started = self._connected(self.reader, self.writer)
            if asyncio.iscoroutine(started):
                self._task = self._loop.create_task(started)

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None:
            self.reader.feed_eof()
        else:
            self.reader.set_exception(exc)
        if not self._closed.done():
            if exc is None:
                self._closed.set_result(None)
            else:
                self._closed.set_exception(exc)
                self._closed.exception()  # retrieved: nobody need wait on it
        super().connection_lost(exc)
        self.reader._transport = None
        self.writer = None
        self._task = None

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.reader.buffer_updated(nbytes)

    def eof_received(self) -> bool:
        self.reader.feed_eof()
        return not self._over_ssl  # keep the writing half open, as asyncio's streams do

    def _get_close_waiter(self, stream: Any) -> asyncio.Future:
        return self._closed


async def start_server(
    connected: ClientConnected,
    host: str,
    port: int,
    *,
    ssl: ssl_module.SSLContext | None = None,
    reuse_address: bool | None = None,
) -> asyncio.Server:
    """``asyncio.start_server`` with a :class:`FrameReader` per connection."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: _Protocol(connected), host, port, ssl=ssl, reuse_address=reuse_address
    )


async def open_connection(
    host: str,
    port: int,
    *,
    ssl: ssl_module.SSLContext | None = None,
    server_hostname: str | None = None,
) -> tuple[FrameReader, asyncio.StreamWriter]:
    """``asyncio.open_connection`` with a :class:`FrameReader`."""
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(
        _Protocol, host, port, ssl=ssl, server_hostname=server_hostname
    )
    assert protocol.writer is not None
    return protocol.reader, protocol.writer


__all__ = ["FrameReader", "open_connection", "start_server"]
