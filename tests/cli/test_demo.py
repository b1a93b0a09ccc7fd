"""``raystream demo``, run as a user runs it: a subprocess on an embedded Ray of its own.

A module of its own: the longest single test of the CLI's, it is a unit of work of its
own when the suite runs on two workers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

DEMO_LINE = re.compile(
    r"==> .*|    .*|log kept in .*|every acknowledged order consumed: .*"
    r"|orders of each customer in order: .*|every order processed by the group: .*"
)
"""The demo's own lines: its steps, their indented details, its checks."""


@pytest.mark.slow
def test_the_demo_runs_end_to_end_showing_only_its_own_lines() -> None:
    """Starts its own embedded Ray in a subprocess (the demo's own cluster). Ray's,
    Spark's and the JVM's output goes to the log file the demo names, not between the
    demo's lines. 5,000 orders still see the leader killed mid-stream and a group
    member killed mid-processing; the demo's default volume is not what is tested."""
    result = subprocess.run(
        [sys.executable, "-m", "raystream.cli", "demo", "--orders", "5000", "--partitions", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every acknowledged order consumed:  yes" in result.stdout
    assert "orders of each customer in order:  yes" in result.stdout
    assert "failover: leader" in result.stdout
    rebalanced = result.stdout.split("the group rebalanced:\n")[1].splitlines()[:2]
    held = sorted(line.split(": ")[1] for line in rebalanced)
    assert held == ["orders-0", "orders-1"], rebalanced  # shown once the group settled
    assert "revenue per category" in result.stdout
    assert "Spark on Ray" in result.stdout
    foreign = [line for line in result.stdout.splitlines() if not DEMO_LINE.fullmatch(line)]
    assert foreign == []
    assert result.stderr == ""
    log = re.search(r"^log kept in (\S+)$", result.stdout, re.MULTILINE).group(1)
    try:
        with open(log) as f:
            text = f.read()
        assert "log level" in text  # the Spark JVM's start-up lines went to the log
    finally:
        shutil.rmtree(os.path.dirname(log), ignore_errors=True)
