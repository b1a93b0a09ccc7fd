"""Error tolerance: bad rows isolated by bisection, retries on a fake clock, and dead
letter rows carrying Kafka's ``__connect.errors.*`` headers."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raystream.connectors.converters import JsonConverter
from raystream.connectors.tolerance import (
    ERROR_HEADERS,
    ErrorPolicy,
    apply_tolerant,
    dead_letter_batch,
)
from raystream.errors import ConnectError, InvalidConfigError, RetriableConnectError
from raystream.records import HEADERS_TYPE

PROPERTY = settings(derandomize=True, max_examples=40, deadline=None)
ALL = ErrorPolicy(tolerance="all")


def raw_batch(values: list[bytes | None]) -> pa.Table:
    n = len(values)
    return pa.table(
        {
            "topic": ["orders"] * n,
            "partition": pa.array([2] * n, pa.int32()),
            "offset": pa.array(range(100, 100 + n), pa.int64()),
            "timestamp": pa.array([1000] * n, pa.int64()),
            "key": pa.array([b"k%d" % i for i in range(n)]),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array([[{"key": "h", "value": b"v"}]] * n, HEADERS_TYPE),
        }
    )


class ParseValues:
    """A value-converter stage, as the runtime runs it; counts its calls."""

    def __init__(self) -> None:
        self.converter = JsonConverter({"schemas.enable": "false"})
        self.calls = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        self.calls += 1
        column = batch.column("value").combine_chunks()
        return batch.set_column(5, "value", self.converter.to_connect(column))


def test_error_policy_reads_kafkas_keys_with_kafkas_defaults() -> None:
    assert ErrorPolicy.from_config({}) == ErrorPolicy()
    assert not ErrorPolicy().tolerates_all
    policy = ErrorPolicy.from_config(
        {
            "errors.tolerance": "all",
            "errors.retry.timeout": "-1",
            "errors.retry.delay.max.ms": "500",
            "errors.log.enable": "true",
            "errors.deadletterqueue.topic.name": "dlq",
            "errors.deadletterqueue.context.headers.enable": "true",
        }
    )
    assert policy.tolerates_all and policy.retry_timeout_ms == -1
    assert policy.deadletterqueue_topic_name == "dlq"
    assert policy.deadletterqueue_context_headers_enable and policy.log_enable


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"errors.tolerance": "some"}, "errors.tolerance"),
        ({"errors.retry.timeout": "soon"}, "errors.retry.timeout"),
        ({"errors.retry.timeout": "-5"}, "errors.retry.timeout"),
        ({"errors.log.enable": "yes"}, "errors.log.enable"),
        ({"errors.retry.delay.max.ms": "-1"}, "errors.retry.delay.max.ms"),
    ],
)
def test_a_bad_errors_setting_names_the_key(config: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidConfigError, match=named.replace(".", r"\.")):
        ErrorPolicy.from_config(config)


def test_the_happy_path_is_one_call() -> None:
    stage = ParseValues()
    out, failures = apply_tolerant(ALL, "VALUE_CONVERTER", stage, raw_batch([b'{"a": 1}'] * 50))
    assert stage.calls == 1 and not failures and out.num_rows == 50


def test_tolerance_none_fails_on_the_first_bad_row() -> None:
    rows = [b'{"a": 1}', b'{"a": 2}', b"{bad", b'{"a": 4}']
    with pytest.raises(
        ConnectError, match=r"VALUE_CONVERTER failed in .*ParseValues at orders-2@102"
    ):
        apply_tolerant(ErrorPolicy(), "VALUE_CONVERTER", ParseValues(), raw_batch(rows))


def test_tolerance_all_isolates_the_bad_rows_by_bisection() -> None:
    rows = [b'{"a": %d}' % i for i in range(64)]
    rows[5] = b"{not json"
    rows[40] = b'{"a": '
    stage = ParseValues()
    out, failures = apply_tolerant(ALL, "VALUE_CONVERTER", stage, raw_batch(rows))
    assert [f.index for f in failures] == [5, 40]
    assert [f.row.column("offset")[0].as_py() for f in failures] == [105, 140]
    assert all(f.stage == "VALUE_CONVERTER" and "ParseValues" in f.class_name for f in failures)
    assert out.column("offset").to_pylist() == [100 + i for i in range(64) if i not in (5, 40)]
    assert out.schema.field("value").type == pa.struct([("a", pa.int64())])
    assert stage.calls < 30  # ~2 k log2(n/k) + 2, not one call per row


def test_all_rows_bad_gives_an_empty_output() -> None:
    out, failures = apply_tolerant(ALL, "VALUE_CONVERTER", ParseValues(), raw_batch([b"{"] * 3))
    assert out.num_rows == 0 and len(failures) == 3


@PROPERTY
@given(bad=st.lists(st.booleans(), min_size=1, max_size=80))
def test_bisection_finds_exactly_the_bad_rows_and_keeps_the_rest_in_order(
    bad: list[bool],
) -> None:
    rows = [b"{oops" if is_bad else b'{"n": %d}' % i for i, is_bad in enumerate(bad)]
    out, failures = apply_tolerant(ALL, "VALUE_CONVERTER", ParseValues(), raw_batch(rows))
    assert [f.index for f in failures] == [i for i, is_bad in enumerate(bad) if is_bad]
    assert [v["n"] for v in out.column("value").to_pylist()] == [
        i for i, is_bad in enumerate(bad) if not is_bad
    ]


class FlakyStage:
    """Fails retriably ``failures`` times, then works."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        self.calls += 1
        if self.calls <= self.failures:
            raise RetriableConnectError("target busy")
        return batch


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_retriable_failures_are_retried_with_a_capped_doubling_backoff() -> None:
    time = FakeTime()
    policy = ErrorPolicy(retry_timeout_ms=10_000, retry_delay_max_ms=1_000)
    stage = FlakyStage(4)
    out, failures = apply_tolerant(
        policy, "TASK_PUT", stage, raw_batch([b"x"]), clock=time.clock, sleep=time.sleep
    )
    assert out.num_rows == 1 and not failures
    assert time.sleeps == [0.3, 0.6, 1.0, 1.0]


