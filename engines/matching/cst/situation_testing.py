"""Counterfactual situation testing (CST) with the ST and CF baselines, over arrays.

Alvarez & Ruggieri (2023), §3: for each complainant c (a protected record),

* control group (Def. 3.3): the k records of the protected search space nearest to the factual
  x_c (without c itself); with search centres, c's own decision is counted too (k + 1);
* test group: the k records of the non-protected search space nearest to the counterfactual
  x_c^CF (CST) or to x_c itself (ST, ceteris paribus); with centres, ŷ_c^CF counts too;
* p_c, p_t: shares of negative decisions (Eq. 4); Δp = p_c − p_t; discriminated iff Δp > τ
  (Def. 3.4); SE = sqrt(p_c(1−p_c)/n_c + p_t(1−p_t)/n_t) (Wald; Eq. 5 with its sign slip
  corrected); significant iff Δp − z_{1−α}·SE > τ (Def. 3.5, one-sided as Tables 2–3);
* bias correction (``CSTParams.bias_correction``, not the paper's): each neighbour's decision
  moved to the centre's inputs by one surface fitted on both groups, the null hypothesis's one
  standard (``engines.matching.cst.bias_correction``);
* across complainants (not the paper's): ``p_value`` = 1 − Φ((Δp − τ)/SE), the one-sided p of
  each claim's test (below α iff ``significant``); ``q_value``, its Benjamini–Hochberg adjustment
  across the complainants of one attribute × method × k, and ``fdr_significant`` iff q ≤ α
  (:func:`flag_claims`): ``significant`` names about α of a fair lender's refused applicants by
  chance, ``fdr_significant`` holds the false share among those it names at α;
* CF (Kusner et al. 2017): ŷ_c negative and ŷ_c^CF positive (Δp = 1; −1 the reverse); one
  decision against one, no sample: ``significant`` is null.
* probability of necessity (Tian & Pearl 2000, Thm. 1: under exogeneity and monotonicity
  PN = [P(y | x) − P(y | x′)] / P(y | x), the excess risk ratio 1 − 1/RR), with y a negative
  decision, P(y | x) estimated by p_c and P(y | x′) by p_t: PN = 1 − p_t / p_c, the probability
  that *this* complainant would not have been refused in the other world — an individual
  quantity, where Δp and its test measure the neighbourhood's disparity. ``probable``: PN > ½,
  more likely than not (RR > 2, the "doubling of the risk" standard of proof). For CF, PN is 1
  when ŷ_c^CF is positive and 0 otherwise.

Distances: the Thanh et al. mixed distance (Eq. 6) in :mod:`engines.core.knn`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pyarrow as pa
from scipy.special import ndtr

from aequum.engines.core.data import id_array, record_ids
from aequum.engines.core.knn import Points, knn_in_blocks
from aequum.engines.core.lattice import lattice_codes, lattice_decimals

METHODS = ("ST", "CST_wo_centres", "CST", "CF")

CLAIMS = pa.schema([
    ("record_id", pa.string()), ("protected_attribute", pa.string()), ("method", pa.string()),
    ("k", pa.int32()), ("n_control", pa.int32()), ("n_test", pa.int32()),
    ("p_c", pa.float64()), ("p_t", pa.float64()), ("delta_p", pa.float64()), ("se", pa.float64()),
    ("ci_low", pa.float64()), ("ci_high", pa.float64()), ("one_sided_low", pa.float64()),
    ("discriminated", pa.bool_()), ("significant", pa.bool_()),
    ("decision", pa.int8()), ("decision_counterfactual", pa.int8()),
    ("pn", pa.float64()), ("probable", pa.bool_()), ("comparable", pa.bool_()),
    ("p_value", pa.float64()), ("q_value", pa.float64()), ("fdr_significant", pa.bool_()),
])
EVIDENCE = pa.schema([
    ("record_id", pa.string()), ("protected_attribute", pa.string()), ("centre", pa.string()),
    ("search_group", pa.string()), ("rank", pa.int32()), ("neighbour_id", pa.string()),
    ("distance", pa.float64()),
])
SUMMARY = pa.schema([
    ("protected_attribute", pa.string()), ("method", pa.string()), ("k", pa.int32()),
    ("complainants", pa.int64()), ("discriminated", pa.int64()), ("discriminated_share", pa.float64()),
    ("significant", pa.int64()), ("significant_share", pa.float64()),
    ("reverse", pa.int64()), ("note", pa.string()), ("population", pa.int64()),
    ("probable", pa.int64()), ("probable_share", pa.float64()), ("effect", pa.string()),
    ("excess_p_value", pa.float64()), ("comparable", pa.int64()),
    ("fdr_significant", pa.int64()), ("fdr_significant_share", pa.float64()),
])
SAMPLING = pa.schema([
    ("protected_attribute", pa.string()), ("stratum", pa.string()), ("decision", pa.int8()),
    ("population", pa.int64()), ("sampled", pa.int64()),
])
CF_NOTE = ("CF compares each complainant with its own counterfactual, one decision each: there is "
           "no sample, so no significance test (significant is null)")


def normalise(values: np.ndarray | Callable[[int], np.ndarray], kinds: list[str], levels: list[int | None],
              method: str, stats: np.ndarray | None = None, rows: np.ndarray | None = None) -> Points:
    """Map raw attribute values to the mixed space of the Thanh et al. distance (Eq. 6).

    numeric: z-score or range scaling with the statistics of ``stats`` (default ``values``);
    ordinal: rank / (levels − 1); categorical: kept as nominal codes. Columns whose raw values
    lie on a decimal grid (integers, one-decimal grades, ranks) also get their lattice (integer
    codes and the normalised step), so that equal differences give equal distances
    (:mod:`engines.core.knn`, "Ties"). With ``rows``, the points of those rows only, mapped
    exactly as in the whole set (statistics and lattice of every row of ``values``).

    ``values`` may also be a function giving column j of every row (with ``rows``): a
    counterfactual world is then built one column at a time, never as a whole matrix. The
    points are filled in place, a column at a time (at 10M records the columns gathered and
    stacked took twice the points' memory again).
    """
    column = values if callable(values) else (lambda j: values[:, j])
    n = len(values) if rows is None else len(rows)
    on_metric = [j for j, kind in enumerate(kinds) if kind != "categorical"]
    on_nominal = [j for j, kind in enumerate(kinds) if kind == "categorical"]
    metric = np.empty((n, len(on_metric)))
    nominal = np.empty((n, len(on_nominal)), np.int64)
    codes = np.zeros((n, len(on_metric)), np.int32)
    steps = np.full(len(on_metric), np.nan)
    for j, kind in enumerate(kinds):
        v = column(j)
        picked = v if rows is None else v[rows]
        if kind == "categorical":
            nominal[:, on_nominal.index(j)] = picked
            continue
        if kind == "ordinal":
            scale, centre = float(max(levels[j] - 1, 1)), 0.0
        else:
            s = v if stats is None else stats[:, j]
            if not np.isfinite(s).all():  # else the statistics are those of the column as it is
                s = s[np.isfinite(s)]
            if method == "zscore":
                scale = s.std(ddof=1) if len(s) > 1 else 0.0
                centre = s.mean() if len(s) else 0.0
            else:
                scale = s.max() - s.min() if len(s) else 0.0
                centre = s.min() if len(s) else 0.0
            scale = scale if scale > 0 else 1.0
            del s
        c = on_metric.index(j)
        np.subtract(picked, centre, out=metric[:, c])  # (picked − centre) / scale, without temporaries
        metric[:, c] /= scale
        d = lattice_decimals(v)
        if d is not None:
            if len(picked):  # the codes' bounds: wider than int32, every code in int64
                low, high = np.rint(np.array([picked.min(), picked.max()]) * 10.0 ** d)
                if not (low >= -2 ** 31 and high < 2 ** 31):
                    codes = codes.astype(np.int64)
            lattice_codes(picked, d, codes[:, c])
            steps[c] = 10.0 ** -d / scale
    return Points(metric, nominal, codes, steps)


@dataclass
class Neighbourhoods:
    """Per complainant (rows): neighbour indices (into the full records) and distances."""

    control: np.ndarray
    control_dist: np.ndarray
    test_factual: np.ndarray
    test_factual_dist: np.ndarray
    test_counterfactual: np.ndarray
    test_counterfactual_dist: np.ndarray


def search_shared(factual: Points, tests: list[tuple[Points, np.ndarray, np.ndarray]], reference: np.ndarray,
                  k: int) -> list[Neighbourhoods]:
    """Per test (``tests``: its counterfactual centres, row i for complainants[i], protected mask
    and complainants), the k nearest control members (protected, excluding c) and test members
    (``reference``) around the factual and the counterfactual centres of each complainant;
    ``factual`` holds every record. The tests share the reference group: it is indexed once for
    all their test searches (the race comparisons all search the White applicants), and a record
    that is a complainant of several of them is searched once around its factual centre (a
    record's neighbours are its own, whatever the other queries). Each group is searched a block
    of records at a time (:func:`knn_in_blocks`, exact): the memory of a search is that of one
    block, whatever the group's size."""
    ref = np.flatnonzero(reference)
    controls = []
    for counterfactual, protected, complainants in tests:
        if len(counterfactual) != len(complainants):
            raise ValueError(f"{len(counterfactual)} counterfactual centres for {len(complainants)} complainants")
        prot = np.flatnonzero(protected)
        own = np.searchsorted(prot, complainants)  # each complainant's place among the protected
        if np.any(own >= len(prot)) or np.any(prot[np.minimum(own, len(prot) - 1)] != complainants):
            raise ValueError("every complainant must belong to the protected group")
        (ci, cd), = knn_in_blocks(factual, prot, [(factual.take(complainants), own)], k)
        controls.append((prot[ci], cd))
    every = np.unique(np.concatenate([complainants for _, _, complainants in tests]))
    (fi, fd), *found = knn_in_blocks(factual, ref, [(factual.take(every), None)] +
                                     [(counterfactual, None) for counterfactual, _, _ in tests], k)
    out = []
    for (_, _, complainants), (ci, cd), (ti, td) in zip(tests, controls, found):
        at = np.searchsorted(every, complainants)
        out.append(Neighbourhoods(ci, cd, ref[fi[at]], fd[at], ref[ti], td))
    return out


def _proportions(neg: np.ndarray, idx: np.ndarray, dist: np.ndarray, k: int, max_distance: float | None,
                 centre_neg: np.ndarray | None, shift: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(p, n): share of negative decisions among the first k neighbours (and the centre); with
    ``shift``, each neighbour's decision moved by it (``engine._shifts``: μ̂ at the centre minus μ̂ at the neighbour), the share
    clipped to [0, 1]."""
    cols = idx[:, :k]
    ok = np.ones(cols.shape, bool) if max_distance is None else dist[:, :k] <= max_distance
    negs = (neg[cols] * ok).sum(1).astype(np.float64)
    if shift is not None:
        negs += (shift[:, :k] * ok).sum(1)
    n = ok.sum(1).astype(np.float64)
    if centre_neg is not None:
        negs += centre_neg
        n += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(n > 0, negs / np.maximum(n, 1), np.nan)
    return (p if shift is None else np.clip(p, 0.0, 1.0)), n


def comparable(control_dist: np.ndarray, test_dist: np.ndarray, overlap: float, dims: int) -> np.ndarray:
    """Whether the reference group has members like the complainant: the local odds of the
    protected group over the reference group around it at most ``overlap``. With k members of
    each group within its k-th distances r_c and r_t, the k-nearest-neighbour density estimate
    (Loftsgaarden & Quesenberry 1965) gives those odds as (r_t / r_c)^dims — ``dims`` the
    dimension the distances grow in. A complainant the reference group reaches only far off has
    no comparators: its claim would compare it with other applicants, with other inputs (matching
    without overlap; the trimming of Crump, Hotz, Imbens & Mitnik 2009, "Dealing with limited
    overlap in estimation of average treatment effects", Biometrika 96(1): propensity above 0.9,
    odds above 9)."""
    return test_dist <= control_dist * overlap ** (1.0 / max(dims, 1)) * (1 + 1e-12)


def claims(ids: pa.Array | np.ndarray, attribute: str, complainants: np.ndarray, hood: Neighbourhoods,
           decision: np.ndarray, decision_cf: np.ndarray, ks: list[int], alpha: float, tau: float,
           max_distance: float | None, shifts: dict[str, np.ndarray] | None = None,
           overlap: float | None = None, dims: int = 1) -> pa.Table:
    """One row per complainant × method × k (and one CF row, k = 0), in blocks of one row per
    complainant in the order of ``complainants``; ``decision`` of every record, ``decision_cf``
    of the complainants (entry i: complainants[i]). ``shifts``: the bias correction's moves of
    each neighbour's decision (``engine._shifts``: μ̂ at the centre minus μ̂ at the neighbour)
    per neighbourhood — ``control``,
    ``test_factual``, ``test_counterfactual`` — or None for the paper's shares. ``overlap``:
    the largest local odds of the protected group over the reference group at which a claim is
    tested (:func:`comparable`, ``dims`` metric attributes); other claims keep Δp, with
    discriminated, significant and probable null and ``comparable`` false."""
    shifts = shifts or {}
    neg = decision == 0  # counted as integers, then as floats (a float per record: 67 MB at 10M)
    z_one, z_two = NormalDist().inv_cdf(1 - alpha), NormalDist().inv_cdf(1 - alpha / 2)
    c_neg, c_neg_cf = neg[complainants].astype(np.float64), (np.asarray(decision_cf) == 0).astype(np.float64)
    cols: dict[str, list] = {f.name: [] for f in CLAIMS}
    m = len(complainants)
    rid = record_ids(ids, complainants)
    for k in ks:
        sc, sf, st = shifts.get("control"), shifts.get("test_factual"), shifts.get("test_counterfactual")
        p_ctrl, n_ctrl = _proportions(neg, hood.control, hood.control_dist, k, max_distance, None, sc)
        p_ctrl_c, n_ctrl_c = _proportions(neg, hood.control, hood.control_dist, k, max_distance, c_neg, sc)
        p_st, n_st = _proportions(neg, hood.test_factual, hood.test_factual_dist, k, max_distance, None, sf)
        p_cf, n_cf = _proportions(neg, hood.test_counterfactual, hood.test_counterfactual_dist, k,
                                  max_distance, None, st)
        p_cf_c, n_cf_c = _proportions(neg, hood.test_counterfactual, hood.test_counterfactual_dist, k,
                                      max_distance, c_neg_cf, st)
        for method, (pc, nc, pt, nt, test_dist) in {
            "ST": (p_ctrl, n_ctrl, p_st, n_st, hood.test_factual_dist),
            "CST_wo_centres": (p_ctrl, n_ctrl, p_cf, n_cf, hood.test_counterfactual_dist),
            "CST": (p_ctrl_c, n_ctrl_c, p_cf_c, n_cf_c, hood.test_counterfactual_dist),
        }.items():
            ok = (np.ones(m, bool) if overlap is None else
                  comparable(hood.control_dist[:, k - 1], test_dist[:, k - 1], overlap, dims))
            cols["comparable"].append(ok)
            dp = pc - pt
            with np.errstate(invalid="ignore", divide="ignore"):
                se = np.sqrt(pc * (1 - pc) / nc + pt * (1 - pt) / nt)
            cols["record_id"].append(rid)
            cols["method"].append(np.full(m, method))
            cols["k"].append(np.full(m, k, np.int32))
            cols["n_control"].append(nc.astype(np.int32))
            cols["n_test"].append(nt.astype(np.int32))
            cols["p_c"].append(pc)
            cols["p_t"].append(pt)
            cols["delta_p"].append(dp)
            cols["se"].append(se)
            cols["ci_low"].append(dp - z_two * se)
            cols["ci_high"].append(dp + z_two * se)
            cols["one_sided_low"].append(dp - z_one * se)
            untested = np.where(ok, 0.0, np.nan)  # NaN -> null where the groups do not overlap
            cols["discriminated"].append((dp > tau) + untested)
            cols["significant"].append((dp - z_one * se > tau) + untested)
            cols["p_value"].append(p_value(dp, se, tau) + untested)
            with np.errstate(invalid="ignore", divide="ignore"):
                pn = np.where(pc > 0, 1 - pt / pc, np.nan)
            cols["pn"].append(pn)
            cols["probable"].append((np.nan_to_num(pn, nan=0.0) > 0.5) + untested)
    dp = c_neg - c_neg_cf
    nan = np.full(m, np.nan)
    for name, v in {"record_id": rid, "method": np.full(m, "CF"), "k": np.zeros(m, np.int32),
                    "n_control": np.ones(m, np.int32), "n_test": np.ones(m, np.int32),
                    "p_c": c_neg, "p_t": c_neg_cf, "delta_p": dp, "se": nan, "ci_low": nan,
                    "ci_high": nan, "one_sided_low": nan, "discriminated": dp > tau,
                    "significant": nan, "pn": np.where(c_neg == 1, 1.0 - c_neg_cf, 0.0),  # one counterfactual:
                    "probable": (c_neg == 1) & (c_neg_cf == 0), "comparable": nan, "p_value": nan}.items():  # no test
        cols[name].append(v)
    reps = len(ks) * 3 + 1
    cols["q_value"] = cols["fdr_significant"] = [np.full(m * reps, np.nan)]  # across complainants: flag_claims
    cols["protected_attribute"] = [np.full(m * reps, attribute)]
    cols["decision"] = [np.tile(decision[complainants].astype(np.int8), reps)]
    cols["decision_counterfactual"] = [np.tile(np.asarray(decision_cf).astype(np.int8), reps)]
    arrays = {}
    for f in CLAIMS:
        v = np.concatenate(cols[f.name])
        if pa.types.is_floating(f.type) or f.name in ("significant", "discriminated", "probable", "comparable",
                                                      "fdr_significant"):
            arrays[f.name] = pa.array(v, pa.float64(), from_pandas=True).cast(f.type)  # NaN -> null
        else:
            arrays[f.name] = pa.array(v, f.type)
    return pa.table(arrays, schema=CLAIMS)


def p_value(dp: np.ndarray, se: np.ndarray, tau: float) -> np.ndarray:
    """One-sided p of each claim's Wald test of H0: Δp ≤ τ, p = 1 − Φ((Δp − τ) / SE) — below α
    exactly when Def. 3.5's ``significant`` holds. A zero SE (both shares 0 or 1) gives 0 when
    Δp > τ and 1 otherwise; NaN where a group is empty."""
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(se > 0, (dp - tau) / se, np.where(dp > tau, np.inf, -np.inf))
    return np.where(np.isnan(dp) | np.isnan(se), np.nan, ndtr(-z))


def flag_claims(claims_table: pa.Table, alpha: float) -> pa.Table:
    """``q_value`` and ``fdr_significant`` of every claim: Benjamini & Hochberg's (1995, JRSS B 57(1),
    step-up) adjusted p across the complainants of one attribute × method × k,

        q_(i) = min_{j ≥ i} min(1, m · p_(j) / j)   (p_(1) ≤ … ≤ p_(m), the m tested claims),

    and fdr_significant iff q ≤ α. ``significant`` holds each complainant's test at α, so among
    thousands of complainants of a lender that treats both groups alike about α of them are
    significant by chance — a fair lender's refused applicants named at the rate α;
    ``fdr_significant`` holds the expected share of false names among those it names at α (under
    the complete null, the chance that anyone is named at all). The neighbourhoods overlap, so
    the tests are positively dependent, under which the step-up holds its level (Benjamini &
    Yekutieli 2001, Thm. 1.2). Tied p-values get one q (their largest rank's), so the result does
    not depend on row order.
    CF (no test) and untested claims: null."""
    import polars as pl

    from aequum.engines.outcome.stats import adjust_p_values

    df = pl.from_arrow(claims_table.select(["protected_attribute", "method", "k", "p_value"]))
    family = df.select(pl.struct("protected_attribute", "method", "k").rank("dense").alias("f"))["f"].to_numpy()
    p = df["p_value"].fill_null(np.nan).to_numpy().astype(np.float64)
    q = np.full(len(p), np.nan)
    order = np.argsort(family, kind="stable")
    bounds = np.flatnonzero(np.diff(family[order])) + 1
    for rows in np.split(order, bounds):
        q[rows] = adjust_p_values(p[rows], "bh")
    tested = ~np.isnan(q)
    named = pa.array(q <= alpha, pa.bool_(), mask=~tested)
    out = claims_table.set_column(claims_table.schema.get_field_index("q_value"), "q_value",
                                  pa.array(q, pa.float64(), mask=~tested))
    return out.set_column(out.schema.get_field_index("fdr_significant"), "fdr_significant", named)


def evidence_depth(claims_table: pa.Table, n: int, kmax: int, mode: str) -> dict[tuple[str, str], np.ndarray]:
    """Per (centre, search group), how many ranks of each of the ``n`` complainants' neighbours
    to record (``claims_table``: their claims as :func:`claims` writes them).

    ``all``: every group up to the largest k. ``significant``: the groups of the methods that
    found the complainant significantly discriminated (Def. 3.5), up to the largest k at which
    they did — the control group for any, the factual test group for ST, the counterfactual test
    group for CST (with or without centres): every case a finding counts, so every case the
    matched-pair exhibit can show, and the report's listed cases that are significant.
    ``discriminated``: as significant, with discriminated (Def. 3.4: Δp > τ) for significant.
    ``none``: nothing.
    """
    if mode not in ("discriminated", "significant"):
        full = np.full(n, kmax if mode == "all" else 0, np.int64)
        return {("factual", "control"): full, ("factual", "test"): full, ("counterfactual", "test"): full}
    method = claims_table["method"].to_numpy(zero_copy_only=False)
    hit = claims_table[mode].fill_null(False).to_numpy(zero_copy_only=False) & (method != "CF")
    # claims() writes blocks of n rows, one row per complainant in the given order
    row = (np.arange(claims_table.num_rows) % n)[hit]
    k = claims_table["k"].to_numpy()[hit].astype(np.int64)
    st = np.zeros(n, np.int64)
    cst = np.zeros(n, np.int64)
    is_st = method[hit] == "ST"
    np.maximum.at(st, row[is_st], k[is_st])
    np.maximum.at(cst, row[~is_st], k[~is_st])
    return {("factual", "control"): np.maximum(st, cst), ("factual", "test"): st,
            ("counterfactual", "test"): cst}


def evidence(ids: pa.Array | np.ndarray, attribute: str, complainants: np.ndarray, hood: Neighbourhoods,
             depth: dict[tuple[str, str], np.ndarray], max_distance: float | None = None) -> pa.Table:
    """Who each complainant was compared with: rank, neighbour id and distance, for the first
    ``depth[(centre, group)]`` ranks (neighbours beyond ``max_distance`` did not count: left out)."""
    parts = []
    # in the order of the keys the engine streams the rows by (centre, search group): their sort
    # then finds them in place
    for centre, group, idx, dist in (("counterfactual", "test", hood.test_counterfactual,
                                      hood.test_counterfactual_dist),
                                     ("factual", "control", hood.control, hood.control_dist),
                                     ("factual", "test", hood.test_factual, hood.test_factual_dist)):
        n, k = idx.shape
        ranks = np.arange(1, k + 1, dtype=np.int32)
        keep = ranks[None, :] <= depth[(centre, group)][:, None]
        if max_distance is not None:
            keep &= dist <= max_distance
        rows, cols = np.nonzero(keep)
        m = len(rows)
        # Arrow columns built directly: numpy's fixed-width strings of the same (np.full of a
        # 46-character attribute name: 0.5 GB for a piece's 2.7M rows at 10M HMDA records)
        # were most of a piece's memory
        parts.append(pa.table({
            "record_id": id_array(ids, complainants[rows]),
            "protected_attribute": pa.repeat(pa.scalar(attribute, pa.string()), m),
            "centre": pa.repeat(pa.scalar(centre, pa.string()), m),
            "search_group": pa.repeat(pa.scalar(group, pa.string()), m),
            "rank": pa.array(ranks[cols]),
            "neighbour_id": id_array(ids, idx[rows, cols]),
            "distance": pa.array(dist[rows, cols]),
        }, schema=EVIDENCE))
    return pa.concat_tables(parts) if parts else EVIDENCE.empty_table()


def summary(claims_table: pa.Table, population: dict[str, int] | None = None, effect: str = "total",
            alpha: float = 0.05) -> pa.Table:
    """Counts and shares of discriminated / significant / fdr_significant / probable complainants
    by attribute × method × k.
    Significance is null where no claim has a test (CF), with a ``note`` saying why;
    ``population``: complainants before sampling, per attribute (default: those tested);
    ``comparable``: the complainants with comparators in the reference group, whose claims were
    tested;
    ``effect``: what the counterfactual world measures (total, or path-specific with mediators
    held) — CF's and CST's; ST compares the same features across groups (ceteris paribus).

    ``fdr_significant``: the complainants whose claims survive the Benjamini–Hochberg adjustment
    across the complainants (:func:`flag_claims`), ``fdr_significant_share`` their share; null for CF.

    ``excess_p_value``: whether more complainants are significant than chance alone makes —
    each complainant's test holds its level ``alpha``, so with no discrimination the count is
    at most Binomial(comparable, alpha) — the complainants whose claims were tested, those with
    comparators (:func:`comparable`): P(X >= significant) for that binomial (one-sided; the
    complainants' neighbourhoods overlap, so the tests are not independent and the p-value is
    a screen, not exact). Null where there is no test (CF)."""
    import polars as pl

    df = pl.from_arrow(claims_table)
    if "fdr_significant" not in df.columns:  # claims not yet adjusted across complainants (flag_claims)
        df = df.with_columns(pl.lit(None, pl.Boolean).alias("fdr_significant"))
    tested = pl.col("method").first() != "CF"
    out = (df.group_by(["protected_attribute", "method", "k"], maintain_order=True)
           .agg(pl.len().alias("complainants"),
                pl.when(tested).then(pl.col("comparable").fill_null(False).sum()).otherwise(None)
                .cast(pl.Int64).alias("comparable"),
                pl.col("discriminated").fill_null(False).sum().alias("discriminated"),
                pl.when(tested).then(pl.col("significant").sum()).otherwise(None).alias("significant"),
                pl.when(tested).then(pl.col("fdr_significant").sum()).otherwise(None)
                .alias("fdr_significant"),
                (pl.col("delta_p") < 0).fill_null(False).sum().alias("reverse"),
                pl.col("probable").fill_null(False).sum().alias("probable"),
                pl.when(tested).then(None).otherwise(pl.lit(CF_NOTE)).alias("note"))
           .with_columns((pl.col("discriminated") / pl.col("complainants")).alias("discriminated_share"),
                         (pl.col("significant") / pl.col("complainants")).alias("significant_share"),
                         (pl.col("fdr_significant") / pl.col("complainants")).alias("fdr_significant_share"),
                         (pl.col("probable") / pl.col("complainants")).alias("probable_share"))
           .sort(["protected_attribute", "method", "k"]))
    pop = pl.col("protected_attribute").replace_strict(population or {}, default=None, return_dtype=pl.Int64)
    out = out.with_columns(pop.fill_null(pl.col("complainants")).alias("population"),
                           pl.when(pl.col("method") == "ST").then(pl.lit("ceteris paribus"))
                           .otherwise(pl.lit(effect)).alias("effect"))
    from scipy.special import bdtrc

    sig = out["significant"].cast(pl.Float64).to_numpy()  # NaN: no test
    n = out["comparable"].cast(pl.Float64).fill_null(0).to_numpy().astype(np.int64)  # the claims tested
    excess = np.full(len(sig), np.nan)
    tested = ~np.isnan(sig)
    s = sig[tested]  # P(X >= s) = P(X > s - 1); s = 0 gives 1
    excess[tested] = np.where(s > 0, bdtrc(np.maximum(s - 1, 0), n[tested], alpha), 1.0)
    out = out.with_columns(pl.Series("excess_p_value", excess, dtype=pl.Float64).fill_nan(None))
    return out.select([f.name for f in SUMMARY]).to_arrow().cast(SUMMARY)
