"""File and directory connectors: lines, JSON lines, CSV and Parquet in and out of topics.

Kafka's ``FileStreamSource`` and ``FileStreamSink`` with Kafka's keys, grown to the
formats a data team meets, plus a directory source and a directory sink::

    {"connector.class": "FileStreamSource", "file": "/var/log/app.log", "topic": "logs"}
    {"connector.class": "DirectorySource", "directory": "/landing", "pattern": "*.csv",
     "format": "csv", "topic": "orders", "tasks.max": "2"}
    {"connector.class": "FileStreamSink", "file": "/tmp/out.jsonl", "format": "jsonl",
     "topics": "orders"}
    {"connector.class": "DirectorySink", "directory": "/export", "format": "parquet",
     "topics": "orders", "rotate.records": "100000"}

Keys (all optional but ``topic``/``topics`` and the path):

- ``format``: ``lines`` (Kafka's: one string per line, the default), ``jsonl`` (one JSON
  object per line, a struct value), ``csv`` (a header line, then one struct value per
  line; ``csv.header=false`` names the columns ``f0, f1, ...``; ``csv.delimiter``) or
  ``parquet`` (sources and the directory sink).
- Sources: ``batch.size`` (Kafka's: at most this many records per poll, default 2000),
  ``batch.bytes`` (at most this many bytes read per poll, default 1 MiB) and
  ``poll.interval.ms`` (how long an idle poll waits for new data, default 1000). A text
  record is one line: a last line without its newline waits for it (the file may still
  be growing, as Kafka's source tails a file), and CSV fields must not hold newlines.
  The directory source takes the files of ``directory`` whose path relative to it
  matches the glob ``pattern`` (default ``*``; ``**/*.csv`` descends), skipping names
  that start with ``.`` or ``_`` (temporary files, Spark's and this sink's markers), in
  name order, and sees new files as they appear. Files must appear whole (written
  elsewhere and renamed in, as this module's sinks do); its tasks share the files by a
  hash of their names.
- Sinks: ``include.kafka.metadata=true`` adds the columns ``kafka_topic``,
  ``kafka_partition``, ``kafka_offset`` and ``kafka_timestamp``. A struct value becomes
  one column per field; any other value one column named ``value``.

**Offsets.** A source's source partition is ``{"file": <absolute path>}`` and its
offset ``{"position": <bytes read>}`` for text formats or ``{"row": <rows read>}`` for
Parquet, so a restarted task resumes at the first unread record of each file.

**The directory sink** keeps what it was given per topic partition in memory and writes
it as one file when the buffer reaches ``rotate.records`` records (default 100,000;
no file holds more), ``rotate.bytes`` Arrow bytes (default 32 MiB), or when a
record's timestamp is ``rotate.interval.ms`` or more past the buffer's first (record
time, as Confluent's sinks rotate; off by default), and at every offset commit of the
framework (``pre_commit``, every ``offset.flush.interval.ms``), so a quiet topic lands
too. A file is written under a temporary name, fsynced and renamed to
``<topic>+<partition>+<first offset, 20 digits>.<ext>``; then the next offset is
written, just as atomically, to ``_connect_offsets/<topic>+<partition>.json``. On
``open`` the task deletes files its last offsets do not cover (a crash between the two
renames) and rewinds the consumer there: exactly once, whatever was killed when. So a
directory belongs to one sink connector: files of the same names that another writer
left there without offsets are taken for such leftovers.

``FileStreamSink`` appends to one file (Kafka's sink, not Parquet) and fsyncs it at each
offset commit: at least once, as in Kafka.
"""

from __future__ import annotations

