"""Recourse costs to a linear decision boundary and stepped minimal modifications (RAGUEL, §3.5).

Boundary: a·x + b = 0 (favourable side a·x + b ≥ 0). Recourse weights w_j > 0 price a unit
change of attribute j; immutable attributes cannot change. The cost of x is the weighted
Euclidean distance to the boundary (Eq. 2, as NOTES rebuilds it):

    c(x) = min_{x'} sqrt(Σ_j w_j (x_j − x'_j)²)  s.t.  a·x' + b = 0
         = |a·x + b| / sqrt(Σ_{j mutable} a_j² / w_j)

with the counterfactual x' = x − (a·x + b) / Σ_k(a_k²/w_k) · (a_j / w_j)_j (the weighted
projection). Applicants already on the favourable side cost 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from aequum.engines.core.imports import load
from aequum.engines.core.highs import silent_highs


class NotRepairable(ValueError):
    """No feasible action reaches the boundary (every attribute it depends on is immutable)."""


def _norm(a: np.ndarray, w: np.ndarray, mutable: np.ndarray) -> float:
    if np.any(w[mutable] <= 0):
        raise ValueError("recourse weights of mutable attributes must be positive")
    s = float(np.sum(np.where(mutable, a ** 2 / np.where(mutable, w, 1.0), 0.0)))
    if s == 0:
        raise NotRepairable("no mutable attribute moves the decision boundary: recourse is impossible")
    return np.sqrt(s)


def recourse_cost(X: np.ndarray, a: np.ndarray, b: float, w: np.ndarray, mutable: np.ndarray) -> np.ndarray:
    """c(x) per row (0 on the favourable side)."""
    X, a, w, mutable = (np.asarray(v, np.float64) for v in (X, a, w, mutable))
    margin = X @ a + b
    return np.maximum(-margin, 0.0) / _norm(a, w, mutable.astype(bool))


def counterfactual_points(X: np.ndarray, a: np.ndarray, b: float, w: np.ndarray, mutable: np.ndarray) -> np.ndarray:
    """The cheapest boundary points x' (rows already favourable are returned unchanged)."""
    X, a, w = (np.asarray(v, np.float64) for v in (X, a, w))
    mutable = np.asarray(mutable, bool)
    norm2 = _norm(a, w, mutable) ** 2
    margin = np.minimum(X @ a + b, 0.0)
    direction = np.where(mutable, a / np.where(mutable, w, 1.0), 0.0)
    return X - (margin / norm2)[:, None] * direction[None, :]


# ---------------------------------------------------------------------------------------------
# Actionable modifications (§3.5.2): attributes by increasing recourse weight, single attributes
# first, then pairs, then triples; whole steps only, inside the attributes' bounds.


@dataclass(frozen=True)
class Action:
    """One suggested modification of a record: which attributes move, from what to what."""

    attributes: tuple[int, ...]
    before: tuple[float, ...]
    after: tuple[float, ...]
    steps: tuple[int, ...]
    cost_before: float
    cost_after: float
    modification_cost: float          # weighted Euclidean size of the change, √Σ w_j Δ_j²


@dataclass
class Actionability:
    """Per attribute: recourse weight, mutability, step (NaN = continuous) and bounds."""

    weight: np.ndarray
    mutable: np.ndarray
    direction: np.ndarray            # +1 increase only, −1 decrease only, 0 either
    step: np.ndarray
    low: np.ndarray
    high: np.ndarray
    max_combination: int = 3

    def __post_init__(self) -> None:
        for name in ("weight", "step", "low", "high", "direction"):
            setattr(self, name, np.asarray(getattr(self, name), np.float64))
        self.mutable = np.asarray(self.mutable, bool)
        if np.any(self.mutable & ~(self.weight > 0)):
            bad = np.flatnonzero(self.mutable & ~(self.weight > 0))
            raise ValueError(f"recourse weight of mutable attribute(s) {bad.tolist()} must be positive")


