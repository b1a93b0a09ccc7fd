"""Choosing the partition a produced record goes to, exactly as Kafka does.

Keyed records go to ``to_positive(murmur2(key)) % num_partitions``: the same partition the
Java client (``Utils.murmur2`` + ``BuiltInPartitioner.partitionForKey``), librdkafka's
``murmur2_random`` partitioner and kafka-python's ``DefaultPartitioner`` choose, so a
topic shared with Kafka tooling keeps every key on the partition those clients expect.

Keyless records use sticky partitioning (KIP-480): they all go to one partition until the
producer's accumulator reports, through :meth:`DefaultPartitioner.on_new_batch`, that the
batch for that partition is full or sent; the next keyless record then sticks to another
partition chosen at random. Batches fill up instead of being spread thin across every
partition, which is what makes keyless produce cheap.

A custom partitioner is any callable with kafka-python's signature
``(key_bytes, all_partitions, available_partitions) -> partition`` (see
:class:`Partitioner`); :func:`resolve_partitioner` wraps it into what the producer drives.

For bulk produce of Arrow tables, :func:`partitions_for_keys` hashes a whole key column with
numpy, bit-for-bit equal to :func:`partition_for_key` row by row.

This module is pure logic: no Ray, no I/O.
"""

from __future__ import annotations

import random
import struct
import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

__all__ = [
    "CustomPartitioner",
    "DefaultPartitioner",
    "Partitioner",
    "murmur2",
    "murmur2_array",
    "partition_for_key",
    "partitions_for_keys",
    "resolve_partitioner",
    "to_positive",
]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF

_U32_M = np.uint32(_M)
_NO_BYTES = np.empty(0, dtype=np.uint8)
# Indexed by the tail length: the final "h *= m" of the tail happens only if there is one.
_TAIL_MULTIPLIER = np.array([1, _M, _M, _M], dtype=np.uint32)


# --------------------------------------------------------------------------------------
# Scalar hash
# --------------------------------------------------------------------------------------


def _check_key(key: object) -> bytes:
    """Returns ``key`` as ``bytes``; raises TypeError for anything not bytes-like."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    raise TypeError(
        f"key must be bytes (or bytearray/memoryview), got {type(key).__name__}; "
        "serialize keys before partitioning"
    )


def _check_num_partitions(num_partitions: object) -> int:
    """Validates a partition count: an int >= 1."""
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, (int, np.integer)):
        raise TypeError(f"num_partitions must be an int, got {type(num_partitions).__name__}")
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return int(num_partitions)


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit MurmurHash2 of ``data``, as the signed int Java returns.

    A faithful transcription of ``org.apache.kafka.common.utils.Utils.murmur2``: seed
    ``0x9747b28c``, ``m = 0x5bd1e995``, ``r = 24``, ``h = seed ^ len``; each 4-byte
    little-endian word ``k`` is mixed (``k *= m; k ^= k >>> r; k *= m; h *= m; h ^= k``);
    the 1-3 tail bytes are XORed in (``<< 16``, ``<< 8``, ``<< 0``, falling through) then
    ``h *= m``; finally ``h ^= h >>> 13; h *= m; h ^= h >>> 15``. All arithmetic wraps at
    32 bits. It must match Java bit for bit, because the partition of a keyed record is
    derived from it and every Kafka client agrees on that partition.

    Worked example, ``murmur2(b"21")`` (length 2: no full word, a 2-byte tail)::

        h = 0x9747b28c ^ 2                          = 0x9747b28e
        tail: h ^= data[1] << 8   (ord("1") = 0x31) = 0x9747838e
              h ^= data[0]        (ord("2") = 0x32) = 0x974783bc
              h *= m   (mod 2**32)                  = 0x8401c86c
        h ^= h >>> 13                               = 0x8405e862
        h *= m   (mod 2**32)                        = 0xc5f3730a
        h ^= h >>> 15                               = 0xc5f2f8ec -> signed -973932308

    which is the value in Kafka's ``UtilsTest.testMurmur2``.

    Args:
        data: the serialized key (bytes, bytearray or memoryview).

    Returns:
        The hash as a signed 32-bit integer in ``[-2**31, 2**31)``, like Java's ``int``.

    Raises:
        TypeError: ``data`` is not bytes-like (for example a ``str``).
    """
    data = _check_key(data)
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    nwords = length >> 2
    m = _M
    for k in struct.unpack_from(f"<{nwords}I", data):
        k = (k * m) & _MASK32
        k ^= k >> _R
        k = (k * m) & _MASK32
        h = ((h * m) & _MASK32) ^ k
    tail = nwords << 2
    rem = length & 3
    if rem:
        if rem == 3:
            h ^= data[tail + 2] << 16
        if rem >= 2:
            h ^= data[tail + 1] << 8
        h ^= data[tail]
        h = (h * m) & _MASK32
    h ^= h >> 13
    h = (h * m) & _MASK32
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clears the sign bit (``n & 0x7fffffff``).

    Not ``abs()``: ``abs(-2**31)`` would overflow in Java, and the mapping must be the
    one every Kafka client uses.
    """
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka assigns to a record with key ``key``.

    ``to_positive(murmur2(key)) % num_partitions``, as Java's
    ``BuiltInPartitioner.partitionForKey``. An empty key ``b""`` is a real key (it hashes
    to 275646681); only ``None`` means "no key", and that is the caller's sticky path.

    Args:
        key: the serialized key.
        num_partitions: how many partitions the topic has (all of them, available or not,
            so a key never moves while a leader is down).

    Returns:
        A partition number in ``[0, num_partitions)``.

    Raises:
        TypeError: ``key`` is not bytes-like, or ``num_partitions`` is not an int.
        ValueError: ``num_partitions`` < 1.
    """
    n = _check_num_partitions(num_partitions)
    return to_positive(murmur2(key)) % n


