"""The redlining screen (docs/fair-lending.md, "Geography and peers"): per lender and market, its share
of applications, and of approvals, from majority-minority tracts (minority share > 50 %, > 80 %),
majority Black / Hispanic tracts where the data has the split, and low-to-moderate income tracts
(tract-to-MSA income < 80 %), against the distribution of its market's lenders' shares — the
deleted-residual test of a random-effects model whose between-lender variance is estimated from
the data (:mod:`engines.geography.benchmark`) — adjusted across lenders. Its volume-matched
peers' pooled share is reported beside it (:mod:`engines.geography.peers`).

A share counts the applications whose tract field is reported (the LAR's "NA" tracts are in
neither numerator nor denominator). Approvals are the favourable decisions (originated, or
approved but not accepted): the staged records keep the decision, not which of the two.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from aequum.engines.geography.benchmark import outlier_test
from aequum.engines.geography.peers import peer_sums
from aequum.engines.outcome.stats import adjust_p_values

LENDERS = pa.schema([
    ("lender", pa.string()), ("market", pa.string()), ("measure", pa.string()), ("basis", pa.string()),
    ("applications", pa.int64()), ("tracts", pa.int64()), ("n", pa.int64()), ("count", pa.int64()),
    ("share", pa.float64()), ("peers", pa.int64()), ("peer_n", pa.int64()), ("peer_count", pa.int64()),
    ("peer_share", pa.float64()), ("difference", pa.float64()), ("z", pa.float64()),
    ("p_value", pa.float64()), ("p_adjusted", pa.float64()), ("correction", pa.string()),
    ("significant", pa.bool_()), ("flagged", pa.bool_()), ("note", pa.string()),
    ("expected_share", pa.float64()), ("benchmark_lenders", pa.int64()), ("between_sd", pa.float64()),
])

ABSENT = {"black_share": "the data has no tract Black population share (the public LAR publishes the "
                         "minority share only): majority-Black tracts not screened",
          "hispanic_share": "the data has no tract Hispanic population share (the public LAR publishes the "
                            "minority share only): majority-Hispanic tracts not screened",
          "minority_share": "the spec names no tract minority share column (geography.minority_share)",
          "income_ratio": "the spec names no tract-to-MSA income column (geography.income_ratio): "
                          "low-to-moderate income tracts not screened"}


def measures(params) -> list[tuple[str, str, str, float]]:
    """(measure name, geography role, comparison, threshold) of every measure screened."""
    first = params.majority[0]
    return ([(f"minority share > {t:g}%", "minority_share", ">", t) for t in params.majority]
            + [(f"Black share > {first:g}%", "black_share", ">", first),
               (f"Hispanic share > {first:g}%", "hispanic_share", ">", first),
               (f"tract income < {params.low_income_below:g}% of MSA", "income_ratio", "<", params.low_income_below)])


def screen(state, params) -> pa.Table:
    """The geography_lenders table: one row per unit × measure × basis (module docstring), and one
    row with a note per measure the data cannot give."""
    u, n_units = state.unit, len(state.unit_lender)
    parts: list[pa.Table] = []
    for name, role, op, threshold in measures(params):
        values = state.fields.get(role)
        if values is None:
            parts.append(pa.Table.from_pylist([{"measure": name, "basis": "applications", "note": ABSENT[role]}],
                                              LENDERS))
            continue
        known = ~np.isnan(values)
        with np.errstate(invalid="ignore"):
            hit = known & ((values > threshold) if op == ">" else (values < threshold))
        for basis, mask in (("applications", None), ("approvals", state.approved)):
            take_known = known if mask is None else known & mask
            take_hit = hit if mask is None else hit & mask
            n = np.bincount(u[take_known], minlength=n_units)
            x = np.bincount(u[take_hit], minlength=n_units)
            parts.append(_rows(state, params, name, basis, n, x))
    return _adjust(pa.concat_tables(parts), params)


def _rows(state, params, name, basis, n, x) -> pa.Table:
    """One measure × basis: every unit's share, its peers' pooled share, and the test against
    its market's other lenders (:func:`benchmark.outlier_test`)."""
    peer_n = peer_sums(n, state.order, state.start, state.stop)
    peer_x = peer_sums(x, state.order, state.start, state.stop)
    enough = n >= params.min_applications
    z, p, expected, others, tau = outlier_test(x, n, state.unit_market, enough)
    share = np.where(n > 0, x / np.maximum(n, 1), np.nan)
    peer_share = np.where(peer_n > 0, peer_x / np.maximum(peer_n, 1), np.nan)
    volume = state.volume
    alone = state.market_lenders[state.unit_market] == 1
    notes = np.select(
        [alone, n == 0, ~enough, others == 0],
        ["the only lender in the market: no benchmark, not tested",
         "the tract field is not reported for any of its applications here; not tested",
         f"too few applications with the tract field reported (under {params.min_applications}): not tested",
         f"no other lender of the market has {params.min_applications} applications with the tract "
         "field reported: no benchmark, not tested"],
        "")
    k = len(n)
    tested = ~np.isnan(z)
    return pa.table({
        "lender": pa.array(state.lender_levels, pa.string()).take(pa.array(state.unit_lender)),
        "market": pa.array(state.market_levels, pa.string()).take(pa.array(state.unit_market)),
        "measure": pa.array([name] * k, pa.string()), "basis": pa.array([basis] * k, pa.string()),
        "applications": pa.array(volume, pa.int64()), "tracts": state.tracts,
        "n": pa.array(n, pa.int64()), "count": pa.array(x, pa.int64()), "share": _num(share),
        "peers": pa.array(state.peers, pa.int64()), "peer_n": pa.array(peer_n.astype(np.int64)),
        "peer_count": pa.array(peer_x.astype(np.int64)), "peer_share": _num(peer_share),
        "difference": _num(share - expected), "z": _num(z), "p_value": _num(p),
        "p_adjusted": pa.nulls(k, pa.float64()), "correction": pa.nulls(k, pa.string()),
        "significant": pa.nulls(k, pa.bool_()), "flagged": pa.nulls(k, pa.bool_()),
        "note": pa.array(notes, pa.string(), mask=notes == ""),
        "expected_share": _num(expected), "benchmark_lenders": pa.array(others, pa.int64(), mask=~tested),
        "between_sd": _num(np.where(tested, tau, np.nan)),
    }, schema=LENDERS)


