"""Fixtures for the state-store tests: every store test runs on both backends.

As Quix Streams does, one contract suite is parametrized over the backends: ``memory``
(a sorted map in the process) and ``lmdb`` (on ``tmp_path``, real disk). The stores are a
plain library, so these tests never start Ray: an autouse fixture makes ``ray.init``
raise.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from raystream.streams.stores import Backend, LmdbBackend, MemoryBackend

BACKENDS = ["memory", "lmdb"]


class BackendFactory:
    """Opens backends of one kind; ``open(name)`` again gives the same data back
    (in memory: the same object; on disk: the same directory, reopened)."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.root = root
        self._memory: dict[str, MemoryBackend] = {}
        self._open: list[Backend] = []

    def __call__(self, name: str = "store") -> Backend:
        if self.kind == "memory":
            return self._memory.setdefault(name, MemoryBackend())
        backend = LmdbBackend(self.root / name, map_size_bytes=1 << 30)
        self._open.append(backend)
        return backend

    def close_all(self) -> None:
        for backend in self._open:
            backend.close()


@pytest.fixture(params=BACKENDS)
def backend_factory(request, tmp_path) -> Iterator[BackendFactory]:
    factory = BackendFactory(request.param, tmp_path)
    yield factory
    factory.close_all()


@pytest.fixture
def backend(backend_factory) -> Callable[[], Backend]:
    return backend_factory()


@pytest.fixture(autouse=True)
def _no_ray(monkeypatch):
    """Pure-logic tests must not start Ray: ``ray.init`` raises if called."""
    if importlib.util.find_spec("ray") is None:
        yield
        return
    import ray

    def refuse(*args, **kwargs):
        raise AssertionError("tests/streams/stores are pure: ray.init must not be called")

    monkeypatch.setattr(ray, "init", refuse)
    yield
