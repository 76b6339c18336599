"""CST on data other than the papers' examples (issue 18): ties on coarse grids, R-written and
per-attribute counterfactual tables, CF without significance, evidence volume, a model that
reads the protected attribute, and the law-school setup of the paper (§4.2)."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from conftest import REPO, shared_file, stage_spec
from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.models import LinearRule
from aequum.engines.core.spec import SpecError, parse_spec
from aequum.engines.core.sampling import record_order
from aequum.engines.matching.cst.engine import CSTEngine
from aequum.engines.matching.cst.scm import Equation, LinearSCM

CST_DATA = "counterfactual-situation-testing", "data"
KEY = ["protected_attribute", "method", "k", "record_id"]


def two_attribute_spec(cst: dict, scm: dict | None = None, model_features=("x1", "x2")) -> dict:
    return {
        "name": "grid", "source": {"kind": "csv", "path": "g.csv", "id_column": "id"},
        "protected": [{"name": "a", "column": "a", "protected_values": [1], "reference_values": [0]},
                      {"name": "b", "column": "b", "protected_values": [1], "reference_values": [0]}],
        "decision": {"column": "y", "favourable": [1]},
        "model": {"kind": "linear", "features": list(model_features),
                  "coefficients": {"x1": 0.1, "x2": 1.0}, "intercept": -3.5},
        "features": [{"name": "x1"}, {"name": "x2"}],
        "scm": scm or {"equations": [{"target": "x1", "parents": ["a", "b"]},
                                     {"target": "x2", "parents": ["a", "x1"]}]},
        "engines": {"run": ["cst"], "cst": cst},
    }


def grid_world(n=500, seed=3, cst=None):
    """Coarse data (integer x1, one-decimal x2: most neighbour distances tied), two protected
    attributes, and recorded decisions that differ between tied records, so that which tied
    record is taken changes the counts. Ids are a permutation, not the row order."""
    rng = np.random.default_rng(seed)
    a, b = (rng.random(n) < 0.4).astype(int), (rng.random(n) < 0.5).astype(int)
    x1 = rng.integers(10, 30, n) - 2 * a
    x2 = np.round(rng.integers(15, 40, n) / 10 - 0.3 * a, 1)
    y = (rng.random(n) < 0.5).astype(np.int8)
    cst = cst or {"k": [5, 15], "intersections": [["a", "b"]], "protected_in_distance": ["b"],
                  "evidence": "all"}
    spec = parse_spec(two_attribute_spec(cst))
    table = pa.table({"_id": [str(i) for i in rng.permutation(n)], "_row": np.arange(n),
                      "_g_a": pa.array(a, pa.int8()), "_g_b": pa.array(b, pa.int8()),
                      "_decision": pa.array(y, pa.int8()), "x1": x1.astype(float), "x2": x2})
    return AuditData(spec, table, {}, LinearRule({"x1": 0.1, "x2": 1.0}, -3.5, ["x1", "x2"]))


def _sorted(out, name, key):
    return pl.from_arrow(out[name]).sort(key)


# ---- 1. ties ------------------------------------------------------------------------------
def test_tied_grid_every_count_is_order_invariant():
    data = grid_world()
    params = data.spec.engines.cst
    runs = []
    rng = np.random.default_rng(0)
    for perm in (np.arange(len(data)), np.arange(len(data))[::-1], rng.permutation(len(data))):
        moved = AuditData(data.spec, data.table.take(perm), {}, data.model)
        runs.append(run_serial(CSTEngine(), moved, params))
    for out in runs[1:]:
        assert _sorted(out, "cst_claims", KEY).equals(_sorted(runs[0], "cst_claims", KEY))
        assert out["cst_summary"].equals(runs[0]["cst_summary"])
        ev_key = KEY[:1] + ["record_id", "centre", "search_group", "rank"]
        assert _sorted(out, "cst_evidence", ev_key).equals(_sorted(runs[0], "cst_evidence", ev_key))


def test_ties_are_taken_in_record_id_order():
    """Control groups against exact rational distances, ties by id (numeric ids: 2 < 10)."""
    data = grid_world(n=300)
    out = run_serial(CSTEngine(), data, data.spec.engines.cst)
    ev = pl.from_arrow(out["cst_evidence"]).filter((pl.col("protected_attribute") == "a")
                                                   & (pl.col("search_group") == "control"))
    t = data.table.to_pydict()
    ids = [int(i) for i in t["_id"]]
    x1 = [int(v) for v in t["x1"]]
    x2 = [round(v * 10) for v in t["x2"]]
    s1, s2 = (Fraction(float(np.std(t[c], ddof=1))) for c in ("x1", "x2"))

    def dist(i, j):  # Eq. 6 on the z-scored values, with b as a nominal attribute (m = 3)
        return (abs(x1[i] - x1[j]) / s1 + Fraction(abs(x2[i] - x2[j]), 10) / s2
                + (t["_g_b"][i] != t["_g_b"][j])) / 3

    prot = [i for i in range(len(ids)) if t["_g_a"][i] == 1]
    row_of = {str(v): i for i, v in enumerate(ids)}
    tied = 0
    for c in prot[:40]:
        want = sorted((dist(c, j), ids[j]) for j in prot if j != c)[:15]
        got = ev.filter(pl.col("record_id") == str(ids[c])).sort("rank")
        assert [str(i) for _, i in want] == got["neighbour_id"].to_list()
        assert np.allclose([float(d) for d, _ in want], got["distance"].to_numpy(), rtol=1e-12)
        tied += len({d for d, _ in want}) < len(want)
        assert all(row_of[n] in prot for n in got["neighbour_id"])
    assert tied > 30  # the grid really is tied


def test_record_order_is_numeric_for_integer_ids_and_text_otherwise():
    assert record_order(np.array(["10", "2", "1"], dtype=object)).tolist() == [2, 1, 0]
    assert record_order(np.array(["b", "a10", "a2"], dtype=object)).tolist() == [1, 2, 0]
    # ids equal as numbers but not as text ("1", "01"): text order, which tells them apart
    assert record_order(np.array(["1", "01", "3"], dtype=object)).tolist() == [1, 0, 2]


def test_law_school_counts_do_not_depend_on_row_order(tmp_path):
    """Before: gender ST at k = 30 found 100 cases, 105 on reversed rows (8 cells of the
    summary moved); now every count, claim and neighbour is the same."""
    shared_file(*CST_DATA, "clean_LawSchool.csv")
    data = stage_spec(REPO / "data" / "specs" / "law_school.yaml", tmp_path)
    params = data.spec.engines.cst.model_copy(update={"k": [15, 30], "evidence": "none", "intersections": []})
    moved = AuditData(data.spec, data.table.take(np.arange(len(data))[::-1]), data.categories, data.model)
    a = run_serial(CSTEngine(), data, params)
    b = run_serial(CSTEngine(), moved, params)
    assert a["cst_summary"].equals(b["cst_summary"])
    assert _sorted(a, "cst_claims", KEY).equals(_sorted(b, "cst_claims", KEY))


# ---- 2. counterfactual tables as R writes them ----------------------------------------------
def _small_world(n=12):
    rng = np.random.default_rng(1)
    a = np.array([1, 0] * (n // 2))
    return parse_spec(two_attribute_spec({}, {"equations": []}) | {
        "protected": [{"name": "a", "column": "a", "protected_values": [1], "reference_values": [0]}],
        "model": {"kind": "linear", "features": ["x1", "x2"], "coefficients": {"x1": 1.0}, "intercept": 0.0}}), \
        pa.table({"_id": [f"r{i}" for i in range(n)], "_row": np.arange(n), "_g_a": pa.array(a, pa.int8()),
                  "x1": rng.normal(size=n), "x2": rng.normal(size=n)})


def _with_cf(spec, **table):
    raw = spec.model_dump(mode="json")
    raw["scm"] = {"counterfactuals": {"kind": "csv", "path": "cf.csv", **table}}
    return parse_spec(raw)


@pytest.mark.parametrize("form", ["write.table", "write.csv"])
def test_r_written_counterfactual_table_is_read_as_it_is(tmp_path, form):
    from aequum.flows.store.counterfactuals import load_counterfactuals

    spec, table = _small_world()
    n = table.num_rows
    order = np.random.default_rng(2).permutation(n)  # R rows in another order, named by source row
    sep = "|" if form == "write.table" else ","
    head = ['"scf_x1"', '"x2"'] if form == "write.table" else ['""', '"scf_x1"', '"x2"']
    lines = [sep.join(head)] + [sep.join([f'"{r + 1}"', f"{10 * r}", f"{r / 4}"]) for r in order]
    (tmp_path / "cf.csv").write_text("\n".join(lines) + "\n")
    spec = _with_cf(spec, id_column=None, columns={"x1": "scf_x1"})
    cf = load_counterfactuals(spec, tmp_path, table)["a"]
    assert cf["_id"].to_pylist() == table["_id"].to_pylist()
    assert cf["x1"].to_pylist() == [10.0 * r for r in range(n)] and cf["x2"].to_pylist() == [r / 4 for r in range(n)]


def test_counterfactual_table_without_ids_aligns_by_position(tmp_path):
    from aequum.flows.store.counterfactuals import load_counterfactuals

    spec, table = _small_world()
    (tmp_path / "cf.csv").write_text("x1,x2\n" + "".join(f"{r},{-r}\n" for r in range(table.num_rows)))
    cf = load_counterfactuals(_with_cf(spec, id_column=None), tmp_path, table)["a"]
    assert cf["x1"].to_pylist() == list(map(float, range(table.num_rows)))


@pytest.mark.parametrize("text, table_args, message", [
    ('"x1"|"x2"\n"one"|1|2\n', {}, r"R row name 'one' \(row 1\) is not a positive row number"),
    ('"x1"|"x2"\n"1"|1|2\n', {"columns": {"x1": "scf_x1"}}, r"no column\(s\) \['scf_x1'\] in the table"),
    ('"x1"|"x2"\n"1"|NA|2\n', {}, r"column 'x1' row 1 is not a number: 'NA'"),
    ('"x1"|"x2"\n"1"|1|2\n"1"|1|2\n', {}, r"source row '1' appears 2 times"),
    ('"x1"|"x2"\n"1"|1|2\n', {}, r"scm.counterfactuals lacks 11 of the staged records"),
])
def test_counterfactual_table_problems_are_one_line(tmp_path, text, table_args, message):
    from aequum.flows.store.counterfactuals import load_counterfactuals

    spec, table = _small_world()
    (tmp_path / "cf.csv").write_text(text)
    with pytest.raises(ValueError, match=message) as err:
        load_counterfactuals(_with_cf(spec, id_column=None, **table_args), tmp_path, table)
    assert "\n" not in str(err.value)


def test_the_authors_law_school_table_is_read_by_row_name():
    from aequum.engines.core.spec import load_spec
    from aequum.flows.store.counterfactuals import align, read_table

    path = shared_file(*CST_DATA, "counterfactuals", "cf_LawSchool_lev3_doWhite.csv")
    spec = load_spec(REPO / "data" / "specs" / "law_school_reference.yaml")
    src = spec.scm.counterfactuals["race"]
    n = 21790
    staged = pa.table({"_id": [str(i) for i in range(n)][::-1], "_row": np.arange(n)[::-1]})
    cf = align(read_table(src, REPO / "data" / "specs", "t"), src, spec, staged, "t")
    raw = pl.read_csv(path, separator="|", has_header=False, skip_rows=1, infer_schema=False)
    # source row 21789 (0-based) is R row "21790", the last line: scf_LSAT, scf_UGPA last columns
    assert cf["_id"][0].as_py() == "21789"
    assert (cf["LSAT"][0].as_py(), cf["UGPA"][0].as_py()) == (float(raw[-1, -2]), float(raw[-1, -1]))
    assert cf.num_rows == n


# ---- 3. one table per attribute -------------------------------------------------------------
def test_one_table_per_attribute_and_intersection_equals_the_fitted_scm():
    data = grid_world(n=400, cst={"k": [5, 15], "intersections": [["a", "b"]], "evidence": "none"})
    out_scm = run_serial(CSTEngine(), data, data.spec.engines.cst)
    eqs = [Equation("x1", ["a", "b"]), Equation("x2", ["a", "x1"])]
    values = {"a": data.groups["a"].astype(float), "b": data.groups["b"].astype(float),
              "x1": data.column_values("x1"), "x2": data.column_values("x2")}
    scm = LinearSCM.fit(eqs, values)
    tables = {}
    for key, do in {"a": ["a"], "b": ["b"], "b&a": ["a", "b"]}.items():  # keys in any order
        cf = scm.counterfactual(values, {v: 0.0 for v in do})
        tables[key] = pa.table({"_id": data.table["_id"], "x1": cf["x1"], "x2": cf["x2"]})
    raw = data.spec.model_dump(mode="json")
    raw["scm"] = {"counterfactuals": {k: {"kind": "csv", "path": f"{k}.csv"} for k in tables}}
    spec = parse_spec(raw)  # no equations: every tested unit has its table
    supplied = AuditData(spec, data.table, {}, data.model, counterfactuals=tables)
    out = run_serial(CSTEngine(), supplied, spec.engines.cst)
    assert set(pl.from_arrow(out["cst_summary"])["protected_attribute"]) == {"a", "b", "a&b"}
    assert out["cst_claims"].equals(out_scm["cst_claims"])


def test_counterfactual_tables_that_cannot_cover_the_tests_are_refused():
    raw = two_attribute_spec({"k": [5]}, {"counterfactuals": {"kind": "csv", "path": "cf.csv"}})
    with pytest.raises(SpecError, match=r"one table is do\(A := a'\) for one attribute"):
        parse_spec(raw)
    raw["scm"] = {"counterfactuals": {"a": {"kind": "csv", "path": "a.csv"}}}
    with pytest.raises(SpecError, match=r"engines.cst tests \['b'\], which have no table"):
        parse_spec(raw)
    raw["scm"] = {"counterfactuals": {"a&c": {"kind": "csv", "path": "a.csv"}}}
    with pytest.raises(SpecError, match=r"key 'a&c' must name protected attribute"):
        parse_spec(raw)
    raw["scm"] = {"counterfactuals": {"a": {"kind": "csv", "path": "a.csv", "columns": {"zz": "q"}}}}
    with pytest.raises(SpecError, match=r"\.columns: \['zz'\] are not declared features"):
        parse_spec(raw)
    raw["scm"] = {"counterfactuals": {"a": {"kind": "csv"}, "b": {"kind": "csv", "path": "b.csv"}}}
    with pytest.raises(SpecError, match=r"invalid audit spec:\n  scm.counterfactuals.by_attribute.a: "
                                        r"source.kind='csv' needs source.path$"):
        parse_spec(raw)


# ---- 4. CF has no significance test ----------------------------------------------------------
def test_cf_significance_is_null_and_the_summary_says_why():
    data = grid_world(n=300)
    out = run_serial(CSTEngine(), data, data.spec.engines.cst)
    claims = pl.from_arrow(out["cst_claims"])
    assert claims.filter(pl.col("method") == "CF")["significant"].null_count() == claims.filter(
        pl.col("method") == "CF").height
    assert claims.filter(pl.col("method") != "CF")["significant"].null_count() == 0
    s = pl.from_arrow(out["cst_summary"])
    cf, rest = s.filter(pl.col("method") == "CF"), s.filter(pl.col("method") != "CF")
    assert cf["significant"].null_count() == cf["significant_share"].null_count() == cf.height == 3
    assert cf["note"].str.contains("no significance test").all() and rest["note"].null_count() == rest.height
    assert cf["discriminated"].sum() > 0


# ---- 6. evidence volume ---------------------------------------------------------------------
def test_evidence_rows_by_mode():
    data = grid_world(n=300)
    base = data.spec.engines.cst
    rows = {}
    for mode in ("all", "discriminated", "none"):
        out = run_serial(CSTEngine(), data, base.model_copy(update={"evidence": mode}))
        rows[mode] = pl.from_arrow(out["cst_evidence"])
    claims = pl.from_arrow(out["cst_claims"])
    complainants = claims.filter(pl.col("method") == "CF").height
    assert rows["all"].height == complainants * 3 * 15 and rows["none"].height == 0
    # discriminated: control to the deepest k any method flagged, factual test for ST, the
    # counterfactual test for CST (with or without centres)
    flag = claims.filter(pl.col("discriminated") & (pl.col("method") != "CF"))
    depth = flag.group_by("protected_attribute", "record_id").agg(
        pl.col("k").max().alias("control"),
        pl.col("k").filter(pl.col("method") == "ST").max().fill_null(0).alias("st"),
        pl.col("k").filter(pl.col("method") != "ST").max().fill_null(0).alias("cst"))
    assert rows["discriminated"].height == depth.select(pl.sum_horizontal("control", "st", "cst").sum()).item()
    assert 0 < rows["discriminated"].height < rows["all"].height / 2
    got = rows["discriminated"].group_by("protected_attribute", "record_id", "centre", "search_group").agg(
        pl.col("rank").max())
    cf_depth = got.filter(pl.col("centre") == "counterfactual").join(depth, on=["protected_attribute", "record_id"])
    assert (cf_depth["rank"] == cf_depth["cst"]).all()


def test_loan_default_audit_writes_evidence_only_for_significant_complainants(tmp_path):
    from aequum.engines.core.spec import load_spec

    spec = load_spec(REPO / "data" / "specs" / "loan.yaml")
    assert spec.engines.cst.evidence == "significant"
    raw = spec.model_dump(mode="json")
    raw["source"]["rows"] = 1500
    data = stage_spec(parse_spec(raw), tmp_path)
    out = run_serial(CSTEngine(), data, data.spec.engines.cst)
    ev, claims = pl.from_arrow(out["cst_evidence"]), pl.from_arrow(out["cst_claims"])
    tested = claims.filter(pl.col("method") != "CF")
    flagged = tested.filter(pl.col("significant").fill_null(False))["record_id"].unique()
    assert 0 < flagged.len() < tested.filter(pl.col("discriminated"))["record_id"].n_unique()
    assert set(ev["record_id"].unique()) == set(flagged)
    assert ev.height < flagged.len() * 3 * 100  # only the groups, and depth, that found it


# ---- 7. a model that reads the protected attribute -------------------------------------------
def test_model_reading_the_protected_attribute_is_re_decided_under_do():
    rng = np.random.default_rng(8)
    n = 400
    a = (rng.random(n) < 0.5).astype(int)
    x = np.round(rng.uniform(0, 5, n), 2)
    raw = {
        "name": "m", "source": {"kind": "csv", "path": "m.csv", "id_column": "id"},
        "protected": [{"name": "a", "column": "a", "protected_values": [1], "reference_values": [0]}],
        "model": {"kind": "linear", "features": ["x", "a"], "coefficients": {"x": 1.0, "a": -2.0},
                  "intercept": -1.0, "use_for_decisions": True},
        "features": [{"name": "x"}],
        # x does not depend on a: only the model's input a moves under do(a := 0)
        "scm": {"equations": [{"target": "x", "parents": ["a"], "fit": "explicit", "intercept": 0.0,
                               "coefficients": {"a": 0.0}}]},
        "engines": {"run": ["cst"], "cst": {"k": [10], "evidence": "none"}},
    }
    spec = parse_spec(raw)
    table = pa.table({"_id": [str(i) for i in range(n)], "_row": np.arange(n),
                      "_g_a": pa.array(a, pa.int8()), "x": x})
    model = LinearRule({"x": 1.0, "a": -2.0}, -1.0, ["x", "a"])
    out = run_serial(CSTEngine(), AuditData(spec, table, {}, model), spec.engines.cst)
    cf = pl.from_arrow(out["cst_claims"]).filter(pl.col("method") == "CF")
    flagged = set(cf.filter(pl.col("discriminated"))["record_id"])
    flips = model.decide(np.column_stack([x, a])) != model.decide(np.column_stack([x, np.zeros(n)]))
    assert flagged == {str(i) for i in np.flatnonzero((a == 1) & flips)} and len(flagged) > 50
    assert (cf["decision_counterfactual"] == 1).sum() == int(((a == 1) & (x >= 1)).sum())


# ---- 5. the paper's law-school setup ---------------------------------------------------------
def test_law_school_spec_keeps_every_record_and_puts_gender_into_the_race_distance(tmp_path):
    shared_file(*CST_DATA, "clean_LawSchool.csv")
    data = stage_spec(REPO / "data" / "specs" / "law_school.yaml", tmp_path)
    assert len(data) == 21790  # UGPA up to 4.2 and LSAT from 11 are valid records
    state = CSTEngine().prepare(data, data.spec.engines.cst.model_copy(update={"k": [15]}))
    tests = {t.attribute: t for t in state.tests}
    female = (data.groups["gender"][record_order(data.ids)] == 1)
    assert np.array_equal(tests["race"].factual.nominal[:, 0] == 1, female)
    # the counterfactual centres are the complainants' (row i: complainants[i])
    assert np.array_equal(tests["race"].counterfactual.nominal[:, 0] == 1, female[tests["race"].complainants])
    assert tests["gender"].factual.nominal.shape[1] == 0 == tests["race&gender"].factual.nominal.shape[1]


def test_law_school_on_the_authors_tables_reproduces_table_4_and_cf(tmp_path):
    """Table 4 (race): CST w/o 256/309/337/400, CST 286/309/337/400, CF 231; Table 5 CF 56.
    ST (and gender's CST at k = 15..50) depend on how the 89% tied distances are broken, which
    the reference leaves to its sort; aequum breaks them by record id."""
    from aequum.engines.core.spec import load_spec
    from aequum.flows.store.counterfactuals import load_counterfactuals

    shared_file(*CST_DATA, "counterfactuals", "cf_LawSchool_lev3_doWhite.csv")
    path = REPO / "data" / "specs" / "law_school_reference.yaml"
    spec = load_spec(path)
    data = stage_spec(path, tmp_path)
    data = AuditData(spec, data.table, data.categories, data.model,
                     load_counterfactuals(spec, path.parent, data.table))
    params = spec.engines.cst.model_copy(update={"evidence": "none", "intersections": []})
    s = pl.from_arrow(run_serial(CSTEngine(), data, params)["cst_summary"])
    got = {(r["protected_attribute"], r["method"], r["k"]): r["discriminated"] for r in s.iter_rows(named=True)}
    ks = (15, 30, 50, 100)
    assert [got[("race", "CST_wo_centres", k)] for k in ks] == [256, 309, 337, 400]
    assert [got[("race", "CST", k)] for k in ks] == [286, 309, 337, 400]
    assert got[("race", "CF", 0)] == 231 and got[("gender", "CF", 0)] == 56
