"""CEC (seed 000): integrated gradients, Δ_CEC, matching, Principle 1, regimes, invariances, bad input."""
from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import torch
from conftest import REPO, shared_file, stage_spec

from aequum.engines.core.data import AuditData
from aequum.engines.core.knn import euclidean_knn
from aequum.engines.core.engine import run_serial
from aequum.engines.core.models import LinearRule, TorchMLP
from aequum.engines.core.spec import SpecError, load_spec, parse_spec
from aequum.engines.matching.cec.attributions import attribute_pairs, completeness_error
from aequum.engines.matching.cec.engine import CECEngine
from aequum.engines.matching.cec.matching import Standardised, baselines, gathered_baselines, match, standardise
from aequum.engines.matching.cec.params import CECParams
from aequum.engines.matching.cec.scores import delta_cec, regimes


# ---- integrated gradients ---------------------------------------------------------------
def random_mlp(d: int, hidden, seed: int) -> TorchMLP:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    return TorchMLP([f"x{j}" for j in range(d)], hidden, 1, rng.normal(size=d), rng.uniform(0.5, 2, d))


def aggregate_completeness(model, X, Xc, B, steps):
    out = attribute_pairs(model, X, Xc, B, "riemann", steps)
    err = np.abs(out["ig"].sum(1) - (out["score"] - out["score_baseline"]))
    return err.sum() / np.abs(out["score"] - out["score_baseline"]).sum(), out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("hidden", [[128, 64], [32, 16], [24], [32, 16, 8]])
def test_exact_ig_is_complete_and_equals_a_very_fine_riemann_sum(seed, hidden):
    """Exact IG on a ReLU MLP (the path's linear segments): Σ IG = f(x) − f(b) to 1e−6 for every
    pair (relative), and the attributions equal the midpoint rule at T = 4096 (whose own error
    is O(1/T) at the kinks); the reported completeness error is the larger of the pair's two."""
    d = 8
    rng = np.random.default_rng(100 + seed)
    X, Xc = rng.normal(size=(300, d)), 2 * rng.normal(size=(300, d))
    B = np.tile(X.mean(0), (300, 1)) + rng.normal(scale=0.3, size=(300, d))
    model = random_mlp(d, hidden, seed)
    out = attribute_pairs(model, X, Xc, B)
    assert out["completeness"].max() < 1e-6
    mine = completeness_error(out["ig"], out["score"], out["score_baseline"])
    assert np.all(out["completeness"] >= mine) and np.all(np.isfinite(out["completeness"]))
    fine = attribute_pairs(model, X[:20], Xc[:20], B[:20], "riemann", 4096)
    scale = np.abs(fine["ig"]).max()
    assert np.abs(out["ig"][:20] - fine["ig"]).max() < 1e-3 * scale
    assert np.abs(out["ig_counterpart"][:20] - fine["ig_counterpart"]).max() < 1e-3 * scale


def test_exact_ig_shallow_and_layer_by_layer_segmentations_agree():
    """The two exact integrals (closed form for up to two hidden layers; the general segment
    search, which serves deeper networks) give the same attributions on the same network; a
    path along which no unit changes sign (one segment) is the gradient times (x − b)."""
    import torch as th

    from aequum.engines.matching.cec.attributions import (_gradient_integral_deep, _gradient_integral_shallow,
                                                      relu_layers)

    rng = np.random.default_rng(5)
    for hidden in ([128, 64], [16], [40, 7]):
        model = random_mlp(6, hidden, 3)
        layers = relu_layers(model)
        X, B = th.from_numpy(rng.normal(size=(200, 6))), th.from_numpy(rng.normal(size=(200, 6)))
        with th.no_grad():
            shallow = _gradient_integral_shallow(layers, X - B, B)
        deep = _gradient_integral_deep(layers, X - B, B)
        assert th.allclose(shallow, deep, rtol=1e-9, atol=1e-12)
    x = rng.normal(size=(1, 6))
    b = x + 1e-9 * rng.normal(size=(1, 6))
    out = attribute_pairs(model, x, x, b)
    assert np.allclose(out["ig"], model.gradient(x) * (x - b), rtol=1e-6, atol=1e-20)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("hidden", [[128, 64], [32, 16]])
