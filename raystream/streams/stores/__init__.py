"""State stores for streams tasks: key-value, window and session stores.

Each store is local to one task and keeps bytes in a sorted engine, in memory
(:class:`MemoryBackend`) or on disk (:class:`LmdbBackend`), under one contract. Every
change is recorded for the store's compacted changelog topic
``<application_id>-<store>-changelog`` (``drain_changelog()``); a task that moves rebuilds
its stores from that changelog (``restore(records)``) before it processes anything,
starting at the offset of the task's checkpoint file. A task's table stores may sit
behind its record cache (:class:`TaskCache`), which folds a key's updates between commits.
"""

from raystream.streams.stores.base import Store
from raystream.streams.stores.cache import CachingStore, TaskCache
from raystream.streams.stores.changelog import (
    CHECKPOINT_FILE,
    ChangelogRecord,
    changelog_topic,
    must_wipe_on_open,
    read_checkpoint,
    write_checkpoint,
)
from raystream.streams.stores.engine import Backend, Engine, LmdbBackend, MemoryBackend
from raystream.streams.stores.kv import KeyValueStore
from raystream.streams.stores.session import SessionStore
from raystream.streams.stores.view import (
    ReadOnlyKeyValueView,
    ReadOnlySessionView,
    ReadOnlyWindowView,
    read_only,
)
from raystream.streams.stores.window import WindowStore

__all__ = [
    "CHECKPOINT_FILE",
    "Backend",
    "CachingStore",
    "ChangelogRecord",
    "Engine",
    "KeyValueStore",
    "LmdbBackend",
    "MemoryBackend",
    "ReadOnlyKeyValueView",
    "ReadOnlySessionView",
    "ReadOnlyWindowView",
    "SessionStore",
    "Store",
    "TaskCache",
    "WindowStore",
    "changelog_topic",
    "must_wipe_on_open",
    "read_checkpoint",
    "read_only",
    "write_checkpoint",
]
