"""Offset options of rs.spark / rs.data, parsed and resolved (pure: no Ray)."""

from __future__ import annotations

import pytest

from raystream.data.offsets import EARLIEST, LATEST, limit_ends, parse_offsets, resolve
from raystream.errors import (
    InvalidRequestError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)

BOUNDS = {0: (0, 10), 1: (5, 8), 2: (0, 0)}


def test_names_cover_every_partition() -> None:
    assert parse_offsets("earliest", "t", 3, "o") == {0: EARLIEST, 1: EARLIEST, 2: EARLIEST}
    assert parse_offsets(" LATEST ", "t", 2, "o") == {0: LATEST, 1: LATEST}


def test_dict_json_and_nested_dict_forms_agree() -> None:
    expected = {0: 3, 1: LATEST}
    assert parse_offsets({0: 3, 1: -1}, "t", 3, "o") == expected
    assert parse_offsets({"0": 3, "1": -1}, "t", 3, "o") == expected
    assert parse_offsets('{"t": {"0": 3, "1": -1}}', "t", 3, "o") == expected
    assert parse_offsets({"t": {0: 3, 1: -1}}, "t", 3, "o") == expected


def test_unnamed_partitions_take_the_default_and_names_resolve_to_log_bounds() -> None:
    assert resolve({0: 3}, EARLIEST, BOUNDS, "t", "o") == {0: 3, 1: 5, 2: 0}
    assert resolve({}, LATEST, BOUNDS, "t", "o") == {0: 10, 1: 8, 2: 0}
    assert resolve({1: EARLIEST, 0: LATEST}, LATEST, BOUNDS, "t", "o") == {0: 10, 1: 5, 2: 0}


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("soonest", "soonest"),
        (42, "42"),
        ({0: "3"}, "'3'"),
        ({0: -3}, "-3"),
        ({0: True}, "True"),
        ({"x": 1}, "'x'"),
        ('{"other": {"0": 1}}', "other"),
        ({"t": [1, 2], "u": {}}, "u"),
    ],
)
def test_malformed_options_are_refused_naming_the_bad_value(spec: object, named: str) -> None:
    with pytest.raises(InvalidRequestError, match="starting_offsets") as error:
        parse_offsets(spec, "t", 3, "starting_offsets")
    assert named in str(error.value)


def test_a_partition_the_topic_lacks_is_unknown() -> None:
    with pytest.raises(UnknownTopicOrPartitionError, match="partition 3 of topic 't'"):
        parse_offsets({3: 0}, "t", 3, "ending_offsets")


def test_an_offset_outside_the_log_is_out_of_range() -> None:
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 4 of t-1 .*\[5, 8\]"):
        resolve({1: 4}, EARLIEST, BOUNDS, "t", "starting_offsets")
    with pytest.raises(OffsetOutOfRangeError, match="offset 11 of t-0"):
        resolve({0: 11}, LATEST, BOUNDS, "t", "ending_offsets")


def test_limit_ends_prorates_the_backlog_like_spark() -> None:
    starts = {0: 0, 1: 0, 2: 5}
    ends = {0: 100, 1: 300, 2: 5}
    assert limit_ends(starts, ends, None) == ends
    assert limit_ends(starts, ends, 1000) == ends
    assert limit_ends(starts, ends, 40) == {0: 10, 1: 30, 2: 5}
    # a share below one offset still moves the partition by one, so every batch progresses
    assert limit_ends({0: 0, 1: 0}, {0: 1, 1: 1000}, 10) == {0: 1, 1: 9}
