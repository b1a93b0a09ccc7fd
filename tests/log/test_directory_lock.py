"""The lock that keeps a data directory to one process (Kafka's log-directory lock)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from raystream.errors import LogDirInUseError
from raystream.log.checkpoint import lock_directory

HOLDER = (
    "import sys, time\n"
    "from raystream.log.checkpoint import lock_directory\n"
    "lock_directory(sys.argv[1])\n"
    "print('held', flush=True)\n"
    "time.sleep(120)\n"
)


def test_a_directory_has_one_holder_until_it_lets_go(tmp_path) -> None:
    directory = str(tmp_path / "data")
    fd = lock_directory(directory)
    with pytest.raises(LogDirInUseError, match=f"{directory} is in use by another process"):
        lock_directory(directory)
    os.close(fd)
    os.close(lock_directory(directory))


def test_the_lock_ends_with_its_process_even_a_killed_one(tmp_path) -> None:
    directory = str(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, directory], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LogDirInUseError):
            lock_directory(directory)
    finally:
        holder.kill()
        holder.wait(30)
    os.close(lock_directory(directory))


def test_a_waiting_lock_is_taken_once_its_holder_lets_go(tmp_path) -> None:
    directory = str(tmp_path)
    fd = lock_directory(directory)
    threading.Timer(0.3, os.close, (fd,)).start()
    os.close(lock_directory(directory, wait_s=10))
