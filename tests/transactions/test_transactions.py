"""Transactions on a real Ray: commit and abort visibility, the last stable offset,
fencing, offsets committed with the output, timeouts, markers hidden from everyone."""

from __future__ import annotations

import dataclasses
import time

import pyarrow as pa
import pytest

from raystream.errors import (
    CommitFailedError,
    InvalidRequestError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from raystream.requests import DescribeTransactionRequest, EndTxnRequest, ListGroupsRequest
from raystream.types import TopicPartition


def test_committed_records_appear_and_aborted_ones_only_as_uncommitted_data(
    shared_cluster, make_topic, txn_id, read_all, transactional
) -> None:
    topic = make_topic(partitions=2)
    with transactional(shared_cluster) as producer:
        producer.begin_transaction()
        for i in range(6):
            producer.send(topic, f"c{i}".encode(), partition=i % 2)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send_batch(topic, pa.table({"value": [b"a0", b"a1", b"a2"]}))
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"c6", partition=0)
        producer.commit_transaction()
    committed = read_all(shared_cluster, topic, "read_committed", 2)
    everything = read_all(shared_cluster, topic, "read_uncommitted", 2)
    assert sorted(committed) == [f"c{i}".encode() for i in range(7)]
    assert sorted(everything) == sorted([*committed, b"a0", b"a1", b"a2"])
    # markers (one per partition per transaction) are never returned as records
    assert len(everything) == 10


def test_read_committed_stops_at_an_open_transaction_until_it_ends(
    shared_cluster, make_topic, txn_id, read_all, transactional
) -> None:
    topic = make_topic()
    plain = shared_cluster.producer()
    plain.send(topic, b"before").get()
    producer = transactional(shared_cluster)
    producer.begin_transaction()
    producer.send(topic, b"inside").get()
    plain.send(topic, b"after").get()  # non-transactional, behind the open transaction
    tp = TopicPartition(topic, 0)
    with shared_cluster.consumer(
        auto_offset_reset="earliest", enable_auto_commit=False, isolation_level="read_committed"
    ) as consumer:
        consumer.assign([tp])
        assert consumer.end_offsets([tp])[tp] == 1  # the last stable offset
        seen = consumer.poll_arrow(timeout_ms=1000).column("value").to_pylist()
        seen += consumer.poll_arrow(timeout_ms=500).column("value").to_pylist()
        assert seen == [b"before"]
        producer.commit_transaction()
        deadline = time.monotonic() + 10
        while len(seen) < 3 and time.monotonic() < deadline:
            table = consumer.poll_arrow(timeout_ms=500)
            seen += table.column("value").to_pylist() if table.num_rows else []
        assert seen == [b"before", b"inside", b"after"]
        assert consumer.position(tp) == 4  # past the marker
    producer.close()
    plain.close()


def test_a_second_init_fences_the_zombie_and_aborts_its_transaction(
    shared_cluster, make_topic, txn_id, read_all, transactional
) -> None:
    topic = make_topic()
    tid = txn_id()
    zombie = transactional(shared_cluster, transactional_id=tid)
    zombie.begin_transaction()
    zombie.send(topic, b"zombie").get()
    successor = transactional(shared_cluster, transactional_id=tid)
    with pytest.raises(ProducerFencedError):
        zombie.commit_transaction()
    with pytest.raises(ProducerFencedError):
        zombie.begin_transaction()  # fenced for good
    successor.begin_transaction()
    successor.send(topic, b"successor")
    successor.commit_transaction()
    assert read_all(shared_cluster, topic, "read_committed") == [b"successor"]
    zombie.close()
    successor.close()


def test_a_fenced_zombie_cannot_write_even_without_its_coordinator(
    shared_cluster, make_topic, txn_id, read_all, transactional
) -> None:
    topic = make_topic()
    tid = txn_id()
    zombie = transactional(shared_cluster, transactional_id=tid)
    zombie.begin_transaction()
    zombie.send(topic, b"first").get()  # the partition is in the zombie's transaction
    successor = transactional(shared_cluster, transactional_id=tid)
    late = zombie.send(topic, b"late")  # the leader knows the newer epoch from the marker
    with pytest.raises(Exception):  # noqa: B017 - InvalidProducerEpoch, or fenced on add
        late.get(timeout=30)
    successor.close()
    zombie.close()
    assert read_all(shared_cluster, topic, "read_committed") == []


