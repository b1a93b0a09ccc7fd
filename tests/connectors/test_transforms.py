"""Single message transforms on Arrow batches, configured as a Kafka Connect user would."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raystream.connectors.transforms import (
    Transformation,
    apply_chain,
    transforms_from_config,
)
from raystream.errors import ConnectError, InvalidConfigError
from raystream.records import HEADERS_TYPE

PROPERTY = settings(derandomize=True, max_examples=40, deadline=None)

VALUE_TYPE = pa.struct(
    [
        ("id", pa.int64()),
        ("email", pa.string()),
        ("score", pa.float64()),
        ("address", pa.struct([("city", pa.string()), ("zip", pa.int32())])),
    ]
)


def sink_batch() -> pa.Table:
    """Three records of two topics; the second is a tombstone, the third has a header."""
    return pa.table(
        {
            "topic": ["orders-raw", "orders-raw", "users"],
            "partition": pa.array([0, 0, 1], pa.int32()),
            "offset": pa.array([10, 11, 4], pa.int64()),
            "timestamp": pa.array([1700000000123, 1700000001000, 86_400_000], pa.int64()),
            "key": pa.array([b"k1", b"k2", None]),
            "value": pa.array(
                [
                    {"id": 1, "email": "a@x", "score": 1.5, "address": {"city": "Oslo", "zip": 1}},
                    None,
                    {"id": 3, "email": None, "score": 2.0, "address": None},
                ],
                VALUE_TYPE,
            ),
            "headers": pa.array(
                [[], None, [{"key": "trace", "value": b"t3"}]],
                HEADERS_TYPE,
            ),
        }
    )


def run(config: dict[str, str], batch: pa.Table | None = None) -> pa.Table:
    return apply_chain(transforms_from_config(config), sink_batch() if batch is None else batch)


def values(table: pa.Table, column: str = "value") -> list:
    return table.column(column).to_pylist()


def test_insert_field_adds_record_metadata_and_a_static_field_but_keeps_tombstones() -> None:
    out = run(
        {
            "transforms": "insert",
            "transforms.insert.type": "org.apache.kafka.connect.transforms.InsertField$Value",
            "transforms.insert.topic.field": "src_topic",
            "transforms.insert.partition.field": "src_partition",
            "transforms.insert.offset.field": "src_offset!",
            "transforms.insert.timestamp.field": "src_ts",
            "transforms.insert.static.field": "origin",
            "transforms.insert.static.value": "crm",
        }
    )
    first, tombstone, third = values(out)
    assert tombstone is None
    assert first["src_topic"] == "orders-raw"
    assert first["src_partition"] == 0
    assert first["src_offset"] == 10
    assert first["src_ts"] == datetime.datetime(2023, 11, 14, 22, 13, 20, 123000)
    assert third["origin"] == "crm" and third["id"] == 3
    assert out.schema.field("value").type.field("src_offset").nullable is False


def test_insert_field_offset_needs_a_sink_batch_and_a_struct_value() -> None:
    source = sink_batch().drop_columns(["offset"])
    with pytest.raises(ConnectError, match="only for sink connectors"):
        run(
            {
                "transforms": "i",
                "transforms.i.type": "InsertField$Value",
                "transforms.i.offset.field": "o",
            },
            source,
        )
    with pytest.raises(ConnectError, match="not a struct"):
        run(
            {
                "transforms": "i",
                "transforms.i.type": "InsertField$Key",
                "transforms.i.topic.field": "t",
            }
        )


def test_replace_field_includes_excludes_and_renames() -> None:
    out = run(
        {
            "transforms": "r",
            "transforms.r.type": "ReplaceField$Value",
            "transforms.r.exclude": "score",
            "transforms.r.renames": "email:mail,id:user_id",
        }
    )
    assert out.schema.field("value").type.names == ["user_id", "mail", "address"]
    assert values(out)[1] is None
    only = run(
        {"transforms": "r", "transforms.r.type": "ReplaceField$Value", "transforms.r.include": "id"}
    )
    assert values(only) == [{"id": 1}, None, {"id": 3}]


def test_mask_field_uses_null_equivalents_or_the_replacement() -> None:
    out = run(
        {
            "transforms": "m",
            "transforms.m.type": "MaskField$Value",
            "transforms.m.fields": "email,score,id",
        }
    )
    assert [(v or {}).get("email") for v in values(out)] == ["", None, None]  # null stays null
    assert values(out)[0]["score"] == 0.0 and values(out)[2]["id"] == 0
    replaced = run(
        {
            "transforms": "m",
            "transforms.m.type": "MaskField$Value",
            "transforms.m.fields": "email",
            "transforms.m.replacement": "***",
        }
    )
    assert values(replaced)[0]["email"] == "***"
    with pytest.raises(ConnectError, match="replacement='x' is not a int64"):
        run(
            {
                "transforms": "m",
                "transforms.m.type": "MaskField$Value",
                "transforms.m.fields": "id",
                "transforms.m.replacement": "x",
            }
        )


def test_cast_fields_and_whole_values_as_kafka_does() -> None:
    out = run(
        {
            "transforms": "c",
            "transforms.c.type": "org.apache.kafka.connect.transforms.Cast$Value",
            "transforms.c.spec": "id:string,score:int32",
        }
    )
    assert values(out)[0]["id"] == "1" and values(out)[0]["score"] == 1  # truncated
    batch = sink_batch().set_column(5, "value", pa.array(["1", "0", None]))
    whole = run(
        {"transforms": "c", "transforms.c.type": "Cast$Value", "transforms.c.spec": "int8"}, batch
    )
    assert values(whole) == [1, 0, None]
    assert whole.schema.field("value").type == pa.int8()
    times = sink_batch().set_column(5, "value", pa.array([0, 1500, None], pa.timestamp("ms")))
    text = run(
        {"transforms": "c", "transforms.c.type": "Cast$Value", "transforms.c.spec": "string"}, times
    )
    assert values(text)[:2] == ["1970-01-01T00:00:00.000Z", "1970-01-01T00:00:01.500Z"]
    with pytest.raises(ConnectError, match="cannot be cast"):
        bad = sink_batch().set_column(5, "value", pa.array(["x", "1", "2"]))
        run(
            {"transforms": "c", "transforms.c.type": "Cast$Value", "transforms.c.spec": "int32"},
            bad,
        )


def test_value_to_key_then_extract_field_makes_a_primitive_key() -> None:
    out = run(
        {
            "transforms": "toKey,extract",
            "transforms.toKey.type": "ValueToKey",
            "transforms.toKey.fields": "id",
            "transforms.extract.type": "ExtractField$Key",
            "transforms.extract.field": "id",
        }
    )
    assert values(out, "key") == [1, None, 3]


def test_extract_field_v2_follows_a_dotted_path_and_flatten_joins_names() -> None:
    out = run(
        {
            "transforms": "e",
            "transforms.e.type": "ExtractField$Value",
            "transforms.e.field": "address.city",
            "transforms.e.field.syntax.version": "V2",
        }
    )
    assert values(out) == ["Oslo", None, None]
    flat = run(
        {"transforms": "f", "transforms.f.type": "Flatten$Value", "transforms.f.delimiter": "_"}
    )
    assert flat.schema.field("value").type.names == [
        "id",
        "email",
        "score",
        "address_city",
        "address_zip",
    ]
    assert values(flat)[0]["address_zip"] == 1
    hoisted = run(
        {"transforms": "h", "transforms.h.type": "HoistField$Key", "transforms.h.field": "raw"}
    )
    assert values(hoisted, "key") == [{"raw": b"k1"}, {"raw": b"k2"}, {"raw": None}]


def test_timestamp_converter_between_unix_text_and_arrow_times() -> None:
    def convert(value: pa.Array, **settings_: str) -> list:
        config = {"transforms": "t", "transforms.t.type": "TimestampConverter$Value"}
        config.update({f"transforms.t.{k.replace('_', '.')}": v for k, v in settings_.items()})
        return values(run(config, sink_batch().set_column(5, "value", value)))

    unix_ms = pa.array([1700000000123, None, 0], pa.int64())
    assert convert(unix_ms, target_type="string", format="yyyy-MM-dd HH:mm:ss.SSS") == [
        "2023-11-14 22:13:20.123",
        None,
        "1970-01-01 00:00:00.000",
    ]
    assert convert(unix_ms, target_type="Timestamp")[0] == datetime.datetime(
        2023, 11, 14, 22, 13, 20, 123000
    )
    assert convert(unix_ms, target_type="Date")[0] == datetime.date(2023, 11, 14)
    times = pa.array([1500, None, 0], pa.timestamp("ms"))
    assert convert(times, target_type="unix", unix_precision="seconds") == [1, None, 0]
    assert convert(times, target_type="unix", unix_precision="microseconds")[0] == 1_500_000
    text = pa.array(["2024-02-03 04:05:06", None, "1970-01-01 00:00:00"])
    assert convert(text, target_type="unix", format="yyyy-MM-dd HH:mm:ss") == [
        1706933106000,
        None,
        0,
    ]
    seconds = pa.array([1, 2, 3], pa.int32())
    assert convert(seconds, target_type="unix", unix_precision="seconds") == [1, 2, 3]
    field = run(
        {
            "transforms": "t",
            "transforms.t.type": "org.apache.kafka.connect.transforms.TimestampConverter$Value",
            "transforms.t.field": "id",
            "transforms.t.target.type": "Timestamp",
            "transforms.t.unix.precision": "seconds",
        }
    )
    assert values(field)[2]["id"] == datetime.datetime(1970, 1, 1, 0, 0, 3)
    with pytest.raises(ConnectError, match="not a time"):
        convert(pa.array([b"x", b"y", b"z"]), target_type="unix")


def test_routers_rename_topics() -> None:
    out = run(
        {
            "transforms": "regex,ts",
            "transforms.regex.type": "org.apache.kafka.connect.transforms.RegexRouter",
            "transforms.regex.regex": "(?<name>.*)-raw",  # Java's named group
            "transforms.regex.replacement": "${name}-clean",
            "transforms.ts.type": "TimestampRouter",
            "transforms.ts.topic.format": "${topic}_${timestamp}",
            "transforms.ts.timestamp.format": "yyyy-MM-dd'T'HH.SSS",
        }
    )
    assert values(out, "topic") == [
        "orders-clean_2023-11-14T22.123",
        "orders-clean_2023-11-14T22.000",
        "users_1970-01-02T00.000",
    ]
    default = run({"transforms": "ts", "transforms.ts.type": "TimestampRouter"})
    assert values(default, "topic")[2] == "users-19700102"
    numbered = run(
        {
            "transforms": "r",
            "transforms.r.type": "RegexRouter",
            "transforms.r.regex": "orders-(.*)",
            "transforms.r.replacement": "o_$1",
        }
    )
    assert values(numbered, "topic") == ["o_raw", "o_raw", "users"]


def test_filter_with_predicates_and_negate() -> None:
    config = {
        "transforms": "dropTombstones,keepOrders",
        "transforms.dropTombstones.type": "org.apache.kafka.connect.transforms.Filter",
        "transforms.dropTombstones.predicate": "isTombstone",
        "transforms.keepOrders.type": "Filter",
        "transforms.keepOrders.predicate": "isOrders",
        "transforms.keepOrders.negate": "true",
        "predicates": "isTombstone,isOrders",
        "predicates.isTombstone.type": (
            "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone"
        ),
        "predicates.isOrders.type": "TopicNameMatches",
        "predicates.isOrders.pattern": "orders-.*",
    }
    assert values(run(config), "offset") == [10]
    traced = run(
        {
            "transforms": "f",
            "transforms.f.type": "Filter",
            "transforms.f.predicate": "traced",
            "predicates": "traced",
            "predicates.traced.type": "HasHeaderKey",
            "predicates.traced.name": "trace",
        }
    )
    assert values(traced, "offset") == [10, 11]
    assert run({"transforms": "f", "transforms.f.type": "Filter"}).num_rows == 0


def test_a_predicated_transform_changes_only_the_selected_rows_in_place() -> None:
    out = run(
        {
            "transforms": "insert",
            "transforms.insert.type": "InsertField$Value",
            "transforms.insert.static.field": "tag",
            "transforms.insert.static.value": "user",
            "transforms.insert.predicate": "users",
            "predicates": "users",
            "predicates.users.type": "TopicNameMatches",
            "predicates.users.pattern": "users",
        }
    )
    assert values(out, "offset") == [10, 11, 4]  # order kept
    assert [v and v["tag"] for v in values(out)] == [None, None, "user"]


def test_a_predicated_transform_may_add_a_column_the_other_rows_get_as_nulls() -> None:
    source = sink_batch().drop_columns(["key"])
    out = run(
        {
            "transforms": "k",
            "transforms.k.type": "ValueToKey",
            "transforms.k.fields": "id",
            "transforms.k.predicate": "users",
            "predicates": "users",
            "predicates.users.type": "TopicNameMatches",
            "predicates.users.pattern": "users",
        },
        source,
    )
    assert values(out, "key") == [None, None, {"id": 3}]


def test_header_from_copies_or_moves_fields_into_headers() -> None:
    out = run(
        {
            "transforms": "h",
            "transforms.h.type": "org.apache.kafka.connect.transforms.HeaderFrom$Value",
            "transforms.h.fields": "email,id,address",
            "transforms.h.headers": "mail,user,where",
            "transforms.h.operation": "move",
        }
    )
    assert out.schema.field("value").type.names == ["score"]
    first, tombstone, third = values(out, "headers")
    assert first == [
        {"key": "mail", "value": b"a@x"},
        {"key": "user", "value": b"1"},
        {"key": "where", "value": b'{"city":"Oslo","zip":1}'},
    ]
    assert [h["value"] for h in tombstone] == [None, None, None]
    assert third[0] == {"key": "trace", "value": b"t3"}  # its own header stays first
    assert third[1:] == [
        {"key": "mail", "value": None},
        {"key": "user", "value": b"3"},
        {"key": "where", "value": None},
    ]
    copied = run(
        {
            "transforms": "h",
            "transforms.h.type": "HeaderFrom$Key",
            "transforms.h.fields": "id",
            "transforms.h.headers": "user",
            "transforms.h.operation": "copy",
        },
        run({"transforms": "k", "transforms.k.type": "ValueToKey", "transforms.k.fields": "id"}),
    )
    assert values(copied, "key")[0] == {"id": 1}
    with pytest.raises(InvalidConfigError, match=r"transforms\.h\.headers"):
        transforms_from_config(
            {
                "transforms": "h",
                "transforms.h.type": "HeaderFrom$Value",
                "transforms.h.fields": "a,b",
                "transforms.h.headers": "x",
                "transforms.h.operation": "copy",
            }
        )


def test_header_transforms() -> None:
    out = run(
        {
            "transforms": "add,drop",
            "transforms.add.type": "InsertHeader",
            "transforms.add.header": "via",
            "transforms.add.value.literal": "raystream",
            "transforms.drop.type": "DropHeaders",
            "transforms.drop.headers": "trace",
        }
    )
    via = {"key": "via", "value": b"raystream"}
    assert values(out, "headers") == [[via], [via], [via]]


def test_a_bad_timestamp_converter_config_names_the_key() -> None:
    base = {"transforms": "a", "transforms.a.type": "TimestampConverter$Value"}
    with pytest.raises(InvalidConfigError, match=r"transforms\.a\.target\.type"):
        transforms_from_config(base)
    with pytest.raises(InvalidConfigError, match=r"transforms\.a\.format"):
        transforms_from_config({**base, "transforms.a.target.type": "string"})
    with pytest.raises(InvalidConfigError, match=r"transforms\.a\.unix\.precision"):
        transforms_from_config(
            {**base, "transforms.a.target.type": "unix", "transforms.a.unix.precision": "days"}
        )


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"transforms": "a"}, "transforms.a.type"),
        ({"transforms": "a", "transforms.a.type": "Nope"}, "transforms.a.type"),
        ({"transforms": "a", "transforms.a.type": "InsertField$Value"}, "static.field"),
        (
            {"transforms": "a", "transforms.a.type": "Cast$Value", "transforms.a.spec": "x:uuid"},
            "transforms.a.spec",
        ),
        (
            {
                "transforms": "a",
                "transforms.a.type": "RegexRouter",
                "transforms.a.regex": "(",
                "transforms.a.replacement": "x",
            },
            "transforms.a.regex",
        ),
        (
            {"transforms": "a", "transforms.a.type": "Filter", "transforms.a.predicate": "p"},
            "transforms.a.predicate",
        ),
        (
            {"transforms": "a", "transforms.a.type": "Filter", "transforms.a.negate": "true"},
            "transforms.a.negate",
        ),
        ({"predicates": "p", "predicates.p.type": "TopicNameMatches"}, "predicates.p.pattern"),
        (
            {
                "transforms": "a",
                "transforms.a.type": "TimestampRouter",
                "transforms.a.timestamp.format": "yyyyQQ",
            },
            "transforms.a.timestamp.format",
        ),
        (
            {
                "transforms": "a",
                "transforms.a.type": "ReplaceField$Value",
                "transforms.a.renames": "x",
            },
            "renames",
        ),
    ],
)
def test_a_bad_transform_config_names_the_key(config: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidConfigError, match=named.replace(".", r"\.").replace("$", r"\$")):
        transforms_from_config(config)


class Upper(Transformation):
    """A transform of one's own, by dotted path."""

    def apply(self, batch: pa.Table) -> pa.Table:
        import pyarrow.compute as pc

        return batch.set_column(0, "topic", pc.utf8_upper(batch.column("topic")))


