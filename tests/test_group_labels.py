"""Readable groups outside the report: audit.group_labels (written with a run's results) gives
every group code the label the report uses, and `aequum show` prints it beside the codes, in the
terminal and in CSV / Parquet / XLSX files; the findings view carries it (group_label)."""
from __future__ import annotations

import csv
import io
import zipfile
from xml.etree import ElementTree

import pyarrow as pa
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
    said = [f["statement"] for f in findings]  # the sentences name the groups the same way
    assert any(s.startswith("Female applicants received favourable decisions at") for s in said)
    assert any("complainants among Female applicants" in s for s in said)
    assert not any(" group of " in s or "protected group" in s for s in said)


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
    said = {(f["attribute"], f["group_name"]): f["statement"] for f in findings if f["headline"] == "true"}
    assert said[("race", "protected")].startswith("minority race (pooled) applicants received favourable decisions "
                                                  "at ") and " for White applicants: " in said[("race", "protected")]
    assert said[("tract", "protected")].startswith("majority-minority tract (> 50 %) applicants received")
    assert not any(" group of " in s or "=protected" in s for s in said.values())
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


def test_every_per_group_table_declares_its_labels_beside_its_codes():
    """Each engine table naming an attribute carries the label of each group code right after it
    (group_label, reference_group_label ...), a per-attribute table the attribute's 'X against Y';
    tables of individuals with no group per row carry none (cst_evidence: 15.7M rows at 1M)."""
    from aequum.engines.registry import ENGINES, get_engine
    from aequum.flows.store.group_labels import labelled_schema

    tables = {t: s for n in ENGINES for t, s in get_engine(n).tables.items()}
    labelled = {t: labelled_schema(s).names for t, s in tables.items()}
    gaps = labelled["outcome_gaps"]
    for code in ("group_name", "reference_group", "highest_group"):
        label = "group_label" if code == "group_name" else f"{code}_label"
        assert gaps[gaps.index(code) + 1] == label
    assert labelled["cec_summary"][labelled["cec_summary"].index("group") + 1] == "group_label"
    pba = labelled["pba_summary"]
    assert pba[pba.index("presented_group") + 1] == "presented_group_label"
    for t in ("regression_estimates", "pricing_estimates", "lender_disparities", "cst_summary", "proxy_gaps",
              "geography_disparities", "market_disparities", "reason_consistency", "regression_coefficients"):
        names = labelled[t]
        attribute = "protected_attribute" if t.startswith("cst") else "attribute"
        assert names[names.index(attribute) + 1] == "group_label", t
    without = {t for t, names in labelled.items() if not any(n.endswith("_label") for n in names)}
    assert without == {"cst_claims", "cst_evidence", "cst_counterfactuals", "cec_pairs", "geography_lenders"}
    assert labelled_schema(labelled_schema(tables["outcome_gaps"])).names == gaps  # once only


def test_the_tables_hold_the_labels_of_audit_group_labels(small_audit_warehouse):
    """What SQL readers get without a join: every label column of the run equals the label
    audit.group_labels gives its (attribute, code); no row without one."""
    from aequum.flows.store.group_labels import label_plan

    checked = 0
    with Warehouse(small_audit_warehouse, read_only=True) as wh:
        for table in wh.query("run_tables")["table_name"].to_pylist():
            names = wh.result(table, "loan-small").schema.names
            if table == "group_labels":
                continue
            attribute = "protected_attribute" if "protected_attribute" in names else "attribute"
            for label in [n for n in names if n.endswith("_label")]:
                code = "group_name" if label == "group_label" and "group_name" in names else (
                    "group" if label == "group_label" and "group" in names else label.removesuffix("_label"))
                per_attribute = code not in names  # the attribute's protected group against its reference
                on = "'protected'" if per_attribute else f't."{code}"'
                wrong = wh.con.execute(
                    f'SELECT count(*) FROM audit."{table}" t LEFT JOIN audit.group_labels l ON l.run_id = t.run_id '
                    f'AND l.attribute = t."{attribute}" AND l.group_name = {on} WHERE t.run_id = $r AND '
                    f'(t."{label}" IS NULL OR t."{label}" <> l.{"versus_label" if per_attribute else "group_label"})',
                    {"r": "loan-small"}).fetchall()[0][0]
                assert wrong == 0, (table, label)
                checked += 1
        assert checked >= 15
        gaps = wh.con.execute("SELECT group_label, reference_group_label FROM audit.outcome_gaps").fetchall()
        assert gaps == [("Female", "Male")]
        assert {r[0] for r in wh.con.execute("SELECT DISTINCT group_label FROM audit.cst_summary").fetchall()} == {
            "Female against Male"}
        assert not label_plan(wh.result("cst_claims", "loan-small").schema)  # individuals: none


