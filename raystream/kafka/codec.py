"""Kafka's wire framing, request headers and message bodies, through ``kio``.

Why kio: it is generated from the JSON message schemas in Kafka's own source tree, one
frozen dataclass per API version (flexible versions' tagged fields included), with a
native (Rust) reader and a writer. Hand-written encoders of thirty-odd APIs across
their versions are where wire bugs live; kafka-python's protocol module stops at older
versions and has no flexible-version support for several APIs we need.

A frame is ``int32 size`` then the header and the body. Request headers are v1
(``api_key, api_version, correlation_id, client_id``) for non-flexible versions and v2
(v1 plus tagged fields) for flexible ones; responses answer with header v0
(``correlation_id``) or v1 (plus tagged fields), except ApiVersions, whose response
header is always v0 so that a client can read it before the versions are agreed.

:func:`build` makes handlers version-agnostic: a handler describes its answer once, as
nested dicts with the newest version's field names, and :func:`build` fills the
response class of the version the client asked for, dropping fields that version does
not have and giving the zero value to fields the handler did not name. Pure: no Ray.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import types
import typing
import uuid
from collections.abc import Mapping
from functools import cache
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from raystream.errors import InvalidRequestError

API_VERSIONS_KEY = 18
MAX_FRAME_BYTES = 100 << 20
"""Largest request frame accepted (Kafka's ``socket.request.max.bytes``, 100 MiB)."""

_SIZE = struct.Struct(">i")
_KEY_VERSION_CORRELATION = struct.Struct(">hhi")


@dataclasses.dataclass(frozen=True, slots=True)
class Header:
    """A request's header: which API and version, the id to answer with, who asks."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame without its size
    prefix: the first eight bytes of every header version, readable before the version
    is known to be supported (to answer UNSUPPORTED_VERSION with the right id).

    Raises:
        InvalidRequestError: the frame is shorter than that.
    """
    if len(frame) < _KEY_VERSION_CORRELATION.size:
        raise InvalidRequestError(f"a request frame of {len(frame)} bytes has no header")
    return _KEY_VERSION_CORRELATION.unpack_from(frame, 0)


def decode_request(frame: bytes | memoryview) -> tuple[Header, Any]:
    """The header and the body of a request frame (without its size prefix).

    Raises:
        InvalidRequestError: unknown API key or version, or bytes that do not parse as
            that request (truncated, bad lengths).
    """
    api_key, version, _ = peek_header(frame)
    schema = request_schema(api_key, version)
    header_type = RequestHeaderV2 if schema.__flexible__ else RequestHeaderV1
    try:
        header, used = entity_reader(header_type)(frame, 0)
        body, _ = entity_reader(schema)(frame, used)
    except Exception as error:  # kio raises several types for malformed bytes
        raise InvalidRequestError(
            f"malformed {schema.__name__} v{version}: {type(error).__name__}: {error}"
        ) from None
    # Bytes after the body are ignored, as Kafka's broker ignores them: librdkafka
    # sends three after some Metadata requests.
    return Header(api_key, version, header.correlation_id, header.client_id), body


@cache
def request_schema(api_key: int, version: int) -> Any:
    """kio's request class for an API key and version.

    Raises:
        InvalidRequestError: kio (so Kafka) has no such API or version.
    """
    try:
        return load_request_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        raise InvalidRequestError(f"no Kafka API {api_key} v{version}") from None


@cache
def response_schema(api_key: int, version: int) -> Any:
    """kio's response class for an API key and version."""
    return load_response_schema(api_key, version)


def encode_response(header: Header, response: Any) -> bytes:
    """The whole response frame (size prefix included) for ``header``'s request."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    if response.__flexible__ and header.api_key != API_VERSIONS_KEY:
        entity_writer(ResponseHeaderV1)(
            buffer, ResponseHeaderV1(correlation_id=header.correlation_id)
        )
    else:
        entity_writer(ResponseHeaderV0)(
            buffer, ResponseHeaderV0(correlation_id=header.correlation_id)
        )
    entity_writer(type(response))(buffer, response)
    frame = buffer.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def build(entity: type, values: Mapping[str, Any]) -> Any:
    """An instance of the kio class ``entity`` from ``values`` (nested dicts/lists).

    Fields the class lacks are dropped (a field added in a later version); fields not
    in ``values`` get their schema default, or the zero value of their type when the
    schema has none. Values are converted where kio wants a richer type than a plain
    value: error codes (int -> ErrorCode), durations (milliseconds -> timedelta), UUIDs
    (str -> UUID), nested entities (dict -> the version's class).
    """
    kwargs = {}
    for name, convert, zero in _plan(entity):
        if name in values:
            kwargs[name] = convert(values[name])
        elif zero is not dataclasses.MISSING:
            kwargs[name] = zero
    return entity(**kwargs)


@cache
def _plan(entity: type) -> tuple[tuple[str, Any, Any], ...]:
    """For each field of ``entity``: its name, the converter of a given value, and the
    value used when none is given (MISSING when the schema's own default applies)."""
    plan = []
    for f in dataclasses.fields(entity):
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        convert, zero = _converter(f.type)
        plan.append((f.name, convert, dataclasses.MISSING if has_default else zero))
    return tuple(plan)


def _identity(value: Any) -> Any:
    return value


def _converter(hint: Any) -> tuple[Any, Any]:
    """(converter, zero value) for a field's type hint."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        inner, _ = _converter(args[0])
        return (lambda v: None if v is None else inner(v)), None
    if origin is tuple:
        item = typing.get_args(hint)[0]
        inner, _ = _converter(item)
        return (lambda v: tuple(inner(x) for x in v)), ()
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint):
            return (lambda v: v if isinstance(v, hint) else build(hint, v)), None
        if issubclass(hint, ErrorCode):
            return (lambda v: v if isinstance(v, ErrorCode) else ErrorCode(int(v))), ErrorCode.none
        if issubclass(hint, datetime.timedelta):
            return _milliseconds, datetime.timedelta(0)
        if issubclass(hint, datetime.datetime):
            return _timestamp, datetime.datetime.fromtimestamp(0, datetime.UTC)
        if issubclass(hint, uuid.UUID):
            return (lambda v: v if isinstance(v, uuid.UUID) else uuid.UUID(str(v))), uuid.UUID(
                int=0
            )
        if issubclass(hint, bool):
            return _identity, False
        if issubclass(hint, int):
            return _identity, 0
        if issubclass(hint, float):
            return _identity, 0.0
        if issubclass(hint, str):
            return _identity, ""
        if issubclass(hint, bytes):
            return _identity, b""
    return _identity, None


def _milliseconds(value: Any) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=int(value))


def _timestamp(value: Any) -> datetime.datetime:
    if isinstance(value, datetime.datetime):
        return value
    return datetime.datetime.fromtimestamp(int(value) / 1000, datetime.UTC)
