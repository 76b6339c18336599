"""Controlled disparity: are protected applicants denied more often than comparable reference
applicants, and could an omitted variable explain it?

The examiner's first number (docs/fair-lending.md, "Controlled denial regression"): for each
protected attribute, among the records with a decision, two models of

    denied ~ 1 + protected + controls

over the protected (1) and reference (0) applicants, on the same rows and the same controls:

* the linear probability model (LPM), by OLS (``engines.regression.sensitivity.controlled_lpm``: blocked
  sums, classical and HC1 standard errors). Its coefficient is the difference in denial
  probability, in points, between a protected and a reference applicant with the same recorded
  inputs (``estimate``; the unadjusted difference stands beside it), and it carries the
  sensitivity analysis below;
* the denial logit, by Newton–Raphson (``engines.regression.logit.controlled_logit``): the odds
  ratio of denial with its interval (``odds_ratio``, ``or_ci_*``; its log, ``logit_coefficient``
  and ``logit_se``, classical), the average marginal effect of group membership in points (a
  discrete change 0 → 1 averaged over the rows: ``ame``, delta-method ``ame_ci_*``), and the
  E-value of the odds ratio and of its interval's limit nearer 1 (VanderWeele & Ding 2017;
  sqrt(OR) as the risk ratio when the denial rate exceeds 15 %: ``e_value``, ``e_value_ci``).
  The logit is the number the findings test: a lender that denies when a linear score plus
  noise passes a threshold has a sigmoid denial probability, and where the groups' inputs
  differ the LPM's straight line leaves a significant group residual on a lender with no
  discrimination (tests/test_logit.py); the logit does not. ``logit_note``: what the logit adds
  to ``note`` (separation no level explains — no estimate —, or no convergence).

Controls (:func:`resolve_controls`): numeric features as their values, ordinal and categorical
features as dummies of their levels (HMDA's DTI bins stay levels).

The LPM's sensitivity (Cinelli & Hazlett 2020, "Sensitivity to an omitted variable"): the
robustness value RV_1 (the share of the residual variance of both group membership and denial
an omitted factor must explain to remove the estimate) and RV_{1,α} (to make it lose
significance), and for every control, and for the controls together, the bounds of a
confounder 1, 2, 3 … times as strong. ``robust``: the estimate keeps its sign and its interval
excludes 0 under a confounder ``robust_multiplier`` (default 2) times as strong as each control
and as all of them together; ``strongest_control`` and ``adjusted_*_at_strongest`` are that
bound's. What the data cannot see (a credit score, in the public HMDA LAR) may still explain a
disparity that is robust to such a confounder: the findings say so.

Intersections (``intersections``, auto by default: ``engines.core.intersections``) are tested as
units of their own: the applicants protected in every attribute of one against those in the
reference group of every one (Black women against White men), the groups of the other columns
held — the group-level test of CST's intersection findings.

Inference (``inference`` for the LPM's interval and p, ``logit_inference`` for the logit's;
``engines.regression.wild``): ``classical`` without a cluster; ``HC1`` when the cluster has one
level (one lender's own LAR: no cluster-robust error exists); ``CR1`` from ``min_clusters`` (40)
clusters (the LPM's with t(G − 1), the logit's normal); between 2 and 39, the wild cluster
bootstrap's p (``WCR-bootstrap``, ``score-bootstrap``: ``bootstrap_draws``, ``bootstrap_weights``)
beside the CR1 interval with t(G − 1) critical values. The LPM's ``se`` stays the classical error
its sensitivity analysis is defined on. Categorical levels whose applicants all have one outcome
are dropped before fitting, in both models (``separated_rows``, ``separated_levels``: Stata's and
fixest's rule; ``engines.regression.design``).

P-values, the LPM's and the logit's alike, are adjusted across the run's units (Holm by
default: ``p_adjusted``/``significant``, ``logit_p_adjusted``/``logit_significant``). An
attribute with fewer than ``min_group_size`` applicants in a group keeps its estimates, without
p-values or significance. Tables ``regression_estimates`` (one row per attribute; with the
logit's log-likelihood and McFadden pseudo R²), ``regression_benchmarks`` (attribute × control
× multiplier) and ``regression_coefficients`` (every term of both models per comparison:
``engines.regression.coefficients``). One piece per unit and per segment, in two rounds: the
two largest pooled units first (:func:`first_round`), then every other piece, whose logit
starts from its attribute's pooled fit if of the first round, else the largest one's
(``start_from``: 4-6 Newton passes instead of 8 from its own linear model at 1M HMDA rows); the
rows in the pieces' order, the adjustment in ``combine``.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from aequum.engines.core.data import record_columns
from aequum.engines.core.engine import Tables, concat_parts, spread_client
from aequum.engines.core.intersections import tested_units
from aequum.engines.outcome.stats import adjust_p_values
from aequum.engines.regression.absorb import dense_codes
from aequum.engines.regression.bounds import survive, under_bound
from aequum.engines.regression.passes import Executor
from aequum.engines.regression.coefficients import COEFFICIENTS, coefficient_rows, fit_statistics
from aequum.engines.regression.logit import LogitResult, controlled_logit
from aequum.engines.regression.design import Categorical, code_type, design, null_mask
from aequum.engines.regression.sensitivity import LPMResult, controlled_lpm

ESTIMATES = pa.schema([
    ("attribute", pa.string()), ("n", pa.int64()), ("n_protected", pa.int64()),
    ("n_reference", pa.int64()), ("dropped_null", pa.int64()), ("raw_difference", pa.float64()),
    ("estimate", pa.float64()), ("se", pa.float64()), ("se_robust", pa.float64()),
    ("ci_low", pa.float64()), ("ci_high", pa.float64()), ("confidence", pa.float64()),
    ("t", pa.float64()), ("dof", pa.int64()), ("p_value", pa.float64()), ("p_adjusted", pa.float64()),
    ("significant", pa.bool_()), ("partial_r2", pa.float64()), ("r_squared", pa.float64()),
    ("rv_q1", pa.float64()), ("rv_q1_alpha", pa.float64()), ("strongest_control", pa.string()),
    ("adjusted_at_strongest", pa.float64()), ("adjusted_ci_low_at_strongest", pa.float64()),
    ("adjusted_ci_high_at_strongest", pa.float64()), ("robust", pa.bool_()), ("controls", pa.string()),
    ("note", pa.string()), ("correction", pa.string()), ("robust_multiplier", pa.float64()),
    # the denial logit on the same rows and controls (engines.regression.logit)
    ("odds_ratio", pa.float64()), ("or_ci_low", pa.float64()), ("or_ci_high", pa.float64()),
    ("logit_coefficient", pa.float64()), ("logit_se", pa.float64()), ("logit_p_value", pa.float64()),
    ("logit_p_adjusted", pa.float64()), ("logit_significant", pa.bool_()), ("ame", pa.float64()),
    ("ame_ci_low", pa.float64()), ("ame_ci_high", pa.float64()), ("e_value", pa.float64()),
    ("e_value_ci", pa.float64()), ("logit_note", pa.string()),
    # fixed effects absorbed and cluster-robust errors (engines.regression.absorb)
    ("fixed_effects", pa.string()), ("cluster", pa.string()), ("clusters", pa.int64()),
    ("se_cluster", pa.float64()), ("logit_se_classical", pa.float64()),
    # the LPM's difference under the spec's bound on the inputs the records lack (engines.regression.bounds)
    ("bound_source", pa.string()), ("bound_r2_group", pa.float64()), ("bound_r2_outcome", pa.float64()),
    ("bounded_estimate", pa.float64()), ("bounded_ci_low", pa.float64()), ("bounded_ci_high", pa.float64()),
    ("bounded_p_value", pa.float64()), ("bounded_p_adjusted", pa.float64()), ("survives_bound", pa.bool_()),
    # the inference each model's test used (engines.regression.wild) and the rows separation dropped
    ("inference", pa.string()), ("logit_inference", pa.string()), ("bootstrap_draws", pa.int64()),
    ("bootstrap_weights", pa.string()), ("separated_rows", pa.int64()), ("separated_levels", pa.string()),
    # the logit's fit (engines.regression.coefficients): log-likelihood, McFadden's pseudo R²
    ("logit_log_likelihood", pa.float64()), ("logit_pseudo_r2", pa.float64()),
])

SEGMENTS = pa.schema([("segment", pa.string()), ("segment_feature", pa.string()),
                      ("segment_level", pa.string()), *ESTIMATES])

BENCHMARKS = pa.schema([
    ("attribute", pa.string()), ("control", pa.string()), ("multiplier", pa.float64()),
    ("r2dxj_x", pa.float64()), ("r2yxj_dx", pa.float64()), ("r2dz_x", pa.float64()),
    ("r2yz_dx", pa.float64()), ("adjusted_estimate", pa.float64()), ("adjusted_ci_low", pa.float64()),
    ("adjusted_ci_high", pa.float64()), ("adjusted_se", pa.float64()), ("bias", pa.float64()),
    ("note", pa.string()),
])


def resolve_controls(spec, params) -> list[str]:
    """The controls: ``params.controls``; else ``engines.cst.features`` when set; else every
    feature that is neither immutable nor a protected attribute (by name or column)."""
    if params.controls is not None:
        return list(params.controls)
    cst = getattr(spec.engines, "cst", None)
    features = getattr(cst, "features", None)
    if features:
        return [f for f in features if f not in params.fixed_effects]
    protected = {p.name for p in spec.protected} | {p.column for p in spec.protected}
    grouping = {*params.fixed_effects, *([params.cluster] if params.cluster else [])}
    return [f.name for f in spec.features if f.mutability != "immutable" and f.name not in protected
            and f.name not in grouping]


SEP = "\x1f"  # between a unit and its segment in a piece's name (control characters are refused in names)


class RegressionEngine:
    """Controlled disparity with its omitted-variable sensitivity (see the module docstring)."""

    name = "regression"
    spreads = True  # a first round of fewer comparisons than workers: each logit's passes on every worker
    tables = {"regression_estimates": ESTIMATES, "regression_benchmarks": BENCHMARKS,
              "regression_segments": SEGMENTS, "regression_coefficients": COEFFICIENTS}

    def columns(self, spec, params) -> list[str]:
        """Groups, decisions, the controls, fixed effects, cluster and segments."""
        extra = [*params.fixed_effects, *([params.cluster] if params.cluster else []), *params.segments]
        names = resolve_controls(spec, params)
        return record_columns(spec, [*names, *[e for e in dict.fromkeys(extra) if e not in names]], ids=False)

    def prepare(self, data, params):
        if data.decision is None:
            raise ValueError("regression needs decisions (a decision column, or model.use_for_decisions)")
        names = resolve_controls(data.spec, params)
        decision = data.decision
        y = np.where((decision == 0) | (decision == 1), 1.0 - decision, np.nan)  # 1 = unfavourable
        made: dict = {}

        def block(name):  # one block a feature, whether a control, a fixed effect, the cluster or a segment
            if name not in made:
                made[name] = compact(record_block(data, name, log=name in params.log_controls))
            return made[name]

        controls = [block(name) for name in names]
        names = [f"log {n}" if n in params.log_controls else n for n in names]
        fixed = [block(name) for name in params.fixed_effects]
        cluster = block(params.cluster) if params.cluster else None
        segments = {name: block(name) for name in params.segments}
        # the other attributes' groups the logit holds, as protected / reference / neither: one
        # attribute a column (its first, never a per-value comparison of protected[].compare); an
        # intersection: protected in every attribute (1) against reference in every one (0)
        groups, others = tested_units(data.spec, data.groups, params.intersections, params.min_cell(data.spec),
                                      params.other_groups)
        return {"y": y, "groups": groups, "controls": controls, "names": names, "params": params,
                "bounds": unit_bounds(data.spec, groups, "denial"),
                "others": others, "fixed": fixed, "cluster": cluster, "segments": segments,
                "attributes": [p.name for p in data.spec.protected if p.of is None],
                "parents": (parents := {c["label"]: c["attribute"] for c in data.spec.comparisons()}),
                "first": first_round(groups, y, parents)}

    def every_piece(self, state) -> list[str]:
        """Each unit pooled, then each attribute (every unit with ``segment_units: all``) within
        each level of each segment feature present: the order of the tables' rows."""
        params = state["params"]
        out = list(state["groups"])
        for name, seg in state["segments"].items():
            codes = np.asarray(seg.codes)
            present = np.unique(codes[~null_mask(codes, True)]).astype(np.int64)
            out += [SEP.join((unit, name, str(int(level)))) for unit in state["groups"]
                    if params.segment_units == "all" or unit in state["attributes"] for level in present]
        return out

    def pieces(self, state) -> list[str]:
        """The first round: the pieces with no fit to start from (:meth:`root`)."""
        return [p for p in self.every_piece(state) if self.root(state, p) is None]

    def next_round(self, state, parts):
        """The second round, once: the pieces whose logit starts from a first-round fit
        (:meth:`root`), those fits' slopes in the state."""
        if "starts" in state:
            return None
        starts = dict(part.pop("_start") for part in parts if "_start" in part)
        rest = [p for p in self.every_piece(state) if self.root(state, p) is not None]
        return ({**state, "starts": starts}, rest) if rest else None

    @staticmethod
    def root(state, piece: str) -> str | None:
        """The first round's unit whose fit a piece's logit starts from (None: the piece is of
        the first round): a value's comparison's attribute (``race`` for ``race=Asian``), a
        segment's unit, when of the first round; else the first round's largest unit (the
        controls' slopes and the lenders' effects of one denial model barely depend on the
        group tested)."""
        unit, *segment = piece.split(SEP)
        first = state["first"]
        if not first or (unit in first and not segment):
            return None
        parent = state["parents"].get(unit)
        return parent if parent in first else unit if unit in first else first[0]

    def run_piece(self, state, piece: str) -> Tables:
        params = state["params"]
        attribute, *segment = piece.split(SEP)
        groups = state["groups"][attribute]
        chosen = ((groups == 0) | (groups == 1)) & ~np.isnan(state["y"])
        blocks, names = list(state["controls"]), list(state["names"])
        label = level = None
        if segment:
            feature, code = segment[0], int(segment[1])
            seg = state["segments"][feature]
            chosen &= np.asarray(seg.codes) == code
            level = str(seg.levels[code])
            label = f"{feature} = {level}"
            keep = [i for i, n in enumerate(names) if n != feature]  # constant within the segment
            blocks, names = [blocks[i] for i in keep], [names[i] for i in keep]
        rows = np.flatnonzero(chosen)
        held = state["others"].get(attribute, [])
        cells = [held_cells([state["groups"][a] for a in held], params.min_group_size, state["y"], rows)] if held else []
        n_inputs = len(names)
        blocks, names = [*blocks, *cells], [*names, *([" × ".join(held) + " (groups)"] if held else [])]
        grouping = dict(fixed=state["fixed"], fixed_names=params.fixed_effects, cluster=state["cluster"],
                        bootstrap=params.bootstrap(), outcome=("approval", "denial"))
        coefficients = pa.Table.from_pylist([], schema=COEFFICIENTS)
        logit = None
        if segment and len(rows) < params.min_segment_size:
            row = _untested_segment(attribute, rows, groups, params, state["y"])
        else:
            # both models compare within the other groups' cells; a confounder is measured against
            # the recorded inputs only (the cells and fixed effects are held, not benchmarks)
            # the rows and columns both models fit, found (and the rows gathered, in cell order) once
            prepared = design(state["y"], groups, blocks, names, rows, None, grouping["fixed"], grouping["fixed_names"],
                              grouping["cluster"], grouping["outcome"])
            del rows  # (the design holds the rows it kept)
            fit = controlled_lpm(state["y"], groups, blocks, names, params.confidence,
                                 multipliers=params.benchmark_multipliers, robust_multiplier=params.robust_multiplier,
                                 held=len(cells), prepared=prepared, **grouping)
            root = self.root(state, piece)
            client = spread_client()  # a round with fewer pieces than the cluster's workers
            logit = controlled_logit(state["y"], groups, blocks, names, params.confidence,
                                     prepared=prepared, start_from=state.get("starts", {}).get(root), consume=True,
                                     executor=None if client is None else Executor(client), **grouping)
            del prepared  # (spent by the logit: its columns scaled in place)
            small = min(fit.n_treated, fit.n_control) < params.min_group_size
            notes = [fit.note] if fit.note else []
            if small:
                notes.append(f"fewer than {params.min_group_size} applicants in a group "
                             f"({fit.n_treated:,} protected, {fit.n_control:,} reference): reported, not tested")
            row = {**_estimate_row(attribute, fit, small, notes, params, names[n_inputs:]),
                   **_logit_row(logit, fit, small), **fit_statistics(logit),
                   **bounded(fit, state["bounds"].get(attribute), params.confidence)}
            coefficients = coefficient_rows(attribute, label, fit, logit, names[n_inputs:],
                                            {n: list(b.levels) for n, b in zip(names, blocks)
                                             if isinstance(b, Categorical)})
        out = {"_piece": piece}
        if not segment and self.root(state, piece) is None:  # the start of its comparisons' and segments' logits
            found = logit.coefficients if logit is not None and logit.converged else None
            out["_start"] = (piece, dict(zip(found["columns"], map(float, found["coef"]))) if found else None)
        if segment:
            row = {"segment": label, "segment_feature": segment[0], "segment_level": level, **row}
            return {**out, "regression_segments": pa.Table.from_pylist([row], schema=SEGMENTS),
                    "regression_coefficients": coefficients}
        estimates = pa.Table.from_pylist([row], schema=ESTIMATES)
        wanted = {float(k) for k in params.benchmark_multipliers}
        bench = [{"attribute": attribute, "control": c.name, "multiplier": b.multiplier,
                  "r2dxj_x": c.r2dxj_x, "r2yxj_dx": c.r2yxj_dx, "r2dz_x": b.r2dz_x, "r2yz_dx": b.r2yz_dx,
                  "adjusted_estimate": b.adjusted_estimate, "adjusted_ci_low": b.adjusted_ci_low,
                  "adjusted_ci_high": b.adjusted_ci_high, "adjusted_se": b.adjusted_se, "bias": b.bias,
                  "note": b.note}
                 for c in fit.sensitivity for b in sorted(c.bounds, key=lambda b: b.multiplier)
                 if b.multiplier in wanted]
        return {**out, "regression_estimates": estimates, "regression_coefficients": coefficients,
                "regression_benchmarks": pa.Table.from_pylist(bench, schema=BENCHMARKS)}

    def combine(self, state, parts) -> Tables:
        order = {p: i for i, p in enumerate(self.every_piece(state))}  # the rows in piece order, not round order
        out = concat_parts(sorted(parts, key=lambda part: order[part["_piece"]]), self.tables)
        params = state["params"]
        # the same correction across the run's units, for the LPM's and the logit's tests; the
        # segments' tests are a family of their own
        for table in ("regression_estimates", "regression_segments"):
            est = out[table]
            for p_col, adj_col, sig_col in (("p_value", "p_adjusted", "significant"),
                                            ("logit_p_value", "logit_p_adjusted", "logit_significant")):
                p = np.array([np.nan if v is None else v for v in est[p_col].to_pylist()], dtype=np.float64)
                adjusted = adjust_p_values(p, params.correction)
                p_adj = [None if np.isnan(a) else float(a) for a in adjusted]
                significant = [None if a is None else a < 1 - params.confidence for a in p_adj]
                est = est.set_column(est.schema.get_field_index(adj_col), adj_col, pa.array(p_adj, pa.float64()))
                est = est.set_column(est.schema.get_field_index(sig_col), sig_col, pa.array(significant, pa.bool_()))
            out[table] = survive(est, params.correction, params.confidence)
        return out


