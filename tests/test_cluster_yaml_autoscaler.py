"""cluster.yaml's worker types launched by Ray's autoscaler, on a fake multi-node
provider in a Ray of this test's own.

That Ray runs in a child process (this file run as a script): the test's process keeps
the session's Ray, and no ``ray.shutdown()`` ever runs beside the threads earlier tests
left in it (a shutdown racing a thread that calls Ray can crash the process). The child
starts the head node, asks for resources, reports what it saw as JSON and stops every
process it started; the test checks the report and that nothing was left behind.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import psutil
import pytest
import yaml
from ray.autoscaler._private.fake_multi_node.node_provider import (
    FAKE_HEAD_NODE_ID,
    FAKE_HEAD_NODE_TYPE,
)
from ray.autoscaler._private.util import prepare_config, validate_config
from test_cluster_yaml import CUSTOM_RESOURCE, load_cluster_yaml, worker_types

FAKE_OBJECT_STORE_BYTES = 100 * 1024 * 1024
LAUNCH_TIMEOUT_S = 60.0


def _free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_multinode_config(gcs_address: str) -> dict[str, Any]:
    """cluster.yaml's node types on the fake provider, one CPU per node.

    Keeps each type's custom resources; drops the cloud/ssh parts (commands,
    auth), which the fake provider does not use.
    """
    config = prepare_config(load_cluster_yaml())
    head_type = config["head_node_type"]
    fake_types = {}
    for name, node_type in config["available_node_types"].items():
        custom = {
            k: v
            for k, v in node_type["resources"].items()
            if k not in ("CPU", "GPU", "memory", "object_store_memory")
        }
        if name == head_type:
            fake_types[FAKE_HEAD_NODE_TYPE] = {
                "resources": {"CPU": 1, **custom},
                "node_config": {},
                "max_workers": 0,
            }
        else:
            fake_types[name] = {
                "resources": {
                    "CPU": 1,
                    "object_store_memory": FAKE_OBJECT_STORE_BYTES,
                    **custom,
                },
                "node_config": {},
                # Start without workers so a launch can only come from demand.
                "min_workers": 0,
                "max_workers": 1,
            }
    config.update(
        cluster_name="raystream-fake",
        max_workers=1,
        provider={
            "type": "fake_multinode",
            "gcs_address": gcs_address,
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
        },
        auth={},
        available_node_types=fake_types,
        head_node_type=FAKE_HEAD_NODE_TYPE,
        idle_timeout_minutes=1,
        file_mounts={},
        cluster_synced_files=[],
        initialization_commands=[],
        setup_commands=[],
        head_setup_commands=[],
        worker_setup_commands=[],
        head_start_ray_commands=[],
        worker_start_ray_commands=[],
    )
    validate_config(config)
    return config


def _descendants() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def _listening_addresses(procs: list[psutil.Process]) -> list[tuple[int, str, str]]:
    found = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((proc.pid, proc.name(), conn.laddr.ip))
    return found


def _is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def _processes_using(path: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid != os.getpid() and path in " ".join(proc.info["cmdline"] or ()):
            found.append(proc)
    return found


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(procs, timeout=15)


def launch_and_report(config_path: str, tmp: str, port: int) -> dict[str, Any]:
    """In the child: start the fake cluster's head node (GCS, raylet, the autoscaler
    monitor) on 127.0.0.1, ask the autoscaler for two ``raystream_node`` bundles (one
    more than the head has), wait for the worker node and report what Ray shows; then
    stop every process started, the autoscaler first."""
    import ray
    from ray._private import ray_constants
    from ray._private.node import Node
    from ray._private.parameter import RayParams
    from ray.autoscaler.sdk import request_resources
    from ray.experimental.internal_kv import _internal_kv_get

    # Ray resolves "this node's IP" to 127.0.0.1, not the default route's address (the
    # environment variable, set by the parent, is for the processes the monitor starts).
    ray_constants.ENABLE_RAY_CLUSTER = False
    with open(config_path) as f:
        config = yaml.safe_load(f)
    head_resources = dict(config["available_node_types"][FAKE_HEAD_NODE_TYPE]["resources"])
    (worker_type,) = worker_types(config)
    gcs_address = f"127.0.0.1:{port}"
    before = {p.pid for p in _descendants()}
    started: dict[int, psutil.Process] = {}
    result: dict[str, Any] = {"worker_type": worker_type}
    node = None
    t0 = time.monotonic()
    try:
        params = RayParams(
            node_ip_address="127.0.0.1",
            gcs_server_port=port,
            num_cpus=head_resources.pop("CPU"),
            num_gpus=0,
            resources=head_resources,
            object_store_memory=FAKE_OBJECT_STORE_BYTES,
            include_dashboard=False,
            dashboard_agent_listen_port=0,
            min_worker_port=0,
            max_worker_port=0,
            autoscaling_config=config_path,
            temp_dir=os.path.join(tmp, "ray"),
            env_vars={"RAY_OVERRIDE_NODE_ID_FOR_TESTING": FAKE_HEAD_NODE_ID},
        )
        node = Node(params, head=True, shutdown_at_exit=False, spawn_reaper=False)
        result["gcs_address"] = node.gcs_address
        ray.init(address=gcs_address, log_to_driver=False)

        request_resources(bundles=[{CUSTOM_RESOURCE: 1}] * 2)
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S
        report: dict[str, Any] = {}
        workers: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            status = _internal_kv_get(ray_constants.DEBUG_AUTOSCALING_STATUS)
            if status:
                report = json.loads(status).get("autoscaler_report") or {}
            workers = [n for n in ray.nodes() if n["Alive"] and n["NodeID"] != FAKE_HEAD_NODE_ID]
            if workers and report.get("active_nodes", {}).get(worker_type):
                break
            time.sleep(0.5)  # the autoscaler's own status is polled: it has no event
        result.update(
            launch_s=time.monotonic() - t0,
            report=report,
            workers=[
                {k: w[k] for k in ("NodeID", "Resources", "NodeManagerAddress")} for w in workers
            ],
            cluster_resources=ray.cluster_resources(),
        )
        for proc in _descendants():
            if proc.pid not in before:
                started[proc.pid] = proc
        result["not_loopback"] = [
            entry
            for entry in _listening_addresses(list(started.values()))
            if not _is_loopback(entry[2])
        ]
    finally:
        with contextlib.suppress(Exception):
            if ray.is_initialized():
                request_resources(bundles=[])
        ray.shutdown()
        # Collect before killing: once the monitor dies, the fake worker
        # nodes it started are re-parented and no longer our descendants.
        for proc in _descendants():
            if proc.pid not in before:
                started[proc.pid] = proc
        if node is not None:
            # The autoscaler first, so that it cannot launch nodes any more.
            monitor = node.all_processes.get(ray_constants.PROCESS_TYPE_MONITOR, [])
            _kill([started[i.process.pid] for i in monitor if i.process.pid in started])
            node.kill_all_processes(check_alive=False, allow_graceful=False)
        _kill(list(started.values()))
    return result


@pytest.mark.slow
def test_fake_multinode_autoscaler_launches_worker_type() -> None:
    """Start a Ray cluster of our own with Ray's fake multi-node provider.

    The head node runs in a child process's tree (GCS, raylet and the autoscaler
    monitor, all on 127.0.0.1 and a free port). Its autoscaling config is
    cluster.yaml's node types with resources scaled down to one CPU per node. Asking
    the autoscaler for one `raystream_node` more than the head has must make it launch
    a node of the worker type. Every process the child started is gone at the end.
    """
    port = _free_loopback_port()
    config = fake_multinode_config(f"127.0.0.1:{port}")
    (worker_type,) = worker_types(config)
    # Short path: Ray's unix socket paths live under the temp dir.
    tmp = tempfile.mkdtemp(prefix="rsfake-", dir="/tmp")
    config_path = os.path.join(tmp, "autoscaling.yaml")
    with open(config_path, "w") as f:
        yaml.safe_dump(config, f)
    env = {
        **os.environ,
        "RAY_FAKE_CLUSTER": "1",  # read by the monitor and the fake nodes it starts
        "AUTOSCALER_UPDATE_INTERVAL_S": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_ADDRESS": "",  # never the session's Ray
    }
    try:
        child = subprocess.run(
            [sys.executable, __file__, config_path, tmp, str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=LAUNCH_TIMEOUT_S + 120,
            cwd=os.path.dirname(__file__),
        )
    finally:
        # Anything left that runs out of our temp dir was started by the child.
        _kill(_processes_using(tmp))
        leftovers = [p for p in _processes_using(tmp) if _alive(p)]
        shutil.rmtree(tmp, ignore_errors=True)
    assert child.returncode == 0, f"the child failed:\n{child.stdout}\n{child.stderr}"
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert not leftovers, f"processes left behind: {leftovers}"

    assert result["gcs_address"] == f"127.0.0.1:{port}"
    report, workers = result["report"], result["workers"]
    assert workers and report.get("active_nodes", {}).get(worker_type), (
        f"no {worker_type} node within {LAUNCH_TIMEOUT_S:.0f}s; "
        f"autoscaler report: {report}, worker nodes: {workers}"
    )
    assert report["active_nodes"] == {FAKE_HEAD_NODE_TYPE: 1, worker_type: 1}
    (worker,) = workers
    assert report["node_type_mapping"][worker["NodeID"]] == worker_type
    assert worker["Resources"][CUSTOM_RESOURCE] == 1
    assert worker["Resources"]["CPU"] == 1
    assert worker["NodeManagerAddress"] == "127.0.0.1"
    assert result["cluster_resources"][CUSTOM_RESOURCE] == 2
    assert result["not_loopback"] == [], f"listening beyond loopback: {result['not_loopback']}"
    print(f"fake {worker_type} node up {result['launch_s']:.1f}s after start")


if __name__ == "__main__":  # the child of the test above
    print(json.dumps(launch_and_report(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
