"""``raystream demo``: the main job, end to end on an embedded local cluster.

Starts Ray in this process with raystream on it, creates a typed ``orders`` topic with
three replicas per partition, streams realistic orders (customer, category, amount)
into it record by record with ``acks=all``, kills a partition leader mid-stream to show
the failover, reads everything back as Arrow, then processes the stream with a
consumer group of Ray actors (``rs.ConsumerGroup``) that forwards each order to a
``processed`` topic, killing one member to show the rebalance. It checks that every
acknowledged order arrived, in order per customer, and was processed, prints
revenue per category, and ends with the same analytics as a Spark SQL job on the same
Ray (through RayDP), its result written to a topic and read back. Data goes to a
temporary directory, removed at the end; the output of Ray, Spark and the JVM goes to a
log file beside it, which the demo names and keeps, so the terminal shows the demo's
own lines only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raystream.errors import GroupIdNotFoundError
from raystream.types import TopicPartition

ORDER_SCHEMA = pa.schema(
    [
        ("order_id", pa.int64()),
        ("customer", pa.string()),
        ("category", pa.string()),
        ("amount", pa.float64()),
    ]
)
CATEGORIES = ["books", "electronics", "garden", "grocery", "toys", "sports", "fashion"]


def generate_orders(count: int, seed: int = 42):
    """Yield (key, order) pairs: orders keyed by customer, so one customer's orders
    share a partition and stay in order."""
    rng = random.Random(seed)
    customers = [f"customer-{i:05d}" for i in range(max(count // 20, 1))]
    for order_id in range(count):
        customer = rng.choice(customers)
        yield (
            customer.encode(),
            {
                "order_id": order_id,
                "customer": customer,
                "category": rng.choice(CATEGORIES),
                "amount": round(rng.lognormvariate(3.0, 0.8), 2),
            },
        )


def _step(text: str) -> float:
    print(f"==> {text}", flush=True)
    return time.perf_counter()


def run_demo(orders: int = 200_000, partitions: int = 3) -> int:
    """Run the demo; returns the exit status (0 when every check passed).

    Only the demo's own lines reach the terminal: everything else this process and its
    children write (Ray's and the JVM's log lines, warnings) goes to a log file next to
    the data, named at the start and kept at the end.
    """
    workspace = tempfile.mkdtemp(prefix="raystream-demo-")
    data_dir = os.path.join(workspace, "data")
    log_path = os.path.join(workspace, "demo.log")
    print(f"==> the demo's log (Ray, Spark and Java output): {log_path}", flush=True)
    try:
        with story_only(log_path):
            return _run(orders, partitions, data_dir)
    except BaseException:
        print(f"the demo failed; its log is {log_path}", file=sys.stderr, flush=True)
        raise
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
        print(f"log kept in {log_path}", flush=True)


@contextlib.contextmanager
def story_only(log_path: str) -> Iterator[None]:
    """Send file descriptors 1 and 2 to ``log_path`` for the duration, and keep
    ``sys.stdout`` on the terminal.

    Ray's C++ core and the raylet it starts, the Spark JVM (a child process that
    inherits the descriptors) and Python's warnings and loggers all write to fd 1 or
    2, or to ``sys.stderr``; only ``print`` to ``sys.stdout`` still reaches the
    original standard output. Everything is put back on exit, exceptions included.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    story = open(os.dup(saved_out), "w", buffering=1, encoding="utf-8")  # noqa: SIM115
    log = open(os.dup(log_fd), "w", buffering=1, encoding="utf-8")  # noqa: SIM115
    old_stdout, old_stderr = sys.stdout, sys.stderr
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    sys.stdout, sys.stderr = story, log
    try:
        yield
    finally:
        story.flush()
        log.flush()
        sys.stdout, sys.stderr = old_stdout, old_stderr
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        for fd in (saved_out, saved_err, log_fd):
            os.close(fd)
        story.close()
        log.close()


