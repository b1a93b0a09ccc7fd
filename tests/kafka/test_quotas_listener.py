"""Client quotas through the Kafka listener: the Kafka protocol's quota APIs, and a
producer held to its ``producer_byte_rate`` with ``throttle_time_ms`` while another
client is not slowed. Shares the package's cluster; every quota set here names a
client id of this module only and is removed at the end."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from wire_helpers import call

QUOTA = 1_048_576  # 1 MiB/s
VALUE_BYTES = 10_000


def test_kafka_quota_apis_alter_describe_and_refuse_bad_entries(
    kafka_cluster: Any, bootstrap: str
) -> None:
    client = f"q-api-{uuid.uuid4().hex[:6]}"
    entity = [{"entity_type": "client-id", "entity_name": client}]
    answer = call(
        bootstrap,
        49,
        1,
        {
            "entries": [
                {
                    "entity": entity,
                    "ops": [{"key": "consumer_byte_rate", "value": 2048.0, "remove": False}],
                },
                {
                    "entity": entity,
                    "ops": [{"key": "no_such_rate", "value": 1.0, "remove": False}],
                },
            ],
            "validate_only": False,
        },
    )
    assert [e.error_code.value for e in answer.entries] == [0, 42]  # INVALID_REQUEST
    assert "no_such_rate" in answer.entries[1].error_message
    admin = kafka_cluster.admin()
    try:
        assert admin.describe_client_quotas([("client-id", client)]) == {
            ("client-id", client): {"consumer_byte_rate": 2048.0}
        }
        found = call(
            bootstrap,
            48,
            1,
            {
                "components": [{"entity_type": "client-id", "match_type": 0, "match": client}],
                "strict": True,
            },
        )
        assert found.error_code.value == 0
        [entry] = found.entries
        assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("client-id", client)]
        assert [(v.key, v.value) for v in entry.values] == [("consumer_byte_rate", 2048.0)]
    finally:
        admin.alter_client_quotas({("client-id", client): {"consumer_byte_rate": None}})
    assert admin.describe_client_quotas([("client-id", client)]) == {}


def test_cli_sets_lists_and_deletes_quotas(kafka_cluster: Any, capsys) -> None:
    from raystream.cli import main

    user = f"q-cli-{uuid.uuid4().hex[:6]}"
    base = ["--namespace", kafka_cluster.namespace, "quotas"]
    entity = ["--user", user, "--client-id-default"]
    assert main([*base, "set", *entity, "--config", "producer_byte_rate=1024"]) == 0
    assert main([*base, "list", "--user", user]) == 0
    assert f"user={user}, client-id=<default>: producer_byte_rate=1024" in capsys.readouterr().out
    assert main([*base, "set", *entity, "--config", "producer_byte_rate=fast"]) == 1
    assert "not a number" in capsys.readouterr().err
    assert main([*base, "delete", *entity]) == 0
    assert main([*base, "list", "--user", user, "--output", "json"]) == 0
    assert capsys.readouterr().out.strip().endswith("[]")


def _produce_flat_out(
    bootstrap: str,
    topic: str,
    client_id: str,
    stop: Callable[[int, float], bool],
    out: dict[str, Any],
    **config: Any,
) -> None:
    """Produce numbered 10 kB records as fast as the client takes them until
    ``stop(records, elapsed_s)``; record each delivery's time and bytes in ``out``;
    ``config``: more producer settings."""
    from confluent_kafka import Producer

    throttles: list[float] = []
    delivered: list[tuple[float, int, int]] = []  # (time, number, bytes)
    errors: list[Any] = []

    def on_delivery(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            delivered.append((time.monotonic(), int(message.key()), len(message.value())))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": "all",
            "linger.ms": 5,
            "queue.buffering.max.kbytes": 2048,  # flat out, but little left to flush
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
            **config,
        }
    )
    value = b"x" * VALUE_BYTES
    started = time.monotonic()
    sent = 0
    while not stop(sent, time.monotonic() - started):
        try:
            producer.produce(topic, value=value, key=str(sent).encode(), on_delivery=on_delivery)
            sent += 1
        except BufferError:
            producer.poll(0.005)
        producer.poll(0)
    producer.flush(60)
    out.update(started=started, sent=sent, delivered=delivered, errors=errors, throttles=throttles)


@pytest.mark.slow
def test_producer_held_to_its_byte_rate_and_others_not_slowed(
    kafka_cluster: Any, bootstrap: str, kafka_topic: Callable[..., str]
) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KTP

    limited_topic, free_topic = kafka_topic(partitions=1), kafka_topic(partitions=1)
    limited_client = f"q-limited-{uuid.uuid4().hex[:6]}"
    admin = kafka_cluster.admin()
    admin.alter_client_quotas({("client-id", limited_client): {"producer_byte_rate": QUOTA}})
    try:
        time.sleep(1.5)  # listeners pick quotas up within a second
        # Kafka's rate pads a young window to 10 s, so a new client may first send ten
        # seconds' worth at once (and again as that burst's samples expire): the rate
        # is measured over the two window spans (11 samples of 1 s) after the first.
        # A burst starts no sooner than 11 s after the one before it began, and the
        # first after the producer's start: (11 s, 33 s] holds the second and third
        # bursts whole and never a part of the fourth.
        skip_s, duration_s = 11.0, 33.0
        limited: dict[str, Any] = {}
        free: dict[str, Any] = {}
        threads = [
            threading.Thread(
                target=_produce_flat_out,
                args=(
                    bootstrap,
                    limited_topic,
                    limited_client,
                    lambda n, t: t >= duration_s,
                    limited,
                ),
                # The listener meters a request once it has taken it, so each one may
                # overshoot the quota by its own size; librdkafka's default 1 MB batches
                # are a second of this quota each (measured: 1.09-1.14x the quota, near
                # the bound). Kafka's Java producer sends batches of 16 kB.
                kwargs={"batch.size": 65_536},
            ),
            threading.Thread(  # 40 MB as fast as it goes: far above the other's quota
                target=_produce_flat_out,
                args=(bootstrap, free_topic, "q-free", lambda n, t: n >= 4000, free),
            ),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(180)
    finally:
        admin.alter_client_quotas({("client-id", limited_client): {"producer_byte_rate": None}})

    assert limited["errors"] == [] and free["errors"] == []
    window = [d for d in limited["delivered"] if skip_s < d[0] - limited["started"] <= duration_s]
    rate = sum(d[2] for d in window) / (duration_s - skip_s)
    free_s = max(d[0] for d in free["delivered"]) - free["started"]
    free_rate = sum(d[2] for d in free["delivered"]) / free_s
    per_second = [0] * int(duration_s + 1)
    for at, _, size in limited["delivered"]:
        per_second[min(int(at - limited["started"]), len(per_second) - 1)] += size
    print("limited, MB delivered per second:", [round(b / 1e6, 1) for b in per_second])
    print(
        f"limited {rate / 1e6:.2f} MB/s, free {free_rate / 1e6:.2f} MB/s, "
        f"throttles {len(limited['throttles'])} (max {max(limited['throttles'], default=0)} s)"
    )
    assert 0.8 * QUOTA <= rate <= 1.2 * QUOTA, rate
    assert limited["throttles"] and max(limited["throttles"]) > 0
    assert free["throttles"] == []
    assert free_rate > 3 * QUOTA, free_rate

    # nothing lost: every delivered record of the limited producer reads back
    numbers = sorted(d[1] for d in limited["delivered"])
    assert numbers == list(range(limited["sent"]))
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([KTP(limited_topic, 0, 0)])
    read: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(read) < len(numbers) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                read.add(int(message.key()))
    finally:
        consumer.close()
    assert read == set(numbers)
