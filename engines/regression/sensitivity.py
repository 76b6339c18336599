"""Sensitivity of a regression estimate to an omitted variable, and the controlled linear
probability model it is applied to. Pure numpy (and scipy's t distribution), no engine state.

**Omitted-variable bias in partial R² terms** — Cinelli, C. & Hazlett, C. (2020), "Making sense
of sensitivity: extending omitted variable bias", JRSS-B 82(1), 39–67 (C&H below). For the
coefficient of a treatment D in ``Y ~ D + X`` (here: the group indicator in a denial regression)
with t-statistic ``t`` and residual degrees of freedom ``dof``:

* partial R² of D with Y given X: ``R²_{Y~D|X} = t² / (t² + dof)`` (C&H Sec. 3.3); partial
  Cohen's f² = ``t² / dof``, f = ``|t| / sqrt(dof)``;
* an omitted Z with partial R² ``r2dz_x`` with D (given X) and ``r2yz_dx`` with Y (given D, X)
  biases the estimate by ``|bias| = sqrt(r2yz_dx · r2dz_x / (1 − r2dz_x)) · se · sqrt(dof)``
  (C&H eq. 11–12) and the standard error of the adjusted estimate is
  ``se · sqrt((1 − r2yz_dx)/(1 − r2dz_x)) · sqrt(dof/(dof − 1))`` (C&H eq. 13);
* the robustness value RV_q: the partial R² a confounder needs with both D and Y to move the
  estimate by 100·q % (C&H eq. 18), and RV_{q,α}: to make it lose significance at level α
  (C&H eq. 19);
* benchmarks: a confounder kd times as strong as an observed covariate X_j in explaining D and
  ky times as strong in explaining Y (C&H Sec. 6.1, eq. 24 and Appendix B) — the bound every
  "would a factor as strong as DTI explain it away?" sentence rests on.

The functions follow sensemakr (R and its Python port PySensemakr 0.0.8, which the tests
cross-check to 1e-8 relative) where the paper leaves a choice: ``reduce=True`` (bias towards
zero), RV_{q,α}'s critical value at ``dof − 1`` degrees of freedom, the bound on r2yz_dx capped
at 1, the adjusted interval at ``dof`` degrees of freedom.

**E-value** — VanderWeele, T. J. & Ding, P. (2017), "Sensitivity analysis in observational
research: introducing the E-value", Ann. Intern. Med. 167(4), 268–274: the minimum strength of
association (risk-ratio scale) an unmeasured confounder needs with both exposure and outcome
to explain an observed risk ratio away.

**Controlled linear probability model** — :func:`controlled_lpm`: ``y ~ 1 + d + X`` by OLS from
blocked sums (the n × p design never exists beyond a block of rows), classical and HC1 standard
errors, the sensitivity of d's coefficient and its benchmarks against every control. The
sensitivity formulas are those of linear regression; for a denial decision they are applied to
the linear probability model on the same design, as practitioners do (and say so). The rows,
columns and degenerate-input checks (``engines.regression.design``) are shared with the
controlled denial logit, ``engines.regression.logit.controlled_logit``, so that both models fit
the same rows and the same columns.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import linalg
from scipy.stats import t as student_t

from aequum.engines.regression.absorb import cluster_variance
from aequum.engines.regression.design import Categorical, Design, column_names, design, fill, spans
from aequum.engines.regression.linear import linear_fit, outcome_cells
from aequum.engines.regression.wild import Bootstrap, WildSums, inference_kind, wcr_p_value, weights

__all__ = [
    "partial_r2", "partial_f2", "partial_f", "robustness_value", "group_partial_r2",
    "bias", "adjusted_estimate", "adjusted_se", "adjusted_t", "ovb_partial_r2_bound", "ovb_bounds",
    "e_value", "e_value_ci", "e_value_or", "Bound", "ControlSensitivity",
    "LPMResult", "controlled_lpm", "ALL_CONTROLS",
]

# The benchmark of a confounder as strong as every observed control together (Cinelli &
# Hazlett 2020, Sec. 6.1, benchmarking against a group of covariates). In lending the inputs
# a public record lacks — the credit history and score — predict the decision about as well as
# the recorded inputs together, so this is the benchmark that decides ``robust``.
ALL_CONTROLS = "the observed controls together"


def _out(x):
    """A 0-d result as a Python float, an array as it is."""
    x = np.asarray(x, dtype=np.float64)
    return float(x) if x.ndim == 0 else x


# -- C&H: partial R², f, robustness value -------------------------------------------------------

def partial_r2(t, dof):
    """Partial R² of a coefficient with the outcome given the other regressors, from its
    t-statistic: ``t² / (t² + dof)`` (C&H Sec. 3.3, eq. 5 read backwards)."""
    t = np.asarray(t, dtype=np.float64)
    return _out(t ** 2 / (t ** 2 + dof))


def partial_f2(t, dof):
    """Partial Cohen's f² of a coefficient: ``t² / dof`` = R²/(1 − R²) (C&H Sec. 4.1)."""
    return _out(np.asarray(t, dtype=np.float64) ** 2 / dof)


