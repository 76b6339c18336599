"""Disparities when race was inferred (a BISG proxy): per proxied attribute and outcome, the
gap between the protected and the reference group (``engines.proxy.estimates``, ``engines.proxy.controlled``):

``hard``        the groups the engines needing one read: each record's most probable race where
                its probability reaches the spec's threshold (records with race recorded as
                recorded); biased by misassignment and by the records left out;
``weighted``    the CFPB's probability-weighted means; biased toward zero where race itself
                moves the outcome;
``corrected``   the regression of the outcome on the group probabilities (unbiased if the
                outcome depends on race, and not on surname and geography once race is known),
                with an HC1 interval that holds the proxy's uncertainty;
``corrected_controlled``  the same with the numeric features as controls (an adjusted gap);
``corrected_regression``  the examiner's controlled regression with the probabilities as the
                group regressor: the regression engine's controls, held groups, absorbed fixed
                effects and clustered errors (``engines.proxy.controlled``); over the originations
                with the pricing engine's controls for each pricing field;
``weighted_regression``   the same regression weighted by the group probabilities (the records
                stacked per group): the weighted means' controlled counterpart, pulled toward zero.

Outcomes: the unfavourable-decision rate (``unfavourable``) and each pricing field (over the
records where it is reported); with a geography section, each lender's corrected gap in the
unfavourable rate. A record whose race was recorded counts with probability 1 for its group.
Tables ``proxy_coverage`` (how many records were inferred, how many names and places were not
found) and ``proxy_gaps``.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.stats import norm

from aequum.engines.core.data import record_columns
from aequum.engines.core.intersections import tested_units
from aequum.engines.core.proxy_spec import PROB_COLUMNS, PROXY_COLUMNS
from aequum.engines.core.engine import Tables
from aequum.engines.proxy.census import RACES, VINTAGE
from aequum.engines.pricing.engine import member, pricing_controls
from aequum.engines.proxy.controlled import RegressionGap, corrected_regression, weighted_regression
from aequum.engines.proxy.estimates import GapEstimate, corrected, hard, weighted
from aequum.engines.regression.engine import held_cells, record_block, resolve_controls

COVERAGE = pa.schema([
    ("attribute", pa.string()), ("method", pa.string()), ("geography", pa.string()), ("threshold", pa.float64()),
    ("records", pa.int64()), ("recorded", pa.int64()), ("proxied", pa.int64()), ("inferred", pa.int64()),
    ("not_inferred", pa.int64()), ("surnames_not_found", pa.int64()), ("geographies_not_found", pa.int64()),
    ("protected_assigned", pa.int64()), ("reference_assigned", pa.int64()),
    ("protected_expected", pa.float64()), ("reference_expected", pa.float64()),
    ("mean_top_probability", pa.float64()), ("protected_races", pa.string()), ("reference_races", pa.string()),
    ("vintage", pa.string()),
])
GAPS = pa.schema([
    ("attribute", pa.string()), ("outcome", pa.string()), ("lender", pa.string()), ("estimator", pa.string()),
    ("records", pa.int64()), ("protected_mean", pa.float64()), ("reference_mean", pa.float64()),
    ("gap", pa.float64()), ("se", pa.float64()), ("ci_low", pa.float64()), ("ci_high", pa.float64()),
    ("confidence", pa.float64()), ("p_value", pa.float64()), ("n_protected", pa.float64()),
    ("n_reference", pa.float64()), ("controls", pa.string()), ("note", pa.string()),
    # the controlled regressions (corrected_regression, weighted_regression): the effects absorbed,
    # the cluster, its count and the inference of the interval (CR1, WCR-bootstrap, HC1)
    ("fixed_effects", pa.string()), ("cluster", pa.string()), ("clusters", pa.int64()), ("inference", pa.string()),
])


def group_probabilities(probs: np.ndarray, groups: np.ndarray, protected: list[int], reference: list[int]):
    """Each record's probability of the protected and of the reference group: the proxy's sums
    over the races of each side where it filled the record (``probs`` rows not NaN), else 1 or 0
    by the recorded group (``groups``: 1, 0, -1 neither)."""
    proxied = ~np.isnan(probs[:, 0])
    p = np.nan_to_num(probs)
    q1 = np.where(proxied, p[:, protected].sum(axis=1), (groups == 1).astype(np.float64))
    q0 = np.where(proxied, p[:, reference].sum(axis=1), (groups == 0).astype(np.float64))
    return q1, q0


def _bools(column) -> np.ndarray:
    """A boolean column as a numpy bool array, null read as False."""
    return np.asarray(pc.fill_null(column, False).to_numpy(zero_copy_only=False), bool)


def _row(attribute, outcome, lender, estimator, records, est: GapEstimate, confidence, controls=None) -> dict:
    p = None
    if est.gap is not None and est.se:
        p = float(2 * norm.sf(abs(est.gap) / est.se))
    return {"attribute": attribute, "outcome": outcome, "lender": lender, "estimator": estimator,
            "records": int(records), "protected_mean": est.protected, "reference_mean": est.reference,
            "gap": est.gap, "se": est.se, "ci_low": est.ci_low, "ci_high": est.ci_high, "confidence": confidence,
            "p_value": p, "n_protected": est.n_protected, "n_reference": est.n_reference,
            "controls": ", ".join(controls) if controls else None, "note": est.note,
            "fixed_effects": None, "cluster": None, "clusters": None, "inference": None}


def _regression_row(attribute, outcome, estimator, est: RegressionGap, confidence, fixed_names, cluster) -> dict:
    return {"attribute": attribute, "outcome": outcome, "lender": None, "estimator": estimator,
            "records": est.n, "protected_mean": None, "reference_mean": None, "gap": est.gap, "se": est.se,
            "ci_low": est.ci_low, "ci_high": est.ci_high, "confidence": confidence, "p_value": est.p_value,
            "n_protected": est.n_protected, "n_reference": est.n_reference,
            "controls": ", ".join(est.controls) or None, "note": est.note,
            "fixed_effects": ", ".join(fixed_names) or None, "cluster": cluster,
            "clusters": est.clusters or None, "inference": est.inference}


def _regression_setups(data, params) -> list[dict]:
    """The controlled regressions' outcomes (the unfavourable decision with the regression
    engine's controls, fixed effects and cluster; each pricing field over the originations with
    the pricing engine's): name, y, rows, control blocks and names, effects, cluster."""
    spec = data.spec
    if not params.regression or data.decision is None:
        return []
    reg = spec.engines.regression
    names = resolve_controls(spec, reg)
    out = [{"outcome": "unfavourable",
            "y": np.where((data.decision == 0) | (data.decision == 1), 1.0 - data.decision, np.nan),
            "rows": np.ones(len(data), bool),
            "blocks": [record_block(data, n, log=n in reg.log_controls) for n in names],
            "names": [f"log {n}" if n in reg.log_controls else n for n in names],
            "fixed_names": list(reg.fixed_effects), "cluster_name": reg.cluster, "bootstrap": reg.bootstrap(),
            "min_size": reg.min_group_size}]
    if spec.pricing is not None:
        pricing = spec.engines.pricing
        originated = member(data.column(spec.decision.column), pricing.originated)
        names = pricing_controls(spec, pricing)
        fixed_names, cluster_name = pricing.grouping(spec)
        for f in spec.pricing.fields:
            y = np.asarray(data.column(f).cast(pa.float64()).to_numpy(zero_copy_only=False), np.float64)
            out.append({"outcome": f, "y": y, "rows": originated & ~np.isnan(y),
                        "blocks": [record_block(data, n) for n in names], "names": names,
                        "fixed_names": fixed_names, "cluster_name": cluster_name, "bootstrap": pricing.bootstrap(),
                        "min_size": pricing.min_group_size})
    for s in out:
        s["fixed"] = [record_block(data, n) for n in s["fixed_names"]]
        s["cluster"] = record_block(data, s["cluster_name"]) if s["cluster_name"] else None
    return out


