"""cluster.yaml's worker types launched by Ray's autoscaler, on a fake multi-node
provider in a Ray of this test's own (a module of its own: tests that stop the
session's Ray are scheduled after all the others, see tests/conftest.py)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
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


@pytest.mark.slow
@pytest.mark.own_ray
@pytest.mark.timeout(240)
def test_fake_multinode_autoscaler_launches_worker_type(monkeypatch):
    """Start a Ray cluster of our own with Ray's fake multi-node provider.

    The head node runs in this process's process tree (GCS, raylet and the
    autoscaler monitor, all on 127.0.0.1 and a free port). Its autoscaling
    config is cluster.yaml's node types with resources scaled down to one CPU
    per node. Asking the autoscaler for one `raystream_node` more than the
    head has must make it launch a node of the worker type. The cluster is
    shut down at the end and every process it started is killed by pid.
    """
    import ray
    from ray._private import ray_constants
    from ray._private.node import Node
    from ray._private.parameter import RayParams
    from ray.autoscaler.sdk import request_resources
    from ray.experimental.internal_kv import _internal_kv_get

    # This test needs a Ray of its own: stop the session's (the next test that needs
    # that one starts it again, see conftest.local_ray).
    if ray.is_initialized():
        ray.shutdown()
    # Read by the autoscaler monitor process and the fake nodes it starts.
    monkeypatch.setenv("RAY_FAKE_CLUSTER", "1")
    monkeypatch.setenv("AUTOSCALER_UPDATE_INTERVAL_S", "1")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    # Make Ray resolve "this node's IP" to 127.0.0.1 rather than the address
    # of the default route, so that everything stays on loopback: the env var
    # for the processes the monitor starts (the fake worker nodes), the
    # attribute for this process (the driver), where it was read at import.
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)

    port = _free_loopback_port()
    gcs_address = f"127.0.0.1:{port}"
    config = fake_multinode_config(gcs_address)
    head_resources = dict(config["available_node_types"][FAKE_HEAD_NODE_TYPE]["resources"])
    (worker_type,) = worker_types(config)

    # Short path: Ray's unix socket paths live under the temp dir.
    tmp = tempfile.mkdtemp(prefix="rsfake-", dir="/tmp")
    config_path = os.path.join(tmp, "autoscaling.yaml")
    with open(config_path, "w") as f:
        yaml.safe_dump(config, f)

    before = {p.pid for p in _descendants()}
    started: dict[int, psutil.Process] = {}
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
        assert node.gcs_address == gcs_address
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
            time.sleep(0.5)
        else:
            pytest.fail(
                f"no {worker_type} node within {LAUNCH_TIMEOUT_S:.0f}s; "
                f"autoscaler report: {report}, worker nodes: {workers}"
            )
        launch_s = time.monotonic() - t0

        assert report["active_nodes"] == {FAKE_HEAD_NODE_TYPE: 1, worker_type: 1}
        (worker,) = workers
        assert report["node_type_mapping"][worker["NodeID"]] == worker_type
        assert worker["Resources"][CUSTOM_RESOURCE] == 1
        assert worker["Resources"]["CPU"] == 1
        assert worker["NodeManagerAddress"] == "127.0.0.1"
        assert ray.cluster_resources()[CUSTOM_RESOURCE] == 2

        for proc in _descendants():
            if proc.pid not in before:
                started[proc.pid] = proc
        not_loopback = [
            entry
            for entry in _listening_addresses(list(started.values()))
            if not _is_loopback(entry[2])
        ]
        assert not not_loopback, f"listening beyond loopback: {not_loopback}"
        print(f"fake {worker_type} node up {launch_s:.1f}s after start")
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
        # Anything left that runs out of our temp dir was started by this test.
        _kill(_processes_using(tmp))
        leftovers = [p for p in started.values() if _alive(p)]
        leftovers += [p for p in _processes_using(tmp) if _alive(p)]
        shutil.rmtree(tmp, ignore_errors=True)
    assert not leftovers, f"processes left behind: {leftovers}"
