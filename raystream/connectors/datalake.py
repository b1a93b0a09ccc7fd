"""The data-lake sink: topics into partitioned Parquet directories or an Iceberg table, once.

``table.format=parquet`` (the default) writes Parquet files into Hive-style directories
under ``directory``, as Hive, Spark and ``pyarrow.dataset`` read them::

    {"connector.class": "DataLakeSink", "topics": "orders", "directory": "/lake/orders",
     "partitioner": "field", "partition.field.name": "country,city"}
    # /lake/orders/country=FR/city=Paris/orders+0+00000000000000000000.parquet

- ``partitioner``: ``none`` (all files in ``directory``), ``field`` (by the value fields
  in ``partition.field.name``, Confluent's FieldPartitioner: the directories say the
  value, so the files leave those columns out, as Hive and Spark write them; a null is
  ``__HIVE_DEFAULT_PARTITION__``) or ``time`` (by ``path.format``, a strftime pattern,
  default ``year=%Y/month=%m/day=%d/hour=%H``, in UTC, of the record timestamp or of the
  value field ``timestamp.field``).
- Files are written and offsets stored as the directory sink of
  :mod:`raystream.connectors.file` does (``rotate.*``, names, ``_connect_offsets``): a
  commit writes each topic partition's rows as one file per directory they fall in,
  renames them into place, then stores the next offset; ``open`` deletes files the
  stored offsets do not cover and rewinds there.

``table.format=iceberg`` appends to an Apache Iceberg table through pyiceberg, with the
keys of Iceberg's own Kafka Connect sink::

    {"connector.class": "DataLakeSink", "topics": "orders", "table.format": "iceberg",
     "iceberg.tables": "lake.orders", "iceberg.catalog.type": "sql",
     "iceberg.catalog.uri": "sqlite:////lake/catalog.db",
     "iceberg.catalog.warehouse": "file:///lake/warehouse"}

- ``iceberg.catalog`` names the catalog (default ``raystream``) and every
  ``iceberg.catalog.<property>`` is passed to ``pyiceberg.catalog.load_catalog`` (type
  ``sql`` unless given: a SQL catalog in SQLite or PostgreSQL).
- ``iceberg.tables.auto-create-enabled`` (default true) creates the table and its
  namespace from the first records' schema, partitioned by
  ``iceberg.tables.default-partition-by`` (comma-separated columns; identity
  partitions, and ``day(ts)``-style transforms where pyiceberg-core is installed);
  ``iceberg.tables.evolve-schema-enabled`` (default false) adds new value fields as
  columns, otherwise a record with an unknown field fails the task.
- Exactly once: each commit is one Iceberg snapshot holding the new data files and,
  in its summary property ``raystream.connectors.offsets.<connector name>``, the next
  offset of each topic partition it wrote (JSON ``{topic: {partition: offset}}``), so
  data and offsets commit atomically; ``open`` takes each partition's offset from the
  newest snapshot that has it and rewinds there. Concurrent commits (several tasks)
  retry on Iceberg's optimistic-concurrency conflict. Should snapshot expiry remove a
  partition's last commit, the task falls back to the consumer group's offset, which
  ``pre_commit`` keeps at the stored one.

Reading back: ``table.scan().to_arrow()`` in pyiceberg, and Spark through
:func:`read_iceberg` (Spark here has no Iceberg runtime jar: it reads the table's
current data files as Parquet).
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raystream.connectors.api import SinkConnector, SinkTask, Task
from raystream.connectors.file import BufferedSinkTask, DirectorySinkTask, PartitionBuffer, Rotation
from raystream.connectors.formats import config_bool, config_str, records_table
from raystream.errors import ConnectError, InvalidConfigError
from raystream.types import TopicPartition

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
DEFAULT_PATH_FORMAT = "year=%Y/month=%m/day=%d/hour=%H"
PARTITIONERS = ("none", "field", "time")
TABLE_FORMATS = ("parquet", "iceberg")
COMMIT_ATTEMPTS = 5
#: Characters Hive escapes in a partition value (as %XX), so a value never makes a path.
_HIVE_UNSAFE = frozenset("\"#%'*/:=?\\\x7f{[]^")


def hive_escape(value: str) -> str:
    """A partition value as Hive writes it in a directory name (``a/b`` -> ``a%2Fb``)."""
    return "".join(
        f"%{ord(char):02X}" if char in _HIVE_UNSAFE or ord(char) < 32 else char for char in value
    )


def _escaped(column: pa.ChunkedArray) -> pa.Array:
    """A column's values as escaped Hive partition values; escaping runs once per
    distinct value, not per row."""
    encoded = column.cast(pa.string()).combine_chunks().dictionary_encode()
    escaped = pa.array(
        [hive_escape(value) for value in encoded.dictionary.to_pylist()], pa.string()
    )
    return pc.if_else(encoded.indices.is_null(), HIVE_NULL, pc.take(escaped, encoded.indices))


def field_dirs(records: pa.Table, fields: Sequence[str]) -> pa.Array:
    """Each row's directory ``f1=v1/f2=v2`` for the partition ``fields``."""
    missing = [name for name in fields if name not in records.column_names]
    if missing:
        raise ConnectError(f"partition.field.name: the records have no field {missing}")
    parts = [
        pc.binary_join_element_wise(name, _escaped(records.column(name)), "=") for name in fields
    ]
    return pc.binary_join_element_wise(*parts, "/") if len(parts) > 1 else parts[0]


