"""The regression engine with lender fixed effects, lender-clustered errors and product
segments: the engine's rows equal the models called directly, segments are tested within
(their own multiplicity family), a small segment is a note, and the spec refuses fixed effects
that are not categorical features."""
from __future__ import annotations

import copy

import numpy as np
import pyarrow as pa
import pytest

from aequum.engines.core.data import AuditData
from aequum.engines.core.spec import SpecError, parse_spec
from aequum.engines.regression.design import Categorical
from aequum.engines.regression.logit import controlled_logit
from aequum.engines.regression.sensitivity import controlled_lpm
from test_regression_engine import DTI, RAW, data, run

LENDERS = [f"L{i:02d}" for i in range(25)]


def lender_data(penalty=0.0, seed=0, n=6000, min_segment_size=1000):
    raw = copy.deepcopy(RAW)
    raw["features"].append({"name": "lender", "type": "categorical", "categories": LENDERS, "mutability": "immutable"})
    raw["engines"]["regression"] = {"intersections": [], "fixed_effects": ["lender"], "cluster": "lender",
                                    "segments": ["loan_type"], "min_segment_size": min_segment_size}
    d = data(n=n, penalty=penalty, seed=seed)
    rng = np.random.default_rng(seed + 100)
    race = d.groups["race"]
    # lenders differ in their denial rates and in how many B applicants they see
    lender = rng.integers(0, 25, len(d))
    lender = np.where((race == 1) & (rng.random(len(d)) < 0.4), lender % 5, lender)
    strict = np.isin(lender, [0, 1, 2, 3, 4])
    denied = (d.decision == 0) | (strict & (rng.random(len(d)) < 0.15))
    table = d.table.append_column("lender", pa.array(np.array(LENDERS, dtype=object)[lender]))
    table = table.set_column(table.schema.get_field_index("_decision"), "_decision",
                             pa.array((~denied).astype(np.int8)))
    return AuditData(parse_spec(raw), table), lender


def test_engine_rows_equal_the_models_with_fixed_effects_and_clusters():
    d, lender = lender_data(penalty=0.06)
    out = run(d)
    pooled = {r["attribute"]: r for r in out["regression_estimates"]}
    race = pooled["race"]
    assert race["fixed_effects"] == "lender" and race["cluster"] == "lender" and race["clusters"] == 25
    controls = [d.column_values("income"), Categorical(d.column_values("dti"), DTI),
                Categorical(d.column_values("loan_type"), ["1", "2", "3"])]
    g = d.groups["sex"]
    held = Categorical(np.where(g == 1, 1, np.where(g == 0, 0, 2)), ["reference", "protected", "neither"])
    fe = Categorical(d.column_values("lender"), d.levels("lender"))
    kw = dict(fixed=[fe], fixed_names=["lender"], cluster=fe)
    direct = controlled_logit(1.0 - d.decision, d.groups["race"], [*controls, held],
                              ["income", "dti", "loan_type", "sex (group)"], **kw)
    assert (race["odds_ratio"], race["or_ci_low"], race["logit_se"], race["logit_se_classical"]) == (
        direct.odds_ratio, direct.or_ci_low, direct.se, direct.se_classical)
    assert direct.se != direct.se_classical and race["logit_significant"] and race["odds_ratio"] > 1
    lpm = controlled_lpm(1.0 - d.decision, d.groups["race"], [*controls, held],
                         ["income", "dti", "loan_type", "sex (group)"], held=1, robust_multiplier=2.0, **kw)
    assert (race["estimate"], race["se"], race["se_cluster"]) == (lpm.estimate, lpm.se, lpm.se_cluster)
    # 25 lenders, fewer than min_clusters (40): the p-values are the wild cluster bootstraps', the
    # intervals CR1 with t(24); seeded, so the engine's equal the models'
    assert (race["inference"], race["logit_inference"]) == ("WCR-bootstrap", "score-bootstrap")
    assert (race["bootstrap_draws"], race["bootstrap_weights"]) == (9999, "rademacher")
    assert (race["p_value"], race["ci_low"], race["ci_high"]) == (lpm.test_p_value, lpm.test_ci_low, lpm.test_ci_high)
    assert race["logit_p_value"] == direct.p_value and direct.inference == "score-bootstrap"
    # the lenders' own strictness is held: without the fixed effects the disparity is larger
    # (B applicants crowd at the strict lenders)
    plain = controlled_logit(1.0 - d.decision, d.groups["race"], [*controls, held],
                             ["income", "dti", "loan_type", "sex (group)"])
    assert plain.odds_ratio > race["odds_ratio"]


