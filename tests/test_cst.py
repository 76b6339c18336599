"""CST (seed 003): the paper's Table 1-3 exactly, SCM counterfactuals, properties, bad input."""
from __future__ import annotations

import copy

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from conftest import REPO, shared_file
from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.models import LinearRule
from aequum.engines.core.spec import parse_spec
from aequum.engines.matching.cst.engine import CSTEngine
from aequum.engines.matching.cst.params import CSTParams
from aequum.engines.matching.cst.scm import Equation, LinearSCM, SCMError
from aequum.engines.matching.cst.situation_testing import CLAIMS, flag_claims

LOAN = "counterfactual-situation-testing", "data", "LoanApplication_v2.csv"


@pytest.fixture(scope="module")
def loan_out(tmp_path_factory):
    shared_file(*LOAN)
    from aequum.engines.core.spec import load_spec
    from aequum.flows.model_step import fit_model
    from aequum.flows.store.staging import stage
    from aequum.flows.store.warehouse import Warehouse

    spec = load_spec(REPO / "data" / "specs" / "loan_reference.yaml")
    tmp = tmp_path_factory.mktemp("loan")
    with Warehouse(tmp / "wh.duckdb") as wh:
        ref = stage(spec, REPO / "data" / "specs", wh, tmp / "lake")
        table = wh.staged(ref.version)
    data = AuditData(spec, table, ref.categories, fit_model(spec, tmp, table, ref.categories))
    return data, run_serial(CSTEngine(), data, spec.engines.cst)


def test_table_1_cell_for_cell(loan_out):
    _, out = loan_out
    s = pl.from_arrow(out["cst_summary"])
    got = {(r["method"], r["k"]): r["discriminated"] for r in s.iter_rows(named=True)}
    want = {"ST": [55, 65, 84, 107], "CST_wo_centres": [288, 313, 342, 395], "CST": [420, 434, 453, 480]}
    for method, counts in want.items():
        assert [got[(method, k)] for k in (15, 30, 50, 100)] == counts, method
    assert got[("CF", 0)] == 376
    assert set(s["complainants"].to_list()) == {1712}


@pytest.mark.parametrize("cid, p_c, p_t, dp, low, high, star", [
    ("44", 1.00, 0.00, 1.00, 1.00, 1.00, True), ("55", 0.81, 0.00, 0.81, 0.65, 0.97, True),
    ("150", 1.00, 0.94, 0.06, -0.04, 0.16, False), ("203", 1.00, 0.88, 0.13, -0.01, 0.26, False),
    ("218", 0.56, 0.00, 0.56, 0.36, 0.77, True), ("5", 0.06, 0.0, 0.06, -0.04, 0.16, False),
    ("147", 0.50, 0.0, 0.5, 0.29, 0.71, True), ("435", 0.38, 0.0, 0.38, 0.18, 0.58, True),
    ("1958", 0.13, 0.0, 0.13, -0.01, 0.26, False), ("2926", 0.75, 0.0, 0.75, 0.57, 0.93, True),
])
def test_tables_2_and_3_intervals(loan_out, cid, p_c, p_t, dp, low, high, star):
    _, out = loan_out
    c = pl.from_arrow(out["cst_claims"]).filter(
        (pl.col("record_id") == cid) & (pl.col("method") == "CST") & (pl.col("k") == 15)).row(0, named=True)
    # the paper prints two decimals (half up): agree to within half a unit of the last digit
    assert (c["p_c"], c["p_t"], c["delta_p"]) == pytest.approx((p_c, p_t, dp), abs=0.0051)
    # the paper prints Δp ± z_{1-α}·SE (z = 1.645) as its interval, from the already rounded Δp
    # (complainant 435: 0.38 ± 0.199 -> [0.18, 0.58]; unrounded 0.375 gives 0.574): one unit
    assert c["one_sided_low"] == pytest.approx(low, abs=0.0101)
    assert c["delta_p"] + 1.6448536 * c["se"] == pytest.approx(high, abs=0.0101)
    assert c["significant"] is star and c["discriminated"] is True
    assert c["ci_low"] <= c["one_sided_low"]  # the two-sided 95% interval is wider (equal when SE = 0)


