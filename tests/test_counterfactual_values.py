"""CST's stored counterfactual points (audit.cst_counterfactuals): on a world with a known linear
SCM they are Pearl's abduction–action–prediction done by hand (mediators held at their factual
values), in the spec's units; the stored test-group distances are the engine's mixed distance
(Thanh et al., Eq. 6) to exactly these points; who gets one follows engines.cst.evidence; the
values do not depend on the order of the rows."""
from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.models import LinearRule
from aequum.engines.core.spec import parse_spec
from aequum.engines.matching.cst.counterfactual_values import level_names
from aequum.engines.matching.cst.engine import CSTEngine

GRADES = ["A", "B", "C", "D"]
# the SCM, explicit: x = 10 - 8a + U_x;  y = 5 + 0.5 x - 3a + U_y;  grade = 0.5 + 0.5 a + U_g (rank)
EQUATIONS = [
    {"target": "x", "parents": ["a"], "fit": "explicit", "intercept": 10.0, "coefficients": {"a": -8.0}},
    {"target": "y", "parents": ["a", "x"], "fit": "explicit", "intercept": 5.0,
     "coefficients": {"a": -3.0, "x": 0.5}},
    {"target": "grade", "parents": ["a"], "fit": "explicit", "intercept": 0.5, "coefficients": {"a": 0.5}},
]


def world(n: int = 500, seed: int = 4, order: np.ndarray | None = None, **cst) -> AuditData:
    """Records of a protected attribute ``a`` that lowers x (and through it y) and raises the
    grade; the model approves x + y above 19. ``order``: the rows permuted."""
    rng = np.random.default_rng(seed)
    a = (rng.random(n) < 0.4).astype(np.int8)
    x = 10 - 8 * a + rng.normal(0, 3, n)
    y = 5 + 0.5 * x - 3 * a + rng.normal(0, 2, n)
    g = np.clip(np.rint(1 + 0.5 * a + rng.normal(0, 0.8, n)), 0, 3).astype(int)
    spec = parse_spec({
        "name": "cf", "source": {"kind": "csv", "path": "cf.csv", "id_column": "id"},
        "protected": [{"name": "a", "column": "a", "protected_values": [1], "reference_values": [0]}],
        "model": {"kind": "linear", "features": ["x", "y"], "coefficients": {"x": 1.0, "y": 1.0},
                  "intercept": -19.0, "use_for_decisions": True},
        "features": [{"name": "x", "units": "USD"}, {"name": "y"},
                     {"name": "grade", "type": "ordinal", "order": GRADES}],
        "scm": {"equations": EQUATIONS},
        "engines": {"run": ["cst"], "cst": {"k": [5, 10], "chunk_size": 70, **cst}},
    })
    table = pa.table({"_id": [str(i) for i in range(n)], "_row": np.arange(n), "_g_a": pa.array(a, pa.int8()),
                      "x": x, "y": y, "grade": [GRADES[v] for v in g]})
    if order is not None:
        table = table.take(pa.array(order))
    return AuditData(spec, table, {}, LinearRule({"x": 1.0, "y": 1.0}, -19.0, ["x", "y"]))


