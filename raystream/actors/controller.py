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
import logging
import os
import threading
import time
import uuid
from typing import Any

import pyarrow as pa
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raystream.actors.coordinator import COORDINATOR_NAME, GroupCoordinatorActor
from raystream.actors.liveness import is_down
from raystream.actors.replica import ReplicaActor
from raystream.actors.txn_coordinator import (
    TRANSACTION_COORDINATOR_NAME,
    TransactionCoordinatorActor,
)
from raystream.config import BrokerConfig
from raystream.controller.metadata import (
    PartitionState,
    TopicState,
    is_internal,
    validate_count,
    validate_topic_name,
)
from raystream.controller.placement import is_spread, place_replicas, rebind_restarted_nodes
from raystream.controller.producer_ids import ProducerIdBlocks
from raystream.errors import (
    FencedLeaderEpochError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    LogDirInUseError,
    RaystreamTimeoutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from raystream.groups.offsets_topic import OFFSETS_TOPIC
from raystream.log import Log, LogConfig
from raystream.log.checkpoint import lock_directory
from raystream.protocol import PartitionMetadata, Result, TopicMetadata, failure
from raystream.records import record_schema
from raystream.replication.election import OFFLINE, elect_leader, preferred_leader
from raystream.transactions.state_topic import TRANSACTION_STATE_TOPIC
from raystream.types import PartitionDescription, TopicDescription

logger = logging.getLogger(__name__)

METADATA_DIR = "__cluster_metadata-0"
PRODUCER_ID_BLOCK_KEY = b"@producer-id-block"
"""Metadata-log key of the reserved producer-id block end ('@' is in no topic name)."""
REPLICA_READY_TIMEOUT_S = 120
DATA_DIR_LOCK_WAIT_S = 10
"""How long a starting controller waits for the data directory's lock: a controller
that Ray restarts may find its predecessor's process still exiting."""
MONITOR_INTERVAL_S = 0.5
PING_TIMEOUT_S = 1.0
QUICK_PING_S = 0.2
"""After this long, replicas that have not answered their ping are looked up in Ray's
actor table: one that Ray is restarting (or gave up on) counts as dead at once."""
SLOW_PING_STRIKES = 3
"""Unanswered pings in a row before a replica that Ray reports alive counts as dead; a
ping that fails, or an actor that Ray is restarting, counts at once, which is what
makes failover fast."""


def _ping_failed(ref: Any) -> bool:
    """Whether an answered ping raised (its actor died)."""
    try:
        ray.get(ref)
    except Exception:
        return True
    return False


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


class Controller:
    """Topic lifecycle, replica placement and metadata for one raystream cluster.

    Thread-safety: Ray runs calls on several threads (the actor has max_concurrency
    > 1 so that a slow topic creation does not block metadata lookups); one lock
    serializes every change of metadata.
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
        self.topics, producer_id_end = self._replay()
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
            self._start_replicas(topic, list(range(len(topic.partitions))))
        self._stopping = threading.Event()
        self._monitor_thread = threading.Thread(
            target=self._monitor, name="raystream-controller-monitor", daemon=True
        )
        self._monitor_thread.start()

    # --------------------------------------------------------------- metadata log

    def _replay(self) -> tuple[dict[str, TopicState], int]:
        """Rebuild the topics and the reserved producer-id block end from the log."""
        topics: dict[str, TopicState] = {}
        producer_id_end = 0
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
        return topics, producer_id_end

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

    def _monitor(self) -> None:
        """Watch replicas and nodes; fail over leaders, shrink ISRs, replace lost replicas.

        Runs on its own thread for the controller's life; it logs and survives every
        exception, and never holds the lock while waiting on replicas.
        """
        strikes: dict[tuple[str, int, int], int] = {}
        known_nodes = set(alive_nodes())
        next_rebalance = time.monotonic() + self.broker.leader_imbalance_check_interval_seconds
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                self._monitor_once(strikes)
                nodes = set(alive_nodes())
                joined = bool(nodes - known_nodes)
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
            self._stopping.wait(max(MONITOR_INTERVAL_S - (time.monotonic() - started), 0.05))

    def _monitor_once(self, strikes: dict[tuple[str, int, int], int]) -> None:
        with self._lock:
            handles = dict(self._handles)
        nodes = set(alive_nodes())
        pings = {key: handle.ping.remote() for key, handle in handles.items()}
        if not pings:
            return
        refs = list(pings.values())
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=QUICK_PING_S)
        unanswered = set(pending)
        down = {
            key
            for key, ref in pings.items()
            if ref in unanswered and is_down(handles[key]._actor_id.hex())
        }
        waiting = [ref for key, ref in pings.items() if ref in unanswered and key not in down]
        if waiting:
            more, _ = ray.wait(
                waiting, num_returns=len(waiting), timeout=PING_TIMEOUT_S - QUICK_PING_S
            )
            ready += more
        ready_set = set(ready)
        alive: set[tuple[str, int, int]] = set()
        for key, ref in pings.items():
            if key in down:
                answered = failed = True
            else:
                answered = ref in ready_set
                failed = answered and _ping_failed(ref)
            if answered and not failed:
                strikes.pop(key, None)
                alive.add(key)
                continue
            strikes[key] = strikes.get(key, 0) + 1
            if not answered and strikes[key] < SLOW_PING_STRIKES:
                alive.add(key)  # slow (busy machine), not yet dead
        calls = []
        with self._lock:
            for topic in list(self.topics.values()):
                for state in topic.partitions:
                    lost = {r for r in state.replicas if state.nodes.get(r) not in nodes}
                    # A replica created after this pass's pings counts as alive.
                    live = {
                        r
                        for r in state.replicas
                        if r not in lost
                        and (
                            (topic.name, state.partition, r) in alive
                            or (topic.name, state.partition, r) not in pings
                        )
                    }
                    calls += self._reconcile(topic, state, live, lost)
        if calls:
            ray.wait(calls, num_returns=len(calls), timeout=5)

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
                for name in names if names is not None else list(self.topics):
                    topic = self._topic(name)
                    for state in topic.partitions:
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
    ) -> Result:
        """Create a topic and its replica actors; answers with its TopicMetadata."""
        try:
            validate_topic_name(name)
            validate_count(partitions, "partitions")
            if replication_factor is None:
                replication_factor = self.broker.default_replication_factor
            validate_count(replication_factor, "replication_factor")
            overrides = self._validated_config(config or {})
            if value_schema is not None:
                pa.ipc.read_schema(pa.py_buffer(value_schema))
            with self._lock:
                if name in self.topics:
                    raise TopicAlreadyExistsError(f"topic {name!r} already exists")
                nodes = alive_nodes()
                placement = place_replicas(nodes, partitions, replication_factor, len(self.topics))
                topic = TopicState(
                    name=name,
                    topic_id=uuid.uuid4().hex,
                    partitions=[
                        self._new_partition(p, assigned) for p, assigned in enumerate(placement)
                    ],
                    config=overrides,
                    value_schema=value_schema,
                )
                self._persist(name, topic)
                self.topics[name] = topic
                self._start_replicas(topic, list(range(partitions)))
                return Result(value=self._topic_metadata(topic))
        except Exception as error:
            return failure(error)

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

    def delete_topic(self, name: str) -> Result:
        """Delete a topic, its replica actors and their data."""
        try:
            with self._lock:
                topic = self._topic(name)
                self._persist(name, None)
                del self.topics[name]
                self._stop_replicas(topic, delete_data=True)
                return Result()
        except Exception as error:
            return failure(error)

    def create_partitions(self, name: str, total: int) -> Result:
        """Grow a topic to ``total`` partitions (never shrinks, as in Kafka)."""
        try:
            with self._lock:
                topic = self._topic(name)
                validate_count(total, "partitions")
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
                for offset, assigned in enumerate(placement):
                    topic.partitions.append(self._new_partition(current + offset, assigned))
                self._persist(name, topic)
                self._start_replicas(topic, list(range(current, total)))
                return Result(value=self._topic_metadata(topic))
        except Exception as error:
            return failure(error)

    def alter_topic_config(self, name: str, changes: dict[str, Any]) -> Result:
        """Change topic config keys; replicas apply them at once."""
        try:
            with self._lock:
                topic = self._topic(name)
                merged = {**topic.config, **self._validated_config(changes)}
                self._effective_config(TopicState(name, "", [], merged))
                topic.config = merged
                self._persist(name, topic)
                config = self._effective_config(topic).to_kafka()
                handles = [
                    self._handles[(name, p.partition, r)]
                    for p in topic.partitions
                    for r in p.replicas
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
        if not isinstance(partition, int) or not 0 <= partition < len(topic.partitions):
            raise UnknownTopicOrPartitionError(
                f"partition {partition!r} of topic {topic.name!r} does not exist"
            )
        return topic.partitions[partition]

    # ------------------------------------------------------------------ queries

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names, sorted; internal topics only on request."""
        with self._lock:
            return sorted(n for n in self.topics if include_internal or not is_internal(n))

    def metadata(self, names: list[str]) -> Result:
        """TopicMetadata (leaders and their handles) for the named topics."""
        try:
            with self._lock:
                return Result(value=[self._topic_metadata(self._topic(n)) for n in names])
        except Exception as error:
            return failure(error)

    def describe_topic(self, name: str) -> Result:
        """A TopicDescription with live offsets from each partition's leader."""
        try:
            with self._lock:
                topic = self._topic(name)
                leaders = [
                    self._handles.get((name, p.partition, p.leader)) for p in topic.partitions
                ]
            states: list[dict[str, Any] | None] = []
            for handle in leaders:
                try:
                    states.append(ray.get(handle.state.remote(), timeout=10) if handle else None)
                except Exception:
                    states.append(None)
            partitions = [
                PartitionDescription(
                    partition=p.partition,
                    leader=p.leader if state else -1,
                    replicas=list(p.replicas),
                    isr=list(p.isr),
                    leader_epoch=p.leader_epoch,
                    log_start_offset=state["log_start_offset"] if state else -1,
                    high_watermark=state["high_watermark"] if state else -1,
                    log_end_offset=state["log_end_offset"] if state else -1,
                    nodes=dict(p.nodes),
                )
                for p, state in zip(topic.partitions, states, strict=True)
            ]
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
        """Cluster overview for ``raystream status``."""
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
            "topics": len([t for t in topics if not is_internal(t.name)]),
            "partitions": sum(len(t.partitions) for t in topics),
            "replicas": len(self._handles),
            "offline_partitions": offline,
            "under_replicated_partitions": under_replicated,
            "partitions_not_spread": not_spread,
        }

    def broker_config(self) -> dict[str, Any]:
        """The cluster-wide settings in force."""
        return dict(self.broker_options)

    def _topic(self, name: str) -> TopicState:
        if not isinstance(name, str):
            raise InvalidRequestError(f"topic name must be a string, not {type(name).__name__}")
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return topic

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
                )
                for p in topic.partitions
            ],
            config=self._effective_config(topic).to_kafka(),
            value_schema=topic.schema(),
        )

    # ------------------------------------------------------------- coordinators

    def find_coordinator(self) -> Result:
        """The group coordinator's handle, starting it (and ``__consumer_offsets``) on
        first use, as Kafka creates its offsets topic on the first FindCoordinator."""
        try:
            with self._lock:
                offsets = self._internal_topic(OFFSETS_TOPIC)
                return Result(
                    value=self._coordinator(GroupCoordinatorActor, COORDINATOR_NAME, offsets)
                )
        except Exception as error:
            return failure(error)

    def find_transaction_coordinator(self) -> Result:
        """The transaction coordinator's handle, starting it (and ``__transaction_state``,
        and ``__consumer_offsets`` whose partition count it needs) on first use."""
        try:
            with self._lock:
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
        must still work); its partition count. The caller holds the lock."""
        if name not in self.topics:
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
            self.create_topic(
                name,
                partitions,
                replication,
                {"cleanup.policy": "compact", "segment.bytes": 16 << 20},
            ).unwrap()
        return len(self.topics[name].partitions)

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
        ).remote(self.namespace, self.broker.listener_host, *args)

    def _stop_coordinator(self) -> None:
        for name in (COORDINATOR_NAME, TRANSACTION_COORDINATOR_NAME):
            with contextlib.suppress(ValueError):
                ray.kill(ray.get_actor(name, namespace=self.namespace), no_restart=True)

    # ------------------------------------------------------------------ lifecycle

    def shutdown(self) -> Result:
        """Close every replica cleanly and stop it; data stays on disk."""
        self._stopping.set()
        self._monitor_thread.join(timeout=10)
        self._stop_coordinator()
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