def test_calls_out_of_order_name_the_state(
    shared_cluster, make_topic, txn_id, read_all, transactional
) -> None:
    topic = make_topic()
    producer = shared_cluster.producer(transactional_id=txn_id())
    with pytest.raises(InvalidTxnStateError, match="UNINITIALIZED"):
        producer.begin_transaction()
    producer.init_transactions()
    with pytest.raises(InvalidTxnStateError, match=r"send.*READY"):
        producer.send(topic, b"x")
    with pytest.raises(InvalidTxnStateError, match=r"commit_transaction.*READY"):
        producer.commit_transaction()
    producer.begin_transaction()
    with pytest.raises(InvalidTxnStateError, match="IN_TRANSACTION"):
        producer.begin_transaction()
    producer.commit_transaction()  # nothing sent: nothing to ask the coordinator
    producer.close()
    with pytest.raises(InvalidTxnStateError, match="transactional_id"):
        shared_cluster.producer().init_transactions()


def test_bad_transactional_config_is_named(shared_cluster) -> None:
    from raystream.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError, match=r"transactional.id=.t.: needs"):
        shared_cluster.producer(transactional_id="t", acks=1)
    with pytest.raises(InvalidConfigError, match=r"transaction.timeout.ms"):
        shared_cluster.producer(transactional_id="t", transaction_timeout_ms=0)


def test_offsets_commit_atomically_with_the_output(
    shared_cluster, make_topic, txn_id, read_all, transactional
) -> None:
    source, sink = make_topic(), make_topic()
    tp = TopicPartition(source, 0)
    group = f"g-{txn_id()}"
    producer = transactional(shared_cluster)
    producer.begin_transaction()
    producer.send(sink, b"out-1")
    producer.send_offsets_to_transaction({tp: (5, "stream time 42")}, group)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send(sink, b"out-2")
    producer.send_offsets_to_transaction({tp: 9}, group)
    producer.abort_transaction()
    with pytest.raises(InvalidRequestError, match="offset"):
        producer.begin_transaction() or producer.send_offsets_to_transaction({tp: -1}, group)
    producer.abort_transaction()
    producer.close()
    assert shared_cluster.admin().describe_group(group).offsets == {tp: 5}
    assert read_all(shared_cluster, sink, "read_committed") == [b"out-1"]
    with shared_cluster.consumer(
        group_id=group, enable_auto_commit=False, isolation_level="read_committed"
    ) as consumer:
        consumer.assign([tp])
        assert consumer.committed(tp) == 5
        noted = consumer.committed(tp, metadata=True)
        assert (noted.offset, noted.metadata) == (5, "stream time 42")


