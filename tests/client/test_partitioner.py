"""Tests for raystream.client.partitioner: Kafka-exact murmur2 and the partitioners."""

from __future__ import annotations

import doctest
import itertools
import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import raystream.client.partitioner as partitioner_module
from raystream.client.partitioner import (
    CustomPartitioner,
    DefaultPartitioner,
    Partitioner,
    murmur2,
    murmur2_array,
    partition_for_key,
    partitions_for_keys,
    resolve_partitioner,
    to_positive,
)

# --------------------------------------------------------------------------------------
# Oracle: a literal transcription of Java's Utils.murmur2, emulating Java int arithmetic
# step by step (signed 32-bit wrap, >>> as an unsigned shift). Deliberately written
# differently from the module's version so the two check each other.
# --------------------------------------------------------------------------------------


def _i32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def _ushr(x: int, n: int) -> int:
    return (x & 0xFFFFFFFF) >> n


def _java_murmur2(data: bytes) -> int:
    length = len(data)
    seed = _i32(0x9747B28C)
    m = 0x5BD1E995
    r = 24
    h = _i32(seed ^ length)
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = _i32(
            (data[i4 + 0] & 0xFF)
            + ((data[i4 + 1] & 0xFF) << 8)
            + ((data[i4 + 2] & 0xFF) << 16)
            + ((data[i4 + 3] & 0xFF) << 24)
        )
        k = _i32(k * m)
        k = _i32(k ^ _ushr(k, r))
        k = _i32(k * m)
        h = _i32(h * m)
        h = _i32(h ^ k)
    rem = length % 4  # switch with fall-through
    if rem == 3:
        h = _i32(h ^ ((data[(length & ~3) + 2] & 0xFF) << 16))
    if rem >= 2:
        h = _i32(h ^ ((data[(length & ~3) + 1] & 0xFF) << 8))
    if rem >= 1:
        h = _i32(h ^ (data[length & ~3] & 0xFF))
        h = _i32(h * m)
    h = _i32(h ^ _ushr(h, 13))
    h = _i32(h * m)
    h = _i32(h ^ _ushr(h, 15))
    return h


# Apache Kafka clients, UtilsTest.testMurmur2.
KAFKA_UTILS_TEST_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]

# librdkafka src/rdmurmur2.c unittest_murmur2 (its "java_murmur2_results", as uint32):
# every tail length 0-3, and the same strings starting at unaligned addresses.
LIBRDKAFKA_VECTORS = [
    (b"kafka", 0xD067CF64),
    (b"giberish123456789", 0x8F552B0C),
    (b"1234", 0x9FC97B14),
    (b"234", 0xE7C009CA),
    (b"34", 0x873930DA),
    (b"4", 0x5A4B5CA1),
    (b"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x78424F1C),
    (b"reAmbleWillBeRemoved,ThePrePartThatIs", 0x4A62B377),
    (b"eAmbleWillBeRemoved,ThePrePartThatIs", 0xE0E4E09E),
    (b"AmbleWillBeRemoved,ThePrePartThatIs", 0x62B8B43F),
    (b"", 0x106E08D9),
]

ALL_VECTORS = KAFKA_UTILS_TEST_VECTORS + [
    (data, u - (1 << 32) if u & 0x80000000 else u) for data, u in LIBRDKAFKA_VECTORS
]


# --------------------------------------------------------------------------------------
# Scalar hash
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "expected"), ALL_VECTORS, ids=lambda v: repr(v)[:30])
def test_murmur2_known_vectors(data: bytes, expected: int) -> None:
    assert _java_murmur2(data) == expected  # the oracle agrees with the published value
    assert murmur2(data) == expected


def test_murmur2_accepts_bytearray_and_memoryview() -> None:
    assert murmur2(bytearray(b"foobar")) == -790332482
    assert murmur2(memoryview(b"xxfoobar")[2:]) == -790332482


@settings(max_examples=300)
@given(st.binary(min_size=0, max_size=64))
def test_murmur2_matches_java_transcription(data: bytes) -> None:
    h = murmur2(data)
    assert -(2**31) <= h < 2**31
    assert h == _java_murmur2(data)


def test_to_positive() -> None:
    assert to_positive(5) == 5
    assert to_positive(0) == 0
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0  # where abs() would overflow in Java
    assert to_positive(-973932308) == 1173551340


def test_partition_for_key_known_values() -> None:
    # to_positive(-790332482) == 1357151166
    assert partition_for_key(b"foobar", 50) == 1357151166 % 50 == 16
    assert partition_for_key(b"21", 7) == 1173551340 % 7
    assert partition_for_key(b"", 12) == 275646681 % 12  # b"" is a key, not "no key"
    assert partition_for_key(b"anything", 1) == 0


