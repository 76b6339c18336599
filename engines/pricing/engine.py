"""Pricing disparities: among originated loans, do protected borrowers pay more than comparable
reference borrowers? (docs/fair-lending.md, "Pricing".)

For each unit the regression engine tests (every protected attribute, and the intersections of
``engines.core.intersections``: :func:`~aequum.engines.core.intersections.tested_units`) and each
pricing field of the spec (``pricing.fields``: the LAR's rate spread, interest rate, total loan
costs, discount points, lender credits, origination charges), among the originations (decision
column in ``originated``: HMDA action_taken 1) that report the field — "NA", "Exempt" and empty
cells are staged as nulls (``engines.core.spec.Pricing``) and left out, counted:

* N, mean and median by group, and the raw difference of the means (protected − reference);
* the adjusted difference: ``price ~ 1 + protected + controls`` by OLS on the same controls as
  the regression engine (``engines.regression.engine.resolve_controls``; numeric controls as
  values, categorical ones as dummies) with the other columns' groups held as one categorical of
  their joint cells (``held_cells``), fitted by the blocked OLS of
  ``engines.regression.sensitivity.controlled_lpm`` (the outcome may be any number: it is the
  linear model of the outcome, not only of a 0/1 decision): the coefficient with its classical
  and HC1 standard errors, interval and two-sided t-test, and its sensitivity to an omitted
  factor (Cinelli & Hazlett 2020: RV_1, RV_{1,α}, ``robust`` at ``robust_multiplier``). The
  interval and test (``inference``): classical without a cluster; HC1 when the cluster has one
  level; CR1 with t(G − 1) from ``min_clusters`` (40) clusters; between, the wild cluster
  restricted bootstrap's p (``engines.regression.wild``) beside the CR1 t(G − 1) interval;
* for the rate spread (``pricing.rate_spread``), the higher-priced share (HPML, Reg Z 12 CFR
  1026.35(a)(1): a rate spread of at least 1.5 points for a first lien, 3.5 for a subordinate
  lien; ``pricing.lien`` says which — loans of another or no lien status are left out, counted)
  by group with Wilson intervals, the ratio of the shares with its log-method interval, and the
  two-proportion z-test (``engines.outcome.engine.two_proportion_p``).

``adverse``: the difference is in the borrower's disfavour (higher, or lower for a field in
``borrower_favourable``: lender credits). P-values of every difference and every share ratio of
the run are adjusted together (Holm by default). Explicit empty results, with a note, where
nothing can be compared: a field no origination reports (all "Exempt" or "NA"), a group with no
originations, a field with one value only, fewer than ``min_group_size`` in a group (reported,
not tested). Tables ``pricing_estimates`` (unit × field) and ``pricing_hpml`` (unit); one piece
per unit (its fields reported on the same rows share one design and one pass of sums:
:func:`shared_fields`), the adjustment in ``combine``.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aequum.engines.core.data import record_columns
from aequum.engines.core.engine import Tables, concat_parts
from aequum.engines.core.intersections import tested_units
from aequum.engines.core.spec import value_key
from aequum.engines.outcome.engine import two_proportion_p
from aequum.engines.outcome.stats import adjust_p_values, ratio_log_interval, wilson_interval
from aequum.engines.regression.bounds import survive
from aequum.engines.regression.design import Categorical, design, with_outcome
from aequum.engines.regression.engine import (bounded, compact, held_cells, joint_cells, record_block,
                                              resolve_controls, unit_bounds)
from aequum.engines.regression.linear import linear_fits
from aequum.engines.regression.sensitivity import controlled_lpm
from aequum.engines.regression.wild import inference_kind

ESTIMATES = pa.schema([
    ("attribute", pa.string()), ("field", pa.string()), ("n", pa.int64()), ("n_protected", pa.int64()),
    ("n_reference", pa.int64()), ("unreported", pa.int64()), ("dropped_null", pa.int64()),
    ("mean_protected", pa.float64()), ("mean_reference", pa.float64()), ("median_protected", pa.float64()),
    ("median_reference", pa.float64()), ("raw_difference", pa.float64()), ("estimate", pa.float64()),
    ("se", pa.float64()), ("se_robust", pa.float64()), ("ci_low", pa.float64()), ("ci_high", pa.float64()),
    ("confidence", pa.float64()), ("t", pa.float64()), ("dof", pa.int64()), ("p_value", pa.float64()),
    ("p_adjusted", pa.float64()), ("significant", pa.bool_()), ("adverse", pa.bool_()),
    ("r_squared", pa.float64()), ("rv_q1", pa.float64()), ("rv_q1_alpha", pa.float64()), ("robust", pa.bool_()),
    ("strongest_control", pa.string()), ("robust_multiplier", pa.float64()), ("controls", pa.string()),
    ("correction", pa.string()), ("note", pa.string()),
    # fixed effects absorbed and the cluster-robust error the test uses when clustered
    ("fixed_effects", pa.string()), ("cluster", pa.string()), ("clusters", pa.int64()), ("se_cluster", pa.float64()),
    # the difference under the spec's bound on the inputs the records lack (engines.regression.bounds)
    ("bound_source", pa.string()), ("bound_r2_group", pa.float64()), ("bound_r2_outcome", pa.float64()),
    ("bounded_estimate", pa.float64()), ("bounded_ci_low", pa.float64()), ("bounded_ci_high", pa.float64()),
    ("bounded_p_value", pa.float64()), ("bounded_p_adjusted", pa.float64()), ("survives_bound", pa.bool_()),
    # the inference the interval and p used (engines.regression.wild): classical, HC1, CR1, WCR-bootstrap
    ("inference", pa.string()), ("bootstrap_draws", pa.int64()), ("bootstrap_weights", pa.string()),
])

# Each recorded control's partial R² with group membership (r2dxj_x, given the other controls)
# and with the price (r2yxj_dx, given group and the other controls), per unit and field: on an
# internal audit that records the input the public data lack (the credit score), the figures a
# bound on it needs (audit.input_strength, `aequum bounds`).
STRENGTH = pa.schema([("attribute", pa.string()), ("field", pa.string()), ("control", pa.string()),
                      ("r2dxj_x", pa.float64()), ("r2yxj_dx", pa.float64())])

HPML = pa.schema([
    ("attribute", pa.string()), ("field", pa.string()), ("n_protected", pa.int64()), ("n_reference", pa.int64()),
    ("hpml_protected", pa.int64()), ("hpml_reference", pa.int64()), ("share_protected", pa.float64()),
    ("share_protected_ci_low", pa.float64()), ("share_protected_ci_high", pa.float64()),
    ("share_reference", pa.float64()), ("share_reference_ci_low", pa.float64()),
    ("share_reference_ci_high", pa.float64()), ("difference", pa.float64()), ("ratio", pa.float64()),
    ("ratio_ci_low", pa.float64()), ("ratio_ci_high", pa.float64()), ("confidence", pa.float64()),
    ("p_value", pa.float64()), ("p_adjusted", pa.float64()), ("significant", pa.bool_()),
    ("other_lien", pa.int64()), ("threshold_first", pa.float64()), ("threshold_subordinate", pa.float64()),
    ("correction", pa.string()), ("note", pa.string()),
])


def pricing_fields(spec, params) -> list[str]:
    return list(params.fields) if params.fields is not None else list(spec.pricing.fields)


def pricing_controls(spec, params) -> list[str]:
    """``params.controls``, else the regression engine's (``resolve_controls``)."""
    return list(params.controls) if params.controls is not None else resolve_controls(spec, spec.engines.regression)


