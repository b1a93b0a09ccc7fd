"""The frame reader of the Kafka listener's and the direct path's sockets, on real
loopback sockets: every byte arrives in order however the peer's writes are split,
large reads land whole, an early end is an IncompleteReadError, reading pauses while
small reads wait and resumes when they are read. (TLS: tests/security/test_direct_tls.py.)"""

from __future__ import annotations

import asyncio
import functools
import random
import socket
import struct
import threading
import time

import pytest

from raystream import framing

SIZE = struct.Struct(">i")


def _send_in_pieces(sock: socket.socket, data: bytes, seed: int) -> None:
    """Send ``data`` in random pieces (some tiny, some large), with short pauses, then close."""
    rng = random.Random(seed)
    position = 0
    while position < len(data):
        step = rng.choice((1, 3, 7, 100, 4096, 70_000, 300_000))
        sock.sendall(data[position : position + step])
        position += step
        if rng.random() < 0.05:
            time.sleep(0.001)
    sock.close()


def _frames(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    sizes = [
        rng.choice((0, 1, 5, 100, framing.LARGE_READ_BYTES, framing.LARGE_READ_BYTES + 1))
        if rng.random() < 0.5
        else rng.randrange(0, 400_000)
        for _ in range(count)
    ]
    return [rng.randbytes(size) for size in sizes]


async def _serve_once(handle) -> tuple[asyncio.Server, int, asyncio.Future]:
    """A framing server on loopback whose one connection is handed to ``handle``; the
    future gets what ``handle`` returns."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    async def connected(reader: framing.FrameReader, writer: asyncio.StreamWriter) -> None:
        try:
            done.set_result(await handle(reader, writer))
        except BaseException as error:  # the test reads it from the future
            done.set_exception(error)
        finally:
            writer.close()

    server = await framing.start_server(connected, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], done


async def _serve_while_sending(handle, send, timeout_s: float = 60):
    """What ``handle`` returns for the one connection of a framing server on loopback,
    while ``send(sock)`` writes that connection from a thread of its own."""
    server, port, done = await _serve_once(handle)
    sock = socket.create_connection(("127.0.0.1", port))
    sender = threading.Thread(target=send, args=(sock,))
    sender.start()
    try:
        return await asyncio.wait_for(done, timeout_s)
    finally:
        sender.join(30)
        server.close()


def test_frames_of_every_size_arrive_whole_however_the_writes_are_split():
    frames = _frames(seed=3, count=120)
    stream = b"".join(SIZE.pack(len(f)) + f for f in frames)

    async def read_all(reader: framing.FrameReader, writer: asyncio.StreamWriter) -> list[bytes]:
        got = []
        while True:
            try:
                (size,) = SIZE.unpack(await reader.readexactly(4))
            except asyncio.IncompleteReadError as end:
                assert end.partial == b""
                return got
            frame = await reader.readexactly(size)
            assert isinstance(frame, bytes) or (isinstance(frame, memoryview) and frame.readonly)
            got.append(bytes(frame))

    send = functools.partial(_send_in_pieces, data=stream, seed=5)
    assert asyncio.run(_serve_while_sending(read_all, send)) == frames


@pytest.mark.parametrize("size", [10, framing.LARGE_READ_BYTES * 3])
def test_an_end_in_the_middle_of_a_read_is_an_incomplete_read(size):
    async def read_one(reader: framing.FrameReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(size)

    async def main() -> None:
        server, port, done = await _serve_once(read_one)
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"x" * (size - 3))
        sock.close()
        try:
            with pytest.raises(asyncio.IncompleteReadError) as info:
                await asyncio.wait_for(done, 30)
            assert info.value.partial == b"x" * (size - 3) and info.value.expected == size
        finally:
            server.close()

    asyncio.run(main())


def test_reading_pauses_while_small_reads_wait_and_resumes_when_they_are_read():
    total = 4 * framing.PAUSE_BYTES

    async def stall_then_read(reader: framing.FrameReader, writer: asyncio.StreamWriter) -> int:
        transport = writer.transport
        deadline = time.monotonic() + 30
        while transport.is_reading():  # the peer keeps sending; nobody reads
            assert time.monotonic() < deadline, "reading never paused"
            await asyncio.sleep(0.01)
        held = reader._end - reader._start
        assert framing.PAUSE_BYTES < held < total
        got = 0
        while got < total:
            got += len(await reader.readexactly(min(1000, total - got)))
        return got

    def send(sock: socket.socket) -> None:
        sock.sendall(b"s" * total)
        sock.close()

    assert asyncio.run(_serve_while_sending(stall_then_read, send)) == 4 * framing.PAUSE_BYTES


def test_open_connection_talks_both_ways_through_a_framing_server():
    async def echo(reader: framing.FrameReader, writer: asyncio.StreamWriter) -> int:
        count = 0
        while True:
            try:
                (size,) = SIZE.unpack(await reader.readexactly(4))
            except asyncio.IncompleteReadError:
                return count
            writer.write(SIZE.pack(size))
            writer.write(await reader.readexactly(size))
            await writer.drain()
            count += 1

    async def main() -> None:
        server, port, done = await _serve_once(echo)
        reader, writer = await framing.open_connection("127.0.0.1", port)
        try:
            for frame in _frames(seed=9, count=40):
                writer.write(SIZE.pack(len(frame)) + frame)
                await writer.drain()
                (size,) = SIZE.unpack(await reader.readexactly(4))
                assert bytes(await reader.readexactly(size)) == frame
            writer.close()
            assert await asyncio.wait_for(done, 30) == 40
            await writer.wait_closed()
        finally:
            server.close()

    asyncio.run(main())


def test_a_filled_large_read_never_leaves_the_socket_an_empty_buffer():
    """The socket (or TLS, which takes an empty buffer for the peer's close) may ask
    where to write next before the reader of a filled large read has run: it gets the
    small reads' buffer, and the bytes land after the large read's."""

    async def main() -> None:
        reader = framing.FrameReader(asyncio.get_running_loop())
        size = framing.LARGE_READ_BYTES + 10
        read = asyncio.ensure_future(reader.readexactly(size))
        await asyncio.sleep(0)
        view = reader.get_buffer()
        assert len(view) == size
        view[:] = b"a" * size
        reader.buffer_updated(size)
        following = reader.get_buffer()  # the large read's reader has not run yet
        assert len(following) > 0
        following[:3] = b"xyz"
        reader.buffer_updated(3)
        assert bytes(await read) == b"a" * size
        assert await reader.readexactly(3) == b"xyz"

    asyncio.run(main())


def test_the_small_reads_buffer_grows_for_what_waits_and_shrinks_once_read():
    async def main() -> None:
        reader = framing.FrameReader(asyncio.get_running_loop())
        waiting = 0
        while waiting < 3 * framing.CHUNK_BYTES:  # the caller reads nothing meanwhile
            view = reader.get_buffer()
            view[:100] = b"w" * 100
            reader.buffer_updated(100)
            waiting += 100
        assert len(reader._buffer) > framing.CHUNK_BYTES
        assert await reader.readexactly(waiting) == b"w" * waiting
        assert len(reader.get_buffer()) == framing.CHUNK_BYTES

    asyncio.run(main())