def test_riemann_ig_error_shrinks_with_steps(seed, hidden):
    """The paper's midpoint rule (integration riemann): Σ IG = f(x) − f(b) within 1% (summed over
    pairs, relative to Σ|f(x) − f(b)|) only at T = 128, and the error shrinks with T (a ReLU path
    gradient is piecewise constant, so the error is O(1/T) at the kinks)."""
    d = 8
    rng = np.random.default_rng(100 + seed)
    X, Xc = rng.normal(size=(400, d)), rng.normal(size=(400, d))
    B = np.tile(X.mean(0), (400, 1))
    model = random_mlp(d, hidden, seed)
    err128, _ = aggregate_completeness(model, X, Xc, B, 128)
    err32, _ = aggregate_completeness(model, X, Xc, B, 32)
    assert err128 < 0.01
    assert err32 < 0.05 and err128 < err32


def test_ig_is_exact_for_a_linear_model():
    rng = np.random.default_rng(0)
    model = LinearRule({"a": 2.0, "b": -1.0, "c": 0.5}, 3.0, ["a", "b", "c"])
    X, Xc, B = rng.normal(size=(50, 3)), rng.normal(size=(50, 3)), rng.normal(size=(50, 3))
    for method in ("exact", "riemann"):
        out = attribute_pairs(model, X, Xc, B, method, steps=4)
        assert np.allclose(out["ig"], model.weights * (X - B), atol=1e-12)
        assert np.allclose(out["ig_counterpart"], model.weights * (Xc - B), atol=1e-12)
        assert out["completeness"].max() < 1e-9
    with pytest.raises(ValueError, match="integration method"):
        attribute_pairs(model, X, Xc, B, "simpson")


# ---- Δ_CEC ------------------------------------------------------------------------------
def test_delta_cec_range_identical_and_antipodal():
    rng = np.random.default_rng(1)
    g, h = rng.normal(size=(1000, 6)), rng.normal(size=(1000, 6))
    d = delta_cec(g, h)
    assert d.min() >= 0 and d.max() <= 1
    assert np.all(delta_cec(g, g) == 0)
    assert np.allclose(delta_cec(g, 3.0 * g), 0, atol=1e-7)        # same direction, any scale (ε = 1e−8)
    assert np.allclose(delta_cec(g, -0.5 * g), 1, atol=1e-7)       # antipodal
    cos = (g * h).sum(1) / np.linalg.norm(g, axis=1) / np.linalg.norm(h, axis=1)
    assert np.allclose(d, np.sin(np.arccos(np.clip(cos, -1, 1)) / 2), atol=1e-9)  # = sin(θ/2)


def test_regimes_table_1():
    same = np.array([True, True, False, False])
    delta = np.array([0.1, 0.3, 0.1, 0.3])
    assert regimes(same, delta, 0.25).tolist() == ["A", "B", "C", "D"]


# ---- matching ---------------------------------------------------------------------------
def brute_force_match(Z, group, stratum):
    cp = np.full(len(Z), -1)
    dist = np.full(len(Z), np.nan)
    for i in np.flatnonzero(group >= 0):
        pool = np.flatnonzero((group == 1 - group[i]) & (stratum == stratum[i]))
        if len(pool):
            d = np.sqrt(((Z[pool] - Z[i]) ** 2).sum(1))
            j = np.lexsort((pool, d))[0]  # nearest, ties to the smaller position
            cp[i], dist[i] = pool[j], d[j]
    keep = group >= 0
    return cp[keep], dist[keep]


@pytest.mark.parametrize("seed", [0, 1])
def test_matching_equals_brute_force_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = 700
    Z = rng.integers(0, 4, size=(n, 3)).astype(float)  # a coarse grid: many exact ties
    group = rng.choice([-1, 0, 1], size=n, p=[0.1, 0.5, 0.4]).astype(np.int8)
    stratum = rng.integers(0, 2, n).astype(np.int8)
    m = match(Z, group, stratum)
    cp, dist = brute_force_match(Z, group, stratum)
    assert np.array_equal(m.counterpart, cp)
    assert np.allclose(m.distance, dist)
    assert np.all(group[m.counterpart] == 1 - m.group) and np.all(stratum[m.counterpart] == m.stratum)