def test_a_transform_of_ones_own_by_dotted_path() -> None:
    out = run({"transforms": "u", "transforms.u.type": f"{__name__}.Upper"})
    assert values(out, "topic") == ["ORDERS-RAW", "ORDERS-RAW", "USERS"]


def test_class_names_are_kafkas_for_kafkas_transforms() -> None:
    chain = transforms_from_config(
        {
            "transforms": "a,b,c",
            "transforms.a.type": "Cast$Key",
            "transforms.a.spec": "string",
            "transforms.b.type": "Filter",
            "transforms.b.predicate": "p",
            "transforms.c.type": f"{__name__}.Upper",
            "predicates": "p",
            "predicates.p.type": "RecordIsTombstone",
        }
    )
    assert [t.class_name for t in chain] == [
        "org.apache.kafka.connect.transforms.Cast$Key",
        "org.apache.kafka.connect.transforms.Filter",
        f"{__name__}.Upper",
    ]


@PROPERTY
@given(
    topics=st.lists(st.sampled_from(["a", "b-x", "b-y", "c"]), min_size=1, max_size=40),
    tombstones=st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_predicated_chains_keep_order_and_select_exactly_the_matching_rows(
    topics: list[str], tombstones: list[bool]
) -> None:
    n = len(topics)
    batch = pa.table(
        {
            "topic": topics,
            "offset": pa.array(range(n), pa.int64()),
            "value": pa.array(
                [None if tombstones[i] else {"n": i} for i in range(n)],
                pa.struct([("n", pa.int64())]),
            ),
        }
    )
    out = run(
        {
            "transforms": "drop,route",
            "transforms.drop.type": "Filter",
            "transforms.drop.predicate": "dead",
            "transforms.route.type": "RegexRouter",
            "transforms.route.regex": "b-(.)",
            "transforms.route.replacement": "B$1",
            "transforms.route.predicate": "isA",
            "transforms.route.negate": "true",
            "predicates": "dead,isA",
            "predicates.dead.type": "RecordIsTombstone",
            "predicates.isA.type": "TopicNameMatches",
            "predicates.isA.pattern": "a",
        },
        batch,
    )
    expected = [
        (i, {"b-x": "Bx", "b-y": "By"}.get(t, t)) for i, t in enumerate(topics) if not tombstones[i]
    ]
    assert list(zip(values(out, "offset"), values(out, "topic"), strict=True)) == expected
