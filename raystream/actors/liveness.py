"""Ray's own word on whether an actor is alive: faster than any timeout, free at rest.

A call to an actor that Ray is restarting neither answers nor fails until the restart
is done, so a caller that only waits sees a crash as mere slowness. Ray's actor table
knows better. Two ways to read it:

- :func:`actor_state` asks once (the group coordinator, for member consumers that run
  inside Ray actors and miss heartbeats; the controller, to resynchronize);
- :class:`ActorStateWatch` is told: it subscribes to the GCS's actor channel, where
  Ray publishes every actor's state change (the channel Ray's dashboard follows), and
  hands each change to a callback. The controller watches its replicas this way: a
  crash reaches it within milliseconds, and a cluster at rest costs nothing, however
  many replicas it has (the subscription is one long poll that the GCS answers only
  when an actor changes state).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from raystream.controller.liveness import DOWN_STATES
from raystream.retry import Backoff

logger = logging.getLogger(__name__)

RESUBSCRIBE_BACKOFF_MS = (100, 2000)
"""First and longest pause before subscribing again after the subscription failed (the
GCS restarting, say), growing as :class:`~raystream.retry.Backoff` does."""


def actor_state(actor_id: str) -> str | None:
    """Ray's state of an actor ("ALIVE", "RESTARTING", "DEAD", ...), None if unknown.

    ``actor_id`` is the hex id. Read from the GCS actor table through
    ``ray._private.state``: the public ``ray.util.state`` API needs the dashboard,
    which embedded clusters do not start.
    """
    from ray._private import state

    try:
        info = state.actors(actor_id=actor_id)
    except Exception:  # the lookup only speeds detection up; timeouts still apply
        return None
    return info.get("State") if isinstance(info, dict) else None


def actor_node(actor_id: str) -> str | None:
    """The hex id of the Ray node an actor runs on, None if unknown (read as
    :func:`actor_state` reads the state)."""
    from ray._private import state

    try:
        info = state.actors(actor_id=actor_id)
    except Exception:  # callers fall back to a node of their own
        return None
    address = info.get("Address") if isinstance(info, dict) else None
    return address.get("NodeID") if isinstance(address, dict) else None


def is_down(actor_id: str) -> bool:
    """Whether Ray reports the actor crashed (being restarted, or gone for good)."""
    return actor_state(actor_id) in DOWN_STATES


class ActorStateWatch:
    """Every actor state change in the Ray cluster, as it happens, on a thread of its own.

    ``on_change(actor_id, state)`` gets the hex id and Ray's state name ("ALIVE",
    "RESTARTING", "DEAD", ...) of each change, for every actor of the cluster (the
    caller keeps those it cares about). ``on_resync()`` is called once the subscription
    stands, first and again after every re-subscription: changes made while it was down
    were not seen, so the caller reads the states it needs afresh (:func:`actor_state`).

    Built on ``ray._private.gcs_pubsub`` (what Ray's dashboard uses to follow actors);
    the public ``ray.util.state`` API polls instead and needs the dashboard.
    Thread-safety: both callbacks run on the watch's thread.
    """

    def __init__(
        self,
        gcs_address: str,
        on_change: Callable[[str, str], None],
        on_resync: Callable[[], None],
    ) -> None:
        self._gcs_address = gcs_address
        self._on_change = on_change
        self._on_resync = on_resync
        self._loop = asyncio.new_event_loop()
        self._stopped: asyncio.Event | None = None
        self._thread = threading.Thread(
            target=self._loop.run_until_complete,
            args=(self._run(),),
            name="raystream-actor-watch",
            daemon=True,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the subscription and the thread."""
        if self._thread.is_alive() and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(timeout_s)

    async def _run(self) -> None:
        from ray._private.gcs_pubsub import GcsAioActorSubscriber
        from ray.core.generated import gcs_pb2

        state_name = gcs_pb2.ActorTableData.ActorState.Name
        self._stopped = asyncio.Event()
        backoff = Backoff(*RESUBSCRIBE_BACKOFF_MS)
        while not self._stopped.is_set():
            subscriber = GcsAioActorSubscriber(address=self._gcs_address)
            try:
                await subscriber.subscribe()
                self._on_resync()
                backoff.reset()
                while not self._stopped.is_set():
                    polled = asyncio.ensure_future(subscriber.poll(batch_size=1000))
                    stop = asyncio.ensure_future(self._stopped.wait())
                    await asyncio.wait([polled, stop], return_when=asyncio.FIRST_COMPLETED)
                    stop.cancel()
                    if not polled.done():
                        polled.cancel()
                        break
                    changes = polled.result()
                    if not changes:  # the poll failed (GCS away): subscribe again
                        break
                    for actor_id, data in changes:
                        self._on_change(actor_id.hex(), state_name(data.state))
            except Exception:  # the GCS restarting, say: subscribe again after a pause
                logger.warning("actor state subscription failed; subscribing again")
            finally:
                await subscriber.close()
            if not self._stopped.is_set():
                await asyncio.sleep(backoff.next_s())
