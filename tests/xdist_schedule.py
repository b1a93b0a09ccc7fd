"""How ``pytest -n 2 --dist loadscope`` shares the suite between two workers.

Each worker has a Ray of its own. A worker takes a whole package at a time (a module,
for the files at the top of ``tests/``), so package- and module-wide clusters (Spark's,
the Kafka listener's) start once. Most tests wait on actors, timers and rebalances, so
one pytest process leaves part of the two cores idle.

The tests that stop their worker's Ray for a Ray of their own (in the modules of
:data:`SOLO_PATHS`, which the conftest checks) run as one unit, last, on one worker
while the other has stopped: two multi-node clusters side by side (119 replica
processes on two cores) timed the fail-over tests out, and their fail-over targets are
measured against a quiet machine.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScopeScheduling

SOLO = "own_ray"
# Where the tests that need a Ray of their own live (a package, or a module at the top).
# The controller that schedules sees only test ids, so they are named here; the
# conftest refuses a run where such a test sits elsewhere.
SOLO_PATHS = ("tests/replication/", "tests/test_cluster_yaml_autoscaler.py")


def scope_of(nodeid: str) -> str:
    """The unit a worker takes: the solo unit, else the test's package under ``tests/``
    (or its module, for a file at the top)."""
    if nodeid.startswith(SOLO_PATHS):
        return SOLO
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


class SoloLastScheduling(LoadScopeScheduling):
    """Load-scope scheduling by package, with the solo unit handed out last, to a
    worker once every other worker is idle, and the others then stopped."""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)

    def _assign_work_unit(self, node: Any) -> None:
        scope = next((s for s in self.workqueue if s != SOLO), None)
        if scope is None:
            others = [n for n in self.nodes if n is not node]
            # A worker keeps the last test it was given until it gets more or is
            # stopped: one pending test means idle.
            if any(self._pending_of(self.assigned_work[n]) > 1 for n in others):
                return  # the last busy worker takes it when its work runs out
            for other in others:
                if not other.shutting_down:
                    other.shutdown()
            scope = SOLO
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some(
            [collection.index(nodeid) for nodeid, done in work_unit.items() if not done]
        )
