"""The audit.findings view: one tidy row per run x engine x group x finding, built from
per-engine part views (sql/views/findings_<engine>.sql) that appear with their tables."""
from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

from conftest import REPO
from aequum.flows.store.warehouse import SQL_DIR, Warehouse

CONTRACT = ["run_id", "engine", "attribute", "group_name", "finding", "headline", "flagged", "measure",
            "value", "ci_low", "ci_high", "confidence", "p_value", "significant", "individuals",
            "cases_table", "statement", "estimand", "basis", "evidence", "robust", "robustness_value",
            "e_value"]


def columns(wh: Warehouse, view: str) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in wh.con.execute(f"DESCRIBE SELECT * FROM audit.{view}").fetchall()]


def test_empty_warehouse_has_an_empty_findings_view_with_the_contract(warehouse):
    assert [c for c, _ in columns(warehouse, "findings")] == CONTRACT + ["claim", "groups_inferred", "rank"]
    assert warehouse.con.execute("SELECT count(*) FROM audit.findings").fetchall() == [(0,)]


def test_every_engine_part_has_the_contract_columns_and_types(small_audit_warehouse):
    with Warehouse(small_audit_warehouse, read_only=True) as wh:
        contract = None
        files = {p.stem for p in (SQL_DIR / "views").glob("findings_*.sql")}
        views = {r[0] for r in wh.con.execute(
            "SELECT view_name FROM duckdb_views() WHERE schema_name = 'audit'").fetchall()}
        parts = sorted(files & views)  # findings_pba appears with PBA's tables (tests/test_report.py)
        assert {"findings_outcome", "findings_cst", "findings_fgce", "findings_raguel"} <= set(parts)
        for part in parts:
            cols = columns(wh, part)
            assert [c for c, _ in cols] == CONTRACT, part
            contract = contract or cols
            assert cols == contract, part
        engines = {r[0] for r in wh.con.execute("SELECT DISTINCT engine FROM audit.findings").fetchall()}
        assert engines == {"outcome", "cst", "fgce", "raguel"}


def test_findings_agree_with_the_engine_tables(small_audit_warehouse):
    with Warehouse(small_audit_warehouse, read_only=True) as wh:
        f = wh.con.sql("SELECT * FROM audit.findings").to_arrow_table().to_pylist()
        gaps = wh.result("outcome_gaps").to_pylist()
        summary = wh.result("cst_summary").to_pylist()
    assert all(r["statement"] and r["run_id"] == "loan-small" for r in f)
    outcome = [r for r in f if r["engine"] == "outcome" and r["measure"] == "di_ratio"]
    assert len(outcome) == len(gaps)
    for g in gaps:
        (r,) = [r for r in outcome if (r["attribute"], r["group_name"]) == (g["attribute"], g["group_name"])]
        assert r["value"] == g["di_ratio"] and (r["ci_low"], r["ci_high"]) == (g["di_ci_low"], g["di_ci_high"])
        # a raw disparity of a disparate-treatment audit describes; it flags nothing about the lender
        assert r["p_value"] == g["spd_p_adjusted"] and r["claim"] == "descriptive" and r["flagged"] is False
        assert r["individuals"] == (g["shortfall"] if g["spd"] < 0 else 0)
        assert f"{100 * g['favourable_rate']:.1f}%" in r["statement"]
    cst = [r for r in f if r["engine"] == "cst"]
    assert len(cst) == len(summary)
    (head,) = [r for r in cst if r["headline"]]
    top = max(s["k"] for s in summary if s["method"] == "CST")
    (s,) = [s for s in summary if s["method"] == "CST" and s["k"] == top]
    assert head["individuals"] == s["significant"] and head["confidence"] == pytest.approx(0.95)
    # CF has no sample and no test: its finding counts the decisions that flip
    (cf,) = [r for r in cst if r["finding"] == "counterfactual fairness"]
    (s_cf,) = [s for s in summary if s["method"] == "CF"]
    assert s_cf["significant"] is None and cf["significant"] is None
    assert cf["individuals"] == s_cf["discriminated"] and cf["value"] == s_cf["discriminated_share"]
    assert f"k = {top}" in head["finding"] and f"{s['significant']} of {s['complainants']}" in head["statement"]


