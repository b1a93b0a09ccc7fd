"""``raystream status``, ``topics``, ``groups``, ``leader-election`` and
``reassign-partitions``: the Admin calls as Kafka's tools offer them.

Every list and describe command prints a table for people or, with ``--output json``,
one JSON document for scripts. ``groups reset-offsets`` and ``reassign-partitions``
only show what they would do unless ``--execute`` is given, as Kafka's tools do.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from raystream.errors import (
    GroupIdNotFoundError,
    InvalidConfigError,
    InvalidRequestError,
    PartitionOutOfRangeError,
)
from raystream.types import GroupDescription, TopicDescription, TopicPartition

DRY_RUN_NOTE = "(dry run: nothing changed; add --execute to apply)"
PROGRESS_AFTER_S = 1.0
"""A creation still under way after this long shows its progress: a large one takes
a while, since every replica is a process to start."""
PROGRESS_EVERY_S = 1.0

T = TypeVar("T")


def print_json(document: Any) -> None:
    """One JSON document on stdout (values json does not know print as text)."""
    print(json.dumps(document, indent=2, sort_keys=True, default=str))


def topic_document(description: TopicDescription) -> dict[str, Any]:
    """A topic's description as JSON-ready data."""
    schema = description.schema
    return {
        "name": description.name,
        "topic_id": description.topic_id,
        "config": description.config,
        "schema": None
        if schema is None
        else [{"name": f.name, "type": str(f.type)} for f in schema],
        "partitions": [dataclasses.asdict(p) for p in description.partitions],
    }


def group_document(description: GroupDescription) -> dict[str, Any]:
    """A group's description as JSON-ready data: one row per partition it touches."""
    owner = {tp: m for m, tps in description.members.items() for tp in tps}
    return {
        "group_id": description.group_id,
        "state": description.state,
        "generation": description.generation,
        "protocol": description.protocol,
        "members": {
            m: [f"{tp.topic}-{tp.partition}" for tp in tps]
            for m, tps in description.members.items()
        },
        "partitions": [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "offset": description.offsets.get(tp),
                "lag": description.lag.get(tp),
                "member": owner.get(tp),
            }
            for tp in sorted(set(description.offsets) | set(owner))
        ],
    }


def print_topic(description: TopicDescription, brief: bool = False) -> None:
    """A topic as lines for people: config, schema and one line per partition."""
    print(f"topic {description.name} ({len(description.partitions)} partitions)")
    if not brief:
        print("  config: " + json.dumps(description.config, sort_keys=True))
        if description.schema is not None:
            print("  schema: " + ", ".join(f"{f.name}: {f.type}" for f in description.schema))
    for p in description.partitions:
        print(
            f"  partition {p.partition}: leader {p.leader} replicas {p.replicas} isr {p.isr} "
            f"epoch {p.leader_epoch} log start {p.log_start_offset} "
            f"high watermark {p.high_watermark} log end {p.log_end_offset}"
        )


def topic_counts_line(overview: dict[str, Any]) -> str:
    """The status line's topic figures, user topics first and internal ones apart, e.g.
    ``1 (3 partitions, 3 replicas); internal: 1 (1 partition, 1 replica)``."""

    def counted(prefix: str) -> str:
        partitions, replicas = overview[f"{prefix}partitions"], overview[f"{prefix}replicas"]
        return (
            f"{overview[f'{prefix}topics']} ({_plural(partitions, 'partition')}, "
            f"{_plural(replicas, 'replica')})"
        )

    line = counted("")
    if overview.get("internal_topics"):
        line += f"; internal: {counted('internal_')}"
    return line


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def status(args: argparse.Namespace, cluster: Any) -> int:
    """Nodes, topics, partitions and warnings."""
    overview = cluster.status()
    admin = cluster.admin()
    descriptions = [admin.describe_topic(name) for name in admin.list_topics()]
    if args.output == "json":
        print_json({**overview, "topic_descriptions": [topic_document(d) for d in descriptions]})
        return 0
    print(f"namespace:   {overview['namespace']}")
    print(f"data dir:    {overview['data_dir']}")
    print(f"nodes:       {len(overview['nodes'])}")
    print(f"topics:      {topic_counts_line(overview)}")
    for listener in overview.get("kafka_listeners", []):
        endpoints = ", ".join(
            f"{e['protocol']}://{e['host']}:{e['port']}" for e in listener["endpoints"]
        )
        print(f"kafka broker {listener['broker_id']}: {endpoints} (node {listener['node'][:12]})")
    for description in descriptions:
        print_topic(description, brief=True)
    if overview["offline_partitions"]:
        print("OFFLINE partitions: " + ", ".join(overview["offline_partitions"]))
    if overview["under_replicated_partitions"]:
        print("under-replicated: " + ", ".join(overview["under_replicated_partitions"]))
    if overview["partitions_not_spread"]:
        print("warning: replicas sharing a node: " + ", ".join(overview["partitions_not_spread"]))
    return 0


