"""The FGCE reference implementation's audited classifier, rebuilt (seed 001; NOTES "FGCE").

The reference audits a logistic regression it trains itself: every feature one-hot / min-max
encoded (the FGCE space, protected attribute included), a shuffled 70/30 split of the records
with seed 482, the model fitted on the 70%, and the *false negatives of the 30% test part* as
factuals; every record the model predicts positive is a candidate. :func:`holdout` draws that
split with the convention of the reference's splitter (a seeded permutation of the row
positions; its first ⌈fraction · n⌉ entries are the test part), :func:`fit_logistic` fits the
L2-regularised logistic regression (inverse strength C on the weights, intercept free):

    min_{w, b} ½‖w‖² + C Σ_i log(1 + exp(−s_i (w·x_i + b))),  s_i = ±1,

whose optimum is unique (strictly convex), so any exact solver finds the reference's model
for the same C. The reference picks C by a randomised cross-validated search; aequum takes C
as a parameter (default 1, the usual library default).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize


def holdout(n: int, fraction: float, seed: int) -> np.ndarray:
    """Bool mask of the test part: the first ⌈fraction · n⌉ positions of a seeded permutation
    (numpy's legacy ``RandomState(seed).permutation(n)``, the reference splitter's draw)."""
    if not 0 < fraction < 1:
        raise ValueError(f"test fraction must lie in (0, 1), got {fraction}")
    test = np.zeros(n, dtype=bool)
    test[np.random.RandomState(seed).permutation(n)[:math.ceil(fraction * n)]] = True
    return test


def fit_logistic(X: np.ndarray, y: np.ndarray, C: float = 1.0) -> tuple[np.ndarray, float]:
    """(w, b) minimising the objective in the module docstring; y in {0, 1}."""
    X = np.asarray(X, np.float64)
    s = np.where(np.asarray(y) == 1, 1.0, -1.0)
    if len(np.unique(s)) < 2:
        raise ValueError("logistic regression: the training labels have a single class")
    d = X.shape[1]

    def objective(theta):
        w, b = theta[:d], theta[d]
        m = s * (X @ w + b)
        loss = np.logaddexp(0.0, -m)
        g = -s * np.exp(-np.logaddexp(0.0, m))          # d loss / d margin·s, stable
        return 0.5 * w @ w + C * loss.sum(), np.concatenate([w + C * (X.T @ g), [C * g.sum()]])

    res = minimize(objective, np.zeros(d + 1), jac=True, method="L-BFGS-B",
                   options={"maxiter": 10_000, "gtol": 1e-10, "ftol": 1e-15})
    return res.x[:d], float(res.x[d])
