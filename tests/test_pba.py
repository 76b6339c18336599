"""PBA verification engine (seed 004): the engine on generated data with known networks."""
from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import torch

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.models import LinearRule, TorchMLP
from aequum.engines.core.spec import SpecError, parse_spec
from aequum.engines.verification.engine import PBAEngine
from aequum.engines.verification.network import NetworkError, import_network
from aequum.engines.verification.params import PBAParams

FEATURES = ["x1", "x2", "cat", "sex"]
UNITS = {"x1": 0.1, "x2": 0.2}


def raw_spec(deltas=(0.5, 1.0, 2.0), model_features=FEATURES, **pba) -> dict:
    return {
        "name": "t", "source": {"kind": "csv", "path": "x.csv", "id_column": "id"},
        "protected": [{"name": "sex", "column": "sex", "protected_values": ["F"], "reference_values": ["M"]}],
        "label": {"column": "y", "positive": [1]},
        "model": {"kind": "mlp", "path": "m.pt", "features": list(model_features), "hidden": [8],
                  "use_for_decisions": True},
        "features": [{"name": "x1", "perturbation": UNITS["x1"], "range": [-10, 10]},
                     {"name": "x2", "perturbation": UNITS["x2"]},
                     {"name": "cat", "type": "categorical", "categories": ["a", "b", "c"]}],
        "engines": {"run": ["pba"], "pba": {"deltas": list(deltas), "time_limit": None, **pba}},
    }


def mlp(hidden=(12, 6), seed=0, outputs=1, sensitive_weight=None) -> TorchMLP:
    torch.manual_seed(seed)
    m = TorchMLP(FEATURES, list(hidden), outputs, input_mean=np.array([0.1, -0.2, 1.0, 0.5]),
                 input_scale=np.array([1.5, 0.8, 0.8, 0.5]))
    with torch.no_grad():
        for layer in m.net[::2]:
            layer.weight *= 2.5                     # livelier than the default initialisation
        if sensitive_weight is not None:
            m.net[0].weight[:, 3] = sensitive_weight
        X = np.random.default_rng(99).normal(size=(400, 4))
        X[:, 2], X[:, 3] = X[:, 2] > 0, X[:, 3] > 0
        m.net[-1].bias -= float(np.median(m.score(X)))   # about half the decisions favourable
    return m


def audit_data(model, n=160, seed=0, truth="noisy", reverse=False, **pba) -> AuditData:
    """Records x1, x2 ~ N(0, 1), cat in {a, b, c}, sex F/M; label = the model's decision with
    a few flips (``truth='noisy'``) or exactly (``'model'``)."""
    rng = np.random.default_rng(seed)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    cat = rng.integers(0, 3, n)
    g = rng.integers(0, 2, n)
    X = np.column_stack([x1, x2, cat, g]).astype(float)
    y = (model.score(X) > 0).astype(np.int8)
    if truth == "noisy":
        y = np.where(rng.random(n) < 0.1, 1 - y, y).astype(np.int8)
    table = pa.table({"_id": [f"r{i:04d}" for i in range(n)], "_row": np.arange(n),
                      "_g_sex": pa.array(g.astype(np.int8)), "_label": pa.array(y),
                      "x1": x1, "x2": x2, "cat": np.array(["a", "b", "c"])[cat],
                      "sex": np.where(g == 1, "F", "M"), "y": y})
    if reverse:
        table = table.take(np.arange(n)[::-1])
    spec = parse_spec(raw_spec(model_features=list(model.feature_names), **pba))
    return AuditData(spec, table, {"cat": ["a", "b", "c"]}, model)


def run(data) -> dict[str, pl.DataFrame]:
    out = run_serial(PBAEngine(), data, data.spec.engines.pba)
    return {k: pl.from_arrow(v) for k, v in out.items()}


# -- network import -----------------------------------------------------------------------

