"""``python -m benchmarks``: the headline table's cells, verdicts, commands and options
(pure: nothing is measured here)."""

from __future__ import annotations

import pytest

from benchmarks import headline
from benchmarks.headline import AREAS, BY_NAME, Row


def row(**changes: object) -> Row:
    fields: dict[str, object] = {
        "area": "clients",
        "figure": "send() per record",
        "ours": "1,000/s",
        "peer": "confluent-kafka: 2,000/s",
        "ratio": 0.5,
        "goal": ">= 1.00",
        "met": False,
        "command": "python -m benchmarks.bench_clients",
    }
    fields.update(changes)
    return Row(**fields)  # type: ignore[arg-type]


def test_the_table_is_markdown_with_goal_verdicts_and_escaped_cells() -> None:
    text = headline.table(
        [
            row(),
            row(figure="a|b", ratio=None, goal="", met=None),
            row(ratio=1.234, goal=">= 0.70", met=True),
        ],
        "2026-12-05",
    )
    header, rule, missed, blank, met = text.splitlines()
    assert header.startswith("| area | figure | raystream |")
    assert rule.count("|") == header.count("|")
    assert "| 0.50 | >= 1.00 (**missed**) | `python -m benchmarks.bench_clients` |" in missed
    assert "a\\|b" in blank and "|  | - |" in blank  # no ratio, no goal
    assert "| 1.23 | >= 0.70 (met) |" in met
    assert all(line.endswith("| 2026-12-05 |") for line in (missed, blank, met))


def test_verdicts_combine_as_all_met_with_unknowns_kept_unknown() -> None:
    assert headline.both(True, True) is True
    assert headline.both(True, None) is None
    assert headline.both(None, False) is False
    assert headline.at_least(None, 1.0) is None
    assert headline.at_least(0.7, 0.7) is True
    assert headline.at_most(1.5, 1.0) is False
    assert headline.ratio_of(3.0, 2.0) == 1.5
    assert headline.ratio_of(3.0, None) is None
    assert headline.ratio_of(3.0, 0.0) is None  # no peer figure: no ratio, no division


def test_formats_say_when_a_figure_is_missing() -> None:
    assert headline.per_s(1234567.8) == "1,234,568/s"
    assert headline.ms(1.234) == "1.23 ms"
    assert headline.seconds(None) == "-"
    assert headline.peer_cell("Tansu", None, headline.per_s) == "Tansu: not measured"
    assert headline.peer_cell("Tansu", 10.0, headline.per_s) == "Tansu: 10/s"


def test_a_missing_row_is_named_with_the_rows_there_are() -> None:
    rows = [("sink", 1.0, "x"), ("source", 2.0, "y")]
    assert headline.row_named(rows, "source") == 2.0
    with pytest.raises(LookupError, match=r"no row 'mirror' in \['sink', 'source'\]"):
        headline.row_named(rows, "mirror")


def test_each_area_names_the_command_that_prints_its_full_tables() -> None:
    connect = BY_NAME["connect"]
    assert connect.command(connect.full, warm=True) == (
        "python -m benchmarks.bench_connect --skip-mirror --skip-kafka --sink-records 1000000"
    )  # this script has no --warm-page-cache
    spark = BY_NAME["spark"]
    assert spark.command(spark.quick, warm=True).endswith("--rounds 1 --warm-page-cache")
    names = [area.name for area in AREAS]
    assert len(names) == len(set(names)) == len(BY_NAME)
    for area in AREAS:  # every quick run is a subset of the full run's options
        assert set(area.quick) <= set(area.full), area.name


def test_only_takes_known_areas_and_names_the_unknown_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = headline.parse_args(["--only", "spark, clients", "--quick"])
    assert [a.name for a in args.areas] == ["spark", "clients"] and args.quick
    assert [a.name for a in headline.parse_args([]).areas] == [a.name for a in AREAS]
    with pytest.raises(SystemExit):
        headline.parse_args(["--only", "clients,sql"])
    assert "--only: no area sql; the areas are storage," in capsys.readouterr().err