import json
import os
import re
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raystream.connectors.api import (
    SinkConnector,
    SinkTask,
    SourceBatch,
    SourceConnector,
    SourceTask,
    Task,
    partition_runs,
)
from raystream.connectors.formats import (
    FORMATS,
    TEXT_FORMATS,
    CsvOptions,
    config_bool,
    config_format,
    config_int,
    config_str,
    csv_header,
    encode_file,
    encode_text,
    fsync_directory,
    parquet_row_groups,
    parse_text,
    read_text,
    struct_values,
    write_atomically,
)
from raystream.errors import ConnectError, InvalidConfigError
from raystream.types import TopicPartition

EXTENSIONS = {"lines": "txt", "jsonl": "jsonl", "csv": "csv", "parquet": "parquet"}
OFFSETS_DIR = "_connect_offsets"


@dataclass
class _ParquetCursor:
    """The row group of a Parquet file a source reads from, kept between polls."""

    path: Path
    group: int
    first_row: int
    table: pa.Table


# --------------------------------------------------------------------------- sources


def _file_key(path: Path) -> dict[str, str]:
    return {"file": str(path)}


class FileSourceTask(SourceTask):
    """Reads one file (``file``) or the matching files of a directory (``directory``,
    ``pattern``) into a topic, one :class:`SourceBatch` of one file per poll.

    Offsets are read from the framework the first time a file is seen; after that the
    task's own positions run ahead of what is committed, as in Kafka's source.
    """

    def start(self, config: dict[str, str]) -> None:
        self.topic = config_str(config, "topic")
        self.format = config_format(config)
        self.csv = CsvOptions.from_config(config)
        self.batch_size = config_int(config, "batch.size", 2000)
        self.batch_bytes = config_int(config, "batch.bytes", 1 << 20)
        if self.batch_bytes >= 1 << 31:
            raise InvalidConfigError(f"batch.bytes={self.batch_bytes} is not below 2 GiB")
        if config.get("file"):
            self.file: Path | None = Path(config["file"]).absolute()
            self.directory: Path | None = None
        else:
            self.file = None
            self.directory = Path(config_str(config, "directory")).absolute()
        self.pattern = config.get("pattern") or "*"
        self.task_index = config_int(config, "task.index", 0, minimum=0)
        self.task_count = config_int(config, "task.count", 1)
        self._offsets: dict[Path, dict[str, Any]] = {}
        self._headers: dict[Path, list[str]] = {}
        self._queue: list[Path] = []
        self._cursor: _ParquetCursor | None = None
        self._parquet_files: dict[Path, tuple[tuple[int, int], list[int]]] = {}
        self.idle_ms = config_int(config, "poll.interval.ms", 1000, minimum=0)
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._cursor = None
        self._stopping.set()

    def files(self) -> list[Path]:
        """The files this task reads now, in name order."""
        if self.file is not None:
            return [self.file] if self.file.is_file() else []
        assert self.directory is not None
        found = []
        for path in self.directory.glob(self.pattern):
            relative = path.relative_to(self.directory).parts
            if any(part.startswith((".", "_")) for part in relative) or not path.is_file():
                continue
            if zlib.crc32("/".join(relative).encode()) % self.task_count == self.task_index:
                found.append(path)
        return sorted(found)

    def poll(self) -> SourceBatch | None:
        """The next batch of the first file with unread records; None when all are read,
        after waiting ``poll.interval.ms`` (default 1000, or until ``stop``) so that an
        idle task does not spin. The next call looks at the files again, so new files
        and new lines are found."""
        if not self._queue:
            self._queue = self.files()[::-1]
        while self._queue:
            batch = self._read(self._queue[-1])
            if batch is not None:
                return batch
            self._queue.pop()
        self._stopping.wait(self.idle_ms / 1000)  # idle: as Kafka's file source, wait a bit
        return None

    def _offset(self, path: Path) -> dict[str, Any]:
        if path not in self._offsets:
            stored = (
                self.context.offset_storage_reader.offset(_file_key(path)) if self.context else None
            )
            self._offsets[path] = dict(stored or {})
        return self._offsets[path]

    def _read(self, path: Path) -> SourceBatch | None:
        try:
            if self.format == "parquet":
                return self._read_parquet(path)
            return self._read_text(path)
        except FileNotFoundError:
            return None  # removed since listed
        except (pa.ArrowInvalid, OSError) as exc:
            raise ConnectError(f"{path}: cannot read as {self.format}: {exc}") from exc

    def _read_text(self, path: Path) -> SourceBatch | None:
        offset = self._offset(path)
        position = int(offset.get("position", 0))
        names = None
        if self.format == "csv" and self.csv.header:
            names = self._headers.get(path)
            if names is None:
                header = csv_header(path, self.csv, self.batch_bytes)
                if header is None:
                    return None
                names, header_end = header
                self._headers[path] = names
                position = max(position, header_end)
        if position >= path.stat().st_size:
            return None
        chunk = read_text(path, position, self.batch_size, self.batch_bytes)
        if chunk is None:
            return None
        data, newlines = chunk
        table = parse_text(data, newlines, self.format, self.csv, names)
        reached = {"position": position + len(data)}
        self._offsets[path] = reached
        return SourceBatch(_file_key(path), reached, self.topic, table)

    def _row_groups(self, path: Path) -> list[int]:
        """:func:`parquet_row_groups` of ``path``, read again only when the file changed
        (an idle poll then costs one ``stat`` per file)."""
        status = path.stat()
        version = (status.st_size, status.st_mtime_ns)
        known = self._parquet_files.get(path)
        if known is None or known[0] != version:
            known = self._parquet_files[path] = (version, parquet_row_groups(path))
        return known[1]

    def _read_parquet(self, path: Path) -> SourceBatch | None:
        offset = self._offset(path)
        row = int(offset.get("row", 0))
        cursor = self._cursor
        if (
            cursor is None
            or cursor.path != path
            or not cursor.first_row <= row < cursor.first_row + cursor.table.num_rows
        ):
            starts = self._row_groups(path)
            if row >= starts[-1]:
                return None
            group = int(np.searchsorted(starts, row, side="right")) - 1
            table = pq.ParquetFile(path).read_row_group(group)
            cursor = self._cursor = _ParquetCursor(path, group, starts[group], table)
        rows = cursor.table.slice(row - cursor.first_row, self.batch_size)
        reached = {"row": row + rows.num_rows}
        self._offsets[path] = reached
        return SourceBatch(_file_key(path), reached, self.topic, struct_values(rows))


