"""PostgreSQL connectors: a source (Kafka's JDBC source modes and change data capture)
and a sink (insert or upsert, exactly once through offsets stored with the data).

**PostgresSource** reads tables into topics, as Kafka Connect's JDBC source does. Each
table in ``table.whitelist`` (or the ``query``) is a source partition
(``{"table": name}`` or ``{"query": sql}``) whose offset says how far it was read:

- ``mode=incrementing``: new rows by a strictly increasing column
  (``incrementing.column.name``): ``WHERE id > last ORDER BY id``; offset
  ``{"incrementing": last}``. Sees inserts only.
- ``mode=timestamp``: rows whose ``timestamp.column.name`` (several columns: the first
  non-null) passed the last one seen, up to the database's ``now()`` less
  ``timestamp.delay.interval.ms``; offset ``{"timestamp": ms, "timestamp_nanos": ns}``
  (Kafka's shape). Sees inserts and updates that set the column; a batch never ends
  inside a run of equal timestamps, so none of them is skipped.
- ``mode=timestamp+incrementing``: both, ordered by (timestamp, id): the robust mode.
- ``mode=cdc``: change data capture from logical replication. A publication
  (``publication.name``; of the whitelisted tables, else all tables) and a logical
  slot (``slot.name``, plugin ``pgoutput``) are created when missing; changes are
  read through the SQL functions ``pg_logical_slot_peek_binary_changes`` (psycopg 3
  has no replication protocol) and the slot is advanced only in ``commit()``, to the
  offset the framework stored, so nothing is lost when a task dies in between.
  Records: key = the row's replica identity (its primary key) as a struct, value = the
  row after the change, a ``__op`` header ``c``/``u``/``d``, the commit time as the
  record timestamp. **Deletes are tombstones** (value null, key set), as a compacted
  topic and Kafka's JDBC sink (``delete.enabled``) understand them; an update that
  changes the key is a tombstone of the old key and then the new row. Offsets are
  LSNs: ``{"lsn": L}`` (every transaction ending at or before L was written), plus
  ``"txn_lsn"``/``"txn_events"`` while a transaction larger than a batch is half
  written. Rows that existed before the slot are not read (use an incrementing mode
  for a backfill); unchanged TOAST values of an update are null unless the table has
  ``REPLICA IDENTITY FULL``.

Topics are ``topic.prefix`` + table name (the prefix alone for a ``query``). Each poll
returns one :class:`SourceBatch` of at most ``batch.max.rows`` rows of one table,
whose ``value`` is a struct of the row's columns, typed from the table's column types.

**PostgresSink** writes the records of a topic into the table ``table.name.format``
(``${topic}`` replaced): ``insert.mode`` ``insert`` (COPY) or ``upsert`` / ``update`` by
the key ``pk.mode`` = ``none`` | ``kafka`` | ``record_key`` | ``record_value`` with
``pk.fields``; ``auto.create`` makes the table from the records' Arrow schema and
``auto.evolve`` adds missing columns; ``delete.enabled`` turns tombstones into deletes
(without it a tombstone fails the batch, as in Kafka: filter them out to ignore them).
Each batch is written in ONE database transaction together with the next offsets of
its partitions in the table ``offsets.table.name`` (``raystream_connect_offsets``), so a
task killed at any moment leaves the data and its offsets agreeing: ``open`` rewinds
the consumer to the stored offsets and records at or below them are dropped, hence
exactly once. ``pre_commit`` returns ``{}``: the consumer group's offsets are not used.
"""

from raystream.connectors.postgres.sink import PostgresSink, PostgresSinkConfig, PostgresSinkTask
from raystream.connectors.postgres.source import (
    PostgresSource,
    PostgresSourceConfig,
    PostgresSourceTask,
)

__all__ = [
    "PostgresSink",
    "PostgresSinkConfig",
    "PostgresSinkTask",
    "PostgresSource",
    "PostgresSourceConfig",
    "PostgresSourceTask",
]
