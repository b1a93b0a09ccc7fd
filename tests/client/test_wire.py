"""The direct path (raystream.wire) without Ray, and how clients route calls on Ray.

The wire tests run a real server on a real event loop (in a thread) and real
connections on loopback; the routing tests use the session's Ray.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from raystream.errors import BrokerNotAvailableError, InvalidRequestError, NotLeaderError
from raystream.wire import HELLO, Channel, Endpoint, LoopChannel, Server


class Target:
    """What a replica would be: coroutine methods, some slow, some failing."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.order: list[int] = []

    async def echo(self, value: Any) -> Any:
        return value

    async def record(self, i: int) -> int:
        self.order.append(i)
        return i

    async def parked(self) -> str:
        await self.release.wait()
        return "released"

    async def refuse(self) -> None:
        raise NotLeaderError("not the leader of t-0 any more")

    async def secret(self) -> str:
        return "not served"

    async def size(self, value: np.ndarray) -> int:
        return value.nbytes


class Loop:
    """An event loop in a thread, with a :class:`Server` of a :class:`Target` on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.target = self.run(self._make_target())
        self.server = Server(self.target, ("echo", "record", "parked", "refuse", "size"))
        self.endpoint = self.run(self.server.start("127.0.0.1"))

    async def _make_target(self) -> Target:
        return Target()

    def run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def stop(self) -> None:
        self.run(self._close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def _close(self) -> None:
        self.server.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while self.server._writers:  # the connections' handlers see their end
            assert loop.time() < deadline, f"{len(self.server._writers)} handlers still run"
            await asyncio.sleep(0.005)


@pytest.fixture
def served() -> Iterator[Loop]:
    loop = Loop()
    yield loop
    loop.stop()


def connect(served: Loop, closed: list[Channel] | None = None) -> Channel:
    return Channel(served.endpoint, "target", (closed if closed is not None else []).append)


def test_answers_carry_values_and_out_of_band_buffers(served: Loop) -> None:
    channel = connect(served)
    payload = pa.py_buffer(b"x" * (3 << 20))
    array = np.arange(1 << 18, dtype=np.int64)
    assert channel.call("echo", (None,)).result(10) is None
    assert channel.call("echo", ({"a": [1, 2]},)).result(10) == {"a": [1, 2]}
    assert channel.call("echo", (payload,)).result(10).to_pybytes() == payload.to_pybytes()
    assert np.array_equal(channel.call("echo", (array,)).result(10), array)
    channel.close()


def test_a_connection_waiting_for_its_next_call_keeps_none_of_the_last(served: Loop) -> None:
    """An idle replica's connection must not hold its last produce request's batch."""
    channel = connect(served)
    assert channel.call("size", (np.ones(16, dtype=np.uint8),)).result(10) == 16
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assert channel.call("size", (np.ones(4 << 20, dtype=np.uint8),)).result(10) == 4 << 20
        deadline = time.monotonic() + 10
        while served.server._tasks:  # the answer's task ends after the caller has it
            assert time.monotonic() < deadline, "the answer's task still runs"
            time.sleep(0.005)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 1 << 20, f"{held} bytes held after the call"
    channel.close()


def test_calls_start_in_the_order_sent_and_a_parked_call_blocks_none(served: Loop) -> None:
    channel = connect(served)
    parked = channel.call("parked", ())
    futures = [channel.call("record", (i,)) for i in range(200)]
    assert [f.result(10) for f in futures] == list(range(200))
    assert served.target.order == list(range(200))
    assert not parked.done()
    served.loop.call_soon_threadsafe(served.target.release.set)
    assert parked.result(10) == "released"
    channel.close()


def test_errors_reach_the_caller_with_their_type(served: Loop) -> None:
    channel = connect(served)
    with pytest.raises(NotLeaderError, match="t-0"):
        channel.call("refuse", ()).result(10)
    with pytest.raises(InvalidRequestError, match="'secret' is not served"):
        channel.call("secret", ()).result(10)
    with pytest.raises(InvalidRequestError, match="'missing' is not served"):
        channel.call("missing", ()).result(10)
    assert channel.call("echo", (1,)).result(10) == 1  # the connection survives them
    channel.close()


def test_a_wrong_token_is_refused(served: Loop) -> None:
    wrong = Endpoint(served.endpoint.host, served.endpoint.port, b"\0" * 16, frozenset())
    with pytest.raises(ConnectionError):
        Channel(wrong, "target", lambda channel: None)
    with socket.create_connection((served.endpoint.host, served.endpoint.port)) as sock:
        sock.sendall(served.endpoint.token)
        assert sock.recv(len(HELLO)) == HELLO


def test_a_closed_server_fails_the_calls_waiting_on_it(served: Loop) -> None:
    closed: list[Channel] = []
    channel = connect(served, closed)
    parked = channel.call("parked", ())
    served.run(served._close())  # as when the actor's process ends
    with pytest.raises(BrokerNotAvailableError, match="connection to target lost"):
        parked.result(10)
    assert closed == [channel]


def test_a_closed_channel_fails_waiting_and_later_calls_as_retriable(served: Loop) -> None:
    closed: list[Channel] = []
    channel = connect(served, closed)
    parked = channel.call("parked", ())
    channel.close()
    with pytest.raises(BrokerNotAvailableError, match="connection to target lost") as info:
        parked.result(10)
    assert info.value.retriable
    assert closed == [channel]
    with pytest.raises(BrokerNotAvailableError):
        channel.call("echo", (1,)).result(10)


# ----------------------------------------------------------- LoopChannel


def test_a_loop_channel_answers_in_order_with_buffers_and_typed_errors(served: Loop) -> None:
    """The event loop's own channel (no reader thread): the same answers as Channel."""
    payload = pa.py_buffer(b"x" * (3 << 20))

    async def calls() -> None:
        channel = await LoopChannel.connect(served.endpoint, "target", lambda ch: None)
        parked = channel.call("parked", ())
        futures = [channel.call("record", (i,)) for i in range(200)]
        assert await asyncio.gather(*futures) == list(range(200))
        assert (await channel.call("echo", (payload,))).to_pybytes() == payload.to_pybytes()
        with pytest.raises(NotLeaderError, match="t-0"):
            await channel.call("refuse", ())
        with pytest.raises(InvalidRequestError, match="'secret' is not served"):
            await channel.call("secret", ())
        assert not parked.done()
        served.loop.call_soon_threadsafe(served.target.release.set)
        assert await asyncio.wait_for(parked, 10) == "released"
        channel.close()

    asyncio.run(calls())
    assert served.target.order == list(range(200))


