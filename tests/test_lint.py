"""The tree is ruff clean (the project's own rule, checked with the tests)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_is_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.fail("ruff is not installed: pip install '.[test]'")
    result = subprocess.run([ruff, "check", str(ROOT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


RAY_USERS = ("actors/", "transport.py", "data/", "spark/", "cli/")
"""Where raystream may import Ray (the style guide): the actors, the transport (the
clients' and the actors' calls), the integrations and the command line; everything else
is plain Python over handles."""


def test_only_the_actors_transport_and_integrations_import_ray() -> None:
    package = ROOT / "raystream"
    offenders = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative.startswith(RAY_USERS):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if any(name == "ray" or name.startswith("ray.") for name in names):
                offenders.append(f"{relative}:{node.lineno}")
    assert not offenders, f"Ray imported outside {RAY_USERS}: {offenders}"
