"""A streams topology as data: nodes, edges, stores, sub-topologies (pure).

The DSL (:mod:`raystream.streams.dsl`) appends :class:`Node` values to a
:class:`Topology`; nothing here runs records. :meth:`Topology.build` freezes it into
:class:`SubTopology` values, split where records pass through an internal repartition
topic (a sink into it ends one sub-topology, a source reading it starts another), and
joined where two nodes share a store (a stream-table join reads the store the table's
source writes). A task runs one sub-topology on one partition of each of its source
topics; the two sides of a join must therefore have the same partition count
(:attr:`SubTopology.copartition_groups`), which the runtime checks at start with
:meth:`Topology.partition_counts` (which also sizes the repartition topics).

Node names follow Kafka Streams (``KSTREAM-FILTER-0000000001``), so
:meth:`Topology.describe` reads like ``Topology.describe()``::

    Topologies:
       Sub-topology: 0
        Source: KSTREAM-SOURCE-0000000000 (topics: [orders])
          --> KSTREAM-FILTER-0000000001
        Processor: KSTREAM-FILTER-0000000001 (stores: [])
          --> KSTREAM-SINK-0000000002
          <-- KSTREAM-SOURCE-0000000000
        Sink: KSTREAM-SINK-0000000002 (topic: big-orders)
          <-- KSTREAM-FILTER-0000000001
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from raystream.errors import TopologyError

StoreKind = Literal["kv", "window", "session"]


@dataclass(frozen=True)
class StoreSpec:
    """A state store a processor needs; the task opens it from the stores library.

    Attributes:
        name: Unique in the application; the changelog topic is
            ``<application_id>-<name>-changelog``.
        kind: "kv" (key-value), "window" (keyed by key and window start) or "session".
        retention_ms: For window and session stores: how far behind the store's stream
            time (latest window start, or session end) entries are kept: long enough
            for every window that is still open. 0 for kv.
        window_size_ms: For window stores: the windows' length (1 for a join's store).
        retain_duplicates: For window stores: keep every value put for a key and time
            (a stream-stream join keeps each record of a window).
    """

    name: str
    kind: StoreKind
    retention_ms: int = 0
    window_size_ms: int = 0
    retain_duplicates: bool = False


@dataclass
class Node:
    """One node of the topology.

    Attributes:
        name: Kafka Streams' name, ``<KIND>-<10-digit index>`` unless the user named it.
        role: "source" (reads ``topics``), "processor" or "sink" (writes ``topic``).
        op: What the node does; the task builds the processor for it from ``params``.
        parents: Names of the nodes whose output this node receives.
        params: The op's arguments (functions, windows, serializers, store names).
        stores: Names of the stores the node reads or writes.
        topics: For a source, the topics it reads; for a sink, a one-item list.
    """

    name: str
    role: Literal["source", "processor", "sink"]
    op: str
    parents: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    stores: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SubTopology:
    """A connected part of the topology that one task runs per partition.

    Attributes:
        id: 0, 1, ... in the order of the sub-topology's first node.
        nodes: Its nodes in the order they were added (parents before children).
        source_topics: Every topic its sources read (user and repartition topics).
        sink_topics: Every topic its sinks write.
        stores: The specs of the stores its nodes use.
        copartition_groups: Sets of source topics that must have equal partition counts
            (the topics upstream of the two sides of a join: the task that joins key k
            must read every record of k from each side, so partition p of each).
    """

    id: int
    nodes: tuple[Node, ...]
    source_topics: tuple[str, ...]
    sink_topics: tuple[str, ...]
    stores: tuple[StoreSpec, ...]
    copartition_groups: tuple[frozenset[str], ...]

    def children(self) -> dict[str, list[str]]:
        """Each node's children within the sub-topology, in the order they were added."""
        result: dict[str, list[str]] = {node.name: [] for node in self.nodes}
        for node in self.nodes:
            for parent in node.parents:
                if parent in result:
                    result[parent].append(node.name)
        return result


