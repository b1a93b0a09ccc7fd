"""The Kafka-protocol listener actor: one per Ray node, started by the controller.

A thin shell. It binds the ``listeners`` of the broker config on its node, registers
what it advertises with the controller (which gives it a Kafka broker id, the same for
the node for life), and serves Kafka clients with :class:`~raystream.kafka.server.
KafkaServer`, acting through the :class:`~raystream.kafka.apis.Backend` here: requests
to partition leaders (over the direct path where the leader serves one, so a request
for a leader on this node stays on this node), to the coordinators, and controller
calls. It keeps no state of its own that matters: Ray restarts it after a crash, and
it registers again (every :data:`REGISTER_INTERVAL_S`, so a restarted controller
learns of it too).

With the broker's ``authorizer.class.name`` set, it holds an
:class:`~raystream.security.acls.Authorizer` over the ACLs of the controller's metadata
log, loaded before it binds and refreshed by polling the controller's ACL version every
:data:`ACL_POLL_INTERVAL_S`. A poll rather than a push: the controller (a threaded
actor) would otherwise track every listener's handle across restarts on both sides, and
a poll that finds nothing new is one small call; a change is in force on every listener
within that interval plus a call.

Security: ``SSL`` and ``SASL_SSL`` listeners serve TLS (:mod:`raystream.security.tls`,
each with its own ``listener.name.<name>.ssl.*`` settings where given, reloaded when the
certificate files change, or on :meth:`KafkaListener.reload_tls`);
``SASL_*`` listeners authenticate (:mod:`raystream.security.sasl`) against the SCRAM
credentials the controller keeps, cached here and refreshed at each SASL handshake
when older than :data:`CREDENTIALS_TTL_S` (one cheap call answering "unchanged").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from typing import Any

import ray

from raystream.actors.liveness import actor_node
from raystream.actors.partition_client import PartitionClient
from raystream.config import BrokerConfig
from raystream.errors import BrokerNotAvailableError, RaystreamError
from raystream.groups.offsets_topic import OFFSETS_TOPIC
from raystream.groups.offsets_topic import partition_for as offsets_partition_for
from raystream.kafka.call import Endpoint
from raystream.kafka.data import produce_queues
from raystream.kafka.listeners import (
    SASL_PROTOCOLS,
    TLS_PROTOCOLS,
    ListenerSpec,
    advertised_host,
    bind_host,
    parse_listeners,
)
from raystream.kafka.server import KafkaServer
from raystream.log.producer_state import NO_SEQUENCE
from raystream.protocol import TopicMetadata
from raystream.records import batch_from_table
from raystream.requests import TRANSACTIONAL_OFFSETS_WRITER, ProduceRequest, Request
from raystream.security.acls import Authorizer, audit, parse_super_users
from raystream.security.oauth import load_validator
from raystream.security.principal import certificate_principal, parse_mapping_rules, subject_dn
from raystream.security.quotas import QuotaManager
from raystream.security.sasl import OAUTHBEARER, SaslSession, parse_mechanisms
from raystream.security.scram import CredentialStore, ScramCredential
from raystream.security.tls import TlsConfig
from raystream.transport import CALL_ERRORS, send

logger = logging.getLogger(__name__)

REGISTER_INTERVAL_S = 5.0
"""How often a listener tells the controller it is there (cheap: one small call)."""
BROKERS_TTL_S = 1.0
"""How long the broker list Metadata answers from is reused."""
TXN_OFFSETS_TIMEOUT_MS = 30_000
"""How long a TxnOffsetCommit's write may wait for the ISR."""
ACL_POLL_INTERVAL_S = 0.5
"""How often a listener with the authorizer on asks the controller for newer ACLs."""
QUOTAS_REFRESH_S = 0.5
"""How often a listener asks the controller whether client quotas changed (a small
call answered with nothing when they did not): a change applies within a second."""
CREDENTIALS_TTL_S = 1.0
"""How old the cached SCRAM credentials may be when a SASL handshake starts."""