@pytest.mark.parametrize("outputs", [1, 2])
def test_imported_network_is_the_model(outputs):
    m = mlp(outputs=outputs)
    X = np.random.default_rng(1).normal(size=(50, 4)) * 3
    assert np.allclose(import_network(m).score(X), m.score(X), rtol=0, atol=1e-12)
    rule = LinearRule({"x1": 2.0, "sex": -1.0}, 0.5, FEATURES)
    assert np.allclose(import_network(rule).score(X), rule.score(X), atol=1e-12)


def test_a_layer_other_than_linear_or_relu_is_named():
    net = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1)).double()
    with pytest.raises(NetworkError, match=r"layer 1 \(Tanh\) is not supported"):
        import_network(TorchMLP(FEATURES, [5], 1, net=net))
    three = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3)).double()
    with pytest.raises(NetworkError, match="3 outputs"):
        import_network(TorchMLP(FEATURES, [5], 2, net=three))


# -- bad input ----------------------------------------------------------------------------

def test_a_missing_model_input_names_the_first_record_and_input():
    """Checked a column at a time, the error still names the first record in staged order with
    a missing input and, in it, the first such input; the sampled inputs equal the records'."""
    data = audit_data(mlp(), sample=40, sample_seed=1)
    x1, x2 = data.table["x1"].to_numpy().copy(), data.table["x2"].to_numpy().copy()
    x2[30], x1[57], x2[57], x1[90] = np.nan, np.nan, np.nan, np.nan
    for cols, record, name in (((x1, x2), "r0030", "x2"), ((x1, np.where(np.arange(160) == 30, 0.0, x2)), "r0057", "x1")):
        table = data.table.set_column(data.table.schema.get_field_index("x1"), "x1", pa.array(cols[0]))
        table = table.set_column(table.schema.get_field_index("x2"), "x2", pa.array(cols[1]))
        with pytest.raises(ValueError, match=f"record '{record}': model input '{name}' is missing"):
            PBAEngine().prepare(AuditData(data.spec, table, data.categories, data.model), data.spec.engines.pba)
    state = PBAEngine().prepare(data, data.spec.engines.pba)
    everyone = data.feature_values(list(state.net.feature_names))
    position = {r: i for i, r in enumerate(data.table["_id"].to_pylist())}
    assert np.array_equal(state.X, everyone[[position[r] for r in state.ids]])


def test_sensitive_attribute_must_be_a_model_input():
    with pytest.raises(SpecError, match=r"no protected attribute \['sex'\] is a model input"):
        parse_spec(raw_spec(model_features=["x1", "x2", "cat"]))
    with pytest.raises(SpecError, match=r"\['sex'\] are not model inputs"):
        parse_spec(raw_spec(model_features=["x1", "x2", "cat"], attributes=["sex"]))
    with pytest.raises(SpecError, match=r"attributes: \['race'\] are not protected"):
        parse_spec(raw_spec(attributes=["race"]))


@pytest.mark.parametrize("delta", [-1.0, float("nan"), float("inf")])
def test_nonsensical_delta_is_refused(delta):
    with pytest.raises(SpecError, match="deltas"):
        parse_spec(raw_spec(deltas=[1.0, delta]))


def test_a_perturbation_unit_on_a_categorical_feature_is_refused():
    raw = raw_spec()
    raw["features"][2]["perturbation"] = 1.0
    with pytest.raises(SpecError, match="'cat' is categorical; a `perturbation` unit applies to numeric"):
        parse_spec(raw)


def test_an_input_outside_its_domain_is_named():
    data = audit_data(mlp())
    table = data.table.set_column(data.table.schema.get_field_index("x1"), "x1",
                                  pa.array(np.r_[12.0, data.table["x1"].to_numpy()[1:]]))
    with pytest.raises(ValueError, match=r"record 'r0000': feature 'x1' = 12.0 lies outside its domain \[-10.0, 10.0\]"):
        PBAEngine().prepare(AuditData(data.spec, table, data.categories, data.model), data.spec.engines.pba)


