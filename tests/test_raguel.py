"""RAGUEL (seed 002): Example 1 through the engine for both algorithms, the algorithms'
guarantees on random rankings, Eq. 3, and bad input."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import REPO, stage_spec
from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import parse_spec
from aequum.engines.reranking.algorithms import eq3_holds, repair_block, rerank, rerank_blocks
from aequum.engines.reranking.engine import RaguelEngine, RaguelError
from aequum.engines.reranking.fairness import (cost_interval, count_bounds, eq3_bound, ranked_represented,
                                        ratio, ratio_of, represented, shares)
from aequum.engines.reranking.recourse import Actionability, LinearRecourse, PointRecourse

EXAMPLE = REPO / "data/specs/raguel_example.yaml"


def example_recourse():
    act = Actionability(weight=[0.5, 1], mutable=[1, 1], direction=[0, 0], step=[0.05, 1],
                        low=[0, 0], high=[1000, 40])
    return LinearRecourse([-2.0, 1.0], 0.0, act)


@pytest.fixture(scope="module")
def example_out(tmp_path_factory):
    data = stage_spec(EXAMPLE, tmp_path_factory.mktemp("raguel"))
    return run_serial(RaguelEngine(), data, data.spec.engines.raguel)


@pytest.mark.parametrize("algorithm", ["full", "block"])
def test_example_1_table_2_exactly(example_out, algorithm):
    rk = example_out["raguel_ranking"].to_pylist()
    rk = [r for r in rk if r["algorithm"] == algorithm]
    assert [r["record_id"] for r in rk] == ["Abdul", "Chiara", "Bogdan", "Diana"]
    assert [r["position"] for r in rk] == [1, 2, 3, 4]                 # ranks from 1, as Table 2
    assert [r["rank_before"] for r in rk] == [1, 3, 2, 4]
    assert [round(r["cost_before"], 2) for r in sorted(rk, key=lambda r: r["rank_before"])] == [0.33, 1.00, 1.33, 2.00]
    assert [round(r["cost_after"], 3) for r in rk] == [0.333, 0.967, 1.0, 2.0]
    assert [r["moved"] for r in rk] == [False, True, False, False]
    acts = [a for a in example_out["raguel_actions"].to_pylist() if a["algorithm"] == algorithm]
    assert len(acts) == 1
    a = acts[0]
    assert (a["record_id"], a["feature"], a["value_before"], round(a["value_after"], 2), a["steps"],
            a["overtakes"]) == ("Chiara", "loan_amount", 4.0, 3.45, 11, "Bogdan")
    assert round(a["cost_after"], 3) == 0.967
    s = [r for r in example_out["raguel_summary"].to_pylist()
         if r["algorithm"] == algorithm and r["configuration"] == "main"][0]
    assert s["points_changed"] == 1 and s["success"]
    assert s["r_before"] == pytest.approx(0.4) and s["r_after"] == pytest.approx((2 / 3) / ((0.9666666 + 2) / 2), rel=1e-5)
    # four records: no cut-off of 10 fits, so the measures use the cut-offs 1..4 and say so;
    # both women last is the most unfair order, Chiara's move halves the gap at the top
    assert (s["rKL_before"], s["rND_before"], s["rRD_before"]) == (1.0, 1.0, 1.0)
    assert 0 < s["rND_after"] < 1 and 0 < s["rKL_after"] < 1 and 0 < s["rRD_after"] < 1
    assert "cut-offs 1..4" in s["note"]


def test_example_1_blocks_of_four_need_nothing(example_out):
    s = [r for r in example_out["raguel_summary"].to_pylist() if r["block_size"] == 4]
    assert s and all(r["points_changed"] == 0 and r["unfair_blocks_before"] == 0 for r in s)
    blocks = example_out["raguel_blocks"].to_pylist()
    # blocks of two: [Abdul, Bogdan] and [Chiara, Diana] are both one-sided in the input; moving
    # Chiara up repairs both
    assert [(b["fair_before"], b["fair_after"]) for b in blocks] == [(False, True), (False, True)]


def test_strict_recourse_rule_demands_more():
    r = example_recourse()
    X = np.array([[3.5, 6], [2, 1], [4, 4], [5, 4]])
    g = np.array([0, 0, 1, 1])
    res = rerank(r.cost(X), g, X, r, shares(g, 2), recourse="strict")
    # r([Abdul, Chiara']) >= 0.9 needs Chiara's cost within [0.3, 0.37]: loan amount 2.55
    assert res.moves[0].action.after == pytest.approx((2.55,))
    assert 0.3 <= res.moves[0].action.cost_after <= 0.3704


def random_instance(rng, n=60, d=3, share=0.3):
    X = rng.uniform(0, 10, (n, d))
    a = rng.uniform(0.5, 2, d) * rng.choice([-1, 1], d)
    b = -(X @ a).max() - 1.0                    # everyone rejected
    w = rng.uniform(0.2, 2, d)
    mut = rng.random(d) < 0.8
    mut[0] = True
    step = rng.choice([0.1, 0.5, 1.0], d)
    act = Actionability(w, mut, np.zeros(d), step, np.full(d, -100.0), np.full(d, 110.0))
    model = LinearRecourse(a, b, act)
    cost = model.cost(X)
    order = np.argsort(cost, kind="stable")
    g = (rng.random(n) < share).astype(np.int64)[order]
    return cost[order], g, X[order], model, act


@pytest.mark.parametrize("seed", range(12))
def test_algorithm_1_guarantees(seed):
    rng = np.random.default_rng(seed)
    cost, g, X, model, act = random_instance(rng)
    p = shares(g, 2)
    res = rerank(cost, g, X, model, p, t=1 / 3)
    assert sorted(res.order.tolist()) == list(range(len(cost)))
    ok = ranked_represented(g[res.order], p, 1 / 3)
    if res.success:
        assert ok.all()
    else:
        assert ok[:res.exit_at].all()
    for m in res.moves:
        row_before, row_after = X[m.record], res.X[m.new_position]
        delta = row_after - row_before
        assert np.all(delta[~act.mutable] == 0)                       # immutables never move
        steps = delta / act.step
        assert np.allclose(steps, np.rint(steps), atol=1e-6)           # whole steps only
        assert model.cost(row_after)[0] < cost[m.overtakes]            # strictly above the overtaken
        assert res.cost[m.new_position] == pytest.approx(model.cost(row_after)[0])


def arrival_ratio(members, info, cost, g) -> float:
    """r of a block as it arrived at its repair (the points it pushed down back in, the points
    it pulled up out); none of them is modified later, so the final costs are theirs."""
    came = {j for j, _, _ in info["moves"]}
    arrived = [i for i in members if i not in came] + [l for _, l, _ in info["moves"]]
    return ratio_of(cost[arrived], g[arrived], 2)


@pytest.mark.parametrize("seed", range(12))
def test_algorithm_2_moves_improve_r_and_fix_blocks(seed):
    rng = np.random.default_rng(100 + seed)
    cost, g, X, model, act = random_instance(rng, n=80)
    p = shares(g, 2)
    X0, c0 = X.copy(), cost.copy()
    out = list(rerank_blocks(cost, g, X, model, p, [list(range(s, min(s + 10, 80))) for s in range(0, 80, 10)]))
    members = np.concatenate([m for m, _ in out])
    assert sorted(members.tolist()) == list(range(80))
    for b, (m, info) in enumerate(out):
        if info["repaired"]:
            assert info["fair_after"]
            r0 = arrival_ratio(m, info, cost, g)     # the recourse condition, swap by swap
            assert info["r_after"] >= min(0.9, r0) - 1e-12 or r0 == 1.0
        if not info["repaired"]:
            assert info["moves"] == []                                # copied as is
        for j, l, a in info["moves"]:
            assert c0[j] > cost[j] and cost[j] < c0[l] + 1e-12      # came up below the leaver
            assert np.all((X[j] - X0[j])[~act.mutable] == 0)
            assert abs(b * 10 - j) < 20                               # moved at most one block


def dense_instance(seed: int, n: int = 20_000):
    """A long cost-ranked list of whole-step applicants (income in $1k, loan-to-value in %),
    groups at random: inside a block of 50 the group means are nearly equal (r ≈ 1)."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.integers(20, 100, n), rng.integers(50, 100, n)]).astype(float)
    act = Actionability([1.0, 0.01], [True, True], [1, -1], [1.0, 1.0], [0, 0], [1000, 100])
    model = LinearRecourse(np.array([0.02, -0.05]), -20.0, act)
    cost = model.cost(X)
    order = np.argsort(cost, kind="stable")
    return cost[order], (rng.random(n) < 0.3).astype(np.int64), X[order], model