class LinearRecourse:
    """Recourse to the boundary a·x + b = 0 (favourable side ≥ 0): Eq. 2's closed form for the
    cost; stepped, bounded modifications for re-ranking."""

    def __init__(self, a: np.ndarray, b: float, act: Actionability):
        self.a, self.b, self.act = np.asarray(a, np.float64), float(b), act
        # an attribute helps only if it may move in the direction that raises the margin
        helpful = act.mutable & (self.a != 0) & ((act.direction == 0) | (np.sign(self.a) == act.direction))
        self.usable = helpful
        self.norm = _norm(self.a, act.weight, helpful)
        self.order = [int(j) for j in np.argsort(act.weight, kind="stable") if helpful[j]]

    def cost(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, np.float64))
        return np.maximum(-(X @ self.a + self.b), 0.0) / self.norm

    def counterfactual(self, X: np.ndarray) -> np.ndarray:
        return counterfactual_points(X, self.a, self.b, self.act.weight, self.usable)

    def _gain_bounds(self, x: np.ndarray, lo_cost: float, hi_cost: float) -> tuple[float, float]:
        """Margin gain G that brings the cost into [lo_cost, hi_cost): G > g_lo, G ≤ g_hi."""
        margin = float(x @ self.a + self.b)
        return -margin - hi_cost * self.norm, -margin - max(lo_cost, 0.0) * self.norm

    def _max_steps(self, x: np.ndarray, j: int) -> float:
        act, s = self.act, self.act.step[j]
        room = (act.high[j] - x[j]) if self.a[j] > 0 else (x[j] - act.low[j])
        if np.isnan(s):
            return max(room, 0.0)
        return np.floor(max(room, 0.0) / s + 1e-9)

    def modify(self, x: np.ndarray, hi_cost: float, lo_cost: float = -np.inf) -> Action | None:
        """Minimal modification of x with new cost in [lo_cost, hi_cost) (strictly below hi_cost):
        single attributes by increasing weight, then pairs, then triples (weighted L1 MIP on
        HiGHS, whole steps, bounds). None when no combination works."""
        x = np.asarray(x, np.float64)
        c0 = float(self.cost(x)[0])
        if lo_cost > hi_cost or hi_cost <= 0:
            return None
        if lo_cost <= c0 < hi_cost:
            return Action((), (), (), (), c0, c0, 0.0)
        g_lo, g_hi = self._gain_bounds(x, lo_cost, hi_cost)
        if g_hi <= g_lo or g_hi < 0:
            return None
        for size in range(1, min(self.act.max_combination, len(self.order)) + 1):
            for subset in combinations(self.order, size):
                n = self._single(x, subset[0], g_lo, g_hi) if size == 1 else self._mip(x, subset, g_lo, g_hi)
                if n is not None:
                    return self._action(x, subset, n, c0)
        return None

    def _single(self, x: np.ndarray, j: int, g_lo: float, g_hi: float) -> np.ndarray | None:
        unit = abs(self.a[j]) * (1.0 if np.isnan(self.act.step[j]) else self.act.step[j])
        cap = self._max_steps(x, j)
        if np.isnan(self.act.step[j]):
            # continuous: the smallest change that gets strictly below hi_cost
            n = (max(g_lo, 0.0) + 1e-9 * max(1.0, abs(g_lo))) / unit
        else:
            n = np.floor(max(g_lo, 0.0) / unit) + 1
            while n > 1 and (n - 1) * unit > g_lo:      # float guard
                n -= 1
        if n > cap + 1e-12 or n * unit > g_hi or n <= 0:
            return None
        return np.array([n])

    def _mip(self, x: np.ndarray, subset: tuple[int, ...], g_lo: float, g_hi: float) -> np.ndarray | None:
        """Combination of attributes: min Σ w_j·|Δ_j| over whole steps n_j ≥ 1 within bounds,
        subject to the margin gain in (g_lo, g_hi] — a small MIP on HiGHS."""
        highspy = load("highspy")
        act = self.act
        units, caps, integral = [], [], []
        for j in subset:
            step = act.step[j]
            units.append(abs(self.a[j]) * (1.0 if np.isnan(step) else step))
            caps.append(self._max_steps(x, j))
            integral.append(not np.isnan(step))
        if any(c < 1 for c in caps):
            return None
        lowest = sum(units)                                   # every attribute one step
        highest = sum(u * c for u, c in zip(units, caps))     # every attribute to its bound
        if highest <= g_lo or lowest > g_hi:
            return None                                       # infeasible: no need to ask HiGHS
        h = silent_highs()
        h.setOptionValue("threads", 1)
        h.setOptionValue("random_seed", 0)
        inf = highspy.kHighsInf
        for j, cap in zip(subset, caps):
            size = 1.0 if np.isnan(act.step[j]) else act.step[j]
            h.addVar(1.0 if integral[subset.index(j)] else 1e-9, float(cap))
            h.changeColCost(h.getNumCol() - 1, float(act.weight[j] * size))
        eps = max(1e-9, 1e-9 * abs(g_lo))
        h.addRow(float(g_lo + eps), float(g_hi) if np.isfinite(g_hi) else inf, len(subset),
                 np.arange(len(subset), dtype=np.int32), np.array(units))
        for k, flag in enumerate(integral):
            if flag:
                h.changeColIntegrality(k, highspy.HighsVarType.kInteger)
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        n = np.array(h.getSolution().col_value)
        n = np.where(integral, np.rint(n), n)
        gain = float(np.dot(n, units))
        if not (g_lo < gain <= g_hi + 1e-9 * max(1.0, abs(g_hi))):
            return None
        return n

    def _action(self, x: np.ndarray, subset: tuple[int, ...], n: np.ndarray, c0: float) -> Action:
        new = x.copy()
        for j, k in zip(subset, n):
            size = 1.0 if np.isnan(self.act.step[j]) else self.act.step[j]
            new[j] = x[j] + np.sign(self.a[j]) * k * size
        delta = new - x
        return Action(tuple(subset), tuple(float(x[j]) for j in subset), tuple(float(new[j]) for j in subset),
                      tuple(int(k) if not np.isnan(self.act.step[j]) else 0 for j, k in zip(subset, n)),
                      c0, float(self.cost(new)[0]), float(np.sqrt(np.sum(self.act.weight * delta ** 2))))


