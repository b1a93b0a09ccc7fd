"""Checks for cluster.yaml, the `ray up` (Ray cluster launcher) config.

The offline tests run the config through Ray's own autoscaler config code,
``validate_config`` (the ray-schema.json JSON schema plus Ray's extra checks)
and ``prepare_config`` (merging with the provider's defaults.yaml), the same
steps ``ray up`` takes before it contacts the cloud. Nothing here needs AWS
credentials or network access: the AWS-specific bootstrap step (which calls
boto3) is never reached.

The README's "Run on a Ray cluster" section and cluster.yaml must agree on how
raystream reaches the nodes (it is not on PyPI): the README builds the wheel
into the directory ``file_mounts`` ships, and names the install command the
setup commands run.

The autoscaler itself, driven by cluster.yaml's node types on Ray's fake
multi-node provider, is tested in test_cluster_yaml_autoscaler.py.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import posixpath
import re
import shlex
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest
import tomllib
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from raystream.config import BrokerConfig

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_YAML = ROOT / "cluster.yaml"
README = ROOT / "README.md"
CLUSTER_SECTION = "## Run on a Ray cluster"
LOCAL_BEGIN = "# BEGIN local provider"
LOCAL_END = "# END local provider"
DATA_DIR = "/mnt/raystream"
CUSTOM_RESOURCE = "raystream_node"
# Keys the on-premise instructions in cluster.yaml say to delete.
LOCAL_DROPPED_KEYS = ("available_node_types", "head_node_type")


def load_cluster_yaml() -> dict[str, Any]:
    with CLUSTER_YAML.open() as f:
        config = yaml.safe_load(f)
    assert isinstance(config, dict)
    return config


def local_variant_block() -> dict[str, Any]:
    """Parse the commented-out local-provider block out of cluster.yaml."""
    lines = CLUSTER_YAML.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == LOCAL_BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == LOCAL_END]
    assert len(starts) == 1, f"expected one {LOCAL_BEGIN!r} marker"
    assert len(ends) == 1, f"expected one {LOCAL_END!r} marker"
    body = lines[starts[0] + 1 : ends[0]]
    assert body, "the local provider block is empty"
    uncommented = []
    for line in body:
        assert line.startswith("#"), f"not commented out: {line!r}"
        uncommented.append(line[2:] if line.startswith("# ") else line[1:])
    block = yaml.safe_load("\n".join(uncommented))
    assert isinstance(block, dict)
    return block


def local_variant() -> dict[str, Any]:
    """cluster.yaml as the on-premise instructions in its comments describe."""
    config = load_cluster_yaml()
    for key in LOCAL_DROPPED_KEYS:
        config.pop(key)
    config.update(local_variant_block())
    return config


def worker_types(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: node_type
        for name, node_type in config["available_node_types"].items()
        if name != config["head_node_type"]
    }


# ---------------------------------------------------------------------------
# Offline validation (AWS config as written)
# ---------------------------------------------------------------------------


def test_raw_config_passes_ray_validation():
    # Schema (unknown keys are errors) plus Ray's cross-field checks.
    validate_config(load_cluster_yaml())


def test_prepared_config_passes_ray_validation():
    """What `ray up` does before talking to AWS: prepare, then validate."""
    raw = load_cluster_yaml()
    config = prepare_config(raw)
    validate_config(config)

    assert config["provider"]["type"] == "aws"
    assert config["provider"]["region"] == "us-west-2"
    assert config["head_node_type"] in config["available_node_types"]
    head = config["available_node_types"][config["head_node_type"]]
    assert head["max_workers"] == 0
    workers = worker_types(config)
    assert workers, "no worker node type"
    for node_type in [head, *workers.values()]:
        assert node_type["node_config"]["InstanceType"] == "m5.2xlarge"
    for node_type in workers.values():
        assert 0 <= node_type["min_workers"] <= node_type["max_workers"]
        assert node_type["max_workers"] <= config["max_workers"]
    # Our commands replace the AWS defaults rather than being merged with them.
    assert config["setup_commands"] == raw["setup_commands"]
    assert config["file_mounts"] == raw["file_mounts"]
    assert config["head_start_ray_commands"] == raw["head_start_ray_commands"]
    assert config["worker_start_ray_commands"] == raw["worker_start_ray_commands"]


def test_every_node_type_offers_the_spread_resource():
    config = load_cluster_yaml()
    for name, node_type in config["available_node_types"].items():
        assert node_type["resources"].get(CUSTOM_RESOURCE) == 1, name


def test_setup_and_start_commands():
    config = load_cluster_yaml()
    setup = config["setup_commands"]
    assert f"sudo mkdir -p {DATA_DIR} && sudo chown $USER {DATA_DIR}" in setup
    assert any("sudo apt-get install -y openjdk-17-jre-headless" in c for c in setup)
    assert setup[-1] == "pip install /tmp/raystream/dist/raystream-*.whl"

    head = config["head_start_ray_commands"]
    assert head[0] == "ray stop"
    assert len(head) == 3
    assert "ray start --head --port=6379 --object-manager-port=8076" in head[1]
    assert "--autoscaling-config=~/ray_bootstrap_config.yaml" in head[1]
    assert "--dashboard-host=0.0.0.0" in head[1]
    # Many replicas (actor processes) start at once, 4 per core: as raystream's own Ray.
    startup = "RAY_worker_maximum_startup_concurrency=$((4 * $(nproc))) ray start"
    assert startup in head[1]
    # raystream starts after Ray, on the directory the setup commands create.
    assert head[2] == (
        f"raystream up --address auto --data-dir {DATA_DIR} --config listener.host=node "
        "--config listeners=PLAINTEXT://node:9092"
    )
    # The settings parse as a broker config, and the listener's port is open.
    items = head[2].split("--config ")[1:]
    BrokerConfig.from_kafka(dict(item.strip().split("=", 1) for item in items))
    (rule,) = config["provider"]["security_group"]["IpPermissions"]
    assert (rule["FromPort"], rule["ToPort"]) == (9092, 9092)

    worker = config["worker_start_ray_commands"]
    assert worker[0] == "ray stop"
    assert len(worker) == 2
    assert "ray start --address=$RAY_HEAD_IP:6379 --object-manager-port=8076" in worker[1]
    assert startup in worker[1]


def readme_cluster_section() -> str:
    """The README's "Run on a Ray cluster" section, up to the next section."""
    text = README.read_text()
    assert text.count(CLUSTER_SECTION + "\n") == 1, f"expected one {CLUSTER_SECTION!r}"
    section = text.split(CLUSTER_SECTION + "\n", 1)[1]
    return section.split("\n## ", 1)[0]


