"""What security costs on the Kafka listener: produce throughput over PLAINTEXT, SSL,
SASL_SSL, and SASL_SSL with an authorizer holding 10,000 ACLs, side by side.

confluent-kafka (librdkafka) produces ``--records`` records of ``--value-bytes`` bytes
to a fresh one-partition topic per run, with the settings of ``bench_kafka_listener``'s
produce (``produce()`` per record, linger.ms=5, batch.size=1 MB, acks=1, no
compression, no idempotence), timed from the first record to ``flush``'s return; the
connection (TLS handshake, SCRAM login, metadata) is made by one record flushed before
the clock starts, so the figure is the steady rate, not the login.

Two raystream clusters share one local Ray (replication factor 1, data on disk), both
up for the whole run, so every configuration is measured in the same minutes:

- ``open``: listeners ``PLAINTEXT``, ``SSL`` and ``SASL_SSL`` (SCRAM-SHA-512), no
  authorizer;
- ``acls``: a ``SASL_SSL`` listener with the authorizer on
  (``allow.everyone.if.no.acl.found`` false) holding ``--acls`` bindings: the
  producing principal is allowed by ONE of them (Write on the topics prefixed
  ``secbench-``); the others are literal and prefixed grants and denials for other
  principals on other topics and groups, a hundred of them on the benchmark's own
  topics (so the producer's checks look at more than its own binding). Before the
  rounds the benchmark waits for the bindings to reach the listener and checks that
  they bite: the producer is refused a topic outside its grant.

The authorizer is broker-wide in Kafka, hence a cluster of its own. The configurations
are run in turn, ``--rounds`` times, the order reversed every other round (A B C D, D C
B A, ...) so a drift of the machine's speed touches all alike; the table gives each
round's rate, the median, and the median's ratio to PLAINTEXT's. Target (issue 20):
SASL_SSL with the ACLs >= 0.70 of PLAINTEXT. A second table times the ACL decision on
its own (pure code in this process): the listener's cost per request beside what a
scan of every binding would cost.

Run:  python -m benchmarks.bench_security [--records 300000] [--rounds 4] [--acls 10000]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import ipaddress
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from benchmarks import harness

USER, PASSWORD = "bench", "bench-secret"
"""The producing principal's SCRAM login (``User:bench``)."""
TOPIC_PREFIX = "secbench-"
TARGET = 0.70
"""SASL_SSL with the ACLs, as a share of PLAINTEXT (issue 20)."""
POLL_EVERY = 1000
"""Records produced between two ``poll(0)`` calls (delivery reports are drained)."""


@dataclass
class Setup:
    """One configuration: a listener of one of the clusters and the client settings."""

    name: str
    cluster: Any
    protocol: str
    client: dict[str, Any]
    rates: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


def _write_server_cert(directory: str) -> str:
    """A self-signed certificate (it is its own CA) for 127.0.0.1, with its key, in
    one PEM file (the listener's ``ssl.keystore.location``); its path."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "raystream-bench")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    path = os.path.join(directory, "server.pem")
    with open(path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return path


def bench_acls(count: int) -> list[Any]:
    """``count`` bindings, exactly one of which lets ``User:bench`` write the benchmark's
    topics: the rest belong to 2,000 other tenants (literal grants on their topics,
    prefixed grants on their namespaces, group grants, some denials) and a hundred
    readers of the benchmark's own topics."""
    from raystream.security.acls import AclBinding

    mine = AclBinding(f"User:{USER}", "*", "Write", "Allow", "Topic", TOPIC_PREFIX, "prefixed")
    bindings = [mine]
    bindings += [
        AclBinding(f"User:reader-{i}", "*", "Read", "Allow", "Topic", TOPIC_PREFIX, "prefixed")
        for i in range(min(100, count - 1))
    ]
    kinds = (
        ("Write", "Allow", "Topic", "literal", "orders-{t}"),
        ("Read", "Allow", "Topic", "prefixed", "tenant-{t}-"),
        ("Read", "Allow", "Group", "prefixed", "tenant-{t}-"),
        ("Describe", "Allow", "Topic", "literal", "audit-{t}"),
        ("Write", "Deny", "Topic", "literal", "audit-{t}"),
    )
    i = 0
    while len(bindings) < count:
        operation, permission, rtype, pattern, name = kinds[i % len(kinds)]
        tenant = i // len(kinds)
        bindings.append(
            AclBinding(
                f"User:tenant-{tenant % 2000}",
                "*",
                operation,
                permission,
                rtype,
                name.format(t=tenant),
                pattern,
            )
        )
        i += 1
    return bindings


