"""TLS on the direct path (``listener.security.protocol.map`` holding ``DIRECT:SSL``).

The wire tests run a real :class:`~raystream.wire.Server` on an event loop in a thread
and real channels on loopback, with certificates from the package's test CA; the
cluster tests share ONE cluster for the module, whose direct path speaks TLS and whose
two SSL Kafka listeners show different certificates (``listener.name.<name>.ssl.*``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from raystream.errors import SslAuthenticationError
from raystream.security.tls import ClientTlsSettings, TlsConfig, TlsSettings
from raystream.wire import HELLO, Channel, Endpoint, LoopChannel, Server
from tests.security.conftest import make_pki, write_pkcs12

MARKER = b"direct-path-secret-value-7c1f"


class Echo:
    async def echo(self, value: Any) -> Any:
        return value


class Served:
    """An event loop in a thread serving :class:`Echo` on loopback, with TLS when
    ``tls`` (server settings) is given."""

    def __init__(self, tls: TlsSettings | None = None, client: ClientTlsSettings | None = None):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.live = TlsConfig(tls) if tls is not None else None
        context = self.live.context if self.live is not None else None
        self.server = Server(Echo(), ("echo",), context, client)
        self.endpoint: Endpoint = self._run(self.server.start("127.0.0.1"))

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def stop(self) -> None:
        self._run(self._close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _close(self) -> None:
        self.server.close()
        deadline = asyncio.get_running_loop().time() + 10
        while self.server._writers:  # the connections' handlers see their end
            assert asyncio.get_running_loop().time() < deadline, "handlers still run"
            await asyncio.sleep(0.005)


class Tap:
    """A TCP relay on loopback to ``port`` that keeps every byte it passes, both ways:
    what anyone on the network path would see."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.seen = bytearray()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(1 << 16):
                with self._lock:
                    self.seen += data
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                end.close()

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(tls=None, client=None)`` -> a running :class:`Served`."""
    made: list[Served] = []

    def make(tls: TlsSettings | None = None, client: ClientTlsSettings | None = None) -> Served:
        made.append(Served(tls, client))
        return made[-1]

    yield make
    for served in made:
        served.stop()


def server_tls(pki: Any, name: str, hosts: tuple[str, ...] = ("127.0.0.1",)) -> TlsSettings:
    cert, key = pki.issue(name, name, hosts)
    return TlsSettings(cert, key)


def through(tap: Tap, endpoint: Endpoint) -> Endpoint:
    return dataclasses.replace(endpoint, port=tap.port)


# ------------------------------------------------------------------------ wire


def test_pkcs12_stores_serve_and_check_the_direct_path(serve, pki, tmp_path) -> None:
    cert, key = pki.issue("wire-p12", "wire-p12", ("127.0.0.1",))
    keystore = write_pkcs12(str(tmp_path / "wire.p12"), "ks-secret", key, cert)
    truststore = write_pkcs12(str(tmp_path / "trust.p12"), "ts-secret", cas=(pki.ca_path,))
    served = serve(
        TlsSettings(keystore, keystore_type="PKCS12", keystore_password="ks-secret"),
        ClientTlsSettings(truststore, truststore_type="PKCS12", truststore_password="ts-secret"),
    )
    channel = Channel(served.endpoint, "p12", lambda ch: None)
    assert channel.call("echo", (MARKER,)).result(30) == MARKER
    channel.close()


def test_a_tls_channel_carries_concurrent_calls_and_the_wire_shows_no_plaintext(serve, pki) -> None:
    secured = serve(server_tls(pki, "wire"), ClientTlsSettings(pki.ca_path))
    plain = serve()
    assert secured.endpoint.tls == ClientTlsSettings(pki.ca_path)
    big = np.frombuffer(MARKER * 40_000, dtype=np.uint8)  # ~1.2 MB: many TLS records
    taps = {"tls": Tap(secured.endpoint.port), "plain": Tap(plain.endpoint.port)}
    for name, served in (("tls", secured), ("plain", plain)):
        channel = Channel(through(taps[name], served.endpoint), name, lambda ch: None)
        results: list[Any] = []

        def caller(i: int, channel: Channel = channel, results: list[Any] = results) -> None:
            for j in range(30):  # small and large calls from several threads at once
                value = big if j % 10 == 0 else MARKER + b"%d-%d" % (i, j)
                answer = channel.call("echo", (value,)).result(30)
                results.append(np.array_equal(answer, value) if j % 10 == 0 else answer == value)

        threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert results == [True] * 120
        channel.close()
    assert MARKER in taps["plain"].seen  # the tap sees what crosses in the clear ...
    assert plain.endpoint.token in taps["plain"].seen
    assert len(taps["tls"].seen) > 4 * 3 * big.nbytes  # ... and the TLS channel's bytes
    assert MARKER not in taps["tls"].seen
    assert secured.endpoint.token not in taps["tls"].seen
    for tap in taps.values():
        tap.close()


def test_a_client_whose_truststore_lacks_the_ca_is_refused(serve, pki, tmp_path) -> None:
    served = serve(server_tls(pki, "trusted"), ClientTlsSettings(pki.ca_path))
    other = make_pki(str(tmp_path))
    stranger = dataclasses.replace(served.endpoint, tls=ClientTlsSettings(other.ca_path))
    with pytest.raises(SslAuthenticationError, match="certificate verify failed"):
        Channel(stranger, "stranger", lambda ch: None)
    channel = Channel(served.endpoint, "trusting", lambda ch: None)
    assert channel.call("echo", (1,)).result(10) == 1
    channel.close()


def test_a_loop_channel_speaks_tls_and_refuses_an_untrusted_certificate(serve, pki, tmp_path):
    """The event loop's channel (the listener's and coordinators' hop to a leader) is
    held to the same TLS checks as the threaded one."""
    served = serve(server_tls(pki, "trusted"), ClientTlsSettings(pki.ca_path))
    tap = Tap(served.endpoint.port)
    other = make_pki(str(tmp_path))
    stranger = dataclasses.replace(served.endpoint, tls=ClientTlsSettings(other.ca_path))

    async def calls() -> None:
        with pytest.raises(SslAuthenticationError, match="certificate verify failed"):
            await LoopChannel.connect(stranger, "stranger", lambda ch: None)
        channel = await LoopChannel.connect(
            through(tap, served.endpoint), "trusting", lambda ch: None
        )
        assert await channel.call("echo", (MARKER,)) == MARKER
        big = np.frombuffer(MARKER * 40_000, dtype=np.uint8)  # answers read in place
        assert np.array_equal(await channel.call("echo", (big,)), big)
        assert await channel.call("echo", (MARKER * 40_000,)) == MARKER * 40_000
        channel.close()

    asyncio.run(calls())
    tap.close()
    assert tap.seen and MARKER not in tap.seen


def test_a_certificate_for_another_host_is_refused_unless_host_checking_is_off(serve, pki) -> None:
    served = serve(server_tls(pki, "elsewhere", ("10.11.12.13", "broker.example")))
    endpoint = dataclasses.replace(served.endpoint, tls=ClientTlsSettings(pki.ca_path))
    assert endpoint.tls.check_hostname  # on unless turned off
    with pytest.raises(SslAuthenticationError, match=r"mismatch.*127\.0\.0\.1"):
        Channel(endpoint, "checked", lambda ch: None)
    unchecked = dataclasses.replace(
        endpoint, tls=ClientTlsSettings(pki.ca_path, endpoint_identification_algorithm="")
    )
    channel = Channel(unchecked, "unchecked", lambda ch: None)  # the chain is still verified
    assert channel.call("echo", (2,)).result(10) == 2
    channel.close()


def test_certificate_and_truststore_replaced_on_disk_serve_the_next_connection(
    serve, tmp_path
) -> None:
    for directory in ("old", "new", "live"):
        os.makedirs(tmp_path / directory)
    old = make_pki(str(tmp_path / "old"))
    cert, key, ca = (str(tmp_path / "live" / n) for n in ("server.pem", "server.key", "ca.pem"))

    def install(pki: Any, name: str) -> None:
        issued = pki.issue(name, name, ("127.0.0.1",))
        for source, target in ((issued[0], cert), (issued[1], key), (pki.ca_path, ca)):
            with open(source, "rb") as f, open(target + ".new", "wb") as g:
                g.write(f.read())
            os.replace(target + ".new", target)

    install(old, "first")
    served = serve(TlsSettings(cert, key), ClientTlsSettings(ca))
    first = Channel(served.endpoint, "first", lambda ch: None)
    assert first.call("echo", (1,)).result(10) == 1
    install(make_pki(str(tmp_path / "new")), "second")  # a new CA and a cert it signed
    second = Channel(served.endpoint, "second", lambda ch: None)
    assert second.call("echo", (2,)).result(10) == 2
    assert served.live is not None and served.live.reloads == 1
    assert first.call("echo", (3,)).result(10) == 3  # the open connection keeps its own
    first.close()
    second.close()


# --------------------------------------------------------------------- cluster


@pytest.fixture(scope="module")
def secured(module_cluster, pki) -> dict[str, Any]:
    """The module's cluster: direct path over TLS, two SSL Kafka listeners with
    certificates of their own (broker-wide for INTERNAL, overridden for EXTERNAL)."""
    cert, key = pki.issue("direct", "raystream-internal", ("127.0.0.1",))
    external_cert, external_key = pki.issue("external", "raystream-external", ("127.0.0.1",))
    cluster = module_cluster(
        {
            "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SSL,DIRECT:SSL",
            "ssl.keystore.location": cert,
            "ssl.key.location": key,
            "ssl.truststore.location": pki.ca_path,
            "listener.name.external.ssl.keystore.location": external_cert,
            "listener.name.external.ssl.key.location": external_key,
        }
    )
    return {"cluster": cluster, "ca": pki.ca_path}


def connections_to(pid: int, endpoint: Endpoint) -> list[Any]:
    import psutil

    return [
        c
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.raddr and (c.raddr.ip, c.raddr.port) == (endpoint.host, endpoint.port)
    ]


def test_produce_consume_and_replication_run_over_the_tls_direct_path(secured) -> None:
    import ray

    cluster = secured["cluster"]
    cluster.admin().create_topic(
        "tls-direct", replication_factor=2, config={"min.insync.replicas": 2}
    )
    with cluster.producer(acks="all") as producer:
        futures = [producer.send("tls-direct", MARKER + b"%d" % i) for i in range(200)]
        for future in futures:
            future.get(30)
    consumer = cluster.consumer(
        "tls-direct", auto_offset_reset="earliest", consumer_timeout_ms=30_000
    )
    values = [record.value for record, _ in zip(consumer, range(200), strict=False)]
    consumer.close()
    assert sorted(values) == sorted(MARKER + b"%d" % i for i in range(200))
    partition = cluster.topic_metadata("tls-direct").partitions[0]
    endpoint = ray.get(partition.leader_handle.endpoint.remote())
    assert endpoint.tls == ClientTlsSettings(secured["ca"])
    # this process and the follower's connected to the leader's endpoint, which only
    # lets TLS in (acks=all with two in-sync replicas: the follower copied every batch)
    assert connections_to(os.getpid(), endpoint)
    description = cluster.admin().describe_topic("tls-direct").partitions[0]
    (follower,) = [r for r in description.replicas if r != description.leader]
    handle = ray.get_actor(f"replica:tls-direct:0:{follower}", namespace=cluster.namespace)
    assert connections_to(ray.get(handle.ping.remote()), endpoint)


def test_the_direct_path_answers_no_plaintext_and_checks_the_client_trusts_it(
    secured, tmp_path
) -> None:
    import ray

    cluster = secured["cluster"]
    cluster.admin().create_topic("tls-raw")
    leader = cluster.topic_metadata("tls-raw").partitions[0].leader_handle
    endpoint = ray.get(leader.endpoint.remote())
    with socket.create_connection((endpoint.host, endpoint.port), timeout=10) as sock:
        sock.sendall(endpoint.token)  # the token in the clear: not how this path opens
        answer = b""
        while chunk := sock.recv(64):
            answer += chunk
    assert not answer.startswith(HELLO)
    stranger = make_pki(str(tmp_path))
    with pytest.raises(SslAuthenticationError):
        Channel(
            dataclasses.replace(endpoint, tls=ClientTlsSettings(stranger.ca_path)),
            "stranger",
            lambda ch: None,
        )


def test_a_tls_failure_fails_the_call_rather_than_going_round_by_ray(
    local_ray, pki, tmp_path
) -> None:
    import ray

    from raystream.transport import call, outcome

    cert, key = pki.issue("doubted", "doubted", ("127.0.0.1",))
    stranger_ca = make_pki(str(tmp_path)).ca_path

    @ray.remote(num_cpus=0)
    class Doubted:
        """Serves ``echo`` as a Ray method and on a TLS direct path whose endpoint
        tells clients to trust a CA that did not sign its certificate."""

        def __init__(self) -> None:
            self.server: Server | None = None

        async def endpoint(self) -> Endpoint:
            self.server = Server(
                self,
                ("echo",),
                TlsConfig(TlsSettings(cert, key)).context,
                ClientTlsSettings(stranger_ca),
            )
            return await self.server.start("127.0.0.1")

        async def echo(self, value: Any) -> Any:
            return value

    doubted = Doubted.remote()
    with pytest.raises(SslAuthenticationError, match="certificate verify failed"):
        outcome(call(doubted, "echo", 1), 30)
    ray.kill(doubted)


def test_two_ssl_listeners_show_their_own_certificates(secured) -> None:
    cluster = secured["cluster"]
    context = ssl.create_default_context(cafile=secured["ca"])
    names = {}
    for listener in ("INTERNAL", "EXTERNAL"):
        host, port = cluster.bootstrap_servers(listener).split(",")[0].rsplit(":", 1)
        raw = socket.create_connection((host, int(port)), timeout=10)
        with context.wrap_socket(raw, server_hostname=host) as tls:
            subject = dict(item for rdn in tls.getpeercert()["subject"] for item in rdn)
            names[listener] = subject["commonName"]
    assert names == {"INTERNAL": "raystream-internal", "EXTERNAL": "raystream-external"}
