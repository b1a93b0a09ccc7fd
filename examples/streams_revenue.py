"""Live revenue per customer category per minute, with a streams application.

Orders (keyed by customer id) are joined with a customers table (customer id ->
category); the revenue of each category is summed over one-minute tumbling windows of
event time (orders arrive out of order, within the window's grace). The result goes to
topic "revenue-per-minute" and stays queryable in the application's window store
("revenue"), which a worker actor keeps on disk and backs with a compacted changelog.
Runs on the embedded default; checks its answer against a batch computation.
"""

import json
import random
import time
from collections import defaultdict

import raystream as rs
from raystream.streams import TumblingWindows

MINUTE_MS = 60_000
CATEGORIES = ["books", "garden", "games", "music"]


def wait_until(condition, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout_s} s")
        time.sleep(0.2)


cluster = rs.connect()
admin = cluster.admin()
for topic in ("customers", "orders", "revenue-per-minute"):
    if topic not in admin.list_topics():
        admin.create_topic(topic, partitions=2)

app = rs.streams.App(cluster, "revenue", commit_interval_ms=100)
customers = app.table("customers", value_deserializer=bytes.decode, name="customers")
(
    app.stream("orders", value_deserializer=json.loads)
    .join(customers, lambda order, category: {"category": category, **order})
    .group_by(lambda customer, order: order["category"])
    .window(TumblingWindows(MINUTE_MS, grace_ms=MINUTE_MS))
    .aggregate(lambda: 0, lambda category, order, total: total + order["cents"], name="revenue")
    .to_stream()
    .to(
        "revenue-per-minute",
        key_serializer=lambda w: f"{w.key}@{w.start_ms // MINUTE_MS}".encode(),
        value_serializer=lambda cents: str(cents).encode(),
    )
)
print(app.describe())
app.start()

rng = random.Random(7)
category_of = {f"customer-{i}": rng.choice(CATEGORIES) for i in range(20)}
with cluster.producer() as producer:
    for customer, category in category_of.items():
        producer.send("customers", category.encode(), customer.encode(), timestamp_ms=0)
table = app.store("customers")
wait_until(lambda: len(table.all()) == len(category_of), "the customers table loaded")

orders = [
    (f"customer-{rng.randrange(20)}", rng.randrange(100, 10_000), rng.randrange(3 * MINUTE_MS))
    for _ in range(2_000)
]
with cluster.producer() as producer:
    for customer, cents, ts in orders:  # out of order within each minute
        value = json.dumps({"cents": cents}).encode()
        producer.send("orders", value, customer.encode(), timestamp_ms=ts)

expected: dict[tuple[str, int], int] = defaultdict(int)
for customer, cents, ts in orders:
    expected[(category_of[customer], ts // MINUTE_MS * MINUTE_MS)] += cents
revenue = app.store("revenue")


def live() -> dict[tuple[str, int], int]:
    return {(w.key, w.start_ms): cents for w, cents in revenue.all()}


wait_until(lambda: live() == expected, "every order counted")
for (category, start_ms), cents in sorted(live().items()):
    print(f"minute {start_ms // MINUTE_MS} {category:<7} {cents / 100:>10.2f}")
print(f"books in minute 1: {revenue.fetch('books', MINUTE_MS, MINUTE_MS)}")
app.stop()
print(f"revenue of {len(orders)} orders matches the batch answer: {app.state}")