def test_outcome_findings_show_small_groups_and_the_eeoc_direction(warehouse):
    from aequum.engines.outcome.engine import GAPS, METRICS

    base = {c: None for c in GAPS.names}
    gaps = [
        {**base, "attribute": "race", "group_name": "protected", "reference_group": "reference",
         "n_group": 12, "n_reference": 500, "di_ratio": 0.5, "favourable_rate": 0.3, "spd": -0.3,
         "too_small": True, "verdict": "too small to judge", "confidence": 0.95},
        {**base, "attribute": "sex", "group_name": "protected", "reference_group": "reference",
         "n_group": 400, "n_reference": 500, "di_ratio": 1.5, "di_ci_low": 1.3, "di_ci_high": 1.7,
         "favourable_rate": 0.9, "reference_rate": 0.6, "spd": 0.3, "spd_p_adjusted": 1e-9,
         "significant": True, "too_small": False, "four_fifths_violation": False,
         "four_fifths_vs_highest": False, "verdict": "significant difference", "confidence": 0.95,
         "correction": "holm", "shortfall": 0},
    ]
    mbase = {c: None for c in METRICS.names}
    metrics = [
        {**mbase, "attribute": "sex", "group_name": "protected", "is_reference": False, "n": 400,
         "n_favourable": 360, "favourable_rate": 0.9},
        {**mbase, "attribute": "sex", "group_name": "reference", "is_reference": True, "n": 500,
         "n_favourable": 300, "favourable_rate": 0.6, "highest_group": "protected",
         "ratio_to_highest": 0.6 / 0.9, "four_fifths_vs_highest": True},
    ]
    warehouse.write_results("r", {"outcome_gaps": (GAPS, pa.Table.from_pylist(gaps, GAPS)),
                                  "outcome_metrics": (METRICS, pa.Table.from_pylist(metrics, METRICS))})
    warehouse.create_views()
    rows = {(r["attribute"], r["finding"]): r for r in
            warehouse.con.sql("SELECT * FROM audit.findings").to_arrow_table().to_pylist()}
    small = rows[("race", "too small to judge")]
    assert small["flagged"] is False and "too small to judge" in small["statement"]
    assert small["statement"].startswith("Only 12 applicants in the protected group of race against 500 ")
    sex = rows[("sex", "disparate impact")]
    assert "significant (p < 0.001, holm-adjusted)" in sex["statement"]
    assert sex["claim"] == "descriptive" and sex["flagged"] is False  # no run asks about disparate impact
    eeoc = rows[("sex", "four-fifths of the highest rate")]
    assert eeoc["group_name"] == "reference" and eeoc["claim"] == "descriptive" and eeoc["flagged"] is False
    assert eeoc["individuals"] == 150 and "under four fifths of the highest rate, 90.0%" in eeoc["statement"]


def test_a_new_engine_part_is_one_more_view(warehouse):
    """What the lead does for CEC / PBA: add sql/views/findings_<engine>.sql; here the same
    part created directly, then picked up by the union on the next create_views."""
    values = {c: "NULL" for c in CONTRACT} | {"run_id": "'r'", "engine": "'zz'", "statement": "'x'"}
    warehouse.con.execute("CREATE VIEW audit.findings_zz AS SELECT "
                          + ", ".join(f"{v} AS {c}" for c, v in values.items()))
    warehouse.create_views()
    rows = warehouse.con.execute("SELECT engine, run_id, statement FROM audit.findings").fetchall()
    assert rows == [("zz", "r", "x")]


PAIRS = [("race=Asian", "protected"), ("race=Asian", "reference"), ("sex", "reference"), ("race", "reference"),
         ("ethnicity&sex", "protected"), ("race&sex", "reference"), ("race&sex", "race=protected,x=reference")]


def _labelled_run(wh, run_id: str = "r") -> None:
    """A run of the HMDA spec's parameters with its audit.group_labels rows for PAIRS, as the
    writer makes them (flows.store.group_labels: the report's words)."""
    from aequum.engines.core.spec import load_spec
    from aequum.flows.store.group_labels import group_label_rows

    params = load_spec(SQL_DIR.parent / "data" / "specs" / "hmda.yaml").run_parameters()
    wh.start_run(run_id, "hmda", "h", "test", params)
    wh.insert_run_rows("group_labels", run_id, group_label_rows(params, PAIRS))
    wh.create_views()


def test_group_labels_of_a_per_value_comparison(tmp_path):
    """audit.group_label reads the run's own audit.group_labels rows (the report's words): both
    groups of a per-value comparison (race=Asian: "Asian", "White"), an intersection's side by its
    parts' values; a group the run's labels do not hold, by its code; audit.applicants makes the
    subject of the findings' sentences from it."""
    with Warehouse(tmp_path / "wh.duckdb") as wh:
        _labelled_run(wh)
        got = wh.con.execute("SELECT audit.group_label('r', 'race=Asian', 'protected'), "
                             "audit.group_label('r', 'race=Asian', 'reference'), audit.group_label('r', 'sex', 'reference'), "
                             "audit.group_label('r', 'race', 'reference'), audit.group_label('r', 'ethnicity&sex', 'protected'), "
                             "audit.group_label('r', 'x&sex', 'protected')").fetchone()
        assert got == ("Asian", "White", "Male", "White", "Hispanic or Latino & Female",
                       "protected group of x&sex")  # not among the run's labels: as the tables name it
        said = wh.con.execute("SELECT audit.applicants('r', 'race=Asian', 'reference'), "
                              "audit.applicants('r', 'x&sex', 'protected'), "
                              "audit.applicants('r', 'race&sex', 'race=protected,x=reference')").fetchone()
        assert said == ("White applicants", "applicants in the protected group of x&sex",
                        "applicants in the minority race (pooled) & x=reference")
        wh.con.execute("INSERT INTO audit.group_labels VALUES ('r', 'sex', 'protected', 'women', 'women against men')")
        assert wh.con.execute("SELECT audit.group_label('r', 'sex', 'protected'), audit.applicants('r', 'sex', 'protected'), "
                              "audit.group_label('other', 'sex', 'protected')").fetchone() == (
            "women", "women applicants", "protected group of sex")  # the run's own row, only the run's


