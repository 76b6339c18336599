"""Inference when the clusters are few: the wild cluster bootstrap p-values of the regression
engine's models, from per-cluster sums the fits accumulate in their last pass over the rows.

Cluster-robust (CR1) errors over-reject with few clusters: the sandwich's meat is a sum of G
terms and the t-ratio is far from normal, or from t(G − 1), when G is small or the clusters
unequal (Cameron, Gelbach & Miller 2008, "Bootstrap-based improvements for inference with
clustered errors", REStat 90(3); Cameron & Miller 2015, "A practitioner's guide to
cluster-robust inference", J. Human Resources 50(2), Sec. VI; MacKinnon & Webb 2017, "Wild
bootstrap inference for wildly different cluster sizes", J. Applied Econometrics 32(2)). Below
``Bootstrap.min_clusters`` (40) clusters the test of the group's coefficient is a bootstrap one:

**Linear model (WCR)** — the wild cluster restricted bootstrap (CGM 2008; Roodman, MacKinnon,
Nielsen & Webb 2019, "Fast and wild", Stata Journal 19(1), Sec. 3). Fit ``y ~ X`` without d
(restricted residuals ``ũ``), draw ``y* = ŷ_R + w_g ũ`` with one weight per cluster, refit and
take the CR1 t of d. With ``u = (Z'Z)⁻¹Z'`` d's row (``uᵢ = d̃ᵢ / d̃'d̃``, d̃ = d partialled on
the other regressors and the fixed effects) every draw is a G-vector product of per-cluster sums:

    β* = Σ_g w_g S_g,                  S_g = Σ_{i∈g} uᵢ ũᵢ
    score*_h = w_h S_h − Σ_g C_hg w_g,  C_hg = (Z_h'u_h)'(Z'Z)⁻¹(Z_g'ũ_g)
    t* = β* / sqrt(Σ_h score*_h²)      (the CR1 factor cancels in the comparison)

(``score*_h = Σ_{i∈h} uᵢ e*ᵢ`` with ``e* = M_Z(w∘ũ)`` the draw's residuals, as ``ŷ_R`` lies in
the span of Z; Z the whole design, d, the controls and the fixed effects' levels, whose
cross products are solved by the fit's partitioned solver, one solve a cluster). With w = 1 the formulas give the fit's own β and CR1 t. The p-value is the
share of draws with ``|t*| > |t|`` (wildboottest's convention).

**Logit (score bootstrap)** — Kline, P. & Santos, A. (2012), "A score based approach to wild
bootstrap inference", J. Econometric Methods 1(1), 23–41: fit the logit without d (``p̃``),
take each cluster's score of d partialled on the other regressors under the restricted
information, ``s_g = Σ_{i∈g} d̃ᵢ (yᵢ − p̃ᵢ)`` with ``d̃ = d − WΓ``, ``Γ = (W'ṼW)⁻¹W'Ṽd``,
``Ṽ = diag(p̃(1 − p̃))`` (no refit per draw), and compare

    T = (Σ_g s_g)² / Σ_g s_g²     with     T* = (Σ_g w_g s_g)² / Σ_g w_g² s_g²

(the denominator ``Σ_g s_g²`` for Rademacher weights, where w² = 1); p = share of T* > T.

**Weights** — Rademacher (±1) from 12 clusters, every one of the 2^G sign vectors when
2^G ≤ draws (the p-value is then exact and has no seed); below 12, Webb's six-point weights
±sqrt(1/2), ±1, ±sqrt(3/2) (Webb 2014, "Reworking wild bootstrap based inference for clustered
errors", Queen's Economics Dept. WP 1315: Rademacher's 2^G values are too few to rank a
statistic against), all 6^G vectors when they are no more than the draws, else ``draws``
draws from ``numpy.random.default_rng(seed)``. Everything is a (draws × G) matrix product.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["Bootstrap", "WildSums", "inference_kind", "weights", "wcr_p_value", "score_p_value", "WEBB"]

WEBB = np.array([-np.sqrt(1.5), -1.0, -np.sqrt(0.5), np.sqrt(0.5), 1.0, np.sqrt(1.5)])
TIE = 1e-10  # a draw's statistic within this relative distance of the observed one is no exceedance


@dataclass(frozen=True)
class Bootstrap:
    """When and how the wild cluster bootstrap tests: below ``min_clusters`` clusters (and from
    2), ``draws`` draws (or every weight vector when there are no more), seeded by ``seed``;
    ``weights``: ``auto`` (Webb below ``webb_below`` clusters, else Rademacher), ``rademacher``
    or ``webb``."""

    min_clusters: int = 40
    draws: int = 9999
    seed: int = 0
    weights: str = "auto"
    webb_below: int = 12

    def applies(self, clusters: int) -> bool:
        return 2 <= clusters < self.min_clusters


def weights(clusters: int, boot: Bootstrap) -> tuple[np.ndarray, str, bool]:
    """``(W, kind, enumerated)``: the (draws × G) weight matrix, the weights' name and whether
    it holds every possible vector (then in a fixed order, no seed)."""
    kind = boot.weights
    if kind == "auto":
        kind = "webb" if clusters < boot.webb_below else "rademacher"
    values = WEBB if kind == "webb" else np.array([-1.0, 1.0])
    m = len(values)
    if m ** clusters <= boot.draws:  # every vector: the G digits base m of 0 … m^G − 1
        digits = (np.arange(m ** clusters)[:, None] // m ** np.arange(clusters)[None, :]) % m
        return values[digits], kind, True
    rng = np.random.default_rng(boot.seed)
    return values[rng.integers(0, m, size=(boot.draws, clusters))], kind, False


def _exceed(stat: np.ndarray, observed: float) -> float:
    return float(np.mean(stat > observed * (1 + TIE)))


def wcr_p_value(s: np.ndarray, c: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """The WCR bootstrap's two-sided p-value (share of ``|t*| > |t|``) and the observed
    t without the CR1 factor, from the per-cluster ``s`` (S_g) and ``c`` (C, G × G) of the
    module docstring, for the weights ``w`` (draws × G)."""
    def t_stats(wm: np.ndarray) -> np.ndarray:
        beta = wm @ s
        score = wm * s[None, :] - wm @ c.T
        with np.errstate(divide="ignore", invalid="ignore"):
            return beta / np.sqrt(np.einsum("bg,bg->b", score, score))
    t = float(t_stats(np.ones((1, len(s))))[0])
    return _exceed(np.abs(t_stats(w)), abs(t)), t


def score_p_value(s: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """The score bootstrap's p-value (share of ``T* > T``) and the observed T, from each
    cluster's partialled score ``s`` (Kline & Santos 2012; the module docstring)."""
    t = float(s.sum() ** 2 / (s @ s))
    with np.errstate(divide="ignore", invalid="ignore"):
        star = (w @ s) ** 2 / ((w * w) @ (s * s))
    return _exceed(star, t), t