class PointRecourse:
    """Plain rankings (§3.4, Example 2): the counterfactual is one target point t; the cost is
    √Σ_j w_j (x_j − t_j)² over the actionable attributes (immutable differences cannot be acted
    on). Single attributes move towards t_j by whole steps (never past it); combinations take one
    step at a time on the attribute that lowers the cost most per unit of weighted change (the
    paper's "one actionable step at a time")."""

    def __init__(self, target: np.ndarray, act: Actionability):
        self.t, self.act = np.asarray(target, np.float64), act
        self.usable = act.mutable.copy()
        if not self.usable.any():
            raise NotRepairable("no mutable attribute: nobody can move towards the target point")
        self.order = [int(j) for j in np.argsort(act.weight, kind="stable") if self.usable[j]]

    def cost(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, np.float64))
        d = np.where(self.usable, X - self.t, 0.0)
        return np.sqrt((self.act.weight * d ** 2).sum(axis=1))

    def counterfactual(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, np.float64))
        return np.where(self.usable, self.t, X)

    def _moves(self, x: np.ndarray, j: int) -> tuple[float, float]:
        """(signed step, most whole steps towards t_j within bounds and direction)."""
        act = self.act
        gap = self.t[j] - x[j]
        if gap == 0 or (act.direction[j] != 0 and np.sign(gap) != act.direction[j]):
            return 0.0, 0
        step = abs(gap) if np.isnan(act.step[j]) else act.step[j]
        limit = act.high[j] - x[j] if gap > 0 else x[j] - act.low[j]
        n = np.floor(min(abs(gap), max(limit, 0.0)) / step + 1e-9)
        return float(np.sign(gap) * step), n

    def modify(self, x: np.ndarray, hi_cost: float, lo_cost: float = -np.inf) -> Action | None:
        x = np.asarray(x, np.float64)
        c0 = float(self.cost(x)[0])
        if lo_cost <= c0 < hi_cost:
            return Action((), (), (), (), c0, c0, 0.0)
        if lo_cost > hi_cost:
            return None
        for size in range(1, min(self.act.max_combination, len(self.order)) + 1):
            for subset in combinations(self.order, size):
                n = self._search(x, subset, hi_cost, lo_cost)
                if n is not None:
                    return self._action(x, subset, n, c0)
        return None

    def _search(self, x, subset, hi_cost, lo_cost):
        moves = [self._moves(x, j) for j in subset]
        if any(n < 1 for _, n in moves):
            return None
        if len(subset) == 1:
            (step, cap), j = moves[0], subset[0]
            n = np.arange(1, int(cap) + 1)
            pts = np.repeat(x[None, :], len(n), axis=0)
            pts[:, j] += n * step
            c = self.cost(pts)                 # decreasing in n (towards t_j)
            ok = np.flatnonzero(c < hi_cost)
            if not len(ok) or c[ok[0]] < lo_cost:
                return None
            return np.array([n[ok[0]]])
        taken = np.zeros(len(subset))
        cur = x.copy()
        while True:
            best, gain_best = None, 0.0
            c_cur = float(self.cost(cur)[0])
            for k, (j, (step, cap)) in enumerate(zip(subset, moves)):
                if taken[k] >= cap:
                    continue
                trial = cur.copy()
                trial[j] += step
                gain = (c_cur - float(self.cost(trial)[0])) / (np.sqrt(self.act.weight[j]) * abs(step))
                if gain > gain_best:
                    best, gain_best = k, gain
            if best is None:
                return None
            cur[subset[best]] += moves[best][0]
            taken[best] += 1
            c_new = float(self.cost(cur)[0])
            if c_new < hi_cost:
                return taken if c_new >= lo_cost and taken.min() >= 1 else None

    def _action(self, x, subset, n, c0):
        new = x.copy()
        for j, k in zip(subset, n):
            new[j] += self._moves(x, j)[0] * k
        delta = new - x
        return Action(tuple(subset), tuple(float(x[j]) for j in subset), tuple(float(new[j]) for j in subset),
                      tuple(int(k) for k in n), c0, float(self.cost(new)[0]),
                      float(np.sqrt(np.sum(self.act.weight * delta ** 2))))
