"""The examples run as they are, each in its own process on the embedded default
(``rs.connect()`` starting a local Ray), with a fresh home directory for its data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, home: Path) -> str:
    env = dict(os.environ, HOME=str(home), RAY_ADDRESS="local")  # never a running cluster
    env["PYTHONPATH"] = os.pathsep.join(
        [str(EXAMPLES.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result.stdout


def test_quickstart_produces_and_consumes(tmp_path: Path) -> None:
    out = run_example("quickstart.py", tmp_path)
    lines = [line for line in out.splitlines() if line.startswith("partition ")]
    assert sorted(line.rsplit(": ", 1)[1] for line in lines) == sorted(
        f"hello {i}" for i in range(10)
    )


@pytest.mark.slow
def test_spark_analytics_writes_window_totals(tmp_path: Path) -> None:
    out = run_example("spark_analytics.py", tmp_path)
    assert "window_start" in out and "revenue" in out
    written = int(out.split(" window totals written")[0].rsplit("\n", 1)[-1])
    assert 60 <= written <= 70  # 12-13 five-minute windows x 5 categories


@pytest.mark.slow
def test_ml_pipeline_scores_every_transaction(tmp_path: Path) -> None:
    out = run_example("ml_pipeline.py", tmp_path)
    assert "scored 20000 transactions" in out
    flagged = int(out.split(" flagged")[0].rsplit(", ", 1)[-1])
    assert 0 < flagged < 20000


@pytest.mark.slow
def test_consumer_group_actors_count_every_click_once(tmp_path: Path) -> None:
    out = run_example("consumer_group_actors.py", tmp_path)
    members = [line for line in out.splitlines() if line.startswith("member ")]
    assert len(members) == 4 and all("partitions []" not in line for line in members)
    per_user = [line for line in out.splitlines() if line.startswith("user-")]
    assert sorted(per_user) == [f"user-{i}: 1250 clicks" for i in range(8)]
    assert "10000 clicks counted, 10000 in topic 'clicks'" in out


@pytest.mark.slow
def test_streams_revenue_matches_the_batch_answer(tmp_path: Path) -> None:
    out = run_example("streams_revenue.py", tmp_path)
    assert "revenue of 2000 orders matches the batch answer: NOT_RUNNING" in out
    assert len([line for line in out.splitlines() if line.startswith("minute ")]) >= 3
