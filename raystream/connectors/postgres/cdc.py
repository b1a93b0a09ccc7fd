"""Change data capture: a pgoutput logical slot read through PostgreSQL's SQL functions."""

from __future__ import annotations

import collections
import contextlib
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.pq import Format

from raystream.connectors.api import SourceBatch
from raystream.connectors.postgres.common import arrow_type, identifier, numeric_typmod
from raystream.errors import ConnectError, RetriableConnectError

if TYPE_CHECKING:
    from raystream.connectors.postgres.source import PostgresSourceConfig

_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970 (pgoutput's epoch)


@dataclass(frozen=True)
class Relation:
    """A table as pgoutput describes it: columns (name, type oid, typmod, in the key)."""

    relation_id: int
    schema: str
    name: str
    columns: tuple[tuple[str, int, int, bool], ...]


@dataclass(frozen=True)
class Change:
    """One record of a decoded transaction (deletes: ``new`` is None, a tombstone)."""

    relation: Relation
    op: str  # "c", "u" or "d"
    key: tuple[Any, ...] | None
    new: tuple[Any, ...] | None


@dataclass(frozen=True)
class Transaction:
    """A committed transaction: its end LSN (the offset after it), time and changes."""

    end_lsn: int
    commit_time_ms: int
    changes: tuple[Change, ...]


def lsn_text(lsn: int) -> str:
    """PostgreSQL's ``X/Y`` spelling of an LSN."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class PgOutputDecoder:
    """Decodes pgoutput (protocol 1) messages into :class:`Transaction` objects.

    Text values are loaded by the connection's psycopg loaders for their type, so a CDC
    value equals what a SELECT of the row returns.
    """

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn
        self.relations: dict[int, Relation] = {}
        self._loaders: dict[int, Any] = {}

    def decode(self, messages: Iterable[bytes]) -> list[Transaction]:
        """Whole transactions from messages (a batch of the slot's output begins with one
        transaction's ``B`` and ends with a ``C``; partial tails are left out)."""
        done: list[Transaction] = []
        changes: list[Change] = []
        commit_time_ms = 0
        for message in messages:
            kind = message[:1]
            if kind == b"B":
                _, commit_us, _ = struct.unpack_from(">qqi", message, 1)
                commit_time_ms = (commit_us + _PG_EPOCH_US) // 1000
                changes = []
            elif kind == b"C":
                _, _, end_lsn, _ = struct.unpack_from(">bqqq", message, 1)
                done.append(Transaction(end_lsn, commit_time_ms, tuple(changes)))
            elif kind == b"R":
                self._relation(message)
            elif kind in (b"I", b"U", b"D"):
                changes.extend(self._change(kind, message))
            # T (truncate), Y (type), O (origin), M (message): not records
        return done

    def _relation(self, message: bytes) -> None:
        (relation_id,) = struct.unpack_from(">I", message, 1)
        pos = 5
        schema, pos = _cstring(message, pos)
        name, pos = _cstring(message, pos)
        pos += 1  # replica identity setting
        (count,) = struct.unpack_from(">h", message, pos)
        pos += 2
        columns = []
        for _ in range(count):
            flags = message[pos]
            column, pos = _cstring(message, pos + 1)
            oid, typmod = struct.unpack_from(">Ii", message, pos)
            pos += 8
            columns.append((column, oid, typmod, bool(flags & 1)))
        self.relations[relation_id] = Relation(relation_id, schema, name, tuple(columns))

    def _change(self, kind: bytes, message: bytes) -> list[Change]:
        (relation_id,) = struct.unpack_from(">I", message, 1)
        relation = self.relations[relation_id]
        pos = 5
        old = None
        if kind in (b"U", b"D") and message[pos : pos + 1] in (b"K", b"O"):
            old, pos = self._tuple(relation, message, pos + 1)
        new = None
        if kind in (b"I", b"U"):
            new, pos = self._tuple(relation, message, pos + 1)  # skips the "N"
        keys = [i for i, column in enumerate(relation.columns) if column[3]]

        def key_of(row: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
            return tuple(row[i] for i in keys) if row is not None and keys else None

        if kind == b"I":
            return [Change(relation, "c", key_of(new), new)]
        if kind == b"D":
            return [Change(relation, "d", key_of(old), None)]
        if old is not None and key_of(old) != key_of(new):  # the key changed: old one goes
            return [
                Change(relation, "d", key_of(old), None),
                Change(relation, "u", key_of(new), new),
            ]
        return [Change(relation, "u", key_of(new), new)]

    def _tuple(self, relation: Relation, message: bytes, pos: int) -> tuple[tuple[Any, ...], int]:
        (count,) = struct.unpack_from(">h", message, pos)
        pos += 2
        values = []
        for i in range(count):
            kind = message[pos : pos + 1]
            pos += 1
            if kind == b"t":
                (length,) = struct.unpack_from(">i", message, pos)
                pos += 4
                oid = relation.columns[i][1]
                values.append(self._loader(oid).load(message[pos : pos + length]))
                pos += length
            else:  # n: null; u: an unchanged TOAST value, not sent
                values.append(None)
        return tuple(values), pos

    def _loader(self, oid: int) -> Any:
        if oid not in self._loaders:
            loader = self.conn.adapters.get_loader(oid, Format.TEXT)
            if loader is None:
                loader = psycopg.types.string.TextLoader
            self._loaders[oid] = loader(oid, self.conn)
        return self._loaders[oid]


def _cstring(message: bytes, pos: int) -> tuple[str, int]:
    end = message.index(b"\x00", pos)
    return message[pos:end].decode(), end + 1


def _op_headers(op: str) -> list[dict[str, Any]]:
    return [{"key": "__op", "value": op.encode()}]


_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


class ChangeReader:
    """``mode=cdc``: peeks the slot, emits changes after the stored offset, and
    advances the slot to the stored offset in ``commit``.

    Peeking re-decodes from the slot's confirmed position each time, so the changes
    written but not yet committed are read again and skipped: commit often.
    """

    def __init__(self, conn: psycopg.Connection, settings: PostgresSourceConfig, context: Any):
        self.conn = conn
        self.settings = settings
        self.partition = {"slot": settings.slot_name}
        reader = getattr(context, "offset_storage_reader", None)
        self._ensure_slot()
        stored = (reader.offset(self.partition) if reader else None) or {}
        self.lsn = int(stored.get("lsn", 0))  # transactions ending here or before: done
        self.txn_lsn = int(stored.get("txn_lsn", 0))  # one half written, and how far
        self.txn_events = int(stored.get("txn_events", 0))
        self.pending: collections.deque[tuple[Transaction, int]] = collections.deque()
        self.limit = settings.batch_max_rows

    def _ensure_slot(self) -> None:
        """Create the publication and the slot unless they exist; another incarnation of
        the task (a worker handing the task over) may create them at the same moment."""
        s = self.settings
        exists = self.conn.execute(
            "SELECT 1 FROM pg_publication WHERE pubname = %s", [s.publication_name]
        ).fetchone()
        if not exists:
            target = (
                sql.SQL("TABLE ") + sql.SQL(", ").join(identifier(t) for t in s.tables)
                if s.tables
                else sql.SQL("ALL TABLES")
            )
            with contextlib.suppress(
                psycopg.errors.UniqueViolation, psycopg.errors.DuplicateObject
            ):
                self.conn.execute(
                    sql.SQL("CREATE PUBLICATION {} FOR ").format(sql.Identifier(s.publication_name))
                    + target
                )
        if self._slot_kind() is None:
            try:
                self.conn.execute(
                    "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", [s.slot_name]
                )
            except psycopg.errors.DuplicateObject:
                pass  # made by another incarnation: checked below
            except psycopg.Error as error:
                raise ConnectError(
                    f"PostgresSource: cannot create the logical replication slot "
                    f"{s.slot_name!r} (the server needs wal_level=logical and a free "
                    f"max_replication_slots): {error}"
                ) from error
        kind = self._slot_kind()
        if kind != ("pgoutput", True):
            raise ConnectError(
                f"PostgresSource: replication slot {s.slot_name!r} exists but is not a "
                f"pgoutput slot of this database (plugin {kind and kind[0]}): choose another "
                f"slot.name"
            )

    def _slot_kind(self) -> tuple[str, bool] | None:
        """(plugin, of this database) of the slot, or None if there is none."""
        row = self.conn.execute(
            "SELECT plugin, database = current_database() FROM pg_replication_slots"
            " WHERE slot_name = %s",
            [self.settings.slot_name],
        ).fetchone()
        return None if row is None else (row[0], bool(row[1]))

    def poll(self) -> SourceBatch | None:
        if not self.pending:
            self._fetch()
            if not self.pending:
                time.sleep(min(self.settings.poll_interval_ms / 1000, 1.0))
                return None
        transaction, start = self.pending[0]
        relation = transaction.changes[start].relation
        changes: list[tuple[Change, int]] = []
        while self.pending and len(changes) < self.settings.batch_max_rows:
            transaction, start = self.pending[0]
            end = start
            while (
                end < len(transaction.changes)
                and transaction.changes[end].relation is relation
                and len(changes) < self.settings.batch_max_rows
            ):
                changes.append((transaction.changes[end], transaction.commit_time_ms))
                end += 1
            if end < len(transaction.changes):
                self.pending[0] = (transaction, end)
                self.txn_lsn, self.txn_events = transaction.end_lsn, end
                break
            self.pending.popleft()
            self.lsn, self.txn_lsn, self.txn_events = transaction.end_lsn, 0, 0
        offset = {"lsn": self.lsn}
        if self.txn_lsn:
            offset |= {"txn_lsn": self.txn_lsn, "txn_events": self.txn_events}
        return SourceBatch(
            dict(self.partition),
            offset,
            self.settings.topic_prefix + relation.name,
            self._table(relation, changes),
        )

    def _table(self, relation: Relation, changes: list[tuple[Change, int]]) -> pa.Table:
        columns = relation.columns
        types = [arrow_type(oid, *numeric_typmod(typmod)) for _, oid, typmod, _ in columns]
        names = [column[0] for column in columns]
        value_type = pa.struct([pa.field(n, t) for n, t in zip(names, types, strict=True)])
        key_fields = [pa.field(n, t) for n, t, c in zip(names, types, columns, strict=True) if c[3]]
        values = [
            None if c.new is None else dict(zip(names, c.new, strict=True)) for c, _ in changes
        ]
        keys = [
            None if c.key is None else dict(zip((f.name for f in key_fields), c.key, strict=True))
            for c, _ in changes
        ]
        return pa.table(
            {
                "key": pa.array(keys, type=pa.struct(key_fields))
                if key_fields
                else pa.nulls(len(changes)),
                "value": pa.array(values, type=value_type),
                "timestamp": pa.array([ms for _, ms in changes], type=pa.int64()),
                "headers": pa.array([_op_headers(c.op) for c, _ in changes], type=_HEADERS),
            }
        )

    def _fetch(self) -> None:
        """Decode the slot from its confirmed position (growing the window while it holds
        only changes already emitted) and queue what comes after the emitted offset."""
        while True:
            try:
                rows = self.conn.execute(
                    "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s,"
                    " 'proto_version', '1', 'publication_names', %s)",
                    [self.settings.slot_name, self.limit, self.settings.publication_name],
                ).fetchall()
            except psycopg.OperationalError as error:  # also: another incarnation reads it now
                raise RetriableConnectError(f"PostgresSource: reading the slot: {error}") from error
            except psycopg.Error as error:
                raise ConnectError(f"PostgresSource: reading the slot: {error}") from error
            for transaction in PgOutputDecoder(self.conn).decode(bytes(r[0]) for r in rows):
                if transaction.end_lsn <= self.lsn:
                    continue
                start = self.txn_events if transaction.end_lsn == self.txn_lsn else 0
                if start < len(transaction.changes):
                    self.pending.append((transaction, start))
                elif not self.pending:  # nothing to write in it: passed by the next offset
                    self.lsn, self.txn_lsn, self.txn_events = transaction.end_lsn, 0, 0
            if self.pending or len(rows) < self.limit:
                return
            self.limit *= 2  # the window held only what was emitted: look further

    def commit(self) -> None:
        """Advance the slot past the transactions polled whole so far: the framework
        calls ``commit`` once what ``poll`` returned is written and its offsets stored
        (Kafka's contract), so the server may recycle the WAL before them. A half-polled
        transaction keeps the slot before it."""
        lsn = self.lsn
        if not lsn:
            return
        with contextlib.suppress(psycopg.errors.ObjectInUse):  # read now: next commit moves it
            self.conn.execute(
                "SELECT pg_replication_slot_advance(slot_name, %s::pg_lsn)"
                " FROM pg_replication_slots"
                " WHERE slot_name = %s AND confirmed_flush_lsn < %s::pg_lsn",
                [lsn_text(lsn), self.settings.slot_name, lsn_text(lsn)],
            )
        self.limit = self.settings.batch_max_rows
