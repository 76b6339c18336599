"""The PBA verification engine (seed 004): twin-network bounds per input, per δ.

``prepare`` imports the model as a ReLU network on raw inputs (``network``), builds the δ-box
spec (``box``: numeric inputs move by δ × their `perturbation` unit inside the domain;
categorical and ordinal inputs stay fixed) and, per flipped attribute (or intersection), the
inputs to verify (every record in one of the groups, or the spec's sample), ordered by id.
``pieces`` are batches of inputs; ``run_piece`` bounds a batch for every δ and both settings
and decides each query (``verify``); ``combine`` adds the scores (``scores``).

Per input, the objective of Eq. 1 is F(z) = σ·(score(x) − score(x′)) with σ = +1 for true
class 1 and −1 for class 0 (= (l_ci − l_cj)(x) − (l_ci − l_cj)(x′), ``network``). Observed
asks min F > 0, flipped max F < 0 (NOTES "PBA"); F at the input itself already falsifies one
of the two, so at most one setting per input needs the bound, the search or the LP.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from aequum.engines.core.data import record_columns, record_ids
from aequum.engines.core.engine import Tables, chunks, concat_parts
from aequum.engines.verification import bounds as bnd
from aequum.engines.verification.box import BoxSpec
from aequum.engines.verification.lp import new_highs
from aequum.engines.verification.network import Network, import_network, shared_neurons
from aequum.engines.verification.params import PBAParams
from aequum.engines.verification.scores import SUMMARY, summary
from aequum.engines.verification.verify import Outcome, as_tensor, decide, to_numpy_bounds

INPUTS = pa.schema([
    ("attribute", pa.string()), ("record_id", pa.string()), ("group_name", pa.string()),
    ("setting", pa.string()), ("presented_group", pa.string()), ("delta", pa.float64()),
    ("truth", pa.int8()), ("decision", pa.int8()), ("twin_decision", pa.int8()),
    ("considered", pa.bool_()), ("objective", pa.float64()),
    ("lower_bound", pa.float64()), ("upper_bound", pa.float64()),
    ("verdict", pa.string()), ("method", pa.string()),
    ("counterexample", pa.list_(pa.float64())), ("counterexample_objective", pa.float64()),
    ("robust_verdict", pa.string()), ("robust_method", pa.string()),
    ("robust_counterexample", pa.list_(pa.float64())),
])


@dataclass
class Unit:
    """One flipped attribute (or intersection) and the inputs verified for it."""

    attribute: str
    box: BoxSpec
    shared: list[np.ndarray]
    rows: np.ndarray            # record positions, ordered by id
    group: np.ndarray           # group label per row (object)
    twin_group: np.ndarray      # the group the twin presents
    population: dict[str, int]


@dataclass
class State:
    net: Network
    X: np.ndarray
    ids: np.ndarray
    truth: np.ndarray
    units: list[Unit]
    params: PBAParams


def _group_labels(values: list[np.ndarray], attrs: list[str]) -> np.ndarray:
    """'protected' / 'reference' for one attribute; 'a=protected,b=reference' for several."""
    if len(attrs) == 1:
        return np.where(values[0] == 1, "protected", "reference").astype(object)
    parts = [np.where(v == 1, f"{a}=protected", f"{a}=reference") for a, v in zip(attrs, values)]
    out = parts[0].astype(object)
    for p in parts[1:]:
        out = out + "," + p.astype(object)
    return out


def _population(values: list[np.ndarray], attrs: list[str]) -> dict[str, int]:
    """Records per group label (as :func:`_group_labels` names them), in label order, counted
    on the group codes (labelling every record first took 2 GB and 15 s at 10M records)."""
    code = np.zeros(len(values[0]), np.int64)
    for i, v in enumerate(values):
        code |= (np.asarray(v) == 1).astype(np.int64) << i
    counts = np.bincount(code, minlength=1 << len(values))
    present = np.flatnonzero(counts)
    labels = _group_labels([(present >> i) & 1 for i in range(len(values))], attrs)
    return dict(sorted((str(label), int(counts[c])) for label, c in zip(labels, present)))


def _held_out(data, ids: pa.Array, inputs: str) -> np.ndarray | bool:
    """``inputs: holdout``: a mask of the records the surrogate held out of its fit (the paper's
    test split); ``all``: True."""
    if inputs == "all":
        return True
    held = getattr(data.model, "holdout_ids", None)
    if held is None or len(held) == 0:
        raise ValueError("engines.pba.inputs 'holdout' verifies the records a surrogate was not fitted on; "
                         "this model has none (use model.kind surrogate, or inputs: all)")
    return pc.is_in(ids, value_set=held).to_numpy(zero_copy_only=False)


def _domain(data, name: str) -> tuple[float, float]:
    feat = data.spec.feature(name)
    if feat.range is not None:
        return float(feat.range[0]), float(feat.range[1])
    col = data.column_values(name)
    col = col[np.isfinite(col)]
    return (float(col.min()), float(col.max())) if len(col) else (-np.inf, np.inf)


def _check_inputs(data, names: list[str], ids) -> None:
    """Every record has every model input: else an error naming the first record (in staged
    order) with one missing and its first missing input, checked a column at a time."""
    first = None  # (record, input)
    for j, name in enumerate(names):
        missing = np.flatnonzero(~np.isfinite(data.column_values(name)))
        if len(missing) and (first is None or missing[0] < first[0]):
            first = (int(missing[0]), j)
    if first is not None:
        raise ValueError(f"record {ids[first[0]].as_py()!r}: model input {names[first[1]]!r} is missing")


class PBAEngine:
    """Persistent-bias-aware fairness by twin-network verification (seed 004)."""

    name = "pba"
    tables = {"pba_inputs": INPUTS, "pba_summary": SUMMARY}
    uses_model = True  # verifies the audited network: not run on a degenerate surrogate

    def columns(self, spec, params) -> list[str]:
        # ids, groups, decisions, labels and the model's inputs
        return record_columns(spec, spec.model.features if spec.model is not None else [])

    def prepare(self, data, params: PBAParams) -> State:
        spec = data.spec
        if data.model is None:
            raise ValueError("PBA needs the spec's model (a ReLU network or a surrogate)")
        net = import_network(data.model)
        names = list(net.feature_names)
        truth = data.label if params.truth == "label" else data.decision
        if truth is None:
            raise ValueError(f"PBA with truth {params.truth!r} needs a {params.truth} column")
        units_spec = params.flipped_units(spec)
        if not units_spec:
            raise ValueError("PBA: no protected attribute is a model input (add one to model.features)")
        unit = np.zeros(len(names))
        low, high = np.full(len(names), -np.inf), np.full(len(names), np.inf)
        for j, n in enumerate(names):
            if n in spec.feature_names and spec.feature(n).type == "numeric" and spec.feature(n).perturbation:
                unit[j] = float(spec.feature(n).perturbation)
                low[j], high[j] = _domain(data, n)
        ids = data.id_text
        _check_inputs(data, names, ids)
        held_out = _held_out(data, ids, params.inputs)
        order = pc.sort_indices(ids).to_numpy()  # by id as text, stable
        units = []
        for attrs in units_spec:
            # race=Asian flips the model's race input (protected[].compare): for its members
            # and the reference's, that is do(race := the other group)
            flipped = [spec.model_input(a) for a in attrs]
            missing = [a for a, f in zip(attrs, flipped) if f not in names]
            if missing:
                raise ValueError(f"PBA: protected attribute(s) {missing} are not model inputs "
                                 f"{names}; PBA flips the attribute the model sees")
            sens = tuple(names.index(f) for f in flipped)
            box = BoxSpec(tuple(names), sens, unit, low, high)
            groups = [data.groups[a] for a in attrs]
            eligible = np.logical_and.reduce([g >= 0 for g in groups]) & (truth >= 0) & held_out
            rows = order[eligible[order]]
            population = _population([g[rows] for g in groups], attrs)
            if params.sample is not None and params.sample < len(rows):
                pick = np.sort(np.random.default_rng(params.sample_seed).permutation(len(rows))[:params.sample])
                rows = rows[pick]
            vals = [g[rows] for g in groups]
            units.append(Unit("&".join(attrs), box, shared_neurons(net, list(sens)), rows,
                              _group_labels(vals, attrs), _group_labels([1 - v for v in vals], attrs),
                              population))
        # the inputs of the records some unit verifies only (a sample of 2,000 of 10M: not 0.34 GB)
        keep = np.unique(np.concatenate([u.rows for u in units]))
        X = data.feature_values(names, rows=keep)
        for u in units:
            u.rows = np.searchsorted(keep, u.rows)  # positions in the state's records
            u.box.check_inside(X[u.rows], record_ids(ids, keep[u.rows]))
        return State(net, X, record_ids(ids, keep), truth[keep].astype(np.int8), units, params)

    def pieces(self, state: State) -> list[tuple[int, int, int]]:
        return chunks([len(unit.rows) for unit in state.units], state.params.batch_size)

    def run_piece(self, state: State, piece: tuple[int, int, int]) -> Tables:
        u, s, e = piece
        unit = state.units[u]
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            tables, carry = [], None
            for delta in sorted(state.params.deltas, reverse=True):   # largest box first
                table, carry = _verify_batch(state, unit, slice(s, e), delta, carry)
                tables.append(table)
        finally:
            torch.set_num_threads(threads)
        return {"pba_inputs": pa.concat_tables(tables)}

    def combine(self, state: State, parts) -> Tables:
        out = concat_parts(parts, {"pba_inputs": INPUTS})
        # one order whatever the batching: attribute, setting, δ, then the inputs by id
        out["pba_inputs"] = _sorted(out["pba_inputs"], ["attribute", "setting", "delta", "record_id"])
        population = {(unit.attribute, g): n for unit in state.units for g, n in unit.population.items()}
        out["pba_summary"] = summary(out["pba_inputs"], population, list(state.net.feature_names))
        return out


def _verify_batch(state: State, unit: Unit, part: slice, delta: float, carry: dict | None):
    """Both settings and both robustness copies of a batch of the unit's inputs at one δ.

    ``carry``: the bounds proven for the next larger δ, whose box contains this one; they stay
    valid here and are intersected with this δ's, so bounds only tighten as δ shrinks.
    Returns the rows and the carry for the next smaller δ."""
    net, p, box = state.net, state.params, unit.box
    rows = unit.rows[part]
    layers = net.torch_layers()
    x_a = state.X[rows]
    x_b = box.twin(x_a)
    truth = state.truth[rows]
    n = len(rows)
    score_a, score_b = net.score(x_a), net.score(x_b)
    dec_a, dec_b = (score_a > 0).astype(np.int8), (score_b > 0).astype(np.int8)
    sigma = np.where(truth == 1, 1.0, -1.0)
    considered = (dec_a == truth) & (dec_b == truth)
    F = sigma * (score_a - score_b)

    lo, hi = box.bounds(x_a, delta)
    lo_b, hi_b = box.bounds(x_b, delta)
    free = box.unit > 0
    sym = bnd.symbolic_bounds(layers, as_tensor(np.vstack([lo, lo_b])), as_tensor(np.vstack([hi, hi_b])),
                              None if carry is None else carry["sym"])
    bounds_a = [(l[:n], u[:n]) for l, u in sym]
    bounds_b = [(l[n:], u[n:]) for l, u in sym]
    coef = as_tensor(np.column_stack([sigma, -sigma]))
    shared_t = [torch.from_numpy(m) for m in unit.shared]
    twin = bnd.twin_lower_bound(layers, bounds_a, bounds_b, coef, as_tensor(x_a), as_tensor(x_b),
                                as_tensor(lo), as_tensor(hi), list(box.sensitive), shared_t)
    ibp_a = bnd.interval_bounds(layers, as_tensor(lo), as_tensor(hi))
    ibp_b = bnd.interval_bounds(layers, as_tensor(lo_b), as_tensor(hi_b))
    twin = torch.maximum(twin, bnd.twin_interval_lower_bound(ibp_a, ibp_b, coef)).numpy()
    lowF, upF = twin[:, 0], -twin[:, 1]
    if carry is not None:
        lowF, upF = np.maximum(lowF, carry["lowF"]), np.minimum(upF, carry["upF"])
    np_a, np_b = to_numpy_bounds(bounds_a), to_numpy_bounds(bounds_b)
    highs = new_highs() if (p.lp or p.milp) else None

    # PBA: per considered input, the setting its own value does not already falsify
    settings = {}
    for setting, sign in (("observed", 1.0), ("flipped", -1.0)):
        G = sign * F
        low_g = lowF if sign > 0 else -upF
        work = np.flatnonzero(considered & (G > 0))
        out = Outcome(np.full(n, None, dtype=object), np.full(n, None, dtype=object), low_g.copy(),
                      np.full(n, np.nan), np.full((n, len(box.unit)), np.nan))
        falsified = considered & (G <= 0)
        out.verdict[falsified], out.stage[falsified] = "falsified", "centre"
        out.value[falsified], out.point[falsified] = G[falsified], x_a[falsified]
        if len(work):
            res = decide(net, layers, [x_a[work], x_b[work]], [sign * sigma[work], -sign * sigma[work]],
                         np.ones(len(work), bool), lo[work], hi[work], free, low_g[work],
                         [_rows(np_a, work), _rows(np_b, work)], list(box.sensitive), unit.shared, p, highs)
            out.verdict[work], out.stage[work], out.lower[work] = res.verdict, res.stage, res.lower
            out.value[work], out.point[work] = res.value, res.point
        settings[setting] = (G, out)
    lowF = np.maximum(lowF, settings["observed"][1].lower)
    upF = np.minimum(upF, -settings["flipped"][1].lower)

    # robustness: the decision of each copy constant over its box
    robust = {}
    for setting, x, lo_c, hi_c, dec, bnds, np_b_ in (("observed", x_a, lo, hi, dec_a, bounds_a, np_a),
                                                     ("flipped", x_b, lo_b, hi_b, dec_b, bounds_b, np_b)):
        if not p.robustness:
            robust[setting] = None
            continue
        sgn = np.where(dec == 1, 1.0, -1.0)
        l_out, u_out = bnds[-1][0][:, 0].numpy(), bnds[-1][1][:, 0].numpy()
        low_g = np.where(sgn > 0, l_out, -u_out)
        if carry is not None:
            low_g = np.maximum(low_g, carry["robust"][setting])
        robust[setting] = decide(net, layers, [x], [sgn], dec == 1, lo_c, hi_c, free, low_g, [np_b_],
                                 list(box.sensitive), None, p, highs)

    tables = []
    for setting, (G, out) in settings.items():
        rb = robust[setting]
        low_g, up_g = (lowF, upF) if setting == "observed" else (-upF, -lowF)
        copy_dec, other_dec = (dec_a, dec_b) if setting == "observed" else (dec_b, dec_a)
        cex = out.verdict == "falsified"
        tables.append(pa.table({
            "attribute": pa.array([unit.attribute] * n, pa.string()),
            "record_id": pa.array(state.ids[rows], pa.string()),
            "group_name": pa.array(unit.group[part], pa.string()),
            "setting": pa.array([setting] * n, pa.string()),
            "presented_group": pa.array((unit.group if setting == "observed" else unit.twin_group)[part],
                                        pa.string()),
            "delta": pa.array(np.full(n, delta), pa.float64()),
            "truth": pa.array(truth, pa.int8()),
            "decision": pa.array(copy_dec, pa.int8()),
            "twin_decision": pa.array(other_dec, pa.int8()),
            "considered": pa.array(considered, pa.bool_()),
            "objective": pa.array(np.where(considered, G, np.nan), pa.float64(), from_pandas=True),
            "lower_bound": pa.array(np.where(considered, low_g, np.nan), pa.float64(), from_pandas=True),
            "upper_bound": pa.array(np.where(considered, up_g, np.nan), pa.float64(), from_pandas=True),
            "verdict": pa.array(out.verdict, pa.string()),
            "method": pa.array(out.stage, pa.string()),
            "counterexample": _lists(out.point, cex),
            "counterexample_objective": pa.array(out.value, pa.float64(), from_pandas=True),
            "robust_verdict": pa.array(rb.verdict, pa.string()) if rb is not None else pa.nulls(n, pa.string()),
            "robust_method": pa.array(rb.stage, pa.string()) if rb is not None else pa.nulls(n, pa.string()),
            "robust_counterexample": _lists(rb.point, rb.verdict == "falsified") if rb is not None
            else pa.nulls(n, pa.list_(pa.float64())),
        }))
    carry = {"sym": sym, "lowF": lowF, "upF": upF,
             "robust": {k: (None if v is None else v.lower) for k, v in robust.items()}}
    return pa.concat_tables(tables), carry


def _sorted(table: pa.Table, keys: list[str]) -> pa.Table:
    import polars as pl

    return pl.from_arrow(table).sort(keys, maintain_order=True).to_arrow().cast(table.schema)


def _rows(bounds: list[tuple[np.ndarray, np.ndarray]], idx: np.ndarray):
    return [(l[idx], u[idx]) for l, u in bounds]


def _lists(points: np.ndarray, keep: np.ndarray) -> pa.Array:
    """Rows of ``points`` as list<double>, null where not ``keep``."""
    n, d = points.shape
    flat = pa.array(np.where(np.isfinite(points), points, 0.0).ravel(), pa.float64())
    offsets = pa.array(np.arange(0, n * d + 1, d, dtype=np.int32))
    arr = pa.ListArray.from_arrays(offsets, flat, mask=pa.array(~np.asarray(keep, bool)))
    return arr
