"""Gaussian kernel density and the density-weighted edge costs of FGCE / FACE.

Fragkathoulas et al. (FGCE, §4) weight a feasible edge i → j by its length and the data density
at its midpoint, as FACE (Poyiadzi et al.) does, so that paths through sparse regions cost
more. docs/engines.md (FGCE): the seed prints W = KDE(mid)·d, which rewards sparse
regions the wrong way; the FACE form d / KDE(mid) is the default (``form="face"``) and the
reference implementation's d² / (KDE(mid) + 1e−8) is offered as ``form="reference"``.

The density is an isotropic Gaussian KDE

    p(x) = 1/m · Σ_k  (2π h²)^(−d/2) · exp(−‖x − x_k‖² / (2h²))

with one scalar bandwidth h: Scott's rule per feature, σ_f · n^(−1/(d+4)), averaged over the
features ("mean Scott", the NOTES' "per feature, averaged"), or chosen by leave-one-out
likelihood cross-validation over a fixed grid. It is evaluated in log space (log-sum-exp) in
blocks of query points, so memory is bounded by ``block × m`` floats whatever the sizes.

Subsampling (``sample``): when the data has more rows than ``sample``, the sum runs over a
fixed, seeded random subsample of ``sample`` reference points instead of all n. That is an
unbiased Monte Carlo estimate of the same KDE (same bandwidth, computed from all rows for
Scott's rule); it trades a small random error for O(sample) work per query point.
Cost: weighting E edges is O(E × reference points) kernel evaluations (Student, 8.8k edges ×
649 rows: well under a second; 470k edges × 20k rows: minutes), so pass ``sample`` on large
data.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

DEFAULT_GRID = np.logspace(-2, 0.5, 26)   # CV bandwidth grid (features live in [0, 1])
_BLOCK_FLOATS = 1 << 22                    # ~32 MB of float64 per block of squared distances


def scott_bandwidth(Z: np.ndarray) -> float:
    """Mean Scott bandwidth: average over features of σ_f · n^(−1/(d+4)) (σ with ddof=1).

    Falls back to 1.0 when every feature is constant or there are fewer than two rows.
    """
    Z = np.asarray(Z, np.float64)
    n, d = Z.shape
    if n < 2 or d == 0:
        return 1.0
    h = float(np.mean(Z.std(0, ddof=1)) * n ** (-1.0 / (d + 4)))
    return h if h > 0 else 1.0


def _block_rows(m: int) -> int:
    return max(1, _BLOCK_FLOATS // max(m, 1))


def _sq_dists(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    sq = A @ B.T
    sq *= -2.0
    sq += (A * A).sum(1)[:, None]
    sq += (B * B).sum(1)[None, :]
    return np.maximum(sq, 0.0, out=sq)


def cv_bandwidth(Z: np.ndarray, grid: np.ndarray = DEFAULT_GRID) -> float:
    """Bandwidth in ``grid`` maximising the leave-one-out log likelihood Σ_i log p_{−i}(x_i).

    Ties go to the first (smallest) grid value. Needs at least two rows (else 1.0).
    """
    Z = np.asarray(Z, np.float64)
    n, d = Z.shape
    grid = np.asarray(grid, np.float64)
    if n < 2 or len(grid) == 0:
        return 1.0
    score = np.zeros(len(grid))
    step = _block_rows(n)
    for s in range(0, n, step):
        sq = _sq_dists(Z[s:s + step], Z)
        rows = np.arange(s, min(s + step, n))
        for g, h in enumerate(grid):
            e = -sq / (2 * h * h)
            e[rows - s, rows] = -np.inf                       # leave one out
            score[g] += (logsumexp(e, axis=1) - np.log(n - 1)
                         - 0.5 * d * np.log(2 * np.pi * h * h)).sum()
    return float(grid[int(np.argmax(score))])


@dataclass
class GaussianKDE:
    """Isotropic Gaussian KDE (see module doc). Build with :meth:`fit`."""

    points: np.ndarray        # reference points the sum runs over (maybe a subsample)
    bandwidth: float
    n_data: int               # rows the KDE was fitted on (before subsampling)

    @classmethod
    def fit(cls, Z: np.ndarray, bandwidth: str | float = "scott", sample: int | None = None,
            seed: int = 0, grid: np.ndarray = DEFAULT_GRID) -> "GaussianKDE":
        """Fit on rows ``Z``. ``bandwidth``: "scott" (mean Scott), "cv" (LOO likelihood over
        ``grid``, run on the subsample when one is drawn) or a positive number. ``sample``:
        cap on the reference points (seeded subsample, Monte Carlo estimate of the same KDE)."""
        Z = np.asarray(Z, np.float64)
        if Z.ndim != 2 or len(Z) == 0:
            raise ValueError(f"KDE needs a non-empty (rows, features) matrix, got shape {Z.shape}")
        if np.isnan(Z).any():
            raise ValueError("KDE: missing (NaN) values in the points")
        ref = Z
        if sample is not None:
            if sample < 1:
                raise ValueError(f"KDE: sample must be positive, got {sample}")
            if len(Z) > sample:
                idx = np.sort(np.random.default_rng(seed).choice(len(Z), size=sample, replace=False))
                ref = Z[idx]
        if isinstance(bandwidth, str):
            if bandwidth == "scott":
                h = scott_bandwidth(Z)
            elif bandwidth == "cv":
                h = cv_bandwidth(ref, grid)
            else:
                raise ValueError(f"KDE: unknown bandwidth rule {bandwidth!r} (scott | cv | a number)")
        else:
            h = float(bandwidth)
            if not h > 0:
                raise ValueError(f"KDE: bandwidth must be positive, got {bandwidth}")
        return cls(points=np.ascontiguousarray(ref), bandwidth=h, n_data=len(Z))

    def log_density(self, at: np.ndarray) -> np.ndarray:
        """log p(x) at each row of ``at``, in blocks (memory ≤ block × #reference points)."""
        at = np.atleast_2d(np.asarray(at, np.float64))
        m, d = self.points.shape
        if at.shape[1] != d:
            raise ValueError(f"KDE: query points have {at.shape[1]} columns, expected {d}")
        h = self.bandwidth
        const = -np.log(m) - 0.5 * d * np.log(2 * np.pi * h * h)
        out = np.empty(len(at))
        step = _block_rows(m)
        for s in range(0, len(at), step):
            sq = _sq_dists(at[s:s + step], self.points)
            # log-sum-exp, in place: shift by the nearest reference point's exponent
            shift = sq.min(1)
            sq -= shift[:, None]
            sq *= -1.0 / (2 * h * h)
            np.exp(sq, out=sq)
            out[s:s + step] = np.log(sq.sum(1)) - shift / (2 * h * h) + const
        return out

    def density(self, at: np.ndarray) -> np.ndarray:
        """p(x) at each row of ``at``."""
        return np.exp(self.log_density(at))


def density(points: np.ndarray, at: np.ndarray, bandwidth: str | float = "scott",
            sample: int | None = None, seed: int = 0) -> np.ndarray:
    """Gaussian KDE fitted on ``points`` evaluated at ``at`` (see :class:`GaussianKDE`)."""
    return GaussianKDE.fit(points, bandwidth, sample, seed).density(at)


def edge_weights(Z: np.ndarray, i: np.ndarray, j: np.ndarray, dist: np.ndarray,
                 form: str = "face", kde: GaussianKDE | None = None,
                 bandwidth: str | float = "scott", sample: int | None = None,
                 seed: int = 0) -> np.ndarray:
    """Weights of edges i → j of length ``dist``, by the KDE at their midpoints (FGCE §4).

    ``form="face"``: d / KDE(mid) (FACE; default, NOTES). A density that underflows to 0 is
    floored at the smallest positive float, so the weight stays finite and very large.
    ``form="reference"``: d² / (KDE(mid) + 1e−8) (the FGCE reference code).
    ``kde``: a fitted KDE; by default one is fitted on all rows of ``Z``.
    """
    if form not in ("face", "reference"):
        raise ValueError(f"edge weights: unknown form {form!r} (face | reference)")
    Z = np.asarray(Z, np.float64)
    i = np.asarray(i, np.int64)
    j = np.asarray(j, np.int64)
    dist = np.asarray(dist, np.float64)
    if len(i) == 0:
        return np.zeros(0)
    if kde is None:
        kde = GaussianKDE.fit(Z, bandwidth, sample, seed)
    dens = np.empty(len(i))
    step = _block_rows(len(kde.points))
    for s in range(0, len(i), step):
        dens[s:s + step] = kde.density(0.5 * (Z[i[s:s + step]] + Z[j[s:s + step]]))
    if form == "face":
        return dist / np.maximum(dens, np.finfo(np.float64).tiny)
    return dist ** 2 / (dens + 1e-8)
