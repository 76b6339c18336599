"""The report's small print: one number format per table column, field names in the headers'
tooltips, costs with their units, the data period, a singular comparison."""
from __future__ import annotations

import datetime as dt
import re

import pyarrow as pa
import pyarrow.parquet as pq

from aequum.flows.reporting.html import column_format, table
from aequum.flows.reporting.labels import Labels
from aequum.flows.reporting.methods import data_period


def cells(html: str) -> list[str]:
    return re.findall(r'<td class="num">([^<]*)</td>', html)


def test_one_number_format_per_column():
    html = table([{"cost": 1442.0}, {"cost": 981.513}, {"cost": None}])
    assert cells(html) == ["1,442.00", "981.51"] and "<td>n/a</td>" in html
    assert cells(table([{"n": 1442}, {"n": 981}])) == ["1,442", "981"]
    assert cells(table([{"share": 0.5}, {"share": 0.25}])) == ["0.500", "0.250"]
    assert cells(table([{"p": 0.5}, {"p": 0.0001}])) == ["0.5", "0.0001"]
    assert cells(table([{"x": 123456.7}, {"x": 12.6}])) == ["123,457", "13"]
    write = column_format(["text", True, 2.5])
    assert (write("text"), write(True), write(2.5)) == ("text", "yes", "2.500")


def test_field_names_in_header_tooltips():
    html = table([{"r before": 0.5, "group": "Female"}], fields={"r before": "r_before"})
    assert '<th title="r_before">r before</th>' in html and "<th>group</th>" in html


def test_costs_with_units():
    loan = Labels({"audit": {"units": {"AnnualSalary": "USD per year", "AccountBalance": "USD"}}})
    assert loan.cost_unit("raguel") == "weighted distance in the features' units (USD, USD per year)"
    assert Labels({"audit": {"units": {"a": "USD", "b": "USD"}}}).cost_unit("raguel") == "USD"
    assert loan.cost_unit("fgce", {"fgce": {"cost": "hops"}}) == "hops"
    assert loan.cost_unit("fgce", {}) == "distance, features scaled to [0, 1]"


def test_data_period(tmp_path):
    lake = tmp_path / "lake"
    (lake / "g=1").mkdir(parents=True)
    pq.write_table(pa.table({"_id": ["1", "2"], "activity_year": [2023, 2023],
                             "decided_on": [dt.date(2023, 1, 4), dt.date(2023, 12, 28)], "income": [1.0, 2.0]}),
                   lake / "g=1" / "data_0.parquet")
    assert data_period(str(lake)) == "period: activity_year 2023; decided_on 2023-01-04 to 2023-12-28"
    pq.write_table(pa.table({"_id": ["1"], "income": [1.0]}), lake / "g=1" / "data_0.parquet")
    assert data_period(str(lake)).startswith("no date or activity year is recorded")
    assert "not in the lake" in data_period(str(tmp_path / "gone"))


def test_plots_are_compact_and_keep_their_text():
    """Coordinates to two decimals, no metadata or indentation; the text as drawn."""
    from aequum.flows.reporting import plots

    fig = plots.figure(3, 2)
    ax = fig.subplots()
    ax.plot([0.0125, 0.0375], [1.0, 2.0])
    ax.set_xticks([0.0125, 0.0375], ["0.0125", "0.0375"])
    ax.set_xlabel("Δp = p_control − p_test")
    svg = plots.to_svg(fig, "t")
    assert ">0.0125<" in svg and ">0.0375<" in svg and "Δp = p_control − p_test" in svg
    assert "<metadata>" not in svg and ">\n" not in svg.rstrip()
    assert not re.search(r'(?:d|x|y|transform)="[^"]*\d\.\d{3}', svg)
    assert svg.startswith('<svg role="img" aria-label="t" ') and svg.rstrip().endswith("</svg>")


def test_intersections_read_as_their_parts_values():
    labels = Labels({"audit": {"groups": [{"attribute": "race", "protected": "Black", "reference": "White"},
                                          {"attribute": "sex", "protected": "Female", "reference": "Male"}]}})
    assert labels.group("race&sex", "protected") == "Black & Female"
    assert labels.versus("race&sex", "protected") == "Black & Female against White & Male"
    assert labels.group("race&age", "protected") == "protected group of race&age"  # age: no values recorded
