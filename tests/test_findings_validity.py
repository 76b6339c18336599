"""What a finding is evidence of (audit.findings: estimand, basis, evidence, robust, E-value).

A raw disparity is a disparity; a total effect through the SCM is a counterfactual-fairness
finding; a direct effect given the recorded inputs is evidence of disparate treatment only when
the records hold every input of the decisions (on records lacking some, the individual shares
describe); a property of a model is never evidence about the lender; a reason is flagged only in
the penalty direction."""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from aequum.engines.matching.cst.situation_testing import SUMMARY as CST_SUMMARY
from aequum.engines.outcome.engine import GAPS, METRICS
from aequum.engines.reasons.engine import CONSISTENCY, worse_values
from aequum.engines.verification.scores import SUMMARY as PBA_SUMMARY

ROBUSTNESS = pa.schema([("attribute", pa.string()), ("robust", pa.bool_()), ("rv_q1_alpha", pa.float64()),
                        ("strongest_control", pa.string()), ("estimate", pa.float64()), ("significant", pa.bool_()),
                        ("p_adjusted", pa.float64()), ("odds_ratio", pa.float64()),
                        ("logit_coefficient", pa.float64()), ("logit_p_adjusted", pa.float64()),
                        ("logit_significant", pa.bool_()), ("logit_note", pa.string())])


def _start(wh, run_id, question="disparate_treatment", inputs="partial", model="surrogate"):
    wh.start_run(run_id, "s", "h", "test", {"cst": {"alpha": 0.05, "tau": 0.0},
                                            "audit": {"question": question, "inputs": inputs, "model": model}})


def _cst_rows():
    base = {c: None for c in CST_SUMMARY.names}
    row = {**base, "protected_attribute": "race", "k": 50, "complainants": 1000, "discriminated": 400,
           "discriminated_share": 0.4, "population": 1000, "excess_p_value": 1e-9}
    return [
        {**row, "method": "ST", "significant": 200, "significant_share": 0.2, "effect": "total"},
        {**row, "method": "CST", "significant": 300, "significant_share": 0.3, "effect": "total"},
        {**row, "method": "CF", "effect": "total"},
        {**row, "protected_attribute": "sex", "method": "ST", "significant": 30, "significant_share": 0.03,
         "effect": "total", "excess_p_value": 0.99},
        # above alpha, but within chance: not flagged
        {**row, "protected_attribute": "age", "method": "ST", "significant": 53, "significant_share": 0.053,
         "effect": "total", "excess_p_value": 0.35},
    ]


def _findings(wh, run_id, engine):
    wh.create_views()
    return {(r["attribute"], r["finding"]): r for r in wh.con.sql(
        "SELECT * FROM audit.findings WHERE run_id = $r AND engine = $e",
        params={"r": run_id, "e": engine}).to_arrow_table().to_pylist()}


def _write_cst(wh, run_id, robust=None, group_significant=True):
    tables = {"cst_summary": (CST_SUMMARY, pa.Table.from_pylist(_cst_rows(), CST_SUMMARY))}
    if robust is not None:
        tables["regression_estimates"] = (ROBUSTNESS, pa.Table.from_pylist(
            [{"attribute": "race", "robust": robust, "rv_q1_alpha": 0.02 if not robust else 0.3,
              "strongest_control": "debt_to_income_ratio", "estimate": 0.05, "significant": True,
              "odds_ratio": 1.6 if group_significant else 1.1, "logit_coefficient": 0.47 if group_significant else 0.1,
              "logit_significant": group_significant}], ROBUSTNESS))
    wh.write_results(run_id, tables)


def test_estimands_and_no_evidence_without_a_sensitivity_analysis(warehouse):
    """On complete records the methods are tested (flagged when more complainants are significant
    than chance allows); a total effect is no evidence of disparate treatment, and says why."""
    _start(warehouse, "r", inputs="complete")
    _write_cst(warehouse, "r")
    f = _findings(warehouse, "r", "cst")
    st, cst, cf = f[("race", "situation testing, k = 50")], f[("race", "counterfactual situation testing, k = 50")], \
        f[("race", "counterfactual fairness")]
    assert st["estimand"] == "direct effect given the recorded inputs" and cst["estimand"] == "total effect"
    assert cf["estimand"] == "total effect" and "SCM" in cst["basis"]
    assert st["flagged"] and cst["flagged"] and cf["flagged"]
    assert {st["claim"], cst["claim"], cf["claim"]} == {"about the lender"}
    # a direct effect with no group-level test: not evidence
    assert st["evidence"] is False and "No group-level test" in st["statement"]
    # a total effect is not evidence of disparate treatment, and says why
    assert cst["evidence"] is False and "counterfactual-fairness finding" in cst["statement"]
    assert "treated worse" not in cst["statement"]
    # 3% significant at alpha = 5%: no more than chance, not flagged
    low = f[("sex", "situation testing, k = 50")]
    assert low["flagged"] is False and low["evidence"] is False and "chance" in low["statement"]
    assert f[("age", "situation testing, k = 50")]["flagged"] is False


