"""The ``raystream`` command line: run a cluster, manage topics, produce, consume, demo.

Every command but ``up`` and ``demo`` attaches to a running cluster (``raystream up``
starts one on this machine, or use ``--address`` for a remote Ray cluster). Errors are
printed as one line naming what was wrong, with exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from raystream.cli import acls as cli_acls
from raystream.cli import connect as cli_connect
from raystream.cli import manage, records
from raystream.cli import mirror as cli_mirror
from raystream.cli import quotas as cli_quotas
from raystream.cli import streams as cli_streams
from raystream.cli import users as cli_users
from raystream.errors import BrokerNotAvailableError, InvalidConfigError, RaystreamError

EXIT_ERROR = 1
CONNECT_TIMEOUT_S = 10.0


def parse_config(pairs: Sequence[str] | None, option: str = "--config") -> dict[str, str]:
    """``["k=v", ...]`` from ``--config`` (or another ``option``) into a dict.

    Raises:
        InvalidConfigError: an item has no ``=``.
    """
    config: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidConfigError(f"{option} {pair!r} is not of the form key=value")
        config[key.strip()] = value.strip()
    return config


def _output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output", choices=["text", "json"], default="text", help="text (default) or json"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="raystream", description="A Kafka-grade streaming log on Ray."
    )
    parser.add_argument("--address", default=None, help="Ray address (default: local cluster)")
    parser.add_argument("--namespace", default="raystream", help="raystream cluster namespace")
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=CONNECT_TIMEOUT_S,
        help=f"seconds to reach the cluster before giving up (default {CONNECT_TIMEOUT_S:g})",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="start raystream (and a local Ray if none runs)")
    up.add_argument(
        "--data-dir", default=None, help="data directory on each node (default: the last used)"
    )
    up.add_argument("--config", action="append", help="broker setting key=value (repeatable)")
    up.add_argument(
        "--config-file",
        default=None,
        help="broker settings from a Java properties file (Kafka's server.properties); "
        "--config items override it",
    )
    up.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray started here")
    down = commands.add_parser("down", help="stop raystream's actors; data stays on disk")
    down.add_argument("--stop-ray", action="store_true", help="also stop the local Ray (ray stop)")
    _output_option(commands.add_parser("status", help="nodes, topics, partitions and warnings"))

    topics = commands.add_parser("topics", help="manage topics").add_subparsers(
        dest="action", required=True
    )
    create = topics.add_parser("create", help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=None)
    create.add_argument("--config", action="append", help="topic config key=value")
    _output_option(topics.add_parser("list", help="list topics"))
    describe = topics.add_parser("describe", help="describe a topic")
    describe.add_argument("name")
    _output_option(describe)
    delete = topics.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("name")
    alter = topics.add_parser("alter", help="add partitions or change config")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, default=None)
    alter.add_argument("--config", action="append", help="topic config key=value")
    delete_records = topics.add_parser(
        "delete-records", help="delete the records below an offset (advance the log start)"
    )
    delete_records.add_argument("name")
    delete_records.add_argument(
        "--offset", type=int, required=True, help="first offset kept; -1: the high watermark"
    )
    delete_records.add_argument(
        "--partition", type=int, action="append", help="partition (repeatable; default: all)"
    )

    produce = commands.add_parser("produce", help="produce lines from stdin")
    produce.add_argument("topic")
    produce.add_argument("--key-separator", default=None, help="split each line into key, value")
    produce.add_argument(
        "--allow-keyless",
        action="store_true",
        help="with --key-separator, send a line without it keyless instead of refusing it",
    )
    produce.add_argument("--header", action="append", help="header key=value on every record")
    produce.add_argument(
        "--parse-headers",
        action="store_true",
        help="each line starts with headers k1:v1,k2:v2 then --headers-delimiter",
    )
    produce.add_argument("--headers-delimiter", default="\t", help="default: a tab")
    produce.add_argument("--acks", default="all", help="0, 1 or all (default all)")
    produce.add_argument("--partition", type=int, default=None, help="send to this partition")
    consume = commands.add_parser("consume", help="print records")
    consume.add_argument("topic")
    consume.add_argument("--group", default=None)
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--max-messages", type=int, default=None)
    consume.add_argument("--timeout-ms", type=int, default=None, help="stop after this idle time")
    consume.add_argument("--partition", type=int, default=None, help="read this partition alone")
    consume.add_argument(
        "--offset", default=None, help="with --partition: earliest, latest or an offset"
    )
    consume.add_argument(
        "--isolation-level",
        choices=["read_uncommitted", "read_committed"],
        default="read_uncommitted",
    )
    consume.add_argument(
        "--property",
        action="append",
        help="print.key|print.partition|print.offset|print.timestamp|print.headers|"
        "print.value=true|false, key.separator=SEP, null.literal=TEXT (repeatable)",
    )

    groups = commands.add_parser("groups", help="consumer groups").add_subparsers(
        dest="action", required=True
    )
    _output_option(groups.add_parser("list"))
    group_describe = groups.add_parser("describe")
    group_describe.add_argument("group")
    _output_option(group_describe)
    reset = groups.add_parser(
        "reset-offsets", help="show new committed offsets; set them with --execute"
    )
    reset.add_argument("group")
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic")
    scope.add_argument(
        "--all-topics", action="store_true", help="every topic the group has offsets for"
    )
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-current", action="store_true")
    target.add_argument("--to-offset", type=int)
    target.add_argument("--shift-by", type=int, help="move the committed offsets by N (+/-)")
    target.add_argument(
        "--to-datetime", help="ISO 8601, e.g. 2026-11-21T09:00:00 (local time unless it has a zone)"
    )
    reset.add_argument("--execute", action="store_true", help="apply (default: a dry run)")
    _output_option(reset)

    streams = commands.add_parser("streams", help="streams applications").add_subparsers(
        dest="action", required=True
    )
    _output_option(streams.add_parser("list", help="running streams applications"))
    streams_describe = streams.add_parser("describe", help="an application's workers and topology")
    streams_describe.add_argument("app")
    _output_option(streams_describe)

    election = commands.add_parser(
        "leader-election", help="give partitions back to their preferred leader"
    )
    election.add_argument("--election-type", choices=["preferred"], default="preferred")
    which = election.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", help="topic (repeatable)")
    which.add_argument("--all-topic-partitions", action="store_true")
    _output_option(election)
    reassign = commands.add_parser(
        "reassign-partitions", help="move partitions' replicas onto other Ray nodes"
    )
    reassign.add_argument(
        "--reassignment-json-file",
        required=True,
        help='{"partitions": [{"topic": T, "partition": P, "replicas": [node ids]}]}; - for stdin',
    )
    reassign.add_argument("--execute", action="store_true", help="apply (default: a dry run)")
    _output_option(reassign)

    cli_acls.add_parser(commands, _output_option)
    cli_quotas.add_parser(commands)
    cli_users.add_parser(commands)
    cli_connect.add_parser(commands, _output_option)
    cli_mirror.add_parser(commands)

    demo = commands.add_parser("demo", help="the main job, on an embedded local cluster")
    demo.add_argument("--orders", type=int, default=200_000, help="how many orders to stream")
    demo.add_argument("--partitions", type=int, default=3)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``raystream`` console script; returns the exit status.

    A reader that goes away (``raystream consume ... | head``) ends the command
    quietly with status 0, as a pipe's end is the normal end of such a command.
    """
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
    except BrokenPipeError:
        # Python would report the broken pipe again when it flushes stdout at exit:
        # point stdout at /dev/null so the end stays quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130


