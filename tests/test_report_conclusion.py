"""What an analyst reads first: the conclusion generated from audit.findings, the findings ranked
by severity x confidence (audit.findings.rank), groups by their recorded values, one meaning of
"flagged", and the end of ``aequum audit`` in the terminal."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from aequum.flows.commands.cli import main
from aequum.flows.commands.report import write_report
from aequum.flows.reporting.conclusion import terminal_lines
from aequum.flows.reporting.cst import delta_significant
from aequum.flows.reporting.labels import Labels
from aequum.flows.store.warehouse import Warehouse


def findings(path) -> list[dict]:
    with Warehouse(path, read_only=True) as wh:
        return wh.con.sql("SELECT * FROM audit.findings WHERE run_id = 'loan-small' ORDER BY rank") \
            .to_arrow_table().to_pylist()


def test_findings_carry_a_rank_evidence_then_flagged_then_the_rest(small_audit_warehouse):
    rows = findings(small_audit_warehouse)
    assert [f["rank"] for f in rows] == list(range(1, len(rows) + 1))
    keys = [(not f["evidence"], not f["flagged"]) for f in rows]
    assert keys == sorted(keys)  # no quiet finding above a flagged one
    flagged = [f for f in rows if f["flagged"] and f["p_value"] is not None]
    assert [f["p_value"] for f in flagged] == sorted(f["p_value"] for f in flagged)


def test_flagged_means_something_is_wrong_with_the_decisions(small_audit_warehouse):
    """A part marks what its engine found (RAGUEL: an unfair block); the union flags only claims
    about the lender's decisions, so a property of the model examined (recourse, PBA, CEC) is
    ranked after them and never flagged or evidence."""
    with Warehouse(small_audit_warehouse, read_only=True) as wh:
        model = wh.con.execute("SELECT count(*) FILTER (flagged OR evidence), count(*) FROM audit.findings "
                           "WHERE claim <> 'about the lender'").fetchall()[0]
        order = wh.con.sql("SELECT claim FROM audit.findings ORDER BY rank").fetchall()
        raguel = wh.con.sql("SELECT f.flagged, s.algorithm, s.unfair_blocks_before, s.points_changed "
                            "FROM audit.findings_raguel f JOIN audit.raguel_summary s ON s.run_id = f.run_id "
                            "AND s.attribute = f.attribute AND f.finding LIKE '%(' || s.algorithm || ')' "
                            "WHERE f.engine = 'raguel' AND s.configuration = 'main'").fetchall()
        view = wh.con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'findings_detection'").fetchall()
    assert raguel and all(flag == (unfair > 0 if algo == "block" else moved > 0)
                          for flag, algo, unfair, moved in raguel)
    assert any(not flag for flag, *_ in raguel)  # the block re-ranking that moves nobody is not flagged
    assert not view or "false AS flagged" in view[0][0]  # detection grades the audit, never flags
    assert model[1] > 0 and model[0] == 0
    claims = [c for (c,) in order]
    lender = [i for i, c in enumerate(claims) if c == "about the lender"]
    assert lender == list(range(len(lender)))  # every claim about the lender ranks first


def test_the_conclusion_comes_first_with_groups_by_their_values(small_audit_warehouse, tmp_path):
    text = write_report(small_audit_warehouse, "loan-small", tmp_path / "r.html").read_text(encoding="utf-8")
    first = re.findall(r'<section id="([^"]+)" data-section', text)[0]
    assert first == "conclusion"
    conclusion = text.split('<section id="conclusion"', 1)[1].split("</section>", 1)[0]
    sentences = re.findall(r'<p class="conclusion">(.*?)</p>', conclusion)
    assert 3 <= len(sentences) <= 6
    assert "Female against Male" in conclusion and "What the data cannot show" in conclusion
    top = findings(small_audit_warehouse)[0]
    assert top["engine"] in sentences[1] and 'href="#engine-' in conclusion
    # placeholder group names nowhere the spec recorded values
    assert "=protected" not in text and "<td>protected</td>" not in text and "protected group of" not in text
    assert "started" in text and " UTC" in text
    # everything below the conclusion folds
    for section in ("audited", "methods", "engine-cst"):
        body = text.split(f'<section id="{section}"', 1)[1].split("</section>", 1)[0]
        assert "<details><summary>" in body[:200]


def test_labels_read_values_decisions_units_and_ids():
    labels = Labels({"audit": {"groups": [{"attribute": "race", "protected": "Black or African American / Asian / "
                                           "American Indian or Alaska Native / Native Hawaiian or Other "
                                           "Pacific Islander", "reference": "White"},
                                          {"attribute": "sex", "protected": "Female", "reference": "Male"}],
                               "decision": {"favourable": "1", "unfavourable": "-1"},
                               "units": {"income": "thousands USD"}}})
    assert labels.group("race&sex", "race=reference,sex=protected") == "White & Female"
    assert labels.group("sex", "protected") == "Female" and labels.versus("sex", "protected") == "Female against Male"
    assert labels.group("race", "protected") == "race: 4 values pooled"  # a spec's label names it better
    pooled = Labels({"audit": {"groups": [{"attribute": "race", "protected": "minority race (pooled)",
                                           "reference": "White"}, {"attribute": "sex", "protected": "Female"}]}})
    assert pooled.group("race&sex", "race=protected,sex=protected") == "minority race (pooled) & Female"
    assert labels.decision(0) == "unfavourable (-1)" and labels.decision(1) == "favourable (1)"
    assert labels.feature("income") == "income (thousands USD)"
    assert Labels({}).group("sex", "protected") == "protected group of sex"  # nothing recorded: as the tables say


def test_a_red_delta_p_point_never_has_an_interval_crossing_tau():
    assert delta_significant({"delta_p": 0.4, "ci_low": 0.1, "ci_high": 0.7, "significant": True}, 0.0)
    assert not delta_significant({"delta_p": 0.2, "ci_low": -0.05, "ci_high": 0.45, "significant": True}, 0.0)
    assert not delta_significant({"delta_p": 0.4, "ci_low": 0.1, "ci_high": 0.7, "significant": False}, 0.0)


def test_the_terminal_ends_with_the_conclusion_not_the_detection_table(small_audit_warehouse, tmp_path,
                                                                       monkeypatch, capsys):
    import aequum.flows.audit
    import aequum.flows.commands.cli

    with Warehouse(small_audit_warehouse, read_only=True) as wh:
        record = wh.run("loan-small")
    lines = terminal_lines(record, {"audit": {}}, findings(small_audit_warehouse) * 5)
    assert len(lines) <= 15 and lines[0] == "Conclusion:"
    wh_path = tmp_path / "wh.duckdb"
    shutil.copy(small_audit_warehouse, wh_path)
    monkeypatch.setattr(aequum.flows.commands.cli, "_prefect_env", lambda: None)
    monkeypatch.setattr(aequum.flows.audit, "run_audit", lambda *a, **k: "loan-small")
    spec = str(Path(__file__).resolve().parents[1] / "data" / "specs" / "loan.yaml")
    assert main(["audit", "--spec", spec, "--warehouse", str(wh_path)]) == 0
    out = capsys.readouterr().out
    block = out.split("Conclusion:", 1)[1].split("results: DuckDB", 1)[0].strip().splitlines()
    assert 3 <= len(block) <= 14 and "Female" in out and "detection vs" not in out


def test_the_top_cases_are_the_surest_with_numeric_ids_as_numbers(tmp_path):
    """Ties among the top CST cases (Δp 1.00 for many) are broken by the surest (one-sided bound),
    then by record id with numeric ids as numbers (15 before 1324 before 1533), as the report
    and audit.cst_claims readers expect."""
    import pyarrow as pa

    from aequum.engines.matching.cst.situation_testing import CLAIMS
    from aequum.flows.store.warehouse import Warehouse

    ids = ["1533", "15", "1324", "a7", "9"]
    low = [0.4, 0.4, 0.4, 0.4, 0.6]
    rows = [{f.name: None for f in CLAIMS} | {"record_id": r, "protected_attribute": "sex", "method": "CST", "k": 15,
                                               "delta_p": 1.0, "one_sided_low": lo, "significant": True}
            for r, lo in zip(ids, low)]
    with Warehouse(tmp_path / "wh.duckdb") as wh:
        wh.start_run("r", "s", "h", "v", {})
        wh.write_results("r", {"cst_claims": (CLAIMS, pa.Table.from_pylist(rows, schema=CLAIMS))})
        top = wh.query("report/cst_top_claims", {"run_id": "r", "attribute": "sex", "method": "CST", "k": 15,
                                                 "limit": 10}).to_pylist()
    assert [c["record_id"] for c in top] == ["9", "15", "1324", "1533", "a7"]


def test_a_figure_reads_in_the_unit_of_its_sentence():
    """The ranked table and the conclusion write a controlled difference as its statement does:
    points of denial, a price in its field's units (not 0.0483 beside '4.8 points')."""
    from aequum.flows.reporting.conclusion import figure_words

    labels = Labels({})
    denial = {"measure": "adjusted_denial_difference", "value": 0.0483, "ci_low": 0.041, "ci_high": 0.0556,
              "confidence": 0.95, "finding": "adjusted denial disparity"}
    price = {"measure": "adjusted_price_difference", "value": 0.1712, "ci_low": 0.12, "ci_high": 0.22,
             "confidence": 0.95, "finding": "adjusted rate_spread difference"}
    assert figure_words(denial, labels) == "+4.8 points of denial (95% CI +4.1 to +5.6)"
    assert figure_words(price, labels) == "+0.171 in rate_spread (95% CI +0.120 to +0.220)"
    assert figure_words({**denial, "value": None}, labels) == "no estimate"
    # a share of complainants in percent, as CST's statement writes it ("41 of 1,751 (2.3%)")
    share = {"measure": "significant_share", "value": 0.23, "finding": "counterfactual situation testing"}
    assert figure_words(share, labels).endswith(": 23.0%")
    assert "0.23" not in figure_words(share, labels)
