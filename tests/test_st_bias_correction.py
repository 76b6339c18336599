"""Situation testing's bias correction (engines/matching/cst/bias_correction.py) and the intersections
tested by default (engines/core/intersections.py) in CST and the regression engine."""
from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.intersections import candidate_pairs, resolve
from aequum.engines.core.models import LinearRule
from aequum.engines.core.spec import parse_spec
from aequum.engines.matching.cst.bias_correction import fit_logistic, surface
from aequum.engines.matching.cst.engine import CSTEngine
from aequum.engines.matching.cst.situation_testing import flag_claims
from aequum.engines.regression.engine import RegressionEngine


# ---- the fitted surface ------------------------------------------------------------------
def test_unpenalised_fit_equals_statsmodels():
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(3)
    x = rng.normal([50, 0], [10, 1], (3000, 2))
    y = rng.random(3000) < 1 / (1 + np.exp(-(0.08 * (x[:, 0] - 50) - 0.7 * x[:, 1])))
    mine = fit_logistic(x, y, ridge=0.0)
    ref = sm.Logit(y.astype(float), sm.add_constant(x)).fit(disp=0, tol=1e-12).params
    np.testing.assert_allclose(mine, ref, rtol=1e-7, atol=1e-9)


def test_separated_decisions_give_a_finite_steep_surface():
    """A deterministic rule (every input of it recorded) separates the data: no maximum
    likelihood estimate exists, the ridge keeps one, and it is the rule's step."""
    rng = np.random.default_rng(4)
    x = rng.normal(0, 1, (4000, 3))
    refused = x @ [1.0, -0.5, 0.2] > 0.3
    beta = fit_logistic(x, refused)
    assert np.all(np.isfinite(beta))
    mu = surface(beta, x)
    margin = np.abs(x @ [1.0, -0.5, 0.2] - 0.3)
    far = margin > 0.2
    assert np.all((mu[far] > 0.5) == refused[far])
    assert np.mean(np.abs(mu[far] - refused[far])) < 0.01
    # one decision only: a flat surface at it
    assert np.all(surface(fit_logistic(x, np.ones(4000, bool)), x) > 1 - 1e-12)
    assert np.all(surface(fit_logistic(x, np.zeros(4000, bool)), x) < 1e-12)


def test_a_large_group_is_fitted_on_evenly_spaced_records(monkeypatch):
    from aequum.engines.matching.cst import bias_correction

    rng = np.random.default_rng(6)
    x = rng.normal(0, 1, (1000, 2))
    refused = rng.random(1000) < 1 / (1 + np.exp(-x[:, 0]))
    rows = np.arange(1, 1000, 2)
    monkeypatch.setattr(bias_correction, "FIT_RECORDS", 100)
    np.testing.assert_array_equal(bias_correction.fit_group(x, refused, rows),
                                  fit_logistic(x[rows[::5]], refused[rows[::5]]))
    monkeypatch.setattr(bias_correction, "FIT_RECORDS", 500)
    np.testing.assert_array_equal(bias_correction.fit_group(x, refused, rows), fit_logistic(x[rows], refused[rows]))


# ---- situation testing where the groups' densities differ --------------------------------
def density_world(penalty: float, n=4000, seed=0, reference_at=0.9, dims=2):
    """Two groups under one deterministic rule (refused iff x1 + … < 0): the protected group
    centred on the rule's boundary, the reference group ``reference_at`` higher in every input
    (its refusals in its tail, where it is sparse); ``penalty`` subtracted from the protected
    group's score (0: no discrimination)."""
    rng = np.random.default_rng(seed)
    a = (rng.random(n) < 0.4).astype(int)
    xs = {f"x{i}": np.where(a == 1, rng.normal(0, 1, n), rng.normal(reference_at, 1, n)) for i in range(dims)}
    coef = {**{x: 1.0 for x in xs}, "a": -penalty}
    spec = parse_spec({
        "name": "w", "source": {"kind": "csv", "path": "w.csv", "id_column": "id"},
        "protected": [{"name": "a", "column": "a", "protected_values": [1], "reference_values": [0]}],
        "model": {"kind": "linear", "features": [*xs, "a"], "coefficients": coef, "intercept": 0.0,
                  "use_for_decisions": True},
        "features": [{"name": x} for x in xs],
        "scm": {"equations": [{"target": x, "parents": ["a"]} for x in xs]},
        "engines": {"run": ["cst"], "cst": {"k": [15, 50], "features": list(xs), "complainants": "negative",
                                            "mediators": list(xs), "evidence": "none"}},
    })
    table = pa.table({"_id": [str(i) for i in range(n)], "_row": np.arange(n), "_g_a": pa.array(a, pa.int8()), **xs})
    return AuditData(spec, table, {}, LinearRule(coef, 0.0, [*xs, "a"]))