def partial_f(t, dof):
    """Partial Cohen's f: ``|t| / sqrt(dof)`` (C&H Sec. 4.1)."""
    return _out(np.abs(np.asarray(t, dtype=np.float64)) / np.sqrt(dof))


def robustness_value(t, dof, q: float = 1.0, alpha: float | None = None):
    """The robustness value of a coefficient with t-statistic ``t`` and ``dof`` residual
    degrees of freedom: the partial R² an omitted confounder needs with both the treatment and
    the outcome to reduce the estimate by ``100·q`` % (``alpha=None``), or to make the reduced
    estimate's (1 − alpha) interval reach it (``alpha`` given).

    ``alpha=None`` — RV_q, C&H eq. 18: with ``f_q = q·|t|/sqrt(dof)``,
    ``RV_q = ½ (sqrt(f_q⁴ + 4 f_q²) − f_q²)``.

    ``alpha`` given — RV_{q,α}, C&H eq. 19: with the critical
    ``f* = |t*_{α/2, dof−1}| / sqrt(dof − 1)`` and ``f_{q,α} = f_q − f*``: 0 when
    ``f_{q,α} ≤ 0`` (the interval already includes the reduced estimate), else
    ``½ (sqrt(f_{q,α}⁴ + 4 f_{q,α}²) − f_{q,α}²)``; except in the corner where the constraint
    R²_{Y~Z|D,X} ≤ 1 binds, ``f_q > 1/f*``, where the confounder needs
    ``(f_q² − f*²) / (1 + f_q²)`` — the case sensemakr (R ≥ 0.1.4, PySensemakr) handles, by the
    same condition. Values in [0, 1]; vectorised over ``t`` and ``dof``.
    """
    fq = q * np.abs(np.asarray(t, dtype=np.float64)) / np.sqrt(np.asarray(dof, dtype=np.float64))
    if alpha is None:
        return _out(0.5 * (np.sqrt(fq ** 4 + 4 * fq ** 2) - fq ** 2))
    dof1 = np.asarray(dof, dtype=np.float64) - 1
    f_crit = np.abs(student_t.ppf(alpha / 2, dof1)) / np.sqrt(dof1)
    fqa = fq - f_crit
    rv = 0.5 * (np.sqrt(fqa ** 4 + 4 * fqa ** 2) - fqa ** 2)
    with np.errstate(divide="ignore"):
        corner = (fqa > 0) & (fq > 1 / f_crit)
    rvx = (fq ** 2 - f_crit ** 2) / (1 + fq ** 2)
    return _out(np.where(fqa <= 0, 0.0, np.where(corner, rvx, rv)))


def group_partial_r2(f_statistic, p, dof):
    """Partial R² of a group of ``p`` regressors (a categorical control's dummies) with the
    outcome, from their joint F-statistic ``F = b' V⁻¹ b / p``: ``F·p / (F·p + dof)`` (C&H
    Sec. 6.1, sensemakr's ``group_partial_r2``); for ``p = 1`` it is :func:`partial_r2`."""
    fp = np.asarray(f_statistic, dtype=np.float64) * p
    return _out(fp / (fp + dof))


# -- C&H: bias, adjusted estimate, benchmarks -----------------------------------------------------

def bias(r2dz_x, r2yz_dx, se, dof):
    """The absolute bias an omitted Z with partial R² ``r2dz_x`` (with D given X) and
    ``r2yz_dx`` (with Y given D, X) causes: ``sqrt(r2yz_dx · r2dz_x / (1 − r2dz_x)) · se ·
    sqrt(dof)`` (C&H eq. 12, the bias factor times se·sqrt(dof))."""
    r2dz_x, r2yz_dx = np.asarray(r2dz_x, np.float64), np.asarray(r2yz_dx, np.float64)
    return _out(np.sqrt(r2yz_dx * r2dz_x / (1 - r2dz_x)) * se * np.sqrt(dof))