def test_an_end_carries_the_written_partitions_into_the_next_transaction(
    shared_cluster, make_topic, txn_id, read_all, transactional, wait_until
) -> None:
    """A loop that writes the same partitions each time finds them in its next
    transaction, under the next epoch (once the markers of the ended one are written:
    Prepare* until then); one that writes fewer carries only those."""
    from raystream.groups.offsets_topic import OFFSETS_TOPIC

    source, sink = make_topic(), make_topic()
    tp = TopicPartition(source, 0)
    group = f"g-{txn_id()}"
    producer = transactional(shared_cluster)
    tid = producer.config.transactional_id

    def coordinator_side() -> tuple[str, set[str], int]:
        described = shared_cluster.transaction_coordinator_call(DescribeTransactionRequest(tid))
        topics = {topic for topic, _ in described["partitions"]}
        return described["state"], topics, described["producer_epoch"]

    epoch = producer._txn.producer_epoch
    producer.begin_transaction()
    producer.send(sink, b"out-1").get()
    producer.send_offsets_to_transaction({tp: 5}, group)
    producer.commit_transaction()
    expected = ("Ongoing", {sink, OFFSETS_TOPIC}, epoch + 1)
    wait_until(lambda: coordinator_side() == expected, 10, "the markers written")
    assert producer._txn.producer_epoch == epoch + 1
    producer.begin_transaction()
    producer.send(sink, b"out-2").get()
    producer.send_offsets_to_transaction({tp: 7}, group)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send(sink, b"out-3").get()
    producer.commit_transaction()  # no offsets this time: only the sink is carried
    expected = ("Ongoing", {sink}, epoch + 3)
    wait_until(lambda: coordinator_side() == expected, 10, "the markers written")
    producer.begin_transaction()
    producer.send(sink, b"out-4").get()
    producer.send_offsets_to_transaction({tp: 9}, group)
    producer.abort_transaction()
    producer.close()  # ends the transaction the abort carried
    expected = ("CompleteAbort", set())
    wait_until(lambda: coordinator_side()[:2] == expected, 10, "the abort's markers written")
    assert shared_cluster.admin().describe_group(group).offsets == {tp: 7}
    assert read_all(shared_cluster, sink, "read_committed") == [b"out-1", b"out-2", b"out-3"]


def test_a_carried_transaction_nobody_takes_is_ended_before_it_times_out(
    shared_cluster, make_topic, read_all, transactional, wait_until, holds_for
) -> None:
    """An idle producer is not fenced by its carried transaction: the release thread
    ends it within a tenth of the timeout, and the next begin starts afresh."""
    topic = make_topic()
    timeout_ms = 2000
    producer = transactional(shared_cluster, transaction_timeout_ms=timeout_ms)
    tid = producer.config.transactional_id
    producer.begin_transaction()
    producer.send(topic, b"first").get()
    producer.commit_transaction()
    carried_by = time.time()  # the carried transaction began before the commit returned
    epoch = producer._txn.producer_epoch

    def described() -> dict:
        return shared_cluster.transaction_coordinator_call(DescribeTransactionRequest(tid))

    # PrepareCommit while the commit's markers are written, Ongoing (the carried one)
    # until the release thread ends it, PrepareAbort while its markers are written
    wait_until(
        lambda: described()["state"] not in ("PrepareCommit", "Ongoing", "PrepareAbort"),
        10,
        "the carried transaction ended",
    )
    ended = described()
    assert ended["state"] == "CompleteAbort" and ended["producer_epoch"] == epoch
    # Past the carried transaction's timeout and one more pass of the coordinator's
    # timeout check (every second by default), nothing is aborted and nobody is fenced.
    broker = shared_cluster.call("broker_config")
    check_ms = broker["transaction.abort.timed.out.transaction.cleanup.interval.ms"]
    window_s = carried_by + (timeout_ms + check_ms) / 1000 - time.time()

    def left_alone() -> bool:
        now = described()
        return (now["state"], now["producer_epoch"]) == ("CompleteAbort", epoch)

    holds_for(left_alone, window_s, "the ended carried transaction left alone")
    producer.begin_transaction()
    producer.send(topic, b"second").get()
    producer.commit_transaction()
    producer.close()
    assert read_all(shared_cluster, topic, "read_committed") == [b"first", b"second"]


def test_the_next_transaction_waits_for_the_markers_of_the_last_one(
    shared_cluster, make_topic, read_all, transactional, chaos, wait_until
) -> None:
    """A commit answers once its outcome is persisted; the markers follow. While one
    cannot be written (its partition's leader restarting), the next transaction's add
    of a new partition waits at the coordinator, and its batch to that partition waits
    there for the marker; both go through once it is written, each transaction whole."""
    slow, other = make_topic(), make_topic()
    producer = transactional(shared_cluster)
    tid = producer.config.transactional_id

    def state() -> str:
        return shared_cluster.transaction_coordinator_call(DescribeTransactionRequest(tid))["state"]

    producer.begin_transaction()
    producer.send(slow, b"one").get()
    leader = shared_cluster.topic_metadata(slow).partitions[0].leader_handle
    chaos.kill_actor(leader, f"the leader of {slow}")
    producer.commit_transaction()
    assert state() == "PrepareCommit"  # committed, its marker not written yet
    producer.begin_transaction()
    carried = producer.send(slow, b"two")  # the carried partition: waits for the marker
    producer.send(other, b"three").get(timeout=60)  # the add waits for the markers
    assert state() == "Ongoing"
    assert carried.get(timeout=60).offset == 2  # after "one" and the commit marker
    producer.commit_transaction()
    producer.close()
    chaos.verify()
    assert read_all(shared_cluster, slow, "read_committed") == [b"one", b"two"]
    assert read_all(shared_cluster, other, "read_committed") == [b"three"]


