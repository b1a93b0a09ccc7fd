"""What a built raystream package holds: the PEP 561 marker that lets type checkers
(mypy, pyright) read the package's hints."""

from __future__ import annotations

import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_carries_a_py_typed_marker() -> None:
    assert files("raystream").joinpath("py.typed").is_file()


@pytest.mark.slow
def test_a_built_package_ships_py_typed(tmp_path: Path) -> None:
    # build_py lays out exactly the files a wheel of the project gets (package data
    # included); egg_info goes to tmp_path so the checkout stays clean.
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import setuptools; setuptools.setup()",
            "-q",
            "egg_info",
            "--egg-base",
            str(tmp_path),
            "build_py",
            "--build-lib",
            str(tmp_path / "lib"),
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    built = tmp_path / "lib" / "raystream"
    assert (built / "client" / "producer.py").is_file()
    assert (built / "py.typed").is_file()
