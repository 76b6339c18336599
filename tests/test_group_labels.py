"""Readable groups outside the report: audit.group_labels (written with a run's results) gives
every group code the label the report uses, and `aequum show` prints it beside the codes, in the
terminal and in CSV / Parquet / XLSX files; the findings view carries it (group_label)."""
from __future__ import annotations

import csv
import io
import zipfile
from xml.etree import ElementTree

import pytest

from aequum.flows.commands.cli import main
from aequum.flows.store.group_labels import group_label_rows
from aequum.flows.store.warehouse import Warehouse

HMDA_GROUPS = {"audit": {"groups": [
    {"attribute": "race", "protected": "minority race (pooled)", "reference": "White"},
    {"attribute": "sex", "protected": "Female", "reference": "Male"},
    {"attribute": "tract", "protected": "majority-minority tract (> 50 %)", "reference": "tract under 20 % minority"},
    {"attribute": "race=Asian", "protected": "Asian", "reference": "White"}],
    "comparisons": [{"label": "race=Asian", "attribute": "race", "value": "Asian"}]}}


def test_labels_of_pooled_groups_intersections_and_comparisons():
    rows = group_label_rows(HMDA_GROUPS, [("race", "protected"), ("race&sex", "race=protected,sex=protected"),
                                          ("race&sex", "protected"), ("race=Asian", "reference"),
                                          ("tract", "protected"), ("sex", "all lenders")]).to_pylist()
    got = {(r["attribute"], r["group_name"]): (r["group_label"], r["versus_label"]) for r in rows}
    assert got[("race", "protected")] == ("minority race (pooled)", "minority race (pooled) against White")
    assert got[("race&sex", "race=protected,sex=protected")][0] == "minority race (pooled) & Female"
    assert got[("race&sex", "protected")] == ("minority race (pooled) & Female",
                                              "minority race (pooled) & Female against White & Male")
    assert got[("race=Asian", "reference")][0] == "White"
    assert got[("tract", "protected")][1] == "majority-minority tract (> 50 %) against tract under 20 % minority"
    assert got[("sex", "all lenders")][0] == "all lenders"


def test_a_per_value_comparison_keeps_its_own_value_not_the_pooled_label():
    from aequum.engines.core.spec import load_spec
    from conftest import REPO

    groups = {g["attribute"]: g for g in
              load_spec(REPO / "data" / "specs" / "hmda.yaml").run_parameters()["audit"]["groups"]}
    assert groups["race"]["protected"] == "minority race (pooled)"
    assert groups["race=Asian"]["protected"] == "Asian" and groups["race=Asian"]["reference"] == "White"


def _csv(capsys, *args) -> list[dict]:
    capsys.readouterr()
    assert main(["show", *args, "--format", "csv"]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def test_show_prints_labels_for_the_loan_spec(small_audit_warehouse, capsys, monkeypatch):
    wh = str(small_audit_warehouse)
    monkeypatch.setenv("COLUMNS", "150")
    capsys.readouterr()
    assert main(["show", "findings", "--warehouse", wh]) == 0
    assert "Female against Male" in capsys.readouterr().out
    assert main(["show", "outcome_gaps", "--warehouse", wh]) == 0
    out = capsys.readouterr().out
    assert "group_label" in out and "Female" in out and "Male" in out
    findings = _csv(capsys, "findings", "--warehouse", wh)
    assert [int(f["rank"]) for f in findings] == list(range(1, len(findings) + 1))  # ranked
    assert {f["group_label"] for f in findings if f["group_name"] == "protected"} == {"Female against Male"}


@pytest.fixture(scope="module")
def hmda_warehouse(tmp_path_factory):
    from audit_tables import small_audit

    def edit(raw):
        raw.pop("model")

    return str(small_audit(tmp_path_factory.mktemp("hmda_labels"), rows=20_000, engines=["outcome"],
                           run_id="hmda-labels", spec_name="hmda.yaml", edit=edit))


def test_show_prints_labels_for_the_hmda_spec(hmda_warehouse, capsys, monkeypatch):
    wh = hmda_warehouse
    monkeypatch.setenv("COLUMNS", "150")  # a terminal wide enough for the codes and their labels
    capsys.readouterr()
    assert main(["show", "outcome_gaps", "--warehouse", wh, "--limit", "100"]) == 0
    out = capsys.readouterr().out
    assert "minority race (pooled)" in out and "Black or African American" in out
    gaps = {(g["attribute"], g["group_name"]): g for g in _csv(capsys, "outcome_gaps", "--warehouse", wh)}
    assert gaps[("race", "protected")]["group_label"] == "minority race (pooled)"
    assert gaps[("race", "protected")]["reference_group_label"] == "White"
    assert gaps[("race=Black or African American", "protected")]["group_label"] == "Black or African American"
    assert gaps[("tract", "protected")]["group_label"] == "majority-minority tract (> 50 %)"
    cell = gaps[("race&ethnicity&sex", "race=protected,ethnicity=reference,sex=protected")]
    assert cell["group_label"] == "minority race (pooled) & Not Hispanic or Latino & Female"
    findings = _csv(capsys, "findings", "--warehouse", wh)
    labels = {f["group_label"] for f in findings}
    assert "minority race (pooled) against White" in labels and "Female against Male" in labels
    assert not any(" / " in label or label in ("protected", "reference") for label in labels)
    with Warehouse(wh, read_only=True) as w:  # the trend view a BI tool reads carries it too
        trend = w.con.execute("SELECT DISTINCT group_label FROM audit.outcome_trends "
                              "WHERE attribute = 'sex'").fetchall()
    assert trend == [("Female",)]


def test_findings_as_a_spreadsheet(hmda_warehouse, tmp_path, capsys):
    out = tmp_path / "findings.xlsx"
    assert main(["show", "findings", "--warehouse", hmda_warehouse, "--format", "xlsx", "--out", str(out)]) == 0
    findings = _csv(capsys, "findings", "--warehouse", hmda_warehouse)
    ns = {"s": "http://schemas.openxmlformats.org/spreadsheetml/2006/main"}
    with zipfile.ZipFile(out) as z:
        assert {"[Content_Types].xml", "xl/workbook.xml", "xl/worksheets/sheet1.xml"} <= set(z.namelist())
        sheet = ElementTree.fromstring(z.read("xl/worksheets/sheet1.xml"))
    rows = sheet.findall(".//s:sheetData/s:row", ns)
    assert len(rows) == len(findings) + 1

    def cells(row) -> dict[str, str]:  # column letter -> text (an empty cell is left out)
        return {c.get("r").rstrip("0123456789"): c.findtext(".//s:t", namespaces=ns) or c.findtext("s:v", namespaces=ns)
                for c in row}

    header = cells(rows[0])
    assert list(header.values())[:5] == ["run_id", "engine", "attribute", "group_name", "group_label"]
    first = {header[col]: value for col, value in cells(rows[1]).items()}
    assert first["group_label"] == findings[0]["group_label"] and first["statement"] == findings[0]["statement"]
    assert float(first["rank"]) == 1
    assert main(["show", "findings", "--warehouse", hmda_warehouse, "--format", "xlsx"]) == 2
    assert "--format xlsx needs --out" in capsys.readouterr().err
