"""The partition replica actor: one Ray actor per partition replica, over one Log.

A thin shell. The storage engine does the work; this class adds the partition's role
(leader or follower), its leader epoch and high watermark, long-polling fetches, and a
housekeeping task (retention, compaction, time-based flush). Every method answers with
an error code instead of raising, so bad input never kills the actor or touches the log.

While a partition has one replica its leader's high watermark is its log end offset;
the replication issue adds followers, the ISR and the min-LEO high watermark here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from typing import Any

import pyarrow as pa
import ray

from raystream.config import BrokerConfig
from raystream.errors import (
    InvalidRecordError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NotLeaderError,
    OffsetOutOfRangeError,
)
from raystream.log import Log, LogConfig
from raystream.protocol import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchResponse,
    ListOffsetsResponse,
    ProduceResponse,
    Result,
    failure,
)

logger = logging.getLogger(__name__)

ACKS = {0: 0, 1: 1, -1: -1, "all": -1, "0": 0, "1": 1, "-1": -1}
PARTITION_METADATA_FILE = "partition.metadata"
ROLE_LEADER = "leader"
ROLE_FOLLOWER = "follower"


def replica_directory(data_dir: str, topic: str, partition: int, replica_id: int) -> str:
    """Where a replica keeps its log: ``<data_dir>/<topic>-<partition>.r<replica_id>``."""
    return os.path.join(data_dir, f"{topic}-{partition}.r{replica_id}")


def open_partition_log(directory: str, topic_id: str, config: LogConfig) -> Log:
    """Open a replica's log, wiping data left by a deleted topic of the same name."""
    marker = os.path.join(directory, PARTITION_METADATA_FILE)
    if os.path.exists(marker):
        with open(marker) as f:
            if f.read().strip() != f"topic_id: {topic_id}":
                shutil.rmtree(directory)
    os.makedirs(directory, exist_ok=True)
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(f"topic_id: {topic_id}\n")
    return Log.open(directory, config)


