"""Reading and writing the file formats of the file and data-lake connectors.

Text formats are read a chunk of whole lines at a time and parsed by Arrow's readers
(``pyarrow.csv``, ``pyarrow.json``) or cut into a string array on the chunk's own bytes;
sink batches are written by Arrow's writers (Parquet, CSV) or, for JSON lines, by the
JSON converter's encoder over whole columns, so no format loops over records in Python.
Files are written atomically: under a temporary name, fsynced, then renamed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from raystream.connectors.json_arrow import json_text
from raystream.errors import ConnectError, InvalidConfigError

FORMATS = ("lines", "jsonl", "csv", "parquet")
TEXT_FORMATS = ("lines", "jsonl", "csv")
METADATA_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp")

# --------------------------------------------------------------------------- config


def config_int(config: Mapping[str, str], key: str, default: int, minimum: int = 1) -> int:
    """``config[key]`` as an int of at least ``minimum``, or ``default`` when absent."""
    raw = config.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{key}={raw!r} is not an integer") from None
    if value < minimum:
        raise InvalidConfigError(f"{key}={value} is below its minimum {minimum}")
    return value


def config_bool(config: Mapping[str, str], key: str, default: bool) -> bool:
    """``config[key]`` as Kafka's ``true``/``false``, or ``default`` when absent."""
    raw = config.get(key)
    if raw is None or raw == "":
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise InvalidConfigError(f"{key}={raw!r} is neither true nor false")
    return text == "true"


def config_str(config: Mapping[str, str], key: str) -> str:
    """A required key's value."""
    value = config.get(key)
    if not value:
        raise InvalidConfigError(f"{key} is required")
    return str(value)


def config_format(config: Mapping[str, str], allowed: Sequence[str] = FORMATS) -> str:
    """The ``format`` key, ``lines`` by default (Kafka's file connectors' only format)."""
    fmt = str(config.get("format") or "lines").lower()
    if fmt not in allowed:
        raise InvalidConfigError(f"format={fmt!r} is not one of {', '.join(allowed)}")
    return fmt


# --------------------------------------------------------------------------- reading


@dataclass
class CsvOptions:
    """How CSV files are read and written (``csv.header``, ``csv.delimiter``)."""

    header: bool = True
    delimiter: str = ","

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> CsvOptions:
        delimiter = str(config.get("csv.delimiter") or ",")
        if len(delimiter) != 1:
            raise InvalidConfigError(f"csv.delimiter={delimiter!r} is not one character")
        return cls(header=config_bool(config, "csv.header", True), delimiter=delimiter)


def _lines_array(data: bytes, ends: np.ndarray) -> pa.Array:
    """The lines of ``data`` (each ending at an index in ``ends``, exclusive of the
    newline) as one string array, built on the bytes without copying them line by line."""
    offsets = np.empty(len(ends) + 1, dtype=np.int32)
    offsets[0] = 0
    offsets[1:] = ends + 1
    lines = pa.StringArray.from_buffers(len(ends), pa.py_buffer(offsets), pa.py_buffer(data))
    try:
        lines.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise ConnectError(f"lines are not UTF-8 text: {exc}") from None
    return pc.utf8_rtrim(lines, characters="\r\n")


def struct_values(table: pa.Table) -> pa.Table:
    """A table of columns as one struct column ``value`` (the record value of each row)."""
    return pa.table({"value": table.to_struct_array()})


def parse_text(
    data: bytes, ends: np.ndarray, fmt: str, csv: CsvOptions, names: list[str] | None
) -> pa.Table:
    """Whole lines of a text file as a source table with a ``value`` column.

    ``data`` ends with a newline and ``ends`` holds the index of each newline in it;
    ``names`` are the CSV columns (from the file's header line).
    """
    if fmt == "lines":
        return pa.table({"value": _lines_array(data, ends)})
    if fmt == "jsonl":
        options = pa_json.ReadOptions(block_size=max(len(data), 1 << 16))
        return struct_values(pa_json.read_json(pa.BufferReader(data), read_options=options))
    read_options = pa_csv.ReadOptions(
        column_names=names,
        autogenerate_column_names=names is None,
        block_size=max(len(data), 1 << 16),
    )
    parse_options = pa_csv.ParseOptions(delimiter=csv.delimiter)
    return struct_values(
        pa_csv.read_csv(
            pa.BufferReader(data), read_options=read_options, parse_options=parse_options
        )
    )


def csv_header(path: Path, csv: CsvOptions, max_bytes: int) -> tuple[list[str], int] | None:
    """The column names in ``path``'s first line and the position after it, or None
    while the line is incomplete."""
    with open(path, "rb") as handle:
        line = handle.readline(max_bytes)
    if not line.endswith(b"\n"):
        if len(line) >= max_bytes:
            raise ConnectError(f"{path}: the CSV header is longer than batch.bytes={max_bytes}")
        return None
    options = pa_csv.ParseOptions(delimiter=csv.delimiter)
    names = pa_csv.read_csv(
        pa.BufferReader(line),
        read_options=pa_csv.ReadOptions(autogenerate_column_names=True),
        parse_options=options,
    )
    return [str(value[0]) for value in names.to_pydict().values()], len(line)