def test_partition_for_key_distribution() -> None:
    num_partitions = 12
    n = 12_000
    counts = Counter(partition_for_key(f"key-{i}".encode(), num_partitions) for i in range(n))
    assert set(counts) == set(range(num_partitions))
    expected = n / num_partitions
    # Every partition within 15% of uniform, and a chi-square far below the 0.1% critical
    # value for 11 degrees of freedom (31.26).
    assert all(abs(c - expected) < 0.15 * expected for c in counts.values()), counts
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 31.26, counts


@pytest.mark.parametrize("bad", [0, -1])
def test_partition_for_key_rejects_bad_num_partitions(bad: int) -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for_key(b"k", bad)
    with pytest.raises(ValueError, match="num_partitions"):
        partitions_for_keys(pa.array([b"k"]), bad)


def test_partition_for_key_rejects_non_int_num_partitions() -> None:
    with pytest.raises(TypeError, match="num_partitions"):
        partition_for_key(b"k", 2.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(("key", "type_name"), [("foobar", "str"), (42, "int"), ([1], "list")])
def test_non_bytes_key_raises_type_error_naming_the_type(key: object, type_name: str) -> None:
    with pytest.raises(TypeError, match=type_name):
        partition_for_key(key, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=type_name):
        murmur2(key)  # type: ignore[arg-type]


def test_module_doctests() -> None:
    result = doctest.testmod(partitioner_module)
    assert result.attempted > 0
    assert result.failed == 0


# --------------------------------------------------------------------------------------
# Vectorized hash
# --------------------------------------------------------------------------------------


def _expected(keys: list[bytes], num_partitions: int) -> tuple[list[int], list[int]]:
    return [murmur2(k) for k in keys], [partition_for_key(k, num_partitions) for k in keys]


def _check_array(arr: pa.Array | pa.ChunkedArray, keys: list[bytes], num_partitions: int) -> None:
    hashes, parts = _expected(keys, num_partitions)
    got_h = murmur2_array(arr)
    got_p = partitions_for_keys(arr, num_partitions)
    assert got_h.dtype == np.int32
    assert got_p.dtype == np.int32
    assert got_h.tolist() == hashes
    assert got_p.tolist() == parts


@pytest.mark.parametrize("arrow_type", [pa.binary(), pa.large_binary(), pa.binary_view()])
def test_murmur2_array_known_vectors(arrow_type: pa.DataType) -> None:
    keys = [data for data, _ in ALL_VECTORS]
    got = murmur2_array(pa.array(keys, arrow_type))
    assert got.tolist() == [expected for _, expected in ALL_VECTORS]


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.one_of(st.none(), st.binary(min_size=0, max_size=64)), max_size=40),
    num_partitions=st.integers(min_value=1, max_value=1000),
    large=st.booleans(),
    skip=st.integers(min_value=0, max_value=3),
)
def test_partitions_for_keys_matches_scalar(
    keys: list[bytes | None], num_partitions: int, large: bool, skip: int
) -> None:
    arrow_type = pa.large_binary() if large else pa.binary()
    # Slicing gives a non-zero array offset and keys starting at any byte alignment.
    arr = pa.array([b"pad"] * skip + keys, arrow_type).slice(skip)
    if None in keys:
        first = keys.index(None)
        with pytest.raises(ValueError, match=rf"\bnull at row {first}\b"):
            partitions_for_keys(arr, num_partitions)
        with pytest.raises(ValueError, match=rf"\bnull at row {first}\b"):
            murmur2_array(arr)
        return
    _check_array(arr, keys, num_partitions)


@settings(max_examples=100, deadline=None)
@given(
    width=st.integers(min_value=0, max_value=40),
    data=st.data(),
    num_partitions=st.integers(min_value=1, max_value=64),
)
def test_partitions_for_keys_fixed_width_keys(
    width: int, data: st.DataObject, num_partitions: int
) -> None:
    # All keys the same length take the strided (no-gather) path.
    keys = data.draw(st.lists(st.binary(min_size=width, max_size=width), min_size=1, max_size=30))
    _check_array(pa.array(keys, pa.binary()), keys, num_partitions)
    if width:
        _check_array(pa.array(keys, pa.binary(width)), keys, num_partitions)


@settings(max_examples=100, deadline=None)
@given(texts=st.lists(st.text(max_size=20), max_size=30), large=st.booleans())
def test_partitions_for_keys_strings_hash_as_utf8(texts: list[str], large: bool) -> None:
    arr = pa.array(texts, pa.large_string() if large else pa.string())
    _check_array(arr, [t.encode() for t in texts], 12)