def _blocks(n, size):
    return [list(range(s, min(s + size, n))) for s in range(0, n, size)]


def test_algorithm_2_repairs_dense_rankings():
    """Algorithm 2 makes the blocks fair, as the paper reports at HMDA scale; Eq. 3 on every swap
    (or "r may not fall") leaves many unfair because no whole step lands inside its window."""
    cost, g, X, model = dense_instance(0)
    p = shares(g, 2)
    got = {}
    for eq3 in ("outside_tolerance", "always", "no_worse"):
        c, x = cost.copy(), X.copy()
        out = list(rerank_blocks(c, g, x, model, p, _blocks(len(c), 50), eq3=eq3))
        got[eq3] = (sum(not i["fair_before"] for _, i in out), sum(not i["fair_after"] for _, i in out))
        for members, info in out:
            for j, l, a in info["moves"]:
                assert c[j] < cost[l] + 1e-12                         # came up above the leaver
            if info["repaired"]:
                r0 = arrival_ratio(members, info, c, g)
                assert info["r_after"] >= (r0 if eq3 == "no_worse" else min(0.9, r0)) - 1e-12 or r0 == 1.0
    before = got["outside_tolerance"][0]
    assert before > 30 and all(v[0] == before for v in got.values())   # the input's blocks
    assert got["outside_tolerance"][1] == 0
    assert got["always"][1] > before // 4 and got["no_worse"][1] > before // 4