@pytest.mark.parametrize("robust", [True, False])
def test_on_records_lacking_inputs_the_individual_shares_describe(warehouse, robust):
    """Neighbours alike in what the records hold may differ in what they lack: on partial records
    every individual method's share is descriptive, never flagged or evidence, however robust its
    group's controlled disparity is to the recorded controls' benchmarks."""
    _start(warehouse, "r")
    _write_cst(warehouse, "r", robust=robust)
    found = _findings(warehouse, "r", "cst")
    assert {f["claim"] for f in found.values()} == {"descriptive"}
    assert not any(f["flagged"] or f["evidence"] for f in found.values())
    st = found[("race", "situation testing, k = 50")]
    assert st["robustness_value"] == (0.3 if robust else 0.02)
    assert "these shares describe and are no test" in st["statement"]


def test_a_direct_effect_needs_a_significant_group_level_test(warehouse):
    """Individual counts are no group-level test: with every input recorded, a direct effect
    is evidence only when the group's controlled disparity (the logit) is significant too."""
    _start(warehouse, "alone", inputs="complete")
    _write_cst(warehouse, "alone")
    st = _findings(warehouse, "alone", "cst")[("race", "situation testing, k = 50")]
    assert st["flagged"] and st["evidence"] is False and "No group-level test" in st["statement"]
    _start(warehouse, "ns", inputs="complete")
    _write_cst(warehouse, "ns", robust=False, group_significant=False)
    st = _findings(warehouse, "ns", "cst")[("race", "situation testing, k = 50")]
    assert st["flagged"] and st["evidence"] is False and "not significant" in st["statement"]


def test_complete_inputs_make_a_direct_effect_evidence_and_questions_change_the_reading(warehouse):
    _start(warehouse, "complete", inputs="complete")
    _write_cst(warehouse, "complete", robust=False)
    f = _findings(warehouse, "complete", "cst")
    assert f[("race", "situation testing, k = 50")]["evidence"] is True
    assert f[("race", "counterfactual situation testing, k = 50")]["evidence"] is False
    for inputs in ("complete", "partial"):
        _start(warehouse, f"cf-{inputs}", question="counterfactual_fairness", inputs=inputs)
        _write_cst(warehouse, f"cf-{inputs}")
        f = _findings(warehouse, f"cf-{inputs}", "cst")
        # counterfactuals through an SCM of the recorded inputs: evidence only when they are all of them
        assert f[("race", "counterfactual situation testing, k = 50")]["evidence"] is (inputs == "complete")
        assert f[("race", "counterfactual fairness")]["evidence"] is (inputs == "complete")
        assert f[("race", "situation testing, k = 50")]["evidence"] is False
        assert f[("sex", "situation testing, k = 50")]["evidence"] is False


def _gap(**kw):
    base = {c: None for c in GAPS.names}
    return {**base, "attribute": "race", "group_name": "protected", "reference_group": "reference",
            "n_group": 400, "n_reference": 500, "favourable_rate": 0.5, "reference_rate": 0.8,
            "di_ratio": 0.625, "di_ci_low": 0.55, "di_ci_high": 0.7, "spd": -0.3, "spd_p_adjusted": 1e-9,
            "significant": True, "too_small": False, "four_fifths_violation": True,
            "four_fifths_vs_highest": True, "verdict": "adverse impact", "confidence": 0.95,
            "correction": "holm", "shortfall": 120, **kw}


