"""The examiner's controlled regression when group membership is a probability (a BISG proxy):
the regression engine's design — its controls (numeric, log, categorical dummies), the other
attributes' groups held, fixed effects absorbed, errors clustered — with the group given by the
proxy's probabilities, two ways.

``corrected_regression`` — the outcome regressed on the probability of the protected group and
of neither group (the reference group's left out), the controls and the fixed effects:

    y_i = a + g q1_i + c q2_i + x_i'b + sum_j F_ij alpha_j + e_i.

If the outcome depends on the record's true group (and the controls and effects), not on its
surname and geography once those are known, and the probabilities are right given the controls
(``P(k | s, g, x, F) = P(k | s, g)``: the controls and effects tell nothing about race beyond
surname and place), then E[y | s, g, x, F] = a + sum_k P(k | s, g) mu_k + x'b + F alpha with
the reference group's mu_0 in a, so ``g = mu_1 - mu_0``: the controlled gap (the assumption of
McCartan, Goldin, Ho & Imai's BIRDiE; the regression the CFPB runs with the probabilities as the
group regressor). Fitted by the regression engine's own linear model
(``engines.regression.sensitivity.controlled_lpm``) with ``d = q1`` — its design takes any
numeric d — and q2 a held column. Its interval holds the proxy's uncertainty (a record's unknown
group is in its residual): CR1 with t(G - 1) when the spec clusters (with 2 to ``min_clusters`` - 1
clusters the wild cluster bootstrap's p beside it, as the regression engine), HC1 otherwise — never
the classical error, which the proxy's heteroskedastic residual would understate.

``weighted_regression`` — the CFPB's probability weighting carried to the controlled case:
weighted least squares over the records stacked once per group, a protected copy (group 1, weight
q1) and a reference copy (group 0, weight q0), with the same controls and effects,

    min sum_i q1_i (y_i - g - x_i'b - F_i alpha)^2 + q0_i (y_i - x_i'b - F_i alpha)^2.

Without controls it is exactly the weighted means' difference (``engines.proxy.estimates.weighted``),
and like it is pulled toward zero where race itself moves the outcome. Solved without stacking:
every fixed effect and categorical control absorbed by weighted alternating projections (weights
q1 + q0; Gaure 2013, "OLS with multiple high dimensional category variables"), the group
column's within part from the protected share r = q1/(q1 + q0) (the stacked rows' group
projection onto the effects is r's), the scores of a record's two copies summed (records are the
independent units): CR1 by the spec's cluster with t(G - 1), else HC1 by record, n/(n - k).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from aequum.engines.regression.design import Categorical, design
from aequum.engines.regression.sensitivity import controlled_lpm
from aequum.engines.regression.wild import Bootstrap

NEITHER = "p_neither"


@dataclass(frozen=True)
class RegressionGap:
    """A controlled gap (protected - reference) with its error, interval and test, the rows and
    the expected group members behind it, and how it was inferred."""

    gap: float | None
    se: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    n: int
    n_protected: float
    n_reference: float
    inference: str | None
    clusters: int
    controls: tuple[str, ...]
    note: str | None = None


def _interval(gap: float, se: float, dof: int, confidence: float) -> tuple[float, float, float]:
    crit = float(student_t.ppf(0.5 + confidence / 2, dof))
    return gap - crit * se, gap + crit * se, float(2 * student_t.sf(abs(gap / se), dof)) if se > 0 else None


def corrected_regression(y, q1, q0, blocks: Sequence, names: Sequence[str], rows: np.ndarray, *,
                         held: int = 0, fixed: Sequence[Categorical] = (), fixed_names: Sequence[str] = (),
                         cluster: Categorical | None = None, bootstrap: Bootstrap | None = None,
                         confidence: float = 0.95) -> RegressionGap:
    """The coefficient of q1 in ``y ~ 1 + q1 + q2 + controls (+ effects)`` (module docstring) by
    ``controlled_lpm``; ``blocks``/``names`` the controls as the regression engine gives them (the
    last ``held`` blocks held, not controls); q2 = 1 - q1 - q0 a held column where any record has it."""
    q1, q0 = np.asarray(q1, np.float64), np.asarray(q0, np.float64)
    q2 = np.clip(1.0 - q1 - q0, 0.0, 1.0)
    extra = [q2] if q2[rows].max(initial=0.0) > 1e-12 else []
    fit = controlled_lpm(y, q1, [*blocks[:len(blocks) - held], *extra, *blocks[len(blocks) - held:]],
                         [*names[:len(names) - held], *([NEITHER] if extra else []), *names[len(names) - held:]],
                         confidence, multipliers=(1.0,), rows=rows, held=held + len(extra), fixed=fixed,
                         fixed_names=fixed_names, cluster=cluster, bootstrap=bootstrap,
                         outcome=("favourable", "unfavourable"))
    controls = tuple(c for c in fit.controls if c not in {NEITHER, *names[len(names) - held:]})
    base = dict(n=fit.n, n_protected=float(q1[rows].sum()), n_reference=float(q0[rows].sum()),
                clusters=fit.clusters, controls=controls)
    if fit.estimate is None:
        return RegressionGap(None, None, None, None, None, inference=None, note=fit.note, **base)
    if fit.inference == "classical":  # no cluster: HC1, the proxy's residual is heteroskedastic
        se, dof, kind = fit.se_robust, fit.dof, "HC1"
        low, high, p = _interval(fit.estimate, se, dof, confidence)
    else:
        se, kind = fit.test_se, fit.inference
        low, high, p = fit.test_ci_low, fit.test_ci_high, fit.test_p_value
    return RegressionGap(fit.estimate, se, low, high, p, inference=kind, note=fit.note, **base)


def _demean(v: np.ndarray, w: np.ndarray, factors: list[np.ndarray], tol: float = 1e-13,
            max_iter: int = 10_000) -> np.ndarray:
    """``v`` (rows x m) less its weighted projection onto the factors' indicators: alternating
    weighted demeaning by each factor until the largest change is below ``tol`` of v's scale."""
    if not factors:
        return v.copy()
    v = v.copy()
    totals = [np.bincount(f, weights=w) for f in factors]
    scale = max(float(np.abs(v).max(initial=0.0)), 1e-300)
    for _ in range(max_iter):
        change = 0.0
        for f, tot in zip(factors, totals):
            with np.errstate(invalid="ignore", divide="ignore"):
                means = np.stack([np.bincount(f, weights=w * v[:, j], minlength=len(tot)) for j in range(v.shape[1])],
                                 axis=1) / np.where(tot > 0, tot, 1.0)[:, None]
            v -= means[f]
            change = max(change, float(np.abs(means).max(initial=0.0)))
        if change <= tol * scale or len(factors) == 1:
            break
    return v