def test_retries_stop_at_the_timeout() -> None:
    time = FakeTime()
    policy = ErrorPolicy(retry_timeout_ms=2_000)
    with pytest.raises(ConnectError, match="target busy"):
        apply_tolerant(
            policy,
            "TASK_PUT",
            FlakyStage(100),
            raw_batch([b"x"]),
            clock=time.clock,
            sleep=time.sleep,
        )
    assert sum(time.sleeps) == pytest.approx(2.0)
    with pytest.raises(ConnectError):  # errors.retry.timeout=0 (Kafka's default): no retry
        apply_tolerant(ErrorPolicy(), "TASK_PUT", FlakyStage(1), raw_batch([b"x"]))


def test_a_retriable_error_outlasting_the_retries_fails_every_row_without_bisecting() -> None:
    time = FakeTime()
    stage = FlakyStage(1000)
    policy = ErrorPolicy(tolerance="all", retry_timeout_ms=1_000)
    out, failures = apply_tolerant(
        policy,
        "TRANSFORMATION",
        stage,
        raw_batch([b"a", b"b", b"c"]),
        clock=time.clock,
        sleep=time.sleep,
    )
    assert out.num_rows == 0 and [f.index for f in failures] == [0, 1, 2]
    assert sum(time.sleeps) == pytest.approx(1.0)  # one round of retries, not one per slice


def test_failures_are_logged_when_errors_log_enable(caplog: pytest.LogCaptureFixture) -> None:
    policy = ErrorPolicy(tolerance="all", log_enable=True, log_include_messages=True)
    with caplog.at_level(logging.ERROR, logger="raystream.connectors.tolerance"):
        apply_tolerant(policy, "VALUE_CONVERTER", ParseValues(), raw_batch([b"{", b"1"]))
    assert "VALUE_CONVERTER" in caplog.text and "'offset': 100" in caplog.text


def test_dead_letter_rows_keep_the_record_and_say_why_in_kafkas_headers() -> None:
    rows = [b'{"a": 1}', b"{broken", b'{"a": 3}']
    _, failures = apply_tolerant(ALL, "VALUE_CONVERTER", ParseValues(), raw_batch(rows))
    dlq = dead_letter_batch(failures, "orders-sink", 2)
    assert dlq.num_rows == 1
    row = dlq.to_pylist()[0]
    assert row["key"] == b"k1" and row["value"] == b"{broken" and row["timestamp"] == 1000
    headers = {h["key"]: h["value"] for h in row["headers"]}
    assert headers["h"] == b"v"  # the record's own headers first
    assert set(ERROR_HEADERS) <= set(headers)
    assert headers["__connect.errors.topic"] == b"orders"
    assert headers["__connect.errors.partition"] == b"2"
    assert headers["__connect.errors.offset"] == b"101"
    assert headers["__connect.errors.connector.name"] == b"orders-sink"
    assert headers["__connect.errors.task.id"] == b"2"
    assert headers["__connect.errors.stage"] == b"VALUE_CONVERTER"
    assert b"ParseValues" in headers["__connect.errors.class.name"]
    assert headers["__connect.errors.exception.class.name"] == b"raystream.errors.ConnectError"
    assert b"JsonConverter" in headers["__connect.errors.exception.message"]
    assert b"Traceback" in headers["__connect.errors.exception.stacktrace"]
    plain = dead_letter_batch(failures, "orders-sink", 2, context_headers=False)
    assert plain.column("headers").to_pylist() == [[{"key": "h", "value": b"v"}]]


def test_dead_letter_rows_of_a_transform_failure_hold_the_value_as_json() -> None:
    batch = raw_batch([b"x"]).set_column(5, "value", pa.array([{"a": 1}]))

    def fail(table: pa.Table) -> pa.Table:
        raise ConnectError("no")

    _, failures = apply_tolerant(ALL, "TRANSFORMATION", fail, batch, class_name="my.Smt")
    assert failures[0].class_name == "my.Smt"
    assert dead_letter_batch(failures, "c", 0).column("value").to_pylist() == [b'{"a":1}']
    as_consumed = dead_letter_batch(failures, "c", 0, originals=raw_batch([b"x"]))
    assert as_consumed.column("value").to_pylist() == [b"x"]