def adjusted_estimate(estimate, se, dof, r2dz_x, r2yz_dx):
    """The estimate had Z been included, the bias taken towards zero:
    ``sign(est)·(|est| − bias)`` (C&H eq. 12; sensemakr's ``reduce=True``)."""
    return _out(np.sign(estimate) * (np.abs(estimate) - bias(r2dz_x, r2yz_dx, se, dof)))


def adjusted_se(se, dof, r2dz_x, r2yz_dx):
    """The standard error had Z been included: ``se · sqrt((1 − r2yz_dx)/(1 − r2dz_x)) ·
    sqrt(dof/(dof − 1))`` (C&H eq. 13; one more parameter, one fewer degree of freedom)."""
    r2dz_x, r2yz_dx = np.asarray(r2dz_x, np.float64), np.asarray(r2yz_dx, np.float64)
    return _out(np.sqrt((1 - r2yz_dx) / (1 - r2dz_x)) * se * np.sqrt(dof / (dof - 1)))


def adjusted_t(estimate, se, dof, r2dz_x, r2yz_dx, h0: float = 0.0):
    """t-statistic of the adjusted estimate against ``h0`` (C&H Sec. 4.4)."""
    est = np.asarray(adjusted_estimate(estimate, se, dof, r2dz_x, r2yz_dx))
    with np.errstate(divide="ignore", invalid="ignore"):  # r2yz_dx = 1: no residual left, ±inf
        return _out((est - h0) / np.asarray(adjusted_se(se, dof, r2dz_x, r2yz_dx)))


