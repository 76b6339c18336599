"""Lender by lender, market by market: controlled denial and pricing disparities of every lender
against its peers, and of every market (engine ``lenders``).

For each comparison (every protected attribute and per-value comparison — Black against White —,
and the intersections asked for) and each outcome (``denial`` among applications with a decision;
each price field among originations reporting it, as the pricing engine):

1. One pooled fit of the outcome on the recorded inputs with market, lender and joint-group fixed
   effects (:mod:`engines.lenders.fit`); each record's *adjusted outcome* r = y − xᵀβ̂.
2. Per lender: its group gap in r within each market × product stratum, minus the gap the
   stratum's other lenders show within their own books (leave-one-out), averaged over its strata
   with the within-stratum OLS weights (:mod:`engines.lenders.cells`: the exact estimand and its
   robust standard error). Per market: its gap within its lenders.
3. Per family (comparison × outcome; lenders and markets apart): t-tests, Benjamini–Hochberg,
   empirical-Bayes shrinkage, flags and notes (:mod:`engines.lenders.inference`).

What it cannot see: an input of the decisions the records lack (the credit score, on the public
LAR) whose group gap differs between a lender's applicants and its peers' — a lender that draws
its protected applicants from lower-scored segments than its peers do shows an excess it did not
cause. A flagged lender is an unexplained disparity for review (file review), not evidence, on
such records. ``focus`` (LEIs): only those lenders' rows, tested and corrected among themselves,
against benchmarks from every lender of the records (:func:`lender_family`). Tables
``lender_disparities`` (lender × comparison × outcome) and ``market_disparities`` (market ×
comparison × outcome); one piece per outcome.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa

from aequum.engines.core.data import record_columns
from aequum.engines.core.engine import Tables, concat_parts
from aequum.engines.core.intersections import column_attributes, tested_units
from aequum.engines.lenders.cells import Gaps, cell_gaps, layout, lender_gaps, market_gaps, sums
from aequum.engines.lenders.fit import adjust
from aequum.engines.lenders.inference import family
from aequum.engines.pricing.engine import let_go, member, pricing_controls
from aequum.engines.regression.design import Categorical
from aequum.engines.regression.engine import compact, record_block, resolve_controls

DENIAL = "denial"

_COMMON = [
    ("attribute", pa.string()), ("field", pa.string()), ("applications", pa.int64()), ("n", pa.int64()),
    ("n_protected", pa.int64()), ("n_reference", pa.int64()), ("loans", pa.int64()), ("denials", pa.int64()),
]
_STATS = [
    ("peer_benchmark", pa.float64()), ("estimate", pa.float64()), ("se", pa.float64()),
    ("ci_low", pa.float64()), ("ci_high", pa.float64()), ("confidence", pa.float64()), ("dof", pa.int64()),
    ("p_value", pa.float64()), ("p_adjusted", pa.float64()), ("significant", pa.bool_()), ("adverse", pa.bool_()),
    ("shrunk_estimate", pa.float64()), ("shrunk_ci_low", pa.float64()), ("shrunk_ci_high", pa.float64()),
    ("flagged", pa.bool_()), ("prior_mean", pa.float64()), ("prior_sd", pa.float64()),
    ("correction", pa.string()), ("controls", pa.string()), ("note", pa.string()),
]
LENDERS = pa.schema([("lei", pa.string()), *_COMMON, ("strata", pa.int64()), ("lender_gap", pa.float64()),
                     ("in_benchmark", pa.bool_()), *_STATS])
MARKETS = pa.schema([("market", pa.string()), *_COMMON, ("lenders", pa.int64()), *_STATS])


def outcome_fields(spec, params) -> list[str]:
    """``params.fields``, else denial and the spec's rate spread."""
    if params.fields is not None:
        return list(params.fields)
    spread = spec.pricing.rate_spread if spec.pricing is not None else None
    return [DENIAL, *([spread] if spread else [])]


def products(spec, params) -> list[str]:
    return list(params.products) if params.products is not None else list(spec.engines.regression.segments)