def _attach(args: argparse.Namespace) -> Any:
    """The running cluster, or a RaystreamError saying why not within the timeout."""
    import ray

    from raystream.actors import CONTROLLER_NAME
    from raystream.client.cluster import Cluster
    from raystream.transport import wait_result

    if not ray.is_initialized():
        address = _check_reachable(args.address, args.connect_timeout)
        try:
            ray.init(address=address, logging_level="error", log_to_driver=False)
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
    config = wait_result(
        controller.broker_config.remote(), args.connect_timeout, "the raystream controller"
    )
    return Cluster(args.namespace, config["data.dir"], controller)


def _check_reachable(address: str | None, timeout_s: float) -> str:
    """The Ray address to attach to, once something listens there.

    Ray's own connect retries for minutes against an address where nothing listens;
    a TCP connect with ``timeout_s`` says so at once. "auto" (the default) is the
    cluster ``ray start`` / ``raystream up`` recorded on this machine.

    Raises:
        BrokerNotAvailableError: nothing accepts connections there within ``timeout_s``.
        RaystreamError: no running Ray cluster is recorded on this machine.
    """
    address = address or "auto"
    target = address.removeprefix("ray://")
    if target == "auto":
        from ray._private.services import canonicalize_bootstrap_address_or_die

        try:
            target = canonicalize_bootstrap_address_or_die("auto")
        except ConnectionError:
            raise RaystreamError(
                "no running Ray cluster found; start one with `raystream up`"
            ) from None
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        raise InvalidConfigError(f"--address {address!r} is not of the form host:port")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise BrokerNotAvailableError(
            f"cannot reach the Ray cluster at {target} within {timeout_s:g} s ({error}); "
            "is it running? (`raystream up` starts one here)"
        ) from None
    return address


def _up(args: argparse.Namespace) -> int:
    """Start the cluster, and a local Ray head first if none runs.

    Everything that can be checked without Ray (the ``--config-file`` and ``--config``
    settings, the data dir not held by another cluster) is checked before the head is
    started, so a mistyped command leaves nothing running behind it.
    """
    import ray

    from raystream.client.cluster import check_data_dir_free, connect, resolve_data_dir
    from raystream.config import BrokerConfig
    from raystream.java import provide_java
    from raystream.properties import read_properties

    broker_config: dict[str, str] = {}
    if args.config_file is not None:
        broker_config = read_properties(args.config_file, "--config-file")
    broker_config.update(parse_config(args.config))
    data_dir = args.data_dir or _remembered_data_dir(args.namespace)
    BrokerConfig.from_kafka(broker_config)  # raises InvalidConfigError naming the item
    address = args.address
    if address is not None and not ray.is_initialized():
        _check_reachable(address, args.connect_timeout)
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
            subprocess.run(command, check=True, capture_output=True, env=_ray_start_env())
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


def _ray_start_env() -> dict[str, str]:
    """The environment of ``ray start``: the node starts as many worker processes at
    once as a Ray raystream starts in-process (see ``worker_startup_concurrency``),
    unless the caller's environment says otherwise."""
    from raystream.transport import WORKER_STARTUP_CONCURRENCY_ENV, worker_startup_concurrency

    env = dict(os.environ)
    env.setdefault(WORKER_STARTUP_CONCURRENCY_ENV, str(worker_startup_concurrency()))
    return env


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


_COMMANDS = {
    "down": _down,
    "status": manage.status,
    "topics": manage.topics,
    "produce": records.produce,
    "consume": records.consume,
    "groups": manage.groups,
    "streams": cli_streams.streams,
    "quotas": cli_quotas.quotas,
    "leader-election": manage.leader_election,
    "reassign-partitions": manage.reassign_partitions,
    "acls": cli_acls.acls,
    "users": cli_users.users,
    "connect": cli_connect.connect,
    "mirror": cli_mirror.mirror,
}


if __name__ == "__main__":
    sys.exit(main())
