"""The order-preserving key encoding: round trips, order within a type, errors."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raystream.errors import InvalidRequestError
from raystream.streams.serde import (
    BYTES,
    KEY,
    PICKLE,
    Serde,
    decode_key,
    decode_timestamp,
    encode_key,
    encode_timestamp,
)
from raystream.streams.windowed import Windowed

SETTINGS = settings(derandomize=True, max_examples=200, deadline=None, database=None)

big_ints = st.sampled_from([1 << 2040, (1 << 2048) - 1, 1 << 2100]).flatmap(
    lambda m: st.integers(-m, m)
)
ints = st.one_of(st.integers(), big_ints, st.integers(-300, 300))
floats = st.floats(allow_nan=False)
scalars = st.one_of(st.none(), st.booleans(), ints, floats, st.text(), st.binary())
keys = st.recursive(scalars, lambda inner: st.tuples(inner, inner) | st.tuples(inner), max_leaves=6)
windowed = st.builds(Windowed, keys, st.integers(-(1 << 63), 1 << 62), st.integers(0, 1 << 62))


@SETTINGS
@given(st.one_of(keys, windowed))
def test_encode_then_decode_gives_the_key_back(key):
    decoded = decode_key(encode_key(key))
    assert decoded == key
    assert type(decoded) is type(key)


def _same_type_pairs(strategy):
    return st.tuples(strategy, strategy)


@SETTINGS
@given(
    st.one_of(
        _same_type_pairs(ints),
        _same_type_pairs(floats),
        _same_type_pairs(st.text()),
        _same_type_pairs(st.binary()),
        _same_type_pairs(st.booleans()),
        _same_type_pairs(st.tuples(st.text(), ints)),
        _same_type_pairs(st.tuples(st.binary(), st.binary(), floats)),
        _same_type_pairs(st.lists(st.integers(), max_size=4).map(tuple)),
        _same_type_pairs(st.builds(Windowed, st.text(), st.integers(), st.integers())),
    )
)
def test_byte_order_is_natural_order_within_a_type(pair):
    a, b = pair
    ea, eb = encode_key(a), encode_key(b)
    assert (ea < eb) == (a < b)
    assert (ea == eb) == (a == b)


@SETTINGS
@given(ints, ints)
def test_timestamps_and_ints_sort_numerically_across_signs_and_lengths(a, b):
    assert (encode_key(a) < encode_key(b)) == (a < b)
    if -(1 << 63) <= a < 1 << 63 and -(1 << 63) <= b < 1 << 63:
        assert (encode_timestamp(a) < encode_timestamp(b)) == (a < b)
        assert decode_timestamp(encode_timestamp(a)) == a


def test_worked_example_of_the_docstring():
    assert encode_key(("a", -1)).hex() == "07056100" + "0300fefe" + "00"
    assert encode_key(("a", 0)).hex() == "07056100" + "030100" + "00"
    assert encode_key(("a", -1)) < encode_key(("a", 0))


def test_escaped_zero_bytes_keep_prefixes_first_also_inside_tuples():
    assert encode_key("a") < encode_key("a\x00") < encode_key("ab")
    assert encode_key(b"") < encode_key(b"\x00") < encode_key(b"\x00\x00") < encode_key(b"\x01")
    assert encode_key(("a", 2**70)) < encode_key(("a\x00",)) < encode_key(("a\x00", None))


def test_types_sort_by_tag_and_equal_python_values_of_other_types_are_distinct_keys():
    order = [None, False, True, -1, 0, 1, -1.5, 1.0, "", "a", b"", (), Windowed("a", 0, 1)]
    encoded = [encode_key(k) for k in order]
    assert encoded == sorted(encoded)
    assert len({encode_key(1), encode_key(1.0), encode_key(True)}) == 3
    assert encode_key(-0.0) == encode_key(0.0)


def test_nan_round_trips():
    assert decode_key(encode_key(float("nan"))) != decode_key(encode_key(float("nan")))
    assert encode_key(float("nan")) > encode_key(float("inf"))


def test_unsupported_key_types_and_bad_bytes_are_named_errors():
    with pytest.raises(InvalidRequestError, match="type list"):
        encode_key([1, 2])
    with pytest.raises(InvalidRequestError, match="type dict"):
        encode_key(("a", {}))
    with pytest.raises(InvalidRequestError, match="not an encoded key"):
        decode_key(b"\x05abc")
    with pytest.raises(InvalidRequestError, match="trailing"):
        decode_key(encode_key(1) + b"\x01")
    with pytest.raises(InvalidRequestError, match="signed 64-bit"):
        encode_timestamp(1 << 63)


def test_default_value_serde_is_pickle_protocol_5_and_user_serdes_are_callables():
    assert PICKLE.serialize({"a": 1}) == pickle.dumps({"a": 1}, protocol=5)
    assert PICKLE.deserialize(PICKLE.serialize([1, "x"])) == [1, "x"]
    assert KEY.deserialize(KEY.serialize(("k", 1))) == ("k", 1)
    assert BYTES.serialize(b"x") == b"x"
    upper = Serde(lambda s: s.upper().encode(), lambda b: b.decode())
    assert upper.deserialize(upper.serialize("ab")) == "AB"
    with pytest.raises(InvalidRequestError, match="two callables"):
        Serde("json", None)