def _regression_gaps(data, attribute, q1, q0, known, setups, params) -> list[dict]:
    """``corrected_regression`` and ``weighted_regression`` rows of one attribute over the records
    whose group is known or has probabilities (``known``) and that may be in either group, the
    other attributes' groups held as the regression engine holds them."""
    spec, conf = data.spec, params.confidence
    reg = spec.engines.regression
    held = tested_units(spec, data.groups, [], 1, reg.other_groups)[1].get(attribute, [])
    out = []
    for s in setups:
        # as the regression engine fits the two groups only: records that cannot be in either are out
        rows = np.flatnonzero(s["rows"] & known & (q1 + q0 > 0) & ~np.isnan(s["y"]))
        cells = [held_cells([data.groups[a] for a in held], s["min_size"], s["y"], rows)] if held else []
        blocks, names = [*s["blocks"], *cells], [*s["names"], *([" × ".join(held) + " (groups)"] if held else [])]
        common = dict(held=len(cells), fixed=s["fixed"], fixed_names=s["fixed_names"], cluster=s["cluster"],
                      confidence=conf)
        for estimator, fit in (("corrected_regression", corrected_regression(
                s["y"], q1, q0, blocks, names, rows, bootstrap=s["bootstrap"], **common)),
                               ("weighted_regression", weighted_regression(s["y"], q1, q0, blocks, names, rows,
                                                                           **common))):
            out.append(_regression_row(attribute, s["outcome"], estimator, fit, conf, s["fixed_names"],
                                       s["cluster_name"]))
    return out