def test_a_true_tie_after_standardisation_goes_to_the_smaller_id(tmp_path):
    """German credit record 755 (a woman, bad credit) lies 261 DM from men 289 and 561, every
    other financial feature equal. Standardised, the two distances differ by one ulp; the tie
    (equal within the relative tolerance of CST's search, knn.tie_order) goes to 289."""
    shared_file("FGCE", "GermanCredit.data")
    spec = load_spec(REPO / "data" / "specs" / "german_credit_cec.yaml")
    data = stage_spec(spec, tmp_path, REPO / "data" / "specs")
    ids = np.asarray(data.id_text.to_pylist())
    pos = {r: i for i, r in enumerate(ids)}
    Z = standardise(data.feature_values(spec.engines.cec.merit_features(spec)))
    d = {r: np.linalg.norm(Z[pos[r]] - Z[pos["755"]]) for r in ("289", "561")}
    assert d["289"] != d["561"] and np.isclose(d["289"], d["561"], rtol=1e-12, atol=0)
    m = match(Z, data.groups["sex"].astype(np.int8), data.label.astype(np.int8))
    at = np.flatnonzero(m.factual == pos["755"])[0]
    assert ids[m.counterpart[at]] == "289"
    i, _ = euclidean_knn(Z[[pos["289"], pos["561"]]], Z[[pos["755"]]], 1)  # 561 is 1 ulp nearer
    assert i[0, 0] == 0


def test_distance_threshold_rejects_far_matches():
    Z = np.array([[0.0], [0.1], [5.0], [5.05]])
    group = np.array([1, 0, 1, 0], np.int8)
    m = match(Z, group, np.zeros(4, np.int8), max_distance=1.0)
    assert m.matched.all()
    m = match(np.array([[0.0], [3.0], [0.2]]), np.array([1, 0, 0], np.int8), np.zeros(3, np.int8), 1.0)
    assert m.matched.tolist() == [True, False, True]  # 0→2 (0.2); 1→0 (3.0) too far; 2→0 (0.2)
    assert m.counterpart.tolist() == [2, 0, 0]


# ---- engine on small worlds ---------------------------------------------------------------
def spec_for(model_features, financial=("x1", "x2"), engines=None, label=True, model=None):
    raw = {
        "name": "w", "source": {"kind": "csv", "path": "w.csv", "id_column": "id"},
        "protected": [{"name": "a", "column": "a", "protected_values": [1], "reference_values": [0]}],
        "model": model or {"kind": "linear", "features": list(model_features),
                           "coefficients": {f: 1.0 for f in model_features}, "intercept": 0.0,
                           "use_for_decisions": True},
        "features": [{"name": f, "financial": f in financial} for f in ("x1", "x2", "p")],
        "engines": engines or {"run": ["cec"]},
    }
    if label:
        raw["label"] = {"column": "y", "positive": [1]}
    return parse_spec(raw)


def world(n=400, seed=0, twins=False, labels=None):
    """x1, x2 financial; p a proxy shifted for the protected group. ``twins``: every protected
    record has a reference twin with identical x1, x2 and p (the protected attribute differs)."""
    rng = np.random.default_rng(seed)
    if twins:
        half = n // 2
        x = rng.normal(size=(half, 2))
        p = rng.normal(size=half)
        x, p = np.vstack([x, x]), np.concatenate([p, p])
        a = np.r_[np.ones(half), np.zeros(half)].astype(np.int8)
    else:
        a = (rng.random(n) < 0.45).astype(np.int8)
        x = rng.normal(size=(n, 2))
        p = rng.normal(size=n) + 0.8 * a
    y = (x.sum(1) > 0).astype(np.int8) if labels is None else np.asarray(labels, np.int8)
    return pa.table({"_id": [f"r{i:04d}" for i in range(len(a))], "_row": np.arange(len(a)),
                     "_g_a": pa.array(a, pa.int8()), "_label": pa.array(y, pa.int8()),
                     "x1": x[:, 0], "x2": x[:, 1], "p": p})


def branch_model() -> TorchMLP:
    """f = x1 for the reference group and f = x2 for the protected one (inputs x1, x2, p, a):
    relu(±x1 − M·a) and relu(±x2 − M·(1 − a)) with M far beyond the data's range."""
    M = 1000.0
    model = TorchMLP(["x1", "x2", "p", "a"], [4], 1)
    lin1, lin2 = model.net[0], model.net[2]
    with torch.no_grad():
        lin1.weight.copy_(torch.tensor([[1, 0, 0, -M], [-1, 0, 0, -M], [0, 1, 0, M], [0, -1, 0, M]],
                                       dtype=torch.float64))
        lin1.bias.copy_(torch.tensor([0, 0, -M, -M], dtype=torch.float64))
        lin2.weight.copy_(torch.tensor([[1, -1, 1, -1]], dtype=torch.float64))
        lin2.bias.zero_()
    return model