def time_dirs(timestamps: pa.ChunkedArray | pa.Array, path_format: str) -> pa.Array:
    """Each row's directory: its timestamp (ms since the epoch, or a timestamp) in UTC
    through the strftime ``path_format``."""
    if not pa.types.is_timestamp(timestamps.type):
        timestamps = timestamps.cast(pa.int64()).cast(pa.timestamp("ms"))
    if timestamps.null_count:
        raise ConnectError("time partitioning: a record has no timestamp")
    return pc.strftime(timestamps.cast(pa.timestamp("ms", "UTC")), format=path_format)


def split_by(batch: pa.Table, dirs: pa.Array | pa.ChunkedArray) -> list[tuple[str, pa.Table]]:
    """The rows of ``batch`` grouped by their directory (one stable sort, then slices;
    rows keep their order within a directory)."""
    if isinstance(dirs, pa.ChunkedArray):
        dirs = dirs.combine_chunks()
    encoded = dirs.dictionary_encode()
    names = encoded.dictionary.to_pylist()
    if len(names) == 1:
        return [(names[0], batch)]
    indices = encoded.indices.to_numpy()
    grouped = batch.take(np.argsort(indices, kind="stable"))
    ends = np.cumsum(np.bincount(indices, minlength=len(names)))
    return [
        (name, grouped.slice(int(end - count), int(count)))
        for name, end, count in zip(names, ends, np.diff(ends, prepend=0), strict=True)
    ]


