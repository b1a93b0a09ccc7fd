"""Checkpoint files, the exactly-once wipe rule, and what an LMDB store keeps after a
kill -9 (a real one: a child process kills itself mid-work)."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from raystream.errors import InvalidRequestError
from raystream.streams.stores import (
    CHECKPOINT_FILE,
    KeyValueStore,
    LmdbBackend,
    WindowStore,
    changelog_topic,
    must_wipe_on_open,
    read_checkpoint,
    write_checkpoint,
)

REPO = Path(__file__).resolve().parents[3]


def run_child(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, timeout=120
    )


def test_changelog_topic_is_named_after_application_and_store():
    assert changelog_topic("shop", "counts") == "shop-counts-changelog"
    with pytest.raises(InvalidRequestError, match="store name"):
        changelog_topic("shop", "")


def test_checkpoint_round_trip_and_an_empty_map_removes_the_file(tmp_path):
    assert read_checkpoint(tmp_path) == {}
    write_checkpoint(tmp_path, {"counts": 42, "joins": 0})
    assert read_checkpoint(tmp_path) == {"counts": 42, "joins": 0}
    write_checkpoint(tmp_path, {"counts": 50})
    assert read_checkpoint(tmp_path) == {"counts": 50}
    write_checkpoint(tmp_path, {})
    assert not (tmp_path / CHECKPOINT_FILE).exists()
    assert read_checkpoint(tmp_path) == {}


def test_bad_checkpoints_are_named_errors(tmp_path):
    with pytest.raises(InvalidRequestError, match="offset of store 'a'"):
        write_checkpoint(tmp_path, {"a": -1})
    (tmp_path / CHECKPOINT_FILE).write_text("{torn")
    with pytest.raises(InvalidRequestError, match="unreadable checkpoint"):
        read_checkpoint(tmp_path)


def test_a_kill_during_checkpoint_writes_leaves_a_whole_checkpoint(tmp_path):
    child = run_child(
        f"""
        import os, signal
        from raystream.streams.stores import write_checkpoint
        for i in range(1, 1_000_000):
            write_checkpoint({str(tmp_path)!r}, {{"a": i, "b": 2 * i}})
            if i == 300:
                os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()  # the crash happened
    offsets = read_checkpoint(tmp_path)
    assert offsets["b"] == 2 * offsets["a"] and offsets["a"] >= 299


@pytest.mark.parametrize(
    ("guarantee", "clean", "wipe"),
    [
        ("exactly_once", False, True),
        ("exactly_once", True, False),
        ("at_least_once", False, False),
        ("at_least_once", True, False),
    ],
)
def test_only_exactly_once_without_a_clean_checkpoint_wipes(guarantee, clean, wipe):
    assert must_wipe_on_open(guarantee, clean) is wipe


def test_wipe_rule_names_a_bad_guarantee():
    with pytest.raises(InvalidRequestError, match="processing_guarantee"):
        must_wipe_on_open("exactly_twice", True)


def test_an_lmdb_store_killed_mid_work_holds_exactly_its_last_flush(tmp_path):
    """The disk has the state of the last flush, every segment together: nothing of the
    writes after it, even those already in a segment, and no partial batch."""
    child = run_child(
        f"""
        import os, signal
        from raystream.streams.stores import KeyValueStore, LmdbBackend, WindowStore
        kv = KeyValueStore("kv", LmdbBackend({str(tmp_path / "kv")!r}))
        win = WindowStore("win", LmdbBackend({str(tmp_path / "win")!r}), 10**9, 10,
                          segment_interval_ms=100)
        for i in range(1000):
            kv.put(i, i)
            win.put("k", i, i * 10)
        kv.flush(); win.flush()
        kv.put_all((i, -1) for i in range(2000))
        for i in range(1000, 2000):
            win.put("k", i, i * 10)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()  # the crash happened
    kv = KeyValueStore("kv", LmdbBackend(tmp_path / "kv"))
    assert list(kv.all()) == [(i, i) for i in range(1000)]
    win = WindowStore("win", LmdbBackend(tmp_path / "win"), 10**9, 10, segment_interval_ms=100)
    assert list(win.fetch("k", 0, 10**6)) == [(i * 10, i) for i in range(1000)]
    kv.close()
    win.close()


def test_a_restart_restores_only_from_the_checkpointed_offset(tmp_path):
    """The task's loop as the runtime runs it: drain the changelog to the topic, flush,
    checkpoint the topic's end offset. After a kill -9, replaying the topic from the
    checkpoint onto what is on disk gives the state of the whole topic."""
    topic = tmp_path / "topic.pickle"
    child = run_child(
        f"""
        import os, pickle, signal
        from raystream.streams.stores import KeyValueStore, LmdbBackend, write_checkpoint
        store = KeyValueStore("counts", LmdbBackend({str(tmp_path / "counts")!r}))
        topic = []
        for i in range(500):
            store.put(i % 37, (store.get(i % 37) or 0) + 1)
            if i % 100 == 99:  # a commit
                topic += store.drain_changelog()
                store.flush()
                write_checkpoint({str(tmp_path)!r}, {{"counts": len(topic)}})
        store.put("late", 1)  # processed after the last commit, then the crash
        topic += store.drain_changelog()
        open({str(topic)!r}, "wb").write(pickle.dumps(topic))
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()  # the crash happened
    records = pickle.loads(topic.read_bytes())
    offset = read_checkpoint(tmp_path)["counts"]
    assert 0 < offset < len(records)
    store = KeyValueStore("counts", LmdbBackend(tmp_path / "counts"))
    assert store.get("late") is None  # not flushed, so not on disk
    store.restore(records[offset:])
    full = KeyValueStore("full", LmdbBackend(tmp_path / "full"))
    full.restore(records)
    assert list(store.all()) == list(full.all())
    assert store.get("late") == 1 and sum(v for k, v in store.all() if k != "late") == 500
    store.close()
    full.close()