def test_evidence_names_who_was_compared(loan_out):
    data, out = loan_out
    ev = pl.from_arrow(out["cst_evidence"]).filter(pl.col("record_id") == "55")
    flagged = pl.from_arrow(out["cst_claims"]).filter((pl.col("record_id") == "55") & pl.col("discriminated")
                                                      & (pl.col("method") != "CF"))
    depth = flagged["k"].max()
    ctrl = ev.filter(pl.col("search_group") == "control")
    assert ctrl["rank"].to_list() == list(range(1, depth + 1)) and "55" not in ctrl["neighbour_id"].to_list()
    g = data.groups["gender"]
    assert all(g[int(i)] == 1 for i in ctrl["neighbour_id"])
    assert all(g[int(i)] == 0 for i in ev.filter(pl.col("search_group") == "test")["neighbour_id"])
    assert ctrl["distance"].is_sorted()


def test_ols_counterfactuals_match_the_reference_file():
    ref = pl.read_csv(shared_file("counterfactual-situation-testing", "data", "counterfactuals",
                                  "cf_LoanApplication_v2.csv"), separator="|")
    df = pl.read_csv(shared_file(*LOAN), separator="|")
    values = {"gender": df["Gender"].to_numpy().astype(float), "AnnualSalary": df["AnnualSalary"].to_numpy(),
              "AccountBalance": df["AccountBalance"].to_numpy()}
    scm = LinearSCM.fit([Equation("AnnualSalary", ["gender"]),
                         Equation("AccountBalance", ["gender", "AnnualSalary"])], values)
    cf = scm.counterfactual(values, {"gender": 0.0})
    # the reference file is rounded to cents
    assert np.abs(cf["AnnualSalary"] - ref["AnnualSalary"].to_numpy()).max() < 0.01
    assert np.abs(cf["AccountBalance"] - ref["AccountBalance"].to_numpy()).max() < 0.02
    male = values["gender"] == 0
    assert np.allclose(cf["AccountBalance"][male], values["AccountBalance"][male])


def test_scm_explicit_log_link_and_cycles():
    x = np.array([1.0, 2.0, 4.0])
    a = np.array([1.0, 0.0, 1.0])
    scm = LinearSCM([Equation("x", ["a"], "log", 0.0, {"a": -np.log(2)})])
    cf = scm.counterfactual({"x": x, "a": a}, {"a": 0.0})
    assert np.allclose(cf["x"], [2.0, 2.0, 8.0])  # a halves x multiplicatively
    with pytest.raises(SCMError, match="cycle"):
        LinearSCM([Equation("x", ["y"]), Equation("y", ["x"])])
    with pytest.raises(SCMError, match="non-positive"):
        LinearSCM.fit([Equation("x", ["a"], "log")], {"x": np.array([0.0, 1, 2, 3]), "a": np.array([0.0, 1, 0, 1])})
    with pytest.raises(SCMError, match="not in the data"):
        LinearSCM.fit([Equation("x", ["zz"])], {"x": x})


# ---- synthetic worlds -------------------------------------------------------------------
def world(rule: str, n=600, seed=0, protected_share=0.4):
    """A protected attribute that lowers `affected`; `unaffected` is independent of it."""
    rng = np.random.default_rng(seed)
    a = (rng.random(n) < protected_share).astype(int)
    unaffected = rng.normal(50, 10, n)
    affected = rng.normal(50, 10, n) - 8 * a
    coef = {"affected": {"affected": 1.0}, "unaffected": {"unaffected": 1.0}}[rule]
    spec = parse_spec({
        "name": "w", "source": {"kind": "csv", "path": "w.csv", "id_column": "id"},
        "protected": [{"name": "a", "column": "a", "protected_values": [1], "reference_values": [0]}],
        "model": {"kind": "linear", "features": ["affected", "unaffected"], "coefficients": coef,
                  "intercept": -50.0, "use_for_decisions": True},
        "features": [{"name": "affected"}, {"name": "unaffected"}],
        "scm": {"equations": [{"target": "affected", "parents": ["a"]}]},
        "engines": {"run": ["cst"], "cst": {"k": [10, 30], "evidence": "none"}},
    })
    table = pa.table({"_id": [f"r{i}" for i in range(n)], "_row": np.arange(n),
                      "_g_a": pa.array(a, pa.int8()), "affected": affected, "unaffected": unaffected})
    model = LinearRule(coef, -50.0, ["affected", "unaffected"])
    return AuditData(spec, table, {}, model)


def _counts(out, method="CST", k=30):
    s = pl.from_arrow(out["cst_summary"]).filter((pl.col("method") == method) & (pl.col("k") == k))
    return s.row(0, named=True)


