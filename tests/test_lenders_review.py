"""A flagged lender's file review (``aequum report --cases RANK`` on a lenders finding;
flows.reporting.lender_review) on the generated lending market with a pricing add-on at three
named lenders: the exhibit holds the lender's own records only, cases of the protected group
beside comparators of the reference group of the same product, and the comparators are the
nearest by the stated distance (checked by brute force against every eligible record); the
denial review pairs refused protected applicants with approved reference ones; the page fits
1280 px in Chromium."""
from __future__ import annotations

import csv

import numpy as np
import pandas as pd
import pytest

from aequum.flows.commands.cli import main
from aequum.flows.reporting import lender_review
from aequum.flows.reporting.run import Run
from aequum.flows.store.lake_reading import load_lake
from aequum.flows.store.warehouse import Warehouse

ROWS, SEED, WORLD = 200_000, 3, "named_pricing_penalty"
DTI = ["<20%", "20%-<30%", "30%-<36%", "36", "37", "38", "39", "40", "41", "42", "43", "44", "45", "46",
       "47", "48", "49", "50%-60%", ">60%"]


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    from audit_tables import small_audit

    def edit(raw):
        raw["source"].update(world=WORLD, seed=SEED)
        raw["engines"]["lenders"] = {"attributes": ["race=Black or African American", "ethnicity"]}
    return small_audit(tmp_path_factory.mktemp("review"), rows=ROWS, engines=["lenders"],
                       spec_name="hmda_market.yaml", edit=edit, records=True, run_id="lr")


def lender_finding(wh_path, attribute="race=Black or African American"):
    with Warehouse(wh_path, read_only=True) as wh:
        return wh.con.execute("SELECT rank, group_name FROM audit.findings WHERE engine = 'lenders' AND NOT headline "
                              "AND attribute = ? ORDER BY rank LIMIT 1", [attribute]).fetchone()


def records(wh_path):
    with Warehouse(wh_path, read_only=True) as wh:
        (lake,) = wh.con.execute("SELECT lake_path FROM audit.datasets").fetchone()
    return load_lake(lake).to_pandas()


def brute_distances(own: pd.DataFrame, case: pd.Series, pool: pd.DataFrame, controls: list[str], logs: set[str]):
    """The mixed distance written out: |Δz| per numeric control (z over the lender's records with
    every control; logs where the engine takes logs), |Δrank|/(levels − 1) for the DTI bins,
    summed and divided by the number of controls."""
    total = np.zeros(len(pool))
    for c in controls:
        if c == "debt_to_income_ratio":
            rank = lambda s: s.astype(str).map({v: i for i, v in enumerate(DTI)}) / (len(DTI) - 1)  # noqa: E731
            total += np.abs(rank(pool[c]).to_numpy() - rank(pd.Series([case[c]])).iloc[0])
        else:
            f = (lambda v: np.log(v.astype(float))) if c in logs else (lambda v: v.astype(float))
            allv = f(own[c])
            z = lambda v: (f(v) - allv.mean()) / allv.std(ddof=0)  # noqa: E731
            total += np.abs(z(pool[c]).to_numpy() - float(z(pd.Series([case[c]])).iloc[0]))
    return total / len(controls)


def test_price_review_holds_the_lenders_own_nearest_comparators(audited, tmp_path):
    rank, lei = lender_finding(audited)
    out = tmp_path / "review"
    assert main(["report", "--warehouse", str(audited), "--cases", str(rank), "--limit", "8", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.with_suffix(".csv").open()))
    assert len({r["case"] for r in rows}) == 8 and {r["lei"] for r in rows} == {lei}
    recs = records(audited)
    recs["_id"] = recs["_id"].astype(str)
    by_id = recs.set_index("_id")
    assert set(by_id.loc[[r["record_id"] for r in rows], "lei"].astype(str)) == {lei}   # the lender's own only
    own = recs[recs.lei.astype(str) == lei]
    controls = ["income", "combined_loan_to_value_ratio", "debt_to_income_ratio", "property_value"]
    own = own.dropna(subset=[*controls, "loan_type"])
    priced = own[(own.action_taken.astype(str) == "1") & own.rate_spread.notna()]
    pool = priced[priced["_g_race=Black or African American"] == 0]
    excess = []
    for case_id in dict.fromkeys(r["case"] for r in rows):
        mine = [r for r in rows if r["case"] == case_id]
        case = by_id.loc[case_id]
        assert mine[0]["role"] == "case" and case["_g_race=Black or African American"] == 1
        comps = [r for r in mine if r["role"] == "comparator"]
        assert len(comps) == lender_review.K
        assert all(str(by_id.loc[r["record_id"], "loan_type"]) == str(case["loan_type"]) for r in comps)  # same product
        same = pool[pool.loan_type.astype(str) == str(case["loan_type"])]
        d = np.sort(brute_distances(own, case, same, controls, set()))
        assert [float(r["distance"]) for r in comps] == pytest.approx(list(d[:lender_review.K]), abs=1e-9)
        prices = [float(by_id.loc[r["record_id"], "rate_spread"]) for r in comps]
        assert float(mine[0]["excess"]) == pytest.approx(float(case["rate_spread"]) - np.mean(prices))
        excess.append(float(mine[0]["excess"]))
    assert excess == sorted(excess, reverse=True)          # the largest excess over its comparators first