def inference_kind(clustered: bool, clusters: int, boot: Bootstrap, bootstrap_name: str) -> str:
    """The inference a fit's test uses: ``classical`` without a cluster; ``HC1`` (heteroskedasticity
    robust) with one cluster, where a cluster-robust error does not exist; ``bootstrap_name``
    (``WCR-bootstrap``, ``score-bootstrap``) with 2 to ``min_clusters`` − 1 clusters (the interval
    CR1 with t(G − 1) critical values); ``CR1`` from ``min_clusters``."""
    if not clustered:
        return "classical"
    if clusters < 2:
        return "HC1"
    return bootstrap_name if boot.applies(clusters) else "CR1"


class WildSums:
    """The per-cluster sums of the WCR bootstrap (``engines.regression.wild``), accumulated in
    the residuals' pass: ``S_g = Σ uᵢũᵢ`` and the design's cross products
    ``Z_g'u_g`` and ``Z_g'ũ_g`` (dense columns, the other effects' levels, the absorbed
    effect's levels: cluster × level sums by ``bincount``)."""

    def __init__(self, clusters: int, p: int, effects):
        self.g, self.effects = clusters, effects
        self.s = np.zeros(clusters)
        self.zu, self.zr = np.zeros((clusters, p)), np.zeros((clusters, p))
        nb, ns = effects.sizes[0], effects.small
        self.bu, self.br = np.zeros(clusters * nb), np.zeros(clusters * nb)
        self.su, self.sr = np.zeros(clusters * ns), np.zeros(clusters * ns)

    def add(self, z, u, r, cl, pos) -> None:
        g, e = self.g, self.effects
        self.s += np.bincount(cl, weights=u * r, minlength=g)
        ind = sp.csr_matrix((np.ones(len(cl)), (cl, np.arange(len(cl)))), shape=(g, len(cl)))
        self.zu += ind @ (z * u[:, None])
        self.zr += ind @ (z * r[:, None])
        nb, ns = e.sizes[0], e.small
        cl = cl.astype(np.int64)  # (the codes are of 4 bytes or fewer: the products in 8)
        at = cl * nb + e.codes[0][pos]
        self.bu += np.bincount(at, weights=u, minlength=g * nb)
        self.br += np.bincount(at, weights=r, minlength=g * nb)
        for j in range(1, len(e.sizes)):
            col = e.small_columns(j, pos)
            hit = col >= 0
            at = cl[hit] * ns + col[hit]
            self.su += np.bincount(at, weights=u[hit], minlength=g * ns)
            self.sr += np.bincount(at, weights=r[hit], minlength=g * ns)

    def pieces(self, solver, g_inv) -> tuple[np.ndarray, np.ndarray]:
        """``(S, C)``: C_hg = (Z_h'u_h)'(Z'Z)⁻¹(Z_g'ũ_g), one solve of the partitioned
        system a cluster."""
        g, nb, ns = self.g, self.effects.sizes[0], self.effects.small
        bu, br = self.bu.reshape(g, nb), self.br.reshape(g, nb)
        su, sr = self.su.reshape(g, ns), self.sr.reshape(g, ns)
        c = np.empty((g, g))
        for k in range(g):
            x, s_, b_ = solver.solve(self.zr[k], sr[k], br[k], lambda _, r: g_inv @ r)
            c[:, k] = self.zu @ x + su @ s_ + bu @ b_
        return self.s, c