def cec(table, spec, model, **params):
    out = run_serial(CECEngine(), AuditData(spec, table, {}, model), CECParams(**params))
    return out, pl.from_arrow(out["cec_summary"]).filter(pl.col("group") == "all").row(0, named=True)


def test_fair_model_on_exact_twins_scores_zero_and_a_group_branch_scores_high():
    table = world(twins=True)
    fair = LinearRule({"x1": 1.0, "x2": 0.5}, 0.0, ["x1", "x2", "p", "a"])   # ignores a and p
    _, s = cec(table, spec_for(["x1", "x2", "p", "a"]), fair)
    assert s["distance_max"] == 0 and s["coverage"] == 1
    assert s["cec"] < 1e-9 and s["regime_a"] == 1
    surrogate_spec = {"kind": "surrogate", "target": "label", "use_for_decisions": True,
                      "features": ["x1", "x2"], "hidden": [16], "epochs": 100}
    from aequum.engines.core.models import fit_surrogate
    data = AuditData(spec_for(["x1", "x2"], model=surrogate_spec), table)
    mlp = fit_surrogate(data.feature_values(["x1", "x2"]), data.label, ["x1", "x2"], [16], 100)
    _, s = cec(table, spec_for(["x1", "x2"], model=surrogate_spec), mlp)
    assert s["cec"] < 1e-9
    out, s = cec(table, spec_for(["x1", "x2", "p", "a"]), branch_model())
    assert s["cec"] > 0.4 and s["regime_b"] + s["regime_d"] > 0.8
    # exact IG puts the gate's jump (the counterpart's path crosses the indicator from the
    # factual's group) on `a`; the rest of the gap is the factual's own branch: x2 for protected
    # factuals, x1 for reference ones
    feats = pl.from_arrow(out["cec_features"])
    share = {(r["group"], r["feature"]): r["share_of_delta"] for r in feats.iter_rows(named=True)}
    assert feats.filter((pl.col("group") == "all") & (pl.col("rank") == 1))["feature"].item() == "a"
    assert share["protected", "x2"] > 0.45 and share["protected", "x1"] < 0.01
    assert share["reference", "x1"] > 0.45 and share["reference", "x2"] < 0.01


def test_default_summary_reports_completeness_within_one_percent():
    """At default settings (exact integration) the summary's worst completeness error on a ReLU
    surrogate is within 1% (to rounding, in fact); the paper's T = 32 midpoint rule, still
    available as integration riemann, is not on the same model and pairs."""
    from aequum.engines.core.models import fit_surrogate

    table = world(n=600, seed=4)
    names = ["x1", "x2", "p", "a"]
    surrogate = {"kind": "surrogate", "target": "label", "use_for_decisions": True, "features": names,
                 "hidden": [64, 32], "epochs": 60}
    spec = spec_for(names, model=surrogate)
    data = AuditData(spec, table)
    mlp = fit_surrogate(data.feature_values(names), data.label, names, [64, 32], 60)
    _, exact = cec(table, spec, mlp)
    assert exact["integration"] == "exact" and exact["steps"] is None
    assert exact["completeness_max_error"] <= 0.01 and exact["completeness_max_error"] < 1e-6
    _, riemann = cec(table, spec, mlp, integration="riemann", steps=32)
    assert riemann["integration"] == "riemann" and riemann["steps"] == 32
    assert riemann["completeness_max_error"] > 0.01
    assert riemann["cec"] == pytest.approx(exact["cec"], abs=0.02)


