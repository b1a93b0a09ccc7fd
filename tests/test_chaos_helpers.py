"""The helpers chaos tests rely on (tests/conftest.py) fail when their fault or their
observation did not happen: a kill that did nothing, a fault loop that died, a watch
that took no sample, a wait that never came true. Otherwise a chaos test could pass
without chaos."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest


def pid_actor(max_restarts: int) -> Any:
    """A tiny actor on the session's Ray, answering its pid."""
    import ray

    @ray.remote(num_cpus=0, max_restarts=max_restarts)
    class Pid:
        def pid(self) -> int:
            return os.getpid()

    actor = Pid.remote()
    ray.get(actor.pid.remote(), timeout=60)
    return actor


def test_wait_until_returns_the_value_or_names_what_it_awaited(wait_until) -> None:
    assert wait_until(lambda: 7, 1, "a number") == 7
    with pytest.raises(AssertionError, match=r"waiting for the answer \(last: 0"):
        wait_until(lambda: 0, 0.2, "the answer")
    with pytest.raises(AssertionError, match="last: KeyError"):
        wait_until(lambda: {}["x"], 0.2, "a key", retry_on=(KeyError,))
    with pytest.raises(KeyError):  # not retried unless named
        wait_until(lambda: {}["x"], 0.2, "a key")


def test_holds_for_fails_at_the_sample_that_breaks_the_claim(holds_for) -> None:
    assert holds_for(lambda: True, 0.3, "truth", interval_s=0.05, min_samples=1) >= 1
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"offline broke \d+\.\d+ s into its 30 s window"):
        holds_for(lambda: time.monotonic() - start < 0.2, 30, "offline", interval_s=0.05)
    assert time.monotonic() - start < 10  # failed at the false sample, not the window's end
    with pytest.raises(AssertionError, match="only 1 samples"):
        holds_for(lambda: time.sleep(0.3) or True, 0.1, "slow probe", min_samples=3)


def test_a_watch_that_took_no_sample_fails_and_names_the_probes_errors(watch) -> None:
    def broken() -> int:
        raise ConnectionError("controller unreachable")

    w = watch(broken, "high watermark", interval_s=0.02)
    with pytest.raises(AssertionError, match=r"probe errors.*controller unreachable"):
        w.stop(min_before=1, min_after=1, timeout_s=0.5)
    assert w.samples == [] and w.errors
    nothing = watch(lambda: None, "a leader-less partition", interval_s=0.02)
    with pytest.raises(AssertionError, match="2 samples of a leader-less partition"):
        nothing.stop(min_before=1, min_after=1, timeout_s=0.3)


def test_verify_fails_when_no_fault_was_made_or_a_fault_loop_failed(chaos: Any) -> None:
    with pytest.raises(AssertionError, match="0 faults injected"):
        chaos.verify()
    with pytest.raises(AssertionError, match="no fault was injected"):
        chaos.confirm()

    def killer() -> None:
        raise RuntimeError("leader lookup failed")

    chaos.background(killer, "killer")
    with pytest.raises(AssertionError, match=r"1 fault loop.*leader lookup failed"):
        chaos.verify()


def test_verify_fails_when_a_kill_did_not_take(chaos: Any, local_ray, monkeypatch) -> None:
    import ray

    actor = pid_actor(max_restarts=-1)
    monkeypatch.setattr(ray, "kill", lambda *args, **kwargs: None)  # a kill that fails
    kill = chaos.kill_actor(actor, "the actor")
    assert kill.pid == ray.get(actor.pid.remote()) and kill.restarts_before == 0
    with pytest.raises(AssertionError, match="Ray to report the fault"):
        chaos.verify(timeout_s=1)
    monkeypatch.undo()
    ray.kill(actor, no_restart=True)


def test_verify_fails_when_a_killed_actor_does_not_come_back(chaos: Any, local_ray) -> None:
    actor = pid_actor(max_restarts=0)  # Ray cannot restart it
    chaos.kill_actor(actor, "the actor", restart=True)
    with pytest.raises(AssertionError, match="the actor back in a new process"):
        chaos.verify(timeout_s=2)


def test_verify_confirms_a_real_kill_and_the_workload_seen_around_it(
    chaos: Any, local_ray, watch, wait_until
) -> None:
    import ray

    actor = pid_actor(max_restarts=-1)
    pids = watch(lambda: ray.get(actor.pid.remote(), timeout=30), "the pid", 0.02)
    first_pid = ray.get(actor.pid.remote())
    wait_until(lambda: pids.count() >= 1, 30, "a sample before the kill")
    seen = [time.monotonic()]
    kill = chaos.kill_actor(actor, "the actor")
    with pytest.raises(AssertionError, match="0 after the last one was confirmed"):
        chaos.assert_around(seen, "calls answered")  # nothing seen after the kill yet
    (fault,) = chaos.verify()
    assert fault is kill and kill.pid == first_pid and kill.confirmed_at is not None
    seen.append(time.monotonic())
    chaos.assert_around(seen, "calls answered")
    values = pids.stop(chaos, min_before=1, min_after=1)
    assert values[0] == first_pid and values[-1] != first_pid
    dead = pid_actor(max_restarts=-1)
    chaos.kill_actor(dead, "an actor killed for good", restart=False)
    assert len(chaos.verify(min_faults=2)) == 2
