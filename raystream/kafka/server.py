"""The asyncio TCP server of a Kafka-protocol listener.

Each connection is served as Kafka's broker serves one: requests are read in order and
answered in order, one at a time (Kafka mutes a connection while its request is in
flight; clients open more connections, or pipeline and wait). A request goes:

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
   connection after logging: the listener itself never goes down with one request.

Pure asyncio: the listener actor owns the event loop and the Backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import struct
from typing import Any

from raystream.dispatch import RequestContext
from raystream.errors import InvalidRequestError, RaystreamError
from raystream.kafka import apis
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

logger = logging.getLogger(__name__)

LISTENER = "kafka"
"""The ``listener`` of the RequestContext of every request that came this way."""
UNKNOWN_SERVER_ERROR = -1
_SIZE = struct.Struct(">i")


class KafkaServer:
    """Serves Kafka clients on one address for one :class:`~raystream.kafka.apis.Backend`.

    Args:
        backend: what handlers act through.
        host, port: where to listen (port 0: any free port; see :attr:`port`).
    """

    def __init__(self, backend: Backend, host: str, port: int) -> None:
        self.backend = backend
        self.host = host
        self.requested_port = port
        self.port = port
        self.connections = 0
        self.requests = 0
        self.closed_bad = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Bind and start accepting; :attr:`port` is the bound port afterwards."""
        self._server = await asyncio.start_server(
            self._serve, self.host, self.requested_port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop accepting and close the listening socket."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    def stats(self) -> dict[str, int]:
        """Connections accepted, requests answered, connections closed for bad bytes."""
        return {
            "connections": self.connections,
            "requests": self.requests,
            "closed_bad": self.closed_bad,
        }

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        peer = writer.get_extra_info("peername")
        context = RequestContext(listener=LISTENER)
        try:
            while True:
                try:
                    size_bytes = await reader.readexactly(4)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                (size,) = _SIZE.unpack(size_bytes)
                if size < 8 or size > MAX_FRAME_BYTES:
                    self._bad(peer, f"a frame size of {size} bytes")
                    return
                try:
                    frame = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                answer = await self._answer(frame, context, peer)
                if answer is False:
                    return
                if answer is not None:
                    writer.write(answer)
                    await writer.drain()
                self.requests += 1
        except ConnectionError:
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(
        self, frame: bytes, context: RequestContext, peer: Any
    ) -> bytes | bool | None:
        """The response frame for one request frame; None: no answer (acks=0); False:
        close the connection."""
        api_key, version, correlation_id = peek_header(frame)
        api = apis.APIS.get(api_key)
        if api is None or not api.supports(version):
            return _unsupported(api_key, version, correlation_id)
        try:
            header, request = decode_request(frame)
        except InvalidRequestError as error:
            self._bad(peer, str(error))
            return False
        call = Call(header, context, self.backend)
        try:
            values = await api.handler(call, request)
        except Exception as error:
            return self._failed(header, api, error, peer)
        if values is None:
            return None
        return encode_response(header, build(response_schema(api_key, version), values))

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
