"""The HTTP source against a real HTTP server on loopback (started here), its task called
directly as the worker would: poll, store the offset, restart from it."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from raystream.connectors.api import SourceBatch
from raystream.connectors.http import HttpSource, HttpSourceTask
from raystream.errors import ConnectError, InvalidConfigError, RetriableConnectError

ITEMS = [{"id": i, "name": f"item-{i}", "price": i * 1.5} for i in range(1, 6)]


class Api:
    """What the server serves, and what it was asked (the test's record of requests)."""

    def __init__(self) -> None:
        self.items = list(ITEMS)
        self.document = b"version 1"
        self.etag = '"v1"'
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.failures_left = 0


class Handler(BaseHTTPRequestHandler):
    api: Api

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        api = self.api
        url = urlsplit(self.path)
        api.requests.append((self.path, dict(self.headers)))
        if url.path == "/flaky" and api.failures_left:
            api.failures_left -= 1
            self.send_error(503)
            return
        if url.path == "/items":
            since = int(parse_qs(url.query).get("since", ["0"])[0])
            self._json({"data": {"items": [i for i in api.items if i["id"] > since]}})
        elif url.path in ("/all-items", "/flaky"):
            self._json(api.items)
        elif url.path == "/doc":
            if self.headers.get("If-None-Match") == api.etag:
                self.send_response(304)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("ETag", api.etag)
            self.send_header("Content-Length", str(len(api.document)))
            self.end_headers()
            self.wfile.write(api.document)
        else:
            self.send_error(404)

    def _json(self, document: Any) -> None:
        body = json.dumps(document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Api]]:
    api = Api()
    handler = type("BoundHandler", (Handler,), {"api": api})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", api
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