def test_rule_ignoring_affected_features_finds_no_counterfactual_discrimination():
    data = world("unaffected")
    out = run_serial(CSTEngine(), data, data.spec.engines.cst)
    assert _counts(out, "CF", 0)["discriminated"] == 0
    claims = pl.from_arrow(out["cst_claims"])
    assert claims["delta_p"].is_between(-1, 1).all()
    # the counterfactual world changes nothing the rule reads: CST == ST up to neighbour choice,
    # and no complainant is significantly discriminated
    assert _counts(out, "CST")["significant"] <= 0.05 * _counts(out, "CST")["complainants"]


def test_rule_penalising_the_protected_group_is_found():
    data = world("affected")
    out = run_serial(CSTEngine(), data, data.spec.engines.cst)
    cst, st = _counts(out, "CST"), _counts(out, "ST")
    assert cst["discriminated_share"] > 0.2 and cst["discriminated"] > st["discriminated"]
    assert _counts(out, "CF", 0)["discriminated"] > 0


def test_permuting_rows_changes_nothing():
    data = world("affected", n=300)
    perm = np.random.default_rng(1).permutation(300)
    shuffled = AuditData(data.spec, data.table.take(perm), {}, data.model)
    a = pl.from_arrow(run_serial(CSTEngine(), data, data.spec.engines.cst)["cst_claims"])
    b = pl.from_arrow(run_serial(CSTEngine(), shuffled, data.spec.engines.cst)["cst_claims"])
    key = ["record_id", "method", "k"]
    assert a.sort(key).equals(b.sort(key))


@pytest.mark.parametrize("evidence", ["significant", "discriminated", "all"])
def test_pieces_equal_one_piece(evidence):
    """Every table, the streamed evidence included (rows and their order), whatever the chunking."""
    data = world("affected", n=300)
    params = data.spec.engines.cst.model_copy(update={"evidence": evidence})
    one = run_serial(CSTEngine(), data, params)
    many = run_serial(CSTEngine(), data, params.model_copy(update={"chunk_size": 17}))
    assert one["cst_evidence"].num_rows > 0
    for name, table in one.items():
        assert table.equals(many[name]), name
    keys = ["protected_attribute", "centre", "search_group"]
    assert pl.from_arrow(one["cst_evidence"]).equals(
        pl.from_arrow(one["cst_evidence"]).sort(keys, maintain_order=True))


def test_significant_evidence_is_every_case_a_finding_counts():
    """engines.cst.evidence: significant (the default) keeps, for each complainant a method found
    significant, that method's groups up to the largest k at which it did (the control group
    for any; ST: the factual test group; CST with or without centres: the counterfactual one):
    the rows of discriminated's evidence that the exhibit's cases read, and no others; the
    claims are the same."""
    data = world("affected", n=400)
    params = data.spec.engines.cst.model_copy(update={"evidence": "significant"})
    assert CSTParams().evidence == "significant"  # the default
    sig = run_serial(CSTEngine(), data, params.model_copy(update={"chunk_size": 37}))
    dis = run_serial(CSTEngine(), data, params.model_copy(update={"evidence": "discriminated"}))
    assert sig["cst_claims"].equals(dis["cst_claims"])
    claims = pl.from_arrow(sig["cst_claims"]).filter(pl.col("significant").fill_null(False) & (pl.col("method") != "CF"))
    assert 0 < claims["record_id"].n_unique() < pl.from_arrow(sig["cst_claims"])["record_id"].n_unique()
    ev, every = pl.from_arrow(sig["cst_evidence"]), pl.from_arrow(dis["cst_evidence"])
    want = []
    for method, centre in (("ST", "factual"), ("CST", "counterfactual"), ("CST_wo_centres", "counterfactual")):
        depth = (claims.filter(pl.col("method") == method).group_by("protected_attribute", "record_id")
                 .agg(pl.col("k").max().alias("depth")))
        want.append(every.join(depth, on=["protected_attribute", "record_id"])
                    .filter((pl.col("rank") <= pl.col("depth"))
                            & ((pl.col("search_group") == "control") | (pl.col("centre") == centre))).drop("depth"))
    want = pl.concat(want).unique()
    assert ev.height == want.height < every.height
    assert ev.join(want, on=ev.columns, how="anti").height == 0  # the same rows, the same distances