# --------------------------------------------------------------------------------------
# Vectorized hash over Arrow arrays
# --------------------------------------------------------------------------------------


def _as_offsets_array(arr: pa.Array) -> pa.Array:
    """Normalizes a key array to one with (validity, offsets, data) buffers."""
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    ):
        return arr
    if pa.types.is_binary_view(t) or pa.types.is_string_view(t):
        return arr.cast(pa.large_binary())
    if pa.types.is_fixed_size_binary(t):
        return arr.cast(pa.large_binary())
    raise TypeError(
        "keys must be a pyarrow binary, large_binary, string or large_string array "
        f"(or a view/fixed-size/dictionary form of one), got {t}"
    )


def _murmur2_chunk(arr: pa.Array, row_base: int) -> np.ndarray:
    """Unsigned murmur2 of every row of one Arrow chunk, as uint32."""
    arr = _as_offsets_array(arr)
    n = len(arr)
    if arr.null_count:
        nulls = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))
        raise ValueError(
            f"keys has a null at row {row_base + int(nulls[0])} "
            f"({len(nulls)} null(s) in all); null keys are keyless records that take the "
            "sticky path, so send them separately instead of hashing them"
        )
    if n == 0:
        return np.empty(0, dtype=np.uint32)

    _, offsets_buf, data_buf = arr.buffers()
    large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
    offsets = np.frombuffer(
        offsets_buf, dtype=np.int64 if large else np.int32, count=arr.offset + n + 1
    )[arr.offset :]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else _NO_BYTES
    # Arrow stores the values back to back: key i is data[offsets[i]:offsets[i + 1]].
    s0 = int(offsets[0])
    width, spare = divmod(int(offsets[-1]) - s0, n)
    if spare == 0 and not np.any(np.diff(offsets) != width):
        h = _hash_fixed_width(data, s0, width, n)
    else:
        h = _hash_variable_width(data, offsets, n)
    # Finalization: h ^= h >>> 13; h *= m; h ^= h >>> 15.
    tmp = h >> np.uint32(13)
    h ^= tmp
    h *= _U32_M
    np.right_shift(h, np.uint32(15), out=tmp)
    h ^= tmp
    return h


def _mix(h: np.ndarray, k: np.ndarray, tmp: np.ndarray) -> None:
    """One step of murmur2's word loop for many keys at once, in place.

    ``k *= m; k ^= k >>> r; k *= m; h *= m; h ^= k`` on uint32 arrays of equal length,
    wrapping like Java's ``int``; ``k`` is clobbered and ``tmp`` is scratch.
    """
    np.multiply(k, _U32_M, out=k)
    np.right_shift(k, _R, out=tmp)
    np.bitwise_xor(k, tmp, out=k)
    np.multiply(k, _U32_M, out=k)
    np.multiply(h, _U32_M, out=h)
    np.bitwise_xor(h, k, out=h)