def with_progress(cluster: Any, name: str, run: Callable[[], T]) -> T:
    """``run()`` (creating topic ``name`` or adding partitions to it), showing on
    stderr how many of the new replicas serve while it takes longer than
    PROGRESS_AFTER_S: a line each PROGRESS_EVERY_S when the count moved, rewritten in
    place on a terminal.

    The call runs on a thread of its own and this one asks the controller for the
    creation's progress (``creation_progress``); an interrupt leaves the creation to
    the controller, which finishes it or rolls it back.
    """
    outcome: list[Any] = []

    def call() -> None:
        try:
            outcome.append((True, run()))
        except BaseException as error:  # raised again on the caller's thread
            outcome.append((False, error))

    worker = threading.Thread(target=call, name=f"create-{name}", daemon=True)
    worker.start()
    worker.join(PROGRESS_AFTER_S)
    in_place = sys.stderr.isatty()
    shown: tuple[int, int] | None = None
    while worker.is_alive():
        progress = cluster.call("creation_progress", name)
        if progress and progress["replicas"]:
            counts = (progress["replicas_started"], progress["replicas"])
            if counts != shown:
                shown = counts
                line = f"topic {name}: {counts[0]}/{counts[1]} replicas started"
                print(
                    ("\r" if in_place else "") + line,
                    end="" if in_place else "\n",
                    file=sys.stderr,
                    flush=True,
                )
        worker.join(PROGRESS_EVERY_S)
    ok, value = outcome[0]
    if shown is not None:
        if ok and shown[0] != shown[1]:
            line = f"topic {name}: {shown[1]}/{shown[1]} replicas started"
            print(("\r" if in_place else "") + line, file=sys.stderr, flush=True)
        elif in_place:
            print(file=sys.stderr, flush=True)
    if not ok:
        raise value
    return value


def topics(args: argparse.Namespace, cluster: Any) -> int:
    """``topics create | list | describe | delete | alter | delete-records``."""
    from raystream.cli import parse_config

    admin = cluster.admin()
    if args.action == "create":
        config = parse_config(args.config)
        description = with_progress(
            cluster,
            args.name,
            lambda: admin.create_topic(args.name, args.partitions, args.replication_factor, config),
        )
        print(f"created topic {description.name} with {len(description.partitions)} partitions")
    elif args.action == "list":
        names = admin.list_topics()
        if args.output == "json":
            print_json(names)
        else:
            for name in names:
                print(name)
    elif args.action == "describe":
        description = admin.describe_topic(args.name)
        if args.output == "json":
            print_json(topic_document(description))
        else:
            print_topic(description)
    elif args.action == "delete":
        admin.delete_topic(args.name)
        print(f"deleted topic {args.name}")
    elif args.action == "alter":
        if args.partitions is None and not args.config:
            raise InvalidConfigError("topics alter needs --partitions and/or --config")
        if args.partitions is not None:
            with_progress(
                cluster, args.name, lambda: admin.create_partitions(args.name, args.partitions)
            )
        if args.config:
            admin.alter_topic_config(args.name, parse_config(args.config))
        print_topic(admin.describe_topic(args.name))
    else:
        return delete_records(args, admin)
    return 0


def delete_records(args: argparse.Namespace, admin: Any) -> int:
    """``topics delete-records NAME --offset N [--partition P ...]``: move each
    partition's log start offset to N (-1: its high watermark)."""
    description = admin.describe_topic(args.name)
    count = len(description.partitions)
    partitions = args.partition if args.partition else range(count)
    for partition in partitions:
        if not 0 <= partition < count:
            raise PartitionOutOfRangeError.of(args.name, partition, count)
    starts = admin.delete_records({TopicPartition(args.name, p): args.offset for p in partitions})
    for tp, start in sorted(starts.items()):
        print(f"{tp.topic}-{tp.partition}: log start offset {start}")
    return 0


