"""The asyncio TCP server of a Kafka-protocol listener.

Each connection is read ahead and answered in order. Kafka's broker serves a
connection one request at a time, but its requests take a fraction of a millisecond;
here a produce or fetch is a call to a replica actor, so a client that pipelines
(librdkafka keeps several produce requests in flight) would wait for each round trip
in turn. So produce, fetch, list-offsets and metadata requests start as they arrive,
up to :data:`MAX_IN_FLIGHT` per connection, their answers written in request order;
produce requests send their batches on in the connection's order (:meth:`Call.turn`),
so pipelining never reorders appends; any other request (group, transaction, admin)
waits for the requests before it and holds back those after it. A request goes:

1. frame: ``int32 size`` then the bytes; a size below the smallest header or above
   :data:`~raystream.kafka.codec.MAX_FRAME_BYTES` closes the connection (it is not
   Kafka's protocol, or it is hostile), as does a connection that ends mid-frame;
2. API and version: one not in :data:`~raystream.kafka.apis.APIS` is answered
   UNSUPPORTED_VERSION (ApiVersions with its own list, in v0, as Kafka does, so that
   a newer client can retry with a version both know) and the connection stays open;
3. decode: bytes that do not parse as that request close the connection (the stream
   can no longer be trusted to be in step), logged with the client's address;
4. handle, then answer: the handler's dict is fitted to the version and written. A
   handler that raises answers the request's top-level error code where the response
   has one (UNKNOWN_SERVER_ERROR for anything not a RaystreamError), else closes the
   connection after logging: the listener itself never goes down with one request;
5. quotas (only while a client quota is set): the request is metered
   (:class:`~raystream.security.quotas.QuotaManager`); an over-quota client's answer
   goes out at once carrying ``throttle_time_ms``, and the connection's next requests
   are not started until that time has passed (KIP-219's muting). From its first
   throttle on, a connection is served one request at a time, as Kafka serves every
   connection, so each request is metered before the next starts (pipelined requests
   would all slip past a throttle still being computed). Nothing is dropped: a
   throttled produce was appended like any other.

Security (issue 20): a TLS listener binds with the :class:`ssl.SSLContext` it is
given; a client certificate, when one was presented and verified, names the
connection's principal (``cert_principal``). A SASL listener gives each connection a
:class:`~raystream.security.sasl.SaslSession`: until it has authenticated only
ApiVersions, SaslHandshake and SaslAuthenticate are served, anything else closes the
connection, as does a failed exchange (after its answer) and, KIP-368, a request
other than those three once the session's lifetime is over. Each connection's
:class:`RequestContext` carries its principal, replaced once it authenticates, so
authorization and quotas downstream see who asks.

Pure asyncio: the listener actor owns the event loop and the Backend.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import ssl
import struct
import time
from collections.abc import Callable
from typing import Any

from raystream import framing
from raystream.dispatch import RequestContext
from raystream.errors import InvalidRequestError, RaystreamError
from raystream.kafka import apis
from raystream.kafka.acl_checks import authorized_handle
from raystream.kafka.call import Backend, Call
from raystream.kafka.codec import (
    API_VERSIONS_KEY,
    MAX_FRAME_BYTES,
    Header,
    build,
    decode_request,
    encode_response,
    peek_header,
    response_schema,
)
from raystream.kafka.fastpath import encode_fast
from raystream.security.quotas import QuotaManager

logger = logging.getLogger(__name__)

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
PIPELINED = frozenset((PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS_KEY))
"""APIs a connection's next request may start beside (Kafka clients pipeline produce
and fetch requests); any other request waits for those before it and holds back those
after it, as Kafka serves a connection one request at a time."""
ORDERED = frozenset((PRODUCE,))
"""APIs whose sends keep the connection's order (see :meth:`Call.turn`)."""
MAX_IN_FLIGHT = 64
"""Requests of one connection read ahead of their answers, at most."""
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
BEFORE_AUTHENTICATION = frozenset((API_VERSIONS_KEY, SASL_HANDSHAKE, SASL_AUTHENTICATE))
"""What a SASL listener serves before the connection has authenticated (Kafka's)."""
RECENT_PRINCIPALS = 64
"""Principals of the latest authenticated connections kept for :meth:`KafkaServer.stats`."""
LISTENER = "kafka"
"""The ``listener`` of the RequestContext of every request that came this way."""
UNKNOWN_SERVER_ERROR = -1
_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")