def test_both_members_use_the_factuals_baseline():
    """Principle 1: IG(x; b_{y,a}) and IG(x̃; b_{y,a}), b the factual's label-group mean."""
    table = world(n=300, seed=3)
    w = {"x1": 1.5, "x2": -0.7, "p": 0.9, "a": -1.2}
    model = LinearRule(w, 0.3, ["x1", "x2", "p", "a"])
    out, _ = cec(table, spec_for(list(w)), model)
    pairs = pl.from_arrow(out["cec_pairs"])
    df = pl.from_arrow(table).rename({"_id": "id", "_g_a": "a", "_label": "y"})
    X = df.select(["x1", "x2", "p", "a"]).to_numpy().astype(float)
    ids = df["id"].to_list()
    pos = {r: i for i, r in enumerate(ids)}
    base = {(y, a): X[(df["y"] == y).to_numpy() & (df["a"] == a).to_numpy()].mean(0)
            for y in (0, 1) for a in (0, 1)}
    wv = model.weights
    for r in pairs.sample(40, seed=0).iter_rows(named=True):
        b = base[(r["stratum"], r["group"])]
        assert r["baseline_score"] == pytest.approx(b @ wv + 0.3, abs=1e-9)
        g, gc = wv * (X[pos[r["record_id"]]] - b), wv * (X[pos[r["counterpart_id"]]] - b)
        assert r["delta_cec"] == pytest.approx(delta_cec(g[None], gc[None])[0], abs=1e-9)
        own = base[(r["stratum"], 1 - r["group"])]   # the counterpart's own baseline would differ
        assert not np.isclose(delta_cec(g[None], (wv * (X[pos[r["counterpart_id"]]] - own))[None])[0],
                              r["delta_cec"])


def test_pieces_equal_one_piece_and_row_order_does_not_matter():
    table = world(n=500, seed=4)
    spec = spec_for(["x1", "x2", "p", "a"])
    model = TorchMLP(["x1", "x2", "p", "a"], [8], 1)
    one, _ = cec(table, spec, model)
    chunked, _ = cec(table, spec, model, chunk_size=37, batch_pairs=16)
    reversed_, _ = cec(table.take(np.arange(table.num_rows)[::-1]), spec, model)
    for name in ("cec_pairs", "cec_summary", "cec_regimes"):
        assert one[name].equals(chunked[name]), name
        assert one[name].equals(reversed_[name]), name
    assert one["cec_features"].equals(reversed_["cec_features"])
    a, b = pl.from_arrow(one["cec_features"]), pl.from_arrow(chunked["cec_features"])
    assert a.select(["group", "feature", "rank"]).equals(b.select(["group", "feature", "rank"]))
    assert np.allclose(a["share_of_delta"].to_numpy(), b["share_of_delta"].to_numpy(), atol=1e-12)


def test_model_inputs_gathered_in_blocks_change_nothing(monkeypatch):
    """The preparation gathers the model inputs a block of records at a time
    (cec_engine._GATHER) for the baselines and the involved records: every table is the same
    with blocks of 7 records, with an input that is not a merit feature (the group indicator)."""
    import aequum.engines.matching.cec.engine as engine

    table = world(n=500, seed=6)
    spec = spec_for(["x1", "x2", "p", "a"])
    model = TorchMLP(["x1", "x2", "p", "a"], [8], 1)
    whole, _ = cec(table, spec, model)
    monkeypatch.setattr(engine, "_GATHER", 7)
    blocks, _ = cec(table, spec, model)
    for name, t in whole.items():
        assert t.equals(blocks[name]), name


def test_intersections_and_no_label_partition_by_decision():
    table = world(n=300, seed=5).drop_columns(["_label"])
    rng = np.random.default_rng(5)
    table = table.append_column("_g_b", pa.array(rng.integers(0, 2, table.num_rows), pa.int8()))
    spec = parse_spec({
        "name": "w", "source": {"kind": "csv", "path": "w.csv", "id_column": "id"},
        "protected": [{"name": "a", "column": "a", "protected_values": [1], "reference_values": [0]},
                      {"name": "b", "column": "b", "protected_values": [1], "reference_values": [0]}],
        "model": {"kind": "linear", "features": ["x1", "x2", "a"], "intercept": 0.0,
                  "coefficients": {"x1": 1.0, "x2": 1.0, "a": -0.5}, "use_for_decisions": True},
        "features": [{"name": "x1", "financial": True}, {"name": "x2", "financial": True}, {"name": "p"}],
        "engines": {"run": ["cec"], "cec": {"intersections": [["a", "b"]]}},
    })
    model = LinearRule({"x1": 1.0, "x2": 1.0, "a": -0.5}, 0.0, ["x1", "x2", "a"])
    out = run_serial(CECEngine(), AuditData(spec, table, {}, model), spec.engines.cec)
    s = pl.from_arrow(out["cec_summary"])
    assert set(s["attribute"]) == {"a", "b", "a&b"}
    assert set(s["partition_by"]) == {"decision"} and "no label" in s["note"][0]
    inter = pl.from_arrow(out["cec_pairs"]).filter(pl.col("attribute") == "a&b")
    g = pl.from_arrow(table).select(["_id", "_g_a", "_g_b"])
    both = g.filter((pl.col("_g_a") == pl.col("_g_b")))["_id"].sort().to_list()
    assert inter["record_id"].to_list() == both   # only protected-in-both and reference-in-both


