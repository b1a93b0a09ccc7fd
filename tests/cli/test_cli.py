"""The ``raystream`` command line against a real cluster on the session's Ray.

``up``/``down`` run as real subprocesses attached to the session's Ray by address; the
other commands run in-process through ``main()``, which attaches the same way.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import ray

from raystream.actors import CONTROLLER_NAME
from raystream.cli import main
from raystream.client.cluster import attach
from raystream.log.checkpoint import lock_directory

_names = itertools.count()


def _runner(namespace: str, home: str) -> Any:
    """``run(*args, stdin="")``: ``raystream --address <session Ray> --namespace ...`` as
    a real subprocess (``python -m raystream``, the command as the README runs it)."""
    address = ray.get_runtime_context().gcs_address
    # ``up`` remembers data dirs under HOME: keep the user's file out of the tests, but
    # let Ray find its authentication token where it made it.
    env = {**os.environ, "HOME": home}
    token = os.path.expanduser("~/.ray/auth_token")
    if os.path.exists(token):
        env.setdefault("RAY_AUTH_TOKEN_PATH", token)

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "raystream", "--address", address]
        return subprocess.run(
            [*command, "--namespace", namespace, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )

    run.env = env
    run.address = address
    return run


def _up(namespace: str, directory: Any) -> Any:
    """``raystream up`` in a subprocess; returns the in-process ``call(*args)``."""
    run = _runner(namespace, str(directory))
    data_dir = str(directory / "data")
    up = run("up", "--data-dir", data_dir)
    assert up.returncode == 0, up.stderr
    assert "raystream is up" in up.stdout

    def call(*args: str) -> int:
        return main(["--namespace", namespace, *args])

    call.run = run
    call.data_dir = data_dir
    call.namespace = namespace
    return call


@pytest.fixture(scope="module")
def cli(start_local_ray, tmp_path_factory) -> Iterator[Any]:
    """One ``raystream up`` for the module (tests use topics of their own): run
    ``raystream --namespace <it> ...`` in-process with ``cli(...)``, as a subprocess
    with ``cli.run(...)``; ``down`` at the end."""
    start_local_ray()
    call = _up(f"cli-{os.getpid()}-{next(_names)}", tmp_path_factory.mktemp("cli"))
    yield call
    call.run("down")


@pytest.fixture
def own_cli(local_ray, tmp_path) -> Iterator[Any]:
    """A cluster of the test's own (for a test that brings it down)."""
    call = _up(f"cli-{os.getpid()}-{next(_names)}", tmp_path)
    yield call
    call.run("down")


def _stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))


def test_topics_lifecycle_through_the_cli(cli, capsys) -> None:
    assert (
        cli("topics", "create", "events", "--partitions", "2", "--config", "retention.ms=60000")
        == 0
    )
    assert "created topic events with 2 partitions" in capsys.readouterr().out
    assert cli("topics", "list") == 0
    assert "events" in capsys.readouterr().out.split()
    assert cli("topics", "describe", "events") == 0
    out = capsys.readouterr().out
    assert '"retention.ms": 60000' in out
    assert "partition 1: leader 0 replicas [0] isr [0]" in out
    assert (
        cli("topics", "alter", "events", "--partitions", "3", "--config", "retention.ms=1000") == 0
    )
    out = capsys.readouterr().out
    assert "partition 2:" in out and '"retention.ms": 1000' in out
    assert cli("status") == 0
    assert "topic events (3 partitions)" in capsys.readouterr().out
    assert cli("topics", "delete", "events") == 0
    assert "deleted topic events" in capsys.readouterr().out
    assert cli("topics", "list") == 0
    assert "events" not in capsys.readouterr().out.split()


def test_produce_from_stdin_and_consume_from_the_beginning(cli, capsys, monkeypatch) -> None:
    assert cli("topics", "create", "lines") == 0
    _stdin(monkeypatch, "k1:first\nk2:second\nthird\n")
    assert cli("produce", "lines", "--key-separator", ":", "--allow-keyless") == 0
    assert "produced 3 records to lines" in capsys.readouterr().err
    assert cli("consume", "lines", "--from-beginning", "--max-messages", "3") == 0
    assert capsys.readouterr().out.splitlines() == ["first", "second", "third"]
    args = ["--property", "print.key=true", "--property", "key.separator=|"]
    assert cli("consume", "lines", "--from-beginning", "--max-messages", "3", *args) == 0
    assert capsys.readouterr().out.splitlines() == ["k1|first", "k2|second", "null|third"]


