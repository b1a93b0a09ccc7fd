"""Fixtures of the connector tests: real target systems, started once per session.

PostgreSQL (``postgres``, ``postgres_db``): Debian's PostgreSQL server, initialized in a
temporary directory and started on a free loopback port with logical replication on
(``wal_level=logical``), so the PostgreSQL connectors' tests, change data capture
included, run against the real server. ``initdb`` refuses to run as root, so as root the
server runs as the ``postgres`` user. Nothing is skipped: a machine without PostgreSQL
fails the fixture with a message that says what to install.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import itertools
import os
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


def _postgres_bin_dir() -> Path:
    """The directory of ``initdb`` and ``pg_ctl``: on PATH, else Debian's versioned one."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if candidates:
        return Path(candidates[-1]).parent
    pytest.fail(
        "PostgreSQL is not installed (no initdb on PATH nor in /usr/lib/postgresql/*/bin): "
        "the PostgreSQL connector tests need the server, e.g. `apt-get install postgresql`"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_postgres(argv: list[str]) -> list[str]:
    """``argv`` run as the ``postgres`` user when we are root (``initdb`` refuses root)."""
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


def _run(argv: list[str], what: str) -> None:
    result = subprocess.run(_as_postgres(argv), capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        pytest.fail(f"PostgreSQL {what} failed ({result.returncode}): {result.stderr.strip()}")


@pytest.fixture(scope="package")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the package's tests, logical replication enabled;
    stopped by its pid after them (a fast shutdown, then its directory removed)."""
    bin_dir = _postgres_bin_dir()
    data_dir = Path(tempfile.mkdtemp(prefix="raystream-pg-"))
    if os.geteuid() == 0:
        shutil.chown(data_dir, "postgres", "postgres")
    port = _free_port()
    pgdata = data_dir / "data"
    _run(
        [str(bin_dir / "initdb"), "-D", str(pgdata), "-U", "postgres", "-A", "trust", "-E", "UTF8"],
        "initdb",
    )
    options = " ".join(
        [
            "-c listen_addresses=127.0.0.1",
            f"-c port={port}",
            f"-c unix_socket_directories={data_dir}",
            "-c wal_level=logical",
            "-c max_replication_slots=20",
            "-c max_wal_senders=10",
            "-c fsync=off",  # a test server: durability across an OS crash is not tested
            "-c shared_buffers=32MB",
            "-c max_connections=100",
        ]
    )
    log = data_dir / "server.log"
    _run(
        [str(bin_dir / "pg_ctl"), "-D", str(pgdata), "-l", str(log), "-o", options, "-w", "start"],
        "start",
    )
    pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    try:
        yield PostgresServer(host="127.0.0.1", port=port, data_dir=pgdata, pid=pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)  # PostgreSQL's "fast" shutdown
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(data_dir, ignore_errors=True)


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
