"""The controller actor: owner of cluster metadata and of the replica actors.

One per namespace, detached and named, restarted by Ray when it dies. It keeps every
topic's state (:class:`~raystream.controller.metadata.TopicState`) in a compacted
metadata log on its node's disk, so a restarted controller (or ``raystream up`` after
``raystream down``) finds every topic again, and it finds or re-creates each replica
actor, which recovers its own log from disk. The same log holds the end of the
reserved block of producer ids, so ids handed to idempotent producers never repeat.

The controller is off the data path: clients cache the leaders' handles it hands out
and talk to replicas directly, so produce and fetch continue while it restarts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raystream.actors.coordinator import COORDINATOR_NAME, GroupCoordinatorActor
from raystream.actors.liveness import ActorStateWatch, actor_state
from raystream.actors.replica import ReplicaActor
from raystream.actors.txn_coordinator import (
    TRANSACTION_COORDINATOR_NAME,
    TransactionCoordinatorActor,
)
from raystream.config import BrokerConfig
from raystream.controller.liveness import DOWN_STATES, HUNG_RESTART_S, Liveness
from raystream.controller.metadata import (
    PartitionState,
    TopicState,
    check_not_internal,
    is_internal,
    topic_counts,
    validate_count,
    validate_topic_name,
)
from raystream.controller.placement import (
    check_capacity,
    is_spread,
    place_replicas,
    rebind_restarted_nodes,
    replica_limits,
)
from raystream.controller.producer_ids import ProducerIdBlocks
from raystream.errors import (
    BrokerNotAvailableError,
    FencedLeaderEpochError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    LogDirInUseError,
    RaystreamError,
    RaystreamTimeoutError,
    SecurityDisabledError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raystream.groups.offsets_topic import OFFSETS_TOPIC
from raystream.kafka.listeners import listener_actor_name, parse_listeners
from raystream.log import Log, LogConfig
from raystream.log.checkpoint import lock_directory
from raystream.protocol import PartitionMetadata, Result, TopicMetadata, failure
from raystream.records import record_schema
from raystream.replication.election import OFFLINE, elect_leader, preferred_leader
from raystream.security import quotas as client_quotas
from raystream.security.acls import AclBinding, AclBindingFilter
from raystream.security.scram import CredentialStore, ScramCredential
from raystream.transactions.state_topic import TRANSACTION_STATE_TOPIC
from raystream.transport import worker_startup_concurrency
from raystream.types import PartitionDescription, TopicDescription

logger = logging.getLogger(__name__)

METADATA_DIR = "__cluster_metadata-0"
PRODUCER_ID_BLOCK_KEY = b"@producer-id-block"
"""Metadata-log key of the reserved producer-id block end ('@' is in no topic name)."""
BROKER_IDS_KEY = b"@kafka-broker-ids"
"""Metadata-log key of the Kafka broker id of each Ray node that ran a listener (a JSON
object): ids are kept for life, so Kafka clients' cached broker ids stay right across
controller restarts."""
ACL_KEY_PREFIX = b"@acl:"
"""Metadata-log key prefix of an ACL binding: the key is the prefix and the binding's
JSON (:meth:`AclBinding.to_json`), the value ``1`` while it holds and a tombstone once
deleted, so compaction keeps exactly the bindings in force."""
CLIENT_QUOTAS_KEY = b"@client-quotas"
"""Metadata-log key of every client quota (JSON, see raystream.security.quotas): the
whole set in one compacted record, small and changed rarely."""
REPLICA_READY_TIMEOUT_S = 120
"""How long a topic creation (or partition addition) waits for its replicas by default
(Kafka's CreateTopics ``timeout_ms``) before it is rolled back."""
ROLLBACK_WAIT_S = 10
"""How long a rollback lets the replicas it removes delete their data, and then waits
for Ray to free their names (so the topic can be created again at once)."""
DATA_DIR_LOCK_WAIT_S = 10
"""How long a starting controller waits for the data directory's lock: a controller
that Ray restarts may find its predecessor's process still exiting."""
REPLICA_STARTS_PER_NODE = worker_startup_concurrency()
"""Replicas a creation starts on one node at a time (see ``_start_new_replicas``):
as many as the node starts worker processes at once, assuming nodes alike."""
PROGRESS_INTERVAL_S = 0.5
"""How often a creation counts the replicas that serve (``creation_progress``) while it
waits for the rest."""
MONITOR_INTERVAL_S = 0.5
"""How often the monitor looks at Ray's node table (one call, whatever the number of
replicas); a replica's crash or a peer's report wakes it at once."""
FULL_PASS_S = 10.0
"""How often the monitor reconciles every partition even when nothing woke it: a safety
net that costs no call to any replica."""
PING_TIMEOUT_S = 1.0
"""How long a probed suspect has to answer before it counts as hung."""
DESCRIBE_WAIT_S = 3.0
"""How long ``describe_topic`` waits for the partitions' leaders to report their offsets
(all asked at once). The description itself is the controller's metadata, as Kafka's
DescribeTopics answers from metadata without asking the leaders; a leader that has not
answered by then is described with offsets -1 (unknown) and probed as a suspect. A dead
leader's answer fails at once; the wait is for a live one, and it is long enough that a
replica merely slowed by a busy machine is not made a suspect (a suspect of a single
replica partition that misses its probe takes the partition offline)."""


def _ping_failed(ref: Any) -> bool:
    """Whether an answered ping raised (its actor died)."""
    try:
        ray.get(ref)
    except Exception:
        return True
    return False


def _cause(error: BaseException) -> str:
    """The root cause of an actor's death, as its last ``...Error: ...`` line says
    (Ray's message around it is a long traceback)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    causes = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    return (causes or lines or [type(error).__name__])[-1]


def replica_actor_name(topic: str, partition: int, replica_id: int) -> str:
    """The Ray actor name of a replica (unique within the namespace)."""
    return f"replica:{topic}:{partition}:{replica_id}"


def alive_nodes() -> list[str]:
    """Ids of the Ray nodes that are alive, in a stable order."""
    return sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))


def _lock_data_dir(data_dir: str) -> int:
    """Hold the data directory's lock for the controller's life (see LogDirInUseError).

    Raises:
        LogDirInUseError: another process still holds it after DATA_DIR_LOCK_WAIT_S.
    """
    try:
        return lock_directory(data_dir, DATA_DIR_LOCK_WAIT_S)
    except LogDirInUseError as error:
        raise LogDirInUseError(
            f"data dir {error}: another raystream cluster runs on it (another process on "
            "the embedded default?)"
        ) from None


def node_hosts(alive_only: bool, nodes: list[dict[str, Any]] | None = None) -> dict[str, str]:
    """The address of each Ray node Ray knows (or only of those alive), by node id;
    ``nodes`` is an answer of ``ray.nodes()`` the caller already has."""
    return {
        n["NodeID"]: n["NodeManagerAddress"]
        for n in (ray.nodes() if nodes is None else nodes)
        if n.get("Alive") or not alive_only
    }


@dataclass
class _Creation:
    """A topic creation (or partition addition) under way, which a retry joins.

    Attributes:
        request: what was asked ("create", partitions, replication factor, config
            overrides, schema) or ("grow", total partitions); the same request again
            (a client retrying after the controller restarted) waits for this one.
        done: set once the creation is finished or rolled back.
        error: why it failed (None when it succeeded).
        replicas: how many replica actors it starts (0 until they are counted).
        replicas_started: how many of them serve so far (see ``creation_progress``).
    """

    request: tuple[Any, ...]
    done: threading.Event = field(default_factory=threading.Event)
    error: Exception | None = None
    replicas: int = 0
    replicas_started: int = 0


@dataclass
class _Deadline:
    """When a creation gives up (monotonic seconds).

    With the caller's ``timeout_ms`` it is fixed, as Kafka's CreateTopics timeout.
    Without one, a creation lasts as long as its replicas keep starting: every
    replica that serves moves the deadline to ``stall_s`` later, so a topic of many
    partitions (one process each, a second or two of CPU apiece) is not rolled back
    only for being large, while one whose replicas stop starting still is.
    """

    at: float
    stall_s: float | None = None

    def left_s(self) -> float:
        """Seconds left (0 once passed)."""
        return max(self.at - time.monotonic(), 0.0)

    def progressed(self) -> None:
        """A replica started: with no fixed timeout, the deadline moves on."""
        if self.stall_s is not None:
            self.at = max(self.at, time.monotonic() + self.stall_s)


class Controller:
    """Topic lifecycle, replica placement and metadata for one raystream cluster.

    Thread-safety: Ray runs calls on several threads (the actor has max_concurrency
    > 1); one lock serializes every change of metadata and is never held while waiting
    on replicas, so metadata lookups answer at once while a topic is being created.

    Topic creation is atomic, as in KRaft: the intended topic is recorded in the
    metadata log first (``TopicState.creating_from``), its replicas are started and
    waited for without the lock, and only then is the topic recorded as created and
    shown to clients; a creation that fails or times out is rolled back, and one that a
    dying controller left half done is finished by its successor (or rolled back).
    """

    def __init__(self, namespace: str, broker: dict[str, Any]) -> None:
        self.namespace = namespace
        self.broker = BrokerConfig.from_kafka(broker)
        self.broker_options = self.broker.to_kafka()
        self.node_id = ray.get_runtime_context().get_node_id()
        self._data_dir_lock = _lock_data_dir(self.broker.data_dir)
        self._lock = threading.RLock()
        self._log = Log.open(
            os.path.join(self.broker.data_dir, METADATA_DIR),
            LogConfig(cleanup_policy="compact", segment_bytes=16 << 20),
        )
        self._acls: dict[AclBinding, None] = {}  # ordered: describe answers in creation order
        self._acl_version = (uuid.uuid4().hex, 0)
        self._client_quotas: dict[client_quotas.Entity, dict[str, float]] = {}
        self._quotas_version = f"{uuid.uuid4().hex}:0"
        self._scram = CredentialStore()  # filled by _replay
        # Listeners cache the credentials by this version: it starts anew (never 0
        # again) in each controller life, so no cache survives a controller restart.
        self._scram_version = time.time_ns()
        self.topics, producer_id_end, self._broker_ids = self._replay()
        self._listeners: dict[int, dict[str, Any]] = {}
        self._listener_specs = parse_listeners(
            self.broker.listeners, "listeners", self.broker.listener_security_protocol_map
        )
        self._producer_ids = ProducerIdBlocks(producer_id_end)
        self._handles: dict[tuple[str, int, int], Any] = {}
        # A node id keeps its address for life, dead or alive: cached, and a node id
        # Ray does not know (of an earlier Ray) is asked about once, so a replica left
        # on a lost node does not send every metadata write to ask Ray again.
        nodes = ray.nodes()
        self._hosts = node_hosts(alive_only=False, nodes=nodes)
        self._unknown_nodes: set[str] = set()
        rebound = rebind_restarted_nodes(
            list(self.topics.values()), node_hosts(alive_only=True, nodes=nodes)
        )
        for topic in self.topics.values():
            moved = any(topic is t for t in rebound)
            if moved:
                logger.warning("%s: replicas found again on their restarted Ray nodes", topic.name)
            # Older metadata lacks the addresses: record them now.
            if moved or any(r not in p.hosts for p in topic.partitions for r in p.nodes):
                self._persist(topic.name, topic)
        for topic in self.topics.values():
            self._start_replicas(topic, list(range(len(topic.visible_partitions()))))
        self._creations: dict[str, _Creation] = {}
        self._listeners_started = False
        self._stopping = threading.Event()
        self._health = Liveness()
        self._wake = threading.Event()  # set by a crash, a report, or shutdown
        self._watch = ActorStateWatch(
            ray.get_runtime_context().gcs_address, self._on_actor_state, self._resync
        )
        self._watch.start()
        self._monitor_thread = threading.Thread(
            target=self._monitor, name="raystream-controller-monitor", daemon=True
        )
        self._monitor_thread.start()
        for topic in list(self.topics.values()):
            if topic.creating_from is not None:
                self._finish_in_background(topic)

    # --------------------------------------------------------------- metadata log

    def _replay(self) -> tuple[dict[str, TopicState], int, dict[str, int]]:
        """Rebuild the topics, the reserved producer-id block end and the Kafka broker
        ids of nodes from the log (and the SCRAM credentials, into ``self._scram``)."""
        topics: dict[str, TopicState] = {}
        producer_id_end = 0
        broker_ids: dict[str, int] = {}
        offset = self._log.log_start_offset
        while offset < self._log.log_end_offset:
            table = self._log.read(offset, max_bytes=64 << 20)
            if not table.num_rows:
                break
            for record_offset, key, value in zip(
                table.column("offset").to_pylist(),
                table.column("key").to_pylist(),
                table.column("value").to_pylist(),
                strict=True,
            ):
                try:  # a record that does not decode is skipped, never in the way
                    if key == PRODUCER_ID_BLOCK_KEY:
                        producer_id_end = int(value)
                        continue
                    if key == BROKER_IDS_KEY:
                        broker_ids = {str(k): int(v) for k, v in json.loads(value).items()}
                        continue
                    if key.startswith(ACL_KEY_PREFIX):
                        binding = AclBinding.from_json(key[len(ACL_KEY_PREFIX) :])
                        if value is None:
                            self._acls.pop(binding, None)
                        else:
                            self._acls[binding] = None
                        continue
                    if key == CLIENT_QUOTAS_KEY:
                        self._client_quotas = client_quotas.from_json(value)
                        continue
                    if CredentialStore.is_record(key):
                        self._scram.replay(key, value)
                        continue
                    name = key.decode()
                    if value is None:
                        topics.pop(name, None)
                    else:
                        topics[name] = TopicState.from_json(value.decode())
                except (AttributeError, KeyError, TypeError, ValueError) as error:
                    logger.warning(
                        "%s offset %d: skipped a record that does not decode: %r",
                        METADATA_DIR,
                        record_offset,
                        error,
                    )
            offset = table.column("offset")[-1].as_py() + 1
        return topics, producer_id_end, broker_ids

    def _persist(self, name: str, topic: TopicState | None) -> None:
        """Durably record a topic's new state (None: deleted) before acting on it,
        with the address of each replica's node (see ``rebind_restarted_nodes``)."""
        if topic is not None:
            nodes = {n for p in topic.partitions for n in p.nodes.values()}
            if not nodes <= self._hosts.keys() | self._unknown_nodes:  # new nodes: ask Ray
                self._hosts.update(node_hosts(alive_only=False))
                self._unknown_nodes |= nodes - self._hosts.keys()  # of an earlier Ray
            for state in topic.partitions:
                for replica_id, node in state.nodes.items():
                    if node in self._hosts:
                        state.hosts[replica_id] = self._hosts[node]
        self._persist_record(name.encode(), None if topic is None else topic.to_json().encode())

    def _persist_record(self, key: bytes, value: bytes | None) -> None:
        batch = pa.record_batch(
            {
                "key": pa.array([key], pa.binary()),
                "value": pa.array([value], pa.binary()),
                "timestamp": pa.array([int(time.time() * 1000)], pa.int64()),
            }
        )
        self._log.append(batch)
        self._log.flush()

    def init_producer_id(self) -> Result:
        """A new producer id (epoch 0) for an idempotent producer; ids never repeat.

        Answers ``(producer_id, producer_epoch)``. A transaction coordinator will get
        its ids here too and keep the epochs of transactional ids itself.
        """
        try:
            with self._lock:
                end = self._producer_ids.block_to_reserve()
                if end is not None:
                    self._persist_record(PRODUCER_ID_BLOCK_KEY, str(end).encode())
                    self._producer_ids.reserved(end)
                return Result(value=(self._producer_ids.next_id(), 0))
        except Exception as error:
            return failure(error)

    # ------------------------------------------------------------------ replicas

    def _effective_config(self, topic: TopicState) -> LogConfig:
        defaults = LogConfig(min_insync_replicas=self.broker.min_insync_replicas)
        return defaults.with_options(topic.config)

    def _start_replicas(self, topic: TopicState, partitions: list[int]) -> None:
        """Find or create the replica actors of ``partitions``, wait until they serve,
        and tell each its role."""
        pending = []
        live = set(alive_nodes())
        for p in partitions:
            state = topic.partitions[p]
            for replica_id in state.replicas:
                name = replica_actor_name(topic.name, p, replica_id)
                try:
                    handle = ray.get_actor(name, namespace=self.namespace)
                except ValueError:
                    if state.nodes.get(replica_id) not in live:
                        continue  # lost with its node: the monitor replaces it
                    handle = self._create_replica(topic, p, replica_id)
                self._handles[(topic.name, p, replica_id)] = handle
                pending.append(handle.ping.remote())
        ray.get(pending, timeout=REPLICA_READY_TIMEOUT_S)
        for p in partitions:
            ray.get(self._push_roles(topic, topic.partitions[p]), timeout=REPLICA_READY_TIMEOUT_S)

    def _create_replica(self, topic: TopicState, partition: int, replica_id: int) -> Any:
        """Start a replica actor pinned to its node (so a restart finds its disk)."""
        node = topic.partitions[partition].nodes[replica_id]
        return ReplicaActor.options(
            name=replica_actor_name(topic.name, partition, replica_id),
            namespace=self.namespace,
            lifetime="detached",
            max_restarts=-1,
            num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
        ).remote(
            topic.name,
            topic.topic_id,
            partition,
            replica_id,
            self._effective_config(topic).to_kafka(),
            record_schema(topic.schema()),
            self.namespace,
            self.broker_options,
        )

    def _push_roles(
        self, topic: TopicState, state: PartitionState, only: int | None = None
    ) -> list[Any]:
        """Tell the partition's replicas (or just ``only``) who leads at which epoch."""
        leader = self._handles.get((topic.name, state.partition, state.leader))
        calls = []
        for replica_id in state.replicas:
            if only is not None and replica_id != only:
                continue
            handle = self._handles.get((topic.name, state.partition, replica_id))
            if handle is None:
                continue
            if replica_id == state.leader:
                calls.append(
                    handle.become_leader.remote(
                        state.leader_epoch, state.partition_epoch, state.replicas, state.isr
                    )
                )
            elif leader is not None:
                calls.append(
                    handle.become_follower.remote(
                        state.leader_epoch,
                        state.partition_epoch,
                        state.leader,
                        leader,
                        state.replicas,
                        state.isr,
                    )
                )
        return calls

    def replica_started(
        self, topic_name: str, partition: int, replica_id: int, restarted: bool = False
    ) -> Result:
        """A replica (re)started and asks for its role; it is told through become_*.

        A leader that was restarted by Ray lost its in-memory state (followers' progress,
        pending acks) and maybe the tail of its log: as when a Kafka broker restarts,
        leadership passes to another in-sync replica under a new epoch, and the
        restarted one rejoins as a follower.
        """
        try:
            with self._lock:
                topic = self._topic(topic_name)
                state = topic.partitions[partition]
                if replica_id not in state.replicas:
                    raise UnknownTopicOrPartitionError(
                        f"replica {replica_id} is not a replica of {topic_name}-{partition}"
                    )
                if restarted and state.leader == replica_id:
                    others = [r for r in state.isr if r != replica_id]
                    if others:
                        state.leader = others[0]
                        state.isr = others
                    state.leader_epoch += 1
                    state.partition_epoch += 1
                    self._persist(topic_name, topic)
                    logger.warning(
                        "%s-%s: leader %s restarted, leadership passes to %s at epoch %s",
                        topic_name,
                        partition,
                        replica_id,
                        state.leader,
                        state.leader_epoch,
                    )
                    calls = self._push_roles(topic, state)
                else:
                    calls = self._push_roles(topic, state, only=replica_id)
                handle = self._handles.get((topic_name, partition, replica_id))
                if handle is not None:  # its start arguments may hold an older config
                    calls.append(
                        handle.update_config.remote(self._effective_config(topic).to_kafka())
                    )
            ray.get(calls, timeout=60)
            return Result()
        except Exception as error:
            return failure(error)

    def alter_isr(
        self,
        topic_name: str,
        partition: int,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
    ) -> Result:
        """A leader's request to change the ISR, fenced by its epochs.

        Answers the new partition epoch once the change is durable.
        """
        try:
            with self._lock:
                topic = self._topic(topic_name)
                state = topic.partitions[partition]
                if (
                    leader_id != state.leader
                    or leader_epoch != state.leader_epoch
                    or partition_epoch != state.partition_epoch
                ):
                    raise FencedLeaderEpochError(
                        f"ISR change of {topic_name}-{partition} from leader {leader_id} at "
                        f"epochs {leader_epoch}/{partition_epoch} is stale (now leader "
                        f"{state.leader}, epochs {state.leader_epoch}/{state.partition_epoch})"
                    )
                if leader_id not in isr or not set(isr) <= set(state.replicas):
                    raise InvalidRequestError(f"ISR {isr} must hold the leader {leader_id}")
                state.isr = [r for r in state.replicas if r in isr]
                state.partition_epoch += 1
                self._persist(topic_name, topic)
                return Result(value=state.partition_epoch)
        except Exception as error:
            return failure(error)

    # ----------------------------------------------------------------- failures

    def _on_actor_state(self, actor_id: str, state: str) -> None:
        """Ray's word on an actor's new state (any actor of the cluster; the monitor
        keeps its replicas' ones)."""
        if self._health.on_state(actor_id, state):
            self._wake.set()

    def _resync(self) -> None:
        """Read the replicas' states afresh once the actor watch (re)subscribed: a
        change made while it was not subscribed was not seen."""
        with self._lock:
            handles = list(self._handles.values())
        for handle in handles:
            handle.ping.remote()  # one restarted meanwhile waits for a first call
            state = actor_state(handle._actor_id.hex())
            if state in DOWN_STATES:
                self._on_actor_state(handle._actor_id.hex(), state)

    def replica_unresponsive(self, topic_name: str, partition: int, replica_id: int) -> Result:
        """A replica's peer reports it silent (a leader that leaves a follower's fetch
        unanswered past its wait, a follower that stopped fetching): the monitor
        probes it at once, and one that does not answer counts as hung (see
        :mod:`raystream.controller.liveness`)."""
        key = (topic_name, partition, replica_id)
        with self._lock:
            known = key in self._handles
        if known:
            logger.info("%s-%s: replica %s reported unresponsive", *key)
            self._health.suspect(key)
            self._wake.set()
        return Result()

    def leader_unresponsive(self, topic_name: str, partition: int) -> Result:
        """A client reports that the partition's leader left its request unanswered
        (a producer past ``request_timeout_ms``): the current leader is probed as a
        suspect (:meth:`replica_unresponsive`). A partition without followers has no
        other peer to notice a hang. A stale report (leadership moved since) costs the
        new leader one probe, which it answers."""
        with self._lock:
            topic = self.topics.get(topic_name)
            states = topic.visible_partitions() if topic is not None else []
            leader = states[partition].leader if 0 <= partition < len(states) else OFFLINE
        if leader != OFFLINE:
            self.replica_unresponsive(topic_name, partition, leader)
        return Result()

    def _monitor(self) -> None:
        """Watch replicas and nodes; fail over leaders, shrink ISRs, replace lost replicas.

        Runs on its own thread for the controller's life; it logs and survives every
        exception, and never holds the lock while waiting on replicas.

        Nothing here grows with the number of replicas while the cluster is at rest: a
        replica's crash comes from Ray (:class:`ActorStateWatch`) and a hang from the
        replica's peers (:meth:`replica_unresponsive`), each of which wakes the loop at
        once; between them the loop reads Ray's node table every
        :data:`MONITOR_INTERVAL_S` (one call) and reconciles all partitions only when
        something changed, or every :data:`FULL_PASS_S` as a safety net (no replica
        call unless a partition needs one).
        """
        known_nodes = set(alive_nodes())
        next_rebalance = time.monotonic() + self.broker.leader_imbalance_check_interval_seconds
        next_full_pass = 0.0
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                woken = self._wake.is_set()
                self._wake.clear()
                nodes = set(alive_nodes())
                if woken or nodes != known_nodes or started >= next_full_pass:
                    next_full_pass = started + FULL_PASS_S
                    self._monitor_once(nodes)
                joined = bool(nodes - known_nodes)
                if joined or not self._listeners_started:
                    self._start_listeners(nodes)
                known_nodes = nodes
                if self.broker.auto_leader_rebalance_enable and (
                    joined or started >= next_rebalance
                ):
                    next_rebalance = started + self.broker.leader_imbalance_check_interval_seconds
                    moved = self.elect_leaders().value
                    if moved:
                        logger.info(
                            "moved leadership of %d partitions to preferred replicas", moved
                        )
            except Exception:
                logger.exception("controller monitor pass failed")
            if self._health.hung():
                self._wake.set()  # probe the hung replicas again each interval
                self._stopping.wait(MONITOR_INTERVAL_S)
            else:
                self._wake.wait(MONITOR_INTERVAL_S)

    def _probe(self, handles: dict[tuple[str, int, int], Any]) -> None:
        """Ping the suspects and hung replicas among ``handles``; record who answered."""
        probes = {
            key: handles[key].ping.remote() for key in self._health.to_probe() if key in handles
        }
        if not probes:
            return
        ready, _ = ray.wait(list(probes.values()), num_returns=len(probes), timeout=PING_TIMEOUT_S)
        answered = set(ready)
        now = time.monotonic()
        for key, ref in probes.items():
            ok = ref in answered and not _ping_failed(ref)
            if not ok and key not in self._health.hung():
                logger.warning("%s-%s: replica %s does not answer its probe", *key)
            self._health.probed(key, ok, now)

    def _monitor_once(self, nodes: set[str]) -> None:
        with self._lock:  # partitions being created are their creation's to watch
            handles = {
                key: handle
                for key, handle in self._handles.items()
                if key[0] in self.topics and key[1] < len(self.topics[key[0]].visible_partitions())
            }
            self._health.forget(set(self._health.to_probe()) - set(self._handles))
        self._probe(handles)
        with self._lock:
            ids = {h._actor_id.hex(): h for h in self._handles.values()}
        # A replica Ray restarted asks for its role once it gets a first call.
        calls = [ids[i].ping.remote() for i in self._health.take_recovered(ids)]
        down_ids = self._health.take_down(h._actor_id.hex() for h in handles.values())
        hung = self._health.hung()
        down = {key for key, h in handles.items() if key in hung or h._actor_id.hex() in down_ids}
        with self._lock:
            for topic in list(self.topics.values()):
                for state in topic.visible_partitions():
                    lost = {r for r in state.replicas if state.nodes.get(r) not in nodes}
                    live = {
                        r
                        for r in state.replicas
                        if r not in lost and (topic.name, state.partition, r) not in down
                    }
                    calls += self._reconcile(topic, state, live, lost)
        self._restart_hung(handles)
        if calls:
            ray.wait(calls, num_returns=len(calls), timeout=5)

    def _restart_hung(self, handles: dict[tuple[str, int, int], Any]) -> None:
        """Restart the replicas hung for :data:`HUNG_RESTART_S` whose partition is
        offline (no other in-sync replica could take over: a single replica, or all
        hung): Ray brings each back in a new process, which recovers its log from disk
        and is elected again once it serves (see :mod:`raystream.controller.liveness`).
        One that Ray is restarting already is left to it."""
        for key in self._health.hung_for(HUNG_RESTART_S, time.monotonic()):
            handle = handles.get(key)
            with self._lock:
                topic = self.topics.get(key[0])
                states = topic.visible_partitions() if topic is not None else []
                offline = key[1] < len(states) and states[key[1]].leader == OFFLINE
            if handle is None or not offline or actor_state(handle._actor_id.hex()) != "ALIVE":
                continue
            logger.warning(
                "%s-%s: replica %s hung for over %.0f s with its partition offline; restarting it",
                *key,
                HUNG_RESTART_S,
            )
            self._health.forget([key])
            ray.kill(handle, no_restart=False)

    def _reconcile(
        self, topic: TopicState, state: PartitionState, live: set[int], lost: set[int]
    ) -> list[Any]:
        """Act on one partition's live replicas: elect, shrink the ISR, re-create."""
        calls: list[Any] = []
        changed = False
        if state.leader not in live:
            unclean = self._effective_config(topic).unclean_leader_election_enable
            election = elect_leader(state.replicas, state.isr, live, unclean)
            if election.leader != state.leader or election.isr != state.isr:
                if election.leader != OFFLINE:
                    logger.warning(
                        "%s-%s: leader %s is gone, electing %s%s",
                        topic.name,
                        state.partition,
                        state.leader,
                        election.leader,
                        " (unclean)" if election.unclean else "",
                    )
                    state.leader_epoch += 1
                state.leader = election.leader
                state.isr = election.isr or state.isr
                changed = True
        else:
            isr = [r for r in state.isr if r in live]
            if isr != state.isr:
                state.isr = isr
                changed = True
        for replica_id in lost:
            replacement = self._replacement_node(state)
            if replacement is not None:
                key = (topic.name, state.partition, replica_id)
                old = self._handles.pop(key, None)
                if old is not None:
                    ray.kill(old, no_restart=True)
                state.nodes[replica_id] = replacement
                state.isr = [r for r in state.isr if r != replica_id]
                changed = True
                self._handles[key] = self._create_replica(topic, state.partition, replica_id)
        if changed:
            state.partition_epoch += 1
            self._persist(topic.name, topic)
            calls += self._push_roles(topic, state)
        return calls

    def _replacement_node(self, state: PartitionState) -> str | None:
        """A live node for a replica lost with its node: one not hosting this partition."""
        nodes = alive_nodes()
        if not nodes:
            return None
        used = set(state.nodes.values())
        free = [n for n in nodes if n not in used]
        return (free or nodes)[state.partition % len(free or nodes)]

    def elect_leaders(self, names: list[str] | None = None) -> Result:
        """Preferred leader election: move leadership back to each partition's first
        replica where it is in sync and on a live node. Answers how many partitions
        moved."""
        try:
            moved = 0
            calls = []
            nodes = set(alive_nodes())
            with self._lock:
                for name in names if names is not None else self._visible_topics():
                    topic = self._topic(name)
                    for state in topic.visible_partitions():
                        alive = {r for r in state.replicas if state.nodes.get(r) in nodes}
                        preferred = preferred_leader(state.replicas, state.isr, alive)
                        if preferred is None or state.leader == preferred:
                            continue
                        state.leader = preferred
                        state.leader_epoch += 1
                        state.partition_epoch += 1
                        moved += 1
                        self._persist(name, topic)
                        calls += self._push_roles(topic, state)
            ray.get(calls, timeout=60)
            return Result(value=moved)
        except Exception as error:
            return failure(error)

    def _stop_replicas(self, topic: TopicState, delete_data: bool) -> None:
        handles = [
            self._handles.pop((topic.name, p.partition, r), None)
            for p in topic.partitions
            for r in p.replicas
        ]
        handles = [h for h in handles if h is not None]
        calls = [(h.delete if delete_data else h.close).remote() for h in handles]
        try:
            ray.get(calls, timeout=60)
        except Exception:  # a dead replica cannot close; its data is handled on restart
            logger.exception("stopping replicas of %s", topic.name)
        for handle in handles:
            ray.kill(handle, no_restart=True)

    # ---------------------------------------------------------------- topic admin

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: dict[str, Any] | None = None,
        value_schema: bytes | None = None,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> Result:
        """Create a topic and its replica actors; answers with its TopicMetadata once
        every replica serves.

        The topic is created whole or not at all: it is recorded before its replicas
        start, hidden from clients until they all serve, and rolled back (replicas and
        record removed) when one fails or ``timeout_ms`` (default
        REPLICA_READY_TIMEOUT_S) passes. The same request while it is under way (a
        retry) waits for it instead of failing. ``validate_only`` (Kafka's CreateTopics
        flag) makes every check a creation makes, placement and capacity included, and
        answers None without creating anything.
        """
        try:
            validate_topic_name(name)
            check_not_internal(name, "create")
            return Result(
                value=self._create_topic(
                    name,
                    partitions,
                    replication_factor,
                    config or {},
                    value_schema,
                    self._deadline(timeout_ms),
                    validate_only,
                )
            )
        except Exception as error:
            return failure(error)

    def _create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int | None,
        config: dict[str, Any],
        value_schema: bytes | None,
        deadline: _Deadline,
        validate_only: bool = False,
    ) -> TopicMetadata | None:
        validate_count(partitions, "partitions")
        if replication_factor is None:
            replication_factor = self.broker.default_replication_factor
        validate_count(replication_factor, "replication_factor")
        overrides = self._validated_config(config)
        if value_schema is not None:
            pa.ipc.read_schema(pa.py_buffer(value_schema))
        request = ("create", partitions, replication_factor, overrides, value_schema)
        with self._lock:
            creation = self._creations.get(name)
            if creation is not None and creation.request == request:
                topic = None
            elif name in self.topics:
                being = " and is being created" if self.topics[name].creating_from == 0 else ""
                raise TopicAlreadyExistsError(f"topic {name!r} already exists{being}")
            else:
                nodes = alive_nodes()
                placement = place_replicas(nodes, partitions, replication_factor, len(self.topics))
                self._check_capacity(name, placement)
                if validate_only:
                    return None
                topic = TopicState(
                    name=name,
                    topic_id=uuid.uuid4().hex,
                    partitions=[
                        self._new_partition(p, assigned) for p, assigned in enumerate(placement)
                    ],
                    config=overrides,
                    value_schema=value_schema,
                    creating_from=0,
                )
                self._persist(name, topic)
                self.topics[name] = topic
                creation = self._creations[name] = _Creation(request)
        if topic is None:
            self._join(name, creation, deadline)
        else:
            self._build(topic, creation, deadline)
        with self._lock:
            return self._topic_metadata(self._topic(name))

    @staticmethod
    def _deadline(timeout_ms: int | None) -> _Deadline:
        """The deadline of a creation that may take ``timeout_ms`` (None: as long as
        its replicas keep starting, see :class:`_Deadline`)."""
        if timeout_ms is None:
            return _Deadline(time.monotonic() + REPLICA_READY_TIMEOUT_S, REPLICA_READY_TIMEOUT_S)
        if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or timeout_ms < 1:
            raise InvalidRequestError(f"timeout_ms must be an integer >= 1, not {timeout_ms!r}")
        return _Deadline(time.monotonic() + timeout_ms / 1000)

    def _check_capacity(self, name: str, placement: list[list[str]]) -> None:
        """Refuse new replicas beyond the live nodes' limits (see ``check_capacity``).
        The caller holds the lock."""
        memory = {n["NodeID"]: n["Resources"].get("memory", 0) for n in ray.nodes() if n["Alive"]}
        existing = Counter(
            p.nodes[r] for t in self.topics.values() for p in t.partitions for r in p.replicas
        )
        limits = replica_limits(memory, self.broker.max_replicas_per_node)
        check_capacity(name, placement, existing, limits)

    def _build(self, topic: TopicState, creation: _Creation, deadline: _Deadline) -> None:
        """Start the replicas of the partitions being created, then record the topic as
        created; roll back on failure. Sets ``creation``'s outcome.

        Raises:
            RaystreamTimeoutError: a replica did not serve before ``deadline``.
            BrokerNotAvailableError: a replica failed to start (the cause is named).
        """
        first = topic.creating_from
        assert first is not None
        try:
            try:
                self._start_new_replicas(topic, first, creation, deadline)
                with self._lock:
                    topic.creating_from = None
                    self._persist(topic.name, topic)
            except Exception:
                topic.creating_from = first
                self._roll_back(topic, first)
                raise
        except Exception as error:
            creation.error = error
            raise
        finally:
            with self._lock:
                if self._creations.get(topic.name) is creation:
                    del self._creations[topic.name]
            creation.done.set()

    def _start_new_replicas(
        self, topic: TopicState, first: int, creation: _Creation, deadline: _Deadline
    ) -> None:
        """Find or create the replicas of partitions ``first``.. and wait, without the
        lock, until each serves and knows its role.

        Each replica is a process whose start is mostly CPU (the interpreter, Ray,
        the replica's modules). Asking Ray for all of them at once would start them
        all together, sharing the cores, so none would serve until nearly all do;
        instead at most REPLICA_STARTS_PER_NODE start on a node at a time, the next
        as soon as one serves. The cores stay busy, the replicas come up at a steady
        pace (counted into ``creation`` for ``creation_progress``), and a node never
        holds a hundred half-started processes at once. The first replica that fails
        to start ends the wait.
        """
        keys = [
            (topic.name, state.partition, replica_id)
            for state in topic.partitions[first:]
            for replica_id in state.replicas
        ]
        creation.replicas = len(keys)
        queues: dict[str, deque[tuple[str, int, int]]] = {}
        for key in keys:
            node = topic.partitions[key[1]].nodes[key[2]]
            queues.setdefault(node, deque()).append(key)
        starting: dict[Any, tuple[str, int, int]] = {}  # ping -> replica
        per_node: Counter[str] = Counter()

        def start_more() -> None:
            for node, queue in queues.items():
                while queue and per_node[node] < REPLICA_STARTS_PER_NODE:
                    key = queue.popleft()
                    try:
                        handle = ray.get_actor(replica_actor_name(*key), namespace=self.namespace)
                    except ValueError:
                        handle = self._create_replica(topic, key[1], key[2])
                    with self._lock:
                        self._handles[key] = handle
                    starting[handle.ping.remote()] = key
                    per_node[node] += 1

        start_more()
        while starting and deadline.left_s() > 0:
            ready, _ = ray.wait(
                list(starting), num_returns=1, timeout=min(PROGRESS_INTERVAL_S, deadline.left_s())
            )
            if ready:
                ready = ray.wait(list(starting), num_returns=len(starting), timeout=0)[0]
            for ref in ready:
                key = starting.pop(ref)
                try:
                    ray.get(ref)
                except ray.exceptions.RayError as error:
                    raise BrokerNotAvailableError(
                        f"topic {topic.name!r} was not created: its replica "
                        f"{replica_actor_name(*key)} failed to start: {_cause(error)}; "
                        "it was rolled back"
                    ) from None
                per_node[topic.partitions[key[1]].nodes[key[2]]] -= 1
                creation.replicas_started += 1
                deadline.progressed()
            start_more()
        late = sorted(replica_actor_name(*key) for key in starting.values())
        late += sorted(replica_actor_name(*key) for queue in queues.values() for key in queue)
        if late:
            raise RaystreamTimeoutError(
                f"topic {topic.name!r} was not created: {len(late)} of its "
                f"{len(keys)} new replicas did not start in time ({', '.join(late[:3])}"
                f"{', ...' if len(late) > 3 else ''}); it was rolled back"
            )
        with self._lock:
            new = topic.partitions[first:]
            calls = [call for state in new for call in self._push_roles(topic, state)]
        try:
            ray.get(calls, timeout=max(deadline.left_s(), 0.001))
        except ray.exceptions.GetTimeoutError:
            raise RaystreamTimeoutError(
                f"topic {topic.name!r} was not created: its new replicas did not take their "
                "roles in time; it was rolled back"
            ) from None

    def _roll_back(self, topic: TopicState, first: int) -> None:
        """Undo a failed creation: delete the replicas of partitions ``first``.. (and
        their data), wait until Ray frees their names, then drop them from the record
        (the whole topic when ``first`` is 0). The record goes last, so a controller
        that dies halfway finds the creation again and finishes or rolls it back."""
        keys = [
            (topic.name, state.partition, replica_id)
            for state in topic.partitions[first:]
            for replica_id in state.replicas
        ]
        with self._lock:
            handles = {key: self._handles.pop(key) for key in keys if key in self._handles}
        for key in keys:
            if key not in handles:
                with contextlib.suppress(ValueError):
                    handles[key] = ray.get_actor(replica_actor_name(*key), namespace=self.namespace)
        deletes = [handle.delete.remote() for handle in handles.values()]
        if deletes:
            ray.wait(deletes, num_returns=len(deletes), timeout=ROLLBACK_WAIT_S)
        for handle in handles.values():
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)
        wait_until = time.monotonic() + ROLLBACK_WAIT_S
        for key in keys:
            while time.monotonic() < wait_until:
                try:
                    ray.get_actor(replica_actor_name(*key), namespace=self.namespace)
                except ValueError:
                    break
                time.sleep(0.05)
        with self._lock:
            if self.topics.get(topic.name) is not topic:
                return
            if first == 0:
                self._persist(topic.name, None)
                del self.topics[topic.name]
            else:
                del topic.partitions[first:]
                topic.creating_from = None
                self._persist(topic.name, topic)
        logger.warning(
            "rolled back the creation of %s partitions %d.. of topic %s",
            len(keys),
            first,
            topic.name,
        )

    @staticmethod
    def _join(name: str, creation: _Creation, deadline: _Deadline) -> None:
        """Wait for a creation another call (or the restarted controller) runs."""
        if not creation.done.wait(deadline.left_s()):
            raise RaystreamTimeoutError(f"topic {name!r} is still being created; try again")
        if creation.error is not None:
            raise type(creation.error)(str(creation.error))

    def _finish_in_background(self, topic: TopicState) -> None:
        """Finish a creation a dead controller left half done (or roll it back), on a
        thread of its own so that the controller serves meanwhile."""
        first = topic.creating_from
        if first == 0:
            request: tuple[Any, ...] = (
                "create",
                len(topic.partitions),
                len(topic.partitions[0].replicas),
                topic.config,
                topic.value_schema,
            )
        else:
            request = ("grow", len(topic.partitions))
        creation = self._creations[topic.name] = _Creation(request)

        def finish() -> None:
            try:
                self._build(topic, creation, self._deadline(None))
                logger.warning("finished creating topic %s after a controller restart", topic.name)
            except Exception:
                logger.exception("could not finish creating topic %s", topic.name)

        threading.Thread(target=finish, name=f"raystream-create-{topic.name}", daemon=True).start()

    @staticmethod
    def _new_partition(partition: int, nodes: list[str]) -> PartitionState:
        replicas = list(range(len(nodes)))
        return PartitionState(
            partition=partition,
            replicas=replicas,
            nodes=dict(zip(replicas, nodes, strict=True)),
            leader=replicas[0],
            leader_epoch=0,
            isr=list(replicas),
        )

    def _validated_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """Overrides under Kafka's dotted names, checked against LogConfig's rules."""
        if not isinstance(config, dict):
            raise InvalidConfigError(f"topic config must be a dict, not {type(config).__name__}")
        validated = LogConfig().with_options(config)
        return {
            str(key).replace("_", "."): getattr(validated, str(key).replace(".", "_"))
            for key in config
        }

    def creation_progress(self, name: str) -> dict[str, int] | None:
        """How far the creation (or partition addition) of topic ``name`` is, as
        ``{"replicas": ..., "replicas_started": ...}``, or None when none is under way.

        A large creation takes a while (each replica is a process to start): clients
        poll this beside their ``create_topic`` call to show progress.
        """
        with self._lock:
            creation = self._creations.get(name)
        if creation is None:
            return None
        return {"replicas": creation.replicas, "replicas_started": creation.replicas_started}

    def delete_topic(self, name: str) -> Result:
        """Delete a topic, its replica actors and their data (not an internal topic,
        nor one whose new partitions are being created)."""
        try:
            check_not_internal(name, "delete")
            with self._lock:
                topic = self._topic(name)
                if topic.creating_from is not None:
                    raise InvalidRequestError(
                        f"topic {name!r} is adding partitions; delete it once that ends"
                    )
                self._persist(name, None)
                del self.topics[name]
                self._stop_replicas(topic, delete_data=True)
                return Result()
        except Exception as error:
            return failure(error)

    def create_partitions(self, name: str, total: int, timeout_ms: int | None = None) -> Result:
        """Grow a topic to ``total`` partitions (never shrinks, as in Kafka).

        Like a creation, the new partitions are recorded first, shown to clients once
        all their replicas serve, and rolled back on failure or timeout.
        """
        try:
            check_not_internal(name, "add partitions to")
            deadline = self._deadline(timeout_ms)
            request = ("grow", total)
            with self._lock:
                topic = self._topic(name)
                validate_count(total, "partitions")
                creation = self._creations.get(name)
                if creation is not None and creation.request != request:
                    raise InvalidPartitionsError(
                        f"topic {name!r} is already adding partitions up to {creation.request[1]}"
                    )
                if creation is None:
                    current = len(topic.partitions)
                    if total <= current:
                        raise InvalidPartitionsError(
                            f"topic {name!r} has {current} partitions; the new total {total} "
                            "must be larger"
                        )
                    rf = len(topic.partitions[0].replicas)
                    placement = place_replicas(
                        alive_nodes(), total - current, rf, len(self.topics), first=current
                    )
                    self._check_capacity(name, placement)
                    for offset, assigned in enumerate(placement):
                        topic.partitions.append(self._new_partition(current + offset, assigned))
                    topic.creating_from = current
                    self._persist(name, topic)
                    creation = self._creations[name] = _Creation(request)
                    owner = True
                else:
                    owner = False
            if owner:
                self._build(topic, creation, deadline)
            else:
                self._join(name, creation, deadline)
            with self._lock:
                return Result(value=self._topic_metadata(self._topic(name)))
        except Exception as error:
            return failure(error)

    def alter_topic_config(
        self, name: str, changes: dict[str, Any], validate_only: bool = False
    ) -> Result:
        """Change topic config keys (not of an internal topic); replicas apply them at
        once. A key changed to None loses its override (the default applies again, as
        Kafka's DELETE of a config does); ``validate_only`` checks the changes and
        answers the effective config they would give, changing nothing."""
        try:
            check_not_internal(name, "alter the config of")
            if not isinstance(changes, dict):
                raise InvalidConfigError(
                    f"topic config changes must be a dict, not {type(changes).__name__}"
                )
            removed = {str(k).replace("_", ".") for k, v in changes.items() if v is None}
            set_now = {k: v for k, v in changes.items() if v is not None}
            known = LogConfig.field_names()
            unknown = sorted(k for k in removed if k.replace(".", "_") not in known)
            if unknown:
                raise InvalidConfigError(
                    "cannot remove unknown topic config key(s) " + ", ".join(map(repr, unknown))
                )
            with self._lock:
                topic = self._topic(name)
                merged = {**topic.config, **self._validated_config(set_now)}
                merged = {k: v for k, v in merged.items() if k not in removed}
                effective = self._effective_config(TopicState(name, "", [], merged))
                if validate_only:
                    return Result(value=effective.to_kafka())
                topic.config = merged
                self._persist(name, topic)
                config = self._effective_config(topic).to_kafka()
                handles = [  # a replica still starting asks for its config when it serves
                    self._handles[(name, p.partition, r)]
                    for p in topic.partitions
                    for r in p.replicas
                    if (name, p.partition, r) in self._handles
                ]
                refs = [h.update_config.remote(config) for h in handles]
            for ref in refs:  # best effort: a dead replica gets the config when it restarts
                try:
                    ray.get(ref, timeout=30).raise_for_error()
                except ray.exceptions.RayError:
                    logger.warning("replica of %s missed a config change", name)
            return Result(value=self._effective_config(topic).to_kafka())
        except Exception as error:
            return failure(error)

    def reassign_partition(
        self, topic_name: str, partition: int, nodes: list[str], timeout_s: float = 300
    ) -> Result:
        """Move a partition's replicas onto ``nodes`` (the first leads when in sync).

        New replicas are created empty on nodes that hold none, catch up as followers
        and join the ISR; only then are replicas on other nodes removed, so the
        partition never has fewer in-sync copies than before. Answers the new replica
        ids.
        """
        try:
            live = set(alive_nodes())
            if not nodes or len(set(nodes)) != len(nodes) or not set(nodes) <= live:
                raise InvalidRequestError(
                    f"target nodes {nodes} must be distinct, alive Ray node ids"
                )
            with self._lock:
                topic = self._topic(topic_name)
                state = self._partition(topic, partition)
                on_node = {node: r for r, node in state.nodes.items() if r in state.replicas}
                target: list[int] = []
                for node in nodes:
                    if node in on_node:
                        target.append(on_node[node])
                        continue
                    replica_id = max(state.nodes) + 1
                    state.nodes[replica_id] = node
                    state.replicas.append(replica_id)
                    target.append(replica_id)
                    key = (topic_name, partition, replica_id)
                    self._handles[key] = self._create_replica(topic, partition, replica_id)
                state.partition_epoch += 1
                self._persist(topic_name, topic)
                calls = self._push_roles(topic, state)
            ray.get(calls, timeout=60)
            deadline = time.monotonic() + timeout_s
            while not set(target) <= set(state.isr):
                if time.monotonic() > deadline:
                    raise RaystreamTimeoutError(
                        f"new replicas {target} of {topic_name}-{partition} did not catch "
                        f"up within {timeout_s} s"
                    )
                time.sleep(0.1)
            with self._lock:
                removed = [r for r in state.replicas if r not in target]
                state.replicas = list(target)
                state.isr = [r for r in target if r in state.isr]
                if state.leader not in target or state.leader != target[0]:
                    state.leader = target[0]
                    state.leader_epoch += 1
                state.partition_epoch += 1
                self._persist(topic_name, topic)
                calls = self._push_roles(topic, state)
                doomed = [self._handles.pop((topic_name, partition, r), None) for r in removed]
            ray.get(calls, timeout=60)
            for handle in doomed:
                if handle is not None:
                    with contextlib.suppress(Exception):
                        ray.get(handle.delete.remote(), timeout=30)
                    ray.kill(handle, no_restart=True)
            return Result(value=target)
        except Exception as error:
            return failure(error)

    def _partition(self, topic: TopicState, partition: int) -> PartitionState:
        if not isinstance(partition, int) or not 0 <= partition < len(topic.visible_partitions()):
            raise UnknownTopicOrPartitionError(
                f"partition {partition!r} of topic {topic.name!r} does not exist"
            )
        return topic.partitions[partition]

    # ------------------------------------------------------------------ queries

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names, sorted; internal topics only on request, topics being created
        never."""
        with self._lock:
            return sorted(
                n
                for n, t in self.topics.items()
                if t.creating_from != 0 and (include_internal or not is_internal(n))
            )

    def metadata(self, names: list[str]) -> Result:
        """TopicMetadata (leaders and their handles) for the named topics."""
        try:
            with self._lock:
                return Result(value=[self._topic_metadata(self._topic(n)) for n in names])
        except Exception as error:
            return failure(error)

    def describe_topic(self, name: str) -> Result:
        """A TopicDescription: the metadata's partitions, with each leader's offsets.

        Every leader is asked at once and given :data:`DESCRIBE_WAIT_S` in all, so a
        dead or hung leader costs one short wait, not a timeout per partition. A leader
        that answers gives its offsets; one that Ray reports dead is described as no
        leader (-1, offsets -1) until the monitor elects another (Ray has told it
        already); one that does not answer in time keeps its place (the metadata's
        leader, as Kafka describes a broker until its session expires) with offsets -1,
        and is probed: if hung, the monitor takes it out as it does for a hang its
        peers report.
        """
        try:
            with self._lock:
                topic = self._topic(name)
                visible = topic.visible_partitions()
                keys = [(name, p.partition, p.leader) for p in visible]
                handles = [self._handles.get(key) for key in keys]
            asked = {i: h.state.remote() for i, h in enumerate(handles) if h is not None}
            answered: set[Any] = set()
            if asked:
                answered = set(
                    ray.wait(list(asked.values()), num_returns=len(asked), timeout=DESCRIBE_WAIT_S)[
                        0
                    ]
                )
            partitions = []
            for i, p in enumerate(visible):
                ref = asked.get(i)
                state, leader = None, p.leader if ref is not None else OFFLINE
                if ref in answered:
                    try:
                        state = ray.get(ref)
                    except ray.exceptions.RayError:  # died: nobody leads it this moment
                        leader = OFFLINE
                elif ref is not None:
                    ray.cancel(ref)
                    self.replica_unresponsive(*keys[i])
                partitions.append(
                    PartitionDescription(
                        partition=p.partition,
                        leader=leader,
                        replicas=list(p.replicas),
                        isr=list(p.isr),
                        leader_epoch=p.leader_epoch,
                        log_start_offset=state["log_start_offset"] if state else -1,
                        high_watermark=state["high_watermark"] if state else -1,
                        log_end_offset=state["log_end_offset"] if state else -1,
                        nodes=dict(p.nodes),
                    )
                )
            return Result(
                value=TopicDescription(
                    name=name,
                    partitions=partitions,
                    config=self._effective_config(topic).to_kafka(),
                    schema=topic.schema(),
                    topic_id=topic.topic_id,
                )
            )
        except Exception as error:
            return failure(error)

    def status(self) -> dict[str, Any]:
        """Cluster overview for ``raystream status``: nodes, the topics, partitions and
        replicas clients see (user and internal topics counted apart), and warnings."""
        with self._lock:
            topics = list(self.topics.values())
        offline = []
        under_replicated = []
        not_spread = []
        for topic in topics:
            for p in topic.partitions:
                name = f"{topic.name}-{p.partition}"
                if p.leader == OFFLINE:
                    offline.append(name)
                elif len(p.isr) < len(p.replicas):
                    under_replicated.append(name)
                if not is_spread([p.nodes[r] for r in p.replicas]):
                    not_spread.append(name)
        return {
            "namespace": self.namespace,
            "data_dir": self.broker.data_dir,
            "controller_node": self.node_id,
            "controller_pid": os.getpid(),
            "nodes": alive_nodes(),
            **topic_counts(topics),
            "offline_partitions": offline,
            "under_replicated_partitions": under_replicated,
            "partitions_not_spread": not_spread,
            "kafka_listeners": self.kafka_listeners(),
        }

    def topic_config(self, name: str) -> Result:
        """A topic's config: ``{"overrides": the keys set for it, "config": every key in
        force}`` under Kafka's dotted names (DescribeConfigs tells the two apart)."""
        try:
            with self._lock:
                topic = self._topic(name)
                return Result(
                    value={
                        "overrides": dict(topic.config),
                        "config": self._effective_config(topic).to_kafka(),
                    }
                )
        except Exception as error:
            return failure(error)

    def broker_config(self) -> dict[str, Any]:
        """The cluster-wide settings in force."""
        return dict(self.broker_options)

    def _topic(self, name: str) -> TopicState:
        """The topic as clients see it: one being created does not exist yet."""
        if not isinstance(name, str):
            raise InvalidRequestError(f"topic name must be a string, not {type(name).__name__}")
        topic = self.topics.get(name)
        if topic is None or topic.creating_from == 0:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return topic

    def _visible_topics(self) -> list[str]:
        """Names of the topics clients see (not those being created)."""
        return [n for n, t in self.topics.items() if t.creating_from != 0]

    def _topic_metadata(self, topic: TopicState) -> TopicMetadata:
        return TopicMetadata(
            name=topic.name,
            topic_id=topic.topic_id,
            partitions=[
                PartitionMetadata(
                    topic=topic.name,
                    partition=p.partition,
                    leader=p.leader,
                    leader_epoch=p.leader_epoch,
                    replicas=list(p.replicas),
                    isr=list(p.isr),
                    leader_handle=(
                        self._handles.get((topic.name, p.partition, p.leader))
                        if p.leader != OFFLINE
                        else None
                    ),
                    leader_node=p.nodes.get(p.leader) if p.leader != OFFLINE else None,
                    nodes=dict(p.nodes),
                )
                for p in topic.visible_partitions()
            ],
            config=self._effective_config(topic).to_kafka(),
            value_schema=topic.schema(),
        )

    # ------------------------------------------------------------- coordinators

    def find_coordinator(self) -> Result:
        """The group coordinator's handle, starting it (and ``__consumer_offsets``) on
        first use, as Kafka creates its offsets topic on the first FindCoordinator."""
        try:
            offsets = self._internal_topic(OFFSETS_TOPIC)
            return Result(value=self._coordinator(GroupCoordinatorActor, COORDINATOR_NAME, offsets))
        except Exception as error:
            return failure(error)

    def find_transaction_coordinator(self) -> Result:
        """The transaction coordinator's handle, starting it (and ``__transaction_state``,
        and ``__consumer_offsets`` whose partition count it needs) on first use."""
        try:
            offsets = self._internal_topic(OFFSETS_TOPIC)
            state = self._internal_topic(TRANSACTION_STATE_TOPIC)
            return Result(
                value=self._coordinator(
                    TransactionCoordinatorActor,
                    TRANSACTION_COORDINATOR_NAME,
                    state,
                    offsets,
                    self.broker.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                )
            )
        except Exception as error:
            return failure(error)

    def _internal_topic(self, name: str) -> int:
        """Create an internal compacted topic if it is missing, sized by the broker
        config (its replication factor capped by the live nodes, as a one-node cluster
        must still work); its partition count. Concurrent first uses share one
        creation, which holds no lock while it waits for the replicas."""
        with self._lock:
            exists = name in self.topics and self.topics[name].creating_from != 0
        if not exists:
            broker = self.broker
            partitions, replication_factor = {
                OFFSETS_TOPIC: (
                    broker.offsets_topic_num_partitions,
                    broker.offsets_topic_replication_factor,
                ),
                TRANSACTION_STATE_TOPIC: (
                    broker.transaction_state_log_num_partitions,
                    broker.transaction_state_log_replication_factor,
                ),
            }[name]
            replication = max(min(replication_factor, len(alive_nodes())), 1)
            self._create_topic(
                name,
                partitions,
                replication,
                {"cleanup.policy": "compact", "segment.bytes": 16 << 20},
                None,
                self._deadline(None),
            )
        with self._lock:
            return len(self._topic(name).partitions)

    def _coordinator(self, actor_class: Any, name: str, *args: Any) -> Any:
        """The named, detached coordinator actor, started with ``args`` if not running
        (Ray restarts it for good after a crash)."""
        return actor_class.options(
            name=name,
            namespace=self.namespace,
            lifetime="detached",
            max_restarts=-1,
            num_cpus=0,
            get_if_exists=True,
        ).remote(self.namespace, self.broker.direct_listener(), *args)

    # --------------------------------------------------------- Kafka listeners

    def _start_listeners(self, nodes: set[str]) -> None:
        """One Kafka-protocol listener actor on each live node, when ``listeners`` is
        set; Ray restarts one that dies, and a node that joins gets one here."""
        if not self._listener_specs:
            self._listeners_started = True
            return
        # Imported here, not with this module: every process that looks the controller
        # up by name (each replica, coordinator and client) imports this module, and
        # the listener's Kafka codec (kio's schemas) would add a third of a CPU-second
        # to each of their starts.
        from raystream.actors.kafka_listener import KafkaListenerActor

        for node in sorted(nodes):
            KafkaListenerActor.options(
                name=listener_actor_name(node),
                namespace=self.namespace,
                lifetime="detached",
                max_restarts=-1,
                num_cpus=0,
                get_if_exists=True,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
            ).remote(
                self.namespace,
                self.broker.listeners,
                self.broker.advertised_listeners,
                self.broker_options,
            )
        self._listeners_started = True

    def register_listener(self, node: str, endpoints: list[dict[str, Any]]) -> Result:
        """Record the listener on ``node`` and what it advertises; answers its Kafka
        broker id (new nodes get the next id, persisted before it is used)."""
        try:
            with self._lock:
                broker_id = self._broker_ids.get(node)
                if broker_id is None:
                    broker_id = max(self._broker_ids.values(), default=-1) + 1
                    self._broker_ids[node] = broker_id
                    self._persist_record(BROKER_IDS_KEY, json.dumps(self._broker_ids).encode())
                self._listeners[broker_id] = {
                    "broker_id": broker_id,
                    "node": node,
                    "endpoints": list(endpoints),
                }
                return Result(value=broker_id)
        except Exception as error:
            return failure(error)

    def kafka_listeners(self) -> list[dict[str, Any]]:
        """The registered listeners on live nodes: broker id, Ray node, endpoints."""
        live = set(alive_nodes())
        with self._lock:
            return [
                dict(entry) for _, entry in sorted(self._listeners.items()) if entry["node"] in live
            ]

    # ------------------------------------------------------ SCRAM credentials

    def alter_scram_credentials(
        self,
        upsertions: list[tuple[str, dict[str, Any]]],
        deletions: list[tuple[str, str]],
    ) -> Result:
        """Set (``(user, credential JSON)``) and delete (``(user, mechanism)``) users'
        SCRAM credentials, each persisted before it counts. Only salted keys come
        here (the caller salts). Answers ``{user: None | (error code, message)}``.
        """
        try:
            outcome: dict[str, tuple[int, str] | None] = {}
            with self._lock:
                changes: list[tuple[str, Any]] = [(u, ("set", c)) for u, c in upsertions]
                changes += [(u, ("delete", m)) for u, m in deletions]
                for user, (kind, what) in changes:
                    try:
                        if kind == "set":
                            self._scram.upsert(user, ScramCredential.from_json(what))
                        else:
                            self._scram.delete(user, what)
                    except RaystreamError as error:
                        outcome[user] = (error.code, str(error))
                        continue
                    self._persist_record(*self._scram.record(user))
                    outcome.setdefault(user, None)
                self._scram_version += 1
            return Result(value=outcome)
        except Exception as error:
            return failure(error)

    def describe_scram_credentials(self, users: list[str] | None = None) -> dict[str, Any]:
        """``{user: [(mechanism, iterations)]}`` (None: every user with credentials)."""
        with self._lock:
            return self._scram.describe(users)

    def scram_credentials(self, known_version: int = -1) -> tuple[int, dict[str, Any] | None]:
        """``(version, every credential as JSON)`` for a listener's cache; the
        credentials are None when ``known_version`` is already the current one (a
        listener polls this cheaply). Salted keys only; callers are inside Ray."""
        with self._lock:
            if known_version == self._scram_version:
                return self._scram_version, None
            return self._scram_version, self._scram.to_json()

    def kafka_broker_ids(self) -> dict[str, int]:
        """The Kafka broker id of every Ray node that ever ran a listener."""
        with self._lock:
            return dict(self._broker_ids)

    # ------------------------------------------------------------ client quotas

    def alter_client_quotas(self, changes: Any, validate_only: bool = False) -> Result:
        """Set or remove client quotas (``{entity: {key: value or None}}``, see
        :func:`raystream.security.quotas.validate_changes`), all or none, recorded in
        the metadata log before they apply; listeners pick them up within a second."""
        try:
            checked = client_quotas.validate_changes(changes)
            if validate_only:
                return Result()
            with self._lock:
                merged = client_quotas.apply_changes(self._client_quotas, checked)
                self._persist_record(CLIENT_QUOTAS_KEY, client_quotas.to_json(merged).encode())
                self._client_quotas = merged
                boot, count = self._quotas_version.split(":")
                self._quotas_version = f"{boot}:{int(count) + 1}"
            return Result()
        except Exception as error:
            return failure(error)

    def describe_client_quotas(self, components: Any = (), strict: bool = False) -> Result:
        """The quotas of the entities matching a DescribeClientQuotas filter
        (``[(entity_type, match_type, match), ...]``; none: all)."""
        try:
            with self._lock:
                current = dict(self._client_quotas)
            return Result(value=client_quotas.describe(current, components, strict))
        except Exception as error:
            return failure(error)

    def client_quotas(self, known_version: str | None) -> tuple[str, Any]:
        """``(version, quotas)`` for a listener's cache; quotas are None when
        ``known_version`` is already the current one (the common answer: small)."""
        with self._lock:
            if known_version == self._quotas_version:
                return known_version, None
            return self._quotas_version, dict(self._client_quotas)

    def _stop_listeners(self) -> None:
        for node in set(self._broker_ids) | set(alive_nodes()):
            with contextlib.suppress(ValueError):
                ray.kill(
                    ray.get_actor(listener_actor_name(node), namespace=self.namespace),
                    no_restart=True,
                )

    def _stop_coordinator(self) -> None:
        for name in (COORDINATOR_NAME, TRANSACTION_COORDINATOR_NAME):
            with contextlib.suppress(ValueError):
                ray.kill(ray.get_actor(name, namespace=self.namespace), no_restart=True)

    # ------------------------------------------------------------------------ ACLs

    def _require_authorizer(self) -> None:
        if not self.broker.authorizer_class_name:
            raise SecurityDisabledError(
                "no authorizer is configured (set the broker's authorizer.class.name)"
            )

    def create_acls(self, bindings: list[AclBinding]) -> Result:
        """Add ACL bindings (one already there is kept once); each is persisted before
        it is answered.

        Raises (as the Result's error): SecurityDisabledError with no authorizer on.
        """
        try:
            self._require_authorizer()
            with self._lock:
                for binding in bindings:
                    if binding not in self._acls:
                        self._persist_record(ACL_KEY_PREFIX + binding.to_json().encode(), b"1")
                        self._acls[binding] = None
                        self._bump_acl_version()
            return Result()
        except Exception as error:
            return failure(error)

    def delete_acls(self, filters: list[AclBindingFilter]) -> Result:
        """Delete the bindings each filter matches; answers, per filter, those deleted."""
        try:
            self._require_authorizer()
            deleted: list[list[AclBinding]] = []
            with self._lock:
                for acl_filter in filters:
                    matched = [b for b in self._acls if acl_filter.matches(b)]
                    for binding in matched:
                        self._persist_record(ACL_KEY_PREFIX + binding.to_json().encode(), None)
                        del self._acls[binding]
                    if matched:
                        self._bump_acl_version()
                    deleted.append(matched)
            return Result(value=deleted)
        except Exception as error:
            return failure(error)

    def describe_acls(self, acl_filter: AclBindingFilter) -> Result:
        """The bindings ``acl_filter`` matches."""
        try:
            self._require_authorizer()
            with self._lock:
                return Result(value=[b for b in self._acls if acl_filter.matches(b)])
        except Exception as error:
            return failure(error)

    def acls_since(self, version: tuple[str, int] | None) -> tuple[tuple[str, int], list] | None:
        """Every binding with its version, or None if ``version`` is still current:
        what listeners poll (a poll that finds nothing new is one small call)."""
        with self._lock:
            if version == self._acl_version:
                return None
            return self._acl_version, list(self._acls)

    def _bump_acl_version(self) -> None:
        incarnation, count = self._acl_version
        self._acl_version = (incarnation, count + 1)

    # ------------------------------------------------------------------ lifecycle

    def shutdown(self) -> Result:
        """Close every replica cleanly and stop it; data stays on disk."""
        self._stopping.set()
        self._wake.set()
        self._monitor_thread.join(timeout=10)
        self._watch.stop()
        self._stop_coordinator()
        self._stop_listeners()
        with self._lock:
            for topic in self.topics.values():
                self._stop_replicas(topic, delete_data=False)
            self._log.close()
            if self._data_dir_lock >= 0:  # free for the next cluster at once
                os.close(self._data_dir_lock)
                self._data_dir_lock = -1
        return Result()

    def ping(self) -> int:
        """Liveness check; returns the controller's process id."""
        return os.getpid()


ControllerActor = ray.remote(max_concurrency=16)(Controller)
"""The controller as a Ray actor class (the one place it becomes one)."""