class FileStreamSourceConnector(SourceConnector):
    """Kafka's ``FileStreamSource``: one file (``file``) into ``topic``, one task."""

    def validate(self, config: Mapping[str, str]) -> None:
        config_str(config, "file")
        config_str(config, "topic")
        config_format(config)

    def task_class(self) -> type[Task]:
        return FileSourceTask


class DirectorySourceConnector(SourceConnector):
    """The files of ``directory`` matching ``pattern`` into ``topic``; up to ``tasks.max``
    tasks share the files by a hash of their names, so new files need no rebalance."""

    def validate(self, config: Mapping[str, str]) -> None:
        config_str(config, "directory")
        config_str(config, "topic")
        config_format(config)

    def task_class(self) -> type[Task]:
        return FileSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        count = max(1, max_tasks)
        return [
            {**self.config, "task.index": str(i), "task.count": str(count)} for i in range(count)
        ]


# --------------------------------------------------------------------------- sinks


def split_partitions(batch: pa.Table) -> Iterator[tuple[TopicPartition, pa.Table]]:
    """The rows of each topic partition of a sink batch, in batch order.

    A batch usually holds each partition in one run (:func:`partition_runs`), and then
    each is a zero-copy slice of the batch; a partition in several runs (rows
    interleaved by a routing transform) is the concatenation of its runs' slices.
    """
    runs: dict[TopicPartition, list[pa.Table]] = {}
    for tp, start, stop in partition_runs(batch):
        runs.setdefault(tp, []).append(
            batch if stop - start == batch.num_rows else batch.slice(start, stop - start)
        )
    for tp, parts in runs.items():
        yield tp, parts[0] if len(parts) == 1 else pa.concat_tables(parts)