def test_eq3_on_every_swap_holds_for_every_move():
    """eq3="always": every swap of a repair satisfies Eq. 3 as printed (replayed swap by swap)."""
    cost, g, X, model = dense_instance(1, 4000)
    p = shares(g, 2)
    swaps = 0
    for s in range(0, 3900, 50):
        B, N = list(range(s, s + 50)), list(range(s + 50, s + 100))
        c = cost.copy()
        res = repair_block(B, N, c, g, X.copy(), model, p, 1 / 3, 0.1, "improve", "nearest",
                           np.ones(len(c), bool), "always")
        if res is None:
            continue
        cur = list(B)
        for j, l, a in res[2]:
            cu = np.array([c[i] for i in cur if g[i] == g[j]])
            co = np.array([c[i] for i in cur if g[i] == g[l]])
            assert eq3_holds(cu.mean() if len(cu) else 0.0, len(cu), co.mean(), len(co), c[l], c[j])
            cur.remove(l)
            cur.append(j)
            swaps += 1
    assert swaps > 10


def test_unfair_before_counts_the_input_blocks():
    """"Unfair blocks before" is a property of the input ranking, whatever the reading."""
    from aequum.engines.reranking.fairness import count_bounds
    cost, g, X, model = dense_instance(2, 5000)
    p = shares(g, 2)
    lo, hi = count_bounds(50, p, 1 / 3)
    want = [not np.all((np.bincount(g[b], minlength=2) >= lo) & (np.bincount(g[b], minlength=2) <= hi))
            for b in _blocks(len(g), 50)]
    out = list(rerank_blocks(cost.copy(), g, X.copy(), model, p, _blocks(len(g), 50)))
    assert [not i["fair_before"] for _, i in out] == want


@pytest.mark.parametrize("seed", range(200))
def test_eq3_is_the_improvement_condition(seed):
    rng = np.random.default_rng(seed)
    n1, n2 = int(rng.integers(1, 6)), int(rng.integers(2, 8))
    c1, c2 = rng.uniform(0.1, 3, n1), rng.uniform(0.1, 3, n2)
    mu1, mu2 = c1.mean(), c2.mean()
    leave = rng.choice(c2)
    new = rng.uniform(0, 4)
    mu1n = (c1.sum() + new) / (n1 + 1)
    mu2n = (c2.sum() - leave) / (n2 - 1)
    before, after = mu1 / mu2, mu1n / mu2n
    # Eq. 3 holds exactly when μ₁/μ₂ moves towards 1 from its side (or crosses it)
    if abs(after - before) > 1e-9:
        assert eq3_holds(mu1, n1, mu2, n2, leave, new) == ((after > before) if mu1 < mu2 else (after < before))
    # the engine's interval (r = min/max must not fall) implies Eq. 3
    sums, counts = np.array([c1.sum(), c2.sum() - leave]), np.array([n1, n2 - 1])
    lo, hi = cost_interval(sums, counts, 0, ratio(np.array([c1.sum(), c2.sum()]), np.array([n1, n2])))
    if lo <= new <= hi:
        assert eq3_holds(mu1, n1, mu2, n2, leave, new)
        assert ratio(sums + [new, 0], counts + [1, 0]) >= min(before, 1 / before) - 1e-9


