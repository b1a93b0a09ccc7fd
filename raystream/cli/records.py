"""``raystream produce`` and ``raystream consume``: records from lines, records to lines.

Both follow Kafka's console tools: the producer reads one record per line (a key before
``--key-separator``, headers before ``--headers-delimiter`` with ``--parse-headers``),
the consumer prints what Kafka's ``print.*`` properties ask for. Typed topics take and
print their values as JSON objects. The line parsing and formatting here is plain
Python; only the two commands touch a cluster.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import decimal
import functools
import json
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from raystream.errors import InvalidConfigError, InvalidRecordError, RaystreamError
from raystream.types import ConsumerRecord, TopicPartition

EXIT_ERROR = 1


# ----------------------------------------------------------------- producing


@dataclass(frozen=True)
class LineFormat:
    """How ``raystream produce`` splits a line into headers, key and value.

    ``key_separator`` None: the whole line (after any headers) is the value. With it, a
    line without the separator is refused unless ``allow_keyless`` (then it is sent
    without a key). With ``parse_headers`` a line is
    ``h1:v1,h2:v2<headers_delimiter>rest``, Kafka's console producer's layout.
    """

    key_separator: str | None = None
    allow_keyless: bool = False
    parse_headers: bool = False
    headers_delimiter: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"

    def parse(self, line: str) -> tuple[list[tuple[str, bytes]], bytes | None, str]:
        """``(headers, key, value text)`` of one line (without its newline).

        Raises:
            InvalidRecordError: the line lacks the key separator or the headers
                delimiter, or a header has no key separator; the message names it.
        """
        headers: list[tuple[str, bytes]] = []
        if self.parse_headers:
            head, sep, line = line.partition(self.headers_delimiter)
            if not sep:
                raise InvalidRecordError(
                    f"no headers delimiter {self.headers_delimiter!r} in the line"
                )
            for item in head.split(self.headers_separator) if head else []:
                name, sep, value = item.partition(self.headers_key_separator)
                if not sep or not name:
                    raise InvalidRecordError(
                        f"header {item!r} is not of the form key{self.headers_key_separator}value"
                    )
                headers.append((name, value.encode()))
        if self.key_separator is None:
            return headers, None, line
        key_text, sep, value = line.partition(self.key_separator)
        if sep:
            return headers, key_text.encode(), value
        if self.allow_keyless:
            return headers, None, line
        raise InvalidRecordError(
            f"no key separator {self.key_separator!r} in the line (--allow-keyless sends "
            "such lines without a key)"
        )


def parse_headers_option(items: Iterable[str] | None) -> list[tuple[str, bytes]]:
    """``--header k=v`` items as record headers.

    Raises:
        InvalidConfigError: an item has no ``=`` or no key.
    """
    headers = []
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidConfigError(f"--header {item!r} is not of the form key=value")
        headers.append((name, value.encode()))
    return headers


def parse_acks(text: str) -> int | str:
    """``--acks`` as the Producer takes it: 0, 1 or "all" (-1 is "all").

    Raises:
        InvalidConfigError: anything else, named.
    """
    if text in ("all", "-1"):
        return "all"
    if text in ("0", "1"):
        return int(text)
    raise InvalidConfigError(f"--acks {text!r} must be 0, 1, all or -1")


def typed_value(text: str) -> dict[str, Any]:
    """A typed topic's value from its JSON object text.

    Raises:
        InvalidRecordError: the text is not a JSON object.
    """
    try:
        value = json.loads(text)
    except ValueError as error:
        raise InvalidRecordError(f"the value is not JSON ({error}): {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise InvalidRecordError(f"a typed topic's value is a JSON object, not {text[:80]!r}")
    return value


class FailureReport:
    """Counts sends and prints each failure once, as one line naming the input line.

    A send's failure is reported by its errback as soon as it is known (on the
    producer's I/O thread) and again checked after the flush, so the count is exact
    even when an errback has not run yet when the flush returns.
    """

    def __init__(self, topic: str, stream: Any) -> None:
        self.topic = topic
        self.stream = stream
        self.lines = 0
        self._failed: set[int] = set()
        self._lock = threading.Lock()

    @property
    def failed(self) -> int:
        """How many input lines were not produced."""
        with self._lock:
            return len(self._failed)

    def fail(self, number: int, error: BaseException) -> None:
        """Report that input line ``number`` was not produced, and why (once)."""
        with self._lock:
            if number in self._failed:
                return
            self._failed.add(number)
            print(f"error: line {number}: {type(error).__name__}: {error}", file=self.stream)

    def summary(self) -> str:
        """One line: how many records were produced and how many failed."""
        failed = self.failed
        if not failed:
            return f"produced {self.lines} records to {self.topic}"
        return (
            f"produced {self.lines - failed} of {self.lines} records to {self.topic}; "
            f"{failed} failed"
        )


def produce(args: argparse.Namespace, cluster: Any) -> int:
    """Send each stdin line as one record; report every failure; exit 1 if any failed.

    A line that cannot be parsed (no key separator, a typed value that is not JSON) is
    not sent; a send that fails (synchronously, or when its batch is refused or times
    out) is reported when its error is known. All are reported with their line number.
    """
    layout = LineFormat(
        key_separator=args.key_separator,
        allow_keyless=args.allow_keyless,
        parse_headers=args.parse_headers,
        headers_delimiter=args.headers_delimiter.encode().decode("unicode_escape"),
    )
    static_headers = parse_headers_option(args.header)
    acks = parse_acks(args.acks)
    typed = cluster.topic_metadata(args.topic).value_schema is not None
    report = FailureReport(args.topic, sys.stderr)
    sent: list[tuple[int, Any]] = []
    with cluster.producer(acks=acks) as producer:
        for number, line in enumerate(sys.stdin, start=1):
            line = line.rstrip("\n")
            report.lines += 1
            try:
                headers, key, text = layout.parse(line)
                value: Any = typed_value(text) if typed else text.encode()
                future = producer.send(
                    args.topic,
                    value=value,
                    key=key,
                    headers=static_headers + headers or None,
                    partition=args.partition,
                )
            except RaystreamError as error:
                report.fail(number, error)
                continue
            future.add_errback(functools.partial(report.fail, number))
            sent.append((number, future))
        producer.flush()
    for number, future in sent:
        error = future.exception
        if error is not None:
            report.fail(number, error)
    print(report.summary(), file=sys.stderr)
    return EXIT_ERROR if report.failed else 0


# ----------------------------------------------------------------- consuming


@dataclass(frozen=True)
class RecordFormat:
    """What ``raystream consume`` prints of a record: Kafka's DefaultMessageFormatter.

    Fields in Kafka's order, each behind its ``print.*`` property: timestamp
    (``CreateTime:1700000000000``), partition (``Partition:0``), offset (``Offset:42``),
    headers (``h1:v1,h2:v2`` or ``NO_HEADERS``), key, value; ``key.separator`` between
    them. Bytes print as UTF-8 text, None as ``null.literal``, typed values as JSON.
    """

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    null_literal: str = "null"

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> RecordFormat:
        """The format from Kafka's console consumer ``--property`` names.

        Raises:
            InvalidConfigError: an unknown property or a flag that is not true/false.
        """
        fields: dict[str, Any] = {}
        for name, value in properties.items():
            attribute = name.replace(".", "_")
            if attribute not in cls.__dataclass_fields__:
                known = ", ".join(f.replace("_", ".") for f in cls.__dataclass_fields__)
                raise InvalidConfigError(f"unknown --property {name!r}; known: {known}")
            if attribute.startswith("print_"):
                if value.lower() not in ("true", "false"):
                    raise InvalidConfigError(f"--property {name}={value!r} must be true or false")
                fields[attribute] = value.lower() == "true"
            else:
                fields[attribute] = value.encode().decode("unicode_escape")
        return cls(**fields)

    def format(self, record: ConsumerRecord) -> str:
        """The line printed for ``record``."""
        parts = []
        if self.print_timestamp:
            kind = "LogAppendTime" if record.timestamp_type == 1 else "CreateTime"
            parts.append(f"{kind}:{record.timestamp}")
        if self.print_partition:
            parts.append(f"Partition:{record.partition}")
        if self.print_offset:
            parts.append(f"Offset:{record.offset}")
        if self.print_headers:
            parts.append(
                self.headers_separator.join(
                    f"{name}{self.headers_key_separator}{self.text(value)}"
                    for name, value in record.headers
                )
                or "NO_HEADERS"
            )
        if self.print_key:
            parts.append(self.text(record.key))
        if self.print_value:
            parts.append(self.text(record.value))
        return self.key_separator.join(parts)

    def text(self, value: Any) -> str:
        """A key, value or header value as printed."""
        if value is None:
            return self.null_literal
        if isinstance(value, bytes):
            return value.decode(errors="replace")
        if isinstance(value, dict):
            return json.dumps(value, default=json_default, ensure_ascii=False)
        return str(value)


def json_default(value: Any) -> Any:
    """JSON for the Arrow types ``json`` does not know: times as ISO 8601, decimals as
    strings, bytes as UTF-8 text (base64 when not UTF-8)."""
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return base64.b64encode(value).decode()
    return str(value)


def parse_offset(text: str) -> int | str:
    """``--offset``: "earliest", "latest" or an offset >= 0.

    Raises:
        InvalidConfigError: anything else, named.
    """
    if text in ("earliest", "latest"):
        return text
    if text.isdigit():
        return int(text)
    raise InvalidConfigError(f"--offset {text!r} must be earliest, latest or an offset >= 0")


def consume(args: argparse.Namespace, cluster: Any) -> int:
    """Print records until ``--max-messages`` or ``--timeout-ms`` of idleness.

    With ``--partition`` the consumer reads that partition alone (no group), from
    ``--offset`` (or the beginning with ``--from-beginning``); otherwise it subscribes,
    in ``--group`` if given.
    """
    from raystream.cli import parse_config

    layout = RecordFormat.from_properties(parse_config(args.property, "--property"))
    if args.offset is not None and args.partition is None:
        raise InvalidConfigError("--offset needs --partition (one partition's offsets)")
    if args.partition is not None and args.group is not None:
        raise InvalidConfigError("--partition reads without a group: drop --group")
    offset = parse_offset(args.offset) if args.offset is not None else None
    reset = "earliest" if args.from_beginning else "latest"
    timeout = args.timeout_ms if args.timeout_ms is not None else float("inf")
    config = {
        "auto_offset_reset": reset,
        "consumer_timeout_ms": timeout,
        "isolation_level": args.isolation_level,
    }
    if args.partition is None:
        consumer = cluster.consumer(args.topic, group_id=args.group, **config)
    else:
        cluster.require_partition(args.topic, args.partition)
        consumer = cluster.consumer(enable_auto_commit=False, **config)
        tp = TopicPartition(args.topic, args.partition)
        consumer.assign([tp])
        if offset == "earliest":
            consumer.seek_to_beginning(tp)
        elif offset == "latest":
            consumer.seek_to_end(tp)
        elif offset is not None:
            consumer.seek(tp, offset)
    count = 0
    try:
        for record in consumer:
            print(layout.format(record), flush=True)
            count += 1
            if args.max_messages is not None and count >= args.max_messages:
                break
    finally:
        consumer.close()
    return 0