@dataclass
class PartitionBuffer:
    """What a sink holds of one topic partition, not yet written."""

    tables: list[pa.Table] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0
    first_timestamp: int | None = None

    def add(self, table: pa.Table) -> None:
        if self.first_timestamp is None and table.num_rows:
            self.first_timestamp = table.column("timestamp")[0].as_py()
        self.tables.append(table)
        self.rows += table.num_rows
        self.nbytes += table.nbytes

    def table(self) -> pa.Table:
        return pa.concat_tables(self.tables, promote_options="permissive")

    def next_offset(self) -> int:
        return int(self.tables[-1].column("offset")[-1].as_py()) + 1


@dataclass(frozen=True)
class Rotation:
    """When a buffered sink writes (``rotate.records``, ``rotate.bytes``,
    ``rotate.interval.ms``; the module docstring)."""

    records: int = 100_000
    nbytes: int = 32 << 20
    interval_ms: int | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> Rotation:
        interval = config_int(config, "rotate.interval.ms", -1, minimum=-1)
        return cls(
            records=config_int(config, "rotate.records", cls.records),
            nbytes=config_int(config, "rotate.bytes", cls.nbytes),
            interval_ms=interval if interval > 0 else None,
        )

    def cut(self, buffer: PartitionBuffer, rows: pa.Table) -> int | None:
        """How many of ``rows`` go into ``buffer`` before it must be written, or None
        when all of them fit."""
        cut = self.records - buffer.rows if buffer.rows + rows.num_rows >= self.records else None
        start = (
            buffer.first_timestamp
            if buffer.first_timestamp is not None
            else rows.column("timestamp")[0].as_py()
        )
        if self.interval_ms is not None and start is not None:
            timestamps = rows.column("timestamp").fill_null(start).to_numpy()
            late = np.flatnonzero(timestamps >= start + self.interval_ms)
            if len(late) and (cut is None or late[0] < cut):
                cut = int(late[0])
        return cut