def _hash_fixed_width(data: np.ndarray, s0: int, width: int, n: int) -> np.ndarray:
    """murmur2 before finalization of ``n`` keys of ``width`` bytes each, from byte ``s0``.

    The common bulk case (ids, UUIDs, fixed-size binary). Word ``j`` of every key is the
    ``<u4`` at ``s0 + 4j + i * width``: a strided view of the data, read with no gather;
    the tail bytes likewise.
    """
    h = np.full(n, (_SEED ^ width) & _MASK32, dtype=np.uint32)
    k = np.empty(n, dtype=np.uint32)
    tmp = np.empty(n, dtype=np.uint32)
    nwords, rem = divmod(width, 4)
    for j in range(nwords):
        word_j = np.ndarray((n,), dtype="<u4", buffer=data, offset=s0 + 4 * j, strides=(width,))
        np.copyto(k, word_j)
        _mix(h, k, tmp)
    if rem:
        for i in range(rem):
            byte_i = np.ndarray(
                (n,), dtype=np.uint8, buffer=data, offset=s0 + 4 * nwords + i, strides=(width,)
            )
            np.copyto(k, byte_i)
            k <<= np.uint32(8 * i)
            h ^= k
        h *= _U32_M
    return h


def _hash_variable_width(data: np.ndarray, offsets: np.ndarray, n: int) -> np.ndarray:
    """murmur2 before finalization of keys of any lengths, all in lock-step.

    Keys advance together over the word index ``j``; word ``j`` of the key starting at
    byte ``s`` is the ``<u4`` at ``s + 4j``. Its alignment ``s % 4`` is the same for every
    ``j``, so viewing ``data`` from byte ``c`` as ``<u4`` lets one gather read word ``j``
    of all keys of alignment class ``c``. Keys are ordered by (class, word count
    descending): each class is then a contiguous block and, inside it, the keys that
    still have a word ``j`` are a prefix, so there are no masks, only shrinking slices.
    """
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    h = lengths.astype(np.uint32)
    h ^= np.uint32(_SEED)
    nwords = lengths >> 2
    max_words = int(nwords.max())

    if max_words:
        span = max_words + 1
        align = starts & 3
        # counts[c, w]: keys of alignment class c with w words.
        counts = np.bincount(align * span + nwords, minlength=4 * span).reshape(4, span)
        # at_least[c, w]: keys of class c with >= w words; ">= j + 1" is "still has word j".
        at_least = counts[:, ::-1].cumsum(axis=1)[:, ::-1]
        bounds = np.concatenate([[0], np.cumsum(counts.sum(axis=1))])
        sort_key = align * span
        sort_key += max_words - nwords
        if 4 * span <= 1 << 16:
            order = np.argsort(sort_key.astype(np.uint16), kind="stable")  # radix sort
        else:
            order = np.argsort(sort_key)
        del sort_key, align
        s_starts = starts[order]
        s_h = h[order]
        tmp = np.empty(n, dtype=np.uint32)
        for c in range(4):
            lo = int(bounds[c])
            if at_least[c, 1] == 0:
                continue
            view = data[c : c + ((len(data) - c) >> 2 << 2)].view("<u4")
            widx = s_starts[lo : lo + int(at_least[c, 1])] - c
            widx >>= 2  # index in `view` of each key's word 0
            for j in range(max_words):
                m = int(at_least[c, j + 1])
                if m == 0:
                    break
                _mix(s_h[lo : lo + m], view[widx[:m]], tmp[:m])
                widx[:m] += 1
        h[order] = s_h

    # The 1-3 tail bytes, XORed in at << 0, << 8, << 16 (Java's fall-through switch),
    # then h *= m. Dense over all keys: byte i counts only where i < rem, and the
    # multiplier is 1 for keys without a tail. Positions past a key's end are clipped
    # into the buffer by take() and zeroed.
    rem = (lengths & 3).astype(np.uint8)
    max_rem = int(rem.max())
    if max_rem:
        pos = offsets[1:] - rem  # first tail byte of each key
        byte = np.empty(n, dtype=np.uint8)
        part = np.empty(n, dtype=np.uint32)
        t = np.zeros(n, dtype=np.uint32)
        for i in range(max_rem):
            np.take(data, pos, mode="clip", out=byte)
            np.multiply(byte, rem > i, out=part)
            part <<= np.uint32(8 * i)
            t ^= part
            pos += 1
        h ^= t
        h *= np.take(_TAIL_MULTIPLIER, rem)
    return h


