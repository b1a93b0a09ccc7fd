"""``rs.mirror.MirrorMaker``: mirror a source cluster's topics into a target cluster.

::

    mm = rs.mirror.MirrorMaker(cluster, source={"bootstrap.servers": "kafka:9092"},
                               topics="orders.*", groups=".*", source_alias="primary")
    mm.start()
    mm.status()                       # state, records, lag per partition
    mm.translate_offsets("billing")   # where group "billing" resumes on the target
    mm.stop()

    # the other way: raystream's topics into a Kafka-protocol cluster
    rs.mirror.MirrorMaker(cluster, source=cluster, target={"bootstrap.servers": "kafka:9092"},
                          source_alias="ray", target_alias="kafka")

``cluster`` is the raystream cluster the flow runs in (its actor lives in ``cluster``'s
namespace) and, unless ``target`` says otherwise, the target. ``source`` and ``target``
say where a cluster is: Kafka client properties (``bootstrap.servers``,
``security.protocol``, ``ssl.ca.location``, ``sasl.*`` ...) for any Kafka-protocol
cluster (a raystream on another Ray cluster through its Kafka listener included),
``{"namespace": "other"}`` for a raystream cluster on this Ray, or an ``rs.Cluster``.
``config`` takes any other MirrorMaker 2 setting by its key
(``sync.group.offsets.enabled``, ``emit.checkpoints.interval.seconds``,
``replication.policy.class`` ...).

The flow runs in one Ray actor (``raystream.actors.mirror_worker``): MirrorMaker 2's
dedicated mode, with MM2's connectors (:mod:`raystream.mirror.connectors`) as its tasks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from raystream.errors import ConnectError, InvalidConfigError
from raystream.mirror.clusters import RaystreamCluster, TargetCluster, open_cluster, read_records
from raystream.mirror.config import ClusterSpec, FlowSettings, settings_from_keys
from raystream.mirror.offsets import Checkpoint, latest_checkpoints
from raystream.types import TopicPartition

START_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 60.0


def source_spec(alias: str, source: Any) -> ClusterSpec:
    """The :class:`ClusterSpec` of the ``source`` argument (see the module docstring)."""
    return cluster_spec(alias, source, "source")


def cluster_spec(alias: str, where: Any, argument: str) -> ClusterSpec:
    """The :class:`ClusterSpec` of the ``source`` or ``target`` argument ``where``.

    Raises:
        InvalidConfigError: neither a dict nor a raystream Cluster, or a dict that says
            neither where a Kafka cluster nor which raystream namespace.
    """
    namespace = getattr(where, "namespace", None)
    if namespace is not None and hasattr(where, "controller"):
        return ClusterSpec(alias, namespace=namespace)
    if not isinstance(where, Mapping):
        raise InvalidConfigError(
            f"{argument}={where!r}: give Kafka client properties, {{'namespace': ...}} or an "
            "rs.Cluster"
        )
    props = {str(k): str(v) for k, v in where.items()}
    if "namespace" in props:
        props["raystream.namespace"] = props.pop("namespace")
    if "address" in props:
        props["raystream.address"] = props.pop("address")
    return ClusterSpec.from_properties(alias, props)


def flow_of(
    cluster: Any,
    source: Any,
    topics: str,
    groups: str,
    source_alias: str,
    exactly_once: bool,
    target_alias: str | None,
    config: Mapping[str, Any] | None,
    target: Any = None,
) -> FlowSettings:
    """The flow :class:`MirrorMaker` runs, validated.

    Raises:
        InvalidConfigError: a bad setting, or a Kafka-protocol ``target`` without a
            ``target_alias``.
    """
    settings = settings_from_keys({str(k): str(v) for k, v in (config or {}).items()})
    settings.update(topics=topics, groups=groups, exactly_once=exactly_once)
    if target is None:
        target_spec = ClusterSpec(target_alias or cluster.namespace, namespace=cluster.namespace)
    else:
        target_spec = cluster_spec(target_alias or "target", target, "target")
        if target_alias is None:
            if not target_spec.is_raystream:
                raise InvalidConfigError(
                    "target_alias= is needed with a Kafka-protocol target: it names the "
                    "target in remote topics and heartbeats, and stops loops"
                )
            target_spec = dataclasses.replace(target_spec, alias=target_spec.namespace)
    return FlowSettings(source=source_spec(source_alias, source), target=target_spec, **settings)


class MirrorMaker:
    """One mirroring flow from ``source`` into ``target`` (module docstring).

    Args:
        cluster: the raystream cluster the flow runs in, and the target by default.
        source: where the source cluster is.
        topics: comma-separated regexes of the topics to mirror; new matching topics
            are picked up every ``refresh.topics.interval.seconds``.
        groups: regexes of the consumer groups whose offsets are checkpointed.
        source_alias: names the source: remote topics are ``<source_alias>.<topic>``.
        exactly_once: records and source offsets in the target's transactions.
        target_alias: the target's alias (default: a raystream target's namespace;
            needed for a Kafka-protocol target); a flow never mirrors a topic that
            came from here (active/active without loops).
        config: other MirrorMaker 2 settings by their keys.
        detached: keep the flow running after this process ends (``raystream mirror``).
        target: where the target is, when it is not ``cluster`` (like ``source``).
    """

    def __init__(
        self,
        cluster: Any,
        source: Any,
        topics: str = ".*",
        groups: str = ".*",
        source_alias: str = "source",
        exactly_once: bool = False,
        target_alias: str | None = None,
        config: Mapping[str, Any] | None = None,
        detached: bool = False,
        target: Any = None,
    ) -> None:
        self.cluster = cluster
        self.flow = flow_of(
            cluster,
            source,
            topics,
            groups,
            source_alias,
            exactly_once,
            target_alias,
            config,
            target,
        )
        self.detached = detached
        self.actor: Any = None

    @classmethod
    def from_flow(cls, cluster: Any, flow: FlowSettings, detached: bool = False) -> MirrorMaker:
        """A MirrorMaker for a flow read from an MM2 properties file, run in ``cluster``."""
        mm = cls.__new__(cls)
        mm.cluster, mm.flow, mm.detached, mm.actor = cluster, flow, detached, None
        return mm

    @property
    def name(self) -> str:
        return self.flow.name

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the flow's actor and wait until its tasks run.

        Raises:
            ConnectError: the flow failed to start (the error says why).
        """
        from raystream.actors.mirror_worker import MirrorWorkerActor, flow_actor_name
        from raystream.transport import wait_result

        options: dict[str, Any] = {
            "name": flow_actor_name(self.flow.name),
            "namespace": self.cluster.namespace,
            "num_cpus": 0,
            "max_restarts": -1,
            "get_if_exists": True,
        }
        if self.detached:
            options["lifetime"] = "detached"
        self.actor = MirrorWorkerActor.options(**options).remote(self.flow.to_connector_config())
        deadline = time.monotonic() + timeout_s
        while not wait_result(self.actor.ready.remote(), CALL_TIMEOUT_S, "mirror ready"):
            if time.monotonic() > deadline:
                raise ConnectError(f"mirror {self.flow.name} did not start in {timeout_s} s")
            time.sleep(0.1)
        status = self.status()
        if status["state"] == "FAILED":
            raise ConnectError(f"mirror {self.flow.name} failed to start: {status['error']}")

    def status(self) -> dict[str, Any]:
        """State (RUNNING, FAILED, STOPPED), records mirrored, checkpoints written, and
        per source partition its end offset, how far it is replicated and the lag."""
        from raystream.transport import wait_result

        if self.actor is None:
            return {"flow": self.flow.name, "state": "UNASSIGNED", "partitions": {}}
        return wait_result(self.actor.status.remote(), CALL_TIMEOUT_S, "mirror status")

    def translate_offsets(
        self, group_id: str, timeout_s: float = 30.0
    ) -> dict[TopicPartition, int]:
        """Where ``group_id`` resumes on the target: the latest checkpoint of each of
        its partitions (remote topic partitions of the target), MM2's
        ``RemoteClusterUtils.translateOffsets``. Empty until a checkpoint was written."""
        topic = self.flow.policy().checkpoints_topic(self.flow.source.alias)
        target = self._target()
        try:
            return latest_checkpoints(read_checkpoints(target, topic, timeout_s), group_id)
        finally:
            target.close()

    def _target(self) -> TargetCluster:
        """The flow's target, through ``cluster``'s clients when it is the target."""
        spec = self.flow.target
        if spec.is_raystream and spec.namespace == self.cluster.namespace:
            return RaystreamCluster(spec.alias, self.cluster)
        return open_cluster(spec)

    def stop(self) -> None:
        """Stop the flow and its actor (what was mirrored stays)."""
        from raystream.transport import CALL_ERRORS, stop_actor, wait_result

        if self.actor is None:
            return
        with contextlib.suppress(CALL_ERRORS):
            wait_result(self.actor.stop.remote(), CALL_TIMEOUT_S, "mirror stop")
        stop_actor(self.actor)
        self.actor = None

    def __enter__(self) -> MirrorMaker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def read_checkpoints(
    target: TargetCluster, topic: str, timeout_s: float = 30.0
) -> list[Checkpoint]:
    """Every checkpoint in ``topic`` of ``target`` ([] if the topic does not exist)."""
    return [Checkpoint.decode(k, v) for k, v in read_records(target, topic, timeout_s)]