FIRST_ROUND = 2  # the pooled units fitted first, one for each of two workers


def first_round(groups: dict, y: np.ndarray, parents: dict) -> list[str]:
    """The ``FIRST_ROUND`` pooled units (no value's comparison) with the most applicants with a
    decision, the largest first: the fits every other piece's logit starts from."""
    known = ~np.isnan(y)
    sizes = {u: int((((g == 0) | (g == 1)) & known).sum()) for u, g in groups.items() if parents.get(u, u) == u}
    return sorted(sizes, key=lambda u: -sizes[u])[:FIRST_ROUND]


def unit_bounds(spec, units, outcome: str) -> dict:
    """Each tested unit's bound on the inputs the records lack for ``outcome`` (``denial`` or a
    pricing field; ``decision.bounds``, the most specific entry), or None."""
    decision = spec.decision
    if decision is None or not decision.bounds:
        return {}
    parents = {c["label"]: c["attribute"] for c in spec.comparisons()}
    return {u: decision.bound_for(outcome, u, parents.get(u)) for u in units}


def bounded(fit, bound, confidence: float) -> dict:
    """The linear model's difference under ``bound`` (``engines.regression.bounds``), its interval
    with the error and degrees of freedom of the row's own test (``fit.test_se``, ``fit.test_dof``:
    cluster-robust with t(G − 1) where the test is clustered, HC1 or classical with t(dof))."""
    return under_bound(fit.estimate, fit.se, fit.dof, fit.test_se, fit.test_dof, confidence, bound)