def test_too_small_protected_group_is_a_clear_error():
    data = world("affected", n=300, protected_share=0.02)
    params = data.spec.engines.cst.model_copy(update={"k": [10, 30]})
    with pytest.raises(ValueError, match=r"protected group of 'a' has \d+ members; CST with k=30 needs at least 31"):
        run_serial(CSTEngine(), data, params)


def test_missing_model_is_a_clear_error():
    data = world("affected")
    with pytest.raises(ValueError, match="needs the spec's model"):
        run_serial(CSTEngine(), AuditData(data.spec, data.table, {}, None), data.spec.engines.cst)


def test_spec_level_scm_errors():
    from aequum.engines.core.spec import SpecError

    raw = {"name": "w", "source": {"kind": "csv", "path": "w.csv", "id_column": "id"},
           "protected": [{"name": "a", "column": "a", "protected_values": [1], "reference_values": [0]}],
           "decision": {"column": "y", "favourable": [1]},
           "features": [{"name": "x"}, {"name": "z"}],
           "scm": {"equations": [{"target": "x", "parents": ["a", "ghost"]}]}}
    with pytest.raises(SpecError, match=r"unknown parent\(s\) \['ghost'\]"):
        parse_spec(raw)
    bad = copy.deepcopy(raw)
    bad["scm"] = {"equations": [{"target": "x", "parents": ["z"]}, {"target": "z", "parents": ["x"]}]}
    with pytest.raises(SpecError, match="cycle"):
        parse_spec(bad)
    bad = copy.deepcopy(raw)
    bad["protected"][0].pop("reference_values")
    with pytest.raises(SpecError, match="reference_values"):
        parse_spec(bad)


@pytest.mark.slow
def test_law_school_end_to_end(staged_data):
    shared_file("counterfactual-situation-testing", "data", "clean_LawSchool.csv")
    data = staged_data(REPO / "data" / "specs" / "law_school.yaml")
    out = run_serial(CSTEngine(), data, data.spec.engines.cst)
    s = pl.from_arrow(out["cst_summary"])
    assert set(s["protected_attribute"].to_list()) == {"race", "gender", "race&gender"}
    nonwhite = int((data.groups["race"] == 1).sum())
    assert s.filter(pl.col("protected_attribute") == "race")["complainants"][0] == nonwhite == 3506
    print(s)


def test_supplied_counterfactual_table_equals_the_fitted_scm():
    data = world("affected", n=400)
    out_scm = run_serial(CSTEngine(), data, data.spec.engines.cst)
    values = {"a": data.groups["a"].astype(float), "affected": data.column_values("affected"),
              "unaffected": data.column_values("unaffected")}
    scm = LinearSCM.fit([Equation("affected", ["a"])], values)
    cf = scm.counterfactual(values, {"a": 0.0})
    table = pa.table({"_id": data.table["_id"], "affected": cf["affected"], "unaffected": cf["unaffected"]})
    supplied = AuditData(data.spec, data.table, {}, data.model, counterfactuals=table)
    out_table = run_serial(CSTEngine(), supplied, data.spec.engines.cst)
    assert out_table["cst_claims"].equals(out_scm["cst_claims"])


def test_counterfactual_table_is_aligned_by_id(tmp_path):
    from aequum.flows.store.counterfactuals import load_counterfactuals

    data = world("affected", n=50)
    ids = data.table["_id"].to_pylist()
    rows = ["rid,affected,unaffected"] + [f"{i},{k},{k * 2}" for k, i in enumerate(reversed(ids))]
    (tmp_path / "cf.csv").write_text("\n".join(rows) + "\n")
    raw = data.spec.model_dump(mode="json")
    raw["scm"]["counterfactuals"] = {"kind": "csv", "path": "cf.csv", "id_column": "rid"}
    spec = parse_spec(raw)
    cf = load_counterfactuals(spec, tmp_path, data.table)["a"]  # one table per attribute
    assert cf["_id"].to_pylist() == ids and cf["affected"].to_pylist()[0] == 49.0
    (tmp_path / "cf.csv").write_text("\n".join(rows[:-1]) + "\n")
    with pytest.raises(ValueError, match="lacks 1 of the staged records"):
        load_counterfactuals(spec, tmp_path, data.table)