# ---- bad input ----------------------------------------------------------------------------
def test_no_financial_features_is_a_spec_error_naming_the_field():
    with pytest.raises(SpecError, match="financial"):
        spec_for(["x1", "x2"], financial=())
    with pytest.raises(SpecError, match=r"engines\.cec\.features"):
        spec_for(["x1", "x2"], engines={"run": ["cec"], "cec": {"features": ["nope"]}})
    with pytest.raises(SpecError, match=r"threshold"):
        spec_for(["x1", "x2"], engines={"run": ["cec"], "cec": {"threshold": 1.5}})


def test_empty_partition_gives_unmatched_rows_and_a_note():
    table = world(n=200, seed=6)
    a = table["_g_a"].to_numpy()
    y = np.where(a == 1, 1, table["_label"].to_numpy())  # every protected record is labelled 1 ...
    y = np.where((a == 0) & (y == 1), 0, y)              # ... and no reference record is
    table = table.set_column(table.schema.get_field_index("_label"), "_label", pa.array(y, pa.int8()))
    out, s = cec(table, spec_for(["x1", "x2"]), LinearRule({"x1": 1.0}, 0.0, ["x1", "x2"]))
    assert s["matched"] == 0 and s["cec"] is None
    assert "unmatched" in s["note"] and "label 1" in s["note"]
    assert pl.from_arrow(out["cec_pairs"])["regime"].null_count() == table.num_rows


def test_a_model_that_is_not_differentiable_is_refused():
    class Lookup:
        feature_names = ("x1", "x2")
        threshold = 0.0

        def score(self, X):
            return np.round(X[:, 0])

        def decide(self, X):
            return (self.score(X) > 0).astype(np.int8)

    with pytest.raises(ValueError, match="differentiable"):
        cec(world(n=50), spec_for(["x1", "x2"]), Lookup())
    with pytest.raises(ValueError, match="needs the spec's model"):
        run_serial(CECEngine(), AuditData(spec_for(["x1", "x2"]), world(n=50), {}, None), CECParams())