def murmur2_array(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """:func:`murmur2` of every key in an Arrow array, vectorized with numpy.

    Every key is hashed in lock-step over its 4-byte word index, straight from the Arrow
    offsets and data buffers (no per-row Python), with uint32 arithmetic that wraps like
    Java's ``int``.

    Args:
        keys: a pyarrow ``binary``, ``large_binary``, ``string`` or ``large_string`` array
            or chunked array (view, fixed-size and dictionary forms are converted first).
            Strings are hashed as their UTF-8 bytes.

    Returns:
        ``numpy.ndarray[int32]`` with ``murmur2(keys[i])`` at ``i``, equal bit for bit to
        the scalar function.

    Raises:
        TypeError: ``keys`` is not an Arrow array of a supported type.
        ValueError: a key is null. A null key is a keyless record, which the producer
            routes with sticky partitioning, not by hash; the message names the first
            null row so the caller can see what it forgot to split off.
    """
    if isinstance(keys, pa.ChunkedArray):
        parts = []
        base = 0
        for chunk in keys.chunks:
            parts.append(_murmur2_chunk(chunk, base))
            base += len(chunk)
        out = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint32)
    elif isinstance(keys, pa.Array):
        out = _murmur2_chunk(keys, 0)
    else:
        raise TypeError(f"keys must be a pyarrow Array or ChunkedArray, got {type(keys).__name__}")
    return out.view(np.int32)


def partitions_for_keys(keys: pa.Array | pa.ChunkedArray, num_partitions: int) -> np.ndarray:
    """:func:`partition_for_key` for every key of an Arrow array at once.

    The bulk path of ``Producer.send_batch``: a key column of a million rows is hashed in
    tens of milliseconds instead of seconds, and lands on exactly the partitions the
    per-record path (and Java Kafka) would pick.

    Args:
        keys: the key column; see :func:`murmur2_array` for the accepted types.
        num_partitions: how many partitions the topic has.

    Returns:
        ``numpy.ndarray[int32]``, the partition of row ``i`` at ``i``.

    Raises:
        TypeError: unsupported ``keys`` type, or ``num_partitions`` not an int.
        ValueError: ``num_partitions`` < 1, or a key is null (the message names the row;
            null keys take the sticky path in the caller and must be split off first).
    """
    n = _check_num_partitions(num_partitions)
    h = murmur2_array(keys).view(np.uint32) & np.uint32(0x7FFFFFFF)
    return (h % np.uint32(n)).astype(np.int32)


# --------------------------------------------------------------------------------------
# Partitioners
# --------------------------------------------------------------------------------------


@runtime_checkable
class Partitioner(Protocol):
    """A custom partitioner: kafka-python's callable signature.

    Called once per record with the serialized key (``None`` for a keyless record), every
    partition of the topic in ascending order, and the partitions that currently have a
    live leader. Returns the partition to send to, which must be in ``all_partitions``.
    """

    def __call__(
        self,
        key_bytes: bytes | None,
        all_partitions: list[int],
        available_partitions: list[int],
    ) -> int: ...


