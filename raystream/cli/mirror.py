"""``raystream mirror --config FILE | status | stop``: MirrorMaker 2 from the command line.

``raystream mirror --config mm2.properties`` reads a MirrorMaker 2 properties file
(``clusters``, ``<alias>.bootstrap.servers`` or ``<alias>.raystream.namespace``,
``<src>-><dst>.enabled``, ``topics``, ``groups``, ``replication.policy.class``,
``sync.group.offsets.enabled``, ``emit.heartbeats.enabled`` ...), starts each enabled
flow in its own actor (in the target's namespace when the target is a raystream
cluster, else in the source's, else in the CLI's ``--namespace``), and stays in the
foreground printing each flow's lag until interrupted, when it stops them, as MM2's
``connect-mirror-maker.sh`` does; ``--detach`` leaves them running instead.
``raystream mirror status`` shows every running flow of the Ray cluster (state,
records mirrored, lag per partition); ``raystream mirror stop [FLOW]`` stops them.

Flows are found through their actors, named ``mirror:<source>-><target>``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from typing import Any

from raystream.errors import RaystreamError

STATUS_INTERVAL_S = 10.0


def add_parser(commands: Any) -> None:
    """Add ``mirror`` to the CLI's subcommands."""
    mirror = commands.add_parser("mirror", help="MirrorMaker 2: mirror topics between clusters")
    mirror.add_argument("action", nargs="?", choices=["start", "status", "stop"], default="start")
    mirror.add_argument("flow", nargs="?", help="stop: only this flow (<source>-><target>)")
    mirror.add_argument("--config", help="a MirrorMaker 2 properties file (start)")
    mirror.add_argument(
        "--detach", action="store_true", help="start the flows and return (they keep running)"
    )
    mirror.add_argument(
        "--output", choices=["text", "json"], default="text", help="text (default) or json"
    )


def running_flows() -> dict[str, tuple[str, Any]]:
    """``{flow name: (namespace, actor handle)}`` of the flows running on this Ray."""
    import ray

    from raystream.actors.mirror_worker import ACTOR_PREFIX

    found = {}
    for actor in ray.util.list_named_actors(all_namespaces=True):
        name = actor["name"]
        if name.startswith(ACTOR_PREFIX):
            handle = ray.get_actor(name, namespace=actor["namespace"])
            found[name[len(ACTOR_PREFIX) :]] = (actor["namespace"], handle)
    return dict(sorted(found.items()))


def statuses(timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Each running flow's status (UNREACHABLE when its actor does not answer)."""
    from raystream.transport import CALL_ERRORS, wait_result

    out = []
    for name, (namespace, handle) in running_flows().items():
        try:
            status = wait_result(handle.status.remote(), timeout_s, "mirror status")
        except (RaystreamError, *CALL_ERRORS):
            status = {"flow": name, "state": "UNREACHABLE", "partitions": {}}
        out.append({**status, "namespace": namespace})
    return out


def format_status(flows: list[dict[str, Any]]) -> str:
    """A table per flow: its partitions with end offset, replicated and lag."""
    if not flows:
        return "no mirror flows running"
    lines = []
    for flow in flows:
        lines.append(
            f"{flow['flow']}  {flow['state']}  records={flow.get('records', 0)}  "
            f"checkpoints={flow.get('checkpoints', 0)}  lag={flow.get('lag', 0)}"
        )
        if flow.get("error"):
            lines.append(f"  error: {flow['error'].splitlines()[-1]}")
        for topic, problem in sorted(flow.get("topic_errors", {}).items()):
            lines.append(f"  topic {topic}: {problem}")
        rows = [
            (
                f"{p['topic']}-{p['partition']}",
                p["remote_topic"],
                p["end"],
                p["replicated"],
                p["lag"],
            )
            for p in flow.get("partitions", {}).values()
        ]
        if rows:
            header = ("PARTITION", "REMOTE TOPIC", "END", "REPLICATED", "LAG")
            widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(5)]
            for row in [header, *rows]:
                lines.append(
                    "  " + "  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True))
                )
    return "\n".join(lines)


def mirror(args: argparse.Namespace, cluster: Any) -> int:
    """Run ``raystream mirror``; ``cluster`` is the CLI's attached cluster (it joins
    this process to Ray, and runs the flows between two Kafka-protocol clusters)."""
    if args.action == "status":
        flows = statuses()
        print(json.dumps(flows, indent=2) if args.output == "json" else format_status(flows))
        return 0
    if args.action == "stop":
        return _stop(args.flow)
    if not args.config:
        raise RaystreamError("raystream mirror needs --config FILE (a MirrorMaker 2 file)")
    return _start(args, cluster)


def _start(args: argparse.Namespace, cluster: Any) -> int:
    from raystream.mirror.clusters import RaystreamCluster
    from raystream.mirror.config import flows_from_properties
    from raystream.mirror.maker import MirrorMaker
    from raystream.properties import read_properties

    makers = []
    for flow in flows_from_properties(read_properties(args.config, "--config")):
        home = next((s for s in (flow.target, flow.source) if s.is_raystream), None)
        host = RaystreamCluster.attach(home).cluster if home is not None else cluster
        if host is None:
            raise RaystreamError(f"flow {flow.name}: no raystream cluster to run it in")
        maker = MirrorMaker.from_flow(host, flow, detached=True)
        maker.start()
        makers.append(maker)
        print(f"started {flow.name}")
    if args.detach:
        return 0
    try:
        while True:
            time.sleep(STATUS_INTERVAL_S)
            print(format_status([m.status() for m in makers]), flush=True)
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr)
    finally:
        for maker in makers:
            maker.stop()
    return 0


def _stop(only: str | None) -> int:
    from raystream.transport import CALL_ERRORS, stop_actor, wait_result

    flows = running_flows()
    if only is not None and only not in flows:
        raise RaystreamError(f"no mirror flow {only!r} runs (running: {sorted(flows)})")
    for name, (_, handle) in flows.items():
        if only is not None and name != only:
            continue
        with contextlib.suppress(CALL_ERRORS):
            wait_result(handle.stop.remote(), 60.0, "mirror stop")
        stop_actor(handle)
        print(f"stopped {name}")
    return 0