def test_standardise_uses_the_audited_records():
    X = np.array([[1.0, 5.0], [3.0, 5.0]])
    assert np.allclose(standardise(X), [[-1, 0], [1, 0]])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_standardised_on_demand_equal_the_whole_matrix_bit_for_bit(seed):
    """Matching reads z-scores of the rows it needs (Standardised): they must be the very bits
    standardise gives the whole matrix, a constant column included (σ = 0 -> 1)."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.lognormal(4, 1, 5000), rng.normal(0, 1e-3, 5000), np.full(5000, 7.0),
                         rng.integers(0, 19, 5000).astype(float)])
    whole = standardise(X.copy())
    lazy = Standardised(X)
    rows = rng.choice(5000, 900, replace=False)
    assert np.array_equal(lazy[rows], whole[rows])
    assert np.array_equal(lazy[np.sort(rows)], whole[np.sort(rows)])
    assert np.array_equal(lazy[np.arange(5000)], whole)
    assert np.array_equal(lazy.raw, X)  # the raw values are kept as they are


@pytest.mark.parametrize("n, block", [(1, 7), (5, 7), (70_001, 4096), (200_000, 1 << 16), (9_999, 10_000)])
def test_statistics_in_blocks_equal_numpys_bit_for_bit(n, block):
    """The merit columns' mean and σ, a block of rows at a time, are numpy's mean and std over
    axis 0 of the whole matrix exactly (values of very different magnitudes: any other order
    of addition would show in the last bits)."""
    from aequum.engines.matching.cec.matching import _blocked_statistics, _z_statistics

    rng = np.random.default_rng(n)
    X = np.column_stack([rng.lognormal(4, 2, n), rng.normal(1e9, 1, n), rng.normal(0, 1e-6, n),
                         rng.integers(0, 19, n).astype(float), np.full(n, 3.0)])
    for got, want in zip(_blocked_statistics(X, block), _z_statistics(X)):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("seed", [0, 1])
def test_baselines_of_gathered_rows_equal_the_matrix_mean_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    M = np.column_stack([rng.lognormal(4, 1, 20000), rng.normal(size=20000), rng.integers(0, 2, 20000)])
    group = rng.choice([-1, 0, 1], 20000, p=[0.2, 0.5, 0.3]).astype(np.int8)
    stratum = rng.integers(0, 2, 20000).astype(np.int8)
    got = gathered_baselines(lambda rows: np.column_stack([M[rows, j] for j in range(3)]), group, stratum)
    assert set(got) == {(s, a) for s in (0, 1) for a in (0, 1)}
    for (s, a), b in got.items():
        assert np.array_equal(b, M[(group == a) & (stratum == s)].mean(axis=0))
    assert all(np.array_equal(got[k], v) for k, v in baselines(M, group, stratum).items())


# ---- HMDA: the surrogate of a generated LAR ------------------------------------------------
def test_hmda_spec_runs_cec_on_its_surrogate(staged_data, tmp_path):
    import yaml

    from conftest import REPO

    raw = yaml.safe_load((REPO / "data" / "specs" / "hmda.yaml").read_text())
    raw["source"]["rows"] = 3000
    raw["model"]["epochs"] = 30
    path = tmp_path / "hmda_small.yaml"
    path.write_text(yaml.safe_dump(raw))
    data = staged_data(path)
    assert "cec" in data.spec.engines.run
    out = run_serial(CECEngine(), data, data.spec.engines.cec)
    s = pl.from_arrow(out["cec_summary"])
    races = [f"race={v}" for v in data.spec.protected[0].protected_values]  # compare: both
    assert set(s["attribute"]) == {"race", *races, "ethnicity", "sex", "tract", "race&sex"}
    assert set(s["partition_by"]) == {"decision"} and all("no label" in n for n in s["note"])
    alls = s.filter((pl.col("group") == "all") & ~pl.col("attribute").str.contains("="))  # tiny groups cover less
    assert (alls["coverage"] > 0.99).all() and (alls["cec"].is_between(0, 1)).all()
    feats = pl.from_arrow(out["cec_features"]).filter((pl.col("attribute") == "race") & (pl.col("group") == "all"))
    assert sorted(feats["feature"]) == sorted(data.spec.model.features)
    assert feats["share_of_delta"].sum() == pytest.approx(1.0)


def test_cec_tables_land_in_the_warehouse_and_the_trends_view(warehouse):
    out, _ = cec(world(n=120, seed=7), spec_for(["x1", "x2", "p", "a"]),
                 LinearRule({"x1": 1.0, "p": 0.5}, 0.0, ["x1", "x2", "p", "a"]))
    warehouse.start_run("r1", "w", "h", "test", {})
    counts = warehouse.write_results("r1", {n: (CECEngine.tables[n], t) for n, t in out.items()})
    assert counts["cec_pairs"] == 120 and counts["cec_summary"] == 3
    with warehouse.transaction():
        warehouse.finish_run("r1", "succeeded")
    assert "cec_trends" in warehouse.create_views()
    trend = warehouse.con.sql("SELECT * FROM audit.cec_trends").to_arrow_table()
    assert trend.num_rows == 3 and set(trend["group"].to_pylist()) == {"all", "protected", "reference"}


def test_pieces_on_a_dask_cluster_equal_the_serial_run():
    """The flow's fan-out: the state is shipped to workers (pickled) and pieces run there."""
    import pickle

    from distributed import Client

    from aequum.engines.core.engine import conform, run_rounds

    table = world(n=300, seed=8)
    spec = spec_for(["x1", "x2", "p", "a"])
    model = TorchMLP(["x1", "x2", "p", "a"], [8], 1)
    data = AuditData(spec, table, {}, model)
    serial = run_serial(CECEngine(), data, CECParams())
    engine = CECEngine()
    state = pickle.loads(pickle.dumps(engine.prepare(data, CECParams(chunk_size=64))))
    pools = len(state.jobs)  # the first round: the pools searched (a stratum of a group each)
    assert pools == 4        # one attribute: two strata x two groups
    with Client(processes=False, n_workers=2, threads_per_worker=1, dashboard_address=":0") as client:
        def run_pieces(st, pieces):
            f = client.scatter(st, broadcast=True)
            return client.gather([client.submit(engine.run_piece, f, p, pure=False) for p in pieces])

        state, parts, n, _ = run_rounds(engine, state, run_pieces)
    assert n == pools + 5
    out = engine.combine(state, parts)
    for name in ("cec_pairs", "cec_summary", "cec_regimes"):
        assert conform(out[name], engine.tables[name], name).equals(serial[name]), name


