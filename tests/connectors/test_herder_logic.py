"""Pure tests of Connect's herder logic, storage encodings and plugin lookup (no Ray)."""

from __future__ import annotations

import random

import pytest

from raystream.connectors import plugins, storage
from raystream.connectors.api import SinkConnector, SinkTask
from raystream.connectors.worker import (
    PAUSED,
    STOPPED,
    ConfigState,
    RestartRequest,
    assign,
    connector_status,
    plan,
    restart_units,
)
from raystream.errors import InvalidConfigError


def replay(records: list[tuple[str, object]]) -> ConfigState:
    state = ConfigState()
    for offset, (key, value) in enumerate(records):
        state.apply(offset, key, value)
    return state


def connector(name: str, tasks: int, **config: str) -> list[tuple[str, object]]:
    records: list[tuple[str, object]] = [
        (storage.connector_key(name), {"properties": {"connector.class": "X", **config}}),
    ]
    records += [(storage.task_key(name, i), {"properties": {"i": str(i)}}) for i in range(tasks)]
    records.append((storage.commit_key(name), {"tasks": tasks}))
    return records


def test_config_keys_parse_back_including_names_with_dashes() -> None:
    assert storage.parse_config_key(storage.task_key("orders-sink", 12)) == (
        "task",
        "orders-sink",
        12,
    )
    assert storage.parse_config_key(storage.connector_key("a-b")) == ("connector", "a-b", None)
    assert storage.parse_config_key(storage.restart_key("a")) == ("restart", "a", None)
    assert storage.parse_config_key(storage.target_state_key("a")) == ("target-state", "a", None)
    assert storage.parse_status_key(storage.status_key("a-b", 3)) == ("a-b", 3)
    assert storage.parse_status_key(storage.status_key("a-b")) == ("a-b", None)
    assert storage.topic_names("connect") == (
        "connect-configs",
        "connect-offsets",
        "connect-status",
    )


def test_offsets_are_kafka_connect_json_and_the_latest_per_partition_wins() -> None:
    key = storage.offset_key("files", {"file": "/a"})
    assert key == b'["files",{"file":"/a"}]'
    rows = [
        (key, storage.encode({"position": 1})),
        (storage.offset_key("other", {"file": "/a"}), storage.encode({"position": 9})),
        (storage.offset_key("files", {"file": "/b"}), storage.encode({"position": 5})),
        (key, storage.encode({"position": 7})),
        (storage.offset_key("files", {"file": "/b"}), None),
    ]
    assert storage.latest_offsets(rows, "files") == {'{"file":"/a"}': {"position": 7}}
    table = storage.offsets_table("files", {'{"file":"/a"}': {"position": 7}})
    assert table.column("key").to_pylist() == [key]


def test_task_configs_take_effect_at_their_commit_and_deletion_forgets_everything() -> None:
    state = replay(connector("a", 2)[:-1])
    assert state.tasks("a") == []  # written but not committed
    state.apply(10, storage.commit_key("a"), {"tasks": 2})
    assert state.tasks("a") == [{"i": "0"}, {"i": "1"}]
    state.apply(11, storage.target_state_key("a"), {"state": PAUSED})
    assert state.target_state("a") == PAUSED
    request = state.apply(
        12, storage.restart_key("a"), {"include-tasks": True, "only-failed": False}
    )
    assert request == RestartRequest("a", True, False)
    state.apply(13, storage.connector_key("a"), None)
    assert state.connectors == {} and state.tasks("a") == []
    assert state.apply(14, storage.restart_key("a"), {}) is None


def test_assignment_spreads_units_and_every_unit_runs_once() -> None:
    state = replay(connector("a", 2) + connector("b", 3) + [(storage.WORKERS_KEY, {"count": 3})])
    assert assign(state) == {
        0: [("a", None), ("a", 1), ("b", 2)],
        1: [("b", None), ("b", 0)],
        2: [("a", 0), ("b", 1)],
    }
    rng = random.Random(7)
    for _ in range(200):
        records = []
        for i in range(rng.randint(0, 6)):
            records += connector(f"c{i}", rng.randint(0, 5))
        state = replay(records)
        workers = rng.randint(1, 5)
        shares = assign(state, workers)
        units = [u for share in shares.values() for u in share]
        assert len(units) == len(set(units))
        expected = {(n, None) for n in state.connectors}
        expected |= {(n, i) for n in state.connectors for i in range(len(state.tasks(n)))}
        assert set(units) == expected
        sizes = [len(s) for s in shares.values()]
        assert max(sizes) - min(sizes) <= 1


