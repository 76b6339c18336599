"""The δ-box of PBA (seed 004, Eqs. 2–6) in raw model-input units, and the twin inputs.

An input x̃ = [s, z̃] and its twin x̃′ = [s′, z̃] differ only in the sensitive inputs (the
protected group indicator the model sees: 1 protected, 0 otherwise; the twin flips it).
The box keeps categorical and ordinal inputs fixed (Eq. 5) and lets each numeric input
with a ``perturbation`` unit move by ±δ·unit (Eq. 4: ‖z_num − z̃_num‖∞ ≤ δ in units of the
raw data, e.g. 100 dollars of capital gain), clipped to the feature's domain (x̃ ∈ D, Eq. 2):
its declared ``range``, else the range observed in the data.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BoxSpec:
    """Which model inputs are sensitive, which move and by how much, and their domain."""

    feature_names: tuple[str, ...]
    sensitive: tuple[int, ...]       # columns flipped 0 <-> 1 in the twin
    unit: np.ndarray                 # raw units per δ (0 = fixed)
    domain_low: np.ndarray
    domain_high: np.ndarray

    @property
    def moving(self) -> np.ndarray:
        return np.flatnonzero(self.unit > 0)

    def twin(self, X: np.ndarray) -> np.ndarray:
        """x̃′: the rows with every sensitive indicator flipped (s′ = 1 − s)."""
        Xp = np.array(X, dtype=np.float64, copy=True)
        Xp[:, list(self.sensitive)] = 1.0 - Xp[:, list(self.sensitive)]
        return Xp

    def bounds(self, X: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper corners of the δ-boxes around rows ``X`` (fixed inputs: lo = hi)."""
        X = np.asarray(X, np.float64)
        reach = delta * self.unit
        lo = np.maximum(X - reach, self.domain_low)
        hi = np.minimum(X + reach, self.domain_high)
        fixed = self.unit == 0
        lo[:, fixed] = X[:, fixed]
        hi[:, fixed] = X[:, fixed]
        return lo, hi

    def check_inside(self, X: np.ndarray, ids: np.ndarray) -> None:
        """Every moving input of every row lies in its domain (else the box would be empty)."""
        for j in self.moving:
            bad = np.flatnonzero((X[:, j] < self.domain_low[j]) | (X[:, j] > self.domain_high[j])
                                 | ~np.isfinite(X[:, j]))
            if len(bad):
                r = bad[0]
                raise ValueError(f"record {str(ids[r])!r}: feature {self.feature_names[j]!r} = {float(X[r, j])!r} "
                                 f"lies outside its domain [{self.domain_low[j]}, {self.domain_high[j]}]")
