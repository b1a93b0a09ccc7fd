"""Raw Kafka requests over a socket, for the package's tests that speak the protocol
themselves (kio's classes in, kio's classes out): framing, headers by the API version's
flexibility, and answers checked against their correlation ids.

Imported by the test modules beside it (``from wire_helpers import ...``: pytest puts
this directory on ``sys.path``).
"""

from __future__ import annotations

import io
import socket
import struct
from collections.abc import Mapping
from typing import Any

from raystream.kafka.codec import build, request_schema, response_schema


def read_exact(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``sock``.

    Raises:
        ConnectionError: the listener closed the connection first.
    """
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the listener closed the connection")
        data += chunk
    return data


def read_frame(sock: socket.socket) -> bytes:
    """One answer: the bytes after its ``int32`` size."""
    size = struct.unpack(">i", read_exact(sock, 4))[0]
    return read_exact(sock, size)


def encode_request(
    api_key: int, version: int, request: Any, correlation_id: int, client_id: str = "test"
) -> bytes:
    """A whole request frame, size first: header v2 for a flexible version, else v1;
    ``request`` a kio entity of that version, or a dict of its fields (built with
    :func:`raystream.kafka.codec.build`)."""
    from kio.schema.request_header.v1.header import RequestHeader as V1
    from kio.schema.request_header.v2.header import RequestHeader as V2
    from kio.serial import entity_writer

    schema = request_schema(api_key, version)
    header_type = V2 if schema.__flexible__ else V1
    buffer = io.BytesIO()
    entity_writer(header_type)(
        buffer,
        header_type(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    body = build(schema, request) if isinstance(request, Mapping) else request
    entity_writer(schema)(buffer, body)
    frame = buffer.getvalue()
    return struct.pack(">i", len(frame)) + frame


def decode_response(api_key: int, version: int, answer: bytes, correlation_id: int) -> Any:
    """The kio entity of an answer frame (without its size), after checking that it
    answers ``correlation_id``."""
    from kio.schema.response_header.v0.header import ResponseHeader as R0
    from kio.schema.response_header.v1.header import ResponseHeader as R1
    from kio.serial import entity_reader

    response = response_schema(api_key, version)
    header, used = entity_reader(R1 if response.__flexible__ else R0)(answer, 0)
    assert header.correlation_id == correlation_id, (header.correlation_id, correlation_id)
    return entity_reader(response)(answer, used)[0]


class KafkaSocket:
    """One connection to the first listener of ``bootstrap`` speaking kio entities.

    ``ask(api_key, version, **fields)`` for one request and its answer;
    :meth:`send` then :meth:`receive` to pipeline; :meth:`raw` for bytes the codec
    would not write. A context manager (closes the socket).
    """

    def __init__(self, bootstrap: str, timeout_s: float = 30.0, client_id: str = "test") -> None:
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.client_id = client_id
        self.correlation = 0

    def send(self, api_key: int, version: int, request: Any) -> int:
        """Write one request (a kio entity or a dict of its fields); its correlation id."""
        self.correlation += 1
        frame = encode_request(api_key, version, request, self.correlation, self.client_id)
        self.sock.sendall(frame)
        return self.correlation

    def receive(self, api_key: int, version: int, correlation_id: int) -> Any:
        """The next answer, decoded; it must answer ``correlation_id``."""
        return decode_response(api_key, version, read_frame(self.sock), correlation_id)

    def call(self, api_key: int, version: int, request: Any) -> Any:
        """One request (a kio entity or a dict of its fields) and its decoded answer."""
        return self.receive(api_key, version, self.send(api_key, version, request))

    def ask(self, api_key: int, version: int, **fields: Any) -> Any:
        """One request built from ``fields`` and its decoded answer."""
        return self.call(api_key, version, fields)

    def raw(self, api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
        """``body`` sent as is after a v1 header (client id "t"); the whole answer frame."""
        header = struct.pack(">hhih", api_key, version, correlation_id, 1) + b"t"
        self.sock.sendall(struct.pack(">i", len(header + body)) + header + body)
        return read_frame(self.sock)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaSocket:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def call(bootstrap: str, api_key: int, version: int, request: Any) -> Any:
    """One request on a fresh connection; its decoded answer."""
    with KafkaSocket(bootstrap) as conn:
        return conn.call(api_key, version, request)


def calls(bootstrap: str, api_key: int, version: int, requests: list[Any]) -> list[Any]:
    """Requests pipelined on one fresh connection (all written before the first answer
    is read); the decoded answers, in order."""
    with KafkaSocket(bootstrap) as conn:
        sent = [conn.send(api_key, version, request) for request in requests]
        return [conn.receive(api_key, version, correlation) for correlation in sent]
