"""The ``raystream`` command line: run a cluster, manage topics, produce, consume, demo.

Every command but ``up`` and ``demo`` attaches to a running cluster (``raystream up``
starts one on this machine, or use ``--address`` for a remote Ray cluster). Errors are
printed as one line naming what was wrong, with exit status 1.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from raystream.errors import InvalidConfigError, RaystreamError

EXIT_ERROR = 1


def parse_config(pairs: Sequence[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` from ``--config`` into a dict.

    Raises:
        InvalidConfigError: an item has no ``=``.
    """
    config: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidConfigError(f"--config {pair!r} is not of the form key=value")
        config[key.strip()] = value.strip()
    return config


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="raystream", description="A Kafka-grade streaming log on Ray."
    )
    parser.add_argument("--address", default=None, help="Ray address (default: local cluster)")
    parser.add_argument("--namespace", default="raystream", help="raystream cluster namespace")
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="start raystream (and a local Ray if none runs)")
    up.add_argument(
        "--data-dir", default=None, help="data directory on each node (default: the last used)"
    )
    up.add_argument("--config", action="append", help="broker setting key=value (repeatable)")
    up.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray started here")
    down = commands.add_parser("down", help="stop raystream's actors; data stays on disk")
    down.add_argument("--stop-ray", action="store_true", help="also stop the local Ray (ray stop)")
    commands.add_parser("status", help="nodes, topics, partitions and warnings")

    topics = commands.add_parser("topics", help="manage topics").add_subparsers(
        dest="action", required=True
    )
    create = topics.add_parser("create", help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=None)
    create.add_argument("--config", action="append", help="topic config key=value")
    topics.add_parser("list", help="list topics")
    describe = topics.add_parser("describe", help="describe a topic")
    describe.add_argument("name")
    delete = topics.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("name")
    alter = topics.add_parser("alter", help="add partitions or change config")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, default=None)
    alter.add_argument("--config", action="append", help="topic config key=value")

    produce = commands.add_parser("produce", help="produce lines from stdin")
    produce.add_argument("topic")
    produce.add_argument("--key-separator", default=None, help="split each line into key, value")
    consume = commands.add_parser("consume", help="print records")
    consume.add_argument("topic")
    consume.add_argument("--group", default=None)
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--max-messages", type=int, default=None)
    consume.add_argument("--timeout-ms", type=int, default=None, help="stop after this idle time")

    groups = commands.add_parser("groups", help="consumer groups").add_subparsers(
        dest="action", required=True
    )
    groups.add_parser("list")
    group_describe = groups.add_parser("describe")
    group_describe.add_argument("group")
    reset = groups.add_parser("reset-offsets")
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int)
    target.add_argument(
        "--to-datetime", help="ISO 8601, e.g. 2026-11-21T09:00:00 (local time unless it has a zone)"
    )

    demo = commands.add_parser("demo", help="the main job, on an embedded local cluster")
    demo.add_argument("--orders", type=int, default=200_000, help="how many orders to stream")
    demo.add_argument("--partitions", type=int, default=3)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``raystream`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            from raystream.cli.demo import run_demo

            return run_demo(orders=args.orders, partitions=args.partitions)
        if args.command == "up":
            return _up(args)
        return _COMMANDS[args.command](args, _attach(args))
    except RaystreamError as error:
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


def _attach(args: argparse.Namespace) -> Any:
    import ray

    from raystream.actors import CONTROLLER_NAME
    from raystream.client.cluster import Cluster

    if not ray.is_initialized():
        try:
            ray.init(address=args.address or "auto", logging_level="error", log_to_driver=False)
        except ConnectionError:
            raise RaystreamError(
                "no running Ray cluster found; start one with `raystream up`"
            ) from None
    try:
        controller = ray.get_actor(CONTROLLER_NAME, namespace=args.namespace)
    except ValueError:
        raise RaystreamError(
            f"no raystream cluster in namespace {args.namespace!r}; start it with `raystream up`"
        ) from None
    data_dir = ray.get(controller.broker_config.remote())["data.dir"]
    return Cluster(args.namespace, data_dir, controller)


def _up(args: argparse.Namespace) -> int:
    """Start the cluster, and a local Ray head first if none runs.

    Everything that can be checked without Ray (the ``--config`` items, the data dir
    not held by another cluster) is checked before the head is started, so a mistyped
    command leaves nothing running behind it.
    """
    import ray

    from raystream.client.cluster import check_data_dir_free, connect, resolve_data_dir
    from raystream.config import BrokerConfig
    from raystream.java import provide_java

    broker_config = parse_config(args.config)
    data_dir = args.data_dir or _remembered_data_dir(args.namespace)
    BrokerConfig.from_kafka(broker_config)  # raises InvalidConfigError naming the item
    address = args.address
    if address is None and not ray.is_initialized():
        try:
            ray.init(address="auto", logging_level="error", log_to_driver=False)
        except ConnectionError:
            check_data_dir_free(resolve_data_dir(data_dir))
            command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head"]
            command += ["--disable-usage-stats", "--include-dashboard=false"]
            if args.num_cpus is not None:
                command.append(f"--num-cpus={args.num_cpus}")
            print("starting a local Ray:", " ".join(command[3:]), flush=True)
            provide_java()  # the node gets Java workers (Spark on Ray) only if it finds one
            subprocess.run(command, check=True, capture_output=True)
            ray.init(address="auto", logging_level="error", log_to_driver=False)
    cluster = connect(
        address=address,
        namespace=args.namespace,
        data_dir=data_dir,
        broker_config=broker_config,
    )
    _remember_data_dir(args.namespace, cluster.data_dir)
    print(f"raystream is up: namespace {cluster.namespace!r}, data in {cluster.data_dir}")
    return 0


def _state_file() -> str:
    return os.path.join(os.path.expanduser("~"), ".raystream", "clusters.json")


def _remembered_data_dir(namespace: str) -> str | None:
    """The data dir ``up`` last used for ``namespace`` on this machine, so a cluster
    brought down comes back up with its data without repeating ``--data-dir``."""
    try:
        with open(_state_file()) as f:
            return json.load(f).get(namespace)
    except (FileNotFoundError, ValueError):
        return None


def _remember_data_dir(namespace: str, data_dir: str) -> None:
    path = _state_file()
    try:
        with open(path) as f:
            known = json.load(f)
    except (FileNotFoundError, ValueError):
        known = {}
    known[namespace] = data_dir
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(known, f, indent=2)


def _down(args: argparse.Namespace, cluster: Any) -> int:
    cluster.shutdown()
    print(f"raystream stopped (namespace {cluster.namespace!r}); data stays in {cluster.data_dir}")
    if args.stop_ray:
        subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop"], check=False)
    return 0


def _status(args: argparse.Namespace, cluster: Any) -> int:
    status = cluster.status()
    print(f"namespace:   {status['namespace']}")
    print(f"data dir:    {status['data_dir']}")
    print(f"nodes:       {len(status['nodes'])}")
    print(
        f"topics:      {status['topics']} ({status['partitions']} partitions, "
        f"{status['replicas']} replicas)"
    )
    admin = cluster.admin()
    for name in admin.list_topics():
        _print_topic(admin.describe_topic(name), brief=True)
    if status["offline_partitions"]:
        print("OFFLINE partitions: " + ", ".join(status["offline_partitions"]))
    if status["under_replicated_partitions"]:
        print("under-replicated: " + ", ".join(status["under_replicated_partitions"]))
    if status["partitions_not_spread"]:
        print("warning: replicas sharing a node: " + ", ".join(status["partitions_not_spread"]))
    return 0


def _print_topic(description: Any, brief: bool = False) -> None:
    print(f"topic {description.name} ({len(description.partitions)} partitions)")
    if not brief:
        overrides = {k: v for k, v in description.config.items()}
        print("  config: " + json.dumps(overrides, sort_keys=True))
        if description.schema is not None:
            print("  schema: " + ", ".join(f"{f.name}: {f.type}" for f in description.schema))
    for p in description.partitions:
        print(
            f"  partition {p.partition}: leader {p.leader} replicas {p.replicas} isr {p.isr} "
            f"epoch {p.leader_epoch} log start {p.log_start_offset} "
            f"high watermark {p.high_watermark} log end {p.log_end_offset}"
        )


def _topics(args: argparse.Namespace, cluster: Any) -> int:
    admin = cluster.admin()
    if args.action == "create":
        description = admin.create_topic(
            args.name, args.partitions, args.replication_factor, parse_config(args.config)
        )
        print(f"created topic {description.name} with {len(description.partitions)} partitions")
    elif args.action == "list":
        for name in admin.list_topics():
            print(name)
    elif args.action == "describe":
        _print_topic(admin.describe_topic(args.name))
    elif args.action == "delete":
        admin.delete_topic(args.name)
        print(f"deleted topic {args.name}")
    elif args.action == "alter":
        if args.partitions is None and not args.config:
            raise InvalidConfigError("topics alter needs --partitions and/or --config")
        if args.partitions is not None:
            admin.create_partitions(args.name, args.partitions)
        if args.config:
            admin.alter_topic_config(args.name, parse_config(args.config))
        _print_topic(admin.describe_topic(args.name))
    return 0


def _produce(args: argparse.Namespace, cluster: Any) -> int:
    count = 0
    with cluster.producer(acks="all") as producer:
        for line in sys.stdin:
            line = line.rstrip("\n")
            key = None
            if args.key_separator:
                key_text, sep, line = line.partition(args.key_separator)
                if not sep:
                    key_text, line = "", key_text
                key = key_text.encode() if sep else None
            producer.send(args.topic, value=line.encode(), key=key)
            count += 1
        producer.flush()
    print(f"produced {count} records to {args.topic}", file=sys.stderr)
    return 0


def _consume(args: argparse.Namespace, cluster: Any) -> int:
    reset = "earliest" if args.from_beginning else "latest"
    timeout = args.timeout_ms if args.timeout_ms is not None else float("inf")
    consumer = cluster.consumer(
        args.topic, group_id=args.group, auto_offset_reset=reset, consumer_timeout_ms=timeout
    )
    count = 0
    try:
        for record in consumer:
            value = record.value
            if isinstance(value, bytes):
                value = value.decode(errors="replace")
            print(value, flush=True)
            count += 1
            if args.max_messages is not None and count >= args.max_messages:
                break
    finally:
        consumer.close()
    return 0


def _groups(args: argparse.Namespace, cluster: Any) -> int:
    admin = cluster.admin()
    if args.action == "list":
        for group in admin.list_groups():
            print(group)
    elif args.action == "describe":
        d = admin.describe_group(args.group)
        protocol = f", strategy {d.protocol}" if d.protocol else ""
        print(f"group {d.group_id}: {d.state}, generation {d.generation}{protocol}")
        owner = {tp: m for m, tps in d.members.items() for tp in tps}
        print(f"{'PARTITION':<32} {'OFFSET':>12} {'LAG':>10}  MEMBER")
        for tp in sorted(set(d.offsets) | set(owner)):
            offset = d.offsets.get(tp, "-")
            lag = d.lag.get(tp, "-")
            name = f"{tp.topic}-{tp.partition}"
            print(f"{name:<32} {offset:>12} {lag:>10}  {owner.get(tp, '-')}")
        idle = [m for m, tps in d.members.items() if not tps]
        for member in idle:
            print(f"{'(idle)':<32} {'':>12} {'':>10}  {member}")
    else:
        if args.to_datetime is not None:
            try:
                to = datetime.datetime.fromisoformat(args.to_datetime)
            except ValueError:
                print(f"error: --to-datetime {args.to_datetime!r} is not ISO 8601", file=sys.stderr)
                return EXIT_ERROR
        else:
            to = "earliest" if args.to_earliest else "latest" if args.to_latest else args.to_offset
        offsets = admin.reset_offsets(args.group, args.topic, to)
        print(f"reset offsets of group {args.group} on {args.topic} to {to}:")
        for tp, offset in sorted(offsets.items()):
            print(f"  {tp.topic}-{tp.partition}: {offset}")
    return 0


_COMMANDS = {
    "down": _down,
    "status": _status,
    "topics": _topics,
    "produce": _produce,
    "consume": _consume,
    "groups": _groups,
}


if __name__ == "__main__":
    sys.exit(main())