def test_a_loop_channel_with_a_wrong_token_is_refused(served: Loop) -> None:
    wrong = Endpoint(served.endpoint.host, served.endpoint.port, b"\0" * 16, frozenset())

    async def connect_wrong() -> None:
        await LoopChannel.connect(wrong, "target", lambda ch: None)

    with pytest.raises(ConnectionError, match="refused the token"):
        asyncio.run(connect_wrong())


def test_a_lost_loop_channel_fails_waiting_and_later_calls_as_retriable(served: Loop) -> None:
    closed: list[LoopChannel] = []

    async def calls() -> None:
        channel = await LoopChannel.connect(served.endpoint, "target", closed.append)
        parked = channel.call("parked", ())
        await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(served._close(), served.loop)
        )  # as when the actor's process ends
        with pytest.raises(BrokerNotAvailableError, match="connection to target lost") as info:
            await asyncio.wait_for(parked, 10)
        assert info.value.retriable
        assert closed == [channel]
        with pytest.raises(BrokerNotAvailableError):
            await channel.call("echo", (1,))

    asyncio.run(calls())


# ------------------------------------------------------------- routing on Ray


def test_calls_take_the_direct_path_and_find_a_restarted_replica(shared_cluster) -> None:
    import ray

    from raystream.requests import FetchRequest, ListOffsetsRequest
    from raystream.transport import outcome, send

    shared_cluster.admin().create_topic("wired")
    leader = shared_cluster.topic_metadata("wired").partitions[0].leader_handle
    endpoint = ray.get(leader.endpoint.remote())
    assert endpoint.host == "127.0.0.1" and endpoint.port > 0
    latest = ListOffsetsRequest("wired", 0, -1)
    assert outcome(send(leader, latest), 10).offset == 0
    assert endpoint.methods == {"handle"}  # requests only: control calls are Ray calls
    pid = ray.get(leader.ping.remote())
    parked = send(leader, FetchRequest("wired", 0, 0, 1 << 20, 60_000))
    ray.kill(leader, no_restart=False)
    with pytest.raises(BrokerNotAvailableError):  # the long poll ends with its process
        outcome(parked, 30)  # Ray restarts it: a new process, a new endpoint
    answers = []
    for _ in range(200):
        future: Future = send(leader, latest)
        try:
            answers.append(outcome(future, 30))
            break
        except BrokerNotAvailableError:  # the connection to the old process was lost
            continue
    # answered by the new process: as the leader again, not the leader, or still starting
    assert answers and answers[0].error_code in (0, 5, 6)
    assert ray.get(leader.ping.remote()) != pid
    assert ray.get(leader.endpoint.remote()) != endpoint


def test_an_actor_without_a_direct_path_gets_ray_calls(local_ray) -> None:
    import ray

    from raystream.transport import call, outcome

    @ray.remote(num_cpus=0)
    class Plain:
        async def endpoint(self) -> None:
            return None

        async def echo(self, value: Any) -> Any:
            return value

    plain = Plain.remote()
    futures = [call(plain, "echo", i) for i in range(20)]
    assert [outcome(f, 30) for f in futures] == list(range(20))
    ray.kill(plain)


def test_a_cluster_without_listeners_runs_on_ray_calls(cluster_factory) -> None:
    import ray

    cluster = cluster_factory(broker_config={"listener.host": ""})
    cluster.admin().create_topic("plain", partitions=2)
    leader = cluster.topic_metadata("plain").partitions[0].leader_handle
    assert ray.get(leader.endpoint.remote()) is None
    with cluster.producer() as producer:
        for i in range(100):
            producer.send("plain", b"%d" % i, key=b"%d" % i)
    consumer = cluster.consumer("plain", auto_offset_reset="earliest", consumer_timeout_ms=2000)
    assert sorted(int(r.value) for r in consumer) == list(range(100))
    consumer.close()


def test_coordinators_serve_a_transaction_directly(shared_cluster) -> None:
    import ray

    for coordinator in (shared_cluster.coordinator(), shared_cluster.transaction_coordinator()):
        assert ray.get(coordinator.endpoint.remote()).host == "127.0.0.1"
    shared_cluster.admin().create_topic("wired-txn")
    producer = shared_cluster.producer(transactional_id="wired")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("wired-txn", b"committed")
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send("wired-txn", b"aborted")
    producer.abort_transaction()
    producer.close()
    consumer = shared_cluster.consumer(
        "wired-txn",
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        consumer_timeout_ms=2000,
    )
    assert [r.value for r in consumer] == [b"committed"]
    consumer.close()
