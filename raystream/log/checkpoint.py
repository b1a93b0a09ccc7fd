"""Small files kept beside a log: checkpoints written whole, atomically, and fsynced;
and the lock file that keeps a directory to one process."""

from __future__ import annotations

import fcntl
import os
import time

from raystream.errors import LogDirInUseError

LOCK_FILE = ".lock"
"""The file whose exclusive lock marks a directory as in use (Kafka's name)."""


def fsync_directory(directory: str) -> None:
    """Make file creations, renames and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` so that a crash leaves the old or the new file."""
    temp = path + ".tmp"
    with open(temp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    fsync_directory(os.path.dirname(path) or ".")


def read_int(path: str, default: int) -> int:
    """The integer stored in a one-number checkpoint file, or ``default``."""
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (FileNotFoundError, ValueError):
        return default


def lock_directory(directory: str, wait_s: float = 0.0) -> int:
    """Take ``directory``'s exclusive lock, creating the directory if needed.

    Returns the descriptor that holds the lock: closing it releases the lock, and so
    does the end of the process, however it ends (a kill included), so a lock never
    outlives its holder. Waits up to ``wait_s`` for a holder that is letting go (a
    process still exiting).

    Raises:
        LogDirInUseError: another open of the lock file holds it (another process).
    """
    os.makedirs(directory, exist_ok=True)
    deadline = time.monotonic() + wait_s
    fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise LogDirInUseError(f"{directory} is in use by another process") from None
            time.sleep(0.2)
