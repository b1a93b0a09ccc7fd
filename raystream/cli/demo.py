"""``raystream demo``: the main job, end to end on an embedded local cluster.

Starts Ray in this process with raystream on it, creates a typed ``orders`` topic,
streams realistic orders (customer, category, amount) into it record by record, reads
them back as Arrow, checks that every order arrived once and in order per customer,
and prints revenue per category. Data goes to a temporary directory, removed at the end.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time

import pyarrow as pa
import pyarrow.compute as pc

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
    """Run the demo; returns the exit status (0 when every check passed)."""
    import ray

    import raystream as rs

    data_dir = tempfile.mkdtemp(prefix="raystream-demo-")
    started = _step("starting an embedded local cluster (Ray in this process)")
    ray.init(
        address="local",
        num_cpus=max(4, os.cpu_count() or 1),
        include_dashboard=False,
        logging_level="error",
        log_to_driver=False,
    )
    try:
        cluster = rs.connect(namespace="raystream-demo", data_dir=data_dir)
        print(f"    up in {time.perf_counter() - started:.1f} s, data in {data_dir}")

        started = _step(f"creating topic 'orders' with {partitions} partitions (typed)")
        admin = cluster.admin()
        admin.create_topic("orders", partitions=partitions, schema=ORDER_SCHEMA)
        print(f"    created in {time.perf_counter() - started:.1f} s")

        started = _step(f"producing {orders:,} orders, one send() per order, keyed by customer")
        producer = cluster.producer(acks="all", linger_ms=5)
        step = max(orders // 5, 1)
        for key, order in generate_orders(orders):
            producer.send("orders", value=order, key=key)
            if (order["order_id"] + 1) % step == 0:
                print(f"    {order['order_id'] + 1:>10,} sent", flush=True)
        producer.flush()
        producer.close()
        seconds = time.perf_counter() - started
        print(f"    acknowledged in {seconds:.2f} s ({orders / seconds:,.0f} orders/s)")

        started = _step("consuming every order back as Arrow tables")
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

        table = pa.concat_tables(tables)
        ids = table.column("order_id").to_numpy()
        complete = len(ids) == orders and len(set(ids.tolist())) == orders
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
        print(f"every order received exactly once: {'yes' if complete else 'NO'}")
        print(f"orders of each customer in order:  {'yes' if in_order else 'NO'}")
        cluster.shutdown()
        return 0 if complete and in_order else 1
    finally:
        ray.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)


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