def member(values: pa.ChunkedArray, wanted: list) -> np.ndarray:
    """Whether each recorded value (text) is one of ``wanted`` as the spec reads values
    (:func:`~aequum.engines.core.spec.value_key`: "1", "1.0" and 1 are one value); null: no.
    Each distinct value is read once (Arrow's unique and is_in over the records)."""
    text = values.cast(pa.string())
    keys = {value_key(v) for v in wanted}
    hits = [v for v in pc.unique(text).to_pylist() if v is not None and value_key(v) in keys]
    return np.asarray(pc.is_in(text, value_set=pa.array(hits, pa.string())).fill_null(False)
                      .to_numpy(zero_copy_only=False), bool)


def let_go(data):
    """``done(columns, later)``: drop ``columns`` but those in ``later`` (a step still to read
    them) from ``data``'s staged table — an engine's own view of the records (``replace(data)``),
    whose columns' memory goes with them once the arrays made of them are all that is read."""
    def done(columns, later=()):
        gone = [c for c in dict.fromkeys(columns) if c in data.table.column_names and c not in set(later)]
        if gone:
            data.table = data.table.drop_columns(gone)
    return done


def hpml_flags(spread: np.ndarray, first: np.ndarray, subordinate: np.ndarray, params) -> np.ndarray:
    """1 higher-priced, 0 not, NaN unknown (no rate spread, or a lien neither first nor
    subordinate): rate spread >= ``hpml_first_lien`` for first liens, >= ``hpml_subordinate_lien``
    for subordinate liens (12 CFR 1026.35(a)(1))."""
    threshold = np.where(first, params.hpml_first_lien, np.where(subordinate, params.hpml_subordinate_lien, np.nan))
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(spread) | np.isnan(threshold), np.nan, (spread >= threshold).astype(np.float64))