def by_hand(data: AuditData, mediators: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """do(a := 0) for every record: abduction (U = value - f(parents)), action, prediction."""
    t = data.table
    a = t["_g_a"].to_numpy().astype(float)
    x, y = t["x"].to_numpy(), t["y"].to_numpy()
    g = np.array([GRADES.index(v) for v in t["grade"].to_pylist()], float)
    u_x, u_y, u_g = x - (10 - 8 * a), y - (5 + 0.5 * x - 3 * a), g - (0.5 + 0.5 * a)
    x_cf = x if "x" in mediators else 10 + u_x
    return {"x": x_cf, "y": 5 + 0.5 * x_cf + u_y, "grade": 0.5 + u_g}


def stored(out) -> pl.DataFrame:
    return pl.from_arrow(out["cst_counterfactuals"])


@pytest.mark.parametrize("mediators", [(), ("x",)])
def test_the_stored_points_are_the_scms_counterfactuals(mediators):
    data = world(mediators=list(mediators))
    out = run_serial(CSTEngine(), data, data.spec.engines.cst)
    cf = stored(out)
    ids = [str(i) for i in data.table["_id"].to_pylist()]
    want = by_hand(data, mediators)
    assert cf.height > 0 and cf["feature"].unique().sort().to_list() == ["grade", "x", "y"]
    for (rid,), rows in list(cf.group_by(["record_id"], maintain_order=True))[:25]:
        i = ids.index(rid)
        got = dict(zip(rows["feature"], rows["value"]))
        assert got == pytest.approx({f: want[f][i] for f in got}, rel=1e-12, abs=1e-12)
        if "x" in mediators:  # held at its factual value, exactly
            assert got["x"] == data.table["x"][i].as_py()
        level = dict(zip(rows["feature"], rows["level"]))
        rank = want["grade"][i]  # the factual rank minus one half: between two grades, or below A
        assert level["x"] is None and level["grade"] == (
            f"between {GRADES[int(rank)]} and {GRADES[int(rank) + 1]}" if rank > 0 else None)
    # the counterfactual decision is the claims' on every row
    claims = pl.from_arrow(out["cst_claims"]).filter(pl.col("method") == "CF").select("record_id",
                                                                                     "decision_counterfactual")
    joined = cf.join(claims, on="record_id", suffix="_claim")
    assert joined.height == cf.height
    assert (joined["decision_counterfactual"] == joined["decision_counterfactual_claim"]).all()


def test_the_stored_distances_are_to_the_stored_point():
    """Each counterfactual test group's distances, recomputed from the stored values with the
    engine's normalisation (z-score with the counterfactual world's statistics; ranks over
    levels - 1), are the stored ones: the exhibit's point is the one searched around."""
    data = world(evidence="all")
    out = run_serial(CSTEngine(), data, data.spec.engines.cst)
    t = data.table
    ids = [str(i) for i in t["_id"].to_pylist()]
    protected = t["_g_a"].to_numpy() == 1
    factual = {"x": t["x"].to_numpy(), "y": t["y"].to_numpy(),
               "grade": np.array([GRADES.index(v) for v in t["grade"].to_pylist()], float)}
    moved = by_hand(data)
    scale = {}
    for f in ("x", "y"):
        w = np.where(protected, moved[f], factual[f])  # the counterfactual world's column
        scale[f] = (w.mean(), w.std(ddof=1))
    fs = {f: (factual[f].mean(), factual[f].std(ddof=1)) for f in ("x", "y")}
    cf = stored(out)
    point = {rid: dict(zip(r["feature"], r["value"])) for (rid,), r in cf.group_by(["record_id"])}
    ev = pl.from_arrow(out["cst_evidence"]).filter(pl.col("centre") == "counterfactual")
    assert set(ev["record_id"]) == set(point) and ev.height == 10 * len(point)
    for row in ev.head(300).iter_rows(named=True):
        p, j = point[row["record_id"]], ids.index(row["neighbour_id"])
        d = sum(abs((p[f] - scale[f][0]) / scale[f][1] - (factual[f][j] - fs[f][0]) / fs[f][1]) for f in ("x", "y"))
        d += abs(p["grade"] - factual["grade"][j]) / 3
        assert row["distance"] == pytest.approx(d / 3, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("mode", ["significant", "discriminated"])
def test_who_gets_a_point_follows_the_evidence(mode):
    data = world(evidence=mode)  # significant: the default
    out = run_serial(CSTEngine(), data, data.spec.engines.cst)
    claims = pl.from_arrow(out["cst_claims"])
    st_cst = set(claims.filter((pl.col("method") != "CF") & pl.col(mode).fill_null(False))["record_id"])
    assert 0 < len(st_cst) < claims.filter(pl.col("method") == "CF").height
    cf_flips = set(claims.filter((pl.col("method") == "CF") & pl.col("discriminated"))["record_id"])
    cf = stored(out)
    assert set(cf["record_id"]) == st_cst | cf_flips == set(pl.from_arrow(out["cst_evidence"])["record_id"]) | cf_flips
    assert cf.height == 3 * cf["record_id"].n_unique()
    every = stored(run_serial(CSTEngine(), data, data.spec.engines.cst.model_copy(update={"evidence": "all"})))
    assert every["record_id"].n_unique() == claims.filter(pl.col("method") == "CF").height
    none = run_serial(CSTEngine(), data, data.spec.engines.cst.model_copy(update={"evidence": "none"}))
    assert none["cst_counterfactuals"].num_rows == 0 and none["cst_evidence"].num_rows == 0
    assert none["cst_claims"].equals(out["cst_claims"])  # storing the points changes no claim


def test_the_points_do_not_depend_on_the_row_order():
    base = world(evidence="all")
    a = stored(run_serial(CSTEngine(), base, base.spec.engines.cst))
    shuffled = world(order=np.random.default_rng(9).permutation(500), evidence="all")
    b = stored(run_serial(CSTEngine(), shuffled, shuffled.spec.engines.cst))
    assert a.height == 3 * int((base.table["_g_a"].to_numpy() == 1).sum())
    assert a.equals(b)  # the same rows, in the same order (record order)


def test_level_names():
    got = level_names(np.array([0.0, 1.0, 1.5, 2.999, 3.0, -0.5, 3.5, np.nan]), GRADES).to_pylist()
    assert got == ["A", "B", "between B and C", "between C and D", "D", None, None, None]