def _st(data, correction: str, k: int = 50, overlap: float | None = None) -> dict:
    params = data.spec.engines.cst.model_copy(update={"bias_correction": correction, "overlap": overlap})
    s = pl.from_arrow(run_serial(CSTEngine(), data, params)["cst_summary"])
    return s.filter((pl.col("method") == "ST") & (pl.col("k") == k)).row(0, named=True)


def test_uncorrected_situation_testing_accuses_a_fair_rule_where_densities_differ():
    """The failure the correction exists for: the reference group's nearest members of a refused
    protected applicant come from where the reference group is dense — approved applicants."""
    data = density_world(0.0)
    raw, corrected = _st(data, "none"), _st(data, "logistic")
    assert raw["significant_share"] > 0.2
    assert corrected["significant_share"] <= 0.05
    assert corrected["excess_p_value"] > 0.05


def test_corrected_situation_testing_still_finds_a_penalty():
    data = density_world(0.8)
    corrected = _st(data, "logistic")
    assert corrected["significant_share"] > 0.3 and corrected["excess_p_value"] < 1e-6


def test_claims_without_comparators_are_not_tested():
    """The reference group two standard deviations higher in four inputs: around most refused
    protected applicants it has nobody; their claims are not tested, not counted as tested, and
    keep their Δp."""
    data = density_world(0.0, reference_at=2.0, dims=4)
    params = data.spec.engines.cst.model_copy(update={"overlap": 9.0})
    out = run_serial(CSTEngine(), data, params)
    st = pl.from_arrow(out["cst_claims"]).filter((pl.col("method") == "ST") & (pl.col("k") == 50))
    summary = pl.from_arrow(out["cst_summary"]).filter((pl.col("method") == "ST") & (pl.col("k") == 50)).row(0, named=True)
    assert summary["comparable"] == st["comparable"].sum() < 0.1 * st.height
    untested = st.filter(~pl.col("comparable"))
    assert untested["significant"].null_count() == untested.height and untested["delta_p"].null_count() == 0
    assert _st(data, "none")["significant_share"] > 0.9  # what the paper's rule says of them
    cf = pl.from_arrow(out["cst_summary"]).filter(pl.col("method") == "CF")
    assert cf["comparable"].null_count() == cf.height


def test_comparable_is_the_knn_density_ratio():
    from aequum.engines.matching.cst.situation_testing import comparable

    rc = np.array([1.0, 1.0, 2.0, 0.0])
    rt = np.array([3.0 ** 0.5, 3.0 ** 0.5 * 1.01, 2.0, 0.0])
    assert comparable(rc, rt, 3.0, 2).tolist() == [True, False, True, True]


def test_corrected_shares_stay_probabilities_and_default_is_the_papers():
    data = density_world(0.8, n=1500)
    out = run_serial(CSTEngine(), data, data.spec.engines.cst.model_copy(update={"bias_correction": "logistic"}))
    claims = pl.from_arrow(out["cst_claims"]).filter(pl.col("method") != "CF")
    assert claims["p_c"].is_between(0, 1).all() and claims["p_t"].is_between(0, 1).all()
    assert data.spec.engines.cst.bias_correction == "none"


# ---- intersections tested by default -----------------------------------------------------
def two_attribute_world(n=3000, seed=1, b_share=0.5, rule_b=0.0):
    rng = np.random.default_rng(seed)
    a = (rng.random(n) < 0.5).astype(int)
    b = (rng.random(n) < b_share).astype(int)
    x = rng.normal(50, 10, n) - 4 * a
    coef = {"x": 1.0, "ab": -rule_b}
    spec = parse_spec({
        "name": "w", "source": {"kind": "csv", "path": "w.csv", "id_column": "id"},
        "protected": [{"name": "a", "column": "a", "protected_values": [1], "reference_values": [0]},
                      {"name": "b", "column": "b", "protected_values": [1], "reference_values": [0]}],
        "decision": {"column": "y", "favourable": [1], "unfavourable": [0]},
        "model": {"kind": "linear", "features": ["x"], "coefficients": {"x": 1.0}, "intercept": -50.0},
        "features": [{"name": "x"}],
        "scm": {"equations": [{"target": "x", "parents": ["a", "b"]}]},
        "engines": {"run": ["cst", "regression"], "cst": {"k": [10], "evidence": "none"}},
    })
    score = x - 50 - rule_b * (a & b) + rng.logistic(0, 2, n)
    table = pa.table({"_id": [str(i) for i in range(n)], "_row": np.arange(n), "_g_a": pa.array(a, pa.int8()),
                      "_g_b": pa.array(b, pa.int8()), "x": x, "_decision": pa.array((score > 0).astype(np.int8))})
    return AuditData(spec, table, {}, LinearRule({"x": 1.0}, -50.0)), a, b