class PricingEngine:
    """Pricing disparities among originated loans (see the module docstring)."""

    name = "pricing"
    tables = {"pricing_estimates": ESTIMATES, "pricing_hpml": HPML, "pricing_input_strength": STRENGTH}

    def columns(self, spec, params) -> list[str]:
        """Groups, the controls, the pricing fields, the recorded decision and the lien."""
        extra = [*pricing_fields(spec, params), spec.decision.column, *([spec.pricing.lien] if spec.pricing.lien else [])]
        fixed, cluster = params.grouping(spec)
        names = pricing_controls(spec, params)
        grouping = [g for g in dict.fromkeys([*fixed, *([cluster] if cluster else [])]) if g not in names]
        return [*record_columns(spec, [*names, *grouping], ids=False), *extra]

    def prepare(self, data, params):
        """The originations' columns: every piece compares originated loans only, so the state
        every worker holds is theirs alone (the rows in record order, as they were among all)."""
        spec = data.spec
        if spec.pricing is None or spec.decision is None:
            raise ValueError("pricing needs a `pricing` section and a decision column")
        # the engine's own view of the records, each staged column let go once no later step
        # reads it (the caller's view keeps them): at 10M HMDA records the price fields and
        # controls read (0.8 GB) were held to the end beside the state made of them
        data = replace(data)
        p = spec.pricing
        names = pricing_controls(spec, params)
        fixed_names, cluster_name = params.grouping(spec)
        features = [*names, *fixed_names, *([cluster_name] if cluster_name else [])]
        lien = [p.lien] if p.lien else []
        done = let_go(data)

        originated = member(data.column(spec.decision.column), params.originated)
        keep = np.flatnonzero(originated)
        del originated
        done([spec.decision.column], [*pricing_fields(spec, params), *features, *lien])

        def kept(values):  # a record array, or a categorical block's codes, of the originations
            if isinstance(values, Categorical):
                return Categorical(values.codes[keep], values.levels)
            return values[keep]

        fields = {}
        for f in pricing_fields(spec, params):
            fields[f] = np.asarray(data.column(f).cast(pa.float64()).to_numpy(zero_copy_only=False), np.float64)[keep]
            done([f], [*features, *lien])
        made: dict = {}

        def block(name):  # one block a feature, whether a control, a fixed effect or the cluster
            if name not in made:
                made[name] = kept(compact(record_block(data, name)))
            return made[name]

        controls = [block(name) for name in names]
        fixed = [block(n) for n in fixed_names]
        cluster = block(cluster_name) if cluster_name else None
        done(features, lien)
        hpml = None
        if p.rate_spread is not None and p.rate_spread in fields:
            if p.lien is None:  # no lien recorded: every loan read as a first lien
                first, subordinate = np.ones(len(keep), bool), np.zeros(len(keep), bool)
            else:
                first = member(data.column(p.lien), p.first_lien)[keep]
                subordinate = member(data.column(p.lien), p.subordinate_lien)[keep]
            # 1, 0 and -1 (unknown) as one byte a record in the state every worker holds (not eight)
            flags = hpml_flags(fields[p.rate_spread], first, subordinate, params)
            hpml = np.where(np.isnan(flags), -1, flags).astype(np.int8)
            del flags, first, subordinate
        done(lien)
        min_cell = max(params.min_group_size, spec.engines.regression.min_cell(spec))
        groups, others = tested_units(spec, data.groups, params.intersections, min_cell, params.other_groups)
        groups = {u: g[keep] for u, g in groups.items()}
        return {"originated": np.ones(len(keep), bool), "fields": fields, "controls": controls, "names": names,
                "bounds": {f: unit_bounds(spec, groups, f) for f in fields},
                "groups": groups, "others": others, "hpml": hpml, "spread": p.rate_spread, "params": params,
                "grouping": {"fixed": fixed, "fixed_names": fixed_names, "cluster": cluster},
                "cluster_name": cluster_name}

    def pieces(self, state) -> list[str]:
        """One piece per unit: its fields' fits share their design where they can
        (:func:`shared_fields`), and its higher-priced shares go with them."""
        return list(state["groups"])

    def run_piece(self, state, unit: str) -> Tables:
        params, groups = state["params"], state["groups"][unit]
        rows = np.flatnonzero(state["originated"] & ((groups == 0) | (groups == 1)))
        if len(groups) < 2 ** 31:  # the unit's rows and each field's reported ones at 4 bytes a row, not 8
            rows = rows.astype(np.int32)
        held = state["others"].get(unit, [])
        fields = state["fields"]
        joint: list = []  # (reported rows, their held groups' joint cells), shared by fields reported on the same rows
        inputs = {f: self._inputs(state, unit, y, rows, held, joint) for f, y in fields.items()}
        del joint
        shared = shared_fields(state, inputs)
        # the fields fitted alone first, then each shared design's fields, each design let go as
        # its field is done: a field's own design and sums (several arrays of the unit's rows)
        # are never held beside a shared design's (at 10M records 0.3-0.5 GB a design)
        found: dict = {}
        for f in [f for f in fields if not any(f in grp for grp in shared)]:
            found[f] = self._field(state, unit, f, fields[f], rows, inputs[f])
        for grp in shared:
            prepared = group_designs(state, groups, inputs, fields, grp)
            for f in grp:
                found[f] = self._field(state, unit, f, fields[f], rows, inputs[f], prepared.pop(f, None))
            del prepared
        estimates, strength = [], []
        for f in fields:  # the rows in the fields' order, whatever order they were fitted in
            estimates.append(found[f][0])
            strength += found[f][1]
        hpml = [hpml_row(unit, state["hpml"], groups, rows, params, state["spread"])] \
            if state["hpml"] is not None and fields else []
        return {"pricing_estimates": pa.Table.from_pylist(estimates, schema=ESTIMATES),
                "pricing_hpml": pa.Table.from_pylist(hpml, schema=HPML),
                "pricing_input_strength": pa.Table.from_pylist(strength, schema=STRENGTH)}

    def _inputs(self, state, unit: str, y: np.ndarray, rows: np.ndarray, held: list[str], joint: list) -> dict:
        """A field's reported rows among ``rows``, its controls (the held groups' cells among
        them, which depend on the field's values) and their names. ``joint``: the held groups'
        joint cells of the rows other fields reported (found again, not computed, for the same rows)."""
        params = state["params"]
        reported = rows[~np.isnan(y[rows])]
        # one array for the rows several fields report (most fields report on the same rows)
        reported = next((r for r, _, _ in joint if np.array_equal(r, reported)), reported)
        cells = []
        if held and len(reported):
            groups = [state["groups"][a] for a in held]
            known = next(((j, c) for r, j, c in joint if r is reported), None)
            if known is None:
                known = (joint_cells(groups, reported), [])
                joint.append((reported, *known))
            # codes over every origination, in the smallest integer type (int64 from held_cells:
            # 55 MB a field at 10M records), and one array for the fields whose cells are equal
            found = compact(held_cells(groups, params.min_group_size, y, reported, known[0]))
            same = next((c for c in known[1] if np.array_equal(c.codes, found.codes)), None)
            if same is None:
                known[1].append(found)
            cells = [found if same is None else same]
        elif len(reported) and not any(r is reported for r, _, _ in joint):
            joint.append((reported, None, []))
        return {"reported": reported, "blocks": [*state["controls"], *cells],
                "names": [*state["names"], *([" × ".join(held) + " (groups)"] if held else [])],
                "held": len(cells)}

    def _field(self, state, unit: str, field: str, y: np.ndarray, rows: np.ndarray, inputs: dict,
               prepared=None) -> tuple[dict, list[dict]]:
        """The unit's estimate row for ``field`` and its controls' strengths (STRENGTH rows);
        ``prepared``: its design when shared with other fields (:func:`group_designs`)."""
        params, groups = state["params"], state["groups"][unit]
        reported = inputs["reported"]
        row = {"attribute": unit, "field": field, "n": len(reported), **group_means(y, groups, reported),
               "unreported": len(rows) - len(reported), "dropped_null": 0,
               "confidence": params.confidence, "correction": params.correction,
               "robust_multiplier": float(params.robust_multiplier)}
        n_prot, n_ref = row["n_protected"], row["n_reference"]
        if n_prot and n_ref:
            row["raw_difference"] = row["mean_protected"] - row["mean_reference"]
        notes = []
        if not len(rows):
            return {**row, "note": "no originated loans in either group"}, []
        if not len(reported):
            return {**row, "note": f"no originated loan in these groups reports {field} (NA, Exempt or empty in "
                                  f"all {len(rows):,}): nothing to compare"}, []
        if not n_prot or not n_ref:
            which = "protected" if not n_prot else "reference"
            return {**row, "note": f"no originated loan of the {which} group reports {field}: nothing to compare"}, []
        if row["unreported"]:
            notes.append(f"{row['unreported']:,} originated loans do not report {field} (NA, Exempt or empty): "
                         "left out")
        names = inputs["names"]
        if prepared is None:  # its own design, fitted here: its outcome held once (:func:`fitted`)
            prepared = own_design(state, groups, y, inputs)
        fit = controlled_lpm(y, groups, inputs["blocks"], names, params.confidence,
                             multipliers=(float(params.robust_multiplier),),
                             robust_multiplier=params.robust_multiplier, rows=reported, held=inputs["held"],
                             bootstrap=params.bootstrap(), prepared=prepared, **state["grouping"])
        small = min(n_prot, n_ref) < params.min_group_size
        if fit.note:
            notes.append(fit.note)
        if small:
            notes.append(f"fewer than {params.min_group_size} originations reporting {field} in a group "
                         f"({n_prot:,} protected, {n_ref:,} reference): reported, not tested")
        lower_is_adverse = field in params.borrower_favourable
        adverse = None if fit.estimate is None else (fit.estimate < 0 if lower_is_adverse else fit.estimate > 0)
        strength = [{"attribute": unit, "field": field, "control": c.name, "r2dxj_x": c.r2dxj_x,
                     "r2yxj_dx": c.r2yxj_dx} for c in fit.sensitivity]
        return {**row, **bounded(fit, state["bounds"][field].get(unit), params.confidence),
                "dropped_null": fit.dropped_null, "estimate": fit.estimate, "se": fit.se,
                "se_robust": fit.se_robust, "ci_low": fit.test_ci_low, "ci_high": fit.test_ci_high, "t": fit.t,
                "dof": fit.dof, "p_value": None if small else fit.test_p_value, "adverse": adverse,
                "inference": fit.inference, "bootstrap_draws": fit.bootstrap_draws or None,
                "bootstrap_weights": fit.bootstrap_weights,
                "fixed_effects": ", ".join(state["grouping"]["fixed_names"]) or None,
                "cluster": state["cluster_name"],
                "clusters": fit.clusters or None, "se_cluster": fit.se_cluster,
                "r_squared": fit.r_squared, "rv_q1": fit.rv_q, "rv_q1_alpha": fit.rv_qa,
                "robust": None if small else fit.robust, "strongest_control": fit.strongest_control,
                "controls": ", ".join(c for c in fit.controls if c not in names[len(state["names"]):]),
                "note": "; ".join(notes) or None}, strength

    def combine(self, state, parts) -> Tables:
        """One family of tests across the run: every difference and every share ratio."""
        out = concat_parts(parts, self.tables)
        params = state["params"]
        est, hpml = out["pricing_estimates"], out["pricing_hpml"]
        p = np.array([np.nan if v is None else v for v in [*est["p_value"].to_pylist(), *hpml["p_value"].to_pylist()]],
                     dtype=np.float64)
        adjusted = adjust_p_values(p, params.correction)
        p_adj = [None if np.isnan(a) else float(a) for a in adjusted]
        significant = [None if a is None else a < 1 - params.confidence for a in p_adj]
        for name, table, part in (("pricing_estimates", est, slice(0, est.num_rows)),
                                  ("pricing_hpml", hpml, slice(est.num_rows, None))):
            for column, values in (("p_adjusted", pa.array(p_adj[part], pa.float64())),
                                   ("significant", pa.array(significant[part], pa.bool_()))):
                table = table.set_column(table.schema.get_field_index(column), column, values)
            out[name] = table
        # the bounded differences: one family of their own, adjusted as the differences are
        out["pricing_estimates"] = survive(out["pricing_estimates"], params.correction, params.confidence)
        return out