def read_text(
    path: Path, position: int, max_rows: int, max_bytes: int
) -> tuple[bytes, np.ndarray] | None:
    """Up to ``max_rows`` whole lines of ``path`` from byte ``position`` within
    ``max_bytes``: the bytes (ending with a newline) and each line's newline index; None
    when no whole line is there yet."""
    with open(path, "rb") as handle:
        handle.seek(position)
        data = handle.read(max_bytes)
    if not data:
        return None
    newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    if len(newlines) == 0:
        if len(data) >= max_bytes:
            raise ConnectError(
                f"{path}: the line at byte {position} is longer than batch.bytes={max_bytes}"
            )
        return None
    newlines = newlines[:max_rows]
    return data[: int(newlines[-1]) + 1], newlines


def parquet_row_groups(path: Path) -> list[int]:
    """The first row of each row group of ``path``, and the total rows at the end."""
    metadata = pq.ParquetFile(path).metadata
    starts = [0]
    for group in range(metadata.num_row_groups):
        starts.append(starts[-1] + metadata.row_group(group).num_rows)
    return starts


# --------------------------------------------------------------------------- writing


def records_table(batch: pa.Table, include_metadata: bool) -> pa.Table:
    """The rows a sink writes for a sink batch: the value's fields as columns (or one
    ``value`` column), after the Kafka metadata columns when asked for."""
    value = batch.column("value")
    if pa.types.is_struct(value.type):
        table = pa.Table.from_struct_array(value)
    else:
        table = pa.table({"value": value})
    if not include_metadata:
        return table
    metadata = [
        batch.column("topic"),
        batch.column("partition"),
        batch.column("offset"),
        batch.column("timestamp").cast(pa.timestamp("ms")),
    ]
    for position, (name, column) in enumerate(zip(METADATA_COLUMNS, metadata, strict=True)):
        if name in table.column_names:
            raise ConnectError(
                f"the value has a field {name!r}, which include.kafka.metadata adds too"
            )
        table = table.add_column(position, name, column)
    return table


def _text_columns(table: pa.Table) -> pa.Table:
    """Binary columns as UTF-8 strings, for the text formats."""
    for i, column in enumerate(table.columns):
        if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            try:
                table = table.set_column(i, table.field(i).name, column.cast(pa.string()))
            except pa.ArrowInvalid:
                raise ConnectError(f"column {table.field(i).name!r} is not UTF-8 text") from None
    return table


def _joined_lines(values: pa.ChunkedArray) -> bytes:
    """Each value of a binary column followed by a newline, all in one bytes object:
    Arrow's data buffer is copied around the newlines' places by a numpy mask."""
    parts = []
    for chunk in values.chunks:
        if len(chunk):
            offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32)[
                chunk.offset : chunk.offset + len(chunk) + 1
            ]
            buffer = chunk.buffers()[2]
            data = np.frombuffer(buffer, dtype=np.uint8) if buffer else np.empty(0, np.uint8)
            newlines = offsets[1:] - offsets[0] + np.arange(len(chunk))
            out = np.empty(int(offsets[-1] - offsets[0]) + len(chunk), dtype=np.uint8)
            keep = np.ones(len(out), dtype=bool)
            keep[newlines] = False
            out[keep] = data[offsets[0] : offsets[-1]]
            out[newlines] = 10
            parts.append(out.tobytes())
    return b"".join(parts)


def json_lines(table: pa.Table) -> bytes:
    """The rows of ``table`` as JSON objects, one per line, encoded as Kafka's
    ``JsonConverter`` encodes values (timestamps as epoch milliseconds, bytes as base64)
    by Arrow compute over whole columns."""
    if table.num_rows == 0:
        return b""
    objects = json_text(table.to_struct_array().combine_chunks(), decimal_numeric=True)
    return _joined_lines(pa.chunked_array([objects.cast(pa.binary())]))


def encode_text(
    batch: pa.Table, fmt: str, include_metadata: bool, csv: CsvOptions, header: bool
) -> bytes:
    """A sink batch as the bytes of a text file (``lines``, ``jsonl`` or ``csv``)."""
    if (
        fmt == "lines"
        and not include_metadata
        and not pa.types.is_struct(batch.column("value").type)
    ):
        value = batch.column("value")
        if not pa.types.is_binary(value.type):
            value = value.cast(pa.string()).cast(pa.binary())
        return _joined_lines(value.fill_null(pa.scalar(b"null", pa.binary())))
    table = records_table(batch, include_metadata)
    if fmt in ("lines", "jsonl"):
        return json_lines(table)
    sink = pa.BufferOutputStream()
    try:
        options = pa_csv.WriteOptions(include_header=header, delimiter=csv.delimiter)
        pa_csv.write_csv(_text_columns(table), sink, write_options=options)
    except pa.ArrowNotImplementedError as exc:
        raise ConnectError(f"the records have a column CSV cannot hold: {exc}") from None
    return sink.getvalue().to_pybytes()


def encode_file(
    batch: pa.Table, fmt: str, include_metadata: bool, csv: CsvOptions
) -> Callable[[Any], None]:
    """A writer of a whole file of ``fmt`` holding the records of ``batch``."""
    if fmt == "parquet":
        table = records_table(batch, include_metadata)
        return lambda handle: pq.write_table(table, handle)
    data = encode_text(batch, fmt, include_metadata, csv, header=csv.header)
    return lambda handle: handle.write(data)


def fsync_directory(directory: Path) -> None:
    """Make renames in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, write: Callable[[Any], None], sync_directory: bool = True) -> None:
    """Write a file under a temporary name in its directory, fsync it, rename it into
    place: readers see the whole file or none of it, even after a crash. The rename is
    durable once the directory is fsynced: here, or by the caller after several files
    (``sync_directory=False``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    if sync_directory:
        fsync_directory(path.parent)