def ovb_partial_r2_bound(r2dxj_x, r2yxj_dx, kd=1.0, ky=None):
    """The strength ``(r2dz_x, r2yz_dx)`` of a confounder Z ``kd`` times as strong as an
    observed covariate X_j in explaining D and ``ky`` times as strong in explaining Y (C&H Sec.
    6.1, eq. 24 with Appendix B; sensemakr's ``ovb_partial_r2_bound``), from X_j's partial R²
    with D given the other covariates (``r2dxj_x``) and with Y given D and the others
    (``r2yxj_dx``):

    ``r2dz_x = kd · r2dxj_x / (1 − r2dxj_x)``,
    ``r2zxj_xd = kd · r2dxj_x² / ((1 − kd·r2dxj_x)(1 − r2dxj_x))``,
    ``r2yz_dx = ((sqrt(ky) + sqrt(r2zxj_xd)) / sqrt(1 − r2zxj_xd))² · r2yxj_dx / (1 − r2yxj_dx)``,
    capped at 1. Where ``r2dz_x ≥ 1`` or ``r2zxj_xd ≥ 1`` no such confounder can exist (the
    multiplier is impossible: sensemakr stops there): NaN for both. Vectorised."""
    ky = kd if ky is None else ky
    r2dxj_x, r2yxj_dx = np.asarray(r2dxj_x, np.float64), np.asarray(r2yxj_dx, np.float64)
    kd, ky = np.asarray(kd, np.float64), np.asarray(ky, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r2dz_x = kd * r2dxj_x / (1 - r2dxj_x)
        r2zxj_xd = kd * r2dxj_x ** 2 / ((1 - kd * r2dxj_x) * (1 - r2dxj_x))
        impossible = ~((r2dz_x < 1) & (r2zxj_xd >= 0) & (r2zxj_xd < 1))
        r2yz_dx = ((np.sqrt(ky) + np.sqrt(r2zxj_xd)) / np.sqrt(1 - r2zxj_xd)) ** 2 * r2yxj_dx / (1 - r2yxj_dx)
    r2yz_dx = np.minimum(r2yz_dx, 1.0)
    return _out(np.where(impossible, np.nan, r2dz_x)), _out(np.where(impossible, np.nan, r2yz_dx))


def ovb_bounds(estimate, se, dof, r2dxj_x, r2yxj_dx, kd=1.0, ky=None, alpha: float = 0.05) -> dict:
    """The benchmark bound of :func:`ovb_partial_r2_bound` and what it does to the estimate
    (sensemakr's ``ovb_bounds``): ``r2dz_x``, ``r2yz_dx``, ``bias``, ``adjusted_estimate``,
    ``adjusted_se``, ``adjusted_t`` and the adjusted (1 − alpha) interval
    ``adjusted_ci_low/high`` at ``dof`` degrees of freedom. NaN where the multiplier is
    impossible."""
    r2dz_x, r2yz_dx = ovb_partial_r2_bound(r2dxj_x, r2yxj_dx, kd, ky)
    est = adjusted_estimate(estimate, se, dof, r2dz_x, r2yz_dx)
    ase = adjusted_se(se, dof, r2dz_x, r2yz_dx)
    crit = abs(student_t.ppf(alpha / 2, dof))
    return {"r2dz_x": r2dz_x, "r2yz_dx": r2yz_dx, "bias": bias(r2dz_x, r2yz_dx, se, dof),
            "adjusted_estimate": est, "adjusted_se": ase,
            "adjusted_t": adjusted_t(estimate, se, dof, r2dz_x, r2yz_dx),
            "adjusted_ci_low": _out(np.asarray(est) - crit * np.asarray(ase)),
            "adjusted_ci_high": _out(np.asarray(est) + crit * np.asarray(ase))}


# -- VanderWeele & Ding: E-value ----------------------------------------------------------------

def e_value(rr):
    """E-value of a risk ratio (VanderWeele & Ding 2017, eq. in "Computing the E-value"):
    ``E = RR + sqrt(RR·(RR − 1))``, with ``1/RR`` for a protective ``RR < 1``; 1 for RR = 1.
    NaN for a ratio that is not positive. Vectorised."""
    rr = np.asarray(rr, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(rr < 1, 1 / rr, rr)
        e = r + np.sqrt(r * (r - 1))
    return _out(np.where(rr > 0, e, np.nan))


def e_value_ci(low, high):
    """E-value of a risk ratio's confidence interval (VanderWeele & Ding 2017): 1 when the
    interval includes 1, else the E-value of the limit nearer 1 (``low`` when RR > 1, ``high``
    when RR < 1). Vectorised."""
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    near = np.where(low > 1, low, high)
    return _out(np.where((low <= 1) & (high >= 1), 1.0, e_value(near)))


def e_value_or(odds_ratio, low=None, high=None, common: bool = True):
    """E-values of an odds ratio and its interval ``(point, ci)`` (VanderWeele & Ding 2017,
    Table): for a common outcome (> 15 %) the risk ratio is approximated by ``sqrt(OR)`` (and
    each limit likewise); for a rare outcome the odds ratio approximates the risk ratio. ``ci``
    is None without an interval."""
    convert = np.sqrt if common else (lambda x: np.asarray(x, np.float64))
    point = e_value(convert(np.asarray(odds_ratio, np.float64)))
    if low is None or high is None:
        return point, None
    return point, e_value_ci(convert(np.asarray(low, np.float64)), convert(np.asarray(high, np.float64)))


# -- the controlled linear probability model ----------------------------------------------------

@dataclass(frozen=True)
class Bound:
    """A confounder ``kd`` (= ``ky``) times as strong as one control (C&H Sec. 6.1)."""

    multiplier: float
    r2dz_x: float | None
    r2yz_dx: float | None
    bias: float | None
    adjusted_estimate: float | None
    adjusted_se: float | None
    adjusted_t: float | None
    adjusted_ci_low: float | None
    adjusted_ci_high: float | None
    note: str | None = None


@dataclass(frozen=True)
class ControlSensitivity:
    """One control (a numeric column, or a categorical's dummies as one block): its partial R²
    with d given the other controls (``r2dxj_x``, from ``d ~ 1 + X``) and with y given d and the
    other controls (``r2yxj_dx``, from ``y ~ 1 + d + X``), each via t² (one column) or the
    block's F, and the bounds at each multiplier."""

    name: str
    columns: int
    r2dxj_x: float | None
    r2yxj_dx: float | None
    bounds: tuple[Bound, ...]


@dataclass(frozen=True)
class LPMResult:
    """:func:`controlled_lpm`'s result. Inference (``se``, ``t``, interval, ``p_value``) and the
    sensitivity use the classical standard error, the one C&H's formulas are derived for (and
    sensemakr uses); ``se_robust`` (HC1) and ``p_value_robust`` stand beside them. Estimates are
    None where the note says why."""

    n: int
    dropped_null: int
    n_treated: int
    n_control: int
    raw_difference: float | None
    estimate: float | None
    se: float | None
    se_robust: float | None
    t: float | None
    dof: int | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    p_value: float | None
    p_value_robust: float | None
    partial_r2: float | None
    rv_q: float | None
    rv_qa: float | None
    r_squared: float | None
    controls: tuple[str, ...]
    sensitivity: tuple[ControlSensitivity, ...] = ()
    robust: bool | None = None
    strongest_control: str | None = None
    note: str | None = None
    intercept: float | None = None
    coefficients: dict[str, np.ndarray] = field(default_factory=dict)
    se_cluster: float | None = None      # cluster-robust (CR1), when clusters are given
    clusters: int = 0
    fixed_effects: tuple[str, ...] = ()
    absorbed: int = 1                    # the fixed effects' parameters (1: the intercept alone)
    # the test of d as the grouping allows (:func:`inference_kind`): its p-value and interval, and
    # the standard error and degrees of freedom of that interval (what a bound on d's bias scales)
    inference: str | None = None
    test_se: float | None = None
    test_dof: int | None = None
    test_p_value: float | None = None
    test_ci_low: float | None = None
    test_ci_high: float | None = None
    bootstrap_draws: int = 0             # the wild cluster bootstrap's draws (0: none)
    bootstrap_weights: str | None = None  # "rademacher" / "webb", "… (all)" when enumerated
    separated_rows: int = 0              # rows of levels with one outcome dropped (engines.regression.design)
    separated: tuple[str, ...] = ()

    def bound(self, control: str, multiplier: float = 1.0) -> Bound | None:
        """The bound of one control at one multiplier (None when not computed)."""
        for c in self.sensitivity:
            if c.name == control:
                return next((b for b in c.bounds if b.multiplier == multiplier), None)
        return None


def _none(x) -> float | None:
    x = float(x)
    return None if not np.isfinite(x) else x


def _block_r2(coef: np.ndarray, inv: np.ndarray, cols: slice, s2: float, dof: int) -> float:
    """Partial R² of the regressors ``cols``: F·p = b' V⁻¹ b with V = s²·inv[cols, cols]."""
    b = coef[cols]
    v = inv[cols, cols] * s2
    try:
        fp = float(b @ linalg.solve(v, b, assume_a="pos"))
    except (linalg.LinAlgError, ValueError):  # not numerically positive definite: least squares
        fp = float(b @ linalg.lstsq(v, b)[0])
    return float(group_partial_r2(fp, 1, dof))


def controlled_lpm(y, d, x_blocks: Sequence[np.ndarray | Categorical], names: Sequence[str],
                   confidence: float = 0.95, *, multipliers: Sequence[float] = (1.0, 2.0, 3.0),
                   robust_multiplier: float = 1.0, rows: np.ndarray | None = None,
                   block_rows: int | None = None, held: int = 0, fixed: Sequence[Categorical] = (),
                   fixed_names: Sequence[str] = (), cluster: Categorical | None = None,
                   bootstrap: Bootstrap | None = None, outcome: tuple[str, str] = ("y = 0", "y = 1"),
                   prepared: Design | None = None) -> LPMResult:
    """The linear probability model ``y ~ 1 + d + X`` (``+ fixed effects``) by OLS and the
    sensitivity of d's coefficient to an omitted confounder, benchmarked against every control.

    ``y``, ``d``: 1-D arrays (float with NaN for null, or ints); ``x_blocks``: one entry per
    control, named by ``names`` — a 1-D numeric array (NaN = null) or a :class:`Categorical`
    (its dummies, one block); ``rows``: the rows to use (default all), taken a block at a time.
    Rows with a null in y, d or any control are dropped and counted (``dropped_null``).
    ``fixed``/``fixed_names``: fixed effects absorbed, never expanded (lender, market:
    ``engines.regression.absorb``); their levels that fit their rows exactly are dropped with a
    note. ``cluster``: the cluster of each row, for the cluster-robust ``se_cluster`` (CR1).
    With a 0/1 ``y`` the rows of categorical levels with one outcome are dropped too
    (``engines.regression.design``; ``outcome`` names y = 0 and y = 1 in the note).

    The test of d (``inference``, ``test_p_value``, ``test_ci_*``; ``engines.regression.wild``):
    classical without a cluster; HC1 (t, n − k dof) with one cluster; CR1 with t(G − 1) from
    ``bootstrap.min_clusters`` clusters; between, the wild cluster restricted bootstrap's p-value
    (its per-cluster sums from the residuals' pass) with the CR1 t(G − 1) interval.

    Computed from sums: the column means, then the cross products of ``[d, X, y]`` with every
    fixed effect partialled out (the within Gram matrix; without fixed effects, the centred one;
    ``engines.regression.linear.linear_fit``, from the numeric columns row by row and the dummies' sums by cell:
    ``engines.regression.cells``), then the residuals' sums (the HC1 and cluster meats of d) — no
    n × p matrix (the wild bootstrap's sums read the dense rows a block of ``block_rows`` at a time).
    ``prepared``: the design (:func:`engines.regression.design.design`) when the caller has it. Centring (Frisch–Waugh) and a
    diagonal equilibration keep the solve accurate for raw incomes and property values.

    Returned (:class:`LPMResult`): d's estimate, classical and HC1 (n/(n−k)) standard errors,
    t, dof = n − k (k: d, the controls' columns, the fixed effects' levels with the intercept),
    the ``confidence`` interval and two-sided p-values, d's partial R², RV_1 and RV_{1,α}
    (α = 1 − confidence), R² of the model; per control its partial R² with d (from
    ``d ~ 1 + X``) and with y (from the outcome model), each via t² or the block's F, and the
    benchmark bounds at ``kd = ky =`` each multiplier (1 always computed), and the same for the
    controls taken together as one block (:data:`ALL_CONTROLS`, when there are two or more).
    The last ``held`` blocks are held but are no benchmarks (the other protected groups: the
    comparison is made within them, and a confounder is measured against the recorded inputs);
    they are not among the controls taken together either; nor are the fixed effects.
    ``robust``: the estimate keeps its sign and its adjusted interval excludes 0 under a
    confounder ``robust_multiplier`` (k) times as strong as each control and as all of them
    together (a bound that is impossible — the benchmark explains half of d or more — counts
    against); None without controls. ``strongest_control``: the benchmark whose bound at that k
    moves the estimate most.
    The joint benchmark is what separates a fair lender from a penalising one on the public
    LAR: on the generated worlds (``aequum bench validity``) the omitted credit factor is
    stronger than any single recorded input but not than all of them together.

    Degenerate input never raises: one value of y, d constant, fewer rows than parameters
    + 2, a singular design (collinear controls, or d a combination of them), or no residual
    variance give a ``note`` and null estimates; a control with no variance among the rows is
    dropped with a note.
    """
    alpha = 1 - confidence
    multipliers = tuple(dict.fromkeys([1.0, float(robust_multiplier), *[float(k) for k in multipliers]]))
    y = np.asarray(y)
    d = np.asarray(d)
    boot = bootstrap or Bootstrap()
    des = prepared or design(y, d, x_blocks, names, rows, block_rows, fixed, fixed_names, cluster, outcome)
    n, dropped, size, notes = des.n, des.dropped, des.size, list(des.notes)
    n_treated, n_control, raw = des.n_treated, des.n_control, des.raw
    effects = des.effects

    def empty(note: str, used: Sequence[str] | None = None) -> LPMResult:
        return LPMResult(n, dropped, n_treated, n_control, raw, None, None, None, None, None, None,
                         None, confidence, None, None, None, None, None, None,
                         tuple(names if used is None else used),
                         note="; ".join([*notes, note]), fixed_effects=tuple(fixed_names),
                         separated_rows=des.separated_rows, separated=des.separated)

    if des.failure is not None:
        return empty(des.failure, des.used)
    blocks, p, used = des.blocks, des.p, des.used  # d and the controls' columns
    k = des.parameters                            # with the fixed effects' (the intercept's) own
    dof = n - k
    if dof < 2:
        return empty(f"{n:,} rows for {k} parameters: too few to estimate (needs {k + 2} or more)", used)
    means = des.means
    y_mean = des.y_sum / n

    # -- pass 2: cross products of [Z, y], the fixed effects partialled out -------------------
    fit = linear_fit(des)
    centred, tss, cells, normal, solver = fit.centred, fit.tss, fit.cells, fit.normal, fit.solver
    col = fit.outcome  # y's column among the normal equations' (after Z's; of several outcomes, its own)
    if cells is None:  # (the logit ran first and let them go, the centred outcome with them: the same bits again)
        cells = outcome_cells([des])
        centred, col = cells.zt[-1], p
    gram, zy, yy, scale, g = fit.gram, fit.zy, fit.yy, fit.scale, fit.g
    if fit.singular:
        return empty(fit.singular, used)
    g_inv, coef = fit.g_inv, fit.coef
    gx = g[1:, 1:]
    gx_inv = linalg.inv(gx) * scale[1:, None] * scale[None, 1:] if p > 1 else np.zeros((0, 0))
    coef_d = gx_inv @ gram[1:, 0] if p > 1 else np.zeros(0)
    rss = float(yy - zy @ coef)
    rss_d = float(gram[0, 0] - gram[1:, 0] @ coef_d)
    if rss <= 1e-12 * tss:
        return empty("the group and controls explain every outcome exactly: no residual variance", used)

    # -- pass 3: residuals; the HC1 and cluster meats of d ------------------------------------
    z_part = solver.sub(p)                            # the system of Z alone (y's column left out)
    _, gs1 = z_part.reduce(normal.a[:p, col], normal.bs[:, col], normal.bb[:, col])
    s_y, b_y = z_part.back(coef, gs1, normal.bb[:, col])     # y's fixed effects
    a = g_inv[:, 0]  # d's row of the inverse: β_d − b_d = Σ_i uᵢ eᵢ with uᵢ = (a, a_s, a_b)'xᵢ
    a_s, a_b = z_part.back(a, np.zeros_like(gs1), np.zeros_like(normal.bb[:, col]))
    by_cluster = np.zeros(des.clusters)
    estimate = float(coef[0])
    kind = inference_kind(cluster is not None, des.clusters, boot, "WCR-bootstrap")
    wild = WildSums(des.clusters, p, effects) if kind == "WCR-bootstrap" else None
    pad = np.zeros(cells.p - p)  # the outcomes' columns, out of these products
    e = cells.eta(np.concatenate([coef, pad]), s_y, b_y)
    np.subtract(centred, e, out=e)  # (the rows' arrays made in place: two of them at a time, not four)
    u = cells.eta(np.concatenate([a, pad]), a_s, a_b)
    if des.cluster is not None:  # Σ_g of e·u, added row by row in their order (bincount's sums), a block at a time
        for pos, _ in spans(n, size):
            np.add.at(by_cluster, des.cluster[pos], e[pos] * u[pos])
    if wild is None:  # e and u are not read again: squared where they are
        meat = float(np.multiply(e, e, out=e) @ np.multiply(u, u, out=u))
    else:
        meat = float((e * e) @ (u * u))
    if wild is not None:  # the restricted residuals ũ = e + β d̃ (d̃ = u / (Z'Z)⁻¹_dd), a block of dense rows at a time
        buf = np.empty((min(size, n), p))
        for pos, idx in spans(n, size):
            z = fill(buf[:idx.stop - idx.start], idx, des)
            wild.add(z, u[pos], e[pos] + estimate * u[pos] / g_inv[0, 0], des.cluster[pos], pos)
    s2 = rss / dof
    se = float(np.sqrt(s2 * g_inv[0, 0]))
    se_robust = float(np.sqrt(meat * n / (n - k)))
    se_cluster = (float(np.sqrt(cluster_variance(by_cluster, n, k))) if des.cluster is not None
                  and des.clusters > 1 else None)
    tval = estimate / se
    crit = float(student_t.ppf(1 - alpha / 2, dof))
    p_value = float(2 * student_t.sf(abs(tval), dof))
    p_robust = float(2 * student_t.sf(abs(estimate / se_robust), dof)) if se_robust > 0 else None
    test = {"inference": kind}
    if kind == "classical":
        test.update(test_se=se, test_dof=dof, test_p_value=p_value, test_ci_low=estimate - crit * se,
                    test_ci_high=estimate + crit * se)
    elif kind == "HC1":
        test.update(test_se=se_robust, test_dof=dof, test_p_value=p_robust, test_ci_low=estimate - crit * se_robust,
                    test_ci_high=estimate + crit * se_robust)
    elif se_cluster is not None and se_cluster > 0:  # CR1, t(G − 1); or the bootstrap's p beside its interval
        crit_g = float(student_t.ppf(1 - alpha / 2, des.clusters - 1))
        test.update(test_se=se_cluster, test_dof=des.clusters - 1,
                    test_p_value=float(2 * student_t.sf(abs(estimate / se_cluster), des.clusters - 1)),
                    test_ci_low=estimate - crit_g * se_cluster, test_ci_high=estimate + crit_g * se_cluster)
        if wild is not None:
            w, wkind, enumerated = weights(des.clusters, boot)
            test.update(test_p_value=wcr_p_value(*wild.pieces(z_part, g_inv), w)[0], bootstrap_draws=len(w),
                        bootstrap_weights=wkind + (" (all)" if enumerated else ""))

    # -- sensitivity and benchmarks ----------------------------------------------------------
    dof_d = dof + 1  # d ~ X (+ fixed effects): one parameter fewer
    s2_d = rss_d / dof_d
    sens = []
    held_names = set(names[len(names) - held:]) if held else set()
    inputs = [b for b in blocks if b.name not in held_names]
    benchmarks = [(b.name, b.start, b.stop) for b in inputs]
    if len(inputs) > 1:  # the controls as one block: a confounder as strong as all of them together
        benchmarks.append((ALL_CONTROLS, inputs[0].start, inputs[-1].stop))
    for name, start, stop in benchmarks:
        cols = slice(start, stop)
        r2y = _block_r2(coef, g_inv, cols, s2, dof)
        r2d = _block_r2(coef_d, gx_inv, slice(start - 1, stop - 1), s2_d, dof_d) if s2_d > 0 else 1.0
        found = ovb_bounds(estimate, se, dof, r2d, r2y, np.array(multipliers), alpha=alpha)
        bounds = []
        for i, k in enumerate(multipliers):
            if np.isnan(found["r2dz_x"][i]):
                bounds.append(Bound(k, None, None, None, None, None, None, None, None,
                                    note=f"no confounder {k:g}× as strong as {name} can exist "
                                         f"(it would explain all of the group's residual variance)"))
            else:
                bounds.append(Bound(k, *(_none(found[c][i]) for c in (
                    "r2dz_x", "r2yz_dx", "bias", "adjusted_estimate", "adjusted_se", "adjusted_t",
                    "adjusted_ci_low", "adjusted_ci_high"))))
        sens.append(ControlSensitivity(name, stop - start, r2d, r2y, tuple(bounds)))

    robust = strongest = None
    if sens:
        at_k = [c.bounds[multipliers.index(float(robust_multiplier))] for c in sens]
        robust = all(bd.adjusted_estimate is not None and np.sign(bd.adjusted_estimate) == np.sign(estimate)
                     and estimate != 0 and (bd.adjusted_ci_low > 0 or bd.adjusted_ci_high < 0) for bd in at_k)
        moved = [np.inf if bd.bias is None else bd.bias for bd in at_k]
        strongest = sens[int(np.argmax(moved))].name
    else:
        notes.append("no controls: nothing to benchmark a confounder against")

    names_out = column_names(blocks)
    # classical errors of every coefficient of y; the intercept's, s²/n + m'V m in the centred
    # design (m the columns' means), where no fixed effect absorbs it
    v_coef = s2 * g_inv
    coefficients = {"y": coef, "d": coef_d, "columns": np.array(names_out, dtype=object),
                    "se": np.sqrt(np.diag(v_coef)),
                    "intercept_se": None if effects.names else float(np.sqrt(s2 / n + means @ v_coef @ means))}
    return LPMResult(
        n=n, dropped_null=dropped, n_treated=n_treated, n_control=n_control, raw_difference=raw,
        estimate=estimate, se=se, se_robust=se_robust, t=tval, dof=dof,
        ci_low=estimate - crit * se, ci_high=estimate + crit * se, confidence=confidence,
        p_value=p_value, p_value_robust=p_robust, partial_r2=float(partial_r2(tval, dof)),
        rv_q=float(robustness_value(tval, dof)), rv_qa=float(robustness_value(tval, dof, 1.0, alpha)),
        r_squared=1 - rss / tss, controls=tuple(used), sensitivity=tuple(sens), robust=robust,
        strongest_control=strongest, note="; ".join(notes) or None,
        intercept=float(y_mean - means @ coef + b_y[0]) if not effects.names else None,
        coefficients=coefficients, se_cluster=se_cluster, clusters=des.clusters,
        fixed_effects=tuple(effects.names), absorbed=effects.parameters, separated_rows=des.separated_rows,
        separated=des.separated, **test)