def shared_fields(state, inputs: dict) -> list[list[str]]:
    """The fields whose fits can share one design (:func:`group_designs`): fields reported on
    the same rows with the same held cells, in groups of two or more (a field alone, or one
    :func:`group_designs` leaves out, designs its own)."""
    shared: list[list[str]] = []
    for f, inp in inputs.items():
        if len(inp["reported"]) < 2:
            continue
        for group in shared:
            other = inputs[group[0]]
            if np.array_equal(other["reported"], inp["reported"]) and all(
                    np.array_equal(np.asarray(a.codes)[inp["reported"]], np.asarray(b.codes)[inp["reported"]])
                    for a, b in zip(other["blocks"][len(state["controls"]):], inp["blocks"][len(state["controls"]):])):
                group.append(f)
                break
        else:
            shared.append([f])
    return [grp for grp in shared if len(grp) > 1]


def group_designs(state, groups: np.ndarray, inputs: dict, fields: dict, group: list[str]) -> dict:
    """The designs of one group of :func:`shared_fields` (``engines.regression.design``,
    ``with_outcome``), none of them 0/1, one value or degenerate: one design and one pass of
    summed cross products for them all (``engines.regression.linear.linear_fits``) instead of
    one each — at 1M HMDA rows the rate spread, interest rate, total loan costs and origination
    charges. Each field's result is that of its own fit (the arithmetic of its cross products
    alone in another order). Fields left out design their own (missing from the returned
    ``{field: design}``)."""
    g = state["grouping"]
    first = inputs[group[0]]
    base = design(fields[group[0]], groups, first["blocks"], first["names"], first["reported"], None,
                  g["fixed"], g["fixed_names"], g["cluster"], room=len(group) - 1)
    found = {f: base if f == group[0] else with_outcome(base, fields[f]) for f in group}
    found = {f: d for f, d in found.items() if d is not None}
    if len(found) > 1 and base.failure is None and not base.y_binary:
        fitted(list(found.values()), state["params"], g["cluster"] is not None)
        return found
    return {}