class DefaultPartitioner:
    """Kafka's default: murmur2 for keyed records, sticky (KIP-480) for keyless ones.

    Keyed records go to :func:`partition_for_key` over *all* partitions, so a key's
    partition never changes while a leader is briefly unavailable.

    Keyless records of a topic all go to that topic's sticky partition. The producer's
    accumulator calls :meth:`on_new_batch` when the batch for the sticky partition is
    full or sent; the next keyless record then picks a new sticky partition at random
    among the available partitions (all partitions if none is available), different
    from the previous one when another exists. A sticky partition that stops being
    available (or no longer exists) is replaced the same way. The state is per topic and
    guarded by a lock, so one instance may serve a producer's threads.

    Example:
        >>> p = DefaultPartitioner(random.Random(7))
        >>> p.partition("t", b"foobar", [0, 1, 2], [0, 1, 2])  # keyed: murmur2
        0
        >>> first = p.partition("t", None, [0, 1, 2], [0, 1, 2])
        >>> p.partition("t", None, [0, 1, 2], [0, 1, 2]) == first  # sticky
        True
        >>> p.on_new_batch("t", first)
        >>> p.partition("t", None, [0, 1, 2], [0, 1, 2]) != first  # moved on
        True

    Args:
        rng: the source of randomness for choosing sticky partitions; pass a seeded
            ``random.Random`` for reproducible tests. Defaults to a fresh unseeded one.
    """

    # Sticky slot used when called through the topic-less kafka-python signature.
    _NO_TOPIC = ""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()
        self._lock = threading.Lock()
        # topic -> current sticky partition (absent: none chosen yet).
        self._sticky: dict[str, int] = {}
        # topic -> partition to move away from at the next keyless record.
        self._rotate_from: dict[str, int] = {}

    def __call__(
        self,
        key_bytes: bytes | None,
        all_partitions: list[int],
        available_partitions: list[int],
    ) -> int:
        """kafka-python-compatible entry point (sticky state shared by all topics)."""
        return self.partition(self._NO_TOPIC, key_bytes, all_partitions, available_partitions)

    def partition(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        """The partition for one record of ``topic``.

        Args:
            topic: the topic name; keys the sticky state.
            key: the serialized key, or ``None`` for a keyless record.
            all_partitions: every partition of the topic (``0 .. n-1``).
            available_partitions: the partitions with a live leader now.

        Returns:
            The chosen partition.

        Raises:
            ValueError: ``all_partitions`` is empty.
            TypeError: ``key`` is neither ``None`` nor bytes-like.
        """
        if not all_partitions:
            raise ValueError(f"all_partitions is empty for topic {topic!r}")
        if key is not None:
            return partition_for_key(key, len(all_partitions))
        with self._lock:
            current = self._sticky.get(topic)
            avoid = self._rotate_from.pop(topic, None)
            if (
                current is None
                or avoid is not None
                or current not in all_partitions
                or (available_partitions and current not in available_partitions)
            ):
                current = self._pick(all_partitions, available_partitions, avoid, current)
                self._sticky[topic] = current
            return current

    def on_new_batch(self, topic: str, prev_partition: int) -> None:
        """Tells the partitioner the batch for ``prev_partition`` is full or was sent.

        If ``prev_partition`` is the topic's sticky partition, the next keyless record of
        the topic picks a new one. A stale call (the sticky partition already moved on,
        or ``prev_partition`` is some keyed batch's partition) changes nothing, like
        Kafka's ``StickyPartitionCache.nextPartition``.

        Args:
            topic: the topic of the batch.
            prev_partition: the partition whose batch was completed.
        """
        with self._lock:
            if self._sticky.get(topic) == prev_partition:
                self._rotate_from[topic] = prev_partition

    def _pick(
        self,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
        avoid: int | None,
        current: int | None,
    ) -> int:
        """Random choice among available (else all) partitions, not ``avoid`` if possible."""
        candidates = list(available_partitions) if available_partitions else list(all_partitions)
        not_this = avoid if avoid is not None else current
        others = [p for p in candidates if p != not_this]
        return self._rng.choice(others if others else candidates)


class CustomPartitioner:
    """Adapts a user's :class:`Partitioner` callable to what the producer drives.

    Gives it the same ``partition(topic, ...)`` / ``on_new_batch(...)`` interface as
    :class:`DefaultPartitioner`, and checks each answer, so a buggy callable fails loudly
    at ``send`` rather than writing to a partition that does not exist.

    Args:
        fn: the callable ``(key_bytes, all_partitions, available_partitions) -> int``. If
            it also has an ``on_new_batch(topic, prev_partition)`` method, that is called
            too; otherwise batch completions are ignored.
    """

    def __init__(self, fn: Partitioner) -> None:
        if not callable(fn):
            raise TypeError(f"partitioner must be callable, got {type(fn).__name__}")
        self.fn = fn

    def partition(
        self,
        topic: str,
        key: bytes | None,
        all_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        """Calls the wrapped callable and validates its answer.

        Raises:
            ValueError: ``all_partitions`` is empty, or the callable returned something
                that is not one of ``all_partitions``.
        """
        if not all_partitions:
            raise ValueError(f"all_partitions is empty for topic {topic!r}")
        result = self.fn(key, list(all_partitions), list(available_partitions))
        if (
            isinstance(result, bool)
            or not isinstance(result, (int, np.integer))
            or result not in all_partitions
        ):
            raise ValueError(
                f"custom partitioner {self.fn!r} returned {result!r} for topic {topic!r}, "
                f"which is not one of its partitions 0..{len(all_partitions) - 1}"
            )
        return int(result)

    def on_new_batch(self, topic: str, prev_partition: int) -> None:
        """Forwards to the callable's own ``on_new_batch`` if it has one."""
        hook = getattr(self.fn, "on_new_batch", None)
        if callable(hook):
            hook(topic, prev_partition)


def resolve_partitioner(
    partitioner: Partitioner | DefaultPartitioner | CustomPartitioner | None = None,
    *,
    rng: random.Random | None = None,
) -> DefaultPartitioner | CustomPartitioner:
    """What the producer calls on its ``partitioner=`` argument.

    Args:
        partitioner: ``None`` for Kafka's default; a :class:`DefaultPartitioner` (or
            subclass) or :class:`CustomPartitioner` as is; any other callable is wrapped
            in a :class:`CustomPartitioner`.
        rng: randomness for a default partitioner created here.

    Returns:
        An object with ``partition(topic, key, all_partitions, available_partitions)``
        and ``on_new_batch(topic, prev_partition)``.

    Raises:
        TypeError: ``partitioner`` is not callable.
    """
    if partitioner is None:
        return DefaultPartitioner(rng)
    if isinstance(partitioner, (DefaultPartitioner, CustomPartitioner)):
        return partitioner
    return CustomPartitioner(partitioner)