class ParquetLakeSinkTask(DirectorySinkTask):
    """Parquet files in Hive-style partition directories, exactly once (the module
    docstring)."""

    formats = ("parquet",)

    def start(self, config: dict[str, str]) -> None:
        super().start({**config, "format": "parquet"})
        self.partitioner = str(config.get("partitioner") or "none").lower()
        if self.partitioner not in PARTITIONERS:
            raise InvalidConfigError(
                f"partitioner={self.partitioner!r} is not one of {', '.join(PARTITIONERS)}"
            )
        self.fields = [
            name.strip() for name in str(config.get("partition.field.name") or "").split(",")
        ]
        self.fields = [name for name in self.fields if name]
        if self.partitioner == "field" and not self.fields:
            raise InvalidConfigError("partition.field.name is required by partitioner=field")
        self.path_format = str(config.get("path.format") or DEFAULT_PATH_FORMAT)
        self.timestamp_field = config.get("timestamp.field") or None

    def partition_dirs(self, batch: pa.Table) -> list[tuple[str, pa.Table]]:
        if self.partitioner == "none":
            return [("", batch)]
        if self.partitioner == "time":
            if self.timestamp_field:
                values = records_table(batch, False)
                if self.timestamp_field not in values.column_names:
                    raise ConnectError(f"timestamp.field: no field {self.timestamp_field!r}")
                timestamps = values.column(self.timestamp_field)
            else:
                timestamps = batch.column("timestamp")
            return split_by(batch, time_dirs(timestamps, self.path_format))
        return split_by(batch, field_dirs(records_table(batch, False), self.fields))

    def file_writer(self, rows: pa.Table) -> Callable[[Any], None]:
        """A Parquet file of the value's fields but the partition fields (the directory
        names hold those)."""
        records = records_table(rows, self.include_metadata)
        if self.partitioner == "field":
            records = records.drop_columns(self.fields)
        return lambda handle: pq.write_table(records, handle)


# --------------------------------------------------------------------------- Iceberg