def weighted_regression(y, q1, q0, blocks: Sequence, names: Sequence[str], rows: np.ndarray, *,
                        held: int = 0, fixed: Sequence[Categorical] = (), fixed_names: Sequence[str] = (),
                        cluster: Categorical | None = None, confidence: float = 0.95) -> RegressionGap:
    """The group's coefficient in the weighted least squares of the records stacked per group
    (module docstring), on the rows the regression engine's design keeps (``design``: nulls,
    one-outcome levels), its controls and effects."""
    y, q1, q0 = (np.asarray(a, np.float64) for a in (y, q1, q0))
    des = design(y, q1, blocks, names, rows, None, fixed, fixed_names, cluster, ("favourable", "unfavourable"))
    keep = np.sort(des.keep)
    used = set(des.used)
    held_names = set(names[len(names) - held:]) if held else set()
    controls = tuple(n for n in des.used if n not in held_names)
    w = q1[keep] + q0[keep]
    base = dict(n=len(keep), n_protected=float(q1[keep].sum()), n_reference=float(q0[keep].sum()),
                clusters=0, controls=controls)
    if des.failure is not None:
        return RegressionGap(None, None, None, None, None, inference=None, note=des.failure, **base)
    live = w > 0
    keep, w = keep[live], w[live]
    a1, yk = q1[keep], y[keep]
    factors, dense, parameters = [], [], 0
    for f in fixed:
        factors.append(np.unique(np.asarray(f.codes)[keep], return_inverse=True)[1])
    for name, b in zip(names, blocks):
        if name not in used:
            continue
        if isinstance(b, Categorical):
            factors.append(np.unique(np.asarray(b.codes)[keep], return_inverse=True)[1])
        else:
            dense.append(np.asarray(b, np.float64)[keep])
    sizes = [int(f.max(initial=-1)) + 1 for f in factors]
    parameters = (sizes[0] + sum(s - 1 for s in sizes[1:])) if factors else 1
    if not factors:
        factors = [np.zeros(len(keep), np.int64)]
    r = a1 / w
    within = _demean(np.column_stack([r, *dense, yk]), w, factors)
    r_t, x_t, y_t = within[:, 0], within[:, 1:-1], within[:, -1]
    pr = r - r_t  # the effects' fitted part of the group column
    p = 1 + x_t.shape[1]
    n = len(keep)
    k = p + parameters
    if n - k < 2:
        return RegressionGap(None, None, None, None, None, inference=None,
                             note=f"{n:,} records for {k} parameters: too few to estimate", **base)
    wr = w * r_t
    gram = np.empty((p, p))
    gram[0, 0] = float(a1 @ (1 - pr) ** 2 + (w - a1) @ pr ** 2)
    gram[0, 1:] = gram[1:, 0] = wr @ x_t
    gram[1:, 1:] = (x_t * w[:, None]).T @ x_t
    rhs = np.r_[wr @ y_t, (x_t * w[:, None]).T @ y_t]
    scale = 1 / np.sqrt(np.maximum(np.diag(gram), 1e-300))
    g = gram * scale[:, None] * scale[None, :]
    eig = np.linalg.eigvalsh(g)
    if eig[0] <= 1e-12 * eig[-1]:
        return RegressionGap(None, None, None, None, None, inference=None,
                             note="singular design: the group is a combination of the controls and effects", **base)
    inv = np.linalg.inv(g) * scale[:, None] * scale[None, :]
    beta = inv @ rhs
    gap = float(beta[0])
    fit_x = x_t @ beta[1:]
    e1, e0 = y_t - gap * (1 - pr) - fit_x, y_t + gap * pr - fit_x
    scores = np.column_stack([a1 * (1 - pr) * e1 - (w - a1) * pr * e0,
                              (a1 * e1 + (w - a1) * e0)[:, None] * x_t])
    codes, groups = np.arange(n), n  # each record its own cluster: HC1 by record
    if cluster is not None:
        levels = np.unique(np.asarray(cluster.codes)[keep], return_inverse=True)[1]
        if levels.max(initial=0) > 0:  # one cluster: no cluster-robust error exists, HC1
            codes, groups = levels, int(levels.max()) + 1
    u = inv[0] @ np.stack([np.bincount(codes, weights=scores[:, j], minlength=groups) for j in range(p)])
    clustered = groups < n
    se = float(np.sqrt(u @ u * groups / (groups - 1) * (n - 1) / (n - k)))
    dof = groups - 1 if clustered else n - k
    low, high, pv = _interval(gap, se, dof, confidence)
    base["clusters"] = groups if clustered else (1 if cluster is not None else 0)
    notes = [*des.notes, *([f"{int((~live).sum()):,} records with no probability of either group: no weight"]
                           if (~live).any() else [])]
    return RegressionGap(gap, se, low, high, pv, inference="CR1" if clustered else "HC1",
                         note="; ".join(notes) or None, **base)