def record_block(data, name: str, log: bool = False) -> np.ndarray | Categorical:
    """A recorded feature as the models take it: a categorical or ordinal one as the codes of its
    levels, a numeric one as its values (with ``log``, their natural log; a value at or below 0 a
    null)."""
    values, levels = data.column_values(name), data.levels(name)
    if levels is not None:
        return Categorical(values, levels)
    if log:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(values > 0, np.log(values), np.nan)
    return values


def compact(block: np.ndarray | Categorical) -> np.ndarray | Categorical:
    """A categorical block with its codes in the smallest signed integer type that holds its
    levels (−1 null) instead of float64 (NaN null): a byte or two a record instead of eight in
    the state every worker holds (the regression's seven categorical blocks at 8.4M HMDA
    records, 0.47 GB as float64). The designs keep them so (``engines.regression.design``); a
    numeric block is returned as it is."""
    if not isinstance(block, Categorical):
        return block
    codes = np.asarray(block.codes)
    null = null_mask(codes, True)
    return Categorical(np.where(null, -1, codes).astype(code_type(len(block.levels))), block.levels)


def held_cells(groups: list[np.ndarray], min_size: int, y: np.ndarray, rows: np.ndarray,
               joint: tuple[np.ndarray, np.ndarray] | None = None) -> Categorical:
    """The other attributes' groups as one categorical of their joint cells (protected /
    reference / neither in each: Black and Hispanic is a cell of its own). Held jointly, not as
    one dummy block per attribute: a penalty on "Black or Hispanic" counts once for an applicant
    who is both, which additive blocks cannot express, and the misfit lands on whatever attribute
    is tested next to them (the tract's groups, which the penalised fill). Among the fitted
    ``rows``, cells of fewer than ``min_size`` records or with one outcome only (whose dummy
    would separate the logit) join the largest cell, the dummies' reference. ``joint``: the
    rows' cells when known (:func:`joint_cells` of the same groups and rows). The codes in the
    smallest integer type that holds them (a byte a record for HMDA's cells)."""
    cells, inverse = joint if joint is not None else joint_cells(groups, rows)
    counts = np.bincount(inverse, minlength=len(cells))
    outcome = np.bincount(inverse, weights=np.nan_to_num(y[rows]), minlength=len(cells))
    pooled = (counts < min_size) | (outcome == 0) | (outcome == counts)
    codes = np.full(len(groups[0]), -1, code_type(len(cells)))  # rows not fitted: never read
    codes[rows] = np.where(pooled[inverse], int(np.argmax(counts)), inverse)
    return Categorical(codes, [f"cell {c}" for c in cells])