@pytest.mark.parametrize("question", ["disparate_treatment", "disparate_impact"])
def test_a_raw_disparity_is_screening_with_its_e_value(warehouse, question):
    _start(warehouse, "r", question=question)
    warehouse.write_results("r", {"outcome_gaps": (GAPS, pa.Table.from_pylist([_gap()], GAPS)),
                                  "outcome_metrics": (METRICS, METRICS.empty_table())})
    (f,) = [r for r in _findings(warehouse, "r", "outcome").values()]
    # a claim about the lender only when the audit asks about disparate impact; else it describes
    assert f["estimand"] == "raw disparity" and f["flagged"] is (question == "disparate_impact")
    assert f["claim"] == ("about the lender" if question == "disparate_impact" else "descriptive")
    assert f["evidence"] is (question == "disparate_impact")
    rr = 1 / 0.625  # VanderWeele & Ding: 1/RR below 1
    assert f["e_value"] == pytest.approx(rr + math.sqrt(rr * (rr - 1)), rel=1e-12)
    ci = 1 / 0.7
    assert f"{ci + math.sqrt(ci * (ci - 1)):.2f} for the interval" in f["statement"]
    assert "does not say why" in f["statement"]


def test_e_value_macros(warehouse):
    _start(warehouse, "r")
    warehouse.create_views()
    got = warehouse.con.execute(
        "SELECT audit.e_value(1.0), audit.e_value(3.9), audit.e_value(1 / 3.9), audit.e_value_ci(0.9, 1.2), "
        "audit.e_value_ci(1.5, 2.0), audit.e_value_ci(0.2, 0.5)").fetchone()
    assert got[0] == 1.0 and got[1] == pytest.approx(3.9 + math.sqrt(3.9 * 2.9))  # the paper's RR 3.9 -> 7.26
    assert got[1] == pytest.approx(7.26, abs=0.005) and got[2] == pytest.approx(got[1])
    assert got[3] == 1.0 and got[4] == pytest.approx(1.5 + math.sqrt(1.5 * 0.5))
    assert got[5] == pytest.approx(2 + math.sqrt(2))
    # the SQL macros and the engines' Python (engines.regression.sensitivity) agree
    from aequum.engines.regression.sensitivity import e_value, e_value_ci

    for rr, lo, hi in ((0.37, 0.3, 0.45), (1.0, 0.9, 1.1), (2.6, 1.4, 4.8), (0.9, 0.7, 1.2)):
        sql = warehouse.con.execute("SELECT audit.e_value($r), audit.e_value_ci($l, $h)",
                                    {"r": rr, "l": lo, "h": hi}).fetchone()
        assert sql == pytest.approx((float(e_value(rr)), float(e_value_ci(lo, hi))), rel=1e-12)


def _pba_row(**kw):
    base = {c: None for c in PBA_SUMMARY.names}
    return {**base, "attribute": "race", "group_name": "protected", "setting": "flipped",
            "presented_group": "reference", "delta": 1.0, "population": 72, "inputs": 72, "sampled": False,
            "considered": 72, "verified": 72, "falsified": 0, "inconclusive": 0, "pba": 1.0, **kw}


@pytest.mark.parametrize("model", ["surrogate", "lender"])
def test_pba_on_a_surrogate_is_a_model_property_never_evidence(warehouse, model):
    _start(warehouse, "r", model=model)
    warehouse.write_results("r", {"pba_summary": (PBA_SUMMARY, pa.Table.from_pylist([_pba_row()], PBA_SUMMARY))})
    (f,) = _findings(warehouse, "r", "pba").values()
    # a property of the model examined, the lender's own included: no claim about its decisions
    assert f["estimand"] == "model property" and f["claim"] == "about the model"
    assert f["flagged"] is False and f["evidence"] is False
    (part,) = warehouse.con.sql("SELECT flagged, evidence FROM audit.findings_pba").fetchall()
    assert part == (True, model == "lender")  # what the proof shows, as the part marks it
    assert ("surrogate" in f["statement"]) is (model == "surrogate")
    assert ("surrogate" in f["basis"]) is (model == "surrogate")


def _reason(attribute, mp, mr, significant=True, worse="higher"):
    base = {c: None for c in CONSISTENCY.names}
    return {**base, "attribute": attribute, "reason_code": "1", "feature": "debt_to_income_ratio",
            "protected_citing": 500, "reference_citing": 800, "protected_median": str(mp),
            "reference_median": str(mr), "protected_median_value": float(mp), "reference_median_value": float(mr),
            "p_value": 1e-6 if significant else 0.4, "p_adjusted": 1e-5 if significant else 0.8,
            "confidence": 0.95, "significant": significant,
            "direction": ("cited at lower values for the protected group" if mp < mr else
                          "cited at higher values for the protected group" if mp > mr else "same median"),
            "worse_values": worse, "penalty_direction": None if worse is None else (mp < mr if worse == "higher" else mp > mr)}