def test_stopped_connectors_run_no_tasks() -> None:
    state = replay([*connector("a", 2), (storage.target_state_key("a"), {"state": STOPPED})])
    assert assign(state, 1) == {0: [("a", None)]}


def test_plan_starts_missing_units_restarts_changed_ones_and_stops_the_rest() -> None:
    state = replay(connector("a", 2))
    first = plan(state, 0, {})
    assert first.stop == [] and [u for u, _ in first.start] == [("a", None), ("a", 0), ("a", 1)]
    running = dict(first.start)
    assert plan(state, 0, running).start == [] and plan(state, 0, running).stop == []
    state.apply(50, storage.task_key("a", 1), {"properties": {"i": "changed"}})
    state.apply(51, storage.commit_key("a"), {"tasks": 1})
    changed = plan(state, 0, running)
    assert changed.stop == [("a", 1)] and changed.start == []
    running.pop(("a", 1))
    state.apply(53, storage.connector_key("a"), {"properties": {"connector.class": "Y"}})
    reconfigured = plan(state, 0, running)  # the connector and its task run the new config
    assert reconfigured.stop == [("a", None), ("a", 0)]
    assert reconfigured.start[1] == (
        ("a", 0),
        {"connector": {"connector.class": "Y"}, "task": {"i": "0"}},
    )
    state.apply(54, storage.WORKERS_KEY, {"count": 2})
    moved = plan(state, 1, {})
    assert [u for u, _ in moved.start] == [("a", 0)]


def test_restart_requests_pick_units_as_kip_745_says() -> None:
    units = {("a", None): "RUNNING", ("a", 0): "FAILED", ("a", 1): "RUNNING", ("b", 0): "FAILED"}
    assert restart_units(RestartRequest("a"), units) == [("a", None)]
    assert restart_units(RestartRequest("a", include_tasks=True), units) == [
        ("a", None),
        ("a", 0),
        ("a", 1),
    ]
    assert restart_units(RestartRequest("a", True, only_failed=True), units) == [("a", 0)]
    assert restart_units(RestartRequest("a", task=1), units) == [("a", 1)]


def test_status_documents_have_kafka_connects_shape() -> None:
    statuses = {
        storage.status_key("a"): {"state": "RUNNING", "worker_id": "w0", "trace": None},
        storage.status_key("a", 0): {"state": "FAILED", "worker_id": "w1", "trace": "boom"},
    }
    assert connector_status("a", statuses, 2, "sink") == {
        "name": "a",
        "connector": {"state": "RUNNING", "worker_id": "w0"},
        "tasks": [
            {"id": 0, "state": "FAILED", "worker_id": "w1", "trace": "boom"},
            {"id": 1, "state": "UNASSIGNED", "worker_id": None},
        ],
        "type": "sink",
    }


class Nothing(SinkConnector):
    def start(self, config):
        pass

    def task_class(self):
        return SinkTask

    def task_configs(self, max_tasks):
        return []

    def stop(self):
        pass


def test_plugins_resolve_by_short_name_dotted_path_and_extras(monkeypatch) -> None:
    monkeypatch.setitem(plugins.BUILTINS, "Nothing", f"{__name__}:Nothing")
    assert plugins.resolve("Nothing") is Nothing
    assert plugins.resolve(f"{__name__}.Nothing") is Nothing
    assert plugins.resolve("Mine", {"Mine": Nothing}) is Nothing
    assert plugins.connector_type(Nothing) == "sink"
    described = plugins.describe_plugins()
    assert {"class": f"{__name__}.Nothing", "type": "sink", "version": "0.1.0"} in described
    with pytest.raises(InvalidConfigError, match="NoSuchThing"):
        plugins.resolve("NoSuchThing")
    with pytest.raises(InvalidConfigError, match="not a Connector"):
        plugins.resolve("raystream.connectors.storage.Tail")
