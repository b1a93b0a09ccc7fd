"""A MirrorMaker flow as a Ray actor: a thin shell around ``raystream.mirror.runner``.

One actor per flow ``source -> target``, named ``mirror:<source>-><target>`` in the
namespace of the raystream cluster it runs in (how ``raystream mirror status`` finds
the flows, in every namespace). It runs
the flow's loop on a thread of its own, so ``status`` and ``stop`` answer while it
mirrors. Ray restarts a crashed actor (``max_restarts``): the new runner resumes from
the source offsets stored in the target, and under exactly-once its producer fences the
old one's transaction.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import ray

from raystream.mirror.runner import FAILED, FlowRunner

logger = logging.getLogger(__name__)

ACTOR_PREFIX = "mirror:"
STOP_TIMEOUT_S = 30.0


def flow_actor_name(flow_name: str) -> str:
    """The Ray actor name of flow ``flow_name`` (``<source>-><target>``)."""
    return f"{ACTOR_PREFIX}{flow_name}"


class MirrorWorkerShell:
    """Builds the flow's runner and runs it on a thread.

    Args:
        config: the flow's MM2 connector config.
    """

    def __init__(self, config: dict[str, str]) -> None:
        self.runner = FlowRunner(config)
        self.thread = threading.Thread(target=self._run, name="mirror", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.runner.open()
        except Exception as error:  # shown by status(); the flow does not start
            self.runner.fail(error)
            return
        self.runner.run()

    def ready(self) -> bool:
        """Whether the flow's connectors and tasks started (False while starting; its
        error is raised by ``status()`` when the start failed)."""
        return self.runner.source_task is not None or self.runner.state == FAILED

    def status(self) -> dict[str, Any]:
        return self.runner.status()

    def stop(self) -> None:
        """End the loop, stop tasks and connectors, close clients."""
        self.runner.stop()
        self.thread.join(timeout=STOP_TIMEOUT_S)
        self.runner.close()


MirrorWorkerActor = ray.remote(max_concurrency=4)(MirrorWorkerShell)