def test_label_needed_unless_truth_is_the_decision():
    raw = raw_spec()
    del raw["label"]
    raw["decision"] = {"column": "d", "favourable": [1]}
    with pytest.raises(SpecError, match="truth 'label' needs a `label`"):
        parse_spec(raw)
    raw["engines"]["pba"]["truth"] = "decision"
    parse_spec(raw)


# -- invariants ---------------------------------------------------------------------------

def test_a_network_that_ignores_the_sensitive_input_gives_exactly_zero():
    data = audit_data(mlp(sensitive_weight=0.0))
    out = run(data)
    rows = out["pba_inputs"].filter(pl.col("considered"))
    assert len(rows) > 100
    assert (rows["objective"] == 0).all() and (rows["lower_bound"] == 0).all() and (rows["upper_bound"] == 0).all()
    assert (rows["verdict"] == "falsified").all() and (rows["method"] == "centre").all()
    s = out["pba_summary"]
    assert (s["pba"] == 0).all() and (s["cfa"] == 1).all()


def test_a_large_sensitive_effect_verifies_every_considered_input():
    """score = g(z) + w·s (a hidden ReLU(s) with output weight w; g ignores s): the objective
    is ±w everywhere, so every considered input verifies in exactly one setting."""
    m = mlp(hidden=(8,))
    with torch.no_grad():
        m.net[0].weight[:, 3] = 0.0
        m.net[0].weight[0] = 0.0
        m.net[0].weight[0, 3] = m.input_scale[3]   # on the standardised input (s − mean)/scale:
        m.net[0].bias[0] = m.input_mean[3]         # neuron 0 = ReLU(s)
        m.net[2].weight[0, 0] = 3.0
        m.net[2].weight[0, 1:] *= 20
    data = audit_data(m, truth="model")
    out = run(data)
    rows = out["pba_inputs"].filter(pl.col("considered"))
    assert len(rows) > 100
    assert (rows["verdict"].is_in(["verified", "falsified"])).all()
    per_input = rows.group_by("record_id", "delta").agg((pl.col("verdict") == "verified").sum().alias("v"))
    assert (per_input["v"] == 1).all()
    verified = rows.filter(pl.col("verdict") == "verified")
    assert np.allclose(verified["lower_bound"], 3.0, atol=1e-9)
    assert (verified["method"] == "symbolic").all()
    # protected inputs with a favourable truth are persistently favoured as they are (observed)
    fav = verified.filter((pl.col("group_name") == "protected") & (pl.col("truth") == 1))
    assert len(fav) and (fav["setting"] == "observed").all()


def test_observed_plus_flipped_never_exceeds_all_considered():
    out = run(audit_data(mlp()))
    s = out["pba_summary"]
    wide = s.pivot(on="setting", index=["group_name", "delta"], values="verified").join(
        s.filter(pl.col("setting") == "observed").select("group_name", "delta", "considered"),
        on=["group_name", "delta"])
    assert (wide["observed"] + wide["flipped"] <= wide["considered"]).all()
    assert ((s["verified"] + s["falsified"] + s["inconclusive"]) == s["considered"]).all()


def test_bounds_tighten_as_delta_shrinks_and_a_point_box_decides_everything():
    out = run(audit_data(mlp(), deltas=[0.0, 0.5, 1.0, 2.0, 4.0]))
    rows = out["pba_inputs"].filter(pl.col("considered")).sort("attribute", "setting", "record_id", "delta")
    g = rows.group_by("setting", "record_id", maintain_order=True).agg(
        pl.col("lower_bound").diff().drop_nulls().max().alias("lower_up"),
        pl.col("upper_bound").diff().drop_nulls().min().alias("upper_down"))
    assert (g["lower_up"] <= 1e-9).all() and (g["upper_down"] >= -1e-9).all()
    point = rows.filter(pl.col("delta") == 0)
    assert (point["verdict"] != "inconclusive").all()
    assert np.allclose(point["lower_bound"], point["objective"], atol=1e-9)
    v = out["pba_summary"].group_by("group_name", "setting", maintain_order=True).agg(pl.col("verified"))
    assert all(np.all(np.diff(x) <= 0) for x in v["verified"].to_list())