def raystream_installs(config: dict[str, Any]) -> list[str]:
    """The setup commands that install raystream."""
    return [c for c in config["setup_commands"] if c.startswith("pip install") and "raystream" in c]


def test_the_readme_builds_the_wheel_that_the_setup_commands_install():
    """raystream is not on PyPI: the README builds its wheel into a directory, file_mounts
    ships that directory to the nodes, and the setup commands install the wheel from
    where it lands; the README names that same install command."""
    section = readme_cluster_section()
    config = load_cluster_yaml()

    builds = [
        shlex.split(line.split("#", 1)[0].split("&&")[-1])
        for line in section.splitlines()
        if "pip wheel" in line
    ]
    assert len(builds) == 1, f"the section should build one wheel: {builds}"
    (build,) = builds
    assert build[:3] == ["pip", "wheel", "--no-deps"], build
    assert build[-1] == ".", "the wheel is built from the checkout"
    wheel_dir = posixpath.normpath(build[build.index("-w") + 1])

    shipped = [
        remote
        for remote, local in config["file_mounts"].items()
        if posixpath.normpath(local) == wheel_dir
    ]
    assert len(shipped) == 1, f"file_mounts should ship {wheel_dir!r}: {config['file_mounts']}"
    (remote,) = shipped

    (install,) = raystream_installs(config)
    assert install == f"pip install {posixpath.join(remote, 'raystream-*.whl')}"
    assert f"`{install}`" in section, "the README names another install than cluster.yaml"
    assert "ray up cluster.yaml" in section

    # The glob matches the file pip wheel names for this project.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wheel = f"{project['name']}-{project['version']}-py3-none-any.whl"
    assert fnmatch.fnmatch(wheel, posixpath.basename(install.split()[-1]))
    assert f"{wheel_dir}/{wheel}" in section, "the README shows the wheel it builds"


