"""Reason consistency: a stated reason applied at different values of its variable by group."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from scipy.stats import mannwhitneyu

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import SpecError, parse_spec
from aequum.engines.reasons.engine import ReasonsEngine

RAW = {
    "name": "r", "source": {"kind": "csv", "path": "x.csv", "id_column": "id"},
    "protected": [{"name": "race", "column": "race", "protected_values": ["B"], "reference_values": ["W"]}],
    "decision": {"column": "y", "favourable": [1],
                 "reasons": {"columns": ["r1", "r2"], "codes": {"1": "dti", "4": "ltv"}}},
    "features": [{"name": "dti"}, {"name": "ltv"}],
    "engines": {"run": ["reasons"]},
}


def data(n: int = 400, penalty: float = 8.0, seed: int = 0) -> AuditData:
    """Denied iff dti (+ penalty for B) > 43; reason 1 cited for those denials."""
    rng = np.random.default_rng(seed)
    race = np.where(rng.random(n) < 0.4, 1, 0)
    dti = rng.uniform(20, 60, n).round()
    ltv = rng.uniform(60, 100, n).round()
    denied = dti + penalty * race > 43
    r1 = np.where(denied, "1", "10")
    table = pa.table({
        "_id": [str(i) for i in range(n)], "_row": pa.array(np.arange(n)), "race": np.where(race, "B", "W"),
        "_g_race": pa.array(race.astype(np.int8)), "_decision": pa.array((~denied).astype(np.int8)),
        "r1": r1, "r2": pa.array([None] * n, pa.string()), "dti": dti, "ltv": ltv})
    return AuditData(parse_spec(RAW), table)


def test_a_penalised_reason_is_found_and_matches_an_independent_test():
    out = run_serial(ReasonsEngine(), data(), parse_spec(RAW).engines.reasons)["reason_consistency"].to_pylist()
    (dti,) = [r for r in out if r["feature"] == "dti"]
    d = data()
    cited = (d.decision == 0) & (d.table["r1"].to_numpy(zero_copy_only=False) == "1")
    vp = d.column_values("dti")[cited & (d.groups["race"] == 1)]
    vr = d.column_values("dti")[cited & (d.groups["race"] == 0)]
    assert dti["p_value"] == pytest.approx(mannwhitneyu(vp, vr, alternative="two-sided").pvalue)
    assert (dti["protected_citing"], dti["reference_citing"]) == (len(vp), len(vr))
    assert dti["protected_median_value"] == np.median(vp) < dti["reference_median_value"] == np.median(vr)
    assert dti["significant"] and dti["direction"] == "cited at lower values for the protected group"
    (ltv,) = [r for r in out if r["feature"] == "ltv"]
    assert ltv["protected_citing"] == 0 and ltv["p_value"] is None and "not tested" in ltv["note"]
    # Holm over the tested rows of the run: one tested row, adjusted = raw
    assert dti["p_adjusted"] == dti["p_value"]


def test_the_same_standard_for_both_groups_is_not_flagged():
    out = run_serial(ReasonsEngine(), data(penalty=0.0, seed=3), parse_spec(RAW).engines.reasons)
    (dti,) = [r for r in out["reason_consistency"].to_pylist() if r["feature"] == "dti"]
    assert not dti["significant"] and dti["p_value"] > 0.01


def test_row_order_does_not_matter():
    d = data()
    order = np.random.default_rng(1).permutation(len(d))
    shuffled = AuditData(d.spec, d.table.take(order))
    a = run_serial(ReasonsEngine(), d, d.spec.engines.reasons)["reason_consistency"]
    b = run_serial(ReasonsEngine(), shuffled, d.spec.engines.reasons)["reason_consistency"]
    assert a.equals(b)


def test_bad_specs_are_named():
    import copy

    raw = copy.deepcopy(RAW)
    raw["decision"]["reasons"]["codes"]["1"] = "ghost"
    with pytest.raises(SpecError, match=r"decision.reasons.codes: \['ghost'\]"):
        parse_spec(raw)
    raw = copy.deepcopy(RAW)
    raw["decision"]["reasons"]["columns"] = ["dti"]
    with pytest.raises(SpecError, match="already other columns"):
        parse_spec(raw)
    raw = copy.deepcopy(RAW)
    del raw["decision"]["reasons"]
    with pytest.raises(SpecError, match="needs decision.reasons"):
        parse_spec(raw)


def test_the_hmda_penalty_on_debt_to_income_is_named(tmp_path):
    """Issue 17: on the generated HMDA LAR (planted +8-point DTI penalty for Black and Hispanic
    applicants), the findings name debt-to-income for race and ethnicity, with significance,
    and the report's summary carries it."""
    from audit_tables import small_audit
    from aequum.flows.commands.report import write_report
    from aequum.flows.store.warehouse import Warehouse

    path = small_audit(tmp_path, rows=50_000, engines=["outcome", "reasons"], run_id="hmda-r",
                       spec_name="hmda.yaml")
    with Warehouse(path, read_only=True) as wh:
        heads = wh.con.sql("SELECT attribute, finding, flagged, p_value, statement FROM audit.findings "
                           "WHERE engine = 'reasons' AND headline ORDER BY attribute").to_arrow_table().to_pylist()
    by = {h["attribute"]: h for h in heads}
    for attribute in ("race", "ethnicity"):
        h = by[attribute]
        assert "debt_to_income_ratio" in h["finding"] and h["flagged"] and h["p_value"] < 0.05, h
        assert "judged by a stricter standard" in h["statement"] and "better values" in h["statement"]
    assert not by["sex"]["flagged"]  # no penalty planted on sex
    text = write_report(path, "hmda-r", tmp_path / "r.html").read_text()
    summary = text.split('<section id="conclusion"', 1)[1].split("</section>", 1)[0]
    assert "debt_to_income_ratio" in summary
    from aequum.flows.reporting import plots

    section = text.split('<section id="engine-reasons"', 1)[1].split("</section>", 1)[0]
    assert section.count('<figure class="plot"><svg ') == 1  # the medians' gaps, the penalty in red
    assert plots.SIGNIFICANT in section and "debt_to_income_ratio" in section
