"""Outcome statistics an auditor can defend, against independent computations: Wilson and
log-method intervals (scipy's binomtest / relative_risk), Holm (hand-computed) and
Benjamini–Hochberg (scipy's false_discovery_control), the small-group flag, both readings of the
four-fifths rule and intersections at the orders the spec asks for."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from scipy.stats import binomtest, false_discovery_control
from scipy.stats.contingency import relative_risk

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import SpecError, parse_spec
from aequum.engines.outcome.engine import OutcomeEngine
from aequum.engines.outcome.params import OutcomeParams
from aequum.engines.outcome.stats import adjust_p_values, ratio_log_interval, wilson_interval


def test_the_normal_quantile_is_scipy_norm_ppf_bit_for_bit():
    """z comes from scipy.special.ndtri, not scipy.stats: the same value to the last bit, so
    every interval is as before."""
    from scipy.stats import norm

    from aequum.engines.outcome.stats import z_value

    levels = np.concatenate([[0.5, 0.8, 0.9, 0.95, 0.975, 0.99, 0.995, 0.999, 0.9999], np.linspace(1e-4, 0.99999, 2001)])
    z_value.cache_clear()
    got = np.array([z_value(float(c)) for c in levels])
    want = np.array([float(norm.ppf(1 - (1 - float(c)) / 2)) for c in levels])
    assert np.array_equal(got, want)
    assert z_value(0.95) == 1.959963984540054


def test_intervals_do_not_import_scipy_stats():
    """Importing scipy.stats took 3.2 s against scipy.special's 1.0 s: a small audit's outcome
    engine and detection's intervals need the normal quantile only."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from aequum.engines.outcome.stats import ratio_log_interval, wilson_interval\n"
            "assert wilson_interval(3, 10, 0.95)[0] > 0 and ratio_log_interval(3, 10, 5, 10, 0.95)[0] > 0\n"
            "assert 'scipy.stats' not in sys.modules, 'scipy.stats imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.parametrize("k,n", [(0, 5), (3, 10), (17, 40), (40, 40), (512, 1000), (1, 100000)])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_wilson_matches_scipy(k, n, confidence):
    ref = binomtest(k, n).proportion_ci(confidence, method="wilson")
    low, high = wilson_interval(k, n, confidence)
    assert low == pytest.approx(ref.low, abs=1e-12) and high == pytest.approx(ref.high, abs=1e-12)


def test_wilson_hand_computed_and_empty():
    # 3/10 at 95 %: (0.3 + 1.92/10 ± 1.96 sqrt(0.021 + 0.0096)) / 1.384 = 0.1078 .. 0.6032
    low, high = wilson_interval(3, 10, 0.95)
    assert (round(low, 4), round(high, 4)) == (0.1078, 0.6032)
    assert wilson_interval(0, 0, 0.95) == (None, None)


