"""The controlled denial logit ``logit P(y = 1) = β₀ + β_d·d + X β_X`` by maximum likelihood from
blocked sums — the examiner's standard number (docs/fair-lending.md, "Controlled denial regression":
the odds ratio per group with its interval and the average marginal effect in points).

Why beside the linear probability model (``engines.regression.sensitivity.controlled_lpm``): a lender that
denies when a linear score of the applicant's inputs plus noise passes a threshold has a denial
probability that is a sigmoid of that score, not a line. Where the groups' inputs differ, the
LPM's best linear fit leaves part of the sigmoid's curvature on the group indicator — a
significant group residual on a lender with no discrimination (tests/test_logit.py shows one).
The logit's link has the right shape, so on records holding every input of the decisions its
group coefficient estimates the direct effect without that artefact.

**Fit** — Newton–Raphson (equivalently IRLS) for the logistic log-likelihood
``ℓ(β) = Σ yᵢηᵢ − log(1 + e^{ηᵢ})``, ``η = Xβ`` (McCullagh & Nelder 1989, *Generalized Linear
Models*, 2nd ed., Sec. 4.4; Agresti 2013, *Categorical Data Analysis*, 3rd ed., Sec. 4.6):
gradient ``X'(y − p)``, Hessian ``−X'WX`` with ``W = diag(p(1 − p))``, step ``(X'WX)⁻¹X'(y − p)``,
halved while the log-likelihood does not improve (a step longer than 2 in the standardised
parameters first shortened to 2: far from the optimum a nearly flat direction, a rare category or a small
lender's level, can propose a step of thousands; capped, the HMDA fit takes 9 iterations, not 15). Both sums are accumulated
in float64 from the numeric columns row by row and the dummies' and fixed effects' sums by cell
(``engines.regression.cells``): no n × p matrix. Newton starts from the linear model's slopes on
the same design as log-odds (Amemiya 1981, "Qualitative response models: a survey", J. Econ.
Lit. 19(4): a logit slope ≈ an LPM slope / (r(1 − r)); WARM of it), from zero when that does not
converge. The columns are centred and scaled to unit
standard deviation (the intercept absorbs the centring) and the Hessian is solved after a
diagonal (Jacobi) equilibration, as ``controlled_lpm`` does for accuracy with raw incomes and
property values. Converged when the largest step in those standardised parameters is below
1e-10; at most 50 iterations.

**Separation** — Albert, A. & Anderson, J. A. (1984), "On the existence of maximum likelihood
estimates in logistic regression models", Biometrika 71(1), 1–10: when a combination of the
regressors predicts the outcome perfectly for some rows (complete or quasi-complete separation)
the likelihood has no maximum and a coefficient runs to infinity. A level of a categorical
control (or of a fixed effect) whose rows all have one outcome is dropped with its rows before
the fit, as Stata's ``logit`` and fixest's ``feglm`` do (``engines.regression.design``:
``separated_rows``, ``separated``). Any other separation (a continuous control, the group) is
detected as a Hessian that becomes singular, a fit stopped as diverging (:func:`_newton`: the
largest |η| beyond 12 and rising every step), or no convergence with fitted probabilities at
0 or 1 (|η| > 23: within 1e-10) for some rows; the result is then a note and null estimates
(the diverging coefficient named).

**Inference** — the classical (inverse observed information) covariance; Wald z, two-sided
normal p-value, interval ``β ± z_{1−α/2}·se``; with a cluster (``inference``;
``engines.regression.wild``): the sandwich ``H⁻¹(Σ_g s_g s_g')H⁻¹`` with the CR1 factor from
``min_clusters`` clusters, over the rows with the HC1 factor n/(n − k) when there is one cluster,
and between, the score bootstrap's p (Kline & Santos 2012: the logit refitted without d, from
the fit's own point) beside the CR1 interval with t(G − 1) critical values; the odds ratio ``exp(β_d)`` with ``exp`` of the
limits. The average marginal effect of d as a discrete change, ``(1/n) Σᵢ Λ(ηᵢ¹) − Λ(ηᵢ⁰)`` with
ηᵢ¹ and ηᵢ⁰ the linear predictor at d = 1 and d = 0 (Agresti 2013, Sec. 5.1.4; statsmodels'
``get_margeff(at="overall", dummy=True)``), with its delta-method standard error
``sqrt(G'VG)``, ``G = (1/n) Σᵢ λ(ηᵢ¹)xᵢ¹ − λ(ηᵢ⁰)xᵢ⁰`` (λ = Λ(1 − Λ)). The E-value of the odds
ratio and of its interval's limit nearer 1 (VanderWeele & Ding 2017; ``e_value_or``): a common
outcome (a rate above 15 %) converts the odds ratio to a risk ratio by its square root.

Inputs, null handling, categorical dummies and the degenerate cases are those of
``controlled_lpm`` (the design in ``engines.regression.design``): the two models fit the same rows
and the same columns.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import linalg
from scipy.special import expit
from scipy.stats import norm
from scipy.stats import t as student_t

from aequum.engines.regression.absorb import Normal, cluster_variance
from aequum.engines.regression.cells import Cells
from aequum.engines.regression.design import Categorical, Design, column_names, design
from aequum.engines.regression.linear import linear_fit
from aequum.engines.regression.passes import Executor
from aequum.engines.regression.sensitivity import e_value_or
from aequum.engines.regression.wild import Bootstrap, inference_kind, score_p_value, weights

__all__ = ["LogitResult", "controlled_logit", "MAX_ITERATIONS", "STEP_TOLERANCE"]

MAX_ITERATIONS = 50
STEP_TOLERANCE = 1e-10   # the largest Newton step, in standardised parameters, at convergence
MAX_STEP = 2.0           # a longer Newton step is shortened to this before its halving
EXTREME = 23.0           # |η| beyond which a fitted probability is within 1e-10 of 0 or 1
RUNAWAY = 12.0           # |η| beyond which (within 6e-6 of 0 or 1) a rise every step is divergence
RISE, RISES = 0.5, 8     # ... a rise of the largest |η| by 0.5 or more in 8 steps in a row
LEVEL_STEPS = 2          # the levels' Newton steps of a start from a related fit (:func:`_level_start`)
WARM = 0.6               # the share of the linear model's slopes (as log-odds) a fit starts from
COMMON = 0.15            # an outcome rate above this is common (E-value: RR ≈ sqrt(OR))
_HALVINGS = 30


@dataclass(frozen=True)
class LogitResult:
    """:func:`controlled_logit`'s result: d's coefficient (log-odds), its classical standard
    error, z, two-sided p (normal), interval; the odds ratio and its interval; the average
    marginal effect of d (discrete change 0 → 1, probability scale) with its delta-method
    standard error and interval; the E-values; the fit's state. Estimates are None where the
    note says why. ``coefficients``: every coefficient in the original units — ``columns``
    (``const``, ``d``, each control's columns as ``controlled_lpm`` names them), ``coef``,
    ``se``."""

    n: int
    dropped_null: int
    n_treated: int
    n_control: int
    events: int                   # rows with y = 1
    coefficient: float | None
    se: float | None
    z: float | None
    p_value: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    odds_ratio: float | None
    or_ci_low: float | None
    or_ci_high: float | None
    ame: float | None
    ame_se: float | None
    ame_ci_low: float | None
    ame_ci_high: float | None
    e_value: float | None
    e_value_ci: float | None
    common_outcome: bool | None   # the outcome rate exceeds 15 %: E-values via sqrt(OR)
    converged: bool | None
    iterations: int
    log_likelihood: float | None
    controls: tuple[str, ...]
    separation: bool = False
    note: str | None = None
    intercept: float | None = None
    coefficients: dict[str, np.ndarray] = field(default_factory=dict)
    fixed_effects: tuple[str, ...] = ()
    clusters: int = 0                     # clusters of the cluster-robust errors (0: none)
    se_classical: float | None = None     # d's classical standard error (``se`` is the cluster one when clustered)
    ame_se_classical: float | None = None
    se_cluster: float | None = None
    ame_se_cluster: float | None = None
    inference: str | None = None          # classical, HC1, CR1, score-bootstrap (engines.regression.wild)
    bootstrap_draws: int = 0
    bootstrap_weights: str | None = None
    separated_rows: int = 0               # rows of levels with one outcome dropped (engines.regression.design)
    separated: tuple[str, ...] = ()


def _solve(h: np.ndarray, rhs: np.ndarray) -> np.ndarray | None:
    """``h⁻¹ rhs`` through a Cholesky factor of the Jacobi-equilibrated ``h`` (``rhs`` a vector
    or a matrix); None when ``h`` is not numerically positive definite (a diagonal entry not
    positive, the factorisation failing, or a reciprocal condition number below 1e-14)."""
    diag = np.diag(h)
    if not np.all(np.isfinite(h)) or np.any(diag <= 0):
        return None
    s = 1 / np.sqrt(diag)
    he = h * s[:, None] * s[None, :]
    eig = np.linalg.eigvalsh(he)
    if eig[0] <= 1e-14 * eig[-1]:
        return None
    try:
        factor = linalg.cho_factor(he)
    except linalg.LinAlgError:
        return None
    scaled = rhs * (s if rhs.ndim == 1 else s[:, None])
    out = linalg.cho_solve(factor, scaled)
    return out * (s if rhs.ndim == 1 else s[:, None])


@dataclass
class _Fit:
    theta: np.ndarray
    fe_s: np.ndarray
    fe_b: np.ndarray
    ll: float
    grad: tuple
    info: Normal
    extreme: int
    iterations: int
    last_step: np.ndarray
    converged: bool = False
    singular: bool = False
    stalled: bool = False
    diverging: bool = False


def _newton(evaluate, theta, fe_s, fe_b, g_solve) -> _Fit:
    """Newton–Raphson with step-halving from ``(θ, s, b)`` (the module docstring); ``g_solve``
    solves the dense part of each step (:func:`_solve`, or :func:`_restricted_solve` to keep
    d's coefficient at 0). Stops early as ``diverging`` when, with fitted probabilities beyond
    |η| = RUNAWAY, the largest |η| rose by RISE or more in each of RISES steps in a row: under
    separation a coefficient runs to infinity, gaining about one unit of η a step (quasi-complete)
    or more (complete), while a fit with a maximum converges quadratically once near it (a
    maximum that far out, |η| growing by 0.5 for 8 steps beyond 12, is one whose data are
    all but separated)."""
    ll, grad, info, extreme, top = evaluate(theta, fe_s, fe_b)
    fit = _Fit(theta, fe_s, fe_b, ll, grad, info, extreme, 0, np.zeros(len(theta)))
    rises = 0
    while fit.iterations < MAX_ITERATIONS:
        solver = fit.info.solver()
        step = None if solver is None else solver.solve(*fit.grad, g_solve)
        if step is None:
            fit.singular = True
            break
        fit.iterations += 1
        # the full step, then halves of it until the log-likelihood does not fall (beyond the
        # rounding of its sum); only the accepted point's gradient and information are summed.
        # A step longer than MAX_STEP (a nearly flat direction far from the optimum: a small
        # lender's level whose fitted rates run towards 0 or 1) is first shortened to it, so
        # the halving starts near a step that can be accepted
        dx, ds, db = step
        longest = max(np.max(np.abs(dx), initial=0), np.max(np.abs(ds), initial=0), np.max(np.abs(db), initial=0))
        if longest < STEP_TOLERANCE:  # converged: the step left is below the tolerance, the point kept
            fit.last_step = dx
            fit.converged = True
            break
        if longest > MAX_STEP:
            dx, ds, db = (v * (MAX_STEP / longest) for v in (dx, ds, db))
        t, found = 1.0, evaluate(fit.theta + dx, fit.fe_s + ds, fit.fe_b + db)
        while not (np.isfinite(found[0]) and found[0] >= fit.ll - 1e-12 * max(1.0, abs(fit.ll))):
            t /= 2
            if t < 2.0 ** -_HALVINGS:
                fit.stalled = True
                break
            found = evaluate(fit.theta + t * dx, fit.fe_s + t * ds, fit.fe_b + t * db, full=False)
        if fit.stalled:
            break
        if t < 1:
            found = evaluate(fit.theta + t * dx, fit.fe_s + t * ds, fit.fe_b + t * db)
        fit.last_step = t * dx
        fit.theta, fit.fe_s, fit.fe_b = fit.theta + t * dx, fit.fe_s + t * ds, fit.fe_b + t * db
        previous = top
        fit.ll, fit.grad, fit.info, fit.extreme, top = found
        rises = rises + 1 if top >= previous + RISE else 0
        if rises >= RISES and top > RUNAWAY:
            fit.diverging = True
            break
    return fit


def _restricted_solve(g: np.ndarray, rhs: np.ndarray) -> np.ndarray | None:
    """The dense part of a Newton step with d's coefficient held at 0: the system without d's
    row and column (the Schur complement of a sub-block is the sub-block of the complement)."""
    out = _solve(g[1:, 1:], rhs[1:])
    return None if out is None else np.concatenate([[0.0], out])


def _restricted_scores(evaluate, start, cells: Cells, effects, y, cluster, clusters) -> np.ndarray | None:
    """Each cluster's score of d at the logit without d, d partialled on the other regressors
    under that fit's information (Kline & Santos 2012: ``Σ_{i∈g} d̃ᵢ(yᵢ − p̃ᵢ)`` up to a common
    factor, from the d row of the inverse information), for the score bootstrap
    (``engines.regression.wild``); None when that fit has no maximum."""
    fit = _newton(evaluate, *start, _restricted_solve)
    solver = fit.info.solver() if fit.converged else None
    if solver is None:
        return None
    unit = np.zeros(len(fit.theta))
    unit[0] = 1.0
    h = solver.solve(unit, np.zeros(effects.small), np.zeros(effects.sizes[0]), _solve)
    if h is None:
        return None
    r = y - expit(cells.eta(fit.theta, fit.fe_s, fit.fe_b))
    return np.bincount(cluster, weights=r * cells.eta(*h), minlength=clusters)


def _level_start(cells: Cells, theta: np.ndarray, y: np.ndarray, effects, b: np.ndarray,
                 steps: int = LEVEL_STEPS) -> np.ndarray:
    """The absorbed effect's levels' start given the slopes ``theta`` (the other effects at 0):
    from ``b``, ``steps`` Newton steps of each level's own score equation Σ_{i∈l} yᵢ − Λ(ηᵢ + b_l)
    = 0 (one pass over the rows each, a ``bincount`` per sum)."""
    eta = cells.eta(theta)
    codes, size = effects.codes[0], effects.sizes[0]
    target = np.bincount(codes, weights=y, minlength=size)
    for _ in range(steps):
        p = expit(eta + b[codes])
        info = np.bincount(codes, weights=p * (1 - p), minlength=size)
        b = b + np.where(info > 0, (target - np.bincount(codes, weights=p, minlength=size)) / np.where(info > 0, info, 1),
                         0.0)
    return b


def part_pass(part: Cells, theta: np.ndarray, fe_s: np.ndarray, fe_b: np.ndarray, full: bool) -> tuple:
    """One part's sums of a Newton evaluation at (θ, s, b) (:func:`controlled_logit`): its
    log-likelihood; with ``full`` its gradient ``(Z'r, F_s'r, F_b'r)``, its information's sums
    (:meth:`Cells.part_normal`), its rows at |η| > EXTREME and its largest |η|. ``part.y``: its
    outcomes. Its cells' part of η from its own cells (:meth:`Cells.offsets`, a row at a time:
    the bits of the whole design's), so a pass sends the workers the parameters alone."""
    y = part.y
    eta = part.part_eta(theta, part.offsets(theta, fe_s, fe_b))
    a = np.exp(-np.abs(eta))           # log(1 + e^η) = max(η, 0) + log1p(e^−|η|), one exp a row
    ll = float(y @ eta - (np.maximum(eta, 0.0).sum() + np.log1p(a).sum()))
    if not full:
        return (ll,)
    near = 1 / (1 + a)                 # P(y = 1), P(y = 0), each accurate in its own tail
    far = a * near
    up = eta >= 0
    p1, p0 = np.where(up, near, far), np.where(up, far, near)
    r = np.where(y == 1, p0, -p1)
    return (ll, part.part_tdot(r), part.part_normal(p1 * p0), int(np.count_nonzero(np.abs(eta) > EXTREME)),
            float(np.max(np.abs(eta), initial=0.0)))


def part_effect(part: Cells, theta: np.ndarray, fe_s: np.ndarray, fe_b: np.ndarray, x1: float, x0: float) -> tuple:
    """One part's sums of the average marginal effect at the fit (θ, s, b), d's standardised
    column set to ``x1`` then ``x0`` in every row: ``Σ Λ(η¹) − Λ(η⁰)``, the parts of its
    gradient ``(Z, F_s, F_b)'(λ(η¹) − λ(η⁰))`` (:meth:`Cells.part_tdot`), ``Σ λ(η¹)``, ``Σ λ(η⁰)``."""
    eta = part.part_eta(theta, part.offsets(theta, fe_s, fe_b))
    z0 = part.zt[0]  # d's standardised column
    eta1 = eta + theta[0] * (x1 - z0)
    eta0 = eta + theta[0] * (x0 - z0)
    p1, p0 = expit(eta1), expit(eta0)
    l1, l0 = p1 * expit(-eta1), p0 * expit(-eta0)  # the logistic density at each
    return float((p1 - p0).sum()), part.part_tdot(l1 - l0), float(l1.sum()), float(l0.sum())


def part_scores(part: Cells, theta: np.ndarray, fe_s: np.ndarray, fe_b: np.ndarray, h_d: tuple, h_g: tuple,
                clusters: int) -> tuple:
    """One part's sums of the robust errors at the fit: with ``wᵢ = (yᵢ − pᵢ)·c'xᵢ`` for ``c`` =
    ``h_d`` and ``h_g`` (H⁻¹ times d's unit vector and the marginal effect's gradient), Σ w²
    of each (``clusters`` 0: HC1) or their sums by cluster (``part.cluster``)."""
    r = part.y - expit(part.part_eta(theta, part.offsets(theta, fe_s, fe_b)))
    wd = r * part.part_eta(h_d[0], part.offsets(*h_d))
    wg = r * part.part_eta(h_g[0], part.offsets(*h_g))
    if not clusters:
        return float(wd @ wd), float(wg @ wg)
    return (np.bincount(part.cluster, weights=wd, minlength=clusters),
            np.bincount(part.cluster, weights=wg, minlength=clusters))


def controlled_logit(y, d, x_blocks: Sequence[np.ndarray | Categorical], names: Sequence[str],
                     confidence: float = 0.95, *, rows: np.ndarray | None = None,
                     block_rows: int | None = None, fixed: Sequence[Categorical] = (),
                     fixed_names: Sequence[str] = (), cluster: Categorical | None = None,
                     bootstrap: Bootstrap | None = None, outcome: tuple[str, str] = ("y = 0", "y = 1"),
                     prepared: Design | None = None, executor: Executor | None = None,
                     start_from: dict[str, float] | None = None, consume: bool = False) -> LogitResult:
    """The logit ``logit P(y = 1) = β₀ + β_d·d + X β_X`` (``+ fixed effects``) by Newton–Raphson
    from blocked sums, and d's odds ratio, average marginal effect and E-value (see the module
    docstring for the methods and their sources).

    Inputs as :func:`engines.regression.sensitivity.controlled_lpm`: ``y`` (0/1; float with NaN for null,
    or ints), ``d`` (the group indicator; the marginal effect is the change from d = 0 to
    d = 1), ``x_blocks`` one entry per control named by ``names`` — a 1-D numeric array (NaN =
    null) or a :class:`~engines.regression.design.Categorical` (its dummies, the most frequent level
    the reference) — ``rows`` the rows to use (default all), ``block_rows`` the rows a block
    (default about 4M design cells). Rows with a null are dropped and counted. ``fixed`` /
    ``fixed_names``: fixed effects (lender, market) absorbed through the partitioned Newton step
    of ``engines.regression.absorb`` (the levels whose applicants all have one outcome are
    dropped with a note: their effect has no finite estimate). ``cluster``: each row's cluster;
    the interval, z and p of d's coefficient and of the marginal effect are then cluster-robust
    (CR1), the classical standard errors kept beside them.

    Cost: one pass over the rows for the counts, one for the centred cross products (scaling
    and the singular-design check; the linear model's, ``prepared`` by the engine for both), one
    per Newton iteration (a cheaper one for each halving of a step), one for the marginal effect
    and one for the cluster sums, each O(rows × numeric columns²) plus O(cells × categoricals²)
    (``engines.regression.cells``); memory the numeric columns of the rows and |levels| × p for
    the fixed effects. ``start_from``: a related fit's slopes by column name (its
    ``coefficients``), where Newton starts when given. ``executor`` (``passes.Executor``): where the
    parts of the Newton passes, the marginal effect's and the robust errors' run (a Dask
    client's workers), the same bits anywhere. ``consume`` (with ``prepared``): the logit is the
    design's last model, and scales its dense columns in place instead of copying them (no model
    can be fitted on the design after: at 10M HMDA records 0.25 GB less a comparison).

    Degenerate input never raises: no rows, infinite values, one value of y (or a y that is
    not 0/1), d constant, fewer rows than parameters + 2, a singular design, or separation
    give a ``note`` and null estimates; a control with no variance among the rows is dropped
    with a note (as ``controlled_lpm`` does). No convergence within 50 iterations without
    separation: estimates with ``converged=False`` and a note.
    """
    alpha = 1 - confidence
    y = np.asarray(y)
    d = np.asarray(d)
    boot = bootstrap or Bootstrap()
    des = prepared or design(y, d, x_blocks, names, rows, block_rows, fixed, fixed_names, cluster, outcome)
    y, d = des.y, des.d  # the kept rows, gathered in the order every pass reads them
    n, notes = des.n, list(des.notes)
    events = int(round(des.y_sum)) if des.y_binary else 0
    effects = des.effects

    def result(note: str | None = None, **values) -> LogitResult:
        base = dict(coefficient=None, se=None, z=None, p_value=None, ci_low=None, ci_high=None,
                    odds_ratio=None, or_ci_low=None, or_ci_high=None, ame=None, ame_se=None, ame_ci_low=None,
                    ame_ci_high=None, e_value=None, e_value_ci=None, common_outcome=None, converged=None,
                    iterations=0, log_likelihood=None)
        base.update(values)
        text = "; ".join([*notes, *([note] if note else [])]) or None
        return LogitResult(n=n, dropped_null=des.dropped, n_treated=des.n_treated, n_control=des.n_control,
                           events=events, confidence=confidence, note=text,
                           controls=tuple(des.used), fixed_effects=tuple(fixed_names),
                           clusters=des.clusters, separated_rows=des.separated_rows,
                           separated=des.separated, **base)

    if des.failure is not None:
        return result(des.failure)
    if not des.y_binary:
        return result("the outcome is not a 0/1 indicator: the logit needs one")
    blocks, p, means = des.blocks, des.p, des.means
    k = des.parameters  # d, the controls' columns, the fixed effects' levels (the intercept's role)
    if n - k < 2:
        return result(f"{n:,} rows for {k} parameters: too few to estimate (needs {k + 2} or more)")

    # -- the cross products, fixed effects partialled out: scale and the singular-design check --
    linear = linear_fit(des)  # (the linear model's on the same design, when it ran first)
    linear.cells = linear.centred = None  # its rows' columns are not needed here (a copy's memory back before the logit's own)
    if linear.singular:
        return result(linear.singular)
    scale = np.sqrt(n / np.diag(linear.normal.a)[:p])  # 1 / standard deviation of each column

    # the rows of (Z − mean)·scale, over their cells: the design's own, scaled in place, when ``consume``
    cells = Cells(des, means, scale, take="scaled" if consume and prepared is not None else None)
    parts = cells.parts()
    for part in parts:
        part.y = y[part.bounds[0]:part.bounds[1]]
        part.cluster = None if des.cluster is None else des.cluster[part.bounds[0]:part.bounds[1]]
    executor = executor or Executor()
    placed = executor.place(parts)

    def evaluate(theta: np.ndarray, fe_s: np.ndarray, fe_b: np.ndarray, full: bool = True):
        """Log-likelihood at (θ, s, b); with ``full`` also the gradient (X, F_s, F_b)'(y − p),
        the information's blocks (:class:`~engines.regression.absorb.Normal`), the count of
        rows at |η| > EXTREME and the largest |η|: the parts' sums (:func:`part_pass`) added in
        their order, wherever they ran."""
        found = executor.map(part_pass, placed, theta, fe_s, fe_b, full)
        ll = 0.0
        for f in found:
            ll += f[0]
        if not full:
            return ll, None, None, 0, 0.0
        grad = cells.added_grad([f[1] for f in found])
        info = cells.added([f[2] for f in found])
        return ll, grad, info, sum(f[3] for f in found), max(f[4] for f in found)

    # -- Newton–Raphson with step-halving ------------------------------------------------------
    rate = des.y_sum / n
    level_n = np.bincount(effects.codes[0], minlength=effects.sizes[0])
    level_rate = np.bincount(effects.codes[0], weights=y, minlength=effects.sizes[0]) / level_n
    start = (np.zeros(p), np.zeros(effects.small), np.log(level_rate / (1 - level_rate)))
    fit = None
    if start_from:
        # from a related fit's slopes (the pooled comparison of the same attribute), each
        # column's by its name (0 for one that fit lacks), the levels' effects then those that
        # match each level's rate given the slopes (:func:`_level_start`): half the passes of the
        # linear model's start on HMDA. Redone from the linear model's start when it does not converge
        theta0 = np.array([start_from.get(c, 0.0) for c in column_names(blocks)]) / scale
        fit = _newton(evaluate, theta0, start[1], _level_start(cells, theta0, y, effects, start[2]), _solve)
        fit = fit if fit.converged else None
    if fit is None and np.all(np.isfinite(linear.coef)):
        # from the linear model's slopes on the same design, as log-odds (Amemiya 1981: a logit
        # slope ≈ an LPM slope / (r(1 − r)), shrunk to WARM of it): 12 % fewer passes on HMDA. A
        # fit that does not converge from there is redone from the cold start (its notes are then
        # the cold start's)
        fit = _newton(evaluate, WARM * linear.coef / (rate * (1 - rate)) / scale, *start[1:], _solve)
        fit = fit if fit.converged else None
    if fit is None:
        fit = _newton(evaluate, *start, _solve)
    theta, fe_s, fe_b, ll, info, extreme = fit.theta, fit.fe_s, fit.fe_b, fit.ll, fit.info, fit.extreme
    iterations, last_step, converged = fit.iterations, fit.last_step, fit.converged
    solver = None if fit.singular else info.solver()
    v_theta = None if solver is None else _solve(solver.g, np.eye(p))  # the inverse information's θ block
    singular_hessian = v_theta is None

    columns = column_names(blocks)
    if singular_hessian or fit.diverging or (not converged and extreme):
        moved = np.abs(last_step)  # the coefficients still running away at the last step
        moving = [c for c, m in zip(columns, moved) if m > 0 and m >= 0.5 * moved.max()] if len(moved) else []
        what = ", ".join("the group" if c == "d" else repr(c) for c in moving[:3]) if moving else None
        signs = [*([f"{extreme:,} of {n:,} with a fitted probability within 1e-10 of 0 or 1"] if extreme else []),
                 *(["the information matrix singular"] if singular_hessian else []),
                 *([f"the coefficient{'s' if len(moving) > 1 else ''} of {what} diverging"] if what else []),
                 *(["stopped as the fitted probabilities ran to 0 or 1"] if fit.diverging else [])]
        executor.release(placed)
        return result(
            f"separation: the outcome is perfectly predicted for some rows ({', '.join(signs)} after "
            f"{iterations} iterations): the likelihood has no maximum, no logit estimate",
            separation=True, converged=False, iterations=iterations)
    if not converged:
        notes.append(f"the logit did not converge in {iterations} iterations (last step "
                     f"{np.max(np.abs(last_step)):.1e}{', the log-likelihood no longer improving' if fit.stalled else ''})")

    # -- inference in the original units -------------------------------------------------------
    beta = theta * scale                      # slopes; the centring moved into the fixed effects
    cov = v_theta * scale[:, None] * scale[None, :]
    se_all = np.sqrt(np.diag(cov))
    coef, se_classical = float(beta[0]), float(se_all[0])
    intercept = intercept_se = None
    if not effects.names:  # the one level's effect is the intercept, less the centring
        contrast = -means * scale
        intercept = float(fe_b[0] + contrast @ theta)
        c_x, c_s, c_b = solver.solve(contrast, np.zeros(0), np.ones(1), _solve)
        intercept_se = float(np.sqrt(contrast @ c_x + c_b[0]))

    # -- the average marginal effect of d (discrete change): the parts' sums in their order ------
    x1, x0 = (1 - means[0]) * scale[0], (0 - means[0]) * scale[0]  # d's standardised column at d = 1, 0
    found = executor.map(part_effect, placed, theta, fe_s, fe_b, x1, x0)
    total = l1_sum = l0_sum = 0.0
    for f in found:
        total, l1_sum, l0_sum = total + f[0], l1_sum + f[2], l0_sum + f[3]
    g, g_s, g_b = cells.added_grad([f[1] for f in found])
    g[0] = l1_sum * x1 - l0_sum * x0  # d's column is x1 in every row of X¹, x0 in X⁰
    ame = total / n
    g, g_s, g_b = g / n, g_s / n, g_b / n
    h_g = solver.solve(g, g_s, g_b, _solve)       # H⁻¹ G: the delta method's G'H⁻¹G
    ame_se_classical = float(np.sqrt(g @ h_g[0] + g_s @ h_g[1] + g_b @ h_g[2]))

    # -- robust errors: Σ_g (Σ_{i∈g} (yᵢ − pᵢ)·c'xᵢ)² for c = H⁻¹a, a = d's column or G, over the
    # clusters (CR1) or over the rows (HC1, one cluster) ------------------------------------------
    kind = inference_kind(cluster is not None, des.clusters, boot, "score-bootstrap")
    se, ame_se = se_classical, ame_se_classical
    se_cluster = ame_se_cluster = None
    crit = float(norm.ppf(1 - alpha / 2))
    p_value = draws = wkind = None
    if kind != "classical":
        unit = np.zeros(p)
        unit[0] = 1.0
        h_d = solver.solve(unit, np.zeros(effects.small), np.zeros(effects.sizes[0]), _solve)
        groups = max(des.clusters, 1)
        sums_d, sums_g = np.zeros(groups), np.zeros(groups)
        square_d = square_g = 0.0
        # the parts' score sums (η at the fit, as the marginal effect read it), in their order
        for f in executor.map(part_scores, placed, theta, fe_s, fe_b, h_d, h_g, groups if kind != "HC1" else 0):
            if kind == "HC1":
                square_d, square_g = square_d + f[0], square_g + f[1]
            else:
                sums_d, sums_g = sums_d + f[0], sums_g + f[1]
        if kind == "HC1":  # CR1 with every row its own cluster: the factor n/(n − k)
            se = float(scale[0] * np.sqrt(square_d * n / (n - k)))
            ame_se = float(np.sqrt(square_g * n / (n - k)))
        else:
            se_cluster = float(scale[0] * np.sqrt(cluster_variance(sums_d, n, k)))
            ame_se_cluster = float(np.sqrt(cluster_variance(sums_g, n, k)))
            se, ame_se = se_cluster, ame_se_cluster
        se_all = se_all.copy()
        se_all[0] = se
        if kind == "score-bootstrap":
            crit = float(student_t.ppf(1 - alpha / 2, des.clusters - 1))
            warm = (np.concatenate([[0.0], theta[1:]]), fe_s, fe_b)  # the fit's own point, d's coefficient at 0
            scores = _restricted_scores(evaluate, warm, cells, effects, y, des.cluster, des.clusters)
            if scores is None:
                kind = "CR1"
                notes.append("the logit without the group did not converge: no score bootstrap, the CR1 test "
                             f"with {des.clusters} clusters")
            else:
                w, wkind, enumerated = weights(des.clusters, boot)
                p_value, draws, wkind = score_p_value(scores, w)[0], len(w), wkind + (" (all)" if enumerated else "")

    executor.release(placed)  # the passes done: the workers let the parts go now
    zval = coef / se
    if p_value is None:
        p_value = float(2 * norm.sf(abs(zval)))
    lo, hi = coef - crit * se, coef + crit * se
    common = bool(rate > COMMON)
    odds = float(np.exp(coef))
    or_lo, or_hi = float(np.exp(lo)), float(np.exp(hi))
    ev, ev_ci = e_value_or(odds, or_lo, or_hi, common=common)
    if intercept is not None:
        columns, beta = ["const", *columns], np.concatenate([[intercept], beta])
        se_all = np.concatenate([[intercept_se], se_all])
    return result(
        coefficient=coef, se=se, z=zval, p_value=p_value, ci_low=lo, ci_high=hi, inference=kind,
        bootstrap_draws=draws or 0, bootstrap_weights=wkind,
        odds_ratio=odds, or_ci_low=or_lo, or_ci_high=or_hi, ame=ame, ame_se=ame_se,
        ame_ci_low=ame - crit * ame_se, ame_ci_high=ame + crit * ame_se, e_value=float(ev), e_value_ci=float(ev_ci),
        common_outcome=common, converged=converged, iterations=iterations, log_likelihood=ll,
        intercept=intercept, se_classical=se_classical, ame_se_classical=ame_se_classical,
        se_cluster=se_cluster, ame_se_cluster=ame_se_cluster,
        coefficients={"columns": np.array(columns, dtype=object), "coef": beta, "se": se_all})