def groups(args: argparse.Namespace, cluster: Any) -> int:
    """``groups list | describe | reset-offsets``."""
    admin = cluster.admin()
    if args.action == "list":
        names = admin.list_groups()
        if args.output == "json":
            print_json(names)
        else:
            for group in names:
                print(group)
    elif args.action == "describe":
        description = admin.describe_group(args.group)
        if args.output == "json":
            print_json(group_document(description))
        else:
            print_group(description)
    else:
        return reset_offsets(args, cluster, admin)
    return 0


def print_group(d: GroupDescription) -> None:
    """A group as a table for people: one row per partition, then idle members."""
    protocol = f", strategy {d.protocol}" if d.protocol else ""
    print(f"group {d.group_id}: {d.state}, generation {d.generation}{protocol}")
    owner = {tp: m for m, tps in d.members.items() for tp in tps}
    print(f"{'PARTITION':<32} {'OFFSET':>12} {'LAG':>10}  MEMBER")
    for tp in sorted(set(d.offsets) | set(owner)):
        offset = d.offsets.get(tp, "-")
        lag = d.lag.get(tp, "-")
        name = f"{tp.topic}-{tp.partition}"
        print(f"{name:<32} {offset:>12} {lag:>10}  {owner.get(tp, '-')}")
    for member in [m for m, tps in d.members.items() if not tps]:
        print(f"{'(idle)':<32} {'':>12} {'':>10}  {member}")


def reset_offsets(args: argparse.Namespace, cluster: Any, admin: Any) -> int:
    """Work out each partition's new committed offset, print it, and set it only with
    ``--execute`` (Kafka's ``kafka-consumer-groups --reset-offsets``)."""
    try:
        committed = admin.describe_group(args.group).offsets
    except GroupIdNotFoundError:
        committed = {}
    if args.all_topics:
        names = sorted({tp.topic for tp in committed})
        if not names:
            raise InvalidRequestError(
                f"--all-topics: group {args.group!r} has no committed offsets; name --topic"
            )
    else:
        names = [args.topic]
    tps = [
        TopicPartition(name, p.partition)
        for name in names
        for p in cluster.topic_metadata(name, refresh=True).partitions
    ]
    planned = plan_reset(args, cluster, tps, committed)
    if args.execute:
        for name in names:
            admin.reset_offsets(
                args.group, name, {tp.partition: o for tp, o in planned.items() if tp.topic == name}
            )
    if args.output == "json":
        print_json(
            {
                "group": args.group,
                "executed": args.execute,
                "offsets": [
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "current": committed.get(tp),
                        "new": offset,
                    }
                    for tp, offset in sorted(planned.items())
                ],
            }
        )
        return 0
    print(f"{'GROUP':<24} {'PARTITION':<32} {'CURRENT':>10} {'NEW-OFFSET':>10}")
    for tp, offset in sorted(planned.items()):
        current = committed.get(tp, "-")
        print(f"{args.group:<24} {f'{tp.topic}-{tp.partition}':<32} {current:>10} {offset:>10}")
    print(f"reset offsets of group {args.group}" if args.execute else DRY_RUN_NOTE)
    return 0