def test_counterexamples_replay_through_the_model():
    model = mlp(seed=3)
    data = audit_data(model, n=240, deltas=[4.0, 10.0])
    out = run(data)
    rows = out["pba_inputs"].filter(pl.col("verdict") == "falsified")
    assert set(rows["method"]) >= {"centre", "search"}
    X = np.array(rows["counterexample"].to_list())
    twin = X.copy()
    twin[:, 3] = 1 - twin[:, 3]
    sigma = np.where(rows["truth"].to_numpy() == 1, 1.0, -1.0)
    sign = np.where(rows["setting"].to_numpy() == "observed", 1.0, -1.0)
    G = sign * sigma * (model.score(X) - model.score(twin))
    assert np.all(G <= 1e-9)
    assert np.allclose(G, rows["counterexample_objective"], atol=1e-9)
    # inside the box: categorical and sensitive inputs fixed, numeric ones within δ·unit
    centre = data.feature_values(FEATURES)[np.searchsorted(data.ids.astype(str), rows["record_id"].to_numpy())]
    centre[:, 3] = np.where(rows["group_name"].to_numpy() == "protected", 1.0, 0.0)
    reach = np.array([UNITS["x1"], UNITS["x2"], 0, 0])[None, :] * rows["delta"].to_numpy()[:, None]
    assert np.all(np.abs(X - centre) <= reach + 1e-12)
    # robustness counterexamples change the decision of the copy shown
    rb = out["pba_inputs"].filter(pl.col("robust_verdict") == "falsified")
    assert len(rb)
    P = np.array(rb["robust_counterexample"].to_list())
    assert np.all(model.decide(P) != rb["decision"].to_numpy())


def assert_same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    """Equal tables; floats to 1e-12 (batched matrix products may round differently)."""
    assert a.columns == b.columns and len(a) == len(b)
    for c in a.columns:
        if a[c].dtype == pl.Float64:
            assert np.allclose(a[c].to_numpy(), b[c].to_numpy(), rtol=0, atol=1e-12, equal_nan=True), c
        elif a[c].dtype == pl.List(pl.Float64):
            x, y = a[c].to_list(), b[c].to_list()
            assert all((p is None and q is None) or np.allclose(p, q, rtol=0, atol=1e-12) for p, q in zip(x, y)), c
        else:
            assert a[c].equals(b[c]), c


def test_pieces_and_row_order_do_not_change_the_result():
    model = mlp(seed=1)
    one = run(audit_data(model, batch_size=1000))
    many = run(audit_data(model, batch_size=7))
    rev = run(audit_data(model, batch_size=13, reverse=True))
    for name in ("pba_inputs", "pba_summary"):
        assert_same(one[name], many[name])
        assert_same(one[name], rev[name])


def test_pieces_run_in_parallel_as_in_series():
    from concurrent.futures import ProcessPoolExecutor

    from aequum.engines.core.engine import conform

    data = audit_data(mlp(seed=1), batch_size=40)
    engine = PBAEngine()
    state = engine.prepare(data, data.spec.engines.pba)
    pieces = engine.pieces(state)
    assert len(pieces) == 4
    with ProcessPoolExecutor(2) as pool:
        parts = list(pool.map(engine.run_piece, [state] * len(pieces), pieces))
    out = engine.combine(state, parts)
    serial = run_serial(engine, data, data.spec.engines.pba)
    for name, schema in engine.tables.items():
        assert conform(out[name], schema, name).equals(serial[name])