def catalog_properties(config: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The catalog name and the properties for ``load_catalog`` from the
    ``iceberg.catalog.*`` keys."""
    prefix = "iceberg.catalog."
    properties = {
        key[len(prefix) :]: str(value) for key, value in config.items() if key.startswith(prefix)
    }
    properties.setdefault("type", "sql")
    return str(config.get("iceberg.catalog") or "raystream"), properties


def load_table(config: Mapping[str, str]) -> Any:
    """The Iceberg table a data-lake sink config names (pyiceberg ``Table``), e.g. to read
    it back; raises ConnectError when it does not exist."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError

    name, properties = catalog_properties(config)
    identifier = config_str(config, "iceberg.tables")
    try:
        return load_catalog(name, **properties).load_table(identifier)
    except NoSuchTableError:
        raise ConnectError(f"no Iceberg table {identifier!r} in catalog {name!r}") from None


def iceberg_schema(schema: pa.Schema) -> pa.Schema:
    """An Arrow schema Iceberg can hold: timestamps in microseconds (Iceberg's unit)."""
    fields = []
    for schema_field in schema:
        kind = schema_field.type
        if pa.types.is_timestamp(kind) and kind.unit != "us":
            kind = pa.timestamp("us", kind.tz)
        fields.append(schema_field.with_type(kind))
    return pa.schema(fields)


def conform(records: pa.Table, target: pa.Schema) -> pa.Table:
    """``records`` in the table's schema: columns cast, missing ones null."""
    columns = []
    for target_field in target:
        if target_field.name in records.column_names:
            try:
                columns.append(
                    records.column(target_field.name).cast(target_field.type, safe=False)
                )
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise ConnectError(
                    f"field {target_field.name!r} cannot become the table's "
                    f"{target_field.type}: {exc}"
                ) from None
        else:
            columns.append(pa.nulls(records.num_rows, target_field.type))
    return pa.Table.from_arrays(columns, schema=target)


_TRANSFORM = re.compile(r"^\s*(\w+)\s*\(\s*(\w+)\s*\)\s*$")


def partition_spec(specs: Sequence[str]) -> list[tuple[str, Any, str]]:
    """``iceberg.tables.default-partition-by`` as (source column, transform, name)."""
    from pyiceberg.transforms import (
        DayTransform,
        HourTransform,
        IdentityTransform,
        MonthTransform,
        YearTransform,
    )

    transforms = {
        "year": YearTransform,
        "month": MonthTransform,
        "day": DayTransform,
        "hour": HourTransform,
    }
    fields = []
    for spec in specs:
        match = _TRANSFORM.match(spec)
        if match is None:
            fields.append((spec, IdentityTransform(), spec))
            continue
        function, column = match.groups()
        if function not in transforms:
            raise InvalidConfigError(
                f"iceberg.tables.default-partition-by: unknown transform {function!r}"
            )
        if importlib.util.find_spec("pyiceberg_core") is None:
            raise InvalidConfigError(
                f"iceberg.tables.default-partition-by={spec!r}: pyiceberg writes time "
                "transforms only with pyiceberg-core installed; partition by a column"
            )
        fields.append((column, transforms[function](), f"{column}_{function}"))
    return fields


class IcebergSinkTask(BufferedSinkTask):
    """Appends to an Iceberg table, data and offsets in one snapshot (the module docstring)."""

    def start(self, config: dict[str, str]) -> None:
        super().start(config)
        from pyiceberg.catalog import load_catalog

        self.identifier = config_str(config, "iceberg.tables")
        if "," in self.identifier:
            raise InvalidConfigError(
                f"iceberg.tables={self.identifier!r}: one table per data-lake sink"
            )
        name, properties = catalog_properties(config)
        self.catalog = load_catalog(name, **properties)
        self.auto_create = config_bool(config, "iceberg.tables.auto-create-enabled", True)
        self.evolve = config_bool(config, "iceberg.tables.evolve-schema-enabled", False)
        by = str(config.get("iceberg.tables.default-partition-by") or "")
        self.partition_by = partition_spec([spec.strip() for spec in by.split(",") if spec.strip()])
        self.offsets_property = f"raystream.connectors.offsets.{config.get('name') or 'connect'}"
        self.table: Any = None

    def _load(self) -> Any:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            self.table = self.catalog.load_table(self.identifier)
        except NoSuchTableError:
            self.table = None
        return self.table

    def _create(self, schema: pa.Schema) -> Any:
        namespace = self.identifier.rsplit(".", 1)[0] if "." in self.identifier else None
        if namespace:
            self.catalog.create_namespace_if_not_exists(namespace)
        table = self.catalog.create_table_if_not_exists(self.identifier, schema=schema)
        if self.partition_by and table.spec().is_unpartitioned():
            with table.update_spec() as update:
                for column, transform, name in self.partition_by:
                    update.add_field(column, transform, name)
        return self._load()

    def stored_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's offset in the newest snapshot that committed it (the snapshots
        from the current one back to the first; each holds the offsets of its own commit)."""
        from pyiceberg.table.snapshots import ancestors_of

        table = self._load()
        if table is None or table.current_snapshot() is None:
            return {}
        wanted, found = set(partitions), {}
        for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
            stored = snapshot.summary.additional_properties.get(self.offsets_property)
            for topic, offsets in json.loads(stored).items() if stored else ():
                for partition, offset in offsets.items():
                    tp = TopicPartition(topic, int(partition))
                    if tp in wanted:
                        found.setdefault(tp, int(offset))
            if len(found) == len(wanted):
                break
        return found

    def write(self, buffers: Mapping[TopicPartition, PartitionBuffer]) -> None:
        from pyiceberg.exceptions import CommitFailedException

        records = pa.concat_tables(
            [records_table(buffer.table(), self.include_metadata) for buffer in buffers.values()],
            promote_options="permissive",
        )
        records = records.cast(iceberg_schema(records.schema))
        ours: dict[str, dict[str, int]] = {}
        for tp, buffer in buffers.items():
            ours.setdefault(tp.topic, {})[str(tp.partition)] = buffer.next_offset()
        # Only this commit's offsets: they stay right when pyiceberg (or the loop here)
        # retries the append on a snapshot another task committed meanwhile.
        properties = {self.offsets_property: json.dumps(ours, sort_keys=True)}
        for _ in range(COMMIT_ATTEMPTS):
            table = self._load()
            if table is None:
                if not self.auto_create:
                    raise ConnectError(
                        f"no Iceberg table {self.identifier!r} and "
                        "iceberg.tables.auto-create-enabled=false"
                    )
                table = self._create(records.schema)
            table = self._evolve(table, records.schema)
            try:
                table.append(
                    conform(records, table.schema().as_arrow()), snapshot_properties=properties
                )
                return
            except CommitFailedException:
                continue  # concurrent writers won pyiceberg's own retries too: reload, again
        raise ConnectError(
            f"Iceberg table {self.identifier!r}: {COMMIT_ATTEMPTS} commits in a row lost "
            "to concurrent writers"
        )

    def _evolve(self, table: Any, schema: pa.Schema) -> Any:
        known = set(table.schema().as_arrow().names)
        new = [name for name in schema.names if name not in known]
        if not new:
            return table
        if not self.evolve:
            raise ConnectError(
                f"Iceberg table {self.identifier!r} has no column {new}; set "
                "iceberg.tables.evolve-schema-enabled=true to add value fields as columns"
            )
        with table.update_schema() as update:
            update.union_by_name(schema)
        return self._load()


def read_iceberg(spark: Any, table: Any) -> Any:
    """A Spark DataFrame of an Iceberg table's current rows, without Iceberg's Spark
    runtime: the data files of the current snapshot (pyiceberg's ``plan_files``) read
    as Parquet. Right for tables only appended to, as this sink makes them; a table with
    delete files raises ConnectError rather than returning deleted rows."""
    tasks = list(table.scan().plan_files())
    if any(task.delete_files for task in tasks):
        raise ConnectError(
            f"Iceberg table {table.name()} has delete files, which Spark cannot apply "
            "without the Iceberg runtime"
        )
    if not tasks:
        from pyspark.sql.pandas.types import from_arrow_schema

        return spark.createDataFrame([], from_arrow_schema(table.schema().as_arrow()))
    return spark.read.option("mergeSchema", "true").parquet(
        *[task.file.file_path for task in tasks]
    )


class DataLakeSinkTask(SinkTask):
    """The data-lake sink's task: a :class:`ParquetLakeSinkTask` or an
    :class:`IcebergSinkTask` by ``table.format``, chosen at ``start`` (workers ask a
    connector for its task class before giving it a config)."""

    def start(self, config: dict[str, str]) -> None:
        kind = IcebergSinkTask if table_format(config) == "iceberg" else ParquetLakeSinkTask
        self.inner: BufferedSinkTask = kind()
        self.inner.context = self.context
        self.inner.start(config)

    def stop(self) -> None:
        self.inner.stop()

    def open(self, partitions: Sequence[TopicPartition]) -> None:
        self.inner.open(partitions)

    def close(self, partitions: Sequence[TopicPartition]) -> None:
        self.inner.close(partitions)

    def put_batch(self, batch: pa.Table) -> None:
        self.inner.put_batch(batch)

    def flush(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.inner.flush(offsets)

    def pre_commit(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int]:
        return self.inner.pre_commit(offsets)


def table_format(config: Mapping[str, str]) -> str:
    """The ``table.format`` key: ``parquet`` (the default) or ``iceberg``."""
    value = str(config.get("table.format") or "parquet").lower()
    if value not in TABLE_FORMATS:
        raise InvalidConfigError(f"table.format={value!r} is not one of {', '.join(TABLE_FORMATS)}")
    return value


class DataLakeSinkConnector(SinkConnector):
    """Topics into a data lake, exactly once: partitioned Parquet directories
    (``table.format=parquet``) or an Iceberg table (``table.format=iceberg``)."""

    def validate(self, config: Mapping[str, str]) -> None:
        Rotation.from_config(config)
        if table_format(config) == "parquet":
            config_str(config, "directory")
        else:
            config_str(config, "iceberg.tables")

    def exactly_once_support(self, config: Mapping[str, str]) -> bool:
        return True  # offsets beside the files, or in the Iceberg snapshot's properties

    def task_class(self) -> type[Task]:
        return DataLakeSinkTask