def plan_reset(
    args: argparse.Namespace,
    cluster: Any,
    tps: list[TopicPartition],
    committed: dict[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """The new offset of each partition, clamped into [log start, high watermark] as
    Kafka's tool clamps it.

    Raises:
        InvalidRequestError: ``--shift-by`` on a partition with no committed offset.
        InvalidConfigError: ``--to-datetime`` is not ISO 8601.
    """
    consumer = cluster.consumer(enable_auto_commit=False)
    try:
        earliest = consumer.beginning_offsets(tps)
        latest = consumer.end_offsets(tps)
        if args.to_earliest:
            target = dict(earliest)
        elif args.to_latest:
            target = dict(latest)
        elif args.to_offset is not None:
            target = dict.fromkeys(tps, args.to_offset)
        elif args.to_current:
            target = {tp: committed.get(tp, latest[tp]) for tp in tps}
        elif args.shift_by is not None:
            missing = [f"{tp.topic}-{tp.partition}" for tp in tps if tp not in committed]
            if missing:
                raise InvalidRequestError(
                    f"--shift-by: no committed offset to shift for {', '.join(missing)}"
                )
            target = {tp: committed[tp] + args.shift_by for tp in tps}
        else:
            try:
                when = datetime.datetime.fromisoformat(args.to_datetime)
            except ValueError:
                raise InvalidConfigError(
                    f"--to-datetime {args.to_datetime!r} is not ISO 8601"
                ) from None
            found = consumer.offsets_for_times(dict.fromkeys(tps, int(when.timestamp() * 1000)))
            target = {tp: latest[tp] if found[tp] is None else found[tp] for tp in tps}
    finally:
        consumer.close()
    return {tp: min(max(offset, earliest[tp]), latest[tp]) for tp, offset in target.items()}


def leader_election(args: argparse.Namespace, cluster: Any) -> int:
    """Preferred leader election on ``--topic`` topics or ``--all-topic-partitions``."""
    admin = cluster.admin()
    topics = None if args.all_topic_partitions else args.topic
    moved = admin.elect_leaders(topics)
    if args.output == "json":
        print_json({"election_type": args.election_type, "partitions_moved": moved})
    else:
        print(f"preferred leader election: {moved} partitions moved to their preferred leader")
    return 0


def reassign_partitions(args: argparse.Namespace, cluster: Any) -> int:
    """Move partitions' replicas onto Ray nodes, from a Kafka-style reassignment JSON
    (``{"partitions": [{"topic", "partition", "replicas": [node ids]}]}``); shows the
    plan unless ``--execute``."""
    plan = read_reassignment(args.reassignment_json_file)
    admin = cluster.admin()
    rows = []
    for topic, assignments in sorted(plan.items()):
        description = admin.describe_topic(topic)
        for partition, nodes in sorted(assignments.items()):
            if not 0 <= partition < len(description.partitions):
                raise PartitionOutOfRangeError.of(topic, partition, len(description.partitions))
            current = description.partitions[partition]
            rows.append((topic, partition, [current.nodes.get(r) for r in current.replicas], nodes))
    result: dict[str, dict[int, list[int]]] = {}
    if args.execute:
        for topic, assignments in sorted(plan.items()):
            result[topic] = admin.reassign_partitions(topic, assignments)
    if args.output == "json":
        print_json(
            {
                "executed": args.execute,
                "partitions": [
                    {
                        "topic": topic,
                        "partition": partition,
                        "current_nodes": current,
                        "target_nodes": target,
                        "replicas": result.get(topic, {}).get(partition),
                    }
                    for topic, partition, current, target in rows
                ],
            }
        )
        return 0
    for topic, partition, current, target in rows:
        print(f"{topic}-{partition}: nodes {current} -> {target}")
        if args.execute:
            print(f"  now replicas {result[topic][partition]}")
    if not args.execute:
        print(DRY_RUN_NOTE)
    return 0


def read_reassignment(path: str) -> dict[str, dict[int, list[str]]]:
    """``{topic: {partition: [node ids]}}`` from a reassignment JSON file (``-``: stdin).

    Raises:
        InvalidConfigError: the file is not of Kafka's reassignment form; names what.
    """
    try:
        if path == "-":
            document = json.load(sys.stdin)
        else:
            with open(path) as f:
                document = json.load(f)
    except (OSError, ValueError) as error:
        raise InvalidConfigError(f"--reassignment-json-file {path!r}: {error}") from None
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise InvalidConfigError(
            f"--reassignment-json-file {path!r} needs "
            '{"partitions": [{"topic": T, "partition": P, "replicas": [node ids]}]}'
        )
    plan: dict[str, dict[int, list[str]]] = {}
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        replicas = entry.get("replicas") if isinstance(entry, dict) else None
        if (
            not isinstance(topic, str)
            or not isinstance(partition, int)
            or not isinstance(replicas, list)
            or not all(isinstance(node, str) for node in replicas)
        ):
            raise InvalidConfigError(
                f"reassignment entry {entry!r} needs a topic, a partition and replicas "
                "as a list of Ray node ids"
            )
        plan.setdefault(topic, {})[partition] = replicas
    return plan