class Topology:
    """The nodes, stores and internal topics of one application, built by the DSL.

    Invariants: node names and store names are unique; a node's parents were added
    before it; internal topics are named ``<application_id>-<name>-repartition``.
    """

    def __init__(self, application_id: str) -> None:
        self.application_id = application_id
        self.nodes: dict[str, Node] = {}
        self.stores: dict[str, StoreSpec] = {}
        self.repartition_topics: list[str] = []
        self.copartition: list[frozenset[str]] = []
        self._index = 0

    def new_name(self, kind: str) -> str:
        """The next Kafka-style name for a node or store of ``kind``."""
        name = f"{kind}-{self._index:010d}"
        self._index += 1
        return name

    def add(self, node: Node) -> Node:
        """Add ``node`` (its parents must exist, its name must be new)."""
        if node.name in self.nodes:
            raise TopologyError(f"a node named {node.name!r} already exists in the topology")
        for parent in node.parents:
            if parent not in self.nodes:
                raise TopologyError(f"{node.name}: unknown parent node {parent!r}")
        self.nodes[node.name] = node
        return node

    def add_store(self, spec: StoreSpec) -> StoreSpec:
        """Register a store (names are unique: each has its own changelog topic)."""
        if spec.name in self.stores:
            raise TopologyError(
                f"a state store named {spec.name!r} already exists: store names must be "
                "unique within an application"
            )
        self.stores[spec.name] = spec
        return spec

    def repartition_topic(self, name: str) -> str:
        """Register and return the internal topic ``<application_id>-<name>-repartition``."""
        topic = f"{self.application_id}-{name}-repartition"
        if topic in self.repartition_topics:
            raise TopologyError(f"repartition topic {topic!r} already exists: name it apart")
        self.repartition_topics.append(topic)
        return topic

    def require_copartitioned(self, *node_names: str) -> None:
        """Record that the topics feeding ``node_names`` must be co-partitioned."""
        topics = frozenset(t for name in node_names for t in self.source_topics_of(name))
        if len(topics) > 1 and topics not in self.copartition:
            self.copartition.append(topics)

    def source_topics_of(self, name: str) -> list[str]:
        """The topics of the sources upstream of node ``name`` (repartition topics
        included: the walk stops at a source)."""
        seen: set[str] = set()
        stack = [name]
        topics: list[str] = []
        while stack:
            node = self.nodes[stack.pop()]
            if node.name in seen:
                continue
            seen.add(node.name)
            if node.role == "source":
                topics.extend(t for t in node.topics if t not in topics)
            stack.extend(node.parents)
        return topics

    def changelog_topics(self) -> list[str]:
        """The changelog topic of every store (each store has one)."""
        return [f"{self.application_id}-{name}-changelog" for name in self.stores]

    def build(self) -> list[SubTopology]:
        """Split the nodes into sub-topologies: connected through parent edges and shared
        stores, cut at repartition topics (a source never has parents)."""
        if not any(node.role == "source" for node in self.nodes.values()):
            raise TopologyError("the topology has no source: call app.stream() or app.table()")
        parent_of = {name: name for name in self.nodes}

        def find(name: str) -> str:
            while parent_of[name] != name:
                parent_of[name] = parent_of[parent_of[name]]
                name = parent_of[name]
            return name

        def union(a: str, b: str) -> None:
            parent_of[find(a)] = find(b)

        by_store: dict[str, str] = {}
        for node in self.nodes.values():
            for parent in node.parents:
                union(node.name, parent)
            for store in node.stores:
                if store in by_store:
                    union(node.name, by_store[store])
                by_store.setdefault(store, node.name)
        groups: dict[str, list[Node]] = {}
        for node in self.nodes.values():
            groups.setdefault(find(node.name), []).append(node)
        result = []
        for index, nodes in enumerate(groups.values()):
            sources = [t for n in nodes if n.role == "source" for t in n.topics]
            sinks = [t for n in nodes if n.role == "sink" for t in n.topics]
            stores = sorted({s for n in nodes for s in n.stores})
            groups_needed = [g for g in self.copartition if g <= set(sources)]
            result.append(
                SubTopology(
                    id=index,
                    nodes=tuple(nodes),
                    source_topics=tuple(dict.fromkeys(sources)),
                    sink_topics=tuple(dict.fromkeys(sinks)),
                    stores=tuple(self.stores[s] for s in stores),
                    copartition_groups=tuple(groups_needed),
                )
            )
        return result

    def partition_counts(self, partitions: dict[str, int]) -> dict[str, int]:
        """Check co-partitioning and return the partition count of every source topic,
        the repartition topics' included (what the runtime creates them with).

        As Kafka Streams does: a repartition topic takes the largest count of the source
        topics of the sub-topology that writes it; then one that must be co-partitioned
        with user topics takes their count instead.

        Args:
            partitions: The partition count of every user topic the topology reads.

        Raises:
            TopologyError: naming the topics and their counts when co-partitioned user
                topics disagree, or naming a source topic whose count is unknown.
        """
        subtopologies = self.build()
        internal = set(self.repartition_topics)
        counts = {t: n for t, n in partitions.items() if t not in internal}
        for sub in subtopologies:  # writers come before readers: sub-topologies are in order
            known = [counts[t] for t in sub.source_topics if t in counts]
            for topic in sub.sink_topics:
                if topic in internal and known:
                    counts[topic] = max(known)
        for sub in subtopologies:
            for topic in sub.source_topics:
                if topic not in counts:
                    raise TopologyError(f"source topic {topic!r} does not exist")
            for group in sub.copartition_groups:
                users = {t: counts[t] for t in sorted(group) if t not in internal}
                if len(set(users.values())) > 1:
                    raise TopologyError(
                        f"topics {sorted(users)} must be co-partitioned (sub-topology "
                        f"{sub.id} joins them) but have partition counts {users}"
                    )
                target = next(iter(users.values())) if users else max(counts[t] for t in group)
                for topic in group & internal:
                    counts[topic] = target
        return counts

    def task_ids(self, partitions: dict[str, int]) -> list[tuple[int, int]]:
        """Every task ``(subtopology, partition)``: a sub-topology has as many tasks as
        its source topics' largest partition count (see :meth:`partition_counts`)."""
        counts = self.partition_counts(partitions)
        return [
            (sub.id, p)
            for sub in self.build()
            for p in range(max(counts[t] for t in sub.source_topics))
        ]

    def describe(self) -> str:
        """The topology as Kafka Streams' ``Topology.describe()`` prints it."""
        lines = ["Topologies:"]
        for sub in self.build():
            children = sub.children()
            lines.append(f"   Sub-topology: {sub.id}")
            for node in sub.nodes:
                if node.role == "source":
                    lines.append(f"    Source: {node.name} (topics: [{', '.join(node.topics)}])")
                elif node.role == "sink":
                    lines.append(f"    Sink: {node.name} (topic: {node.topics[0]})")
                else:
                    lines.append(f"    Processor: {node.name} (stores: [{', '.join(node.stores)}])")
                if children[node.name]:
                    lines.append(f"      --> {', '.join(children[node.name])}")
                elif node.role != "sink":
                    lines.append("      --> none")
                if node.parents:
                    lines.append(f"      <-- {', '.join(node.parents)}")
            lines.append("")
        return "\n".join(lines)
