"""``raystream connect ...``: Kafka Connect's operations on a worker group.

::

    raystream connect worker [--group connect] [--workers N] [--rest-port 8083]
    raystream connect list | plugins
    raystream connect create --config FILE.json|FILE.properties [--name NAME]
    raystream connect status | config | pause | resume | delete NAME
    raystream connect restart NAME [--include-tasks] [--only-failed]

``worker`` starts (or finds) the group's worker actors and serves the REST API on
loopback until interrupted; the other actions talk to the group through its internal
topics (``Workers.attach``), so they work whether or not a REST port is open. A
``--config`` file is either Kafka Connect's REST body (``{"name": ..., "config":
{...}}``), a plain JSON object of config keys, or a Java ``.properties`` file as
``connect-standalone`` takes (read by :mod:`raystream.properties`).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from raystream.errors import InvalidConfigError


def add_parser(commands: Any, output_option: Any) -> None:
    """The ``connect`` subcommand and its actions, on the ``raystream`` parser."""
    connect = commands.add_parser("connect", help="Kafka Connect connectors")
    connect.add_argument("--group", default="connect", help="worker group id (default connect)")
    actions = connect.add_subparsers(dest="action", required=True)
    worker = actions.add_parser("worker", help="run the group's workers and its REST API")
    worker.add_argument("--workers", type=int, default=1, help="number of worker actors")
    worker.add_argument("--rest-port", type=int, default=8083, help="REST port on 127.0.0.1")
    output_option(actions.add_parser("list", help="the group's connectors"))
    output_option(actions.add_parser("plugins", help="connector classes the workers can run"))
    create = actions.add_parser("create", help="create a connector from a config file")
    create.add_argument("--config", required=True, help="a .json or .properties file")
    create.add_argument("--name", default=None, help="the name (default: the file's 'name')")
    output_option(create)
    for action in ("status", "config"):
        shown = actions.add_parser(action, help=f"a connector's {action}")
        shown.add_argument("name")
        output_option(shown)
    for action in ("pause", "resume", "delete"):
        actions.add_parser(action, help=f"{action} a connector").add_argument("name")
    restart = actions.add_parser("restart", help="restart a connector (and its tasks)")
    restart.add_argument("name")
    restart.add_argument("--include-tasks", action="store_true")
    restart.add_argument("--only-failed", action="store_true")


def read_config_file(path: str) -> tuple[str | None, dict[str, Any]]:
    """``(name or None, config)`` from a ``.json`` or ``.properties`` file (a file that
    does not start with ``{`` is read as Java properties, as ``connect-standalone``
    reads its connector files: see :mod:`raystream.properties`).

    Raises:
        InvalidConfigError: the file cannot be read or parsed (naming it).
    """
    from raystream.properties import parse_properties, read_properties

    what = "connector config file"
    if path.endswith(".properties"):
        config = read_properties(path, what)
        return config.get("name"), config
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidConfigError(f"{what} {path!r}: {error}") from None
    if not text.lstrip().startswith("{"):
        config = parse_properties(text, f"{what} {path!r}")
        return config.get("name"), config
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidConfigError(f"connector config file {path!r} is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise InvalidConfigError(f"connector config file {path!r} must hold a JSON object")
    if isinstance(document.get("config"), dict):
        return document.get("name") or document["config"].get("name"), document["config"]
    return document.get("name"), document


def connect(args: argparse.Namespace, cluster: Any) -> int:
    """Run one ``raystream connect`` action."""
    from raystream.cli.manage import print_json
    from raystream.connectors.workers import Workers

    if args.action == "worker":
        workers = Workers(
            cluster, group_id=args.group, num_workers=args.workers, rest_port=args.rest_port
        )
        print(
            f"connect group {args.group!r}: {args.workers} workers, REST at {workers.rest_url}",
            flush=True,
        )
        try:
            while True:
                time.sleep(3600)
        finally:
            workers.close()
    workers = Workers.attach(cluster, group_id=args.group)
    try:
        json_out = getattr(args, "output", "text") == "json"
        if args.action == "list":
            names = workers.list()
            if json_out:
                print_json(names)
            for name in [] if json_out else names:
                print(name)
        elif args.action == "plugins":
            plugins = workers.describe_plugins()
            if json_out:
                print_json(plugins)
            else:
                for p in plugins:
                    print(f"{p['class']}\t{p['type']}\t{p['version']}")
        elif args.action == "create":
            name, config = read_config_file(args.config)
            name = args.name or name or os.path.splitext(os.path.basename(args.config))[0]
            info = workers.create(name, config)
            if json_out:
                print_json(info)
            else:
                print(f"created connector {name}")
        elif args.action == "status":
            status = workers.status(args.name)
            if json_out:
                print_json(status)
            else:
                c = status["connector"]
                where = f"{c['state']} on {c['worker_id']}"
                print(f"connector {status['name']} ({status['type']}): {where}")
                for task in status["tasks"]:
                    print(f"  task {task['id']}: {task['state']} on {task['worker_id']}")
                    if task.get("trace"):
                        print("    " + task["trace"].strip().splitlines()[-1])
        elif args.action == "config":
            config = workers.config(args.name)
            if json_out:
                print_json(config)
            else:
                for key, value in sorted(config.items()):
                    print(f"{key}={value}")
        elif args.action == "restart":
            workers.restart(args.name, args.include_tasks, args.only_failed)
            print(f"restart of {args.name} requested")
        else:  # pause, resume, delete
            getattr(workers, args.action)(args.name)
            print(f"{args.action} of {args.name} requested")
    finally:
        workers.close()
    return 0
