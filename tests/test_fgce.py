"""FGCE engine (seed 001): the paper's Student graph statistics through the engine, German
credit end to end, invariants of the measures, and bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from conftest import REPO, shared_file, stage_spec
from aequum.engines.core.engine import run_serial
from aequum.engines.feasibility.engine import FGCEEngine, FGCEError

STUDENT = REPO / "data/specs/student_surrogate.yaml"
GERMAN = REPO / "data/specs/german_credit.yaml"


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    shared_file("FGCE/student.csv")
    data = stage_spec(STUDENT, tmp_path_factory.mktemp("student"))
    return data, run_serial(FGCEEngine(), data, data.spec.engines.fgce)


def test_student_graph_statistics_exactly(student):
    _, out = student
    rows = {r["group_name"]: r for r in out["fgce_graph_stats"].to_pylist()}
    female, male = rows["protected"], rows["reference"]          # sex 0 = female (383)
    assert (female["nodes"], female["sccs"], female["wccs"]) == (383, 319, 1)
    assert 0.0421 <= female["density"] <= 0.0422
    assert (male["nodes"], male["sccs"], male["wccs"]) == (266, 229, 2)
    assert 0.0368 <= male["density"] <= 0.0369


def test_measures_invariants(student):
    data, out = student
    import polars as pl
    cur = pl.from_arrow(out["fgce_curves"])
    cov = cur.filter(pl.col("curve") == "coverage")
    for (g,), part in cov.group_by(["group_name"]):
        grid = part.sort(["k", "d"])
        for _, byk in grid.group_by("k"):
            v = byk.sort("d")["coverage"].to_numpy()
            assert np.all(np.diff(v) >= -1e-12)                 # monotone in d
        for _, byd in grid.group_by("d"):
            v = byd.sort("k")["coverage"].to_numpy()
            assert np.all(np.diff(v) >= -1e-12)                 # monotone in k
        assert part["coverage"].max() <= 1 and part["coverage_of_coverable"].max() <= 1
    costs = cur.filter(pl.col("curve") == "cost")
    for _, part in costs.group_by(["group_name", "c"]):
        v = part.sort("k")["cost"].drop_nulls().to_numpy()
        assert np.all(np.diff(v) <= 1e-12)                      # more counterfactuals never cost more
    for r in out["fgce_k0d0"].to_pylist():
        assert r["k0"] >= r["components"] and r["k0"] <= r["k0_greedy"]
        assert r["d_min"] <= r["d0_at_k0"] + 1e-12
        assert r["coverage_at_k"] <= r["dp_coverage_at_k"] + 1e-12   # DP over components ≥ greedy
    for r in out["fgce_auc"].to_pylist():
        if r["measure"] in ("kAUC", "dAUC"):
            assert 0 <= r["auc_normalised"] <= 1
    acf = out["fgce_acf"].to_pylist()
    assert all(0 <= r["acf"] <= 1 for r in acf)
    # every chosen counterfactual is a favourable record of the same group, reachable from its
    # factuals without breaking a constraint on the way (the path's edges are checked in
    # tests/test_fgce_graph.py); here: assignments point to favourable same-group records
    ids = {str(i): k for k, i in enumerate(data.ids)}
    g = data.groups["sex"]
    for r in out["fgce_assignments"].to_pylist():
        f, c = ids[r["factual_id"]], ids[r["counterfactual_id"]]
        assert data.decision[f] == 0 and data.decision[c] == 1 and g[f] == g[c]
        assert r["cost"] <= math.sqrt(len(data.spec.features) * 4)


def test_immutable_and_directions_never_broken_by_a_chosen_counterfactual(student):
    data, out = student
    ids = {str(i): k for k, i in enumerate(data.ids)}
    X = data.feature_values()
    names = data.spec.feature_names
    for r in out["fgce_assignments"].to_pylist():
        f, c = X[ids[r["factual_id"]]], X[ids[r["counterfactual_id"]]]
        for j, n in enumerate(names):
            m = data.spec.feature(n).mutability
            assert not (m == "increase" and c[j] < f[j]), n
            assert not (m == "decrease" and c[j] > f[j]), n
            assert not (m == "immutable" and c[j] != f[j]), n


@pytest.mark.parametrize("edit, message", [
    ({"features": ["nope"]}, "nope"),
    ({"discretise": ["Mjob"]}, "discretised"),
    ({"attributes": ["age"]}, "age"),
])
def test_bad_parameters(student, edit, message):
    data, _ = student
    params = data.spec.engines.fgce.model_copy(update=edit)
    with pytest.raises(FGCEError, match=message):
        FGCEEngine().prepare(data, params)


def test_unknown_transition_category_names_it(staged_data, tmp_path):
    shared_file("FGCE/student.csv")
    doc = yaml.safe_load(STUDENT.read_text())
    doc["source"]["path"] = str(STUDENT.parent / doc["source"]["path"])
    for f in doc["features"]:
        if f["name"] == "Mjob":
            f["transitions"] = {"at_home": ["astronaut"]}
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(doc))
    data = staged_data(p)
    with pytest.raises(FGCEError, match="astronaut"):
        FGCEEngine().prepare(data, data.spec.engines.fgce)


def test_tiny_epsilon_gives_explicit_empty_results(student):
    data, _ = student
    params = data.spec.engines.fgce.model_copy(update={"epsilon": 1e-6})
    out = run_serial(FGCEEngine(), data, params)
    for r in out["fgce_k0d0"].to_pylist():
        assert r["coverable"] == 0 and r["k0"] == 0 and r["coverage_at_k"] == 0
        assert r["d0_at_k0"] is None
    assert out["fgce_counterfactuals"].num_rows == 0
    assert all(r["singletons"] > 0 for r in out["fgce_graph_stats"].to_pylist())


def test_german_credit_end_to_end(staged_data):
    shared_file("FGCE/GermanCredit.data")
    data = staged_data(GERMAN)
    assert len(data) == 1000
    out = run_serial(FGCEEngine(), data, data.spec.engines.fgce)
    stats = {r["group_name"]: r for r in out["fgce_graph_stats"].to_pylist()}
    assert stats["protected"]["nodes"] + stats["reference"]["nodes"] == 1000
    assert stats["protected"]["nodes"] == 310                   # A92 + A95
    assert out["fgce_counterfactuals"].num_rows > 0
    assert {r["measure"] for r in out["fgce_auc"].to_pylist()} == {"kAUC", "dAUC", "cAUC"}


def test_components_are_a_second_round_of_pieces(staged_data):
    """German credit's groups split into many WCCs: the second round fans them out as pieces,
    and combining them gives the whole group's exact k0 and d0."""
    shared_file("FGCE/GermanCredit.data")
    from aequum.engines.feasibility.selection import k0 as exact_k0, min_cost_bisect
    data = staged_data(GERMAN)
    engine = FGCEEngine()
    state = engine.prepare(data, data.spec.engines.fgce)
    first = [engine.run_piece(state, p) for p in engine.pieces(state)]
    state2, pieces = engine.next_round(state, first)
    assert len(pieces) > 2 and all(p[0] == "components" for p in pieces)
    second = [engine.run_piece(state2, p) for p in pieces]
    assert engine.next_round(state2, second) is None
    out = engine.combine(state2, first + second)
    for row in out["fgce_k0d0"].to_pylist():
        c = state2.components[(row["attribute"], row["group_name"])]
        whole = exact_k0(c["reach"], c["comp_f"])
        assert row["k0"] == whole.k0 and row["components"] == whole.n_components
        assert row["d0_at_k0"] == min_cost_bisect(c["reach"], whole.k0, 1.0).d


