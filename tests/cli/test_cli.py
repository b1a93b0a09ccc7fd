"""The ``raystream`` command line against a real cluster on the session's Ray.

``up``/``down`` run as real subprocesses attached to the session's Ray by address; the
other commands run in-process through ``main()``, which attaches the same way.
"""

from __future__ import annotations

import io
import itertools
import os
import subprocess
import sys

import pytest
import ray

from raystream.actors import CONTROLLER_NAME
from raystream.cli import main
from raystream.log.checkpoint import lock_directory

_names = itertools.count()


@pytest.fixture
def cli(local_ray, tmp_path):
    """Run ``raystream --namespace <unique> ...`` in-process; ``up`` first, ``down`` after."""
    namespace = f"cli-{next(_names)}"
    address = ray.get_runtime_context().gcs_address
    data_dir = str(tmp_path / "data")
    # ``up`` remembers data dirs under HOME: keep the user's file out of the tests, but
    # let Ray find its authentication token where it made it.
    env = {**os.environ, "HOME": str(tmp_path)}
    token = os.path.expanduser("~/.ray/auth_token")
    if os.path.exists(token):
        env.setdefault("RAY_AUTH_TOKEN_PATH", token)

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "raystream.cli",
                "--address",
                address,
                "--namespace",
                namespace,
                *args,
            ],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )

    up = run("up", "--data-dir", data_dir)
    assert up.returncode == 0, up.stderr
    assert "raystream is up" in up.stdout

    def call(*args: str) -> int:
        return main(["--namespace", namespace, *args])

    call.run = run
    call.data_dir = data_dir
    yield call
    run("down")


def test_topics_lifecycle_through_the_cli(cli, capsys) -> None:
    assert (
        cli("topics", "create", "events", "--partitions", "2", "--config", "retention.ms=60000")
        == 0
    )
    assert "created topic events with 2 partitions" in capsys.readouterr().out
    assert cli("topics", "list") == 0
    assert capsys.readouterr().out.split() == ["events"]
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
    assert "topics:      1 (3 partitions, 3 replicas)" in capsys.readouterr().out
    assert cli("topics", "delete", "events") == 0
    assert "deleted topic events" in capsys.readouterr().out
    assert cli("topics", "list") == 0
    assert "events" not in capsys.readouterr().out.split()


def test_produce_from_stdin_and_consume_from_the_beginning(cli, capsys, monkeypatch) -> None:
    assert cli("topics", "create", "lines") == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO("k1:first\nk2:second\nthird\n"))
    assert cli("produce", "lines", "--key-separator", ":") == 0
    capsys.readouterr()
    assert cli("consume", "lines", "--from-beginning", "--max-messages", "3") == 0
    assert capsys.readouterr().out.splitlines() == ["first", "second", "third"]


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


def test_down_then_up_keeps_topics_and_records(cli, capsys, monkeypatch) -> None:
    assert cli("topics", "create", "kept", "--config", "retention.ms=99000") == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO("one\ntwo\n"))
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


@pytest.mark.slow
def test_the_demo_runs_end_to_end() -> None:
    """Starts its own embedded Ray in a subprocess (the demo's own cluster)."""
    result = subprocess.run(
        [sys.executable, "-m", "raystream.cli", "demo", "--orders", "20000", "--partitions", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every acknowledged order consumed:  yes" in result.stdout
    assert "orders of each customer in order:  yes" in result.stdout
    assert "failover: leader" in result.stdout
    assert "revenue per category" in result.stdout
