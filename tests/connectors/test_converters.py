"""Converters: Kafka's wire forms (JsonConverter's envelope, big-endian numbers) read and
written over whole Arrow columns; round trips checked over seeded random data."""

from __future__ import annotations

import base64
import datetime
import json
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raystream.connectors.api import SourceRecord
from raystream.connectors.converters import (
    ArrowConverter,
    ByteArrayConverter,
    IntegerConverter,
    JsonConverter,
    StringConverter,
    arrow_type,
    connect_schema,
    converter_for,
    source_records_table,
)
from raystream.errors import ConnectError, InvalidConfigError

PROPERTY = settings(derandomize=True, max_examples=30, deadline=None)

ROW_TYPE = pa.struct(
    [
        ("id", pa.int32()),
        ("name", pa.string()),
        ("ts", pa.timestamp("ms")),
        ("tags", pa.list_(pa.string())),
        ("price", pa.decimal128(7, 2)),
        ("blob", pa.binary()),
        ("ratio", pa.float64()),
        ("inner", pa.struct([("ok", pa.bool_()), ("day", pa.date32())])),
    ]
)
ROWS = [
    {
        "id": 1,
        "name": 'quote " backslash \\ newline \n tab \t bell \x07 é',
        "ts": datetime.datetime(2024, 1, 2, 3, 4, 5, 678000),
        "tags": ["a", "b"],
        "price": Decimal("-12.34"),
        "blob": b"\x00\xff",
        "ratio": 1.0,
        "inner": {"ok": True, "day": datetime.date(2024, 1, 2)},
    },
    None,
    {
        "id": -7,
        "name": None,
        "ts": None,
        "tags": [],
        "price": None,
        "blob": None,
        "ratio": 2.5e-9,
        "inner": None,
    },
]


def test_converter_for_reads_short_names_kafka_class_names_and_defaults_to_json() -> None:
    assert isinstance(converter_for({}, "value"), JsonConverter)
    assert converter_for({}, "value").schemas_enable  # Kafka's JsonConverter default
    kafka = {
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
    }
    assert isinstance(converter_for(kafka, "key"), StringConverter)
    assert converter_for(kafka, "key").is_key
    assert isinstance(converter_for(kafka, "value"), ByteArrayConverter)
    assert isinstance(converter_for({"value.converter": "arrow"}, "value"), ArrowConverter)
    plain = converter_for(
        {"value.converter": "json", "value.converter.schemas.enable": "false"}, "value"
    )
    assert not plain.schemas_enable
    dotted = converter_for(
        {"value.converter": "raystream.connectors.converters.IntegerConverter"}, "value"
    )
    assert isinstance(dotted, IntegerConverter)


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"value.converter": "avro"}, "value.converter"),
        ({"value.converter": "json.nope.Converter"}, "value.converter"),
        ({"value.converter": "raystream.errors.ConnectError"}, "value.converter"),
        (
            {"value.converter": "json", "value.converter.schemas.enable": "yes"},
            "value.converter.schemas.enable",
        ),
        (
            {"value.converter": "json", "value.converter.decimal.format": "HEX"},
            "value.converter.decimal.format",
        ),
        (
            {"value.converter": "string", "value.converter.encoding": "latin-1"},
            "value.converter.encoding",
        ),
    ],
)
def test_a_bad_converter_config_names_the_key(config: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidConfigError, match=named):
        converter_for(config, "value")


def test_json_with_schemas_writes_kafkas_envelope_and_reads_it_back_exactly() -> None:
    converter = JsonConverter({"schemas.enable": "true", "decimal.format": "BASE64"})
    column = pa.array(ROWS, ROW_TYPE)
    stored = converter.from_connect(column)
    assert stored.type == pa.binary()
    assert stored[1].as_py() is None  # a tombstone stays a tombstone
    envelope = json.loads(stored[0].as_py())
    assert set(envelope) == {"schema", "payload"}
    fields = {f["field"]: f for f in envelope["schema"]["fields"]}
    assert envelope["schema"]["type"] == "struct"
    assert fields["id"]["type"] == "int32"
    assert fields["ts"]["name"] == "org.apache.kafka.connect.data.Timestamp"
    assert fields["price"]["parameters"]["scale"] == "2"
    payload = envelope["payload"]
    assert payload["ts"] == 1704164645678  # epoch milliseconds, as Kafka writes them
    assert payload["inner"]["day"] == 19724  # epoch days
    assert payload["blob"] == base64.b64encode(b"\x00\xff").decode()
    assert base64.b64decode(payload["price"]) == (-1234).to_bytes(2, "big", signed=True)
    assert payload["name"] == ROWS[0]["name"]
    assert b'"ratio":1.0' in stored[0].as_py()  # a double stays a double
    back = converter.to_connect(stored)
    assert back.type == ROW_TYPE
    assert back.to_pylist() == ROWS