def _num(v: np.ndarray) -> pa.Array:
    """Floats, null where not finite."""
    v = np.asarray(v, np.float64)
    return pa.array(v, pa.float64(), mask=~np.isfinite(v))


def _adjust(table: pa.Table, params) -> pa.Table:
    """p adjusted within each measure × basis across the units tested; significant at
    1 − confidence; flagged: significant with the lender's share below its market's level
    (``expected_share``; ``difference`` = share − expected_share)."""
    measure = np.asarray(table["measure"].to_pylist(), object)
    basis = np.asarray(table["basis"].to_pylist(), object)
    p = np.asarray(table["p_value"].to_numpy(zero_copy_only=False), np.float64)
    diff = np.asarray(table["difference"].to_numpy(zero_copy_only=False), np.float64)
    adjusted = np.full(len(p), np.nan)
    for key in sorted(set(zip(measure.tolist(), basis.tolist()))):
        rows = np.flatnonzero((measure == key[0]) & (basis == key[1]))
        adjusted[rows] = adjust_p_values(p[rows], params.correction)
    alpha = 1 - params.confidence
    tested = ~np.isnan(adjusted)
    significant = tested & (np.nan_to_num(adjusted, nan=1.0) < alpha)
    flagged = significant & (np.nan_to_num(diff) < 0)
    table = table.set_column(table.schema.get_field_index("p_adjusted"), "p_adjusted",
                             pa.array(adjusted, pa.float64(), mask=~tested))
    table = table.set_column(table.schema.get_field_index("correction"), "correction",
                             pa.array([params.correction if t else None for t in tested], pa.string()))
    table = table.set_column(table.schema.get_field_index("significant"), "significant",
                             pa.array(significant, pa.bool_(), mask=~tested))
    return table.set_column(table.schema.get_field_index("flagged"), "flagged", pa.array(flagged, pa.bool_()))
