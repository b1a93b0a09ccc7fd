"""An orders stream, revenue per category in 5-minute event-time windows with Spark SQL
on Ray (RayDP), the result written back to a topic. Runs on the embedded default."""

import datetime

import numpy as np
import pyarrow as pa

import raystream as rs

ORDER = pa.schema(
    [
        ("order_id", pa.int64()),
        ("category", pa.string()),
        ("amount", pa.float64()),
        ("event_time", pa.timestamp("ms", tz="UTC")),
    ]
)
REVENUE = pa.schema(
    [
        ("window_start", pa.timestamp("ms", tz="UTC")),
        ("category", pa.string()),
        ("revenue", pa.float64()),
        ("orders", pa.int64()),
    ]
)
CATEGORIES = ["books", "games", "garden", "music", "toys"]

cluster = rs.connect()
admin = cluster.admin()
for name, schema in (("orders", ORDER), ("revenue-5m", REVENUE)):
    if name not in admin.list_topics():
        admin.create_topic(name, partitions=3, schema=schema)

# One hour of orders, event time spread over it (a real stream would be producing live).
rng = np.random.default_rng(7)
count = 20_000
start = datetime.datetime.now(datetime.timezone.utc).replace(second=0, microsecond=0)
start -= datetime.timedelta(hours=1)
orders = pa.table(
    {
        "order_id": np.arange(count),
        "category": rng.choice(CATEGORIES, count),
        "amount": rng.gamma(2.0, 15.0, count).round(2),
        "event_time": pa.array(
            int(start.timestamp() * 1000) + np.sort(rng.integers(0, 3_600_000, count)),
            pa.timestamp("ms", tz="UTC"),
        ),
    },
    schema=ORDER,
)
with cluster.producer() as producer:
    producer.send_batch("orders", orders, key_column="category")

spark = rs.spark.session(cluster, app_name="spark-analytics")
try:
    rs.spark.read_topic(spark, "orders").createOrReplaceTempView("orders")
    revenue = spark.sql(
        """
        SELECT window.start AS window_start, category,
               ROUND(SUM(amount), 2) AS revenue, COUNT(*) AS orders
        FROM orders
        GROUP BY window(event_time, '5 minutes'), category
        ORDER BY window_start, category
        """
    )
    revenue.show(10, truncate=False)
    written = rs.spark.write_topic(revenue, "revenue-5m", key_column="category")
    print(f"{written} window totals written to topic 'revenue-5m'")
finally:
    rs.spark.stop()