def test_max_distance_shrinks_groups_and_keeps_bounds():
    data = world("affected", n=400)
    params = data.spec.engines.cst.model_copy(update={"max_distance": 0.05})
    claims = pl.from_arrow(run_serial(CSTEngine(), data, params)["cst_claims"]).filter(pl.col("method") != "CF")
    assert (claims["n_control"] <= claims["k"]).all() and (claims["n_control"] < claims["k"]).any()
    ok = claims.filter(pl.col("delta_p").is_not_null())
    assert ok["delta_p"].is_between(-1, 1).all()


def test_multiple_and_intersectional_attributes():
    rng = np.random.default_rng(5)
    n = 800
    a, b = (rng.random(n) < 0.5).astype(int), (rng.random(n) < 0.5).astype(int)
    x = rng.normal(50, 10, n) - 6 * a - 6 * b
    spec = parse_spec({
        "name": "w", "source": {"kind": "csv", "path": "w.csv", "id_column": "id"},
        "protected": [{"name": "a", "column": "a", "protected_values": [1], "reference_values": [0]},
                      {"name": "b", "column": "b", "protected_values": [1], "reference_values": [0]}],
        "model": {"kind": "linear", "features": ["x"], "coefficients": {"x": 1.0}, "intercept": -50.0,
                  "use_for_decisions": True},
        "features": [{"name": "x"}],
        "scm": {"equations": [{"target": "x", "parents": ["a", "b"]}]},
        "engines": {"run": ["cst"], "cst": {"k": [10], "intersections": [["a", "b"]], "evidence": "none"}},
    })
    table = pa.table({"_id": [str(i) for i in range(n)], "_row": np.arange(n), "_g_a": pa.array(a, pa.int8()),
                      "_g_b": pa.array(b, pa.int8()), "x": x})
    data = AuditData(spec, table, {}, LinearRule({"x": 1.0}, -50.0))
    s = pl.from_arrow(run_serial(CSTEngine(), data, spec.engines.cst)["cst_summary"])
    comp = {r["protected_attribute"]: r["complainants"] for r in s.filter(pl.col("method") == "CF").iter_rows(named=True)}
    assert comp == {"a": int(a.sum()), "b": int(b.sum()), "a&b": int((a & b).sum())}
    cf = {r["protected_attribute"]: r["discriminated_share"] for r in s.filter(pl.col("method") == "CF").iter_rows(named=True)}
    assert cf["a&b"] > cf["a"] > 0  # two penalties undone at once move more decisions


def test_counterfactuals_in_blocks_change_nothing(monkeypatch):
    """The SCM's steps run a block of members at a time (engine._BLOCK): bit for bit the same
    tables as one block, with a log link, a mediator, an intersection and another protected
    attribute in the distance (its test's factual points get that column; the others share one)."""
    import aequum.engines.matching.cst.engine as cst

    rng = np.random.default_rng(8)
    n = 900
    a, b = (rng.random(n) < 0.4).astype(int), (rng.random(n) < 0.5).astype(int)
    income = np.exp(rng.normal(4, 0.5, n) - 0.3 * a - 0.2 * b)
    debt = rng.normal(30, 5, n) + 0.05 * income + 3 * a
    spec = parse_spec({
        "name": "w", "source": {"kind": "csv", "path": "w.csv", "id_column": "id"},
        "protected": [{"name": "a", "column": "a", "protected_values": [1], "reference_values": [0]},
                      {"name": "b", "column": "b", "protected_values": [1], "reference_values": [0]}],
        "model": {"kind": "linear", "features": ["income", "debt"],
                  "coefficients": {"income": 0.05, "debt": -0.1}, "intercept": 0.0, "use_for_decisions": True},
        "features": [{"name": "income"}, {"name": "debt"}],
        "scm": {"equations": [{"target": "income", "parents": ["a", "b"], "link": "log"},
                              {"target": "debt", "parents": ["a", "income"]}]},
        "engines": {"run": ["cst"], "cst": {"k": [10], "intersections": [["a", "b"]], "evidence": "all",
                                            "protected_in_distance": ["b"]}},
    })
    table = pa.table({"_id": [f"r{i}" for i in range(n)], "_row": np.arange(n), "_g_a": pa.array(a, pa.int8()),
                      "_g_b": pa.array(b, pa.int8()), "income": income, "debt": debt})
    data = AuditData(spec, table, {}, LinearRule({"income": 0.05, "debt": -0.1}, 0.0))
    for mediators in ([], ["income"]):
        params = spec.engines.cst.model_copy(update={"mediators": mediators})
        whole = run_serial(CSTEngine(), data, params)
        monkeypatch.setattr(cst, "_BLOCK", 7)
        blocks = run_serial(CSTEngine(), data, params)
        tests = CSTEngine().prepare(data, params).tests
        monkeypatch.undo()
        assert whole["cst_claims"].num_rows > 0
        for name, t in whole.items():
            assert t.equals(blocks[name]), (mediators, name)
        by = {t.attribute: t.factual for t in tests}
        assert by["a"].nominal.shape == (n, 1) and by["b"].nominal.shape == (n, 0)
        assert by["b"] is by["a&b"] and np.array_equal(by["a"].metric, by["b"].metric)


