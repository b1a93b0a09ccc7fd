"""Changelog plumbing of the stores: topic names, the task checkpoint, the wipe rule.

Every store records each change as a :data:`ChangelogRecord` ``(key_bytes, value_bytes
or None)``; the task drains them (``store.drain_changelog()``) and writes them to the
store's compacted changelog topic (a ``None`` value is a tombstone). A task that takes a
store over replays that topic into it (``store.restore(records)``), starting at the
offset its checkpoint file holds for the store.

The checkpoint is Kafka Streams' ``.checkpoint``: one file per task directory mapping
each store to the changelog offset its on-disk state covers (the offset of the next
record to restore). It is written after the stores are flushed, atomically (written to a
temporary file, fsynced, renamed over the old one, the directory fsynced), so a crash
leaves the old file or the new one, never a torn one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from raystream.errors import InvalidRequestError

__all__ = [
    "CHECKPOINT_FILE",
    "ChangelogRecord",
    "changelog_topic",
    "must_wipe_on_open",
    "read_checkpoint",
    "write_checkpoint",
]

ChangelogRecord = tuple[bytes, bytes | None]
"""One change of a store: the key bytes and the value bytes, ``None`` for a delete."""

CHECKPOINT_FILE = ".checkpoint"
_VERSION = 1


def changelog_topic(application_id: str, store_name: str) -> str:
    """The compacted topic that backs ``store_name``: ``<application_id>-<store>-changelog``."""
    if not application_id or not store_name:
        raise InvalidRequestError(
            f"changelog topic needs an application id and a store name, got "
            f"{application_id!r} and {store_name!r}"
        )
    return f"{application_id}-{store_name}-changelog"


def read_checkpoint(task_dir: str | os.PathLike[str]) -> dict[str, int]:
    """The store -> changelog offset map of the task directory; empty if there is none.

    Raises:
        InvalidRequestError: the file exists but is not a checkpoint this code wrote.
    """
    path = Path(task_dir) / CHECKPOINT_FILE
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return {}
    try:
        doc = json.loads(text)
        if doc["version"] != _VERSION:
            raise ValueError(f"version {doc['version']!r}")
        offsets = {str(k): int(v) for k, v in doc["offsets"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise InvalidRequestError(f"unreadable checkpoint file {path}: {e}") from e
    return offsets


def write_checkpoint(task_dir: str | os.PathLike[str], offsets: dict[str, int]) -> None:
    """Replace the task's checkpoint with ``offsets``, atomically and durably.

    An empty map removes the file (no store has a clean state to start from), which is
    how a task marks its stores dirty while it runs under exactly-once.
    """
    directory = Path(task_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CHECKPOINT_FILE
    for store, offset in offsets.items():
        if not isinstance(offset, int) or offset < 0:
            raise InvalidRequestError(f"checkpoint offset of store {store!r} is {offset!r}")
    if not offsets:
        path.unlink(missing_ok=True)
    else:
        tmp = directory / (CHECKPOINT_FILE + ".tmp")
        data = json.dumps({"version": _VERSION, "offsets": dict(sorted(offsets.items()))})
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def must_wipe_on_open(processing_guarantee: str, has_clean_checkpoint: bool) -> bool:
    """Whether a store must be emptied and restored from offset 0 when a task opens it.

    Under ``exactly_once`` a store on disk without a checkpoint entry may hold writes of
    a transaction that was aborted (the task crashed before its commit), which the
    changelog never committed; replaying from any offset would keep them, so the store
    is wiped and rebuilt from the whole changelog (Kafka Streams does the same). Under
    ``at_least_once`` such writes are harmless duplicates: restore from the checkpoint
    (or from the start) over what is there.
    """
    if processing_guarantee not in ("at_least_once", "exactly_once"):
        raise InvalidRequestError(
            f"processing_guarantee must be 'at_least_once' or 'exactly_once', got "
            f"{processing_guarantee!r}"
        )
    return processing_guarantee == "exactly_once" and not has_clean_checkpoint