@contextlib.contextmanager
def clusters(acl_count: int) -> Iterator[list[Setup]]:
    """The two clusters (see the module's docstring) in one local Ray, and the four
    configurations on them; everything is gone on exit."""
    import raystream as rs

    tmp = tempfile.mkdtemp(prefix="raystream-bench-security-")
    keystore = _write_server_cert(tmp)
    tls = {"ssl.keystore.location": keystore, "sasl.enabled.mechanisms": "SCRAM-SHA-512"}
    try:
        with harness.local_ray():
            open_cluster = rs.connect(
                namespace="bench-security-open",
                data_dir=os.path.join(tmp, "open"),
                broker_config={
                    "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                    **tls,
                },
            )
            acl_cluster = rs.connect(
                namespace="bench-security-acls",
                data_dir=os.path.join(tmp, "acls"),
                broker_config={
                    "listeners": "SASL_SSL://127.0.0.1:0",
                    "authorizer.class.name": "StandardAuthorizer",
                    **tls,
                },
            )
            try:
                for cluster in (open_cluster, acl_cluster):
                    cluster.admin().alter_user_scram_credentials(USER, "SCRAM-SHA-512", PASSWORD)
                acl_cluster.admin().create_acls(bench_acls(acl_count))
                ssl_client = {"security.protocol": "SSL", "ssl.ca.location": keystore}
                sasl_client = {
                    "security.protocol": "SASL_SSL",
                    "ssl.ca.location": keystore,
                    "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.username": USER,
                    "sasl.password": PASSWORD,
                }
                setups = [
                    Setup("PLAINTEXT", open_cluster, "PLAINTEXT", {}),
                    Setup("SSL", open_cluster, "SSL", ssl_client),
                    Setup("SASL_SSL (SCRAM-SHA-512)", open_cluster, "SASL_SSL", sasl_client),
                    Setup(f"SASL_SSL + {acl_count:,} ACLs", acl_cluster, "SASL_SSL", sasl_client),
                ]
                check_acls_in_force(setups[-1])
                yield setups
            finally:
                acl_cluster.shutdown()
                open_cluster.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _produce_one(setup: Setup, topic: str) -> Any:
    """One record to ``topic`` through ``setup``'s listener; the delivery error (None:
    delivered)."""
    from confluent_kafka import Producer

    outcome: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": setup.cluster.bootstrap_servers(setup.protocol),
            "message.timeout.ms": 10_000,
            **setup.client,
        }
    )
    producer.produce(topic, b"check", on_delivery=lambda error, _: outcome.append(error))
    producer.flush(15)
    return outcome[0] if outcome else TimeoutError(f"{setup.name}: no delivery report")


def check_acls_in_force(setup: Setup) -> None:
    """Wait until the listener holds the bindings (it polls the controller), and make
    sure they are enforced: the producer may write a ``secbench-`` topic and is refused
    another one.

    Raises:
        RuntimeError: the grant is not in force within 30 s, or the refusal is missing.
    """
    from confluent_kafka import KafkaError

    admin = setup.cluster.admin()
    allowed, other = f"{TOPIC_PREFIX}check", "unlisted-check"
    admin.create_topic(allowed)
    admin.create_topic(other)
    deadline = time.monotonic() + 30
    while (error := _produce_one(setup, allowed)) is not None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{setup.name}: the producer's grant is not in force: {error}")
        time.sleep(0.5)
    error = _produce_one(setup, other)
    if error is None or error.code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
        raise RuntimeError(f"{setup.name}: a topic without a grant was not refused: {error}")


def produce_rate(setup: Setup, records: int, value_bytes: int) -> float:
    """Records per second of one run on a fresh topic (see the module's docstring)."""
    from confluent_kafka import Producer

    topic = f"{TOPIC_PREFIX}{uuid.uuid4().hex[:8]}"
    setup.cluster.admin().create_topic(topic)
    errors: list[Any] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            errors.append(error)

    producer = Producer(
        {
            "bootstrap.servers": setup.cluster.bootstrap_servers(setup.protocol),
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "acks": 1,
            "compression.type": "none",
            "enable.idempotence": False,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "on_delivery": delivered,
            **setup.client,
        }
    )
    producer.produce(topic, b"warm-up")  # connect, log in, learn the leader
    if producer.flush(30) or errors:
        raise RuntimeError(f"{setup.name}: the warm-up record was not delivered: {errors}")
    value = b"x" * value_bytes
    deadline = time.monotonic() + 120
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:  # local queue full: let librdkafka drain it
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{setup.name}: {i} of {records} records in time") from None
                producer.poll(0.005)
        if i % POLL_EVERY == 0:
            producer.poll(0)
    left = producer.flush(max(1.0, deadline - time.monotonic()))
    elapsed = time.perf_counter() - t0
    if left or errors:
        raise RuntimeError(f"{setup.name}: {left} records unsent, errors: {errors[:3]}")
    written = setup.cluster.admin().describe_topic(topic).partitions[0].high_watermark
    if written != records + 1:
        raise RuntimeError(f"{setup.name}: {written} records in the log, not {records + 1}")
    setup.cluster.admin().delete_topic(topic)
    return records / elapsed