def test_surrogate_disagreements_are_not_counterfactual_effects():
    data = world("unaffected", n=400)
    # a "surrogate" that disagrees with the recorded decisions on everything but reads no
    # feature the SCM moves: CF must flag nobody
    wrong = LinearRule({"affected": 0.0, "unaffected": -1.0}, 50.0, ["affected", "unaffected"])
    recorded = pa.table(data.table.columns + [pa.array(data.decision)],
                        names=data.table.column_names + ["_decision"])
    raw = data.spec.model_dump(mode="json")
    raw["model"]["use_for_decisions"] = False
    raw["decision"] = {"column": "y", "favourable": [1]}
    spec = parse_spec(raw)
    other = AuditData(spec, recorded, {}, wrong)
    out = run_serial(CSTEngine(), other, spec.engines.cst)
    assert _counts(out, "CF", 0)["discriminated"] == 0


def test_stratified_sample_allocates_proportionally():
    from aequum.engines.core.sampling import stratified_sample

    cand = np.arange(100) * 3
    strata = np.array(["a"] * 60 + ["b"] * 30 + ["c"] * 10)
    pick = stratified_sample(cand, strata, 10, seed=4)
    assert list(pick) == sorted(pick) and len(set(pick)) == 10
    assert [int(np.isin(cand[strata == s], pick).sum()) for s in "abc"] == [6, 3, 1]
    # largest remainders: 7 of (60, 30, 10) -> quotas 4.2, 2.1, 0.7 -> 4, 2, 1
    pick7 = stratified_sample(cand, strata, 7, seed=4)
    assert [int(np.isin(cand[strata == s], pick7).sum()) for s in "abc"] == [4, 2, 1]
    assert np.array_equal(stratified_sample(cand, strata, 10, seed=4), pick)
    assert not np.array_equal(stratified_sample(cand, strata, 10, seed=5), pick)
    assert np.array_equal(stratified_sample(cand, strata, 500, seed=4), cand)


def test_sampled_complainants_are_reported_and_independent_of_row_order():
    data = world("affected", n=400)
    params = data.spec.engines.cst.model_copy(update={"sample": 40, "sample_seed": 3})
    out = run_serial(CSTEngine(), data, params)
    sampling = pl.from_arrow(out["cst_sampling"])
    full = run_serial(CSTEngine(), data, data.spec.engines.cst)
    everyone = pl.from_arrow(full["cst_summary"]).filter(pl.col("method") == "CF")["complainants"][0]
    assert sampling["sampled"].sum() == 40 and sampling["population"].sum() == everyone
    assert set(pl.from_arrow(full["cst_sampling"])["sampled"] == pl.from_arrow(full["cst_sampling"])["population"]) == {True}
    s = pl.from_arrow(out["cst_summary"]).filter(pl.col("method") == "CF").row(0, named=True)
    assert s["complainants"] == 40 and s["population"] == everyone
    # strata: decision x recorded value; the same records whatever the order of the rows
    perm = np.random.default_rng(2).permutation(400)
    shuffled = AuditData(data.spec, data.table.take(perm), {}, data.model)
    again = run_serial(CSTEngine(), shuffled, params)
    ids = lambda o: sorted(set(pl.from_arrow(o["cst_claims"])["record_id"]))  # noqa: E731
    assert ids(again) == ids(out) and len(ids(out)) == 40
    # sampled claims are the full run's claims for those complainants (neighbours use everyone);
    # the false-discovery adjustment is across the complainants tested: the sample's own
    key = ["record_id", "method", "k"]
    a = pl.from_arrow(out["cst_claims"]).sort(key)
    b = pl.from_arrow(full["cst_claims"]).filter(pl.col("record_id").is_in(ids(out))).sort(key)
    assert a.drop("q_value", "fdr_significant").equals(b.drop("q_value", "fdr_significant"))
    own = flag_claims(b.with_columns(q_value=None, fdr_significant=None).to_arrow().cast(CLAIMS), params.alpha)
    assert a.equals(pl.from_arrow(own))
    assert pl.from_arrow(again["cst_claims"]).sort(key).equals(a)