def field_controls(spec, params, field: str) -> tuple[list[str], set[str]]:
    """The controls of an outcome and those entered as logs."""
    reg = spec.engines.regression
    if params.controls is not None:
        names = list(params.controls)
    elif field == DENIAL:
        names = resolve_controls(spec, reg)
    else:
        names = pricing_controls(spec, spec.engines.pricing)
    return names, set(reg.log_controls) if field == DENIAL else set()


def _codes(block) -> np.ndarray:
    """Integer codes (−1 null) of a categorical feature's values, in the smallest signed integer
    type of its levels (``engines.regression.engine.compact``: a byte or two a record in the
    state every worker holds)."""
    if isinstance(block, Categorical):
        return compact(block).codes
    codes = np.asarray(block, np.float64)
    return np.where(np.isnan(codes), -1, codes).astype(np.int32)


class LendersEngine:
    """Per-lender and per-market controlled disparities against peers (module docstring)."""

    name = "lenders"
    tables = {"lender_disparities": LENDERS, "market_disparities": MARKETS}

    def columns(self, spec, params) -> list[str]:
        fields = outcome_fields(spec, params)
        names = [n for f in fields for n in field_controls(spec, params, f)[0]]
        g = spec.geography
        extra = [g.lender, g.market, *products(spec, params)] if g is not None else []
        features = list(dict.fromkeys([*names, *extra]))
        prices = [f for f in fields if f != DENIAL]
        return [*record_columns(spec, features, ids=False), *dict.fromkeys([spec.decision.column, *prices])]

    def prepare(self, data, params):
        spec = data.spec
        g = spec.geography
        if g is None or data.decision is None:
            raise ValueError("lenders needs the spec's `geography` section (lender, market) and decisions")
        fields = outcome_fields(spec, params)
        prices = [f for f in fields if f != DENIAL]
        controls = {f: field_controls(spec, params, f) for f in fields}
        names = list(dict.fromkeys(n for f in fields for n in controls[f][0]))
        # the engine's own view of the records, each staged column let go once no later step
        # reads it (the caller's view keeps them): at 10M HMDA records the columns read (0.6 GB)
        # were held to the end beside the state made of them
        data = replace(data)
        done = let_go(data)
        lender, market = _codes(record_block(data, g.lender)), _codes(record_block(data, g.market))
        market_levels, lender_levels = data.levels(g.market), data.levels(g.lender)
        outside = np.isin(market, [i for i, v in enumerate(market_levels) if v in set(g.outside_markets)])
        product_codes = [_codes(record_block(data, p)) for p in products(spec, params)]
        decision = data.decision
        done([g.lender, g.market, *products(spec, params)], [*names, *prices, spec.decision.column])
        lay = layout(lender, market, product_codes, ~outside)
        del product_codes, outside
        outcomes = {}
        originated = member(data.column(spec.decision.column), params.originated) if prices else None
        done([spec.decision.column], [*names, *prices])
        for f in fields:
            if f == DENIAL:
                outcomes[f] = np.where((decision == 0) | (decision == 1), 1.0 - decision, np.nan)
            else:
                price = np.asarray(data.column(f).cast(pa.float64()).to_numpy(zero_copy_only=False), np.float64)
                outcomes[f] = np.where(originated, price, np.nan)
                del price
                done([f], names)
        del originated
        blocks = {}
        for n in names:  # each column's blocks (as a value, or its log), then the column goes
            for f in fields:
                f_names, logs = controls[f]
                key = (n, n in logs)
                if n in f_names and key not in blocks:
                    b = record_block(data, n, log=n in logs)
                    blocks[key] = Categorical(_codes(b), b.levels) if isinstance(b, Categorical) else b
            done([n])
        # the joint groups of the protected columns (protected / reference / neither each): a
        # fixed effect of the pooled fit, so β is estimated within groups
        joint = np.zeros(len(data), np.int32)
        for attribute in column_attributes(spec).values():
            a = data.groups[attribute]
            joint = joint * 3 + np.where(a == 1, 1, np.where(a == 0, 0, 2)).astype(np.int32)
        units, _ = tested_units(spec, data.groups, params.intersections, 1, False)
        if params.attributes is not None:
            wanted = set(params.attributes) | {"&".join(u) for u in params.intersections}
            units = {k: v for k, v in units.items() if k in wanted}
        focus = None
        if params.focus is not None:
            known = {v: i for i, v in enumerate(lender_levels)}
            missing = [v for v in params.focus if v not in known]
            if missing:
                raise ValueError(f"engines.lenders.focus: {missing} are not lenders of the records "
                                 f"(column {g.lender!r})")
            focus = np.zeros(len(lender_levels), bool)
            focus[[known[v] for v in params.focus]] = True
        return {"params": params, "fields": fields, "focus": focus, "outcomes": outcomes, "blocks": blocks,
                "layout": lay,
                "fixed": [market, lender, joint], "fixed_names": [g.market, g.lender, "groups"],
                "units": units, "lender_levels": list(lender_levels), "market_levels": list(market_levels),
                "spec_controls": controls}

    def pieces(self, state) -> list[str]:
        return list(state["fields"])

    def run_piece(self, state, field: str) -> Tables:
        params, lay = state["params"], state["layout"]
        y = state["outcomes"][field]
        names, logs = state["spec_controls"][field]
        blocks = [state["blocks"][(n, n in logs)] for n in names]
        shown = [f"log {n}" if n in logs else n for n in names]
        rows = np.flatnonzero(~np.isnan(y))
        if len(y) < 2 ** 31:  # the rows (and the pooled fit's) at 4 bytes a row, not 8
            rows = rows.astype(np.int32)
        adj = adjust(y, blocks, shown, state["fixed"], state["fixed_names"], rows, params.block_rows)
        lower = field in params.borrower_favourable
        controls = ", ".join(shown) + " (fixed effects: market, lender, groups)"
        lenders, markets = [], []
        for unit, groups in state["units"].items():
            st = sums(lay, adj.r, y, groups, rows)
            c = cell_gaps(lay, st)
            common = {"attribute": unit, "field": field, "controls": controls, "is_denial": field == DENIAL}
            applications = np.bincount(lay.cell_lender, st.n[0::2] + st.n[1::2], lay.n_lenders)
            lg, fam, excluded = lender_family(lay, c, lower, params, state["focus"])
            shown_lenders = applications if state["focus"] is None else np.where(state["focus"], applications, 0)
            lenders.append(_table(LENDERS, lg, fam, shown_lenders, params,
                                  {"lei": state["lender_levels"], "strata": lg.cells, "lender_gap": lg.gap,
                                   "in_benchmark": ~excluded}, common))
            mg = market_gaps(lay, c)
            m_apps = np.bincount(lay.cell_market, st.n[0::2] + st.n[1::2], lay.n_markets)
            enough = (mg.n1 >= params.min_market) & (mg.n0 >= params.min_market)
            fam = family(mg.estimate, mg.se, mg.dof, enough, ~mg.y_constant, np.ones(lay.n_markets, bool),
                         lower, params)
            markets.append(_table(MARKETS, mg, fam, m_apps, params,
                                  {"market": state["market_levels"], "lenders": mg.units}, common))
        return {"lender_disparities": pa.concat_tables(lenders) if lenders else LENDERS.empty_table(),
                "market_disparities": pa.concat_tables(markets) if markets else MARKETS.empty_table()}

    def combine(self, state, parts) -> Tables:
        out = concat_parts(parts, self.tables)
        return {"lender_disparities": out["lender_disparities"].sort_by(
                    [("attribute", "ascending"), ("field", "ascending"), ("lei", "ascending")]),
                "market_disparities": out["market_disparities"].sort_by(
                    [("attribute", "ascending"), ("field", "ascending"), ("market", "ascending")])}


