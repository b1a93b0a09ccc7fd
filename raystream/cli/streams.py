"""``raystream streams list | describe APP``: the streams applications running on a cluster.

Applications are found through their worker actors, named
``streams:<application_id>:<slot>`` in the cluster's Ray namespace: nothing to register
or forget, and an application shows up exactly while it has workers.
"""

from __future__ import annotations

import argparse
from typing import Any

from raystream.errors import RaystreamError


def applications(namespace: str) -> dict[str, list[str]]:
    """``{application_id: [worker actor names]}`` of the namespace's running apps."""
    import ray

    from raystream.actors.streams_worker import ACTOR_PREFIX

    apps: dict[str, list[str]] = {}
    for actor in ray.util.list_named_actors(all_namespaces=True):
        name = actor["name"]
        if actor["namespace"] == namespace and name.startswith(ACTOR_PREFIX):
            app_id = name[len(ACTOR_PREFIX) :].rsplit(":", 1)[0]
            apps.setdefault(app_id, []).append(name)
    return {app: sorted(names) for app, names in sorted(apps.items())}


def describe(namespace: str, application_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The application's settings, topology and each worker's status.

    Raises:
        RaystreamError: no application of that id runs in the namespace.
    """
    import ray

    from raystream.transport import CALL_ERRORS, wait_result

    names = applications(namespace).get(application_id)
    if not names:
        raise RaystreamError(
            f"no streams application {application_id!r} runs in namespace {namespace!r}"
        )
    handles = [ray.get_actor(name, namespace=namespace) for name in names]
    document = wait_result(handles[0].describe.remote(), timeout_s, "streams describe")
    workers = []
    for name, handle in zip(names, handles, strict=True):
        try:
            status = wait_result(handle.status.remote(), timeout_s, "streams worker status")
        except (RaystreamError, *CALL_ERRORS):
            status = {"state": "UNREACHABLE"}
        status.pop("task_ids", None)
        workers.append({"name": name, **status})
    document["workers"] = workers
    return document


def streams(args: argparse.Namespace, cluster: Any) -> int:
    """``streams list | describe APP``."""
    from raystream.cli.manage import print_json

    if args.action == "list":
        apps = applications(cluster.namespace)
        if args.output == "json":
            print_json({app: len(names) for app, names in apps.items()})
        else:
            for app, names in apps.items():
                print(f"{app}\t{len(names)} workers")
        return 0
    document = describe(cluster.namespace, args.app)
    if args.output == "json":
        print_json(document)
        return 0
    print(
        f"application {document['application_id']}: {document['processing_guarantee']}, "
        f"{len(document['workers'])} workers"
    )
    print(f"{'WORKER':<40} {'STATE':<12} {'PROCESSED':>10}  TASKS")
    for w in document["workers"]:
        tasks = " ".join(w.get("tasks", []))
        print(
            f"{w['name']:<40} {w['state']:<12} {w.get('processed_records_total', '-'):>10}  {tasks}"
        )
        if w.get("error"):
            print(f"  error: {w['error'].strip().splitlines()[-1]}")
    print(document["topology"])
    return 0