class KafkaListener:
    """Serves Kafka clients on this node's configured listeners.

    Args:
        namespace: the cluster's namespace (the controller is found there by name).
        listeners: the broker config's ``listeners``.
        advertised_listeners: the broker config's ``advertised_listeners`` (may be empty).
        broker: the broker config's options (the security settings are read from it).
    """

    def __init__(
        self,
        namespace: str,
        listeners: str,
        advertised_listeners: str,
        broker: dict[str, Any] | None = None,
    ) -> None:
        self.namespace = namespace
        self.cluster_id = f"raystream-{namespace}"
        self.broker_id = -1
        self.node = ray.get_runtime_context().get_node_id()
        self._address = ray.util.get_node_ip_address()
        self._config = BrokerConfig.from_kafka(broker or {})
        protocol_map = self._config.listener_security_protocol_map
        self._specs = parse_listeners(listeners, "listeners", protocol_map)
        self._advertised = {
            s.protocol: s
            for s in parse_listeners(advertised_listeners, "advertised_listeners", protocol_map)
        }
        self._tls: list[TlsConfig] = []
        self._credentials = CredentialStore()
        self._credentials_version = -1
        self._credentials_at = 0.0
        self._partitions = PartitionClient(namespace)
        self._servers: list[KafkaServer] = []
        self._coordinators: dict[str, Any] = {}
        self._topic_ids: dict[str, str] = {}
        self._brokers: tuple[float, list[dict[str, Any]], dict[str, int]] | None = None
        self.authorizer: Authorizer | None = None
        self._acl_version: tuple[str, int] | None = None
        self.quotas = QuotaManager()
        self._quotas_version: str | None = None
        # Ray runs an async actor's constructor on its event loop: binding starts now,
        # after a restart by Ray too, with nobody having to ask.
        self._started = asyncio.get_running_loop().create_task(self._start())

    async def ready(self) -> dict[str, Any]:
        """What this listener serves, once it is bound and registered.

        Raises:
            OSError: a listener address could not be bound (e.g. the port is taken).
        """
        await asyncio.shield(self._started)
        return self.describe()

    def describe(self) -> dict[str, Any]:
        """Broker id, node, advertised endpoints, connection counters, and how many
        partitions have produce batches on their way to their leaders now."""
        return {
            "broker_id": self.broker_id,
            "node": self.node,
            "endpoints": self._endpoints(),
            "stats": [s.stats() for s in self._servers],
            "produce_queues": sum(produce_queues(s.backend) for s in self._servers),
        }

    async def _start(self) -> None:
        await self._start_authorizer()
        for spec in self._specs:
            server = self._server_for(spec)
            await server.start()
            self._servers.append(server)
        await self._register()
        self._registering = asyncio.ensure_future(self._keep_registered())
        self._quotas_refresh = asyncio.ensure_future(self._keep_quotas())

    def _server_for(self, spec: ListenerSpec) -> KafkaServer:
        """The server of one listener, with its TLS and SASL as its protocol says."""
        config = self._config
        tls = sasl = cert_principal = None
        if spec.security_protocol in TLS_PROTOCOLS:
            live = TlsConfig(config.tls_settings(spec.name))
            self._tls.append(live)
            tls = live.context
            rules = parse_mapping_rules(
                config.listener_option(spec.name, "ssl.principal.mapping.rules")
            )

            def cert_principal(der: bytes) -> str:
                return certificate_principal(subject_dn(der), rules)

        if spec.security_protocol in SASL_PROTOCOLS:
            mechanisms = parse_mechanisms(config.sasl_enabled_mechanisms)
            validator = None
            if OAUTHBEARER in mechanisms:
                validator = load_validator(
                    config.sasl_oauthbearer_validator_class,
                    config.sasl_oauthbearer_jwks_endpoint_refresh_ms,
                    jwks=config.sasl_oauthbearer_jwks_endpoint_url,
                    audience=config.sasl_oauthbearer_expected_audience,
                    issuer=config.sasl_oauthbearer_expected_issuer,
                    sub_claim=config.sasl_oauthbearer_sub_claim_name,
                )

            def sasl() -> SaslSession:
                return SaslSession(
                    mechanisms,
                    self._lookup_credential,
                    validator,
                    config.connections_max_reauth_ms,
                )

        backend = _ListenerBackend(self, spec.protocol)
        return KafkaServer(
            backend,
            bind_host(spec, self._address),
            spec.port,
            tls,
            sasl,
            cert_principal,
            quotas=self.quotas,
        )

    def reload_tls(self) -> int:
        """Rebuild the TLS contexts from their files now (the admin call of KIP-226's
        dynamic update; a changed file is also picked up by itself at the next
        handshake); how many were rebuilt."""
        return sum(live.reload() for live in self._tls)

    def _lookup_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's SCRAM credential in the cache as it is now: a session holds this,
        not the cache of its connection's start, because :meth:`refresh_credentials`
        (at the session's own handshake) replaces the cache."""
        return self._credentials.lookup(user, mechanism)

    async def refresh_credentials(self) -> None:
        """Fetch the SCRAM credentials from the controller if the cache is older than
        :data:`CREDENTIALS_TTL_S` (the controller answers None when unchanged)."""
        now = time.monotonic()
        if now - self._credentials_at < CREDENTIALS_TTL_S:
            return
        version, found = await self._partitions.controller_call(
            "scram_credentials", self._credentials_version
        )
        if found is not None:
            self._credentials = CredentialStore.from_json(found)
        self._credentials_version, self._credentials_at = version, now

    def _endpoints(self) -> list[dict[str, Any]]:
        endpoints = []
        for spec, server in zip(self._specs, self._servers, strict=False):
            advertised = self._advertised.get(spec.protocol)
            if advertised is not None:
                host, port = advertised_host(advertised, self._address), advertised.port
            else:
                host, port = advertised_host(spec, self._address), server.port
            endpoints.append({"protocol": spec.protocol, "host": host, "port": port})
        return endpoints

    async def _register(self) -> None:
        self.broker_id = await self._partitions.controller_call(
            "register_listener", self.node, self._endpoints()
        )

    async def _start_authorizer(self) -> None:
        """With an authorizer configured, load the ACLs before serving and keep them
        fresh (see the module's docstring)."""
        broker = BrokerConfig.from_kafka(await self._partitions.controller_call("broker_config"))
        if not broker.authorizer_class_name:
            return
        if not audit.handlers:  # the actor's log (Ray keeps its stderr) is the audit log
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
            audit.addHandler(handler)
            audit.setLevel(logging.INFO)
        self.authorizer = Authorizer(
            super_users=parse_super_users(broker.super_users),
            allow_if_no_acl=broker.allow_everyone_if_no_acl_found,
        )
        await self._refresh_acls()
        self._acl_poll = asyncio.ensure_future(self._poll_acls())

    async def _refresh_acls(self) -> None:
        assert self.authorizer is not None
        changed = await self._partitions.controller_call("acls_since", self._acl_version)
        if changed is not None:
            self._acl_version, bindings = changed
            self.authorizer.update(bindings)

    async def _poll_acls(self) -> None:
        while True:
            await asyncio.sleep(ACL_POLL_INTERVAL_S)
            try:
                await self._refresh_acls()
            except RaystreamError as error:
                logger.warning("Kafka listener: reading ACLs from the controller failed: %s", error)

    async def _keep_registered(self) -> None:
        while True:
            await asyncio.sleep(REGISTER_INTERVAL_S)
            try:
                await self._register()
            except RaystreamError as error:
                logger.warning("Kafka listener: registering with the controller failed: %s", error)

    async def _keep_quotas(self) -> None:
        """Keep :attr:`quotas` in step with the controller's client quotas."""
        while True:
            try:
                version, quotas = await self._partitions.controller_call(
                    "client_quotas", self._quotas_version
                )
                if quotas is not None:
                    self.quotas.update(quotas)
                    self._quotas_version = version
            except RaystreamError as error:
                logger.warning("Kafka listener: reading client quotas failed: %s", error)
            await asyncio.sleep(QUOTAS_REFRESH_S)

    # ------------------------------------------------------------------ Backend

    async def send(self, request: Request) -> Any:
        """One attempt at the leader of the request's partition (Kafka clients retry)."""
        return await self._partitions.send_once(request)

    async def send_in_order(self, requests: list[Any]) -> list[Awaitable[Any]]:
        """Each request sent once to its leader, all before this returns, in order."""
        return await self._partitions.send_in_order(requests)

    async def coordinator(self, request: Request) -> Any:
        """``request`` to the group coordinator."""
        return await self._to_coordinator("find_coordinator", request)

    async def transaction_coordinator(self, request: Request) -> Any:
        """``request`` to the transaction coordinator."""
        return await self._to_coordinator("find_transaction_coordinator", request)

    async def coordinator_node(self, transaction: bool) -> str | None:
        """The Ray node of the group (or transaction) coordinator actor, from Ray's
        actor table."""
        handle = await self._coordinator_handle(
            "find_transaction_coordinator" if transaction else "find_coordinator"
        )
        return await asyncio.to_thread(actor_node, handle._actor_id.hex())

    async def _coordinator_handle(self, finder: str) -> Any:
        handle = self._coordinators.get(finder)
        if handle is None:
            handle = self._coordinators[finder] = await self._partitions.controller_call(finder)
        return handle

    async def _to_coordinator(self, finder: str, request: Request) -> Any:
        handle = await self._coordinator_handle(finder)
        try:
            return await asyncio.wrap_future(send(handle, request))
        except CALL_ERRORS as error:
            self._coordinators.pop(finder, None)
            raise BrokerNotAvailableError(f"the coordinator did not answer: {error}") from None

    async def write_txn_offsets(
        self, group_id: str, records: Any, producer_id: int, producer_epoch: int
    ) -> Any:
        """Offsets committed in a Kafka producer's transaction (TxnOffsetCommit), written
        as raystream's own producer writes them: a transactional batch of the producer
        to the group's ``__consumer_offsets`` partition. One attempt (the client
        retries).

        The batch carries no sequence (:data:`~raystream.log.producer_state.NO_SEQUENCE`):
        Kafka clients send none, and Kafka's coordinator appends the offsets without one.
        The partition fences it by epoch and opens the transaction with it; a retry
        writes the same offsets again. So no listener needs to remember anything
        between two commits, and any listener (restarted or on another node) may take
        the next one.
        """
        metadata = await self._partitions.topic_metadata(OFFSETS_TOPIC)
        partition = offsets_partition_for(group_id, len(metadata.partitions))
        batch = batch_from_table(records, metadata.record_schema, None, int(time.time() * 1000))
        return await self._partitions.send_once(
            ProduceRequest(
                OFFSETS_TOPIC,
                partition,
                batch,
                "all",
                TXN_OFFSETS_TIMEOUT_MS,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=NO_SEQUENCE,
                transactional=True,
                internal_writer=TRANSACTIONAL_OFFSETS_WRITER,
            )
        )

    async def controller(self, method: str, *args: Any) -> Any:
        """A controller call's value (its error raised)."""
        return await self._partitions.controller_call(method, *args)

    async def topics(self, names: list[str] | None) -> list[TopicMetadata | RaystreamError]:
        """Fresh metadata of the named topics (None: all visible ones)."""
        if names is None:
            names = await self._partitions.controller_call("list_topics")
        found: list[TopicMetadata | RaystreamError] = []
        for name in names:
            try:
                found.append(await self._partitions.topic_metadata(name, refresh=True))
            except RaystreamError as error:
                found.append(error)
        return found

    async def topic_metadata(self, name: str) -> TopicMetadata:
        """The topic's metadata, cached (refreshed when a leader is found stale)."""
        return await self._partitions.topic_metadata(name)

    async def topic_by_id(self, topic_id: str) -> TopicMetadata | None:
        """The topic with this id (hex): from the cache, else looked up among all
        topics (a miss costs a listing; a deleted topic's id stays a miss)."""
        name = self._topic_ids.get(topic_id)
        if name is None:
            for found in await self.topics(None):
                if isinstance(found, TopicMetadata):
                    self._topic_ids[found.topic_id] = found.name
            name = self._topic_ids.get(topic_id)
            if name is None:
                return None
        try:
            meta = await self._partitions.topic_metadata(name)
        except RaystreamError:
            meta = None
        if meta is None or meta.topic_id != topic_id:  # deleted, or made again
            self._topic_ids.pop(topic_id, None)
            return None
        return meta

    async def brokers(self, name: str = "") -> tuple[list[Endpoint], dict[str, int]]:
        """The live listeners named ``name`` (as brokers: a client is told the
        endpoints of the listener it came in on; empty: the first configured) and the
        broker id of every node, the registry reused for :data:`BROKERS_TTL_S`."""
        now = time.monotonic()
        if self._brokers is None or now - self._brokers[0] > BROKERS_TTL_S:
            listeners, node_ids = await asyncio.gather(  # both at once: a client waits
                self._partitions.controller_call("kafka_listeners"),
                self._partitions.controller_call("kafka_broker_ids"),
            )
            self._brokers = (now, listeners, node_ids)
        name = name or (self._specs[0].protocol if self._specs else "PLAINTEXT")
        endpoints = [
            Endpoint(entry["broker_id"], e["host"], e["port"])
            for entry in self._brokers[1]
            for e in entry["endpoints"]
            if e["protocol"] == name
        ]
        return endpoints, self._brokers[2]

    async def ping(self) -> bool:
        """Liveness check."""
        return True

    async def close(self) -> None:
        """Stop serving (the actor is about to be killed)."""
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.close()


class _ListenerBackend:
    """The listener as the Backend of one of its servers: Metadata names the brokers
    by the endpoints of the listener the client came in on (a SASL_SSL client must be
    sent to SASL_SSL ports); everything else is the listener's."""

    def __init__(self, listener: KafkaListener, name: str) -> None:
        self._listener = listener
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._listener, attribute)

    async def brokers(self) -> tuple[list[Endpoint], dict[str, int]]:
        return await self._listener.brokers(self._name)


KafkaListenerActor = ray.remote(KafkaListener)
"""The listener as a Ray actor class."""