def joint_cells(groups: list[np.ndarray], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(cells, inverse)``: the joint cells of ``groups`` present among ``rows`` (each a code in
    base 3: protected / reference / neither in each), and each row's rank among them."""
    code = np.zeros(len(rows), np.int64)  # over the fitted rows alone
    for g in groups:
        g = g[rows]
        code = code * 3 + np.where(g == 1, 1, np.where(g == 0, 0, 2))
    return dense_codes(code)


def _estimate_row(attribute: str, fit: LPMResult, small: bool, notes: list[str], params,
                  held: list[str]) -> dict:
    """The LPM's columns; ``controls`` names the recorded inputs (the ``held`` groups' cells are
    held in both models but are no control a confounder is measured against)."""
    bound = (fit.bound(fit.strongest_control, float(params.robust_multiplier))
             if fit.strongest_control is not None else None)
    return {
        "attribute": attribute, "n": fit.n, "n_protected": fit.n_treated, "n_reference": fit.n_control,
        "dropped_null": fit.dropped_null, "raw_difference": fit.raw_difference, "estimate": fit.estimate,
        "se": fit.se, "se_robust": fit.se_robust, "ci_low": fit.test_ci_low, "ci_high": fit.test_ci_high,
        "confidence": params.confidence, "t": fit.t, "dof": fit.dof,
        "p_value": None if small else fit.test_p_value, "p_adjusted": None, "significant": None,
        "partial_r2": fit.partial_r2, "r_squared": fit.r_squared, "rv_q1": fit.rv_q, "rv_q1_alpha": fit.rv_qa,
        "strongest_control": fit.strongest_control,
        "adjusted_at_strongest": None if bound is None else bound.adjusted_estimate,
        "adjusted_ci_low_at_strongest": None if bound is None else bound.adjusted_ci_low,
        "adjusted_ci_high_at_strongest": None if bound is None else bound.adjusted_ci_high,
        "robust": None if small else fit.robust, "controls": ", ".join(c for c in fit.controls if c not in held),
        "note": "; ".join(notes) or None, "correction": params.correction,
        "robust_multiplier": float(params.robust_multiplier),
        "fixed_effects": ", ".join(params.fixed_effects) or None, "cluster": params.cluster,
        "clusters": fit.clusters or None, "se_cluster": fit.se_cluster, "inference": fit.inference,
        "separated_rows": fit.separated_rows, "separated_levels": "; ".join(fit.separated) or None,
    }


def _untested_segment(attribute: str, rows: np.ndarray, groups: np.ndarray, params, y) -> dict:
    """A segment below ``min_segment_size``: its counts and a note, no model fitted."""
    g = groups[rows]
    n1, n0 = int((g == 1).sum()), int((g == 0).sum())
    raw = float(y[rows][g == 1].mean() - y[rows][g == 0].mean()) if n1 and n0 else None
    return {"attribute": attribute, "n": len(rows), "n_protected": n1, "n_reference": n0, "dropped_null": 0,
            "raw_difference": raw, "confidence": params.confidence, "correction": params.correction,
            "robust_multiplier": float(params.robust_multiplier),
            "note": f"{len(rows):,} applicants in the segment, fewer than {params.min_segment_size:,}: not tested",
            "fixed_effects": ", ".join(params.fixed_effects) or None, "cluster": params.cluster}


def _logit_row(logit: LogitResult, fit: LPMResult, small: bool) -> dict:
    """The logit's columns. ``logit_note``: what the logit's note adds to the LPM's (the notes
    both models share — rows dropped, a control dropped, a degenerate input — stay in ``note``)."""
    shared = set(fit.note.split("; ")) if fit.note else set()
    own = [part for part in (logit.note.split("; ") if logit.note else []) if part not in shared]
    return {
        "odds_ratio": logit.odds_ratio, "or_ci_low": logit.or_ci_low, "or_ci_high": logit.or_ci_high,
        "logit_coefficient": logit.coefficient, "logit_se": logit.se,
        "logit_p_value": None if small else logit.p_value, "logit_p_adjusted": None, "logit_significant": None,
        "ame": logit.ame, "ame_ci_low": logit.ame_ci_low, "ame_ci_high": logit.ame_ci_high,
        "e_value": logit.e_value, "e_value_ci": logit.e_value_ci, "logit_note": "; ".join(own) or None,
        "logit_se_classical": logit.se_classical, "logit_inference": logit.inference,
        "bootstrap_draws": (logit.bootstrap_draws or fit.bootstrap_draws) or None,
        "bootstrap_weights": logit.bootstrap_weights or fit.bootstrap_weights,
    }