def test_nothing_installs_raystream_from_pypi():
    """`pip install raystream` would fetch another project's package, or fail: raystream
    is installed from the wheel the README builds, in cluster.yaml and its README."""
    pypi = re.compile(r"pip install\s+['\"]?raystream(\s|['\"`=<>\[]|$)")
    texts = {
        "cluster.yaml setup_commands": "\n".join(load_cluster_yaml()["setup_commands"]),
        "cluster.yaml": CLUSTER_YAML.read_text(),
        "README's cluster section": readme_cluster_section(),
    }
    for where, text in texts.items():
        assert not pypi.search(text), f"{where} installs raystream from PyPI"


def test_validation_rejects_broken_configs():
    """The checks above can fail: Ray rejects these mutations of cluster.yaml."""
    typo = load_cluster_yaml()
    typo["setup_comands"] = typo.pop("setup_commands")
    with pytest.raises(jsonschema.ValidationError, match="setup_comands"):
        validate_config(typo)

    bad_head = load_cluster_yaml()
    bad_head["head_node_type"] = "no.such.type"
    with pytest.raises(ValueError, match="head_node_type"):
        validate_config(bad_head)

    fractional = load_cluster_yaml()
    head_type = fractional["head_node_type"]
    fractional["available_node_types"][head_type]["resources"][CUSTOM_RESOURCE] = 0.5
    with pytest.raises(jsonschema.ValidationError):
        validate_config(fractional)

    too_many = load_cluster_yaml()
    for node_type in worker_types(too_many).values():
        node_type["min_workers"] = too_many["max_workers"] + 1
    with pytest.raises(ValueError, match="max_workers"):
        validate_config(too_many)


# ---------------------------------------------------------------------------
# Offline validation (commented-out on-premise variant)
# ---------------------------------------------------------------------------


def test_local_variant_block_is_a_local_provider():
    block = local_variant_block()
    assert set(block) == {"provider", "auth"}
    provider = block["provider"]
    assert provider["type"] == "local"
    ipaddress.ip_address(provider["head_ip"])
    assert provider["worker_ips"]
    for ip in provider["worker_ips"]:
        ipaddress.ip_address(ip)
    assert provider["head_ip"] not in provider["worker_ips"]
    assert block["auth"]["ssh_user"]
    assert block["auth"]["ssh_private_key"]


def test_local_variant_passes_ray_validation():
    raw = local_variant()
    validate_config(raw)
    config = prepare_config(raw)
    validate_config(config)

    n_workers = len(raw["provider"]["worker_ips"])
    assert config["provider"]["type"] == "local"
    # The local provider turns the machine list into one node type.
    (node_type,) = config["available_node_types"].values()
    assert node_type["min_workers"] == node_type["max_workers"] == n_workers
    assert config["max_workers"] == n_workers
    # The AWS-only head setup (boto3) is harmless; the rest is kept as is.
    assert config["setup_commands"] == raw["setup_commands"]
    assert config["head_start_ray_commands"] == raw["head_start_ray_commands"]
    assert config["worker_start_ray_commands"] == raw["worker_start_ray_commands"]


def test_local_variant_needs_node_types_removed():
    """Why the comments say to delete available_node_types / head_node_type."""
    config = load_cluster_yaml()
    config.update(local_variant_block())
    with pytest.raises(click.ClickException):
        prepare_config(config)