def test_an_older_warehouse_takes_the_columns_and_keeps_reading(small_audit_warehouse, tmp_path, capsys):
    """A warehouse written before the tables carried labels: the next run adds the columns
    (at the end, as every added column is), its rows hold them, the older run's rows read their
    labels from audit.group_labels in `aequum show`, and the views are made as before."""
    import shutil

    from aequum.engines.outcome.engine import GAPS, METRICS

    path = tmp_path / "old.duckdb"
    shutil.copy(small_audit_warehouse, path)
    with Warehouse(path) as wh:  # as it was: no label columns
        for table in ("outcome_gaps", "outcome_metrics"):
            for (column,) in wh.con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = 'audit' "
                    "AND table_name = $t AND column_name LIKE '%_label'", {"t": table}).fetchall():
                wh.con.execute(f'ALTER TABLE audit.{table} DROP COLUMN "{column}"')
        wh.create_views()
        gaps = wh.result("outcome_gaps", "loan-small").drop(["run_id"])
        metrics = wh.result("outcome_metrics", "loan-small").drop(["run_id"])
        record = wh.run("loan-small")
        import json

        wh.start_run("later", "loan", "h", "test", json.loads(record["parameters"]))
        wh.write_results("later", {"outcome_gaps": (GAPS, gaps), "outcome_metrics": (METRICS, metrics)})
        wh.record_engine("later", "outcome", "succeeded", 0.1, 1, {"outcome_gaps": 1, "outcome_metrics": 2}, None)
        wh.finish_run("later", "succeeded")
        wh.create_views()
        names = [r[0] for r in wh.con.execute("DESCRIBE audit.outcome_gaps").fetchall()]
        assert names[-3:] == ["group_label", "reference_group_label", "highest_group_label"]
        stored = dict(wh.con.execute("SELECT run_id, group_label FROM audit.outcome_gaps").fetchall())
        assert stored == {"loan-small": None, "later": "Female"}
        assert wh.con.execute("SELECT count(*) FROM audit.findings WHERE engine = 'outcome'").fetchone()[0] > 0
        assert {r[0] for r in wh.con.execute("SELECT group_label FROM audit.outcome_trends").fetchall()} == {"Female"}
    for run_id in ("loan-small", "later"):
        rows = _csv(capsys, "outcome_gaps", "--warehouse", str(path), "--run-id", run_id)
        assert [(r["group_label"], r["reference_group_label"]) for r in rows] == [("Female", "Male")]
        assert list(rows[0])[:5] == ["run_id", "attribute", "group_name", "group_label", "reference_group"]


def test_the_writer_labels_spooled_tables_and_leaves_the_individuals_in_their_files(tmp_path):
    """flows.audit.write_run's outcomes: a per-group table spooled to Parquet comes back in memory
    with its labels (rows in their order), a table of individuals stays in its files, and the
    outcome's counts are unchanged."""
    from aequum.engines.matching.cst.engine import CSTEngine
    from aequum.flows.engine_tasks import EngineOutcome
    from aequum.flows.store.group_labels import label_outcomes

    schemas = CSTEngine.tables
    summary = pa.Table.from_pylist([{"protected_attribute": a, "method": "ST", "k": 10}
                                    for a in ("sex", "race=Asian", "sex")], schemas["cst_summary"])
    claims = pa.Table.from_pylist([{"record_id": str(i), "protected_attribute": "sex", "k": 10} for i in range(5)],
                                  schemas["cst_claims"])
    outcome = EngineOutcome("cst", "succeeded", 1.0, 1, {"cst_summary": summary, "cst_claims": claims},
                            dict(schemas)).spool(tmp_path)
    with Warehouse(tmp_path / "wh.duckdb") as wh:
        wh.start_run("r", "s", "h", "test", HMDA_GROUPS)
        extra, (done,) = label_outcomes(wh, "r", {}, [outcome])
    assert extra == {} and done.row_counts() == outcome.row_counts() == {"cst_summary": 3, "cst_claims": 5}
    labelled = done.result("cst_summary")
    assert labelled.column_names[:2] == ["protected_attribute", "group_label"]
    assert labelled["group_label"].to_pylist() == ["Female against Male", "Asian against White", "Female against Male"]
    assert labelled.drop(["group_label"]).equals(summary)
    assert done.result("cst_claims") == outcome.files["cst_claims"]  # still the paths
    assert done.schemas["cst_summary"].names[1] == "group_label" and done.schemas["cst_claims"] == schemas["cst_claims"]
