"""The console tools' line parsing and record formatting, as plain functions, and the
demo's routing of everything but its own lines to its log (no Ray)."""

from __future__ import annotations

import datetime
import decimal
import subprocess
import sys

import pytest

from raystream.cli.records import (
    LineFormat,
    RecordFormat,
    parse_acks,
    parse_offset,
    typed_value,
)
from raystream.errors import InvalidConfigError, InvalidRecordError
from raystream.types import ConsumerRecord


def _record(**fields) -> ConsumerRecord:
    defaults = dict(
        topic="t",
        partition=2,
        offset=7,
        timestamp=1_700_000_000_000,
        timestamp_type=0,
        key=b"k",
        value=b"v",
        headers=(),
    )
    return ConsumerRecord(**{**defaults, **fields})


def test_a_line_splits_at_the_first_key_separator() -> None:
    assert LineFormat(key_separator=":").parse("k:v:w") == ([], b"k", "v:w")
    assert LineFormat(key_separator=":").parse(":v") == ([], b"", "v")
    assert LineFormat().parse("k:v") == ([], None, "k:v")


def test_a_line_without_the_key_separator_is_refused_unless_keyless_is_allowed() -> None:
    with pytest.raises(InvalidRecordError, match=r"no key separator ':'.*--allow-keyless"):
        LineFormat(key_separator=":").parse("value only")
    assert LineFormat(key_separator=":", allow_keyless=True).parse("value only") == (
        [],
        None,
        "value only",
    )


def test_headers_come_before_the_delimiter_as_in_kafkas_console_producer() -> None:
    layout = LineFormat(key_separator="=", parse_headers=True)
    assert layout.parse("a:1,b:\tk=v") == ([("a", b"1"), ("b", b"")], b"k", "v")
    assert layout.parse("\tk=v") == ([], b"k", "v")
    with pytest.raises(InvalidRecordError, match="no headers delimiter"):
        layout.parse("k=v")
    with pytest.raises(InvalidRecordError, match="header 'oops' is not of the form key:value"):
        layout.parse("oops\tk=v")


def test_acks_offsets_and_typed_values_are_checked_and_named() -> None:
    assert [parse_acks(a) for a in ("0", "1", "all", "-1")] == [0, 1, "all", "all"]
    with pytest.raises(InvalidConfigError, match="--acks '2'"):
        parse_acks("2")
    assert [parse_offset(o) for o in ("earliest", "latest", "12")] == ["earliest", "latest", 12]
    with pytest.raises(InvalidConfigError, match="--offset '-3'"):
        parse_offset("-3")
    assert typed_value('{"a": 1}') == {"a": 1}
    with pytest.raises(InvalidRecordError, match="not JSON"):
        typed_value("{")
    with pytest.raises(InvalidRecordError, match="JSON object"):
        typed_value("[1]")


def test_records_print_the_value_alone_by_default() -> None:
    assert RecordFormat().format(_record()) == "v"
    assert RecordFormat().format(_record(value=None)) == "null"


def test_print_properties_add_fields_in_kafkas_order() -> None:
    layout = RecordFormat.from_properties(
        {
            "print.key": "true",
            "print.headers": "true",
            "print.offset": "true",
            "print.partition": "true",
            "print.timestamp": "TRUE",
            "key.separator": "\\t|",
            "null.literal": "<none>",
        }
    )
    record = _record(key=None, timestamp_type=1, headers=(("a", b"1"), ("b", b"2")))
    assert layout.format(record) == (
        "LogAppendTime:1700000000000\t|Partition:2\t|Offset:7\t|a:1,b:2\t|<none>\t|v"
    )
    assert layout.format(_record()).split("\t|")[3] == "NO_HEADERS"
    assert RecordFormat.from_properties({"print.value": "false", "print.key": "true"}).format(
        _record()
    ) == ("k")


def test_unknown_or_malformed_properties_are_refused_by_name() -> None:
    with pytest.raises(InvalidConfigError, match=r"unknown --property 'print\.keys'"):
        RecordFormat.from_properties({"print.keys": "true"})
    with pytest.raises(InvalidConfigError, match=r"print\.key='yes' must be true or false"):
        RecordFormat.from_properties({"print.key": "yes"})


def test_typed_values_print_as_json_with_arrows_types() -> None:
    value = {
        "at": datetime.datetime(2026, 11, 26, 9, 30),
        "day": datetime.date(2026, 11, 26),
        "price": decimal.Decimal("1.10"),
        "raw": b"\xff",
        "text": b"caf\xc3\xa9",
        "none": None,
    }
    assert RecordFormat().format(_record(value=value)) == (
        '{"at": "2026-11-26T09:30:00", "day": "2026-11-26", "price": "1.10", '
        '"raw": "/w==", "text": "café", "none": null}'
    )


STORY = """
import logging, os, subprocess, sys, warnings
from raystream.cli.demo import story_only
print("before")
with story_only(sys.argv[1]):
    print("mine")
    os.write(1, b"fd 1 noise\\n")
    os.write(2, b"fd 2 noise\\n")
    warnings.warn("a python warning")
    logging.getLogger("somebody").warning("a logged line")
    subprocess.run(["sh", "-c", "echo child stdout; echo child stderr >&2"], check=True)
    print("mine again")
print("after")
"""


def test_the_demo_sends_everything_but_its_own_lines_to_its_log(tmp_path) -> None:
    """What the demo's process and its children (Ray's raylet, the Spark JVM) write to
    file descriptors 1 and 2, warnings and log records go to the log; the demo's prints
    stay on stdout, and everything is back in place afterwards."""
    log = tmp_path / "demo.log"
    result = subprocess.run(
        [sys.executable, "-c", STORY, str(log)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["before", "mine", "mine again", "after"]
    assert result.stderr == ""
    text = log.read_text()
    for noise in ("fd 1 noise", "fd 2 noise", "a python warning", "a logged line"):
        assert noise in text
    assert "child stdout" in text and "child stderr" in text