def test_definitions():
    p = np.array([0.5, 0.5])
    assert represented(np.array([1, 1]), p, 1 / 3) and not represented(np.array([2, 0]), p, 1 / 3)
    lo, hi = count_bounds(2, np.array([0.35, 0.65]), 1 / 3, "strict")
    assert lo[0] > hi[0]                                      # no count satisfies Def. 3.1 literally
    lo, hi = count_bounds(2, np.array([0.35, 0.65]), 1 / 3, "nearest")
    assert (lo[0], hi[0]) == (1, 1)
    assert ratio(np.array([5.837 * 3, 7.688 * 2]), np.array([3, 2])) == pytest.approx(0.759, abs=5e-4)
    assert ratio(np.array([3.0, 0.0]), np.array([2, 0])) == 1.0
    assert eq3_bound(1.0, 0, 2.0, 3, 1.0) is None


def test_point_target_ranking():
    act = Actionability([1.0, 2.0], [True, True], [0, 0], [1.0, 1.0], [0, 0], [10, 10])
    model = PointRecourse(np.array([10.0, 10.0]), act)
    x = np.array([4.0, 6.0])
    a = model.modify(x, hi_cost=float(model.cost(np.array([[6.0, 6.0]]))[0]))
    assert a.attributes == (0,) and a.after == (7.0,)
    assert model.cost(np.array([[10, 10]]))[0] == 0


def _spec(**raguel):
    import yaml
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["engines"]["raguel"].update(raguel)
    return doc


def _example_doc() -> dict:
    """Example 1's spec as a dict, its CSV path made absolute (for edited copies in tmp)."""
    import yaml
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["source"]["path"] = str(EXAMPLE.parent.parent / "examples/raguel_example1.csv")
    return doc


def _zero_weight(doc):
    doc["features"][0]["recourse_weight"] = 0


def _absent_group(doc):
    doc["protected"][0].update(protected_values=["X"], unmapped="exclude")


def _all_immutable(doc):
    for f in doc["features"]:
        f["mutability"] = "immutable"


@pytest.mark.parametrize("edit, message", [
    (_zero_weight, "loan_amount.*recourse_weight"),      # weights of zero
    (_absent_group, "no protected member"),               # a group absent from the ranked records
    (_all_immutable, "not repairable"),                   # no feasible action reaches the boundary
])
def test_bad_input_errors(staged_data, tmp_path, edit, message):
    import yaml
    doc = _example_doc()
    edit(doc)
    spec_path = tmp_path / "s.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    data = staged_data(spec_path)
    with pytest.raises(RaguelError, match=message):
        RaguelEngine().prepare(data, data.spec.engines.raguel)


def test_linear_boundary_needs_coefficients():
    from aequum.engines.core.spec import SpecError
    with pytest.raises(SpecError, match="coefficients"):
        parse_spec({**_spec(), "engines": {"raguel": {"boundary": "linear"}}})