def lender_family(lay, c: dict, lower: bool, params, focus: np.ndarray | None = None, rounds: int = 10):
    """The lenders' excesses and their family's tests; the benchmarks computed again without the
    lenders flagged, until the flagged set repeats (at most ``rounds`` times). Returns the gaps,
    the family and the lenders left out of the benchmarks.

    ``focus`` (per lender: under review): every lender's family sets the benchmarks as above (a
    flagged peer left out), then the family returned is the focused lenders' alone — tested and
    corrected across their rows only, shrunk towards the prior (μ, τ) of every lender of the file."""
    has_both = np.bincount(lay.cell_lender, (c["w"] > 0).astype(np.float64), lay.n_lenders) > 0
    excluded = np.zeros(lay.n_lenders, bool)
    seen = set()
    for _ in range(rounds):
        lg = lender_gaps(lay, c, excluded)
        enough = (lg.n1 >= params.min_protected) & (lg.n0 >= params.min_reference)
        fam = family(lg.estimate, lg.se, lg.dof, enough, ~lg.y_constant, (lg.cells > 0) | ~has_both, lower, params)
        key = fam["flagged"].tobytes()
        if np.array_equal(fam["flagged"], excluded) or key in seen:
            break
        seen.add(key)
        excluded = fam["flagged"].copy()
    if focus is not None:
        fam = family(lg.estimate, lg.se, lg.dof, enough & focus, ~lg.y_constant, (lg.cells > 0) | ~has_both, lower,
                     params, (fam["mu"], None if fam["tau"] is None else fam["tau"] ** 2))
    return lg, fam, excluded