class BufferedSinkTask(SinkTask):
    """A sink that stores its offsets with its data: buffers per topic partition, writes
    by :class:`Rotation` and at every offset commit, and rewinds in ``open`` to the
    offsets stored with the data (exactly once).

    Subclasses say how data and offsets are stored (``write``) and read back
    (``stored_offsets``). Writes run on one writer thread, in order, while the task is
    handed the next records (encoding, fsync and rename release the GIL): at most
    ``WRITES_IN_FLIGHT`` wait there, so memory stays bounded, and a write's error is
    raised by the next call. ``pre_commit`` waits for them and returns only offsets
    stored with the data, so the consumer group shows the sink's true progress and a
    commit never runs ahead of it.
    """

    WRITES_IN_FLIGHT = 2

    def start(self, config: dict[str, str]) -> None:
        self.config = dict(config)
        self.rotation = Rotation.from_config(config)
        self.include_metadata = config_bool(config, "include.kafka.metadata", False)
        self.buffers: dict[TopicPartition, PartitionBuffer] = {}
        self.stored: dict[TopicPartition, int] = {}
        self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="connect-sink-write")
        self.in_flight: deque[Future[dict[TopicPartition, int]]] = deque()

    def stop(self) -> None:
        self.buffers.clear()
        self.writer.shutdown(wait=True)

    def write(self, buffers: Mapping[TopicPartition, PartitionBuffer]) -> None:
        """Store these buffers and their next offsets, durably and together (on the
        writer thread)."""
        raise NotImplementedError

    def stored_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The next offsets stored with the data for ``partitions``, after removing data
        written beyond them."""
        raise NotImplementedError

    def open(self, partitions: Sequence[TopicPartition]) -> None:
        self._wait(0)
        stored = self.stored_offsets(partitions)
        self.stored.update(stored)
        for tp in partitions:
            self.buffers.pop(tp, None)
        if stored and self.context is not None:
            self.context.offset(stored)

    def close(self, partitions: Sequence[TopicPartition]) -> None:
        self._wait(0)
        for tp in partitions:
            self.buffers.pop(tp, None)
            self.stored.pop(tp, None)

    def put_batch(self, batch: pa.Table) -> None:
        for tp, rows in split_partitions(batch):
            buffer = self.buffers.setdefault(tp, PartitionBuffer())
            while rows.num_rows:
                cut = self.rotation.cut(buffer, rows)
                if cut is None:
                    buffer.add(rows)
                    if buffer.nbytes >= self.rotation.nbytes:
                        self._write([tp])
                    break
                if cut:
                    buffer.add(rows if cut == rows.num_rows else rows.slice(0, cut))
                self._write([tp])
                buffer = self.buffers.setdefault(tp, PartitionBuffer())
                rows = rows.slice(cut)

    def flush(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._write(list(self.buffers))
        self._wait(0)

    def pre_commit(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int]:
        self.flush(offsets)
        return {tp: offset for tp, offset in self.stored.items() if tp in offsets}

    def _write(self, partitions: Sequence[TopicPartition]) -> None:
        """Hand the buffers of ``partitions`` to the writer thread."""
        full = {
            tp: self.buffers.pop(tp)
            for tp in partitions
            if tp in self.buffers and self.buffers[tp].rows
        }
        for tp in partitions:
            self.buffers.pop(tp, None)
        if full:
            self.in_flight.append(self.writer.submit(self._store, full))
            self._wait(self.WRITES_IN_FLIGHT)

    def _store(
        self, buffers: Mapping[TopicPartition, PartitionBuffer]
    ) -> dict[TopicPartition, int]:
        self.write(buffers)
        return {tp: buffer.next_offset() for tp, buffer in buffers.items()}

    def _wait(self, most: int) -> None:
        """Wait until at most ``most`` writes are in flight, raising the first error."""
        while len(self.in_flight) > most:
            self.stored.update(self.in_flight.popleft().result())


def data_file_name(tp: TopicPartition, first_offset: int, fmt: str) -> str:
    """``<topic>+<partition>+<first offset, 20 digits>.<ext>``: names sort by offset."""
    return f"{tp.topic}+{tp.partition}+{first_offset:020d}.{EXTENSIONS[fmt]}"


_DATA_FILE = re.compile(
    r"^\.?(?P<topic>.+)\+(?P<partition>\d+)\+(?P<first>\d{20})\.[a-z]+(\.tmp)?$"
)


def parse_data_file_name(name: str) -> tuple[TopicPartition, int] | None:
    """The topic partition and first offset a data file's name (or its temporary
    name) holds, None for other files."""
    match = _DATA_FILE.match(name)
    if match is None:
        return None
    return TopicPartition(match["topic"], int(match["partition"])), int(match["first"])


class DirectorySinkTask(BufferedSinkTask):
    """Writes each topic partition's records as rotated files in ``directory`` (the
    module docstring: names, offsets, exactly once). ``partition_dirs`` places rows in
    subdirectories; here all go to the directory itself."""

    formats: tuple[str, ...] = FORMATS

    def start(self, config: dict[str, str]) -> None:
        super().start(config)
        self.directory = Path(config_str(config, "directory")).absolute()
        self.format = config_format(config, self.formats)
        self.csv = CsvOptions.from_config(config)
        self.directory.mkdir(parents=True, exist_ok=True)

    def partition_dirs(self, batch: pa.Table) -> list[tuple[str, pa.Table]]:
        """The rows of a sink batch per relative directory ("" for the top)."""
        return [("", batch)]

    def file_writer(self, rows: pa.Table) -> Callable[[Any], None]:
        """A writer of one data file holding the records of a sink batch."""
        return encode_file(rows, self.format, self.include_metadata, self.csv)

    def offsets_path(self, tp: TopicPartition) -> Path:
        return self.directory / OFFSETS_DIR / f"{tp.topic}+{tp.partition}.json"

    def write(self, buffers: Mapping[TopicPartition, PartitionBuffer]) -> None:
        for tp, buffer in buffers.items():
            batch = buffer.table()
            name = data_file_name(tp, int(batch.column("offset")[0].as_py()), self.format)
            dirs = self.partition_dirs(batch)
            paths = [self.directory / relative / name for relative, _ in dirs]
            for path, (_, rows) in zip(paths, dirs, strict=True):
                write_atomically(path, self.file_writer(rows), sync_directory=False)
            for directory in {path.parent for path in paths}:
                fsync_directory(directory)  # the data's renames are durable before the offsets
            state = json.dumps(
                {"topic": tp.topic, "partition": tp.partition, "next_offset": buffer.next_offset()}
            )
            # No directory fsync for the offsets: should their rename be lost in a crash,
            # open() finds the older offsets, deletes the newer files and rewinds: replayed,
            # not lost.
            write_atomically(
                self.offsets_path(tp),
                lambda handle, text=state: handle.write(text.encode()),
                sync_directory=False,
            )

    def stored_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        stored = {}
        for tp in partitions:
            path = self.offsets_path(tp)
            if path.exists():
                stored[tp] = int(json.loads(path.read_text())["next_offset"])
        wanted = set(partitions)
        for path in self.directory.rglob("*"):
            parsed = parse_data_file_name(path.name)
            if parsed is None or parsed[0] not in wanted or OFFSETS_DIR in path.parts:
                continue
            tp, first = parsed
            if path.name.startswith(".") or first >= stored.get(tp, 0):
                path.unlink()  # a temporary file, or written after the last stored offsets
        return stored


class FileStreamSinkTask(SinkTask):
    """Kafka's ``FileStreamSink`` task: appends records to ``file`` (``lines``, ``jsonl``
    or ``csv``) and fsyncs at every flush (at least once)."""

    def start(self, config: dict[str, str]) -> None:
        self.path = Path(config_str(config, "file")).absolute()
        self.format = config_format(config, TEXT_FORMATS)
        self.csv = CsvOptions.from_config(config)
        self.include_metadata = config_bool(config, "include.kafka.metadata", False)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(self.path, "ab")  # noqa: SIM115 - kept open until stop
        self.needs_header = self.format == "csv" and self.csv.header and self.handle.tell() == 0

    def put_batch(self, batch: pa.Table) -> None:
        if batch.num_rows == 0:
            return
        self.handle.write(
            encode_text(batch, self.format, self.include_metadata, self.csv, self.needs_header)
        )
        self.needs_header = False

    def flush(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.handle.flush()
        os.fsync(self.handle.fileno())

    def stop(self) -> None:
        if not self.handle.closed:
            self.handle.close()


class FileStreamSinkConnector(SinkConnector):
    """Kafka's ``FileStreamSink``: ``topics`` appended to one ``file``; one task."""

    def validate(self, config: Mapping[str, str]) -> None:
        config_str(config, "file")
        config_format(config, TEXT_FORMATS)

    def task_class(self) -> type[Task]:
        return FileStreamSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """One task whatever ``tasks.max``: two would interleave lines in one file."""
        return [dict(self.config)]


class DirectorySinkConnector(SinkConnector):
    """``topics`` into rotated files in ``directory``, exactly once; ``tasks.max`` tasks
    share the topic partitions."""

    def validate(self, config: Mapping[str, str]) -> None:
        config_str(config, "directory")
        config_format(config)
        Rotation.from_config(config)

    def exactly_once_support(self, config: Mapping[str, str]) -> bool:
        return True  # offsets written beside the files (see the module doc)

    def task_class(self) -> type[Task]:
        return DirectorySinkTask
