"""Serdes for state stores: an order-preserving key encoding and pickled values.

State stores keep bytes. Keys are encoded so that **byte order is the key's natural
order within a type**, which turns ``range(lo, hi)``, window fetches and session lookups
into byte-range scans of a sorted engine (as Kafka Streams' window key schema
``[key][timestamp]`` does). Values are opaque: pickled (protocol 5) unless the caller
gives a :class:`Serde` of its own.

The key encoding is a tagged, self-delimiting format (after FoundationDB's tuple layer):
a decoder knows where each encoding ends, so tuples compare element by element, and
stores append fixed-width suffixes (a window start) that split off by length::

    None          01
    False, True   02 00 | 02 01
    int  n >= 0   03 01 <len> <big-endian magnitude>         (len 0..254, or ff <8-byte len>)
    int  n < 0    03 00 <~len> <~big-endian magnitude>       (bitwise complement: larger
                                                              magnitude sorts first)
    float         04 <8 bytes IEEE-754, sign bit flipped; all bits flipped when negative>
    str           05 <utf-8, 00 escaped as 00 ff> 00
    bytes         06 <bytes, 00 escaped as 00 ff> 00
    tuple         07 <encoded elements> 00
    Windowed      08 <encoded key> <encoded int start> <encoded int end>

Types sort by tag (None < bool < int < float < str < bytes < tuple < Windowed), so keys
of mixed types have a stable total order, but only within a type is it the natural one:
``1``, ``1.0`` and ``True`` are equal in Python yet distinct store keys. ``-0.0`` is
stored as ``0.0`` (they are equal, so they must be one key); NaN round-trips bit for
bit and sorts after +inf (or before -inf when its sign bit is set).

Worked example: ``encode_key(("a", -1))`` is ``07 05 61 00 03 00 fe fe 00``; ``("a", 0)``
is ``07 05 61 00 03 01 00 00`` and sorts after it, as ``-1 < 0``.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raystream.errors import InvalidRequestError
from raystream.streams.windowed import Windowed

__all__ = [
    "BYTES",
    "KEY",
    "PICKLE",
    "Serde",
    "decode_key",
    "decode_timestamp",
    "encode_key",
    "encode_timestamp",
]

_NONE, _BOOL, _INT, _FLOAT, _STR, _BYTES, _TUPLE, _WINDOWED = range(1, 9)
_END = 0x00
_ESCAPE = b"\x00\xff"
_SIGN_64 = 1 << 63
_MASK_64 = (1 << 64) - 1
_U64 = struct.Struct(">Q")
_F64 = struct.Struct(">d")


@dataclass(frozen=True)
class Serde:
    """A pair of callables turning objects into bytes and back.

    Attributes:
        serialize: Object -> bytes. Must be deterministic for keys (equal keys, equal
            bytes), or a store will hold one logical key under several byte keys.
        deserialize: Bytes -> object, the inverse of ``serialize``.
    """

    serialize: Callable[[Any], bytes]
    deserialize: Callable[[bytes], Any]

    def __post_init__(self) -> None:
        if not callable(self.serialize) or not callable(self.deserialize):
            raise InvalidRequestError(
                "Serde needs two callables (serialize, deserialize), got "
                f"{type(self.serialize).__name__} and {type(self.deserialize).__name__}"
            )


def encode_timestamp(ms: int) -> bytes:
    """Encode a signed 64-bit millisecond timestamp as 8 bytes in numeric order."""
    if not -_SIGN_64 <= ms < _SIGN_64:
        raise InvalidRequestError(f"timestamp {ms!r} does not fit in a signed 64-bit integer")
    return _U64.pack((ms + _SIGN_64) & _MASK_64)


def decode_timestamp(data: bytes, offset: int = 0) -> int:
    """Decode the 8-byte timestamp at ``offset`` written by :func:`encode_timestamp`."""
    return _U64.unpack_from(data, offset)[0] - _SIGN_64


def encode_key(key: Any) -> bytes:
    """Encode ``key`` so that byte order is natural order within a type.

    Raises:
        InvalidRequestError: ``key`` (or an element of it) is not None, bool, int, float,
            str, bytes, a tuple of these, or a Windowed of these.
    """
    out = bytearray()
    _encode(key, out)
    return bytes(out)


def decode_key(data: bytes) -> Any:
    """Decode bytes written by :func:`encode_key`.

    Raises:
        InvalidRequestError: ``data`` is not a complete encoding of one key.
    """
    try:
        key, end = _decode(data, 0)
    except (IndexError, ValueError, struct.error) as e:
        raise InvalidRequestError(f"not an encoded key: {bytes(data)!r} ({e})") from e
    if end != len(data):
        raise InvalidRequestError(f"trailing bytes after an encoded key: {bytes(data)!r}")
    return key


def _encode(key: Any, out: bytearray) -> None:
    # bool before int: bool is a subclass of int.
    if key is None:
        out.append(_NONE)
    elif key is True or key is False:
        out += bytes((_BOOL, 1 if key else 0))
    elif isinstance(key, int):
        out.append(_INT)
        if key >= 0:
            magnitude = key.to_bytes((key.bit_length() + 7) // 8, "big")
            out.append(1)
            out += _length(len(magnitude))
            out += magnitude
        else:
            magnitude = (-key).to_bytes(((-key).bit_length() + 7) // 8, "big")
            out.append(0)
            out += _invert(_length(len(magnitude)))
            out += _invert(magnitude)
    elif isinstance(key, float):
        bits = _U64.unpack(_F64.pack(key + 0.0))[0]  # + 0.0 turns -0.0 into 0.0
        bits = bits ^ _MASK_64 if bits & _SIGN_64 else bits | _SIGN_64
        out.append(_FLOAT)
        out += _U64.pack(bits)
    elif isinstance(key, str):
        out.append(_STR)
        out += key.encode("utf-8").replace(b"\x00", _ESCAPE)
        out.append(_END)
    elif isinstance(key, (bytes, bytearray, memoryview)):
        out.append(_BYTES)
        out += bytes(key).replace(b"\x00", _ESCAPE)
        out.append(_END)
    elif isinstance(key, tuple):
        out.append(_TUPLE)
        for element in key:
            _encode(element, out)
        out.append(_END)
    elif isinstance(key, Windowed):
        out.append(_WINDOWED)
        _encode(key.key, out)
        _encode(int(key.start_ms), out)
        _encode(int(key.end_ms), out)
    else:
        raise InvalidRequestError(
            f"cannot encode a key of type {type(key).__name__}: keys must be None, bool, "
            "int, float, str, bytes, or tuples/Windowed of these (or give a key Serde)"
        )


def _length(n: int) -> bytes:
    return bytes((n,)) if n < 0xFF else b"\xff" + _U64.pack(n)


def _invert(data: bytes) -> bytes:
    return bytes(b ^ 0xFF for b in data)


def _decode(data: bytes, pos: int) -> tuple[Any, int]:
    tag = data[pos]
    pos += 1
    if tag == _NONE:
        return None, pos
    if tag == _BOOL:
        return data[pos] == 1, pos + 1
    if tag == _INT:
        negative = data[pos] == 0
        pos += 1
        first = data[pos] ^ 0xFF if negative else data[pos]
        if first == 0xFF:
            raw = data[pos + 1 : pos + 9]
            n = _U64.unpack(_invert(raw) if negative else raw)[0]
            pos += 9
        else:
            n = first
            pos += 1
        raw = data[pos : pos + n]
        if len(raw) != n:
            raise IndexError("truncated int")
        magnitude = int.from_bytes(_invert(raw) if negative else raw, "big")
        return (-magnitude if negative else magnitude), pos + n
    if tag == _FLOAT:
        bits = _U64.unpack_from(data, pos)[0]
        bits = bits ^ _SIGN_64 if bits & _SIGN_64 else bits ^ _MASK_64
        return _F64.unpack(_U64.pack(bits))[0], pos + 8
    if tag in (_STR, _BYTES):
        raw, pos = _unescape(data, pos)
        return (raw.decode("utf-8") if tag == _STR else raw), pos
    if tag == _TUPLE:
        elements = []
        while data[pos] != _END:
            element, pos = _decode(data, pos)
            elements.append(element)
        return tuple(elements), pos + 1
    if tag == _WINDOWED:
        key, pos = _decode(data, pos)
        start_ms, pos = _decode(data, pos)
        end_ms, pos = _decode(data, pos)
        return Windowed(key, start_ms, end_ms), pos
    raise IndexError(f"unknown type tag {tag}")


def _unescape(data: bytes, pos: int) -> tuple[bytes, int]:
    out = bytearray()
    while True:
        end = data.index(b"\x00", pos)
        out += data[pos:end]
        if end + 1 < len(data) and data[end + 1] == 0xFF:
            out.append(0)
            pos = end + 2
        else:
            return bytes(out), end + 1


def _pickle(value: Any) -> bytes:
    return pickle.dumps(value, protocol=5)


KEY = Serde(encode_key, decode_key)
"""The default key serde: the order-preserving encoding above."""

PICKLE = Serde(_pickle, pickle.loads)
"""The default value serde: pickle protocol 5 (any picklable value)."""

BYTES = Serde(bytes, bytes)
"""Bytes as they are, for keys or values that already are bytes."""