def test_reasons_flag_only_the_penalty_direction(warehouse):
    _start(warehouse, "r")
    rows = [_reason("race", 44, 47), _reason("ethnicity", 48, 45), _reason("sex", 47, 47),
            _reason("age", 44, 47, significant=False), _reason("income", 40, 60, worse="lower")]
    warehouse.write_results("r", {"reason_consistency": (CONSISTENCY, pa.Table.from_pylist(rows, CONSISTENCY))})
    f = {a: r for (a, _), r in _findings(warehouse, "r", "reasons").items()}
    assert f["race"]["flagged"] is True and "better values" in f["race"]["statement"]
    assert f["ethnicity"]["flagged"] is False and "opposite of a penalty" in f["ethnicity"]["statement"]
    assert f["sex"]["flagged"] is False and "medians are equal" in f["sex"]["statement"]
    assert f["age"]["flagged"] is False
    # income: lower is worse, so a protected median below the reference's is no penalty
    assert f["income"]["flagged"] is False
    assert all(r["evidence"] is False and r["estimand"] == "procedural (stated reasons)" for r in f.values())
    assert not any("judged by a different standard" in r["statement"] for r in f.values())


def test_worse_values_read_from_the_denials():
    rng = np.random.default_rng(0)
    dti = rng.normal(40, 8, 5000)
    citing = dti + rng.normal(0, 3, 5000) > 43
    assert worse_values(dti, citing) == "higher"
    assert worse_values(-dti, citing) == "lower"
    assert worse_values(dti, np.zeros(5000, bool)) is None
    nan = dti.copy()
    nan[:100] = np.nan
    assert worse_values(nan, citing) == "higher"


def test_cst_summary_tests_the_significant_count_against_chance():
    from scipy.stats import binom

    from aequum.engines.matching.cst.situation_testing import summary

    n, sig = 257, 13
    rows = [{"protected_attribute": "race", "method": "ST", "k": 15, "discriminated": i < 40,
             "significant": i < sig, "delta_p": 0.1, "probable": False, "comparable": True} for i in range(n)]
    rows += [{"protected_attribute": "race", "method": "CF", "k": 0, "discriminated": True,
              "significant": None, "delta_p": None, "probable": None, "comparable": None}]
    rows += [{"protected_attribute": "sex", "method": "ST", "k": 15, "discriminated": False,
              "significant": False, "delta_p": 0.0, "probable": False, "comparable": True} for _ in range(50)]
    # claims without comparators (engines.cst.overlap) were not tested: the chance count is over the others
    rows += [{"protected_attribute": "sex", "method": "ST", "k": 15, "discriminated": None,
              "significant": None, "delta_p": 0.4, "probable": None, "comparable": False} for _ in range(30)]
    rows += [{"protected_attribute": "sex", "method": "ST", "k": 15, "discriminated": True,
              "significant": True, "delta_p": 0.5, "probable": True, "comparable": True} for _ in range(6)]
    out = {(r["protected_attribute"], r["method"]): r for r in summary(pa.Table.from_pylist(rows), alpha=0.05).to_pylist()}
    # 13 of 257 (5.1%) is what chance alone gives at alpha = 5%
    assert out[("race", "ST")]["excess_p_value"] == pytest.approx(binom.sf(sig - 1, n, 0.05), rel=1e-10)
    assert out[("race", "ST")]["excess_p_value"] > 0.4 and out[("race", "ST")]["comparable"] == n
    assert out[("race", "CF")]["excess_p_value"] is None and out[("race", "CF")]["comparable"] is None
    sex = out[("sex", "ST")]
    assert sex["complainants"] == 86 and sex["comparable"] == 56 and sex["significant"] == 6
    assert sex["excess_p_value"] == pytest.approx(binom.sf(5, 56, 0.05), rel=1e-10)
    strict = summary(pa.Table.from_pylist(rows), alpha=0.01).to_pylist()
    assert [r for r in strict if r["method"] == "ST" and r["protected_attribute"] == "race"][0]["excess_p_value"] < 1e-3
