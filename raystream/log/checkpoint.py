"""Small durable files kept beside a log: written whole, atomically, and fsynced."""

from __future__ import annotations

import os


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
