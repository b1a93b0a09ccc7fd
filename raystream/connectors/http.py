"""An HTTP source connector: polls a URL and writes what it answers to a topic.

Config (a Kafka Connect user's keys, plus raystream's ``http.*``)::

    connector.class=HttpSource
    topic=prices
    http.url=https://api.example.com/prices
    http.poll.interval.ms=10000          # between requests (default 10 s)
    http.response.split=array            # none: one record per response (default);
                                         # array: one record per JSON array element
    http.response.records.path=data.items  # where the array is in the JSON (default: the body)
    http.offset.field=updated_at         # a cursor field of each element
    http.offset.param=since              # sent as ?since=<cursor> (else: old ones skipped)
    http.key.field=id                    # an element field for the record key
    http.request.headers=Accept: application/json, Authorization: Bearer xyz
    http.timeout.ms=10000

The source offset of the URL (its source partition, ``{"url": ...}``) is what makes a
restarted task ask only for what is new: the last ``ETag`` and ``Last-Modified`` (sent
back as ``If-None-Match`` and ``If-Modified-Since``, a 304 answer being no records) and
the highest cursor seen. A response with the same validator as the stored offset is
skipped even when a server ignores conditional requests.

Values: with ``split=none`` the body as bytes (pair with the ``bytes`` converter, or
``string``); with ``split=array`` each element as connect data (objects become
structs; pair with ``json``). A server error (5xx), a refused connection or a timeout
is a ``RetriableConnectError`` (the task polls again after the interval); any other
non-success answer is a ``ConnectError``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from raystream.connectors.api import SourceBatch, SourceConnector, SourceTask, Task
from raystream.errors import ConnectError, InvalidConfigError, RetriableConnectError

SPLITS = ("none", "array")


class HttpSource(SourceConnector):
    """Polls one URL; one task (a URL is one source partition)."""

    def validate(self, config: Mapping[str, str]) -> None:
        """Raise InvalidConfigError naming the key when the config cannot work."""
        HttpSettings.from_config(config)

    def task_class(self) -> type[Task]:
        return HttpSourceTask


@dataclass(frozen=True)
class HttpSettings:
    """The validated settings of an HTTP source (the module docstring's keys)."""

    url: str
    topic: str
    poll_interval_ms: int
    split: str
    records_path: list[str]
    offset_field: list[str]
    offset_param: str
    key_field: list[str]
    headers: dict[str, str]
    timeout_ms: int

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> HttpSettings:
        """The settings of a connector config.

        Raises:
            InvalidConfigError: a missing or bad setting, naming the key.
        """
        url = str(config.get("http.url", "")).strip()
        if not url:
            raise InvalidConfigError("http.url: required (the URL to poll)")
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise InvalidConfigError(f"http.url={url!r}: expected an http or https URL")
        topic = str(config.get("topic", "")).strip()
        if not topic:
            raise InvalidConfigError("topic: required (the topic to write to)")
        split = str(config.get("http.response.split", "none")).strip().lower()
        if split not in SPLITS:
            raise InvalidConfigError(f"http.response.split={split!r}: expected one of {SPLITS}")
        offset_field = _path(config, "http.offset.field")
        key_field = _path(config, "http.key.field")
        if split == "none" and (offset_field or key_field):
            raise InvalidConfigError(
                "http.offset.field and http.key.field need http.response.split=array"
            )
        headers = {}
        for entry in str(config.get("http.request.headers", "")).split(","):
            if not entry.strip():
                continue
            name, sep, value = entry.partition(":")
            if not sep or not name.strip():
                raise InvalidConfigError(
                    f"http.request.headers: {entry.strip()!r} is not 'Name: value'"
                )
            headers[name.strip()] = value.strip()
        return cls(
            url=url,
            topic=topic,
            poll_interval_ms=_non_negative(config, "http.poll.interval.ms", 10_000),
            split=split,
            records_path=_path(config, "http.response.records.path"),
            offset_field=offset_field,
            offset_param=str(config.get("http.offset.param", "")).strip(),
            key_field=key_field,
            headers=headers,
            timeout_ms=_non_negative(config, "http.timeout.ms", 10_000),
        )


class HttpSourceTask(SourceTask):
    """Requests the URL every ``http.poll.interval.ms`` and returns what is new as a batch."""

    def start(self, config: dict[str, str]) -> None:
        self.settings = HttpSettings.from_config(config)
        self.partition = {"url": self.settings.url}
        stored = None
        if self.context is not None:
            stored = self.context.offset_storage_reader.offset(self.partition)
        self.offset: dict[str, Any] = dict(stored or {})
        self.next_poll = 0.0

    def poll(self) -> SourceBatch | None:
        """One request when the interval has passed; waits at most a second otherwise."""
        now = time.monotonic()
        if now < self.next_poll:
            time.sleep(min(self.next_poll - now, 1.0))
            if time.monotonic() < self.next_poll:
                return None
        self.next_poll = time.monotonic() + self.settings.poll_interval_ms / 1000
        answer = self._request()
        if answer is None:
            return None
        body, validators = answer
        if self.settings.split == "none":
            table = pa.table({"value": pa.array([body], pa.binary())})
            offset = {**self.offset, **validators}
        else:
            elements = self._elements(body)
            table, offset = self._element_batch(elements, validators)
        self.offset = offset
        if table.num_rows == 0:
            return None
        return SourceBatch(self.partition, dict(offset), self.settings.topic, table)

    def stop(self) -> None:
        """Nothing held between requests."""

    def _request(self) -> tuple[bytes, dict[str, str]] | None:
        """The body and its validators, or None when the server says nothing changed."""
        settings = self.settings
        url = settings.url
        if settings.offset_param and self.offset.get("cursor") is not None:
            query = urllib.parse.urlencode({settings.offset_param: self.offset["cursor"]})
            url += ("&" if urllib.parse.urlsplit(url).query else "?") + query
        headers = dict(settings.headers)
        if self.offset.get("etag"):
            headers["If-None-Match"] = self.offset["etag"]
        if self.offset.get("last_modified"):
            headers["If-Modified-Since"] = self.offset["last_modified"]
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=settings.timeout_ms / 1000) as response:
                body = response.read()
                etag = response.headers.get("ETag")
                last_modified = response.headers.get("Last-Modified")
        except urllib.error.HTTPError as error:
            if error.code == 304:
                return None
            message = f"HTTP source: GET {url} answered {error.code} {error.reason}"
            if error.code >= 500 or error.code == 429:
                raise RetriableConnectError(message) from error
            raise ConnectError(message) from error
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            raise RetriableConnectError(f"HTTP source: GET {url} failed: {error}") from error
        validators = {}
        if etag:
            validators["etag"] = etag
        if last_modified:
            validators["last_modified"] = last_modified
        if validators and all(self.offset.get(k) == v for k, v in validators.items()):
            return None  # the server ignored If-None-Match / If-Modified-Since
        return body, validators

    def _elements(self, body: bytes) -> list[Any]:
        try:
            document = json.loads(body)
        except ValueError as error:
            raise ConnectError(
                f"HTTP source: {self.settings.url} did not answer JSON: {error}"
            ) from error
        for name in self.settings.records_path:
            if not isinstance(document, dict) or name not in document:
                raise ConnectError(
                    f"HTTP source: http.response.records.path: the answer has no {name!r}"
                )
            document = document[name]
        if not isinstance(document, list):
            raise ConnectError(
                f"HTTP source: expected a JSON array of records, got {type(document).__name__}"
            )
        return document

    def _element_batch(
        self, elements: list[Any], validators: dict[str, str]
    ) -> tuple[pa.Table, dict[str, Any]]:
        """The new elements as a batch and the offset after them."""
        settings = self.settings
        offset = {**self.offset, **validators}
        if settings.offset_field:
            cursors = [
                _get(element, settings.offset_field, "http.offset.field") for element in elements
            ]
            last = self.offset.get("cursor")
            if last is not None and not settings.offset_param:
                fresh = [i for i, c in enumerate(cursors) if _after(c, last)]
                elements = [elements[i] for i in fresh]
                cursors = [cursors[i] for i in fresh]
            if cursors:
                offset["cursor"] = max(cursors, key=_order)
        columns: dict[str, pa.Array] = {}
        try:
            columns["value"] = pa.array(elements)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise ConnectError(
                f"HTTP source: the records of {settings.url} do not share one shape: {error}"
            ) from error
        if settings.key_field:
            columns["key"] = pa.array(
                [_get(element, settings.key_field, "http.key.field") for element in elements]
            )
        return pa.table(columns), offset


def _path(config: Mapping[str, str], key: str) -> list[str]:
    text = str(config.get(key, "")).strip()
    return text.split(".") if text else []


def _non_negative(config: Mapping[str, str], key: str, default: int) -> int:
    value = config.get(key, default)
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InvalidConfigError(f"{key}={value!r}: expected an integer") from None
    if number < 0:
        raise InvalidConfigError(f"{key}={number}: expected >= 0")
    return number


def _get(element: Any, path: list[str], key: str) -> Any:
    value = element
    for name in path:
        if not isinstance(value, dict) or name not in value:
            raise ConnectError(f"HTTP source: {key}: a record has no {'.'.join(path)!r}")
        value = value[name]
    return value


def _order(cursor: Any) -> tuple[int, Any]:
    """Numbers before text, each in its natural order (ISO timestamps sort as text)."""
    if isinstance(cursor, int | float) and not isinstance(cursor, bool):
        return (0, cursor)
    return (1, str(cursor))


def _after(cursor: Any, last: Any) -> bool:
    return _order(cursor) > _order(last)