def test_json_reads_envelopes_a_kafka_producer_wrote() -> None:
    kafka_written = (
        b'{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"},'
        b'{"type":"string","optional":true,"field":"email"}],"optional":false,'
        b'"name":"customers.Value"},"payload":{"id":42,"email":"a@example.com"}}'
    )
    other_schema = b'{"schema": {"type": "string", "optional": false}, "payload": "plain"}'
    converter = JsonConverter()
    same = converter.to_connect(pa.array([kafka_written, None, kafka_written]))
    assert same.type == pa.struct(
        [pa.field("id", pa.int64(), nullable=False), ("email", pa.string())]
    )
    assert same.to_pylist() == [{"id": 42, "email": "a@example.com"}, None] * 1 + [
        {"id": 42, "email": "a@example.com"}
    ]
    with pytest.raises(ConnectError, match="do not unify"):
        converter.to_connect(pa.array([kafka_written, other_schema]))
    with pytest.raises(ConnectError, match=r"schemas\.enable=false"):
        converter.to_connect(pa.array([b'{"id": 1}']))


def test_json_maps_round_trip_with_schemas() -> None:
    kind = pa.struct(
        [
            ("labels", pa.map_(pa.string(), pa.int64())),
            ("by_id", pa.map_(pa.int32(), pa.list_(pa.binary()))),
        ]
    )
    rows = [
        {"labels": [("a", 1), ("b", 2)], "by_id": [(7, [b"x", None])]},
        None,
        {"labels": None, "by_id": []},
    ]
    column = pa.array(rows, kind)
    converter = JsonConverter()
    stored = converter.from_connect(column)
    assert json.loads(stored[0].as_py())["payload"]["labels"] == {"a": 1, "b": 2}
    assert converter.to_connect(stored).equals(column)


def test_json_reads_a_batch_across_a_schema_change_by_unifying_the_schemas() -> None:
    old = {"type": "struct", "fields": [{"type": "int32", "optional": True, "field": "a"}]}
    new = {
        "type": "struct",
        "fields": [
            {"type": "int32", "optional": True, "field": "a"},
            {"type": "string", "optional": True, "field": "b"},
        ],
    }
    stored = pa.array(
        [
            json.dumps({"schema": old, "payload": {"a": 1}}).encode(),
            json.dumps({"payload": {"a": 2, "b": "x"}, "schema": new}).encode(),
        ]
    )
    assert JsonConverter().to_connect(stored).to_pylist() == [
        {"a": 1, "b": None},
        {"a": 2, "b": "x"},
    ]


def test_schemaless_json_parses_any_json_kind_and_keeps_nulls_in_place() -> None:
    converter = JsonConverter({"schemas.enable": "false"})
    objects = converter.to_connect(
        pa.array([b'{"a": 1,\n "b": "x"}', None, b'{"a": 2.5, "c": [1, 2]}'])
    )
    assert objects.to_pylist() == [
        {"a": 1.0, "b": "x", "c": None},
        None,
        {"a": 2.5, "b": None, "c": [1, 2]},
    ]
    assert converter.to_connect(pa.array([b"3", b"4"])).to_pylist() == [3, 4]
    assert converter.to_connect(pa.array([b'"text"'])).to_pylist() == ["text"]
    assert converter.to_connect(pa.array([None, None], pa.binary())).null_count == 2
    with pytest.raises(ConnectError, match="JsonConverter"):
        converter.to_connect(pa.array([b'{"a": 1}', b"{not json"]))


def test_schemaless_json_writes_plain_json_text() -> None:
    converter = JsonConverter({"schemas.enable": "false"})
    stored = converter.from_connect(pa.array(ROWS, ROW_TYPE))
    first = json.loads(stored[0].as_py())
    assert first["price"] == -12.34  # numbers without a schema to say "decimal"
    assert first["tags"] == ["a", "b"]
    assert stored[1].as_py() is None
    maps = pa.array([[("k", 1)], [], None], pa.map_(pa.string(), pa.int64()))
    assert converter.from_connect(maps).to_pylist() == [b'{"k":1}', b"{}", None]
    int_keys = pa.array([[(1, "a")]], pa.map_(pa.int32(), pa.string()))
    assert converter.from_connect(int_keys).to_pylist() == [b'[[1,"a"]]']


def test_json_of_slices_of_lists_and_maps() -> None:
    converter = JsonConverter({"schemas.enable": "false"})
    maps = pa.array(
        [[("a", 1)], [("b", 2), ("c", 3)], None, [("d", 4)]], pa.map_(pa.string(), pa.int64())
    )
    assert converter.from_connect(maps.slice(1, 3)).to_pylist() == [
        b'{"b":2,"c":3}',
        None,
        b'{"d":4}',
    ]
    lists = pa.array([[1], [2, 3], None, [4]])
    assert converter.from_connect(lists.slice(1, 2)).to_pylist() == [b"[2,3]", None]
    nested = pa.array([{"x": [1]}, {"x": [2, 3]}, {"x": None}]).slice(1, 2)
    assert converter.from_connect(nested).to_pylist() == [b'{"x":[2,3]}', b'{"x":null}']