@pytest.mark.parametrize("batch", [7, 30, 64, 1000])
def test_streaming_equals_in_memory(batch):
    """The sliding window gives the in-memory Algorithm 2's result for any input batch size."""
    import pyarrow as pa
    from aequum.engines.reranking.stream import StreamSummary, rerank_stream
    rng = np.random.default_rng(7)
    cost, g, X, model, act = random_instance(rng, n=230)
    p = shares(g, 2)
    c_mem, X_mem = cost.copy(), X.copy()
    blocks = [list(range(s, min(s + 10, 230))) for s in range(0, 230, 10)]
    mem = list(rerank_blocks(c_mem, g, X_mem, model, p, blocks))
    order = np.concatenate([m for m, _ in mem])
    table = pa.table({"record_id": [str(i) for i in range(230)], "group": g, "cost": cost,
                      **{f"f{j}": X[:, j] for j in range(X.shape[1])}})
    summary = StreamSummary(2)
    out = pa.Table.from_batches(list(rerank_stream(table.to_batches(max_chunksize=batch),
                                                   [f"f{j}" for j in range(X.shape[1])], model, p, 10,
                                                   summary=summary)))
    assert out["record_id"].to_pylist() == [str(i) for i in order]
    assert np.allclose(out["cost_after"].to_numpy(), c_mem[order])
    assert summary.unfair_before == sum(not i["fair_before"] for _, i in mem)
    assert summary.unfair_after == sum(not i["fair_after"] for _, i in mem)
    assert summary.rows == 230 and summary.blocks == 23


def test_out_of_core_lake_rerank(tmp_path):
    """DuckDB ranks a staged lake out of core; the streaming Algorithm 2 gives the engine's
    in-memory Algorithm 2 result for the same records."""
    import pyarrow.parquet as pq
    import yaml
    from aequum.engines.core.data import AuditData
    from aequum.engines.core.spec import parse_spec
    from aequum.flows.store.lake_reading import load_lake
    from aequum.flows.raguel_stream import rerank_lake
    from aequum.flows.store.staging import stage
    from aequum.flows.store.warehouse import Warehouse
    doc = yaml.safe_load((REPO / "data/specs/loan.yaml").read_text())
    doc["source"]["rows"] = 1200
    doc["engines"] = {"run": ["raguel"], "raguel": {"block_size": 10, "algorithms": ["block"],
                                                    "sweep_tolerances": []}}
    spec = parse_spec(doc)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        ref = stage(spec, REPO / "data/specs", wh, tmp_path / "lake")
    summary = rerank_lake(ref.lake_path, spec, spec.engines.raguel, "gender", tmp_path / "out.parquet",
                          batch_rows=97)
    streamed = pq.read_table(tmp_path / "out.parquet")
    from aequum.flows.model_step import fit_model
    table = load_lake(ref.lake_path)
    data = AuditData(spec, table, ref.categories, fit_model(spec, REPO / "data/specs", table, ref.categories))
    mem = run_serial(RaguelEngine(), data, spec.engines.raguel)
    ranking = mem["raguel_ranking"]
    assert streamed["record_id"].to_pylist() == ranking["record_id"].to_pylist()
    assert np.allclose(streamed["cost_after"].to_numpy(), ranking["cost_after"].to_numpy())
    s = mem["raguel_summary"].to_pylist()[0]
    assert summary["unfair_blocks_before"] == s["unfair_blocks_before"]
    assert summary["unfair_blocks_after"] == s["unfair_blocks_after"]
    assert summary["points_changed"] == s["points_changed"]


def test_plain_ranking_towards_a_target_point(staged_data, tmp_path):
    """Example 2's setting: no classifier, the counterfactual is one target point."""
    import yaml
    doc = _example_doc()
    doc["engines"]["raguel"] = {"boundary": "target", "target": {"loan_amount": 1.0, "loan_duration": 8.0},
                                "block_size": 2, "sweep_tolerances": []}
    p = tmp_path / "t.yaml"
    p.write_text(yaml.safe_dump(doc))
    data = staged_data(p)
    out = run_serial(RaguelEngine(), data, data.spec.engines.raguel)
    rk = [r for r in out["raguel_ranking"].to_pylist() if r["algorithm"] == "full"]
    costs = sorted(r["cost_before"] for r in rk)
    # √(0.5·(LA − 1)² + (LD − 8)²) for Abdul, Bogdan, Chiara, Diana
    want = sorted(np.sqrt(0.5 * (np.array([3.5, 2, 4, 5]) - 1) ** 2 + (np.array([6, 1, 4, 4]) - 8) ** 2))
    assert np.allclose(costs, want)
    s = [r for r in out["raguel_summary"].to_pylist() if r["algorithm"] == "full"][0]
    assert s["success"]
    assert ranked_represented(np.array([0 if r["group_name"] == "protected" else 1 for r in rk]),
                              np.array([0.5, 0.5]), 1 / 3).all()