def _run(orders: int, partitions: int, data_dir: str) -> int:
    import ray

    import raystream as rs
    from raystream.java import provide_java
    from raystream.transport import local_ray_system_config

    started = _step("starting an embedded local cluster (Ray in this process)")
    provide_java()  # Ray gives its node Java workers (for Spark) only if Java is there now
    ray.init(
        address="local",
        num_cpus=max(4, os.cpu_count() or 1),
        include_dashboard=False,
        logging_level="error",
        log_to_driver=False,
        _system_config=local_ray_system_config(),
    )
    try:
        cluster = rs.connect(namespace="raystream-demo", data_dir=data_dir)
        print(f"    up in {time.perf_counter() - started:.1f} s, data in {data_dir}")

        started = _step(
            f"creating topic 'orders': {partitions} partitions x 3 replicas, typed, "
            "min.insync.replicas=2"
        )
        admin = cluster.admin()
        admin.create_topic(
            "orders",
            partitions=partitions,
            replication_factor=3,
            schema=ORDER_SCHEMA,
            config={"min.insync.replicas": 2},
        )
        print(f"    created in {time.perf_counter() - started:.1f} s")
        for p in admin.describe_topic("orders").partitions:
            print(f"    partition {p.partition}: leader {p.leader}, in-sync replicas {p.isr}")
        if cluster.status()["partitions_not_spread"]:
            print("    (one Ray node here: replicas share it; on a cluster they spread over nodes)")

        started = _step(
            f"producing {orders:,} orders, one send() per order, keyed by customer, acks=all"
        )
        producer = cluster.producer(acks="all", linger_ms=5)
        acknowledged: list[int] = []
        failed: list[BaseException] = []
        step = max(orders // 5, 1)
        failover: dict[str, float] = {}
        watcher = None
        for key, order in generate_orders(orders):
            future = producer.send("orders", value=order, key=key)
            future.add_callback(lambda _md, i=order["order_id"]: acknowledged.append(i))
            future.add_errback(failed.append)
            if order["order_id"] + 1 == orders // 2:
                watcher = _kill_leader(cluster, admin, failover)
            if (order["order_id"] + 1) % step == 0:
                print(f"    {order['order_id'] + 1:>10,} sent", flush=True)
        producer.flush()
        producer.close()
        seconds = time.perf_counter() - started
        if watcher is not None:
            watcher.join(timeout=60)
        print(
            f"    {len(acknowledged):,} acknowledged in {seconds:.2f} s "
            f"({len(acknowledged) / seconds:,.0f} orders/s), {len(failed)} failed"
        )
        if "elected" in failover:
            print(
                f"    failover: leader {failover['old']:.0f} of orders-0 killed, replica "
                f"{failover['new']:.0f} elected {failover['elected']:.2f} s later"
            )

        started = _step("reading every order back as Arrow tables")
        consumer = cluster.consumer("orders", auto_offset_reset="earliest")
        tables = []
        received = 0
        while received < orders:
            table = consumer.poll_arrow(timeout_ms=1000)
            if table.num_rows == 0 and time.perf_counter() - started > 120:
                break
            if table.num_rows:
                tables.append(table)
                received += table.num_rows
        consumer.close()
        seconds = time.perf_counter() - started
        print(f"    {received:,} orders in {seconds:.2f} s ({received / seconds:,.0f} orders/s)")
        processed = _process_with_group(cluster, admin, len(set(acknowledged)), partitions)

        table = pa.concat_tables(tables)
        ids = set(table.column("order_id").to_pylist())
        complete = not failed and set(acknowledged) <= ids and len(acknowledged) == orders
        all_processed = set(acknowledged) <= processed
        in_order = _ordered_per_customer(table)
        summary = (
            table.group_by("category")
            .aggregate([("amount", "sum"), ("amount", "count"), ("amount", "mean")])
            .sort_by([("amount_sum", "descending")])
        )
        _step("revenue per category")
        print(f"    {'category':<12} {'orders':>9} {'revenue':>14} {'average':>9}")
        for row in summary.to_pylist():
            print(
                f"    {row['category']:<12} {row['amount_count']:>9,} "
                f"{row['amount_sum']:>14,.2f} {row['amount_mean']:>9.2f}"
            )
        total = pc.sum(table.column("amount")).as_py()
        print(f"    {'total':<12} {table.num_rows:>9,} {total:>14,.2f}")
        description = admin.describe_topic("orders")
        for p in description.partitions:
            print(f"    partition {p.partition}: {p.high_watermark:,} orders")
        duplicates = table.num_rows - len(ids)
        print(
            f"every acknowledged order consumed:  {'yes' if complete else 'NO'}"
            f" ({duplicates} duplicates from retries)"
        )
        print(f"orders of each customer in order:  {'yes' if in_order else 'NO'}")
        print(f"every order processed by the group: {'yes' if all_processed else 'NO'}")
        spark_ok = _spark_step(cluster, admin)
        cluster.shutdown()
        return 0 if complete and in_order and all_processed and spark_ok else 1
    finally:
        ray.shutdown()


PROCESSED_SCHEMA = pa.schema(
    [
        ("order_id", pa.int64()),
        ("category", pa.string()),
        ("amount", pa.float64()),
        ("member", pa.string()),
    ]
)


def _enricher(cluster):
    """The consumer-group function: each member actor forwards its orders, tagged with
    its name, to the 'processed' topic (a consume-transform-produce step)."""
    state: dict = {}

    def enrich(table: pa.Table) -> None:
        if "producer" not in state:
            state["producer"] = cluster.producer(acks="all", linger_ms=5)
            state["member"] = f"actor-{os.getpid()}"
        out = table.select(["order_id", "category", "amount"]).append_column(
            "member", pa.array([state["member"]] * table.num_rows, pa.string())
        )
        state["producer"].send_batch("processed", out)

    return enrich


def _process_with_group(cluster, admin, expected: int, partitions: int) -> set[int]:
    """Run a consumer group of Ray actors over 'orders', kill one, show the rebalance,
    and return the order ids that reached the 'processed' topic."""
    import ray

    import raystream as rs

    started = _step(
        f"processing the stream with a consumer group of {partitions} Ray actors "
        "(at-least-once: each commits after its batch is forwarded)"
    )
    admin.create_topic("processed", partitions=partitions, schema=PROCESSED_SCHEMA)
    config = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 300, "max_poll_records": 2000}
    group = rs.ConsumerGroup(
        cluster,
        "orders",
        "enrichers",
        _enricher(cluster),
        members=partitions,
        consumer_config=config,
    )
    reader = cluster.consumer("processed", auto_offset_reset="earliest")
    seen: set[int] = set()
    members: dict[str, int] = {}

    def read(timeout_ms: int) -> None:
        table = reader.poll_arrow(timeout_ms=timeout_ms)
        seen.update(table.column("order_id").to_pylist())
        for row in table.group_by("member").aggregate([("order_id", "count")]).to_pylist():
            members[row["member"]] = members.get(row["member"], 0) + row["order_id_count"]

    def show() -> None:
        statuses = _settled_statuses(admin, group, partitions, timeout_s=60)
        if statuses is None:
            statuses = group.status()
            print("    (the group had not settled after 60 s; its members now:)")
        for i, status in enumerate(statuses):
            owned = " ".join(f"orders-{tp.partition}" for tp in status.get("assignment", []))
            print(f"    member {i}: {owned or '(idle)'}")

    show()
    while len(seen) < expected // 3 and time.perf_counter() - started < 120:
        read(500)
    victim = group.members[0]
    print(f"    {len(seen):,} orders processed; killing member 0 (ray.kill, as a crash)")
    killed = time.perf_counter()
    ray.kill(victim, no_restart=False)
    while len(seen) < expected and time.perf_counter() - started < 180:
        read(500)
    print(
        f"    all {len(seen):,} orders processed {time.perf_counter() - killed:.1f} s after "
        "the kill; Ray restarted the member and the group rebalanced:"
    )
    show()
    group.stop()
    reader.close()
    print("    orders forwarded per member process (duplicates from the crash included):")
    for name, count in sorted(members.items()):
        print(f"      {name}: {count:,}")
    seconds = time.perf_counter() - started
    print(f"    {len(seen):,} distinct orders in {seconds:.1f} s")
    return seen


