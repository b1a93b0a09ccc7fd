"""The suite's package-scoped fixtures end when the run leaves their directory.

``tests/`` is no importable package, so without ``conftest.PackageTeardown`` pytest would
keep such a fixture (a cluster, a Spark session) until the session ends. Checked on a
small tree of its own, run by a real pytest in a subprocess.
"""

from __future__ import annotations

import pathlib

import pytest

pytest_plugins = ["pytester"]

CONFTEST = pathlib.Path(__file__).with_name("conftest.py")

PACKAGE_CONFTEST = """
import pytest

@pytest.fixture(scope="package")
def resource(request):
    log = request.config.rootpath / "log.txt"
    with log.open("a") as f:
        f.write("up\\n")
    yield
    with log.open("a") as f:
        f.write("down\\n")
"""


def test_a_directorys_package_fixture_ends_when_the_run_leaves_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('suite_conftest', {str(CONFTEST)!r})\n"
        "suite = sys.modules['suite_conftest'] = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(suite)\n"
        "pytest_configure = suite.pytest_configure\n"
    )
    step = (
        "def test_{name}({fixture}request):\n"
        "    with (request.config.rootpath / 'log.txt').open('a') as f:\n"
        "        f.write('{name}\\n')\n"
    )
    for directory, names, fixture in (("a", "1 2", "resource, "), ("b", "3", "")):
        path = pytester.path / directory
        path.mkdir()
        if fixture:
            (path / "conftest.py").write_text(PACKAGE_CONFTEST)
        for name in names.split():
            (path / f"test_{name}.py").write_text(step.format(name=name, fixture=fixture))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "a/test_1.py", "b", "a/test_2.py"
    )
    result.assert_outcomes(passed=3)
    log = (pytester.path / "log.txt").read_text().split()
    # Up for a's test, down before b's, up again when the run returns to a.
    assert log == ["up", "1", "down", "3", "up", "2", "down"]
