"""FGCE in the reference implementation's setup (data/specs/student.yaml): its logistic
regression fitted on a seeded 70% split, the false negatives of the 30% test part as factuals.
Checked against the paper's Table II (k0, d0) and Table III (coverage with one counterfactual)
where this setup reproduces them, and the split and the fit against independent computations."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import REPO, shared_file, stage_spec
from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import SpecError, parse_spec
from aequum.engines.feasibility.classifier import fit_logistic, holdout
from aequum.engines.feasibility.engine import FGCEEngine

REFERENCE = REPO / "data/specs/student.yaml"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    shared_file("FGCE/student.csv")
    data = stage_spec(REFERENCE, tmp_path_factory.mktemp("student_reference"))
    engine = FGCEEngine()
    return data, engine.prepare(data, data.spec.engines.fgce), run_serial(engine, data, data.spec.engines.fgce)


def test_factuals_are_false_negatives_of_the_test_part(reference):
    data, state, _ = reference
    test = holdout(len(data), 0.3, 482)
    assert test.sum() == 195                                     # ⌈0.3 · 649⌉
    assert np.all(test[state.factual]) and np.all(data.label[state.factual] == 1)
    assert state.candidate[~test].any()                          # candidates from every record
    assert not (state.factual & state.candidate).any()
    per_group = {g: int((state.factual & (data.groups["sex"] == g)).sum()) for g in (1, 0)}
    assert per_group == {1: 12, 0: 10}                           # female, male false negatives


def test_split_follows_source_rows_not_table_order(reference):
    """Reversed staged rows: the same test part, the same model, the same factuals (by id)."""
    from aequum.engines.core.data import AuditData
    data, state, _ = reference
    flipped = AuditData(data.spec, data.table.take(np.arange(len(data))[::-1]), data.categories, data.model)
    other = FGCEEngine().prepare(flipped, data.spec.engines.fgce)
    assert set(flipped.ids[other.factual]) == set(data.ids[state.factual])
    assert set(flipped.ids[other.candidate]) == set(data.ids[state.candidate])


def test_reference_setup_reproduces_table_2_and_3(reference):
    """Paper Table II: Student k0 = 2 (G0, female) and 1 (G1, male), d0(G1) = 3.98; Table III:
    with one counterfactual G0 covers 82% of its coverable factuals, G1 all of them."""
    _, _, out = reference
    k0d0 = {r["group_name"]: r for r in out["fgce_k0d0"].to_pylist()}
    assert (k0d0["protected"]["k0"], k0d0["reference"]["k0"]) == (2, 1)
    assert round(k0d0["reference"]["d0_at_k0"], 2) == 3.98
    assert (k0d0["protected"]["coverable"], k0d0["reference"]["coverable"]) == (11, 9)
    curves = [r for r in out["fgce_curves"].to_pylist() if r["curve"] == "coverage" and r["k"] == 1]
    best = {g: max(r["coverage_of_coverable"] for r in curves if r["group_name"] == g)
            for g in ("protected", "reference")}
    assert best["protected"] == pytest.approx(9 / 11) and round(best["protected"], 2) == 0.82
    assert best["reference"] == pytest.approx(1.0)
    stats = {r["group_name"]: r for r in out["fgce_graph_stats"].to_pylist()}
    assert (stats["protected"]["nodes"], stats["protected"]["sccs"]) == (383, 319)   # same graph


def test_holdout_is_the_seeded_permutation_head():
    perm = np.random.RandomState(482).permutation(649)
    test = holdout(649, 0.3, 482)
    assert np.flatnonzero(test).tolist() == sorted(perm[:195].tolist())
    assert holdout(10, 0.25, 0).sum() == 3                       # ⌈2.5⌉
    with pytest.raises(ValueError, match="fraction"):
        holdout(10, 1.0, 0)


@pytest.mark.parametrize("seed", range(5))
def test_logistic_fit_is_the_regularised_optimum(seed):
    """Against Newton's method on the same objective (½‖w‖² + C Σ log(1 + e^{−s(w·x+b)}))."""
    rng = np.random.default_rng(seed)
    X = rng.random((200, 6))
    y = (X @ rng.normal(size=6) + rng.normal(scale=0.5, size=200) > X.sum(1).mean() * 0.1).astype(int)
    C = [0.1, 1.0, 10.0][seed % 3]
    w, b = fit_logistic(X, y, C)
    A = np.column_stack([X, np.ones(len(X))])
    s = np.where(y == 1, 1.0, -1.0)
    theta = np.zeros(7)
    reg = np.r_[np.ones(6), 0.0]
    for _ in range(50):
        p = 1 / (1 + np.exp(s * (A @ theta)))                    # σ(−s·m)
        grad = reg * theta - C * A.T @ (s * p)
        H = np.diag(reg) + C * (A * (p * (1 - p))[:, None]).T @ A
        theta -= np.linalg.solve(H, grad)
    assert np.allclose(np.r_[w, b], theta, atol=1e-6)


def test_logistic_classifier_needs_a_split():
    import yaml
    doc = yaml.safe_load(REFERENCE.read_text())
    del doc["engines"]["fgce"]["test_fraction"]
    with pytest.raises(SpecError, match="test_fraction"):
        parse_spec(doc)
