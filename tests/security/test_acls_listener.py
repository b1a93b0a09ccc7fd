"""ACLs enforced on the Kafka listener, against unmodified Kafka clients.

One cluster for the module, with the authorizer on and no ACL fallback. Clients
connect over PLAINTEXT, so they are ``User:ANONYMOUS`` (SASL principals are tested
with authentication); raystream's own Admin reaches the controller inside Ray and
manages the ACLs the tests need. Each test uses topics and groups of its own.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from raystream.cli import main
from raystream.security.acls import AclBinding, AclBindingFilter

ANON = "User:ANONYMOUS"


@pytest.fixture(scope="module")
def secure_cluster(module_cluster: Callable[[dict[str, Any]], Any]) -> Any:
    """A cluster whose listener checks ACLs (Kafka's StandardAuthorizer named)."""
    return module_cluster(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        }
    )


@pytest.fixture(scope="module")
def bootstrap(secure_cluster: Any) -> str:
    return secure_cluster.bootstrap_servers()


@pytest.fixture
def topic(secure_cluster: Any) -> str:
    name = f"acl-{uuid.uuid4().hex[:8]}"
    secure_cluster.admin().create_topic(name)
    return name


def _grant(cluster: Any, *ops: str, rtype: str = "Topic", name: str, deny: bool = False) -> None:
    cluster.admin().create_acls(
        [AclBinding(ANON, "*", op, "Deny" if deny else "Allow", rtype, name) for op in ops]
    )


def _soon(attempt: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Whether ``attempt()`` succeeds before ``timeout_s`` (an ACL change reaches the
    listeners within a second; the rest is slack for a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    while not attempt():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _producer(bootstrap: str) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": 10_000, "retries": 0}
    )


def _produce(bootstrap: str, topic: str) -> Any:
    """One record through confluent-kafka; the delivery error (None: delivered)."""
    outcome: list[Any] = []
    producer = _producer(bootstrap)
    producer.produce(topic, b"secret-payload", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(15)
    assert outcome, "no delivery report"
    return outcome[0]


def test_produce_refused_appends_nothing_and_is_audited(
    secure_cluster: Any, bootstrap: str, topic: str
) -> None:
    from confluent_kafka import KafkaError

    _grant(secure_cluster, "Describe", name=topic)  # sees it, may not write
    error = _produce(bootstrap, topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    described = secure_cluster.admin().describe_topic(topic)
    assert [p.high_watermark for p in described.partitions] == [0]
    _grant(secure_cluster, "Write", name=topic)
    # In force within a second (the listener polls every 0.5 s); 10 s for a busy machine.
    assert _soon(lambda: _produce(bootstrap, topic) is None)
    assert secure_cluster.admin().describe_topic(topic).partitions[0].high_watermark == 1


def test_fetch_refused_then_allowed(secure_cluster: Any, bootstrap: str, topic: str) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import TopicAuthorizationFailedError

    _grant(secure_cluster, "Describe", "Write", name=topic)
    assert _soon(lambda: _produce(bootstrap, topic) is None)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, 0)])
        with pytest.raises(TopicAuthorizationFailedError):
            for _ in range(20):
                consumer.poll(timeout_ms=500)
        _grant(secure_cluster, "Read", name=topic)
        got: list[Any] = []

        def fetched() -> bool:
            try:  # refused until the grant reaches the listener
                got.extend(r for rs in consumer.poll(timeout_ms=500).values() for r in rs)
            except TopicAuthorizationFailedError:
                return False
            return bool(got)

        _soon(fetched)
        assert [r.value for r in got] == [b"secret-payload"]
    finally:
        consumer.close()


def test_metadata_hides_topics_not_describable(
    secure_cluster: Any, bootstrap: str, topic: str, wait_until: Callable[..., Any]
) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert topic not in admin.list_topics(timeout=10).topics
    _grant(secure_cluster, "Read", name=topic)  # Read implies Describe
    wait_until(lambda: topic in admin.list_topics(timeout=10).topics, 5, "the topic appears")


def test_group_refused_without_read_on_the_group(
    secure_cluster: Any, bootstrap: str, topic: str
) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    _grant(secure_cluster, "Read", name=topic)
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=f"g-{topic}", auto_offset_reset="earliest"
    )
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            for _ in range(20):
                consumer.poll(timeout_ms=500)
    finally:
        consumer.close(autocommit=False)


def test_kafka_admin_client_manages_acls(secure_cluster: Any, bootstrap: str) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding as KafkaAcl,
    )
    from confluent_kafka.admin import (
        AclBindingFilter as KafkaFilter,
    )
    from confluent_kafka.admin import (
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    binding = KafkaAcl(
        ResourceType.TOPIC,
        "managed-",
        ResourcePatternType.PREFIXED,
        "User:carol",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    refused = admin.create_acls([binding])[binding]
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        refused.result(10)
    _grant(secure_cluster, "Alter", "Describe", rtype="Cluster", name="kafka-cluster")
    mine = KafkaFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        "User:carol",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )

    def created() -> bool:
        try:
            admin.create_acls([binding])[binding].result(10)
        except KafkaException:
            return False
        return True

    assert _soon(created)  # the grant is in force within a second
    assert admin.describe_acls(mine).result(10) == [binding]
    assert secure_cluster.admin().describe_acls(AclBindingFilter(principal="User:carol")) == [
        AclBinding("User:carol", "*", "Read", "Allow", "Topic", "managed-", "prefixed")
    ]
    assert admin.delete_acls([mine])[mine].result(10) == [binding]
    assert admin.describe_acls(mine).result(10) == []


def test_cli_adds_lists_and_removes(secure_cluster: Any, capsys: pytest.CaptureFixture) -> None:
    ns = ["--namespace", secure_cluster.namespace]
    add = ["acls", "add", "--principal", "User:dave", "--operation", "Write", "--topic", "cli-t"]
    assert main([*ns, *add, "--deny"]) == 0
    assert main([*ns, "acls", "list", "--principal", "User:dave", "--output", "json"]) == 0
    out = capsys.readouterr().out
    assert '"permission": "Deny"' in out and '"resource_name": "cli-t"' in out
    assert main([*ns, "acls", "remove", "--principal", "User:dave"]) == 0
    assert "removed: Deny User:dave" in capsys.readouterr().out
    assert secure_cluster.admin().describe_acls(AclBindingFilter(principal="User:dave")) == []
    assert main([*ns, "acls", "remove"]) != 0  # nothing selected: refused
