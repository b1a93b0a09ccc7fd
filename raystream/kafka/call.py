"""What a Kafka API handler is given: the request's :class:`Call` and the
:class:`Backend` it acts through.

Kept apart from the API table (:mod:`raystream.kafka.apis`) so that handler modules
import this and the table imports them. Pure: no Ray here; the listener actor is the
Backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from raystream.dispatch import RequestContext
from raystream.errors import RaystreamError
from raystream.kafka.codec import Header
from raystream.protocol import TopicMetadata
from raystream.requests import Request
from raystream.security.acls import Authorizer

NONE = 0
"""Kafka's error code for success."""
NO_BROKER = -1
"""Kafka's broker id for "none" (no leader, no coordinator)."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A broker as Kafka clients see it: its id and where its listener answers."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None


class Backend(Protocol):
    """What handlers may do: send raystream's typed requests and read metadata.

    Implemented by the listener actor (over Ray and the direct path). Answers are
    :class:`~raystream.protocol.Response` objects carrying Kafka's error codes; a call
    raises only if the target could not be reached at all (a RaystreamError).
    """

    broker_id: int
    cluster_id: str
    authorizer: Authorizer | None
    """The ACLs requests are checked against (None: the authorizer is off)."""

    async def send(self, request: Request) -> Any:
        """``request`` to the leader of its partition; the leader's answer."""

    async def send_in_order(self, requests: list[Request]) -> list[Awaitable[Any]]:
        """Each request to its partition's leader, every one sent before this returns
        and in list order; their awaitable answers (see :meth:`Call.turn`)."""

    async def coordinator(self, request: Request) -> Any:
        """``request`` to the group coordinator; its answer."""

    async def transaction_coordinator(self, request: Request) -> Any:
        """``request`` to the transaction coordinator; its answer."""

    async def write_txn_offsets(
        self, group_id: str, records: Any, producer_id: int, producer_epoch: int
    ) -> Any:
        """Offset commit ``records`` (a table of
        :func:`~raystream.groups.offsets_topic.offset_records`) into the group's
        ``__consumer_offsets`` partition as a batch of the producer's transaction (one
        attempt, acks=all); the leader's answer."""

    async def controller(self, method: str, *args: Any) -> Any:
        """A controller method's answer (a Result's value; its error raised)."""

    async def coordinator_node(self, transaction: bool) -> str | None:
        """The Ray node the group (or transaction) coordinator runs on, starting it if
        needed; None if Ray does not say."""

    async def topics(self, names: list[str] | None) -> list[TopicMetadata | RaystreamError]:
        """Metadata of the named topics (None: every visible topic), an error in place
        of each that cannot be described."""

    async def topic_metadata(self, name: str) -> TopicMetadata:
        """The topic's metadata, cached (produce and fetch read its layout).

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """

    async def topic_by_id(self, topic_id: str) -> TopicMetadata | None:
        """The metadata of the topic whose id (hex) this is, None if there is none
        (Kafka APIs that name topics by id)."""

    async def brokers(self) -> tuple[list[Endpoint], dict[str, int]]:
        """(the live listeners as brokers, the broker id of every Ray node)."""

    async def refresh_credentials(self) -> None:
        """Bring the cached SCRAM credentials up to date if they may be stale."""


@dataclass(frozen=True, slots=True)
class Call:
    """One request being served: its header, who sent it, and the backend to act on.

    A connection's requests are served concurrently (see :mod:`raystream.kafka.server`)
    while Kafka promises that one connection's produce requests are appended in the
    order sent. ``after`` and ``dispatched`` chain them: a handler whose sends must
    keep the connection's order awaits :meth:`turn` (the earlier such request has sent
    its requests on), sends with :meth:`Backend.send_in_order`, then calls
    :meth:`release`; the server releases every other request as it starts.
    """

    header: Header
    context: RequestContext
    backend: Backend
    after: asyncio.Future | None = None
    dispatched: asyncio.Future | None = None
    session: Any = None
    """The connection's :class:`~raystream.security.sasl.SaslSession` on a SASL
    listener (None elsewhere)."""

    async def turn(self) -> None:
        """Wait until the connection's earlier ordered request has sent its requests."""
        if self.after is not None:
            await asyncio.shield(self.after)

    def release(self) -> None:
        """Let the connection's next ordered request send (idempotent)."""
        if self.dispatched is not None and not self.dispatched.done():
            self.dispatched.set_result(None)


Handler = Callable[[Call, Any], Awaitable[Mapping[str, Any] | None]]
"""``async (call, kio request) -> the answer's values (None: no answer)``."""