def _settled_statuses(
    admin, group, partitions: int, timeout_s: float
) -> list[dict[str, Any]] | None:
    """The members' statuses once the group has settled, or None after ``timeout_s``.

    Settled: the coordinator says the group is Stable with every member actor in it,
    and the members' own assignments hold each partition of 'orders' exactly once. Right
    after a member crashes, the survivors finish their work before Ray's restarted
    member has rejoined and the rebalance is over, so the assignment is only worth
    showing once this holds.
    """
    every_partition = [TopicPartition("orders", p) for p in range(partitions)]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        statuses = group.status()
        held = sorted(tp for status in statuses for tp in status.get("assignment", []))
        if held == every_partition and all(status.get("alive") for status in statuses):
            try:
                description = admin.describe_group(group.group_id)
            except GroupIdNotFoundError:
                description = None
            if (
                description is not None
                and description.state == "Stable"
                and len(description.members) == len(statuses)
                and sorted(tp for tps in description.members.values() for tp in tps) == held
            ):
                return statuses
        time.sleep(0.2)
    return None


def _spark_step(cluster, admin) -> bool:
    """Spark SQL on Ray over the orders topic (through RayDP, Arrow all the way): revenue
    and orders per category, written back to a topic and printed. Returns whether the
    Spark totals equal the stream's."""
    import raystream as rs

    started = _step("Spark on Ray: revenue per category with Spark SQL, written to a topic")
    import ray.data  # noqa: F401  (importing it configures its loggers: set the level after)

    logging.getLogger("ray.data").setLevel(logging.WARNING)  # no per-dataset progress logs
    spark = rs.spark.session(cluster, app_name="raystream-demo")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        print(f"    Spark {spark.version} up in {time.perf_counter() - started:.1f} s")
        rs.spark.read_topic(spark, "orders").createOrReplaceTempView("orders")
        result = spark.sql(
            """
            SELECT category, COUNT(DISTINCT order_id) AS orders,
                   ROUND(SUM(amount), 2) AS revenue, COUNT(*) AS records
            FROM orders GROUP BY category ORDER BY revenue DESC
            """
        )
        admin.create_topic(
            "revenue-by-category",
            schema=pa.schema(
                [
                    ("category", pa.string()),
                    ("orders", pa.int64()),
                    ("revenue", pa.float64()),
                    ("records", pa.int64()),
                ]
            ),
        )
        rs.spark.write_topic(result, "revenue-by-category", key_column="category")
        reader = cluster.consumer("revenue-by-category", auto_offset_reset="earliest")
        table = reader.poll_arrow(timeout_ms=5000).sort_by([("revenue", "descending")])
        reader.close()
        print(f"    {'category':<12} {'orders':>9} {'revenue':>14}   (read back from the topic)")
        for row in table.to_pylist():
            print(f"    {row['category']:<12} {row['orders']:>9,} {row['revenue']:>14,.2f}")
        print(f"    Spark step done in {time.perf_counter() - started:.1f} s")
        return table.num_rows == len(CATEGORIES)
    finally:
        rs.spark.stop()