def test_send_batch_without_waiting_belongs_to_the_transaction_and_its_commit(
    shared_cluster, make_topic, read_all, transactional
) -> None:
    """``send_batch(wait=False)`` returns at once; the commit flushes it (and would
    raise had it failed). Without a transaction there is nobody to check: refused."""
    topic = make_topic()
    table = pa.table({"value": [b"a", b"b", b"c"]})
    with shared_cluster.producer() as plain, pytest.raises(InvalidRequestError, match="wait"):
        plain.send_batch(topic, table, wait=False)
    producer = transactional(shared_cluster)
    producer.begin_transaction()
    assert producer.send_batch(topic, table, wait=False) == []
    producer.commit_transaction()
    producer.close()
    assert read_all(shared_cluster, topic, "read_committed") == [b"a", b"b", b"c"]


def test_a_retried_end_of_a_carried_transaction_leaves_the_next_one_alone(
    shared_cluster, make_topic, read_all, transactional
) -> None:
    topic = make_topic()
    producer = transactional(shared_cluster)
    txn = producer._txn
    tid = producer.config.transactional_id
    ended = EndTxnRequest(
        tid, txn.producer_id, txn.producer_epoch, True, txn._number, ((topic, 0),)
    )
    producer.begin_transaction()
    producer.send(topic, b"one").get()
    producer.commit_transaction()
    call = shared_cluster.transaction_coordinator_call
    # The same end again (its answer lost, say) is answered as before, changing nothing.
    assert tuple(call(ended)) == (txn.producer_id, txn.producer_epoch)
    with pytest.raises(InvalidTxnStateError, match="it was committed"):
        call(dataclasses.replace(ended, committed=False))
    producer.begin_transaction()
    producer.send(topic, b"two").get()
    assert read_all(shared_cluster, topic, "read_committed") == [b"one"]
    producer.commit_transaction()
    producer.close()
    assert read_all(shared_cluster, topic, "read_committed") == [b"one", b"two"]


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(
    shared_cluster, make_topic, txn_id, read_all, transactional, wait_until
) -> None:
    topic = make_topic()
    producer = transactional(shared_cluster, transaction_timeout_ms=1500)
    producer.begin_transaction()
    producer.send(topic, b"forgotten").get()
    tp = TopicPartition(topic, 0)
    with shared_cluster.consumer(
        enable_auto_commit=False, isolation_level="read_committed"
    ) as consumer:
        wait_until(  # the abort marker moves the last stable offset
            lambda: consumer.end_offsets([tp])[tp] >= 2, 20, "the timed-out transaction aborted"
        )
    with pytest.raises(ProducerFencedError):
        producer.commit_transaction()
    producer.close()
    assert read_all(shared_cluster, topic, "read_committed") == []
    assert read_all(shared_cluster, topic, "read_uncommitted") == [b"forgotten"]