def test_segments_are_tested_within_and_small_ones_are_notes():
    d, _ = lender_data(penalty=0.06, min_segment_size=800)
    out = run(d)
    seg = out["regression_segments"]
    assert sorted({(r["attribute"], r["segment"]) for r in seg}) == sorted(
        (a, f"loan_type = {lv}") for a in ("race", "sex") for lv in ("1", "2", "3"))
    for r in seg:
        assert r["segment_feature"] == "loan_type" and "loan_type" not in (r["controls"] or "")
        if r["n"] < 800:
            assert r["odds_ratio"] is None and "fewer than 800: not tested" in r["note"]
            assert r["p_adjusted"] is None
        else:
            assert r["odds_ratio"] is not None and r["logit_p_adjusted"] >= r["logit_p_value"]
    small = [r for r in seg if r["segment"] == "loan_type = 3"]
    assert small and all(r["odds_ratio"] is None for r in small)  # 10 % of 6,000
    race1 = next(r for r in seg if r["attribute"] == "race" and r["segment"] == "loan_type = 1")
    rows = np.flatnonzero(((d.groups["race"] == 0) | (d.groups["race"] == 1)) & (d.column_values("loan_type") == 0))
    assert race1["n"] == len(rows)
    # the pooled family is untouched by the segments' tests
    assert {r["attribute"] for r in out["regression_estimates"]} == {"race", "sex"}


@pytest.mark.parametrize("field,value,message", [
    ("fixed_effects", ["income"], "'income' is numeric"),
    ("fixed_effects", ["branch"], "'branch' is not a declared feature"),
    ("cluster", "nope", "'nope' is not a declared feature"),
    ("segments", ["loan_type", "loan_type"], "listed more than once"),
])
def test_spec_refuses_bad_grouping_fields(field, value, message):
    raw = copy.deepcopy(RAW)
    raw["engines"]["regression"] = {field: value}
    with pytest.raises(SpecError, match=message):
        parse_spec(raw)


def test_a_segment_of_one_class_is_a_note_not_a_crash():
    """Every applicant of loan type 2 approved: that segment's row says why it has no estimate
    and the other segments stand; in the pooled test the loan type's dummy would separate the
    logit: the level and its applications are dropped from both models (Stata's and fixest's
    rule), counted and named, and both estimate on the rest."""
    d, _ = lender_data(penalty=0.06, min_segment_size=100)
    decision = d.decision.copy()
    decision[d.column_values("loan_type") == 1] = 1  # loan type "2": code 1
    table = d.table.set_column(d.table.schema.get_field_index("_decision"), "_decision",
                               pa.array(decision.astype(np.int8)))
    out = run(AuditData(d.spec, table))
    seg = {(r["attribute"], r["segment"]): r for r in out["regression_segments"]}
    for attribute in ("race", "sex"):
        empty = seg[(attribute, "loan_type = 2")]
        assert empty["odds_ratio"] is None and empty["estimate"] is None
        assert "the outcome takes one value" in empty["note"]
        assert seg[(attribute, "loan_type = 1")]["odds_ratio"] is not None
    groups = d.groups
    for r in out["regression_estimates"]:
        g = groups[r["attribute"]]
        type2 = int(((d.column_values("loan_type") == 1) & ((g == 0) | (g == 1))).sum())
        assert r["odds_ratio"] is not None and r["logit_note"] is None and r["estimate"] is not None
        assert r["separated_rows"] == type2 > 0 and r["separated_levels"] == "loan_type = 2"
        assert (f"loan_type = 2 predicts approval perfectly: level and its {type2:,} rows dropped, as Stata's "
                "logit and fixest's feglm do") in r["note"]
        assert r["p_value"] is not None and r["logit_p_value"] is not None
