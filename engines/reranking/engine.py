"""The RAGUEL engine: recourse costs, ranking, Algorithm 1 and Algorithm 2 per protected attribute.

``prepare`` prices every record's recourse (Eq. 2: the weighted distance to the spec's linear
boundary, or to a target point), ranks the population by ascending cost and builds the groups;
``pieces`` are (attribute, algorithm, tolerance, block size) configurations — the main one plus
the tolerance × block-size sweep (Table 6 form); ``run_piece`` re-ranks; ``combine``
concatenates. Only the main configuration writes the re-ranked list, its actions and blocks.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from aequum.engines.core.data import record_columns
from aequum.engines.core.engine import Tables, concat_parts
from aequum.engines.reranking.algorithms import rerank, rerank_blocks
from aequum.engines.reranking.fairness import ranked_ratio, ratio_of, shares
from aequum.engines.reranking.metrics import STEP, cutoff_step, ranked_fairness
from aequum.engines.reranking.params import RaguelParams
from aequum.engines.reranking.recourse import Actionability, LinearRecourse, NotRepairable, PointRecourse

METRICS_MAX_ROWS = 50_000     # exact rKL/rND/rRD normalisers are computed for the top of the list

RANKING = pa.schema([
    ("attribute", pa.string()), ("algorithm", pa.string()), ("position", pa.int64()),
    ("record_id", pa.string()), ("group_name", pa.string()), ("rank_before", pa.int64()),
    ("block", pa.int64()), ("cost_before", pa.float64()), ("cost_after", pa.float64()),
    ("moved", pa.bool_()), ("action", pa.string()), ("modification_cost", pa.float64()),
])
ACTIONS = pa.schema([
    ("attribute", pa.string()), ("algorithm", pa.string()), ("record_id", pa.string()),
    ("group_name", pa.string()), ("feature", pa.string()), ("value_before", pa.float64()),
    ("value_after", pa.float64()), ("steps", pa.int64()), ("cost_before", pa.float64()),
    ("cost_after", pa.float64()), ("modification_cost", pa.float64()), ("overtakes", pa.string()),
])
BLOCKS = pa.schema([
    ("attribute", pa.string()), ("block", pa.int64()), ("size", pa.int64()),
    ("fair_before", pa.bool_()), ("fair_after", pa.bool_()), ("r_before", pa.float64()),
    ("r_after", pa.float64()), ("moves", pa.int64()), ("repaired", pa.bool_()),
    ("modification_cost", pa.float64()),
])
SUMMARY = pa.schema([
    ("attribute", pa.string()), ("algorithm", pa.string()), ("configuration", pa.string()),
    ("tolerance", pa.float64()), ("block_size", pa.int64()), ("n", pa.int64()),
    ("protected_share", pa.float64()), ("points_changed", pa.int64()),
    ("total_modification_cost", pa.float64()), ("r_before", pa.float64()), ("r_after", pa.float64()),
    ("min_prefix_r_before", pa.float64()), ("min_prefix_r_after", pa.float64()),
    ("blocks", pa.int64()), ("unfair_blocks_before", pa.int64()), ("unfair_blocks_after", pa.int64()),
    ("success", pa.bool_()), ("exit_position", pa.int64()),
    ("rKL_before", pa.float64()), ("rKL_after", pa.float64()), ("rND_before", pa.float64()),
    ("rND_after", pa.float64()), ("rRD_before", pa.float64()), ("rRD_after", pa.float64()),
    ("metrics_rows", pa.int64()), ("seconds", pa.float64()), ("note", pa.string()),
])
TABLES = {"raguel_ranking": RANKING, "raguel_actions": ACTIONS, "raguel_blocks": BLOCKS,
          "raguel_summary": SUMMARY}


class RaguelError(ValueError):
    """A RAGUEL configuration the data cannot support (named field, value)."""


@dataclass
class Ranked:
    attribute: str
    ids: np.ndarray           # record ids in ranked order
    cost: np.ndarray          # ascending
    group: np.ndarray         # codes 0 protected, 1 reference, 2 other
    names: list[str]          # group names by code
    X: np.ndarray             # recourse attributes, ranked order
    p: np.ndarray


@dataclass
class State:
    params: RaguelParams
    features: list[str]
    model: object
    ranked: list[Ranked]


def actionability(spec, features: list[str], max_combination: int = 3) -> Actionability:
    """Per-feature weight, mutability, direction, step and bounds from the spec (raw units)."""
    w, mut, direc, step, lo, hi = [], [], [], [], [], []
    for name in features:
        f = spec.feature(name)
        if f.type == "categorical":
            raise RaguelError(f"raguel: feature {name!r} is categorical; recourse needs numeric or ordinal features")
        movable = f.mutability != "immutable"
        if movable and not f.recourse_weight:
            raise RaguelError(f"raguel: feature {name!r} is mutable but its recourse_weight is "
                              f"{f.recourse_weight!r}; give a positive cost per unit change "
                              "(or declare it immutable)")
        w.append(f.recourse_weight or 0.0)
        mut.append(movable)
        direc.append({"increase": 1, "decrease": -1}.get(f.mutability, 0))
        step.append(f.step if f.step else (1.0 if f.type == "ordinal" else np.nan))
        low, high = f.range if f.range else (-np.inf, np.inf)
        if f.type == "ordinal":
            low, high = 0, len(f.order) - 1
        lo.append(low)
        hi.append(high)
    return Actionability(np.array(w), np.array(mut), np.array(direc), np.array(step, float),
                         np.array(lo, float), np.array(hi, float), max_combination)


def recourse_model(spec, params: RaguelParams):
    """(feature names, LinearRecourse | PointRecourse) for the spec and parameters."""
    if params.boundary == "target":
        features = list(params.target)
    elif params.boundary == "linear":
        features = list(params.coefficients)
    else:
        m = spec.model
        if m is None or m.kind != "linear":
            raise RaguelError("raguel.boundary 'model' needs a linear model in the spec (model.kind: "
                              "linear); for another model give raguel.boundary 'linear' with its "
                              "local linear boundary, or 'target'")
        features = list(m.features)
    unknown = [f for f in features if f not in spec.feature_names]
    if unknown:
        raise RaguelError(f"raguel: feature(s) {unknown} are not declared in the spec's features")
    act = actionability(spec, features, params.max_combination)
    try:
        if params.boundary == "target":
            return features, PointRecourse(np.array([params.target[f] for f in features], float), act)
        if params.boundary == "linear":
            coef, b = params.coefficients, params.intercept
        else:
            coef, b = spec.model.coefficients, spec.model.intercept
        return features, LinearRecourse(np.array([coef.get(f, 0.0) for f in features], float), b, act)
    except NotRepairable as exc:
        raise RaguelError(f"raguel: not repairable — {exc}") from None


def _bracket_blocks(cost: np.ndarray, cuts: list[float]):
    edges = np.searchsorted(cost, np.asarray(cuts, float), side="left")
    bounds = np.concatenate([[0], edges, [len(cost)]])
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b > a:
            yield list(range(int(a), int(b)))


def _fixed_blocks(n: int, size: int):
    for s in range(0, n, size):
        yield list(range(s, min(s + size, n)))


class RaguelEngine:
    name = "raguel"
    tables = TABLES

    def columns(self, spec, params) -> list[str]:
        return record_columns(spec)  # ids, groups, decisions, labels and every feature

    def prepare(self, data, params: RaguelParams) -> State:
        spec = data.spec
        names = [p.name for p in spec.protected]
        attrs = params.attributes or names
        unknown = [a for a in attrs if a not in names]
        if unknown:
            raise RaguelError(f"raguel.attributes: {unknown} are not protected attributes {names}")
        features, model = recourse_model(spec, params)
        X = data.feature_values(features)
        if np.isnan(X).any():
            raise RaguelError(f"raguel: missing values in recourse feature(s) "
                              f"{[f for f, bad in zip(features, np.isnan(X).any(0)) if bad]}")
        cost = model.cost(X)
        keep = np.ones(len(X), bool)
        if params.population == "unfavourable":
            if data.decision is None:
                raise RaguelError("raguel.population 'unfavourable' needs decisions (a decision column or model)")
            keep = data.decision == 0
        ids = data.ids
        ranked = []
        for a in attrs:
            g = data.groups[a]
            code = np.where(g == 1, 0, np.where(g == 0, 1, 2)).astype(np.int64)
            sel = np.flatnonzero(keep)
            order = sel[np.argsort(cost[sel], kind="stable")]
            present = np.bincount(code[order], minlength=3)
            if present[0] == 0 or present[1] == 0:
                missing = "protected" if present[0] == 0 else "reference"
                raise RaguelError(f"raguel: attribute {a!r} has no {missing} member among the "
                                  f"{len(order)} ranked records; nothing to re-rank for")
            G = 3 if present[2] else 2
            ranked.append(Ranked(a, ids[order], cost[order], code[order],
                                 ["protected", "reference", "other"][:G], X[order], shares(code[order], G)))
        return State(params, features, model, ranked)

    def pieces(self, state: State) -> list[tuple]:
        p = state.params
        out = []
        for i, r in enumerate(state.ranked):
            for alg in p.algorithms:
                out.append((i, alg, p.tolerance, p.block_size, "main"))
                if alg == "block":
                    out += [(i, alg, t, b, "sweep") for t in p.sweep_tolerances for b in p.sweep_block_sizes
                            if not (abs(t - p.tolerance) < 1e-12 and b == p.block_size)]
        return out

    def run_piece(self, state: State, piece: tuple) -> Tables:
        i, alg, tol, size, config = piece
        r, p = state.ranked[i], state.params
        n = len(r.cost)
        t0 = time.perf_counter()
        base = {"attribute": r.attribute, "algorithm": alg, "configuration": config, "tolerance": tol,
                "block_size": size if alg == "block" else None, "n": n,
                "protected_share": float(r.p[0]), "note": None}
        if alg == "full" and n > p.full_max_rows:
            return {"raguel_summary": pa.Table.from_pylist([{**base, "note": (
                f"Algorithm 1 skipped: {n} ranked records > full_max_rows {p.full_max_rows}")}], SUMMARY)}
        cost, X = r.cost.copy(), r.X.copy()
        block_of = np.full(n, -1, np.int64)
        blocks_rows, moves = [], []
        if alg == "full":
            res = rerank(cost, r.group, X, state.model, r.p, tol, p.recourse_tolerance, p.recourse,
                         p.rounding, p.max_candidates)
            order, out_cost = res.order, res.cost
            moves = [(m.record, m.overtakes, m.action) for m in res.moves]
            success, exit_at = res.success, res.exit_at
        else:
            blocks = (_bracket_blocks(r.cost, p.brackets) if p.brackets and config == "main"
                      else _fixed_blocks(n, size))
            order_parts = []
            for b, (members, info) in enumerate(rerank_blocks(cost, r.group, X, state.model, r.p, blocks,
                                                              tol, p.recourse_tolerance, p.recourse, p.rounding,
                                                              p.eq3)):
                order_parts.append(members)
                block_of[members] = b
                moves += info["moves"]
                blocks_rows.append({"attribute": r.attribute, "block": b, "size": info["size"],
                                    "fair_before": info["fair_before"], "fair_after": info["fair_after"],
                                    "r_before": info["r_before"], "r_after": info["r_after"],
                                    "moves": len(info["moves"]), "repaired": info["repaired"],
                                    "modification_cost": float(sum(a.modification_cost for _, _, a in info["moves"]))})
            order = np.concatenate([np.asarray(m, np.int64) for m in order_parts]) if order_parts else np.zeros(0, np.int64)
            out_cost = cost[order]
            success = all(b["fair_after"] for b in blocks_rows[:-1])
            exit_at = -1
        seconds = time.perf_counter() - t0      # the re-ranking itself; metrics follow
        summary = {**base, **self._summary(r, order, out_cost, moves, blocks_rows), "success": success,
                   "exit_position": exit_at + 1 if exit_at >= 0 else None, "seconds": seconds}
        out = {"raguel_summary": pa.Table.from_pylist([summary], SUMMARY)}
        if config == "main":
            out.update(self._detail(state, r, alg, order, out_cost, moves, block_of))
            if alg == "block":
                out["raguel_blocks"] = pa.Table.from_pylist(blocks_rows, BLOCKS)
        return out

    @staticmethod
    def _summary(r: Ranked, order, out_cost, moves, blocks_rows) -> dict:
        G = len(r.p)
        m = min(len(order), METRICS_MAX_ROWS)
        before = ranked_fairness(r.group[:m] == 0)
        after = ranked_fairness(r.group[order][:m] == 0)
        row = {"points_changed": sum(1 for _, _, a in moves if a.attributes),
               "total_modification_cost": float(sum(a.modification_cost for _, _, a in moves)),
               "r_before": ratio_of(r.cost, r.group, G),
               "r_after": ratio_of(out_cost, r.group[order], G),
               "min_prefix_r_before": float(ranked_ratio(r.cost, r.group, G)[1:].min()) if len(order) > 1 else 1.0,
               "min_prefix_r_after": float(ranked_ratio(out_cost, r.group[order], G)[1:].min()) if len(order) > 1 else 1.0,
               "blocks": len(blocks_rows) or None,
               "unfair_blocks_before": sum(not b["fair_before"] for b in blocks_rows) if blocks_rows else None,
               "unfair_blocks_after": sum(not b["fair_after"] for b in blocks_rows) if blocks_rows else None,
               "metrics_rows": m}
        for k in ("rKL", "rND", "rRD"):
            row[f"{k}_before"], row[f"{k}_after"] = before[k], after[k]
        if cutoff_step(m) != STEP:
            row["note"] = (f"rKL/rND/rRD over the cut-offs 1..{m}: the list is not longer than the "
                           f"first cut-off ({STEP})")
        return row

    @staticmethod
    def _detail(state: State, r: Ranked, alg: str, order, out_cost, moves, block_of) -> Tables:
        n = len(order)
        moved = {j: (l, a) for j, l, a in moves if a.attributes}
        actions = []
        for j, (l, a) in moved.items():
            for k, f in enumerate(a.attributes):
                actions.append({"attribute": r.attribute, "algorithm": alg, "record_id": str(r.ids[j]),
                                "group_name": r.names[r.group[j]], "feature": state.features[f],
                                "value_before": a.before[k], "value_after": a.after[k],
                                "steps": a.steps[k], "cost_before": a.cost_before, "cost_after": a.cost_after,
                                "modification_cost": a.modification_cost, "overtakes": str(r.ids[l])})
        tables = {"raguel_actions": pa.Table.from_pylist(actions, ACTIONS)}
        if state.params.write_ranking:
            text = np.full(n, None, object)
            mod = np.full(n, 0.0)
            pos_of = np.empty(len(r.cost), np.int64)
            pos_of[order] = np.arange(n)
            for j, (l, a) in moved.items():
                text[pos_of[j]] = "; ".join(f"{state.features[f]}: {b:g} -> {v:g}"
                                             for f, b, v in zip(a.attributes, a.before, a.after))
                mod[pos_of[j]] = a.modification_cost
            is_moved = np.zeros(n, bool)
            is_moved[[pos_of[j] for j in moved]] = True
            tables["raguel_ranking"] = pa.table({
                "attribute": pa.array([r.attribute] * n, pa.string()),
                "algorithm": pa.array([alg] * n, pa.string()),
                "position": pa.array(np.arange(1, n + 1, dtype=np.int64)),      # ranks from 1
                "record_id": pa.array(r.ids[order].astype(str)),
                "group_name": pa.array(np.array(r.names, object)[r.group[order]].astype(str)),
                "rank_before": pa.array(order.astype(np.int64) + 1),
                "block": pa.array(block_of[order] if alg == "block" else np.full(n, -1, np.int64)),
                "cost_before": pa.array(r.cost[order]),
                "cost_after": pa.array(np.asarray(out_cost, np.float64)),
                "moved": pa.array(is_moved),
                "action": pa.array(text, pa.string()),
                "modification_cost": pa.array(mod),
            })
        return tables

    def combine(self, state: State, parts) -> Tables:
        return concat_parts(parts, TABLES)
