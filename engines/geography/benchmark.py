"""The redlining screen's test: a lender's share against the distribution of its market's lenders.

Lenders' shares of applications from (say) majority-minority tracts differ far more than
binomial noise makes: branch networks, brokers, products and marketing give every lender its own
footprint, and some specialise in minority tracts. A two-proportion z test of a lender against
its peers' pooled share counts only the binomial noise; on worlds without redlining it named 17
to 38 of 60 lenders, ordinary ones whose peers happened to specialise and specialists alike
(tests/test_geography_null.py). The test here is the outlier test of
a random-effects model, in which each lender's share varies about its market's level by a
between-lender variance that the data estimate:

* each tested unit i (a lender in a market with ``n_i`` applications, ``x_i`` of them from such
  tracts) has the empirical logit and its variance (Haldane 1955; Cox & Snell, *Analysis of
  Binary Data*, 2nd ed., § 2.1.6)

      y_i = log((x_i + ½) / (n_i − x_i + ½)),   v_i = 1/(x_i + ½) + 1/(n_i − x_i + ½);

* the model: y_i = μ_m + u_i + e_i, μ_m the market's level, u_i ~ N(0, τ²) the lender's own
  footprint, e_i ~ N(0, v_i) its sampling noise. τ² is one between-lender variance of the
  measure, estimated across the markets by the method of moments of DerSimonian & Laird (1986)
  with the markets as fixed effects (Raudenbush 2009, *Handbook of Research Synthesis*, § 16.4):
  with w_i = 1/v_i and ȳ_m the w-weighted mean of market m,

      Q = Σ_m Σ_{i∈m} w_i (y_i − ȳ_m)²,   df = Σ_m (k_m − 1),
      c = Σ_m (Σ_{i∈m} w_i − Σ_{i∈m} w_i² / Σ_{i∈m} w_i),   τ² = max(0, (Q − df) / c);

* each unit against the others of its market (the deleted residual, Viechtbauer & Cheung 2010,
  "Outlier and influence diagnostics for meta-analysis", Res. Synth. Methods 1(2), Eq. 12): with
  W_j = 1/(v_j + τ²),

      μ̂_(−i) = Σ_{j∈m, j≠i} W_j y_j / Σ_{j∈m, j≠i} W_j,
      z_i = (y_i − μ̂_(−i)) / sqrt(v_i + τ² + 1 / Σ_{j∈m, j≠i} W_j),   p = 2Φ(−|z_i|).

A lender far below its market — further than lenders' footprints spread — is an outlier; an
ordinary lender among specialists is not. ``expected`` is the market's level without the unit,
expit(μ̂_(−i)), and ``between_sd`` τ on the logit scale. One τ for every market: a market holds
a handful of lenders, too few to estimate its own; the deleted mean keeps a lender's own
footprint out of the level it is compared with (one lender among many barely moves τ).
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit, ndtr


def between_variance(y: np.ndarray, v: np.ndarray, market: np.ndarray) -> float:
    """τ², the DerSimonian–Laird moment estimate with the markets as fixed effects (module
    docstring); 0 when no market holds two units."""
    w = 1.0 / v
    size = market.max() + 1 if len(market) else 0
    s1 = np.bincount(market, w, size)
    s2 = np.bincount(market, w * w, size)
    sy = np.bincount(market, w * y, size)
    syy = np.bincount(market, w * y * y, size)
    k = np.bincount(market, minlength=size)
    many = k > 1
    if not many.any():
        return 0.0
    q = np.sum(syy[many] - sy[many] ** 2 / s1[many])
    df = np.sum(k[many] - 1)
    c = np.sum(s1[many] - s2[many] / s1[many])
    return float(max(0.0, (q - df) / c)) if c > 0 else 0.0


def outlier_test(x: np.ndarray, n: np.ndarray, market: np.ndarray, tested: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """(z, two-sided p, expected share, other units in the benchmark, τ) of every unit (module
    docstring): ``x``, ``n`` its counts, ``market`` its market code, ``tested`` the units that
    enter (at least the spec's applications); NaN where a unit is not tested or its market holds
    no other tested unit."""
    units = len(n)
    z = np.full(units, np.nan)
    expected = np.full(units, np.nan)
    rows = np.flatnonzero(tested & (n > 0))
    others = np.zeros(units, np.int64)
    if len(rows) == 0:
        return z, z.copy(), expected, others, float("nan")
    xi, ni = x[rows].astype(np.float64), n[rows].astype(np.float64)
    y = np.log((xi + 0.5) / (ni - xi + 0.5))
    v = 1.0 / (xi + 0.5) + 1.0 / (ni - xi + 0.5)
    _, m = np.unique(market[rows], return_inverse=True)
    m = m.reshape(-1)
    tau2 = between_variance(y, v, m)
    big_w = 1.0 / (v + tau2)
    sw = np.bincount(m, big_w)[m] - big_w
    swy = np.bincount(m, big_w * y)[m] - big_w * y
    k = np.bincount(m)[m] - 1
    ok = k > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(ok, swy / sw, np.nan)
        zz = np.where(ok, (y - mean) / np.sqrt(v + tau2 + 1.0 / sw), np.nan)
    z[rows] = zz
    expected[rows] = expit(mean)
    others[rows] = k
    p = np.where(np.isnan(z), np.nan, 2.0 * ndtr(-np.abs(z)))
    return z, p, expected, others, float(np.sqrt(tau2))