def acl_check_costs(count: int) -> list[tuple[str, float]]:
    """The listener's ACL check on its own (pure code, this process), for the producer's
    Write on a benchmark topic among ``count`` bindings: (what, microseconds) for
    loading the bindings, a decision the cache does not hold, one it holds, and, for
    scale, one scan over every binding (what an authorizer without an index would do
    per decision)."""
    from raystream.security.acls import Authorizer, pattern_matches

    bindings = bench_acls(count)
    principal, topic = f"User:{USER}", f"{TOPIC_PREFIX}0123abcd"
    t0 = time.perf_counter()
    authorizer = Authorizer(bindings)
    load_us = (time.perf_counter() - t0) * 1e6
    n = 20_000
    t0 = time.perf_counter()
    for i in range(n):  # a name per call: none is in the cache
        authorizer.authorize(principal, "127.0.0.1", "Write", "Topic", f"{topic}{i}")
    uncached_us = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    for _ in range(n):
        authorizer.authorize(principal, "127.0.0.1", "Write", "Topic", topic)
    cached_us = (time.perf_counter() - t0) / n * 1e6
    scans = 20
    t0 = time.perf_counter()
    for _ in range(scans):
        _ = [
            b
            for b in bindings
            if b.resource_type == "Topic"
            and pattern_matches(b.pattern_type, b.resource_name, topic)
        ]
    scan_us = (time.perf_counter() - t0) / scans * 1e6
    return [
        (f"load {count:,} bindings", load_us),
        ("decision, not cached", uncached_us),
        ("decision, cached", cached_us),
        (f"for scale: one scan of {count:,} bindings", scan_us),
    ]


def measure(records: int, value_bytes: int, rounds: int, acls: int) -> list[Setup]:
    """The four configurations (PLAINTEXT first, the ACLs' last), each with its rate
    of every round; the order is reversed every other round."""
    with clusters(acls) as setups:
        for r in range(rounds):
            for setup in setups if r % 2 == 0 else reversed(setups):
                setup.rates.append(produce_rate(setup, records, value_bytes))
    return setups


def print_table(setups: list[Setup], value_bytes: int) -> None:
    """One row per configuration: each round's rate, the median, MB/s, the ratio."""
    base = setups[0].median
    rounds = len(setups[0].rates)
    head = "  ".join(f"{f'round {r + 1}':>9}" for r in range(rounds))
    print(f"{'listener':<28}{head}  {'median rec/s':>12}  {'MB/s':>6}  {'/PLAINTEXT':>10}  target")
    for s in setups:
        cells = "  ".join(f"{r:>9,.0f}" for r in s.rates)
        target = f">= {TARGET:.2f}" if s is setups[-1] else ""
        print(
            f"{s.name:<28}{cells}  {s.median:>12,.0f}  {s.median * value_bytes / 1e6:>6.1f}"
            f"  {s.median / base:>10.2f}  {target}"
        )


def main(argv: list[str] | None = None) -> int:
    """Measure the four configurations in alternating rounds; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--acls", type=int, default=10_000)
    args = parser.parse_args(argv)
    if args.acls < 1:
        parser.error("--acls must be at least 1 (the producer's own grant)")

    setups = measure(args.records, args.value_bytes, args.rounds, args.acls)

    print(harness.machine_line("confluent-kafka"))
    print(
        f"records={args.records:,} value_bytes={args.value_bytes} acks=1 linger.ms=5 "
        f"rounds={args.rounds} (order reversed every other round) acls={args.acls:,}"
    )
    print_table(setups, args.value_bytes)
    ratio = setups[-1].median / setups[0].median
    print(f"\nSASL_SSL + ACLs / PLAINTEXT = {ratio:.2f} (target >= {TARGET:.2f})")
    print(f"\n{'ACL check (pure, this process)':<44} {'us':>10}")
    for what, micros in acl_check_costs(args.acls):
        print(f"{what:<44} {micros:>10,.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