def test_a_run_written_before_the_labels_is_labelled_when_the_warehouse_is_next_opened(small_audit_warehouse,
                                                                                        tmp_path):
    """A finished run without audit.group_labels rows (written before the table existed) gets
    them from its parameters and rows the next time the warehouse is opened for writing, so its
    findings' sentences name its groups as a new run's do."""
    import shutil

    path = tmp_path / "old.duckdb"
    shutil.copy(small_audit_warehouse, path)
    with Warehouse(path) as wh:
        before = wh.con.execute("SELECT * FROM audit.group_labels ORDER BY ALL").fetchall()
        said = wh.con.execute("SELECT statement FROM audit.findings ORDER BY ALL").fetchall()
        wh.con.execute("DELETE FROM audit.group_labels")  # as an older aequum left it
        wh.con.execute("COMMENT ON TABLE audit.runs IS ''")  # with its views
    with Warehouse(path) as wh:
        assert wh.con.execute("SELECT * FROM audit.group_labels ORDER BY ALL").fetchall() == before
        assert wh.con.execute("SELECT statement FROM audit.findings ORDER BY ALL").fetchall() == said
    assert any(s.startswith("Female applicants") for (s,) in said)


def test_group_labels_read_in_duckdb_1x_from_a_column_named_like_their_own_aliases(tmp_path):
    """The warehouse reads in every DuckDB since 1.0 (README, "The warehouse"): the label macros
    called on columns of a table aliased ``g`` (as sql/views/findings_outcome.sql calls them)
    give the same labels in DuckDB 1.x as in the project's DuckDB. .ci/setup installs DuckDB 1.5
    beside the project's DuckDB."""
    query = ("SELECT audit.applicants('r', g.a, g.n) AS label FROM (VALUES ('race=Asian', 'protected'), "
             "('ethnicity&sex', 'protected'), ('race&sex', 'reference'), ('x&sex', 'protected'), "
             "('race', 'reference'), ('race&sex', 'race=protected,sex=reference')) g(a, n) ORDER BY label")
    path = tmp_path / "wh.duckdb"
    with Warehouse(path) as wh:
        _labelled_run(wh)
        expected = [r[0] for r in wh.con.execute(query).fetchall()]
    assert "Hispanic or Latino & Female applicants" in expected and "Asian applicants" in expected
    assert "applicants in the protected group of x&sex" in expected
    duckdb1 = REPO / ".venv" / "duckdb-1.x"
    if not (duckdb1 / "duckdb").is_dir():
        pytest.skip(f"DuckDB 1.x is not installed at {duckdb1} (.ci/setup installs it)")
    probe = ("import duckdb, sys; assert duckdb.__version__.startswith('1.'), duckdb.__version__; "
             "c = duckdb.connect(sys.argv[1], read_only=True); "
             "[print(r[0]) for r in c.execute(sys.argv[2]).fetchall()]")
    out = subprocess.run([sys.executable, "-c", probe, str(path), query], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(duckdb1)}, check=True).stdout
    assert out.splitlines() == expected


def test_a_pooled_group_ranks_after_the_named_group_that_carries_the_effect(warehouse):
    """race (Black, Asian, … pooled) and race=Black both flagged: the named group leads."""
    from aequum.engines.regression.engine import ESTIMATES
    from test_regression_engine import _estimate

    comparisons = [{"label": "race=Black", "attribute": "race", "value": "Black"},
                   {"label": "race=Asian", "attribute": "race", "value": "Asian"}]
    warehouse.start_run("r", "s", "h", "test", {"audit": {"question": "disparate_treatment", "inputs": "partial",
                                                          "comparisons": comparisons}})
    rows = [_estimate("race", logit_p_adjusted=1e-9), _estimate("race=Black", logit_p_adjusted=1e-4),
            _estimate("race=Asian", logit_p_adjusted=0.4, logit_significant=False)]
    warehouse.write_results("r", {"regression_estimates": (ESTIMATES, pa.Table.from_pylist(rows, ESTIMATES))})
    warehouse.create_views()
    rank = dict(warehouse.con.execute("SELECT attribute, rank FROM audit.findings").fetchall())
    assert rank["race=Black"] < rank["race"] < rank["race=Asian"]  # though the pooled p is smaller