def _kill_leader(cluster, admin, failover: dict[str, float]) -> threading.Thread:
    """Kill the leader replica of orders-0 and time the election of its successor."""
    import ray

    old = admin.describe_topic("orders").partitions[0].leader
    handle = ray.get_actor(f"replica:orders:0:{old}", namespace=cluster.namespace)
    print(f"    killing the leader of orders-0 (replica {old}) mid-stream", flush=True)
    killed_at = time.perf_counter()
    ray.kill(handle, no_restart=False)
    failover["old"] = old

    def watch() -> None:
        while time.perf_counter() - killed_at < 60:
            leader = admin.describe_topic("orders").partitions[0].leader
            if leader not in (-1, old):
                failover["new"] = leader
                failover["elected"] = time.perf_counter() - killed_at
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _ordered_per_customer(table: pa.Table) -> bool:
    """Whether, within each partition, every customer's order ids increase."""
    sorted_table = table.sort_by([("partition", "ascending"), ("offset", "ascending")])
    last: dict[str, int] = {}
    for customer, order_id in zip(
        sorted_table.column("customer").to_pylist(),
        sorted_table.column("order_id").to_pylist(),
        strict=True,
    ):
        if last.get(customer, -1) > order_id:
            return False
        last[customer] = order_id
    return True
