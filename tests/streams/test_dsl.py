"""Building topologies with the DSL: nodes, repartition topics, sub-topologies, stores,
co-partitioning requirements, describe() and errors for bad DSL use (pure, no Ray)."""

from __future__ import annotations

import pytest

from raystream.errors import InvalidConfigError, TopologyError
from raystream.streams.dsl import App
from raystream.streams.windows import JoinWindows, SessionWindows, TumblingWindows


def test_app_and_topology_build_without_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # any import of ray now fails
    app = App(None, "wordcount")
    app.stream("lines").flat_map_values(lambda v: v.split()).group_by(
        lambda k, v: v
    ).count().to_stream().to("counts")
    assert "Sub-topology: 1" in app.describe()


def test_describe_prints_kafka_style_sub_topologies() -> None:
    app = App(None, "app")
    app.stream("orders").filter(lambda k, v: v is not None).to("big-orders")
    assert app.describe() == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [orders])\n"
        "      --> KSTREAM-FILTER-0000000001\n"
        "    Processor: KSTREAM-FILTER-0000000001 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000002\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "    Sink: KSTREAM-SINK-0000000002 (topic: big-orders)\n"
        "      <-- KSTREAM-FILTER-0000000001\n"
    )


def test_a_key_change_before_an_aggregation_goes_through_a_repartition_topic() -> None:
    app = App(None, "app")
    app.stream("clicks").group_by(lambda k, v: v["page"]).count(name="page-counts")
    first, second = app.subtopologies()
    assert first.sink_topics == ("app-page-counts-repartition",)
    assert second.source_topics == ("app-page-counts-repartition",)
    assert [s.name for s in second.stores] == ["page-counts"]
    assert app.topology.changelog_topics() == ["app-page-counts-changelog"]


def test_grouping_by_the_unchanged_key_needs_no_repartition() -> None:
    app = App(None, "app")
    app.stream("clicks").map_values(len).group_by_key().count()
    (only,) = app.subtopologies()
    assert only.sink_topics == ()


def test_map_then_group_by_key_repartitions() -> None:
    app = App(None, "app")
    app.stream("clicks").map(lambda k, v: (v, k)).group_by_key().count()
    assert len(app.subtopologies()) == 2


def test_windowed_aggregates_get_window_and_session_stores() -> None:
    app = App(None, "app")
    grouped = app.stream("t").group_by_key()
    grouped.window(TumblingWindows(60_000, grace_ms=1_000)).count(name="per-minute")
    grouped.window(SessionWindows(5_000)).count(name="sessions")
    kinds = {s.name: (s.kind, s.retention_ms) for s in app.subtopologies()[0].stores}
    assert kinds == {"per-minute": ("window", 61_000), "sessions": ("session", 5_001)}


def test_joins_record_co_partitioning_and_the_check_names_the_topics() -> None:
    app = App(None, "app")
    orders = app.stream("orders")
    customers = app.table("customers")
    orders.join(customers, lambda o, c: (o, c)).to("enriched")
    clicks = app.stream("clicks")
    orders.join(clicks, lambda o, c: (o, c), JoinWindows.of(1_000)).to("pairs")
    (sub,) = app.subtopologies()
    assert set(sub.copartition_groups) == {
        frozenset({"orders", "customers"}),
        frozenset({"orders", "clicks"}),
    }
    app.topology.partition_counts({"orders": 4, "customers": 4, "clicks": 4})
    with pytest.raises(TopologyError, match=r"co-partitioned.*'clicks': 3"):
        app.topology.partition_counts({"orders": 4, "customers": 4, "clicks": 3})


def test_repartition_topics_take_the_partition_count_of_their_writer() -> None:
    app = App(None, "app")
    app.stream("clicks").group_by(lambda k, v: v).count(name="c")
    counts = app.topology.partition_counts({"clicks": 6})
    assert counts["app-c-repartition"] == 6


def test_merge_of_topics_with_different_partition_counts_is_allowed() -> None:
    app = App(None, "app")
    app.stream("a").merge(app.stream("b")).to("out")
    app.topology.partition_counts({"a": 2, "b": 3})


def test_a_repartition_topic_joined_with_a_table_takes_the_tables_partition_count() -> None:
    app = App(None, "app")
    app.stream("clicks").select_key(lambda k, v: v).join(app.table("users"), lambda c, u: c)
    counts = app.topology.partition_counts({"clicks": 8, "users": 3})
    (topic,) = app.topology.repartition_topics
    assert counts[topic] == 3
    assert app.topology.task_ids({"clicks": 8, "users": 3}) == [
        *[(0, p) for p in range(8)],
        *[(1, p) for p in range(3)],
    ]


def test_a_missing_source_topic_is_named() -> None:
    app = App(None, "app")
    app.stream("nope").to("out")
    with pytest.raises(TopologyError, match="'nope' does not exist"):
        app.topology.partition_counts({})


def test_stream_stream_outer_join_adds_the_shared_outer_store() -> None:
    app = App(None, "app")
    left, right = app.stream("l"), app.stream("r")
    left.outer_join(right, lambda a, b: (a, b), JoinWindows(5, 5)).to("out")
    names = [s.name for s in app.subtopologies()[0].stores]
    assert any("OUTERSHARED" in n for n in names) and len(names) == 3


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda app: app.stream([]), "topic"),
        (lambda app: app.stream("t").filter("not callable"), "predicate must be callable"),
        (lambda app: app.stream("t").branch(), "at least one predicate"),
        (lambda app: app.stream("t").to(""), "topic name"),
        (
            lambda app: (
                app.stream("t")
                .group_by_key()
                .window(SessionWindows(5))
                .aggregate(lambda: 0, lambda k, v, a: a)
            ),
            "merger",
        ),
        (lambda app: app.stream("t").group_by_key().count().suppress(), "windowed table"),
        (lambda app: app.stream("t").join(app.stream("u"), lambda a, b: a), "JoinWindows"),
        (
            lambda app: app.stream("t").join(app.table("u"), lambda a, b: a, JoinWindows.of(1)),
            "no windows",
        ),
        (lambda app: app.stream("t").outer_join(app.table("u"), lambda a, b: a, None), "outer"),
        (lambda app: app.stream("t").merge(App(None, "other").stream("u")), "this app"),
        (lambda app: app.stream("t").group_by_key().window("1m"), "TumblingWindows"),
        (
            lambda app: [app.stream("t").group_by_key().count(name="x") for _ in range(2)],
            "already exists",
        ),
        (lambda app: app.stream("t").group_by_key().sum(""), "column"),
        (lambda app: App(None, "a").describe(), "no source"),
        (lambda app: app.stream("t").process(lambda: None, "missing"), "unknown store"),
    ],
)
def test_bad_dsl_use_raises_a_topology_error_naming_the_problem(build, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        build(App(None, "app"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"application_id": ""}, "application_id"),
        ({"application_id": "a b"}, "application_id"),
        ({"processing_guarantee": "exactly_twice"}, "processing_guarantee"),
        ({"num_workers": 0}, "num_workers"),
        ({"commit_interval_ms": -1}, "commit_interval_ms"),
        ({"num_standby_replicas": -1}, "num_standby_replicas"),
        ({"auto_offset_reset": "none"}, "auto_offset_reset"),
    ],
)
def test_bad_app_config_is_refused_naming_the_argument(kwargs: dict, message: str) -> None:
    args = {"application_id": "app", **kwargs}
    with pytest.raises(InvalidConfigError, match=message):
        App(None, **args)