def test_offsets_of_a_consumer_outside_the_membership_commit_only_in_an_empty_group(
    shared_cluster, make_topic, txn_id, transactional
) -> None:
    source = make_topic()
    tp = TopicPartition(source, 0)
    group = f"g-{txn_id()}"
    member = shared_cluster.consumer(
        source, group_id=group, enable_auto_commit=False, session_timeout_ms=30_000
    )
    deadline = time.monotonic() + 30
    while not member.assignment():
        assert time.monotonic() < deadline, "the member never got its partition"
        member.poll(timeout_ms=200)
    outsider = shared_cluster.consumer(group_id=group, enable_auto_commit=False)
    outsider.assign([tp])
    producer = transactional(shared_cluster)
    producer.begin_transaction()
    with pytest.raises(CommitFailedError, match="active members"):
        producer.send_offsets_to_transaction({tp: 3}, outsider.group_metadata())
    producer.abort_transaction()
    member.close(autocommit=False)  # leaves: the group is empty now
    producer.begin_transaction()
    producer.send_offsets_to_transaction({tp: 3}, outsider.group_metadata())
    producer.commit_transaction()
    producer.close()
    with shared_cluster.consumer(
        group_id=group, enable_auto_commit=False, isolation_level="read_committed"
    ) as reader:
        reader.assign([tp])
        assert reader.committed(tp) == 3
    outsider.close(autocommit=False)


def test_compaction_drops_aborted_records_and_waits_for_open_transactions(
    shared_cluster, make_topic, read_all, transactional
) -> None:
    """On a compacted topic (``__consumer_offsets`` is one) an aborted or still-open
    write of a key never takes the committed record of that key away."""
    import ray

    topic = make_topic(config={"cleanup.policy": "compact", "segment.bytes": 1024})
    plain = shared_cluster.producer(linger_ms=0)

    def fill(tag: str) -> None:  # other keys, enough to close the segments before them
        for i in range(8):
            plain.send(topic, f"{tag}{i}".encode() * 40, key=f"{tag}{i}".encode()).get()

    def compact() -> None:
        leader = shared_cluster.topic_metadata(topic).partitions[0].leader_handle
        ray.get(leader.run_housekeeping.remote()).unwrap()

    plain.send(topic, b"committed", key=b"offsets-of-g").get()
    with transactional(shared_cluster) as producer:
        producer.begin_transaction()
        producer.send(topic, b"aborted", key=b"offsets-of-g").get()
        producer.abort_transaction()
        fill("a")
        compact()
        committed = read_all(shared_cluster, topic, "read_committed")
        assert b"committed" in committed
        assert b"aborted" not in read_all(shared_cluster, topic, "read_uncommitted")

        producer.begin_transaction()
        producer.send(topic, b"open", key=b"offsets-of-g").get()
        fill("b")
        compact()
        assert b"committed" in read_all(shared_cluster, topic, "read_committed")
        producer.abort_transaction()
    fill("c")
    compact()
    values = read_all(shared_cluster, topic, "read_committed")
    assert b"committed" in values and b"open" not in values
    plain.close()


def test_a_restarted_group_coordinator_keeps_memberships_behind_an_open_transaction(
    shared_cluster, make_topic, transactional, chaos
) -> None:
    """A transaction open on a group's ``__consumer_offsets`` partition holds the
    coordinator's read_committed load back; the rebalances written after it must still
    be loaded, so the member and its generation are known after a restart."""
    from raystream.groups.offsets_topic import OFFSETS_TOPIC, partition_for

    topic = make_topic()
    shared_cluster.coordinator_call(ListGroupsRequest())  # creates __consumer_offsets
    partitions = len(shared_cluster.topic_metadata(OFFSETS_TOPIC, True).partitions)
    group = f"held-back-{time.monotonic_ns()}"
    other = next(
        name
        for name in (f"txn-{group}-{i}" for i in range(1000))
        if partition_for(name, partitions) == partition_for(group, partitions)
    )
    tp = TopicPartition(topic, 0)
    with transactional(shared_cluster) as producer:
        producer.begin_transaction()
        producer.send_offsets_to_transaction({tp: 1}, other)  # open on group's partition
        member = shared_cluster.consumer(topic, group_id=group, enable_auto_commit=False)
        deadline = time.monotonic() + 30
        while not member.assignment():
            assert time.monotonic() < deadline, "the member never got its partition"
            member.poll(timeout_ms=100)
        chaos.kill_actor(shared_cluster.coordinator(), "the group coordinator")
        chaos.verify()  # back in a new process: the commit below meets the reloaded one
        member.commit({tp: 0})  # the reloaded group still knows member and generation
        producer.abort_transaction()
    member.close()