def test_denial_review_pairs_refused_protected_with_approved_reference(audited):
    rank, lei = lender_finding(audited, "ethnicity")
    with Warehouse(audited, read_only=True) as wh:
        run = Run.open(wh, "lr")
        f = {"engine": "lenders", "headline": False, "group_name": lei, "attribute": "ethnicity", "rank": rank,
             "finding": "lender against peers: denial"}
        review = lender_review.build(run, f, limit=10)
    recs = records(audited)
    recs["_id"] = recs["_id"].astype(str)
    by_id = recs.set_index("_id")
    assert review.shown == 10 and review.cases > 10
    assert set(review.controls) == {"income", "loan_amount", "property_value", "combined_loan_to_value_ratio",
                                    "debt_to_income_ratio"}   # the regression's, less the product held equal
    assert review.exact == ["loan_type", "loan_purpose"]
    own = recs[recs.lei.astype(str) == lei].dropna(subset=review.controls + review.exact)
    logs = {"income", "loan_amount", "property_value"}
    pool = own[(own._g_ethnicity == 0) & (own._decision == 1)]
    for row in review.rows:
        r = by_id.loc[row["record_id"]]
        assert str(r.lei) == lei
        if row["role"] == "case":
            case = r
            assert r._g_ethnicity == 1 and r._decision == 0
            same = pool[(pool.loan_type.astype(str) == str(case.loan_type))
                        & (pool.loan_purpose.astype(str) == str(case.loan_purpose))]
            d = np.sort(brute_distances(own, case, same, review.controls, logs))
        else:
            assert r._g_ethnicity == 0 and r._decision == 1 and str(r.loan_type) == str(case.loan_type)
            assert str(r.loan_purpose) == str(case.loan_purpose)
            assert row["distance"] == pytest.approx(d[row["rank"] - 1], abs=1e-9)


def test_a_headline_lenders_finding_has_no_file_review(audited, capsys):
    with Warehouse(audited, read_only=True) as wh:
        (rank,) = wh.con.execute("SELECT min(rank) FROM audit.findings "
                                 "WHERE engine = 'lenders' AND headline").fetchone()
    assert main(["report", "--warehouse", str(audited), "--cases", str(rank)]) == 2
    assert "no matched cases" in capsys.readouterr().err


def test_review_page_fits_1280_px_in_chromium(audited, tmp_path):
    from test_report_browser import chromium, open_in_chromium

    chromium()
    rank, _ = lender_finding(audited)
    out = tmp_path / "page"
    assert main(["report", "--warehouse", str(audited), "--cases", str(rank), "--limit", "3", "--out", str(out)]) == 0
    seen = open_in_chromium(out.with_suffix(".html"))
    assert seen["errors"] == [] and seen["blocked"] == []
    assert seen["too_wide"] == [] and seen["scroll_width"][0] <= seen["scroll_width"][1]
    assert [s for s, _ in seen["sections"]] == ["finding", "case-1", "case-2", "case-3"]


def test_the_report_writes_and_links_each_flagged_lenders_file_review(audited, tmp_path):
    from aequum.flows.commands.report import REPORT_CASES, write_report

    with Warehouse(audited, read_only=True) as wh:
        flagged = wh.con.execute("SELECT rank, group_name FROM audit.findings WHERE engine = 'lenders' AND flagged "
                                 "AND NOT headline ORDER BY rank").fetchall()
    assert len(flagged) == 6          # three lenders × (Black, Hispanic) rate spread
    out = write_report(audited, "lr", tmp_path / "r.html")
    text = out.read_text(encoding="utf-8")
    for rank, lei in flagged:
        path = tmp_path / "r-cases" / f"finding-{rank}-lenders.csv"
        rows = list(csv.DictReader(path.open()))
        assert {r["lei"] for r in rows} == {lei} and len({r["case"] for r in rows}) == REPORT_CASES
        assert f'r-cases/finding-{rank}-lenders.csv' in text


def test_the_panel_names_the_flagged_lenders(audited, tmp_path, capsys):
    """`aequum panel` loads the reporter panel's names by LEI (pipe or comma CSV, blanks left out
    and counted); the per-lender findings and the report name the lender beside its LEI; a panel
    without the columns or with two names for one LEI is one line, exit 2, nothing written."""
    import shutil

    wh = tmp_path / "wh.duckdb"
    shutil.copy(audited, wh)
    rank, lei = lender_finding(wh)
    panel = tmp_path / "panel.csv"
    panel.write_text("lei|respondent_name|agency\n" + f"{lei}|First Example Bank|9\n" + "|No LEI|9\nOTHER|  |9\n")
    assert main(["panel", str(panel), "--warehouse", str(wh)]) == 0
    assert "1 lenders' names in audit.lender_panel; 2 rows without an LEI or a name left out" in capsys.readouterr().out
    with Warehouse(wh, read_only=True) as w:
        (statement,) = w.con.execute("SELECT statement FROM audit.findings WHERE rank = ?", [rank]).fetchone()
    assert statement.startswith(f"Lender First Example Bank (LEI {lei}) (N = ")
    out = tmp_path / "r.html"
    assert main(["report", "lr", "--warehouse", str(wh), "--out", str(out)]) == 0
    assert f"First Example Bank ({lei})" in out.read_text(encoding="utf-8")
    capsys.readouterr()
    for text, message in (("lei,name\nX,Y\n", "has no column 'respondent_name'"),
                          ("lei,respondent_name\nX,Bank A\nX,Bank B\n", "LEI 'X' has more than one name")):
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        assert main(["panel", str(bad), "--warehouse", str(wh)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0]
    with Warehouse(wh, read_only=True) as w:
        assert w.con.execute("SELECT count(*) FROM audit.lender_panel").fetchall()[0][0] == 1