@pytest.mark.parametrize("group, decision, factuals, coverable", [
    (0, 1, 0, 0),        # every reference-group record favourable: no factuals
    (1, 0, 383, 0),      # every protected-group record rejected: no candidates
])
def test_group_without_factuals_or_candidates(student, group, decision, factuals, coverable):
    """Explicit zeros and nulls, never a crash or a NaN."""
    data, _ = student
    import copy
    d2 = copy.copy(data)
    dec = data.decision.copy()
    dec[data.groups["sex"] == group] = decision
    d2.__dict__["decision"] = dec
    out = run_serial(FGCEEngine(), d2, data.spec.engines.fgce)
    name = "protected" if group == 1 else "reference"
    row = [r for r in out["fgce_k0d0"].to_pylist() if r["group_name"] == name][0]
    assert (row["factuals"], row["coverable"], row["k0"]) == (factuals, coverable, 0)
    assert row["d0_at_k0"] is None
    assert row["coverage_at_k"] == (None if factuals == 0 else 0)


@pytest.mark.parametrize("cost, weights", [("path", "face"), ("path", "reference"), ("hops", "face")])
def test_other_cost_functions(student, cost, weights):
    data, base = student
    params = data.spec.engines.fgce.model_copy(update={"cost": cost, "weights": weights, "k_max": 3,
                                                       "coverage_levels": [1.0]})
    out = run_serial(FGCEEngine(), data, params)
    # reachability does not depend on the cost: same coverable factuals and k0
    for a, b in zip(out["fgce_k0d0"].to_pylist(), base["fgce_k0d0"].to_pylist()):
        assert (a["coverable"], a["k0"]) == (b["coverable"], b["k0"])
    costs = np.array([r["cost"] for r in out["fgce_assignments"].to_pylist()])
    assert np.all(costs >= 0)
    if cost == "hops":
        assert np.allclose(costs, np.round(costs))


@pytest.mark.slow
def test_adult_end_to_end(staged_data):
    """Adult, ε = 0.3 (48,842 rows): runs end to end (about 1.5 minutes; aequum bench fgce)."""
    shared_file("FGCE/adult.csv")
    data = staged_data(REPO / "data/specs/adult.yaml")
    out = run_serial(FGCEEngine(), data, data.spec.engines.fgce)
    stats = {r["group_name"]: r for r in out["fgce_graph_stats"].to_pylist()}
    assert stats["protected"]["nodes"] + stats["reference"]["nodes"] == 48842
    assert all(r["k0"] >= r["components"] for r in out["fgce_k0d0"].to_pylist())