@settings(max_examples=50, deadline=None)
@given(
    chunks=st.lists(st.lists(st.binary(max_size=20), max_size=10), max_size=5),
    null_at=st.one_of(st.none(), st.integers(min_value=0)),
)
def test_partitions_for_keys_chunked(chunks: list[list[bytes]], null_at: int | None) -> None:
    keys = [k for chunk in chunks for k in chunk]
    if null_at is not None and keys:
        row = null_at % len(keys)
        # Put a null at global row `row` and check the message names that global row.
        flat: list[bytes | None] = list(keys)
        flat[row] = None
        sizes = [len(c) for c in chunks]
        pieces, start = [], 0
        for size in sizes:
            pieces.append(flat[start : start + size])
            start += size
        arr = pa.chunked_array(pieces, pa.binary())
        with pytest.raises(ValueError, match=rf"\bnull at row {row}\b"):
            partitions_for_keys(arr, 5)
        return
    _check_array(pa.chunked_array(chunks, pa.binary()), keys, 5)


def test_partitions_for_keys_dictionary_and_empty() -> None:
    keys = [b"a", b"bb", b"a", b"", b"ccccc"]
    _check_array(pa.array(keys, pa.binary()).dictionary_encode(), keys, 7)
    assert partitions_for_keys(pa.array([], pa.binary()), 3).tolist() == []
    assert partitions_for_keys(pa.chunked_array([], pa.binary()), 3).tolist() == []
    _check_array(pa.array([b"", b""], pa.binary()), [b"", b""], 3)  # no data buffer bytes


def test_partitions_for_keys_large_random_batch() -> None:
    # Mixed lengths 0..64 at every alignment, more rows than hypothesis draws.
    rng = np.random.default_rng(1234)
    lengths = rng.integers(0, 65, size=5000)
    keys = [rng.integers(0, 256, size=int(n), dtype=np.uint8).tobytes() for n in lengths]
    _check_array(pa.array(keys, pa.binary()), keys, 97)
    uniform = [rng.integers(0, 256, size=16, dtype=np.uint8).tobytes() for _ in range(5000)]
    _check_array(pa.array(uniform, pa.binary()), uniform, 97)


def test_partitions_for_keys_null_message_explains() -> None:
    with pytest.raises(ValueError, match=r"null at row 2 .*sticky"):
        partitions_for_keys(pa.array([b"a", b"b", None, None]), 4)


@pytest.mark.parametrize(
    "keys",
    [pa.array([1, 2, 3]), pa.array([1.5]), [b"a", b"b"], np.array([b"a"])],
    ids=["int64", "double", "list", "ndarray"],
)
def test_partitions_for_keys_rejects_unsupported_types(keys: object) -> None:
    with pytest.raises(TypeError):
        partitions_for_keys(keys, 3)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# DefaultPartitioner: murmur2 for keys, sticky for None
# --------------------------------------------------------------------------------------

ALL = list(range(6))


def test_default_partitioner_keyed_records_use_murmur2() -> None:
    p = DefaultPartitioner(random.Random(0))
    for i in range(200):
        key = f"key-{i}".encode()
        # Keyed records hash over all partitions, even those without a leader right now.
        assert p.partition("t", key, ALL, [0]) == partition_for_key(key, len(ALL))
        assert p(key, ALL, ALL) == partition_for_key(key, len(ALL))


def test_default_partitioner_keyless_records_stick_until_new_batch() -> None:
    p = DefaultPartitioner(random.Random(42))
    first = p.partition("t", None, ALL, ALL)
    assert all(p.partition("t", None, ALL, ALL) == first for _ in range(100))
    # Keyed records in between do not disturb the sticky partition.
    p.partition("t", b"some-key", ALL, ALL)
    assert p.partition("t", None, ALL, ALL) == first

    p.on_new_batch("t", first)
    second = p.partition("t", None, ALL, ALL)
    assert second != first
    assert all(p.partition("t", None, ALL, ALL) == second for _ in range(100))


def test_default_partitioner_stale_new_batch_is_ignored() -> None:
    p = DefaultPartitioner(random.Random(1))
    sticky = p.partition("t", None, ALL, ALL)
    other = (sticky + 1) % len(ALL)
    p.on_new_batch("t", other)  # a batch of some other partition completed
    assert p.partition("t", None, ALL, ALL) == sticky
    p.on_new_batch("other-topic", sticky)  # a different topic
    assert p.partition("t", None, ALL, ALL) == sticky
    p.on_new_batch("never-seen", 3)  # no state yet: nothing to do
    assert p.partition("t", None, ALL, ALL) == sticky


def test_default_partitioner_state_is_per_topic() -> None:
    p = DefaultPartitioner(random.Random(3))
    a = p.partition("a", None, ALL, ALL)
    b = p.partition("b", None, ALL, ALL)
    p.on_new_batch("a", a)
    assert p.partition("a", None, ALL, ALL) != a
    assert p.partition("b", None, ALL, ALL) == b