@st.composite
def records(draw: st.DrawFn) -> list[dict | None]:
    row = st.fixed_dictionaries(
        {
            "n": st.none() | st.integers(-(2**63), 2**63 - 1),
            "f": st.none() | st.floats(allow_nan=False, allow_infinity=False),
            "s": st.none() | st.text(max_size=12),
            "l": st.none() | st.lists(st.integers(-1000, 1000), max_size=4),
            "b": st.none() | st.booleans(),
        }
    )
    return draw(st.lists(st.none() | row, min_size=1, max_size=30))


RECORD_TYPE = pa.struct(
    [
        ("n", pa.int64()),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("l", pa.list_(pa.int64())),
        ("b", pa.bool_()),
    ]
)


@PROPERTY
@given(rows=records())
def test_json_round_trips_random_rows_with_schemas(rows: list[dict | None]) -> None:
    converter = JsonConverter()
    column = pa.array(rows, RECORD_TYPE)
    assert converter.to_connect(converter.from_connect(column)).to_pylist() == rows
    tail = column.slice(1)  # a slice, as a bisected batch hands it
    assert converter.to_connect(converter.from_connect(tail)).to_pylist() == rows[1:]


@PROPERTY
@given(rows=records())
def test_schemaless_json_text_is_what_pythons_json_reads(rows: list[dict | None]) -> None:
    stored = JsonConverter({"schemas.enable": "false"}).from_connect(pa.array(rows, RECORD_TYPE))
    decoded = [None if v is None else json.loads(v) for v in stored.to_pylist()]
    assert decoded == rows


def test_bytes_and_string_converters() -> None:
    raw = pa.array([b"\x00\x01", None, b"text"])
    assert ByteArrayConverter().to_connect(raw).equals(raw)
    assert ByteArrayConverter().from_connect(pa.array(["é"])).to_pylist() == ["é".encode()]
    with pytest.raises(ConnectError, match="cannot store struct"):
        ByteArrayConverter().from_connect(pa.array([{"a": 1}]))
    strings = StringConverter()
    assert strings.to_connect(pa.array(["hé".encode(), None])).to_pylist() == ["hé", None]
    with pytest.raises(ConnectError, match="UTF-8"):
        strings.to_connect(pa.array([b"\xff\xfe"]))
    assert strings.from_connect(pa.array([1, None, 3])).to_pylist() == [b"1", None, b"3"]
    assert strings.from_connect(pa.array([{"a": "b"}])).to_pylist() == [b'{"a":"b"}']


def test_number_converters_store_kafkas_big_endian_bytes() -> None:
    converter = converter_for(
        {"key.converter": "org.apache.kafka.connect.converters.IntegerConverter"}, "key"
    )
    stored = converter.from_connect(pa.array([1, None, -2]))
    assert stored.to_pylist() == [b"\x00\x00\x00\x01", None, b"\xff\xff\xff\xfe"]
    assert converter.to_connect(stored).to_pylist() == [1, None, -2]
    double = converter_for({"value.converter": "float64"}, "value")
    assert double.to_connect(double.from_connect(pa.array([0.5]))).to_pylist() == [0.5]
    with pytest.raises(ConnectError, match="not 4 bytes"):
        converter.to_connect(pa.array([b"\x00"]))


def test_arrow_converter_is_the_identity_on_typed_values() -> None:
    column = pa.array(ROWS, ROW_TYPE)
    converter = ArrowConverter()
    assert converter.to_connect(column) is column
    assert converter.from_connect(pa.chunked_array([column])).equals(column)


def test_connect_schemas_and_arrow_types_map_both_ways() -> None:
    assert arrow_type(connect_schema(ROW_TYPE)) == ROW_TYPE
    kinds = [pa.list_(pa.int8()), pa.map_(pa.string(), pa.float32()), pa.time32("ms")]
    for kind in kinds:
        assert arrow_type(connect_schema(kind)) == kind
    with pytest.raises(ConnectError, match="unknown"):
        arrow_type({"type": "uuid"})


def test_source_records_table_makes_the_source_batch() -> None:
    records = [
        SourceRecord({"f": "a"}, {"pos": 1}, "t", value=b"one", key=b"k", headers=[("h", b"v")]),
        SourceRecord({"f": "a"}, {"pos": 2}, "u", value=None, partition=3, timestamp=5),
    ]
    table = source_records_table(records)
    assert table.column_names == ["topic", "partition", "timestamp", "key", "value", "headers"]
    assert table.to_pylist() == [
        {
            "topic": "t",
            "partition": None,
            "timestamp": None,
            "key": b"k",
            "value": b"one",
            "headers": [{"key": "h", "value": b"v"}],
        },
        {
            "topic": "u",
            "partition": 3,
            "timestamp": 5,
            "key": None,
            "value": None,
            "headers": [],
        },
    ]
    structured = source_records_table([SourceRecord({}, {}, "t", value={"a": 1})])
    assert pa.types.is_struct(structured.schema.field("value").type)
    with pytest.raises(ConnectError, match="values do not fit"):
        source_records_table(
            [SourceRecord({}, {}, "t", value=b"x"), SourceRecord({}, {}, "t", value=1)]
        )