def own_design(state, groups: np.ndarray, y: np.ndarray, inputs: dict):
    """The design of one field fitted alone, as ``controlled_lpm`` would make it (the same
    arguments), with its least-squares sums made here (:func:`fitted`) where the model will
    read them (a design it stops at before its sums — degenerate, or fewer than k + 2 rows — is
    returned as it is)."""
    g = state["grouping"]
    des = design(y, groups, inputs["blocks"], inputs["names"], inputs["reported"], None, g["fixed"],
                 g["fixed_names"], g["cluster"])
    if des.failure is None and des.n - des.parameters >= 2:
        fitted([des], state["params"], g["cluster"] is not None)
    return des


def fitted(designs: list, params, clustered: bool) -> None:
    """``engines.regression.linear.linear_fits`` of ``designs`` (one design, or several
    outcomes on one: :func:`group_designs`), kept on each design, then what ``controlled_lpm``
    does not read once these sums are made let go: the other outcomes' gathered values (their
    centred rows are in the cells' array) and, unless the wild bootstrap's pass reads them
    again, the gathered group indicator and numeric controls' blocks."""
    linear_fits(designs)
    for d in designs[1:]:
        d.y = None
    if inference_kind(clustered, designs[0].clusters, params.bootstrap(), "WCR-bootstrap") != "WCR-bootstrap":
        for d in designs:
            d.d = None
        for b in designs[0].blocks:  # (every design of the group holds these very blocks)
            if b.levels is None:
                b.values = None