def test_default_partitioner_rotation_covers_partitions_and_never_repeats() -> None:
    p = DefaultPartitioner(random.Random(7))
    seen = []
    for _ in range(300):
        current = p.partition("t", None, ALL, ALL)
        seen.append(current)
        p.on_new_batch("t", current)
    assert all(x != y for x, y in itertools.pairwise(seen))
    assert set(seen) == set(ALL)


def test_default_partitioner_uses_available_partitions() -> None:
    p = DefaultPartitioner(random.Random(5))
    for _ in range(50):
        current = p.partition("t", None, ALL, [2, 4])
        assert current in (2, 4)
        p.on_new_batch("t", current)


def test_default_partitioner_single_available_partition_stays() -> None:
    p = DefaultPartitioner(random.Random(5))
    assert p.partition("t", None, ALL, [3]) == 3
    p.on_new_batch("t", 3)
    assert p.partition("t", None, ALL, [3]) == 3


def test_default_partitioner_moves_off_an_unavailable_sticky_partition() -> None:
    p = DefaultPartitioner(random.Random(9))
    sticky = p.partition("t", None, ALL, ALL)
    still_up = [x for x in ALL if x != sticky]
    moved = p.partition("t", None, ALL, still_up)
    assert moved in still_up
    assert p.partition("t", None, ALL, ALL) == moved  # and sticks there


def test_default_partitioner_no_available_partitions_falls_back_to_all() -> None:
    p = DefaultPartitioner(random.Random(11))
    got = {p.partition(f"t{i}", None, ALL, []) for i in range(100)}
    assert got <= set(ALL)
    assert len(got) > 1


def test_default_partitioner_is_deterministic_with_a_seed() -> None:
    def run(seed: int) -> list[int]:
        p = DefaultPartitioner(random.Random(seed))
        out = []
        for _ in range(20):
            out.append(p.partition("t", None, ALL, ALL))
            p.on_new_batch("t", out[-1])
        return out

    assert run(123) == run(123)


def test_default_partitioner_rejects_no_partitions() -> None:
    p = DefaultPartitioner(random.Random(0))
    with pytest.raises(ValueError, match="all_partitions"):
        p.partition("t", None, [], [])
    with pytest.raises(TypeError, match="str"):
        p.partition("t", "not-bytes", ALL, ALL)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# Custom partitioners
# --------------------------------------------------------------------------------------


def test_custom_partitioner_callable_is_called_kafka_python_style() -> None:
    calls = []

    def last_available(
        key_bytes: bytes | None, all_partitions: list[int], available_partitions: list[int]
    ) -> int:
        calls.append((key_bytes, all_partitions, available_partitions))
        return available_partitions[-1]

    assert isinstance(last_available, Partitioner)
    p = resolve_partitioner(last_available)
    assert isinstance(p, CustomPartitioner)
    assert p.partition("t", b"k", range(4), (1, 2)) == 2
    assert p.partition("t", None, [0, 1, 2, 3], [0, 1, 2, 3]) == 3
    assert calls == [(b"k", [0, 1, 2, 3], [1, 2]), (None, [0, 1, 2, 3], [0, 1, 2, 3])]
    p.on_new_batch("t", 3)  # a plain function has no hook: ignored


def test_custom_partitioner_bad_result_raises() -> None:
    p = resolve_partitioner(lambda key, all_p, avail: 99)
    with pytest.raises(ValueError, match="99"):
        p.partition("t", b"k", [0, 1, 2], [0, 1, 2])
    p = resolve_partitioner(lambda key, all_p, avail: "1")
    with pytest.raises(ValueError, match="'1'"):
        p.partition("t", b"k", [0, 1, 2], [0, 1, 2])


def test_custom_partitioner_on_new_batch_is_forwarded() -> None:
    class RoundRobin:
        def __init__(self) -> None:
            self.batches: list[tuple[str, int]] = []
            self.next = 0

        def __call__(self, key_bytes, all_partitions, available_partitions) -> int:
            return all_partitions[self.next % len(all_partitions)]

        def on_new_batch(self, topic: str, prev_partition: int) -> None:
            self.batches.append((topic, prev_partition))
            self.next += 1

    rr = RoundRobin()
    p = resolve_partitioner(rr)
    assert p.partition("t", None, [0, 1, 2], [0, 1, 2]) == 0
    p.on_new_batch("t", 0)
    assert p.partition("t", None, [0, 1, 2], [0, 1, 2]) == 1
    assert rr.batches == [("t", 0)]


def test_resolve_partitioner() -> None:
    rng = random.Random(0)
    default = resolve_partitioner(None, rng=rng)
    assert isinstance(default, DefaultPartitioner)
    assert resolve_partitioner(default) is default
    custom = CustomPartitioner(lambda k, a, v: a[0])
    assert resolve_partitioner(custom) is custom
    with pytest.raises(TypeError, match="int"):
        resolve_partitioner(5)  # type: ignore[arg-type]