def _lender_gaps(attribute: str, y, q1, q0, rows, lender, names, params) -> list[dict]:
    """Each lender's corrected gap (lenders with too few records or expected group members
    left out): the records sorted by lender once, each lender's a slice."""
    keep = np.flatnonzero(rows & ~np.isnan(lender))
    order = keep[np.argsort(lender[keep], kind="stable")]
    codes = lender[order]
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    out = []
    for start, stop in zip(starts, np.r_[starts[1:], len(order)]):
        at = order[start:stop]
        if len(at) < params.min_records or min(q1[at].sum(), q0[at].sum()) < params.min_records:
            continue
        out.append(_row(attribute, "unfavourable", names[int(codes[start])], "corrected", len(at),
                        corrected(y[at], q1[at], q0[at], None, params.confidence), params.confidence))
    return out


class ProxyEngine:
    """Hard, weighted and corrected gaps of proxied attributes (see the module docstring)."""

    name = "proxy"
    tables = {"proxy_coverage": COVERAGE, "proxy_gaps": GAPS}

    def columns(self, spec, params) -> list[str]:
        lender = [spec.geography.lender] if spec.geography is not None and params.per_lender else []
        pricing = spec.pricing.fields if spec.pricing is not None else []
        regression = []
        if params.regression and spec.decision is not None:
            reg = spec.engines.regression
            regression = [*resolve_controls(spec, reg), *reg.fixed_effects, *([reg.cluster] if reg.cluster else [])]
            if spec.pricing is not None:
                fixed, cluster = spec.engines.pricing.grouping(spec)
                regression += [*pricing_controls(spec, spec.engines.pricing), *fixed, *([cluster] if cluster else [])]
        features = list(dict.fromkeys([*params.control_names(spec), *lender, *regression]))
        decision = [spec.decision.column] if spec.pricing is not None and spec.decision is not None else []
        return [*record_columns(spec, features, ids=False), *PROXY_COLUMNS, *dict.fromkeys([*pricing, *decision])]

    def prepare(self, data, params):
        return data, params

    def pieces(self, state) -> list[None]:
        return [None]

    def _outcomes(self, data) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """(name, values, which records) of every outcome."""
        out = []
        if data.decision is not None:
            out.append(("unfavourable", 1.0 - data.decision.astype(np.float64), np.ones(len(data), bool)))
        for f in data.spec.pricing.fields if data.spec.pricing is not None else []:
            v = np.asarray(data.column(f).cast(pa.float64()).to_numpy(zero_copy_only=False), np.float64)
            out.append((f, np.nan_to_num(v), ~np.isnan(v)))
        return out

    def run_piece(self, state, piece) -> Tables:
        data, params = state
        spec, conf = data.spec, params.confidence
        probs = np.column_stack([np.asarray(data.column(c).cast(pa.float64()).to_numpy(zero_copy_only=False),
                                            np.float64) for c in PROB_COLUMNS])
        proxied = _bools(pc.is_valid(data.column("_proxy_inferred")))
        inferred = _bools(pc.equal(data.column("_proxy_inferred"), 1))
        surname_missing = proxied & ~_bools(data.column("_proxy_surname"))
        geography_missing = proxied & ~_bools(data.column("_proxy_geography"))
        controls = params.control_names(spec)
        x = data.feature_values(controls) if controls else None
        lender = None
        if spec.geography is not None and params.per_lender:
            lender = data.column_values(spec.geography.lender)
            names = data.levels(spec.geography.lender)
        setups = _regression_setups(data, params)
        coverage, gaps = [], []
        for p in spec.protected:
            if p.proxy is None:
                continue
            groups = data.groups[p.name]
            prot = [RACES.index(r) for r in p.proxy_races("protected")]
            ref = [RACES.index(r) for r in p.proxy_races("reference")]
            if not prot or not ref:  # a per-value comparison of a value no proxied race writes
                continue
            q1, q0 = group_probabilities(probs, groups, prot, ref)
            has = ~np.isnan(probs[:, 0])
            coverage.append({
                "attribute": p.name, "method": p.proxy.method, "geography": p.proxy.geography,
                "threshold": p.proxy.threshold, "records": len(data), "recorded": int((~proxied).sum()),
                "proxied": int(proxied.sum()), "inferred": int(inferred.sum()),
                "not_inferred": int((proxied & ~inferred).sum()),
                "surnames_not_found": int(surname_missing.sum()), "geographies_not_found": int(geography_missing.sum()),
                "protected_assigned": int((proxied & (groups == 1)).sum()),
                "reference_assigned": int((proxied & (groups == 0)).sum()),
                "protected_expected": float(q1[proxied].sum()), "reference_expected": float(q0[proxied].sum()),
                "mean_top_probability": float(np.nanmax(probs[has], axis=1).mean()) if has.any() else None,
                "protected_races": ", ".join(p.proxy_races("protected")),
                "reference_races": ", ".join(p.proxy_races("reference")), "vintage": VINTAGE})
            for outcome, y, rows in self._outcomes(data):
                n = int(rows.sum())
                if n < params.min_records or min(q1[rows].sum(), q0[rows].sum()) < params.min_records:
                    note = f"fewer than {params.min_records} records or expected members of a group: not estimated"
                    gaps.append(_row(p.name, outcome, None, "corrected", n, GapEstimate(
                        None, None, None, None, None, None, float(q1[rows].sum()), float(q0[rows].sum()), note), conf))
                    continue
                yy, a1, a0 = y[rows], q1[rows], q0[rows]
                gaps.append(_row(p.name, outcome, None, "hard", n, hard(yy, groups[rows], conf), conf))
                gaps.append(_row(p.name, outcome, None, "weighted", n, weighted(yy, a1, a0, conf), conf))
                gaps.append(_row(p.name, outcome, None, "corrected", n, corrected(yy, a1, a0, None, conf), conf))
                if x is not None:
                    xr = x[rows]
                    keep = ~np.isnan(xr).any(axis=1)
                    est = corrected(yy[keep], a1[keep], a0[keep], xr[keep], conf)
                    gaps.append(_row(p.name, outcome, None, "corrected_controlled", int(keep.sum()), est, conf, controls))
                if lender is not None and outcome == "unfavourable":
                    gaps += _lender_gaps(p.name, y, q1, q0, rows, lender, names, params)
            # records proxied without any probability (neither input found) have no known group
            gaps += _regression_gaps(data, p.name, q1, q0, ~(proxied & ~has), setups, params)
        return {"proxy_coverage": pa.Table.from_pylist(coverage, schema=COVERAGE),
                "proxy_gaps": pa.Table.from_pylist(gaps, schema=GAPS)}

    def combine(self, state, parts) -> Tables:
        return parts[0]