def test_sampling_is_reported_and_reproducible():
    model = mlp()
    a = run(audit_data(model, sample=50, sample_seed=3))
    b = run(audit_data(model, sample=50, sample_seed=3, reverse=True))
    assert_same(a["pba_inputs"], b["pba_inputs"])
    s = a["pba_summary"]
    assert s["sampled"].all() and (s["population"] > s["inputs"]).all()
    assert s.filter((pl.col("setting") == "observed") & (pl.col("delta") == 0.5))["inputs"].sum() == 50


def test_milp_leaves_nothing_inconclusive_on_a_small_network():
    model = mlp(hidden=(6, 4), seed=5)
    lp_only = run(audit_data(model, n=40, deltas=[6.0], attack_steps=0))["pba_inputs"]
    exact = run(audit_data(model, n=40, deltas=[6.0], attack_steps=0, milp=True))["pba_inputs"]
    assert (lp_only["verdict"] == "inconclusive").sum() > 0
    assert (exact["verdict"] == "inconclusive").sum() == 0
    assert (exact["method"] == "milp").sum() > 0


def test_params_defaults_and_units():
    p = PBAParams()
    assert p.deltas == [1.0, 2.0, 3.0] and p.truth == "label" and p.lp and not p.milp
    spec = parse_spec(raw_spec(intersections=[["sex"]]))
    assert spec.engines.pba.flipped_units(spec) == [["sex"], ["sex"]]


def test_an_intersection_flips_both_attributes_and_reports_the_combinations():
    """Two protected inputs (sex, old): the intersection twin flips both indicators; groups
    are the four combinations, each shown as its complement in the flipped setting."""
    torch.manual_seed(4)
    names = ["x1", "x2", "cat", "sex", "old"]
    m = TorchMLP(names, [10], 1)
    with torch.no_grad():
        m.net[0].weight *= 2.5
    data = audit_data(mlp())
    rng = np.random.default_rng(5)
    old = rng.integers(0, 2, data.table.num_rows).astype(np.int8)
    table = data.table.append_column("_g_old", pa.array(old)).append_column(
        "age", pa.array(np.where(old == 1, "60+", "<60")))
    raw = raw_spec(model_features=names, intersections=[["sex", "old"]], deltas=[1.0])
    raw["protected"].append({"name": "old", "column": "age", "protected_values": ["60+"],
                             "reference_values": ["<60"]})
    out = run(AuditData(parse_spec(raw), table, data.categories, m))
    s = out["pba_summary"]
    assert set(s["attribute"]) == {"sex", "old", "sex&old"}
    inter = s.filter(pl.col("attribute") == "sex&old")
    assert set(inter["group_name"]) == {f"sex={a},old={b}" for a in ("protected", "reference")
                                        for b in ("protected", "reference")}
    flipped = inter.filter(pl.col("setting") == "flipped")
    assert flipped.filter(pl.col("group_name") == "sex=protected,old=reference")["presented_group"].item() \
        == "sex=reference,old=protected"
    assert inter.group_by("setting").agg(pl.col("inputs").sum())["inputs"].to_list() == [data.table.num_rows] * 2
    wide = inter.pivot(on="setting", index="group_name", values="verified").join(
        inter.filter(pl.col("setting") == "observed").select("group_name", "considered"), on="group_name")
    assert (wide["observed"] + wide["flipped"] <= wide["considered"]).all()


def test_population_counted_on_group_codes_equals_counting_the_labels():
    """pba_summary's population: per group label, in label order, as counting each record's
    label does, for one attribute and intersections, with a combination nobody has left out."""
    from aequum.engines.verification.engine import _group_labels, _population

    rng = np.random.default_rng(0)
    for attrs in (["race"], ["race", "sex"], ["race", "sex", "age"]):
        values = [rng.integers(0, 2, 500) for _ in attrs]
        if len(attrs) == 3:
            values[1][:] = 1  # nobody in sex's reference group
        labels, counts = np.unique(_group_labels(values, attrs).astype(str), return_counts=True)
        expected = {str(k): int(v) for k, v in zip(labels, counts)}
        got = _population(values, attrs)
        assert got == expected and list(got) == list(expected)