def test_normalising_some_rows_maps_them_as_the_whole_set_does():
    from aequum.engines.matching.cst.situation_testing import normalise

    rng = np.random.default_rng(7)
    values = np.column_stack([rng.normal(size=500), np.round(rng.uniform(0, 4, 500), 1),
                              rng.integers(0, 5, 500), rng.integers(0, 3, 500)]).astype(float)
    kinds, levels = ["numeric", "numeric", "ordinal", "categorical"], [None, None, 5, None]
    rows = np.sort(rng.choice(500, 60, replace=False))
    for method in ("zscore", "range"):
        whole = normalise(values, kinds, levels, method, stats=values[::-1] * 1.5)
        some = normalise(values, kinds, levels, method, stats=values[::-1] * 1.5, rows=rows)
        part = whole.take(rows)
        assert np.array_equal(some.metric, part.metric) and np.array_equal(some.nominal, part.nominal)
        assert np.array_equal(some.codes, part.codes)
        assert np.array_equal(some.steps, whole.steps, equal_nan=True)  # the lattice of every row
    # one-decimal grades: the subset alone might look integral, the lattice stays the whole set's
    grades = np.column_stack([np.r_[np.arange(50.0), 0.5]])
    assert normalise(grades, ["numeric"], [None], "range", rows=np.arange(50)).steps[0] == pytest.approx(0.1 / 49)
    # a world given a column at a time (CST's counterfactuals) maps as its matrix does,
    # with its own statistics or another's
    for method in ("zscore", "range"):
        for stats in (None, values[::-1] * 1.5):
            matrix = normalise(values, kinds, levels, method, stats=stats, rows=rows)
            columns = normalise(lambda j: values[:, j].copy(), kinds, levels, method, stats=stats, rows=rows)
            for a, b in ((matrix.metric, columns.metric), (matrix.nominal, columns.nominal),
                         (matrix.codes, columns.codes), (matrix.steps, columns.steps)):
                assert np.array_equal(a, b, equal_nan=True) and a.dtype == b.dtype
    # codes beyond int32 (dollar amounts to the cent above 21M) stay exact in int64
    cents = np.column_stack([np.round(rng.uniform(2.2e7, 2.3e7, 500), 2)])
    wide = normalise(cents, ["numeric"], [None], "zscore", rows=rows)
    assert wide.codes.dtype == np.int64 and np.array_equal(wide.codes[:, 0], np.rint(cents[rows, 0] * 100))


def test_the_state_keeps_the_complainants_counterfactuals_only():
    data = world("affected", n=400)
    params = data.spec.engines.cst.model_copy(update={"sample": 40, "sample_seed": 3})
    for test in CSTEngine().prepare(data, params).tests:
        assert len(test.counterfactual) == len(test.complainants) == len(test.decision_cf) == 40
        assert len(test.factual) == 400


@pytest.mark.parametrize("cid, pn, probable", [("55", 1.0, True), ("150", 0.06, False), ("203", 0.12, False)])
def test_probability_of_necessity_on_table_2(loan_out, cid, pn, probable):
    """PN = 1 − p_t / p_c (Tian & Pearl 2000): complainant 55 (p_c 0.81, p_t 0) would surely
    not have been refused in the counterfactual world; 150 (1.00 vs 0.94) very likely would."""
    _, out = loan_out
    c = pl.from_arrow(out["cst_claims"]).filter(
        (pl.col("record_id") == cid) & (pl.col("method") == "CST") & (pl.col("k") == 15)).row(0, named=True)
    assert c["pn"] == pytest.approx(pn, abs=0.011) and c["probable"] is probable