def test_produce_refuses_a_line_without_the_key_separator(cli, capsys, monkeypatch) -> None:
    assert cli("topics", "create", "keyed") == 0
    _stdin(monkeypatch, "k1:first\nno separator here\nk3:third\n")
    assert cli("produce", "keyed", "--key-separator", ":") == 1
    err = capsys.readouterr().err
    assert "error: line 2: InvalidRecordError: no key separator ':'" in err
    assert "produced 2 of 3 records to keyed; 1 failed" in err
    assert cli("consume", "keyed", "--from-beginning", "--timeout-ms", "1500") == 0
    assert capsys.readouterr().out.splitlines() == ["first", "third"]


def test_produce_reports_each_failed_send_and_exits_non_zero(cli, capsys, monkeypatch) -> None:
    """Sends that really fail: a record over the topic's max.message.bytes (refused by
    the broker, reported through its future) and a partition that does not exist
    (refused by send itself)."""
    assert cli("topics", "create", "small", "--config", "max.message.bytes=4000") == 0
    _stdin(monkeypatch, "ok\n" + "x" * 20_000 + "\n")
    assert cli("produce", "small") == 1
    err = capsys.readouterr().err
    assert "error: line 2: RecordTooLargeError" in err
    assert "failed" in err.splitlines()[-1]
    _stdin(monkeypatch, "a\nb\n")
    assert cli("produce", "small", "--partition", "5") == 1
    err = capsys.readouterr().err
    assert "error: line 1: PartitionOutOfRangeError" in err
    assert "error: line 2: PartitionOutOfRangeError" in err
    assert "produced 0 of 2 records to small; 2 failed" in err