def test_auto_pairs_are_one_attribute_per_column():
    spec = parse_spec({
        "name": "w", "source": {"kind": "csv", "path": "w.csv", "id_column": "id"},
        "protected": [{"name": "race", "column": "r", "protected_values": ["B", "A"], "reference_values": ["W"],
                       "compare": "both"},
                      {"name": "sex", "column": "s", "protected_values": ["F"], "reference_values": ["M"]},
                      {"name": "asian", "column": "r", "protected_values": ["A"], "reference_values": ["W"]}],
        "decision": {"column": "y", "favourable": [1], "unfavourable": [0]}, "features": [{"name": "x"}]})
    assert candidate_pairs(spec) == [["race", "sex"]]


def test_auto_skips_a_pair_with_a_small_cell_and_names_it():
    data, a, b = two_attribute_world(b_share=0.01)
    groups = {"a": a, "b": b}
    small = resolve(data.spec, groups, "auto", 30)
    assert small.units == [] and "a&b" in small.skipped and "fewer than 30" in small.skipped["a&b"]
    assert resolve(data.spec, groups, [["a", "b"]], 30).units == [["a", "b"]]  # the spec's choice stands
    out = run_serial(CSTEngine(), data, data.spec.engines.cst)
    tested = set(pl.from_arrow(out["cst_summary"])["protected_attribute"])
    assert tested == {"a", "b"}
    note = pl.from_arrow(out["cst_sampling"]).filter(pl.col("protected_attribute") == "a&b")
    assert note.height == 1 and note["stratum"][0].startswith("intersection not tested:")


def test_auto_intersection_is_tested_by_cst_and_regression_alike():
    data, a, b = two_attribute_world(rule_b=12.0)
    cst = pl.from_arrow(run_serial(CSTEngine(), data, data.spec.engines.cst)["cst_summary"])
    assert "a&b" in set(cst["protected_attribute"])
    est = pl.from_arrow(run_serial(RegressionEngine(), data, data.spec.engines.regression)["regression_estimates"])
    row = est.filter(pl.col("attribute") == "a&b").row(0, named=True)
    decided = np.ones(len(a), bool)
    assert row["n_protected"] == int(((a == 1) & (b == 1) & decided).sum())
    assert row["n_reference"] == int(((a == 0) & (b == 0) & decided).sum())
    # the penalty on the intersection alone: its odds ratio above 1 and significant
    assert row["odds_ratio"] > 1 and row["logit_significant"]
    assert set(est["attribute"]) == {"a", "b", "a&b"}


def test_points_in_files_give_the_same_corrected_claims(tmp_path):
    """On a cluster the points of every record are in files (CSTEngine.spill): the correction
    reads the neighbours' points from them and gets the same claims, bit for bit."""
    data = density_world(0.8, n=1500)
    params = data.spec.engines.cst.model_copy(update={"bias_correction": "logistic", "overlap": 9.0})
    engine = CSTEngine()
    in_memory = pl.from_arrow(run_serial(engine, data, params)["cst_claims"])
    state = engine.spill(engine.prepare(data, params), str(tmp_path))
    parts = [engine.run_piece(state, piece)["cst_claims"] for piece in engine.pieces(state)]
    key = ["protected_attribute", "method", "k", "record_id"]
    spilled = flag_claims(pa.concat_tables(parts), params.alpha)  # combine's step across pieces
    assert pl.from_arrow(spilled).sort(key).equals(in_memory.sort(key))


def test_corrected_claims_do_not_depend_on_row_order():
    """The surface is fitted on the records in record (id) order, not in row order; the
    flags across complainants do not depend on it either."""
    data = density_world(0.8, n=1200)
    perm = np.random.default_rng(2).permutation(1200)
    shuffled = AuditData(data.spec, data.table.take(perm), {}, data.model)
    params = data.spec.engines.cst.model_copy(update={"bias_correction": "logistic", "overlap": 9.0})
    key = ["method", "k", "record_id"]
    a = pl.from_arrow(run_serial(CSTEngine(), data, params)["cst_claims"]).sort(key)
    b = pl.from_arrow(run_serial(CSTEngine(), shuffled, params)["cst_claims"]).sort(key)
    assert a.equals(b)