def group_means(y: np.ndarray, groups: np.ndarray, reported: np.ndarray) -> dict:
    """The N, mean and median of ``y`` over the ``reported`` rows of each group (1 protected, 0
    reference): the group's values gathered here and let go on return, before the fit."""
    g = groups[reported]
    out = {}
    for key, code in (("protected", 1), ("reference", 0)):
        values = y[reported[g == code]]
        out[f"n_{key}"] = len(values)
        out[f"mean_{key}"] = float(values.mean()) if len(values) else None
        out[f"median_{key}"] = float(np.median(values)) if len(values) else None
    return out


def hpml_row(unit: str, hpml: np.ndarray, groups: np.ndarray, rows: np.ndarray, params, field: str) -> dict:
    """The higher-priced shares of one unit's originations (``hpml``: :func:`hpml_flags` with
    -1 for unknown), their ratio and the two-proportion z-test."""
    known = rows[hpml[rows] >= 0]
    g = groups[known]
    n1, n0 = int((g == 1).sum()), int((g == 0).sum())
    k1, k0 = int(hpml[known[g == 1]].sum()), int(hpml[known[g == 0]].sum())
    row = {"attribute": unit, "field": field, "n_protected": n1, "n_reference": n0, "hpml_protected": k1,
           "hpml_reference": k0, "confidence": params.confidence, "correction": params.correction,
           "other_lien": len(rows) - len(known), "threshold_first": params.hpml_first_lien,
           "threshold_subordinate": params.hpml_subordinate_lien}
    notes = []
    if row["other_lien"]:
        notes.append(f"{row['other_lien']:,} originated loans without a rate spread or a first or subordinate "
                     "lien: left out")
    if not n1 or not n0:
        which = "either group" if not n1 and not n0 else "the protected group" if not n1 else "the reference group"
        return {**row, "note": "; ".join([*notes, f"no originated loan with a rate spread in {which}: nothing to "
                                                  "compare"])}
    s1, s0 = k1 / n1, k0 / n0
    lo1, hi1 = wilson_interval(k1, n1, params.confidence)
    lo0, hi0 = wilson_interval(k0, n0, params.confidence)
    ratio = s1 / s0 if k0 else None
    r_lo, r_hi = ratio_log_interval(k1, n1, k0, n0, params.confidence)
    if not k0:
        notes.append("no higher-priced loan in the reference group: no ratio")
    small = min(n1, n0) < params.min_group_size
    if small:
        notes.append(f"fewer than {params.min_group_size} originations with a rate spread in a group "
                     f"({n1:,} protected, {n0:,} reference): reported, not tested")
    return {**row, "share_protected": s1, "share_protected_ci_low": lo1, "share_protected_ci_high": hi1,
            "share_reference": s0, "share_reference_ci_low": lo0, "share_reference_ci_high": hi0,
            "difference": s1 - s0, "ratio": ratio, "ratio_ci_low": r_lo, "ratio_ci_high": r_hi,
            "p_value": None if small else two_proportion_p(k1, n1, k0, n0), "note": "; ".join(notes) or None}