@pytest.mark.parametrize("n", [1, 3, 7, 11, 1000])
def test_wilson_interval_holds_its_estimate_at_the_ends(n):
    """0/n and n/n: the bound at the end is exactly 0 or 1, never a rounding past the rate
    (3.6e-17 at 0/7 made a report's error bar negative)."""
    assert wilson_interval(0, n, 0.95)[0] == 0.0 and wilson_interval(n, n, 0.95)[1] == 1.0
    for k in range(0, n + 1, max(1, n // 10)):
        low, high = wilson_interval(k, n, 0.95)
        assert low <= k / n <= high


@pytest.mark.parametrize("k1,n1,k0,n0", [(30, 100, 50, 100), (5, 12, 40, 41), (812, 2000, 1500, 2400)])
@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_di_log_interval_matches_scipy_relative_risk(k1, n1, k0, n0, confidence):
    ref = relative_risk(k1, n1, k0, n0).confidence_interval(confidence)
    low, high = ratio_log_interval(k1, n1, k0, n0, confidence)
    assert low == pytest.approx(ref.low, rel=1e-12) and high == pytest.approx(ref.high, rel=1e-12)


def test_di_log_interval_hand_computed_and_undefined():
    # 30/100 over 50/100: DI 0.6, se = sqrt(1/30 - 1/100 + 1/50 - 1/100) = 0.18257
    low, high = ratio_log_interval(30, 100, 50, 100, 0.95)
    assert low == pytest.approx(0.6 * np.exp(-1.959964 * 0.182574), rel=1e-5)
    assert high == pytest.approx(0.6 * np.exp(1.959964 * 0.182574), rel=1e-5)
    assert ratio_log_interval(0, 10, 5, 10, 0.95) == (None, None)
    assert ratio_log_interval(5, 10, 0, 10, 0.95) == (None, None)


def test_holm_hand_computed():
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005, 3*0.01, 2*0.03, max(prev, 1*0.04)
    p = np.array([0.01, 0.04, 0.03, 0.005, np.nan])
    adj = adjust_p_values(p, "holm")
    assert adj[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02]) and np.isnan(adj[4])
    assert adjust_p_values(np.array([0.5, 0.9]), "holm") == pytest.approx([1.0, 1.0])


def test_bh_matches_scipy_and_hand_computed():
    rng = np.random.default_rng(0)
    for _ in range(20):
        p = rng.random(rng.integers(1, 30)) ** 3
        assert adjust_p_values(p, "bh") == pytest.approx(false_discovery_control(p, method="bh"))
    # sorted 0.005, 0.01, 0.03, 0.04: 4*0.04/4=0.04, 4*0.03/3=0.04, 4*0.01/2=0.02, 4*0.005=0.02
    assert adjust_p_values(np.array([0.01, 0.04, 0.03, 0.005]), "bh") == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert adjust_p_values(np.array([0.2, np.nan]), "none")[0] == 0.2


SPEC3 = {
    "name": "o3",
    "source": {"kind": "csv", "path": "x.csv", "id_column": "id"},
    "protected": [
        {"name": "race", "column": "race", "protected_values": ["B"], "reference_values": ["W"]},
        {"name": "ethnicity", "column": "eth", "protected_values": ["H"], "reference_values": ["N"]},
        {"name": "sex", "column": "sex", "protected_values": ["F"], "reference_values": ["M"]},
    ],
    "decision": {"column": "y", "favourable": [1]},
    "features": [{"name": "x"}],
}


def make(groups: dict[str, list[int]], decision: list[int], outcome: dict | None = None) -> AuditData:
    spec = parse_spec({**SPEC3, "engines": {"outcome": outcome or {}}})
    n = len(decision)
    cols = {"_id": [str(i) for i in range(n)], "_row": pa.array(range(n), pa.int64()),
            **{f"_g_{a}": pa.array(g, pa.int8()) for a, g in groups.items()},
            "_decision": pa.array(decision, pa.int8()), "x": [float(i) for i in range(n)]}
    return AuditData(spec, pa.table(cols))


def blocks(*parts: tuple[int, int, int, int, int]) -> tuple[dict[str, list], list[int]]:
    """Records from (race, ethnicity, sex, n, favourable) blocks (group -1 = unmapped)."""
    g = {"race": [], "ethnicity": [], "sex": []}
    d: list[int] = []
    for race, eth, sex, n, fav in parts:
        g["race"] += [race] * n
        g["ethnicity"] += [eth] * n
        g["sex"] += [sex] * n
        d += [1] * fav + [0] * (n - fav)
    return g, d


def run(data: AuditData) -> dict[str, list[dict]]:
    out = run_serial(OutcomeEngine(), data, data.spec.engines.outcome)
    return {k: v.to_pylist() for k, v in out.items()}


def one(rows, **where):
    (r,) = [r for r in rows if all(r[k] == v for k, v in where.items())]
    return r


def test_pairwise_intersections_keep_records_with_an_unmapped_third_attribute():
    # 100 records have ethnicity unmapped (-1): race x sex keeps them, the 3-way intersection does not
    g, d = blocks((1, 0, 1, 50, 10), (1, -1, 1, 50, 10), (0, 0, 0, 60, 40), (0, -1, 0, 50, 30),
                  (1, 0, 0, 40, 20), (0, 0, 1, 40, 25))
    out = run(make(g, d, {"intersections": "all_pairs"}))
    attrs = {r["attribute"] for r in out["outcome_metrics"]}
    assert attrs == {"race", "ethnicity", "sex", "race&ethnicity", "race&sex", "ethnicity&sex"}
    bf = one(out["outcome_metrics"], attribute="race&sex", group_name="race=protected,sex=protected")
    assert (bf["n"], bf["n_favourable"]) == (100, 20)
    wm = one(out["outcome_metrics"], attribute="race&sex", group_name="race=reference,sex=reference")
    assert (wm["n"], wm["n_favourable"]) == (110, 70)
    gap = one(out["outcome_gaps"], attribute="race&sex", group_name="race=protected,sex=protected")
    assert gap["reference_group"] == "race=reference,sex=reference"
    assert gap["di_ratio"] == pytest.approx(0.2 / (70 / 110))
    # the explicit list form: exactly the orders asked for, 3-way drops the unmapped records
    out = run(make(g, d, {"intersections": [["race", "sex"], ["sex", "ethnicity", "race"]]}))
    assert {r["attribute"] for r in out["outcome_metrics"]} == {
        "race", "ethnicity", "sex", "race&sex", "race&ethnicity&sex"}
    three = [r for r in out["outcome_metrics"] if r["attribute"] == "race&ethnicity&sex"]
    assert sum(r["n"] for r in three) == 190 and len(three) == 8
    assert sum(r["n"] for r in out["outcome_metrics"] if r["attribute"] == "race&sex") == 290
    out = run(make(g, d, {"intersections": "all"}))
    assert len({r["attribute"] for r in out["outcome_metrics"]}) == 7
    out = run(make(g, d, {"intersections": False}))
    assert {r["attribute"] for r in out["outcome_metrics"]} == {"race", "ethnicity", "sex"}


def test_intersections_must_name_protected_attributes():
    with pytest.raises(SpecError, match="engines.outcome.intersections.*religion"):
        make({"race": [0], "ethnicity": [0], "sex": [0]}, [1], {"intersections": [["race", "religion"]]})
    with pytest.raises(SpecError, match="two or more"):
        make({"race": [0], "ethnicity": [0], "sex": [0]}, [1], {"intersections": [["race"]]})


def test_small_group_is_flagged_not_verdicted_and_left_out_of_the_family():
    # race: 20 protected with 2 favourable vs 200 reference with 150: DI 0.13, but too small
    g, d = blocks((1, 0, 0, 20, 2), (0, 0, 0, 100, 75), (0, 1, 1, 100, 75))
    out = run(make(g, d, {"intersections": False, "min_group_size": 30}))
    race = one(out["outcome_gaps"], attribute="race")
    assert race["too_small"] is True and race["verdict"] == "too small to judge"
    assert race["four_fifths_violation"] is None and race["significant"] is None
    assert race["spd_p_value"] < 0.001 and race["spd_p_adjusted"] is None
    assert race["di_ratio"] == pytest.approx(0.1 / 0.75) and race["di_ci_low"] is not None
    m = one(out["outcome_metrics"], attribute="race", group_name="protected")
    assert m["too_small"] is True and m["four_fifths_vs_highest"] is None
    # the same data with a lower threshold: verdicted
    out = run(make(g, d, {"intersections": False, "min_group_size": 20}))
    race = one(out["outcome_gaps"], attribute="race")
    assert race["too_small"] is False and race["verdict"] == "adverse impact"
    assert race["four_fifths_violation"] is True and race["significant"] is True


def test_adjusted_p_values_span_all_groups_of_the_run():
    g, d = blocks((1, 1, 1, 100, 40), (0, 0, 0, 100, 55), (1, 0, 0, 100, 48), (0, 1, 1, 100, 50),
                  (0, 1, 0, 100, 52), (1, 0, 1, 100, 45))
    for correction in ("holm", "bh"):
        out = run(make(g, d, {"intersections": "all_pairs", "correction": correction}))
        gaps = out["outcome_gaps"]
        raw = np.array([r["spd_p_value"] for r in gaps])
        expected = adjust_p_values(raw, correction)
        assert len(gaps) == 3 + 3 * 3  # one gap per attribute, three per pairwise intersection
        assert not np.isnan(raw).any() and not any(r["too_small"] for r in gaps)
        assert [r["spd_p_adjusted"] for r in gaps] == pytest.approx(list(expected))
        assert all(r["correction"] == correction for r in gaps)
        assert all(r["significant"] == (r["spd_p_adjusted"] < 0.05) for r in gaps)
        if correction == "bh":
            assert np.allclose(expected, false_discovery_control(raw, method="bh"))


def test_four_fifths_in_both_directions():
    # race: protected 70 % vs reference 100 %... reversed: the protected group has the higher rate
    # (90 %) and the reference 60 %: DI = 1.5 (no violation against the reference), but the
    # reference is under 4/5 of the highest (0.667): flagged by the EEOC reading.
    g, d = blocks((1, 0, 0, 100, 90), (0, 0, 0, 100, 60))
    out = run(make(g, d, {"intersections": False}))
    gap = one(out["outcome_gaps"], attribute="race")
    assert gap["four_fifths_violation"] is False and gap["four_fifths_vs_highest"] is False
    ref = one(out["outcome_metrics"], attribute="race", group_name="reference")
    assert ref["highest_group"] == "protected" and ref["ratio_to_highest"] == pytest.approx(60 / 90)
    assert ref["four_fifths_vs_highest"] is True
    # the intersection: a subgroup within 4/5 of the reference but under 4/5 of the highest group
    g, d = blocks((1, 0, 1, 100, 52), (0, 0, 0, 100, 60), (1, 0, 0, 100, 75), (0, 0, 1, 100, 58))
    out = run(make(g, d, {"intersections": [["race", "sex"]]}))
    bf = one(out["outcome_gaps"], attribute="race&sex", group_name="race=protected,sex=protected")
    assert bf["di_ratio"] == pytest.approx(52 / 60) and bf["four_fifths_violation"] is False
    assert bf["highest_group"] == "race=protected,sex=reference"
    assert bf["ratio_to_highest"] == pytest.approx(52 / 75) and bf["four_fifths_vs_highest"] is True
    assert bf["verdict"] == "adverse impact"
    # a tiny group with a perfect rate is not the highest group (too small to judge)
    g, d = blocks((1, 0, 1, 5, 5), (0, 0, 0, 100, 60), (1, 0, 0, 100, 55), (0, 0, 1, 100, 58))
    out = run(make(g, d, {"intersections": [["race", "sex"]]}))
    ref = one(out["outcome_metrics"], attribute="race&sex", group_name="race=reference,sex=reference")
    assert ref["highest_group"] == "race=reference,sex=reference" and ref["four_fifths_vs_highest"] is False


def test_rate_intervals_in_metrics_and_independent_of_row_order():
    g, d = blocks((1, 0, 1, 80, 30), (0, 0, 0, 90, 60))
    out = run(make(g, d, {"intersections": False, "confidence": 0.9}))
    m = one(out["outcome_metrics"], attribute="race", group_name="protected")
    ref = binomtest(30, 80).proportion_ci(0.9, method="wilson")
    assert (m["rate_ci_low"], m["rate_ci_high"]) == pytest.approx((ref.low, ref.high))
    gap = one(out["outcome_gaps"], attribute="race")
    rr = relative_risk(30, 80, 60, 90).confidence_interval(0.9)
    assert (gap["di_ci_low"], gap["di_ci_high"]) == pytest.approx((rr.low, rr.high))
    assert gap["shortfall"] == round(80 * 60 / 90 - 30)
    perm = np.random.default_rng(1).permutation(len(d))
    rev = run(make({k: [v[i] for i in perm] for k, v in g.items()}, [d[i] for i in perm],
                   {"intersections": False, "confidence": 0.9}))
    assert rev == out


def test_defaults_are_documented():
    p = OutcomeParams()
    assert (p.confidence, p.min_group_size, p.correction, p.intersections) == (0.95, 30, "holm", True)
    assert all(f.description for f in OutcomeParams.model_fields.values())
