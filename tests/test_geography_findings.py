"""The geography engine in the warehouse: its findings rows (raw disparities against peers, never
evidence by themselves), the geography_trends view and the report section, on the generated LAR
with the lender_redlining world's lenders planted."""
from __future__ import annotations

from aequum.engines.generators.hmda import mechanism


def geography_audit(tmp_path):
    from audit_tables import small_audit

    def edit(raw):
        raw["source"]["world"] = "lender_redlining"
        raw.pop("model")
        for name in ("cst", "pba", "cec"):
            raw["engines"].pop(name)

    return small_audit(tmp_path, rows=100_000, engines=["outcome", "geography"], run_id="geo",
                       spec_name="hmda.yaml", edit=edit)


def test_findings_trends_and_report(tmp_path):
    from aequum.flows.commands.report import write_report
    from aequum.flows.store.warehouse import Warehouse

    path = geography_audit(tmp_path)
    planted = mechanism("lender_redlining")["lenders"]
    with Warehouse(path, read_only=True) as wh:
        rows = wh.con.sql("SELECT * FROM audit.findings WHERE engine = 'geography'").to_arrow_table().to_pylist()
        trends = wh.con.sql("SELECT * FROM audit.geography_trends").to_arrow_table().to_pylist()
    assert rows and all(r["estimand"] == "raw disparity" and r["evidence"] is False for r in rows)
    head = [r for r in rows if r["headline"] and r["finding"] == "redlining screen: minority share > 50% (applications)"]
    assert len(head) == 1 and head[0]["flagged"] and head[0]["value"] == 5
    assert all(lei in head[0]["statement"] for lei in planted) and "not evidence" in head[0]["statement"]
    per_lender = {r["group_name"] for r in rows if not r["headline"] and r["finding"].startswith("redlining screen")}
    assert set(planted) <= per_lender
    absent = [r for r in rows if r["finding"].startswith("redlining screen: Black share")]
    assert absent and "not screened" in absent[0]["statement"] and not absent[0]["flagged"]
    screen = {(t["measure"], t["basis"]): t for t in trends}
    assert screen[("minority share > 50%", "applications")]["lenders_named"] == 5
    text = write_report(path, "geo", tmp_path / "r.html").read_text()
    assert "Geography and peer lenders" in text and planted[0] in text
