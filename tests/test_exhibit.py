"""The matched-pair exhibit (``aequum report --cases RANK`` and the case files beside a report):
each case's complainant beside the comparators the CST engine compared it with (its own
audit.cst_evidence), their recorded values (the staged records) and decisions as the spec
records them; beside a CST or CF complainant its counterfactual point as the engine stored it
(audit.cst_counterfactuals), and a note where a run has none; CEC's regime-B pairs; a bad key is
one line and exit 2."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from aequum.flows.commands.cli import main
from aequum.flows.commands.report import write_report
from aequum.flows.store.warehouse import Warehouse

RUN = "loan-exhibit"


@pytest.fixture(scope="module")
def audited(tmp_path_factory) -> Path:
    """A small loan audit (outcome, CST) whose records are staged in its warehouse and lake."""
    from audit_tables import small_audit

    return small_audit(tmp_path_factory.mktemp("exhibit"), rows=400, engines=["outcome", "cst"], run_id=RUN,
                       records=True)


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def findings(wh: Warehouse) -> list[dict]:
    return wh.con.sql("SELECT * FROM audit.findings WHERE run_id = $run ORDER BY rank",
                      params={"run": RUN}).to_arrow_table().to_pylist()


def staged(wh: Warehouse) -> dict[str, dict]:
    version = wh.run(RUN)["dataset_version"]
    return {str(r["_id"]): r for r in wh.staged(version).to_pylist()}


@pytest.mark.parametrize("method, label, centre", [("CST", "counterfactual situation testing, k = 50", "counterfactual"),
                                                   ("ST", "situation testing, k = 100", "factual")])
def test_cases_are_the_engines_neighbours_with_their_records(audited, tmp_path, capsys, method, label, centre):
    with Warehouse(audited, read_only=True) as wh:
        (f,) = [f for f in findings(wh) if f["engine"] == "cst" and f["finding"] == label]
        k = int(label.rsplit("= ", 1)[1])
        significant = wh.con.execute(
            "SELECT record_id, one_sided_low FROM audit.cst_claims WHERE run_id = ? AND method = ? AND k = ? "
            "AND significant ORDER BY one_sided_low DESC", [RUN, method, k]).fetchall()
        evidence = wh.con.execute(
            "SELECT record_id, search_group, rank, neighbour_id, distance FROM audit.cst_evidence "
            "WHERE run_id = ? AND rank <= ? AND (search_group = 'control' OR centre = ?) "
            "ORDER BY record_id, search_group, rank", [RUN, k, centre]).fetchall()
        records = staged(wh)
    assert f["flagged"] and f["individuals"] == len(significant) >= 5
    out = tmp_path / "cases"
    assert main(["report", RUN, "--warehouse", str(audited), "--cases", str(f["rank"]), "--limit", "5",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out.with_suffix(".csv").resolve()), str(out.with_suffix(".html").resolve())]
    rows = read_csv(out.with_suffix(".csv"))
    cases = list(dict.fromkeys(r["case"] for r in rows))
    # the five surest significant complainants (ties of the bound may order either way)
    bounds = dict(significant)
    assert len(cases) == 5 and all(c in bounds for c in cases)
    assert sorted((bounds[c] for c in cases), reverse=True) == sorted(bounds.values(), reverse=True)[:5]
    for case in cases:
        mine = [r for r in rows if r["case"] == case]
        assert mine[0]["role"] == "complainant" and mine[0]["record_id"] == case and mine[0]["group"] == "Female"
        # CST's test group was searched around the complainant's counterfactual, shown next; ST's
        # around the complainant itself
        assert [r["role"] for r in mine[1:2]] == (["counterfactual"] if method == "CST" else ["control"])
        shown = [(r["role"], int(r["rank"]), r["record_id"], float(r["distance"])) for r in mine
                 if r["role"] in ("control", "test")]
        stored = [(g, rank, nid, d) for rid, g, rank, nid, d in evidence if rid == case]
        assert shown == stored and len(shown) == 2 * k  # every comparator of both groups, nearest first
        assert {r["group"] for r in mine if r["role"] == "test"} == {"Male"}
        assert {r["group"] for r in mine if r["role"] == "control"} == {"Female"}
        for r in mine:  # each person's recorded values and decision, from the staged records
            if r["role"] == "counterfactual":
                continue
            rec = records[r["record_id"]]
            assert float(r["AnnualSalary [USD per year]"]) == rec["AnnualSalary"]
            assert float(r["AccountBalance [USD]"]) == rec["AccountBalance"]
            assert r["Gender"] == str(rec["Gender"])
            assert r["decision"] == ("favourable (1)" if rec["_decision"] == 1 else "unfavourable (-1)")
    page = out.with_suffix(".html").read_text(encoding="utf-8")
    assert page.count('<section id="case-') == 5 and "AnnualSalary [USD per year]" in page
    assert "<td>Male</td>" in page and "<td>Female</td>" in page and "@media print" in page


def test_cf_cases_have_no_comparators(audited, tmp_path):
    with Warehouse(audited, read_only=True) as wh:
        (f,) = [f for f in findings(wh) if f["finding"] == "counterfactual fairness"]
    out = tmp_path / "cf"
    assert main(["report", RUN, "--warehouse", str(audited), "--cases", str(f["rank"]), "--out", str(out)]) == 0
    rows = read_csv(out.with_suffix(".csv"))
    cases = [r for r in rows if r["role"] == "complainant"]
    assert len(cases) == min(f["individuals"], 50) and {r["role"] for r in rows} == {"complainant", "counterfactual"}
    assert {(r["decision"], r["counterfactual_decision"]) for r in cases} == {("unfavourable (-1)", "favourable (1)")}
    # each complainant, then its counterfactual: the reference group's applicant CF compares it with
    assert [r["role"] for r in rows] == ["complainant", "counterfactual"] * len(cases)
    assert all(c["record_id"] == r["record_id"] and r["decision"] == "favourable (1)" and r["group"] == "Male"
               for c, r in zip(rows[::2], rows[1::2]))
    assert "there are no comparators" in out.with_suffix(".html").read_text(encoding="utf-8")


@pytest.mark.parametrize("key, says", [("x7", "is not a finding's rank"), ("999", "has no finding of rank 999"),
                                       ("outcome", "is not a finding's rank")])
def test_a_bad_finding_is_one_line_and_exit_2(audited, tmp_path, capsys, key, says):
    assert main(["report", RUN, "--warehouse", str(audited), "--cases", key, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_finding_without_cases_is_refused(audited, tmp_path, capsys):
    with Warehouse(audited, read_only=True) as wh:
        (f,) = [f for f in findings(wh) if f["engine"] == "outcome" and f["headline"]]
    assert main(["report", RUN, "--warehouse", str(audited), "--cases", str(f["rank"])]) == 2
    assert "has no matched cases" in capsys.readouterr().err


def test_report_writes_and_links_every_flagged_findings_cases(audited, tmp_path):
    out = write_report(audited, RUN, tmp_path / "report.html")
    text = out.read_text(encoding="utf-8")
    with Warehouse(audited, read_only=True) as wh:
        wanted = [f for f in findings(wh) if f["engine"] == "cst" and f["flagged"]]
    files = sorted((tmp_path / "report-cases").iterdir())
    assert sorted(p.name for p in files) == sorted(f"finding-{f['rank']}-cst.csv" for f in wanted)
    for f in wanted:
        assert f'href="report-cases/finding-{f["rank"]}-cst.csv"' in text
        rows = read_csv(tmp_path / "report-cases" / f"finding-{f['rank']}-cst.csv")
        assert len({r["case"] for r in rows}) == min(f["individuals"], 20)
    assert write_report(audited, RUN, tmp_path / "report.html") == out  # written again: the same files
    assert sorted((tmp_path / "report-cases").iterdir()) == files


def test_cec_cases_are_regime_b_pairs(tmp_path):
    from audit_tables import small_audit

    def edit(raw):
        raw["engines"]["cec"] = {"steps": 8}

    path = small_audit(tmp_path, rows=600, engines=["cec"], run_id="cec-exhibit", spec_name="cec_synthetic.yaml",
                       edit=edit, records=True)
    with Warehouse(path, read_only=True) as wh:
        (f,) = wh.con.execute("SELECT rank FROM audit.findings WHERE engine = 'cec' AND group_name = 'all'").fetchall()
        pairs = wh.con.execute("SELECT record_id, counterpart_id, distance FROM audit.cec_pairs WHERE matched "
                               "AND regime = 'B' ORDER BY delta_cec DESC LIMIT 3").fetchall()
        version = wh.run("cec-exhibit")["dataset_version"]
        records = {str(r["_id"]): r for r in wh.staged(version).to_pylist()}
    out = tmp_path / "cec"
    assert main(["report", "cec-exhibit", "--warehouse", str(path), "--cases", str(f[0]), "--limit", "3",
                 "--out", str(out)]) == 0
    rows = read_csv(out.with_suffix(".csv"))
    assert [(r["record_id"], r["role"]) for r in rows] == [x for p in pairs for x in ((p[0], "record"), (p[1], "counterpart"))]
    assert [float(r["distance"]) for r in rows[1::2]] == [p[2] for p in pairs]
    assert all(r["group"] != c["group"] for r, c in zip(rows[::2], rows[1::2]))
    assert all(r["model_decision"] == c["model_decision"] for r, c in zip(rows[::2], rows[1::2]))  # regime B
    features = [c for c in rows[0] if c not in ("finding_rank", "case", "role", "group", "rank", "record_id", "distance",
                                                "decision", "model_decision", "delta_cec", "model_score")]
    assert features and all(r[c] == ("" if records[r["record_id"]][c.split(" [")[0]] is None
                                     else str(records[r["record_id"]][c.split(" [")[0]])) for r in rows for c in features)


def counterfactuals(path: Path, run: str) -> dict[str, dict]:
    with Warehouse(path, read_only=True) as wh:
        rows = wh.con.execute("SELECT record_id, feature, value, decision_counterfactual FROM audit.cst_counterfactuals "
                              "WHERE run_id = ?", [run]).fetchall()
    out: dict[str, dict] = {}
    for rid, feature, value, decision in rows:
        out.setdefault(rid, {"decision": decision})[feature] = value
    return out


def test_the_counterfactual_row_is_the_stored_point(audited, tmp_path):
    """The counterfactual row holds the values the engine stored (audit.cst_counterfactuals), in
    the spec's units, its decision the counterfactual's; the Gender column, not part of the
    distance, is blank; the printable page shows the row."""
    with Warehouse(audited, read_only=True) as wh:
        (f,) = [f for f in findings(wh) if f["finding"] == "counterfactual situation testing, k = 50"]
    points = counterfactuals(audited, RUN)
    out = tmp_path / "cst"
    assert main(["report", RUN, "--warehouse", str(audited), "--cases", str(f["rank"]), "--limit", "4",
                 "--out", str(out)]) == 0
    rows = [r for r in read_csv(out.with_suffix(".csv")) if r["role"] == "counterfactual"]
    assert len(rows) == 4
    for r in rows:
        p = points[r["case"]]
        assert r["record_id"] == r["case"] and r["group"] == "Male" and r["distance"] == r["rank"] == ""
        assert float(r["AnnualSalary [USD per year]"]) == p["AnnualSalary"]
        assert float(r["AccountBalance [USD]"]) == p["AccountBalance"]
        assert r["Gender"] == "" and r["decision"] == ("favourable (1)" if p["decision"] == 1 else "unfavourable (-1)")
    page = out.with_suffix(".html").read_text(encoding="utf-8")
    assert page.count("<td>counterfactual</td>") == 4 and "role counterfactual" in page


def test_without_stored_points_the_exhibit_says_so(tmp_path):
    """A run with engines.cst.evidence: none, and a warehouse written before the table existed,
    list their cases without a counterfactual row and say why."""
    from audit_tables import small_audit

    def edit(raw):
        raw["engines"]["cst"]["evidence"] = "none"

    path = small_audit(tmp_path, rows=400, engines=["cst"], run_id="no-evidence", edit=edit, records=True)
    with Warehouse(path, read_only=True) as wh:
        (f,) = wh.con.execute("SELECT rank FROM audit.findings WHERE finding = 'counterfactual situation testing, "
                              "k = 50'").fetchone()
        assert wh.con.execute("SELECT count(*) FROM audit.cst_counterfactuals").fetchone() == (0,)
    out = tmp_path / "none"
    assert main(["report", "no-evidence", "--warehouse", str(path), "--cases", str(f), "--limit", "3",
                 "--out", str(out)]) == 0
    rows = read_csv(out.with_suffix(".csv"))
    assert [r["role"] for r in rows] == ["complainant"] * 3
    page = out.with_suffix(".html").read_text(encoding="utf-8")
    assert "3 of the 3 cases have no counterfactual point stored" in page

    with Warehouse(path) as wh:  # as a warehouse written before CST stored the points
        wh.con.execute("DROP TABLE audit.cst_counterfactuals")
        wh.con.execute("DELETE FROM audit.aequum_tables WHERE table_name = 'cst_counterfactuals'")
    old = tmp_path / "old"
    assert main(["report", "no-evidence", "--warehouse", str(path), "--cases", str(f), "--limit", "3",
                 "--out", str(old)]) == 0
    assert [r["role"] for r in read_csv(old.with_suffix(".csv"))] == ["complainant"] * 3
    assert "no audit.cst_counterfactuals" in old.with_suffix(".html").read_text(encoding="utf-8")
    report = write_report(path, "no-evidence", tmp_path / "report.html")  # the report and its case files too
    assert report.is_file()