class KafkaServer:
    """Serves Kafka clients on one address for one :class:`~raystream.kafka.apis.Backend`.

    Args:
        backend: what handlers act through.
        host, port: where to listen (port 0: any free port; see :attr:`port`).
        tls: the TLS context to serve with (None: plaintext).
        sasl: makes each connection's SASL session (None: no SASL).
        cert_principal: the principal of a verified client certificate (DER).
        quotas: the client quotas to enforce (the listener keeps them current).
    """

    def __init__(
        self,
        backend: Backend,
        host: str,
        port: int,
        tls: ssl.SSLContext | None = None,
        sasl: Callable[[], Any] | None = None,
        cert_principal: Callable[[bytes], str] | None = None,
        quotas: QuotaManager | None = None,
    ) -> None:
        self.backend = backend
        self.quotas = quotas if quotas is not None else QuotaManager()
        self.host = host
        self.requested_port = port
        self.port = port
        self.tls = tls
        self.sasl = sasl
        self.cert_principal = cert_principal
        self.connections = 0
        self.requests = 0
        self.closed_bad = 0
        self.auth_failures = 0
        self.principals: collections.deque[str] = collections.deque(maxlen=RECENT_PRINCIPALS)
        self._server: asyncio.Server | None = None
        self._muted: dict[Any, float] = {}  # peer -> monotonic time its mute ends

    async def start(self) -> None:
        """Bind and start accepting; :attr:`port` is the bound port afterwards."""
        self._server = await framing.start_server(
            self._serve, self.host, self.requested_port, reuse_address=True, ssl=self.tls
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop accepting and close the listening socket."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    def stats(self) -> dict[str, Any]:
        """Connections accepted, requests answered, connections closed for bad bytes,
        failed authentications, and the principals of the latest authenticated
        connections (oldest first)."""
        return {
            "connections": self.connections,
            "requests": self.requests,
            "closed_bad": self.closed_bad,
            "auth_failures": self.auth_failures,
            "principals": list(self.principals),
        }

    def _connection_context(self, writer: asyncio.StreamWriter, peer: Any) -> RequestContext:
        """The context a new connection starts with: its principal from its client
        certificate on a TLS listener with client authentication, else anonymous."""
        context = RequestContext(listener=LISTENER, host=_host(peer))
        ssl_object = writer.get_extra_info("ssl_object")
        if ssl_object is not None and self.cert_principal is not None:
            der = ssl_object.getpeercert(binary_form=True)
            if der:
                context = dataclasses.replace(context, principal=self.cert_principal(der))
                if self.sasl is None:
                    self.principals.append(context.principal)
        return context

    async def _serve(self, reader: framing.FrameReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        peer = writer.get_extra_info("peername")
        context = self._connection_context(writer, peer)
        session = self.sasl() if self.sasl is not None else None
        answers: asyncio.Queue = asyncio.Queue(MAX_IN_FLIGHT)
        replies = asyncio.ensure_future(self._reply(answers, writer))
        ordered: asyncio.Future = asyncio.get_running_loop().create_future()
        ordered.set_result(None)
        in_flight: list[asyncio.Future] = []
        try:
            while not replies.done():
                frame = await self._frame(reader, peer)
                if frame is None:
                    break
                api_key = frame_api_key(frame)
                if session is not None and not self._allowed(session, api_key, peer):
                    break
                in_flight = [t for t in in_flight if not t.done()]
                if peer in self._muted:  # throttled once: one request at a time, as Kafka
                    if in_flight:
                        await asyncio.wait(in_flight)
                    await self._unmuted(peer)
                if api_key not in PIPELINED and in_flight:  # a barrier: alone, in turn
                    await asyncio.wait(in_flight)
                dispatched = asyncio.get_running_loop().create_future()
                after = ordered if api_key in ORDERED else None
                task = asyncio.ensure_future(
                    self._answer(frame, context, peer, after, dispatched, session)
                )
                if api_key in ORDERED:
                    ordered = dispatched
                in_flight.append(task)
                if api_key not in PIPELINED:
                    await asyncio.wait([task])
                await answers.put(task)
                if session is not None and api_key == SASL_AUTHENTICATE:
                    if session.failed:  # answered with the error, then closed
                        self.auth_failures += 1
                        break
                    if session.authenticated and context.principal != session.principal:
                        context = dataclasses.replace(context, principal=session.principal)
                        self.principals.append(session.principal)
        except ConnectionError:
            pass
        finally:
            await answers.put(None)
            with contextlib.suppress(Exception):
                await replies
            for task in in_flight:
                task.cancel()
            self._muted.pop(peer, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _allowed(self, session: Any, api_key: int, peer: Any) -> bool:
        """Whether a SASL connection may send ``api_key`` now (see the module doc)."""
        if api_key in BEFORE_AUTHENTICATION:
            return True
        if not session.authenticated:
            self._bad(peer, f"API key {api_key} before SASL authentication")
            return False
        if session.expired():
            logger.info("Kafka listener: %s's SASL session expired; closing", peer)
            return False
        return True

    async def _frame(self, reader: framing.FrameReader, peer: Any) -> bytes | memoryview | None:
        """The next request frame; None at the connection's end or a bad size."""
        try:
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            if size < 8 or size > MAX_FRAME_BYTES:
                self._bad(peer, f"a frame size of {size} bytes")
                return None
            return await reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None

    async def _reply(self, answers: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
        """Write the answers in the order their requests came; stop at a request that
        closes the connection (or the end of the queue)."""
        while (task := await answers.get()) is not None:
            answer = await task
            if answer is False:
                writer.close()
                return
            if answer is not None:
                writer.write(answer)
                await writer.drain()
            self.requests += 1

    async def _answer(
        self,
        frame: bytes | memoryview,
        context: RequestContext,
        peer: Any,
        after: asyncio.Future | None,
        dispatched: asyncio.Future,
        session: Any = None,
    ) -> bytes | bool | None:
        """The response frame for one request frame; None: no answer (acks=0); False:
        close the connection."""
        try:
            return await self._handle(frame, context, peer, after, dispatched, session)
        finally:
            if not dispatched.done():
                dispatched.set_result(None)

    async def _handle(
        self,
        frame: bytes | memoryview,
        context: RequestContext,
        peer: Any,
        after: asyncio.Future | None,
        dispatched: asyncio.Future,
        session: Any,
    ) -> bytes | bool | None:
        api_key, version, correlation_id = peek_header(frame)
        api = apis.APIS.get(api_key)
        if api is None or not api.supports(version):
            return _unsupported(api_key, version, correlation_id)
        try:
            header, request = decode_request(frame)
        except InvalidRequestError as error:
            self._bad(peer, str(error))
            return False
        call = Call(header, context, self.backend, after, dispatched, session)
        if api_key not in ORDERED:
            call.release()
        started = time.monotonic()
        try:
            values = await authorized_handle(api_key, api.handler, call, request)
        except Exception as error:
            return self._failed(header, api, error, peer)
        if self.quotas.active:
            return self._metered(header, values, context, peer, len(frame), started)
        if values is None:
            return None
        return _encode(header, values)

    def _metered(
        self,
        header: Header,
        values: Any,
        context: RequestContext,
        peer: Any,
        request_bytes: int,
        started: float,
    ) -> bytes | None:
        """The answer of a request metered against the client's quotas: with the
        throttle time in it when over quota, and the connection muted for that long."""
        quotas = self.quotas
        client_id = header.client_id or ""
        throttle = quotas.on_request(
            header.api_key, context.principal, client_id, request_bytes, time.monotonic() - started
        )
        answer = None
        if values is not None:
            answer = _encode(header, values)
            if header.api_key == FETCH:
                fetched = quotas.on_fetch_response(context.principal, client_id, len(answer))
                throttle = max(throttle, fetched)
            if throttle > 0:
                answer = _encode(header, {**values, "throttle_time": throttle})
        if throttle > 0:
            until = time.monotonic() + throttle / 1000
            self._muted[peer] = max(self._muted.get(peer, 0.0), until)
        return answer

    async def _unmuted(self, peer: Any) -> None:
        """Wait out the connection's mute (KIP-219: its answer already went out)."""
        delay = self._muted.get(peer, 0.0) - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    def _failed(self, header: Header, api: apis.Api, error: Exception, peer: Any) -> bytes | bool:
        """Answer a request whose handler raised with its top-level error code, or
        close the connection when the response has no such field."""
        schema = response_schema(header.api_key, header.api_version)
        if isinstance(error, RaystreamError):
            code = error.code
        else:
            code = UNKNOWN_SERVER_ERROR
            logger.exception("Kafka %s v%d from %s failed", api.name, header.api_version, peer)
        if "error_code" not in {f.name for f in dataclasses.fields(schema)}:
            logger.warning(
                "Kafka %s v%d from %s failed (%s); closing the connection",
                api.name,
                header.api_version,
                peer,
                error,
            )
            return False
        values: dict[str, Any] = {"error_code": code, "error_message": str(error)}
        return encode_response(header, build(schema, values))

    def _bad(self, peer: Any, what: str) -> None:
        self.closed_bad += 1
        logger.warning("Kafka listener: closed the connection from %s: %s", peer, what)


def _encode(header: Header, values: Any) -> bytes:
    """The answer frame of a handler's values: Produce and Fetch in their common shape
    written directly (:mod:`raystream.kafka.fastpath`, the measured hot path), every
    other answer built and written by kio."""
    fast = encode_fast(header, values)
    if fast is not None:
        return fast
    schema = response_schema(header.api_key, header.api_version)
    return encode_response(header, build(schema, values))


def _host(peer: Any) -> str:
    """The client's IP address from a socket's peer name (``*`` when unknown)."""
    return str(peer[0]) if isinstance(peer, tuple) and peer else "*"


def frame_api_key(frame: bytes | memoryview) -> int:
    """The API key of a request frame (at least 8 bytes long)."""
    return _API_KEY.unpack_from(frame, 0)[0]


def _unsupported(api_key: int, version: int, correlation_id: int) -> bytes | bool:
    """UNSUPPORTED_VERSION for an API or version not served.

    ApiVersions is answered in v0 with the supported list (KIP-511: a client that sent
    a newer version than the broker knows retries with one from the list). Another
    API is answered in the version asked when kio knows it and the response has a
    top-level error code; otherwise there is no way to answer in the client's terms
    and the connection is closed.
    """
    header = Header(api_key, version, correlation_id, None)
    if api_key == API_VERSIONS_KEY:
        header = Header(api_key, 0, correlation_id, None)
        values = {"error_code": apis.UNSUPPORTED_VERSION, "api_keys": apis.supported_api_keys()}
        return encode_response(header, build(response_schema(API_VERSIONS_KEY, 0), values))
    try:
        schema = response_schema(api_key, version)
    except Exception:
        return False
    if "error_code" not in {f.name for f in dataclasses.fields(schema)}:
        return False
    return encode_response(header, build(schema, {"error_code": apis.UNSUPPORTED_VERSION}))