def test_consume_into_a_closed_pipe_ends_quietly(cli, monkeypatch) -> None:
    """``raystream consume ... | head -n 1``: the reader goes away, the next line meets
    a closed pipe, and the command ends at once with status 0 and nothing on stderr."""
    assert cli("topics", "create", "piped") == 0
    _stdin(monkeypatch, "one\n")
    assert cli("produce", "piped") == 0
    command = [sys.executable, "-m", "raystream.cli", "--address", cli.run.address]
    command += ["--namespace", cli.namespace, "consume", "piped", "--from-beginning"]
    consumer = subprocess.Popen(
        [*command, "--timeout-ms", "120000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli.run.env,
    )
    try:
        assert consumer.stdout.readline() == b"one\n"
        consumer.stdout.close()  # as head does after its line
        _stdin(monkeypatch, "two\n")
        assert cli("produce", "piped") == 0
        _, err = consumer.communicate(timeout=60)  # long before the 120 s idle timeout
    finally:
        consumer.kill()
    assert consumer.returncode == 0, err.decode()
    assert err.decode() == ""


def test_python_dash_m_raystream_is_the_raystream_command() -> None:
    """``python -m raystream`` runs the command line as ``python -m raystream.cli`` does
    (the fixtures' ``up`` and ``down`` subprocesses run through it too)."""
    runs = [
        subprocess.run(
            [sys.executable, "-m", module, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        for module in ("raystream", "raystream.cli")
    ]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    assert runs[0].stdout.startswith("usage: raystream ")
    assert "{up,down,status,topics," in runs[0].stdout
    assert runs[0].stdout == runs[1].stdout


def test_a_command_against_an_address_where_nothing_listens_fails_within_the_timeout(
    tmp_path,
) -> None:
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    command = [sys.executable, "-m", "raystream.cli", "--address", f"127.0.0.1:{port}"]
    result = subprocess.run(
        [*command, "--connect-timeout", "2", "topics", "list"],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert result.returncode == 1
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in result.stderr
    assert time.monotonic() - started < 60  # Python and Ray's import included


def test_consume_prints_what_the_print_properties_ask_for(cli, capsys, monkeypatch) -> None:
    assert cli("topics", "create", "printed", "--partitions", "2") == 0
    _stdin(monkeypatch, "trace:t1,team:a\tk1=v1\n\tk2=v2\n")
    args = ["--key-separator", "=", "--parse-headers", "--header", "source=cli", "--acks", "1"]
    assert cli("produce", "printed", *args, "--partition", "1") == 0
    capsys.readouterr()
    properties = [
        f"print.{name}=true" for name in ("timestamp", "partition", "offset", "headers", "key")
    ]
    args = [item for p in properties for item in ("--property", p)]
    assert cli("consume", "printed", "--from-beginning", "--max-messages", "2", *args) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [line[1:] for line in lines] == [
        ["Partition:1", "Offset:0", "source:cli,trace:t1,team:a", "k1", "v1"],
        ["Partition:1", "Offset:1", "source:cli", "k2", "v2"],
    ]
    assert all(re.fullmatch(r"CreateTime:\d{13}", line[0]) for line in lines)
    assert cli("consume", "printed", "--property", "print.nothing=true") == 1
    assert "unknown --property 'print.nothing'" in capsys.readouterr().err


def test_consume_one_partition_from_an_offset(cli, capsys, monkeypatch) -> None:
    assert cli("topics", "create", "positioned", "--partitions", "2") == 0
    _stdin(monkeypatch, "a\nb\nc\n")
    assert cli("produce", "positioned", "--partition", "1") == 0
    _stdin(monkeypatch, "elsewhere\n")
    assert cli("produce", "positioned", "--partition", "0") == 0
    capsys.readouterr()
    args = ["--partition", "1", "--offset", "1", "--max-messages", "2"]
    assert cli("consume", "positioned", *args, "--property", "print.offset=true") == 0
    assert capsys.readouterr().out.splitlines() == ["Offset:1\tb", "Offset:2\tc"]
    assert cli("consume", "positioned", "--offset", "1") == 1
    assert "--offset needs --partition" in capsys.readouterr().err
    assert cli("consume", "positioned", "--partition", "7") == 1
    assert "partition 7 of topic 'positioned' does not exist" in capsys.readouterr().err


def test_consume_read_committed_skips_an_aborted_transaction(cli, capsys) -> None:
    assert cli("topics", "create", "txn") == 0
    cluster = attach(cli.namespace, cli.data_dir)
    producer = cluster.producer(transactional_id=f"cli-txn-{os.getpid()}")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("txn", b"aborted")
    producer.flush()
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send("txn", b"committed")
    producer.commit_transaction()
    producer.close()
    capsys.readouterr()
    args = ["--from-beginning", "--timeout-ms", "1500"]
    assert cli("consume", "txn", *args, "--isolation-level", "read_committed") == 0
    assert capsys.readouterr().out.splitlines() == ["committed"]
    assert cli("consume", "txn", *args, "--isolation-level", "read_uncommitted") == 0
    assert capsys.readouterr().out.splitlines() == ["aborted", "committed"]


def test_a_typed_topic_takes_and_prints_json_values(cli, capsys, monkeypatch) -> None:
    cluster = attach(cli.namespace, cli.data_dir)
    schema = pa.schema([("name", pa.string()), ("amount", pa.float64()), ("at", pa.date32())])
    cluster.admin().create_topic("typed", schema=schema)
    _stdin(monkeypatch, '{"name": "a", "amount": 1.5}\nnot json\n["a list"]\n')
    assert cli("produce", "typed") == 1
    err = capsys.readouterr().err
    assert "error: line 2: InvalidRecordError: the value is not JSON" in err
    assert "error: line 3: InvalidRecordError: a typed topic's value is a JSON object" in err
    assert cli("consume", "typed", "--from-beginning", "--max-messages", "1") == 0
    assert json.loads(capsys.readouterr().out) == {"name": "a", "amount": 1.5, "at": None}


def test_list_and_describe_commands_print_json(cli, capsys, monkeypatch) -> None:
    assert cli("topics", "create", "described", "--partitions", "2") == 0
    _stdin(monkeypatch, "a\n")
    assert cli("produce", "described") == 0
    args = ["--group", "json-group", "--from-beginning", "--max-messages", "1"]
    assert cli("consume", "described", *args) == 0
    capsys.readouterr()
    assert cli("topics", "list", "--output", "json") == 0
    assert "described" in json.loads(capsys.readouterr().out)
    assert cli("topics", "describe", "described", "--output", "json") == 0
    topic = json.loads(capsys.readouterr().out)
    assert topic["name"] == "described" and len(topic["partitions"]) == 2
    assert sum(p["high_watermark"] for p in topic["partitions"]) == 1
    assert cli("groups", "list", "--output", "json") == 0
    assert "json-group" in json.loads(capsys.readouterr().out)
    assert cli("groups", "describe", "json-group", "--output", "json") == 0
    group = json.loads(capsys.readouterr().out)
    assert group["group_id"] == "json-group"
    assert sum(p["offset"] for p in group["partitions"]) == 1
    assert cli("status", "--output", "json") == 0
    status = json.loads(capsys.readouterr().out)
    assert "described" in [t["name"] for t in status["topic_descriptions"]]


STATUS_TOPICS = (
    r"^topics: +(\d+) \((\d+) partitions?, (\d+) replicas?\)"
    r"; internal: (\d+) \((\d+) partitions?, (\d+) replicas?\)$"
)
"""``raystream status``'s line of topic figures, user topics then internal ones."""


def test_status_counts_user_topics_in_every_figure_and_internal_ones_apart(
    cli, capsys, monkeypatch
) -> None:
    """The topics, partitions and replicas figures count the same topics, those
    ``topics list`` shows (the offsets topic was once in the partitions and replicas but
    not the topics); internal topics, here the offsets topic a group's commit needs,
    are counted apart."""
    assert cli("topics", "create", "counted", "--partitions", "3") == 0
    _stdin(monkeypatch, "a\n")
    assert cli("produce", "counted", "--allow-keyless") == 0
    args = ["--group", "counting-group", "--from-beginning", "--max-messages", "1"]
    assert cli("consume", "counted", *args) == 0
    capsys.readouterr()
    assert cli("status", "--output", "json") == 0
    status = json.loads(capsys.readouterr().out)
    partitions = [p for d in status["topic_descriptions"] for p in d["partitions"]]
    assert status["topics"] == len(status["topic_descriptions"])
    assert status["partitions"] == len(partitions)
    assert status["replicas"] == sum(len(p["replicas"]) for p in partitions)
    assert status["internal_topics"] >= 1
    assert cli("status") == 0
    line = re.search(STATUS_TOPICS, capsys.readouterr().out, re.MULTILINE)
    assert line is not None
    assert [int(n) for n in line.groups()] == [
        status[key]
        for key in (
            "topics",
            "partitions",
            "replicas",
            "internal_topics",
            "internal_partitions",
            "internal_replicas",
        )
    ]


def _committed(cli, capsys, group: str) -> dict[str, int]:
    capsys.readouterr()
    assert cli("groups", "describe", group, "--output", "json") == 0
    rows = json.loads(capsys.readouterr().out)["partitions"]
    return {f"{r['topic']}-{r['partition']}": r["offset"] for r in rows}


def test_reset_offsets_dry_runs_unless_execute(cli, capsys, monkeypatch) -> None:
    for topic in ("reset-a", "reset-b"):
        assert cli("topics", "create", topic) == 0
        _stdin(monkeypatch, "1\n2\n3\n4\n")
        assert cli("produce", topic) == 0
        args = ["--group", "resetters", "--from-beginning", "--max-messages", "4"]
        assert cli("consume", topic, *args) == 0
    assert _committed(cli, capsys, "resetters") == {"reset-a-0": 4, "reset-b-0": 4}
    assert cli("groups", "reset-offsets", "resetters", "--topic", "reset-a", "--to-earliest") == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "reset-a-0" in out
    assert _committed(cli, capsys, "resetters") == {"reset-a-0": 4, "reset-b-0": 4}
    args = ["--all-topics", "--shift-by", "-3", "--execute"]
    assert cli("groups", "reset-offsets", "resetters", *args) == 0
    assert _committed(cli, capsys, "resetters") == {"reset-a-0": 1, "reset-b-0": 1}
    args = ["--topic", "reset-a", "--shift-by", "-5", "--execute", "--output", "json"]
    assert cli("groups", "reset-offsets", "resetters", *args) == 0
    plan = json.loads(capsys.readouterr().out)  # clamped to the log start, as Kafka does
    assert plan["executed"] and plan["offsets"] == [
        {"topic": "reset-a", "partition": 0, "current": 1, "new": 0}
    ]
    args = ["--all-topics", "--to-current", "--output", "json"]
    assert cli("groups", "reset-offsets", "resetters", *args) == 0
    assert [o["new"] for o in json.loads(capsys.readouterr().out)["offsets"]] == [0, 1]
    assert cli("groups", "reset-offsets", "nobody", "--all-topics", "--to-latest") == 1
    assert "has no committed offsets" in capsys.readouterr().err


def test_delete_records_moves_the_log_start_offset(cli, capsys, monkeypatch) -> None:
    assert cli("topics", "create", "trimmed") == 0
    _stdin(monkeypatch, "0\n1\n2\n3\n4\n")
    assert cli("produce", "trimmed") == 0
    capsys.readouterr()
    assert cli("topics", "delete-records", "trimmed", "--offset", "3") == 0
    assert "trimmed-0: log start offset 3" in capsys.readouterr().out
    assert cli("consume", "trimmed", "--from-beginning", "--max-messages", "2") == 0
    assert capsys.readouterr().out.splitlines() == ["3", "4"]
    assert cli("topics", "delete-records", "trimmed", "--offset", "6") == 1
    assert "OffsetOutOfRangeError" in capsys.readouterr().err
    assert cli("topics", "delete-records", "trimmed", "--offset", "-1") == 0
    assert "trimmed-0: log start offset 5" in capsys.readouterr().out
    assert cli("topics", "describe", "trimmed", "--output", "json") == 0
    assert json.loads(capsys.readouterr().out)["partitions"][0]["log_start_offset"] == 5


def test_leader_election_and_reassign_partitions(cli, capsys, tmp_path) -> None:
    assert cli("topics", "create", "placed", "--partitions", "2") == 0
    capsys.readouterr()
    assert cli("leader-election", "--topic", "placed") == 0
    assert "0 partitions moved" in capsys.readouterr().out
    assert cli("leader-election", "--all-topic-partitions", "--output", "json") == 0
    assert json.loads(capsys.readouterr().out)["partitions_moved"] == 0
    node = ray.get_runtime_context().get_node_id()
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps({"partitions": [{"topic": "placed", "partition": 1, "replicas": [node]}]})
    )
    assert cli("reassign-partitions", "--reassignment-json-file", str(plan)) == 0
    out = capsys.readouterr().out
    assert f"placed-1: nodes ['{node}'] -> ['{node}']" in out and "dry run" in out
    args = ["--reassignment-json-file", str(plan), "--execute", "--output", "json"]
    assert cli("reassign-partitions", *args) == 0
    assert json.loads(capsys.readouterr().out)["partitions"][0]["replicas"] == [0]
    plan.write_text('{"partitions": [{"topic": "placed", "partition": 1}]}')
    assert cli("reassign-partitions", "--reassignment-json-file", str(plan)) == 1
    assert "needs a topic, a partition and replicas" in capsys.readouterr().err


WIDE = 16


@pytest.mark.slow
def test_a_wide_topic_shows_its_progress_and_takes_every_record_back(cli, capsys, read_all) -> None:
    """Sixteen partitions: enough for several progress lines at Ray's start-up window (four
    workers per core here); issue 17's 100-partition figures are bench_scale's."""
    assert cli("topics", "create", "wide", "--partitions", str(WIDE)) == 0
    captured = capsys.readouterr()
    assert f"created topic wide with {WIDE} partitions" in captured.out
    started = [
        int(n) for n in re.findall(rf"topic wide: (\d+)/{WIDE} replicas started", captured.err)
    ]
    assert len(started) >= 2 and started == sorted(started) and started[-1] == WIDE, captured.err
    cluster = attach(cli.namespace, cli.data_dir)
    sent = [f"{p}-{i}".encode() for p in range(WIDE) for i in range(20)]
    with cluster.producer(linger_ms=5) as producer:
        for value in sent:
            producer.send("wide", value=value, partition=int(value.split(b"-")[0]))
    assert sorted(read_all(cluster, "wide", "read_uncommitted", partitions=WIDE)) == sorted(sent)
    assert cli("topics", "delete", "wide") == 0


def test_bad_input_is_one_line_naming_the_problem(cli, capsys) -> None:
    assert cli("topics", "create", "bad name") == 1
    assert "InvalidTopicError" in capsys.readouterr().err
    assert cli("topics", "create", "t", "--partitions", "0") == 1
    assert "partitions must be >= 1, not 0" in capsys.readouterr().err
    assert cli("topics", "create", "t", "--config", "retention.ms") == 1
    assert "not of the form key=value" in capsys.readouterr().err
    assert cli("topics", "describe", "missing") == 1
    assert "'missing' does not exist" in capsys.readouterr().err
    assert cli("groups", "describe", "nobody") == 1
    assert "GroupIdNotFoundError" in capsys.readouterr().err
    assert cli("produce", "missing", "--acks", "2") == 1
    assert "--acks '2' must be 0, 1, all or -1" in capsys.readouterr().err


def test_down_then_up_keeps_topics_and_records(own_cli, capsys, monkeypatch) -> None:
    cli = own_cli
    assert cli("topics", "create", "kept", "--config", "retention.ms=99000") == 0
    _stdin(monkeypatch, "one\ntwo\n")
    assert cli("produce", "kept") == 0
    down = cli.run("down")
    assert down.returncode == 0, down.stderr
    assert "data stays" in down.stdout
    up = cli.run("up")  # the data dir of the last ``up`` is remembered
    assert up.returncode == 0, up.stderr
    assert cli.data_dir in up.stdout
    capsys.readouterr()
    assert cli("topics", "describe", "kept") == 0
    assert '"retention.ms": 99000' in capsys.readouterr().out
    assert cli("consume", "kept", "--from-beginning", "--max-messages", "2") == 0
    assert capsys.readouterr().out.splitlines() == ["one", "two"]


def test_up_refuses_bad_input_before_starting_anything(local_ray, tmp_path, capsys) -> None:
    """A mistyped ``up`` leaves nothing running: the config is checked before Ray is
    touched, the data dir before a controller starts (and, with no Ray to attach to,
    before a Ray head starts)."""
    namespace = f"cli-{next(_names)}"
    assert main(["--namespace", namespace, "up", "--config", "retention.mss=5"]) == 1
    assert "InvalidConfigError: unknown BrokerConfig key 'retention.mss'" in (
        capsys.readouterr().err
    )
    server = tmp_path / "server.properties"  # Kafka's habit: the broker's settings in a file
    server.write_text("# broker settings\nlisteners = PLAINTEXT://127.0.0.1:0\nlog.dirs /var/x\n")
    assert main(["--namespace", namespace, "up", "--config-file", str(server)]) == 1
    assert "InvalidConfigError: unknown BrokerConfig key 'log.dirs'" in capsys.readouterr().err
    held = tmp_path / "held"
    lock = lock_directory(str(held), 0)
    try:
        assert main(["--namespace", namespace, "up", "--data-dir", str(held)]) == 1
    finally:
        os.close(lock)
    assert f"LogDirInUseError: data dir {held} is in use" in capsys.readouterr().err
    with pytest.raises(ValueError):
        ray.get_actor(CONTROLLER_NAME, namespace=namespace)


def test_commands_without_a_cluster_say_how_to_start_one(local_ray, capsys) -> None:
    assert main(["--namespace", "nobody-here", "topics", "list"]) == 1
    assert "raystream up" in capsys.readouterr().err