class Offsets:
    """The committed offsets a worker would hand the task (``connect-offsets``)."""

    def __init__(self) -> None:
        self.committed: dict[str, dict[str, Any]] = {}

    def offset(self, source_partition: dict[str, Any]) -> dict[str, Any] | None:
        return self.committed.get(json.dumps(source_partition, sort_keys=True))

    def offsets(self, source_partitions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        found = (self.offset(p) for p in source_partitions)
        return {json.dumps(p): o for p, o in zip(source_partitions, found, strict=True) if o}

    def commit(self, batch: SourceBatch) -> None:
        self.committed[json.dumps(dict(batch.source_partition), sort_keys=True)] = dict(
            batch.source_offset
        )


class Context:
    def __init__(self, offsets: Offsets) -> None:
        self.offset_storage_reader = offsets
        self.transaction_context = None


def started(config: dict[str, str], offsets: Offsets) -> HttpSourceTask:
    connector = HttpSource()
    connector.validate(config)
    connector.start(config)
    [task_config] = connector.task_configs(4)
    task = connector.task_class()()
    task.context = Context(offsets)
    task.start(task_config)
    return task


def test_one_record_per_json_array_element_with_a_cursor_resumed_after_a_restart(
    server: tuple[str, Api],
) -> None:
    url, api = server
    config = {
        "topic": "items",
        "http.url": f"{url}/items",
        "http.poll.interval.ms": "0",
        "http.response.split": "array",
        "http.response.records.path": "data.items",
        "http.offset.field": "id",
        "http.offset.param": "since",
        "http.key.field": "id",
    }
    offsets = Offsets()
    task = started(config, offsets)
    batch = task.poll()
    assert isinstance(batch, SourceBatch) and batch.topic == "items"
    assert batch.source_partition == {"url": f"{url}/items"}
    assert batch.table.column("value").to_pylist() == ITEMS
    assert batch.table.column("key").to_pylist() == [1, 2, 3, 4, 5]
    assert batch.source_offset == {"cursor": 5}
    offsets.commit(batch)
    assert task.poll() is None  # nothing newer than id 5
    task.stop()

    api.items.append({"id": 6, "name": "item-6", "price": 9.0})
    restarted = started(config, offsets)
    again = restarted.poll()
    assert again is not None and again.table.column("value").to_pylist() == [api.items[-1]]
    assert api.requests[-1][0] == "/items?since=5"  # the stored cursor, sent to the server


def test_a_cursor_without_a_query_parameter_skips_what_was_seen(
    server: tuple[str, Api],
) -> None:
    url, api = server
    offsets = Offsets()
    offsets.committed[json.dumps({"url": f"{url}/all-items"})] = {"cursor": 4}
    task = started(
        {
            "topic": "items",
            "http.url": f"{url}/all-items",
            "http.poll.interval.ms": "0",
            "http.response.split": "array",
            "http.offset.field": "id",
        },
        offsets,
    )
    batch = task.poll()
    assert batch is not None
    newer = [item["id"] for item in api.items if item["id"] > 4]
    assert [v["id"] for v in batch.table.column("value").to_pylist()] == newer


def test_one_record_per_response_with_the_etag_as_offset(server: tuple[str, Api]) -> None:
    url, api = server
    config = {"topic": "doc", "http.url": f"{url}/doc", "http.poll.interval.ms": "0"}
    offsets = Offsets()
    task = started(config, offsets)
    batch = task.poll()
    assert batch is not None and batch.table.column("value").to_pylist() == [b"version 1"]
    assert batch.source_offset == {"etag": '"v1"'}
    offsets.commit(batch)
    assert task.poll() is None  # a 304
    assert api.requests[-1][1]["If-None-Match"] == '"v1"'

    api.document, api.etag = b"version 2", '"v2"'
    restarted = started(config, offsets)
    changed = restarted.poll()
    assert changed is not None and changed.table.column("value").to_pylist() == [b"version 2"]
    assert changed.source_offset == {"etag": '"v2"'}


def test_the_poll_interval_holds_requests_back_but_poll_returns_promptly(
    server: tuple[str, Api],
) -> None:
    url, api = server
    task = started(
        {"topic": "doc", "http.url": f"{url}/doc", "http.poll.interval.ms": "60000"}, Offsets()
    )
    assert task.poll() is not None
    asked = len(api.requests)
    assert task.poll() is None  # waited up to a second, did not ask again
    assert len(api.requests) == asked


def test_server_errors_are_retriable_and_client_errors_are_not(server: tuple[str, Api]) -> None:
    url, api = server
    api.failures_left = 1
    flaky = started(
        {
            "topic": "t",
            "http.url": f"{url}/flaky",
            "http.poll.interval.ms": "0",
            "http.response.split": "array",
        },
        Offsets(),
    )
    with pytest.raises(RetriableConnectError, match="503"):
        flaky.poll()
    assert api.failures_left == 0  # the server did fail once
    assert flaky.poll() is not None  # and the next poll works
    missing = started(
        {"topic": "t", "http.url": f"{url}/nope", "http.poll.interval.ms": "0"}, Offsets()
    )
    with pytest.raises(ConnectError, match="404") as raised:
        missing.poll()
    assert not isinstance(raised.value, RetriableConnectError)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    closed = started(
        {"topic": "t", "http.url": f"http://127.0.0.1:{port}/", "http.timeout.ms": "2000"},
        Offsets(),
    )
    with pytest.raises(RetriableConnectError, match="failed"):
        closed.poll()


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"topic": "t"}, "http.url"),
        ({"topic": "t", "http.url": "ftp://x"}, "http.url"),
        ({"http.url": "http://x"}, "topic"),
        ({"topic": "t", "http.url": "http://x", "http.response.split": "lines"}, "split"),
        ({"topic": "t", "http.url": "http://x", "http.poll.interval.ms": "-1"}, "interval"),
        ({"topic": "t", "http.url": "http://x", "http.offset.field": "id"}, "offset.field"),
        ({"topic": "t", "http.url": "http://x", "http.request.headers": "oops"}, "headers"),
    ],
)
def test_a_bad_config_names_the_key(config: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidConfigError, match=named):
        HttpSource().validate(config)
