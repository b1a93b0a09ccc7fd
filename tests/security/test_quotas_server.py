"""KIP-219 in the Kafka server loop, without Ray: an over-quota client's answer goes
out at once carrying its throttle time, and the connection's next request is not
started until that time has passed."""

from __future__ import annotations

import asyncio
import io
import struct
import time

from raystream.kafka.codec import build, request_schema, response_schema
from raystream.kafka.server import KafkaServer
from raystream.security.quotas import REQUEST_PERCENTAGE, QuotaManager

HANDLER_S = 0.2


class SlowMetadataBackend:
    """Just enough of a Backend for Metadata, taking :data:`HANDLER_S` per answer."""

    broker_id = 0
    cluster_id = "test"

    async def brokers(self) -> tuple[list, dict]:
        await asyncio.sleep(HANDLER_S)
        return [], {}

    async def topics(self, names: list[str] | None) -> list:
        return []


def _metadata_frame(correlation_id: int, client_id: str) -> bytes:
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer

    schema = request_schema(3, 12)
    buffer = io.BytesIO()
    entity_writer(RequestHeader)(
        buffer,
        RequestHeader(
            request_api_key=3,
            request_api_version=12,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    entity_writer(schema)(buffer, build(schema, {"topics": [], "allow_auto_topic_creation": False}))
    frame = buffer.getvalue()
    return struct.pack(">i", len(frame)) + frame


async def _answers(port: int, client_id: str) -> list[tuple[float, int, float]]:
    """Two Metadata requests, the second sent once the first is answered; (seconds
    from sending to answer, correlation id, throttle s) of each."""
    from kio.serial import entity_reader

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = []
    for correlation in (1, 2):
        sent = time.monotonic()
        writer.write(_metadata_frame(correlation, client_id))
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        answer = await reader.readexactly(size)
        (correlation_id,) = struct.unpack_from(">i", answer)
        response = entity_reader(response_schema(3, 12))(answer, 5)[0]
        throttle = response.throttle_time.total_seconds()
        got.append((time.monotonic() - sent, correlation_id, throttle))
    writer.close()
    await writer.wait_closed()
    await asyncio.sleep(0.05)  # the server sees the end of the connection
    return got


def test_throttle_time_is_answered_first_then_the_connection_is_muted() -> None:
    async def run() -> tuple[list, list]:
        # 2 samples of 1 s: 20 %-s of handler time over the padded 1.2 s window is
        # ~16.7 %, against 10 %: throttled (16.7 - 10) / 10 * 1.2 s = 0.8 s
        quotas = QuotaManager(window_num=2, window_size_s=1)
        quotas.update({(("client-id", "slow"),): {REQUEST_PERCENTAGE: 10.0}})
        server = KafkaServer(SlowMetadataBackend(), "127.0.0.1", 0, quotas=quotas)
        await server.start()
        try:
            return await _answers(server.port, "slow"), await _answers(server.port, "other")
        finally:
            await server.close()

    throttled, free = asyncio.run(run())
    (first_s, first_id, first_throttle), (second_s, second_id, _) = throttled
    assert (first_id, second_id) == (1, 2)
    assert 0.5 <= first_throttle <= 2.0, first_throttle  # more if the machine is slow
    assert first_s < first_throttle  # answered at once, carrying the throttle time
    assert second_s >= first_throttle - 0.05 + HANDLER_S  # the next waited out the mute
    assert [t for _, _, t in free] == [0, 0]  # a client without a quota is not throttled
    assert free[1][0] < first_throttle
