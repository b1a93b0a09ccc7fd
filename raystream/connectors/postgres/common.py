"""What the PostgreSQL source and sink share: connections, type mappings, settings."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from raystream.errors import ConnectError, InvalidConfigError, RetriableConnectError

SQL_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def conninfo(config: Mapping[str, str]) -> str:
    """The libpq connection string of ``connection.url`` (a libpq URL or key=value string,
    or a JDBC ``jdbc:postgresql://host:port/db?user=..`` URL) with ``connection.user`` and
    ``connection.password``."""
    url = config.get("connection.url", "")
    if not url:
        raise InvalidConfigError("connection.url is required (e.g. postgresql://host:5432/db)")
    if url.startswith("jdbc:"):
        url = url[len("jdbc:") :]
    extra = {}
    if config.get("connection.user"):
        extra["user"] = config["connection.user"]
    if config.get("connection.password"):
        extra["password"] = config["connection.password"]
    try:
        return psycopg.conninfo.make_conninfo(url, **extra)
    except psycopg.ProgrammingError as error:
        raise InvalidConfigError(
            f"connection.url {url!r} is not a PostgreSQL URL: {error}"
        ) from error


def connect(config: Mapping[str, str]) -> psycopg.Connection:
    """An autocommit connection in UTC whose JSON, UUID and unknown types load as text
    (the connectors type them, not psycopg); a connection failure is retriable."""
    try:
        conn = psycopg.connect(conninfo(config), autocommit=True)
    except psycopg.OperationalError as error:
        raise RetriableConnectError(f"cannot connect to PostgreSQL: {error}") from error
    conn.execute("SET TimeZone = 'UTC'")
    for name in ("json", "jsonb", "uuid"):
        conn.adapters.register_loader(name, psycopg.types.string.TextLoader)
    return conn


def identifier(name: str) -> sql.Identifier:
    """``schema.table`` or ``table`` as a quoted identifier."""
    return sql.Identifier(*name.split("."))


_ARRAY_ELEMENTS = {info.array_oid: info.oid for info in psycopg.postgres.types if info.array_oid}


def arrow_type(oid: int, precision: int | None = None, scale: int | None = None) -> pa.DataType:
    """The Arrow type of a PostgreSQL column type (text for types without a better one)."""
    simple = {
        16: pa.bool_(),
        17: pa.binary(),
        20: pa.int64(),
        21: pa.int16(),
        23: pa.int32(),
        26: pa.int64(),
        700: pa.float32(),
        701: pa.float64(),
        1082: pa.date32(),
        1083: pa.time64("us"),
        1114: pa.timestamp("us"),
        1184: pa.timestamp("us", tz="UTC"),
        1186: pa.duration("us"),
    }
    if oid in simple:
        return simple[oid]
    element = _ARRAY_ELEMENTS.get(oid)
    if element is not None:
        return pa.list_(arrow_type(element))
    if oid == 1700 and precision and precision <= 38:
        return pa.decimal128(precision, scale or 0)
    return pa.string()  # text, varchar, json, uuid, unconstrained numeric, others


def numeric_typmod(typmod: int) -> tuple[int | None, int | None]:
    if typmod < 4:
        return None, None
    return ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF


def arrow_values(values: list[Any], type_: pa.DataType) -> pa.Array:
    if pa.types.is_string(type_):
        values = [v if v is None or isinstance(v, str) else str(v) for v in values]
    elif pa.types.is_decimal(type_):
        values = [v if v is None or v.is_finite() else None for v in values]
    return pa.array(values, type=type_)


def pg_type(type_: pa.DataType) -> str:
    """The PostgreSQL column type ``auto.create`` gives an Arrow type."""
    if pa.types.is_boolean(type_):
        return "boolean"
    if pa.types.is_int8(type_) or pa.types.is_int16(type_) or pa.types.is_uint8(type_):
        return "smallint"
    if pa.types.is_int32(type_) or pa.types.is_uint16(type_):
        return "integer"
    if pa.types.is_int64(type_) or pa.types.is_uint32(type_):
        return "bigint"
    if pa.types.is_uint64(type_):
        return "numeric(20)"
    if pa.types.is_float32(type_) or pa.types.is_float16(type_):
        return "real"
    if pa.types.is_float64(type_):
        return "double precision"
    if pa.types.is_decimal(type_):
        return f"numeric({type_.precision},{type_.scale})"
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return "text"
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_):
        return "bytea"
    if pa.types.is_timestamp(type_):
        return "timestamptz" if type_.tz else "timestamp"
    if pa.types.is_date(type_):
        return "date"
    if pa.types.is_time(type_):
        return "time"
    if pa.types.is_duration(type_):
        return "interval"
    if pa.types.is_struct(type_) or pa.types.is_list(type_) or pa.types.is_map(type_):
        return "jsonb"
    if pa.types.is_null(type_):
        return "text"
    raise ConnectError(f"PostgresSink: no PostgreSQL type for Arrow type {type_}")


def split_list(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def int_setting(config: Mapping[str, str], key: str, default: int) -> int:
    try:
        value = int(config.get(key, default))
    except ValueError:
        raise InvalidConfigError(f"{key} must be an integer, got {config[key]!r}") from None
    if value < 0:
        raise InvalidConfigError(f"{key} must not be negative, got {value}")
    return value


def bool_setting(config: Mapping[str, str], key: str, default: bool) -> bool:
    value = str(config.get(key, default)).lower()
    if value not in ("true", "false"):
        raise InvalidConfigError(f"{key} must be true or false, got {config[key]!r}")
    return value == "true"


def choice_setting(
    config: Mapping[str, str], key: str, choices: Sequence[str], default: str
) -> str:
    value = config.get(key, default)
    if value not in choices:
        raise InvalidConfigError(f"{key} must be one of {', '.join(choices)}; got {value!r}")
    return value