def test_pairs_integrated_together_equal_each_batch_bit_for_bit():
    """A piece's paths are integrated in blocks of one padded width (two hidden layers): each path
    keeps the width its batch's chunk of PATH_CHUNK paths gives it, so the attributions equal
    those of every batch of ``batch_pairs`` pairs integrated on its own, bit for bit (the padding
    moves the last bits: a width taken from the whole piece would not)."""
    import torch as th

    from aequum.engines.matching.cec.attributions import PATH_CHUNK, _first_layer, _two_hidden_integral, relu_layers

    def one_batch(layers, V, B):  # a batch's paths by sign-change count, chunks of PATH_CHUNK
        c, s, t = _first_layer(layers, V, B)
        flips, on_at_0 = th.isfinite(t), (c > 0) | ((c == 0) & (s > 0))
        count = flips.sum(1)
        rows, out = th.argsort(count, stable=True), th.empty_like(V)
        for start in range(0, len(rows), PATH_CHUNK):
            r = rows[start:start + PATH_CHUNK]
            out[r] = _two_hidden_integral(layers, c[r], s[r], t[r], on_at_0[r], flips[r], int(count[r].max()))
        return V * out

    rng = np.random.default_rng(11)
    model = random_mlp(5, [32, 16], 2)
    layers = relu_layers(model)
    X, Xc, B = (rng.normal(size=(700, 5)) * 3 for _ in range(3))
    out = attribute_pairs(model, X, Xc, B, batch_pairs=100)
    for s in range(0, 700, 100):
        both, base = (th.from_numpy(np.concatenate([a[s:s + 100], b[s:s + 100]])) for a, b in ((X, Xc), (B, B)))
        with th.no_grad():
            ig = one_batch(layers, both - base, base).numpy()
        assert np.array_equal(out["ig"][s:s + 100], ig[:100]) and np.array_equal(out["ig_counterpart"][s:s + 100], ig[100:])


def test_units_sharing_a_pool_search_it_once_with_the_same_matches():
    """Two units with the same reference group (two protected values against it): the searches
    by pool (pool_jobs) list each reference pool once, with both units' factuals, and the
    matches gathered from the pools' searches (in any order) are each unit's own (match)."""
    from aequum.engines.matching.cec.matching import pool_jobs, pool_matches, unit_matches

    rng = np.random.default_rng(4)
    n = 3000
    Z = np.round(rng.normal(size=(n, 3)), 1)   # coarse: many ties, smaller position wins
    value = rng.integers(0, 3, n)               # 0 reference, 1 and 2 two protected values
    stratum = rng.integers(0, 2, n).astype(np.int8)
    units = [np.where(value == 0, 0, np.where(value == v, 1, -1)).astype(np.int8) for v in (1, 2)]
    factuals = [np.flatnonzero(g >= 0) for g in units]
    jobs, empty = pool_jobs(units, factuals, stratum)
    assert len(jobs) == 6 and empty == [[], []]  # two reference pools shared, two protected pools each
    shared = [job for job in jobs if len(job[1]) == 2]  # searched by both units' protected factuals (side 1)
    assert sorted(s for s, _ in shared) == [0, 1] and all(side == ((0, 1), (1, 1)) for _, side in shared)
    found = [m for job in reversed(jobs) for m in pool_matches(Z, units, factuals, stratum, job)]
    for u, g in enumerate(units):
        mine, alone = unit_matches(u, g, stratum, factuals[u], empty[u], found), match(Z, g, stratum)
        assert np.array_equal(mine.counterpart, alone.counterpart)
        assert np.array_equal(mine.distance, alone.distance, equal_nan=True)
        assert np.array_equal(mine.group, alone.group) and np.array_equal(mine.stratum, alone.stratum)