def _table(schema: pa.Schema, gaps: Gaps, fam: dict, applications: np.ndarray, params, own: dict,
           common: dict) -> pa.Table:
    """One family's rows (units with applications of the comparison's groups)."""
    keep = np.flatnonzero(applications > 0)
    key = schema.names[0]
    n = gaps.n1 + gaps.n0
    denial = common["is_denial"]
    cols = {
        key: pa.array(np.asarray(own[key], object)[keep].tolist(), pa.string()),
        "attribute": pa.array([common["attribute"]] * len(keep), pa.string()),
        "field": pa.array([common["field"]] * len(keep), pa.string()),
        "applications": applications[keep].astype(np.int64), "n": n[keep].astype(np.int64),
        "n_protected": gaps.n1[keep].astype(np.int64), "n_reference": gaps.n0[keep].astype(np.int64),
        "loans": (n - gaps.y_sum)[keep].round().astype(np.int64) if denial else n[keep].astype(np.int64),
        "denials": pa.array(gaps.y_sum[keep].round().astype(np.int64) if denial else [None] * len(keep), pa.int64()),
        "peer_benchmark": gaps.benchmark[keep], "estimate": gaps.estimate[keep], "se": gaps.se[keep],
        "ci_low": fam["ci_low"][keep], "ci_high": fam["ci_high"][keep],
        "confidence": np.full(len(keep), params.confidence), "dof": gaps.dof[keep].astype(np.int64),
        "p_value": fam["p_value"][keep], "p_adjusted": fam["p_adjusted"][keep],
        "significant": fam["significant"][keep], "adverse": fam["adverse"][keep],
        "shrunk_estimate": fam["shrunk"][keep], "shrunk_ci_low": fam["shrunk_low"][keep],
        "shrunk_ci_high": fam["shrunk_high"][keep], "flagged": fam["flagged"][keep],
        "prior_mean": pa.array([fam["mu"]] * len(keep), pa.float64()),
        "prior_sd": pa.array([fam["tau"]] * len(keep), pa.float64()),
        "correction": pa.array([params.correction] * len(keep), pa.string()),
        "controls": pa.array([common["controls"]] * len(keep), pa.string()),
        "note": pa.array(fam["note"][keep].tolist(), pa.string()),
    }
    for name in own:
        if name != key:
            cols[name] = np.asarray(own[name])[keep]
    table = pa.table({k: (pa.array(np.where(np.isfinite(v), v, np.nan), from_pandas=True)
                          if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v) for k, v in cols.items()})
    for k in ("strata", "lenders"):
        if k in cols:
            table = table.set_column(table.schema.get_field_index(k), k, pa.array(cols[k].astype(np.int64)))
    if "in_benchmark" in cols:
        table = table.set_column(table.schema.get_field_index("in_benchmark"), "in_benchmark",
                                 pa.array(cols["in_benchmark"].astype(bool)))
    return table.select(schema.names).cast(schema)
