"""Produce and consume on the embedded default: a local Ray and raystream in this process."""

import raystream as rs

cluster = rs.connect()  # starts a local Ray and the controller; data in ~/.raystream/data
admin = cluster.admin()
if "greetings" not in admin.list_topics():
    admin.create_topic("greetings", partitions=3)

with cluster.producer(acks="all") as producer:
    for i in range(10):
        producer.send("greetings", f"hello {i}".encode(), key=f"user-{i % 3}".encode())

consumer = cluster.consumer("greetings", auto_offset_reset="earliest", consumer_timeout_ms=2000)
for record in consumer:  # stops after 2 s without a new record
    print(f"partition {record.partition} offset {record.offset}: {record.value.decode()}")
consumer.close()