class PartitionReplica:
    """One replica of one partition (made a Ray actor in :mod:`raystream.actors`).

    Invariant: only the leader accepts produce requests; consumers never see offsets at
    or above the high watermark; the high watermark never moves backwards.
    """

    def __init__(
        self,
        topic: str,
        topic_id: str,
        partition: int,
        replica_id: int,
        config: dict[str, Any],
        record_schema: pa.Schema,
        leader_epoch: int,
        broker: dict[str, Any],
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.replica_id = replica_id
        self.broker = BrokerConfig.from_kafka(broker)
        self.config = LogConfig.from_kafka(config)
        self.record_schema = record_schema
        self.directory = replica_directory(self.broker.data_dir, topic, partition, replica_id)
        self.log = open_partition_log(self.directory, topic_id, self.config)
        self.role = ROLE_LEADER
        self.leader_epoch = leader_epoch
        self.high_watermark = self.log.log_end_offset
        self._empty = record_schema.empty_table().append_column(
            "offset", pa.array([], pa.int64())
        )
        self._arrived: asyncio.Event | None = None
        self._housekeeping: asyncio.Task | None = None

    # ---------------------------------------------------------------- produce

    async def produce(
        self,
        batch: pa.RecordBatch,
        acks: int | str = 1,
        timeout_ms: int = 30_000,
        compression: str | None = None,
    ) -> ProduceResponse:
        """Append one batch as leader; answer with its base offset.

        With acks=0 or 1 the answer follows the leader's append; acks="all" waits for
        the in-sync replicas (with one replica, the leader alone).
        """
        self._start()
        try:
            if ACKS.get(acks) is None:
                raise InvalidRequestError(f"acks={acks!r} is invalid; use 0, 1, 'all' or -1")
            self._require_leader()
            if not isinstance(batch, pa.RecordBatch):
                raise InvalidRecordError(
                    f"produce takes a pyarrow RecordBatch, not {type(batch).__name__}"
                )
            if not batch.schema.equals(self.record_schema):
                raise InvalidRecordError(
                    f"batch schema does not match topic {self.topic!r}: expected "
                    f"{self.record_schema}, got {batch.schema}"
                )
            base, _ = self.log.append(
                batch, partition_leader_epoch=self.leader_epoch, compression=compression
            )
            self._advance_high_watermark(self.log.log_end_offset)
            append_time = (
                int(time.time() * 1000)
                if self.config.message_timestamp_type == "LogAppendTime"
                else -1
            )
            return ProduceResponse(
                base_offset=base,
                log_append_time=append_time,
                log_start_offset=self.log.log_start_offset,
            )
        except Exception as error:  # answered, never raised across the boundary
            return failure(error, ProduceResponse)

    def _require_leader(self) -> None:
        if self.role != ROLE_LEADER:
            raise NotLeaderError(
                f"replica {self.replica_id} of {self.topic}-{self.partition} is not the leader"
            )

    def _advance_high_watermark(self, offset: int) -> None:
        if offset > self.high_watermark:
            self.high_watermark = offset
            if self._arrived is not None:
                self._arrived.set()
                self._arrived = asyncio.Event()

    # ------------------------------------------------------------------ fetch

    async def fetch(
        self,
        offset: int,
        max_bytes: int = 1 << 20,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        isolation_level: str = "read_uncommitted",
    ) -> FetchResponse:
        """Records from ``offset`` below the high watermark, waiting for some if none.

        Long polling: when fewer than ``min_bytes`` are available the call waits up to
        ``max_wait_ms`` for new data, so a consumer at the end of the log gets a new
        record as soon as it is committed, without polling in a loop.
        """
        self._start()
        try:
            for name, value in (("offset", offset), ("max_bytes", max_bytes)):
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise InvalidRequestError(f"fetch {name}={value!r} must be an integer >= 0")
            if isolation_level not in ("read_uncommitted", "read_committed"):
                raise InvalidRequestError(
                    f"isolation_level={isolation_level!r}: use read_uncommitted or read_committed"
                )
            self._require_leader()
            deadline = time.monotonic() + max(max_wait_ms, 0) / 1000
            while True:
                if offset > self.log.log_end_offset or offset < self.log.log_start_offset:
                    raise OffsetOutOfRangeError(
                        f"offset {offset} is out of range [{self.log.log_start_offset}, "
                        f"{self.log.log_end_offset}] of {self.topic}-{self.partition}"
                    )
                table = self.log.read(offset, max_bytes=max_bytes, max_offset=self.high_watermark)
                remaining = deadline - time.monotonic()
                if table.num_rows and (table.nbytes >= min_bytes or remaining <= 0):
                    break
                if remaining <= 0:
                    break
                if self._arrived is None:
                    self._arrived = asyncio.Event()
                try:
                    await asyncio.wait_for(self._arrived.wait(), remaining)
                except asyncio.TimeoutError:
                    pass
            if not table.num_rows:
                table = self._empty
            return FetchResponse(
                records=table,
                high_watermark=self.high_watermark,
                log_start_offset=self.log.log_start_offset,
                log_end_offset=self.log.log_end_offset,
            )
        except Exception as error:
            return failure(error, FetchResponse)

    async def list_offsets(self, timestamp: int) -> ListOffsetsResponse:
        """The earliest (-2), latest (-1) or first offset at/after a timestamp (ms)."""
        self._start()
        try:
            if not isinstance(timestamp, int) or isinstance(timestamp, bool) or timestamp < -2:
                raise InvalidRequestError(
                    f"timestamp {timestamp!r} must be -2 (earliest), -1 (latest) or >= 0"
                )
            if self.role != ROLE_LEADER:
                raise LeaderNotAvailableError(f"{self.topic}-{self.partition}: not the leader")
            if timestamp == EARLIEST_TIMESTAMP:
                return ListOffsetsResponse(offset=self.log.log_start_offset)
            if timestamp == LATEST_TIMESTAMP:
                return ListOffsetsResponse(offset=self.high_watermark)
            found = self.log.offset_for_timestamp(timestamp)
            if found is None or found >= self.high_watermark:
                return ListOffsetsResponse(offset=-1, timestamp=timestamp)
            return ListOffsetsResponse(offset=found, timestamp=timestamp)
        except Exception as error:
            return failure(error, ListOffsetsResponse)

    # -------------------------------------------------------------- management

    async def state(self) -> dict[str, Any]:
        """Role, epoch and offsets, for describe and status."""
        self._start()
        return {
            "replica_id": self.replica_id,
            "role": self.role,
            "leader_epoch": self.leader_epoch,
            "log_start_offset": self.log.log_start_offset,
            "high_watermark": self.high_watermark,
            "log_end_offset": self.log.log_end_offset,
            "size_bytes": self.log.size_bytes,
            "segments": self.log.segment_count,
            "pid": os.getpid(),
        }

    async def update_config(self, config: dict[str, Any]) -> Result:
        """Apply a new topic configuration."""
        try:
            self.config = LogConfig.from_kafka(config)
            self.log.update_config(self.config)
            return Result()
        except Exception as error:
            return failure(error)

    async def run_housekeeping(self) -> Result:
        """Apply retention, compaction and the flush policy now (also done periodically)."""
        try:
            return Result(value=await asyncio.to_thread(self._housekeep))
        except Exception as error:
            return failure(error)

    def _housekeep(self) -> dict[str, int]:
        deleted = self.log.enforce_retention(max_offset=self.high_watermark)
        removed = self.log.compact().records_removed if self.config.compact else 0
        return {"segments_deleted": deleted, "records_compacted": removed}

    async def close(self) -> Result:
        """Flush and close the log cleanly (before the actor is stopped)."""
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        self.log.close()
        return Result()

    async def delete(self) -> Result:
        """Delete the replica's data (topic deletion)."""
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        self.log.delete()
        shutil.rmtree(self.directory, ignore_errors=True)
        return Result()

    async def ping(self) -> int:
        """Liveness check; returns the actor's process id."""
        self._start()
        return os.getpid()

    def _start(self) -> None:
        if self._housekeeping is None:
            self._housekeeping = asyncio.get_running_loop().create_task(self._housekeeping_loop())

    async def _housekeeping_loop(self) -> None:
        retention_every = self.broker.log_retention_check_interval_ms / 1000
        flush_every = self.broker.log_flush_scheduler_interval_ms / 1000
        next_retention = time.monotonic() + retention_every
        while True:
            await asyncio.sleep(min(flush_every, retention_every))
            try:
                self.log.maybe_flush()
                if time.monotonic() >= next_retention:
                    next_retention = time.monotonic() + retention_every
                    await asyncio.to_thread(self._housekeep)
            except Exception:  # the loop survives and logs every failure
                logger.exception("housekeeping failed for %s-%s", self.topic, self.partition)


ReplicaActor = ray.remote(PartitionReplica)
"""The replica as a Ray actor class (the one place it becomes one)."""