def test_probable_claims_are_the_excess_risk_ratio_above_one_half():
    data = world("affected")
    claims = pl.from_arrow(run_serial(CSTEngine(), data, data.spec.engines.cst)["cst_claims"])
    tested = claims.filter(pl.col("method") != "CF")
    expect = pl.when(pl.col("p_c") > 0).then(1 - pl.col("p_t") / pl.col("p_c"))
    assert ((tested["pn"] - tested.select(expect).to_series()).abs().max() or 0) < 1e-12
    assert tested["pn"].is_null().sum() == (tested["p_c"] == 0).sum()
    assert tested["probable"].equals((tested["pn"] > 0.5).fill_null(False))
    cf = claims.filter(pl.col("method") == "CF")
    assert cf["probable"].equals(cf["discriminated"] & (cf["decision"] == 0))
    assert set(cf["pn"].unique()) <= {0.0, 1.0}
    s = pl.from_arrow(run_serial(CSTEngine(), data, data.spec.engines.cst)["cst_summary"])
    per = claims.group_by(["method", "k"]).agg(pl.col("probable").sum().cast(pl.Int64).alias("n"))
    assert s.join(per, on=["method", "k"]).select((pl.col("probable") == pl.col("n")).all()).item()


def test_path_specific_counterfactual_holds_mediators():
    """a -> x -> y and a -> y: holding x keeps y's move to a's direct path (Pearl 2001)."""
    rng = np.random.default_rng(3)
    n = 2_000
    a = (rng.random(n) < 0.5).astype(float)
    x = 10 - 2 * a + rng.normal(0, 1, n)
    y = 5 + 0.5 * x - 1 * a + rng.normal(0, 1, n)
    scm = LinearSCM.fit([Equation("x", ["a"]), Equation("y", ["a", "x"])], {"a": a, "x": x, "y": y})
    total = scm.counterfactual({"a": a, "x": x, "y": y}, {"a": 0.0})
    held = scm.counterfactual({"a": a, "x": x, "y": y}, {"a": 0.0}, hold=["x"])
    ca, cx = scm._by_target["y"].coefficients["a"], scm._by_target["y"].coefficients["x"]
    assert np.allclose(held["x"], x) and np.allclose(held["y"], y - ca * a)
    assert np.allclose(total["y"], y - ca * a + cx * (total["x"] - x))
    with pytest.raises(SCMError, match=r"mediator\(s\) \['a'\]"):
        scm.counterfactual({"a": a, "x": x, "y": y}, {"a": 0.0}, hold=["a"])


def test_mediators_make_the_effect_path_specific():
    data = world("affected")
    total = run_serial(CSTEngine(), data, data.spec.engines.cst)
    params = data.spec.engines.cst.model_copy(update={"mediators": ["affected"]})
    held = run_serial(CSTEngine(), data, params)
    # the protected attribute reaches the rule only through `affected`: held, no effect is left
    assert _counts(total, "CF", 0)["discriminated"] > 0 and _counts(held, "CF", 0)["discriminated"] == 0
    effect = {r["method"]: r["effect"] for r in pl.from_arrow(held["cst_summary"]).iter_rows(named=True)}
    # `affected` is the SCM's only equation: holding it leaves the direct effect
    assert effect["CF"] == effect["CST"] == "direct: every mediator (affected) held at factual values"
    assert effect["ST"] == "ceteris paribus"
    assert set(pl.from_arrow(total["cst_summary"]).filter(pl.col("method") == "CF")["effect"]) == {"total"}
    raw = copy.deepcopy(data.spec.model_dump(mode="json", exclude_none=True))
    raw["engines"]["cst"]["mediators"] = ["unknown"]
    with pytest.raises(Exception, match=r"engines.cst.mediators: \['unknown'\] are not declared features"):
        parse_spec(raw)
    raw["engines"]["cst"]["mediators"] = ["unaffected"]
    with pytest.raises(Exception, match=r"not targets of scm.equations"):
        parse_spec(raw)


@pytest.mark.parametrize("runs", [True, False])
def test_stable_sort_by_slices_equals_a_stable_sort(runs):
    """CST's combine orders the pieces' rows without copying them (runs of slices); scattered
    rows take the gather path. Both equal polars' order-keeping sort, ties in input order."""
    from aequum.engines.core.engine import stable_sort

    rng = np.random.default_rng(3)
    n = 5000
    keys = np.repeat(rng.integers(0, 4, 40), n // 40) if runs else rng.integers(0, 4, n)
    table = pa.table({"a": keys.astype(str), "b": (np.arange(n) // 700 % 2).astype(np.int32),
                      "v": np.arange(n)})
    chunked = pa.concat_tables([table.slice(0, 1234), table.slice(1234)])
    got = stable_sort(chunked, ["a", "b"])
    expected = pl.from_arrow(table).sort(["a", "b"], maintain_order=True)
    assert pl.from_arrow(got).equals(expected)
