"""Deciding a batch of verification queries: bound, search, LP, MILP (seed 004 §2, NOTES "PBA").

A query asks whether min_z G(z) > 0 over an input's δ-box (``strict``; ≥ 0 otherwise), with
G(z) = Σ_c coef_c · score([s_c, z]) — the PBA objective of one setting (two copies sharing z)
or ±score of one copy (robustness). In order, each stage only sees what the previous ones
left open:

1. the input itself: G(x̃) ≤ 0 falsifies (the centre is a counterexample);
2. the symbolic bound (``bounds``): a lower bound > 0 verifies;
3. the counterexample search (``attack``): a point with G ≤ 0 falsifies;
4. the LP (``lp``, HiGHS): a lower bound > 0 verifies; its optimum point, replayed through
   the network, may falsify;
5. optionally the exact MILP (small networks): verifies or falsifies;
6. the rest is inconclusive (the relaxation could not decide; NOTES: reported apart).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from aequum.engines.verification import attack, lp
from aequum.engines.verification.network import Network

@dataclass
class Outcome:
    verdict: np.ndarray          # object: verified / falsified / inconclusive
    stage: np.ndarray            # object: centre / symbolic / search / lp / milp, or open
    lower: np.ndarray            # proven lower bound of min G
    value: np.ndarray            # G at the counterexample (nan without one)
    point: np.ndarray            # rows × d counterexample input of the first copy (nan without one)


def evaluate(net: Network, centres: list[np.ndarray], coefs: list[np.ndarray], points: np.ndarray,
             free: np.ndarray) -> np.ndarray:
    """G at given points (rows × d): each copy's free columns replaced by the point's."""
    total = np.zeros(len(points))
    for x, c in zip(centres, coefs):
        total += c * net.score(np.where(free, points, x))
    return total


def decide(net: Network, layers, centres: list[np.ndarray], coefs: list[np.ndarray],
           strict: np.ndarray, lo: np.ndarray, hi: np.ndarray, free: np.ndarray,
           symbolic_lower: np.ndarray, copy_bounds: list[list[tuple[np.ndarray, np.ndarray]]],
           sensitive: list[int], shared, params, highs) -> Outcome:
    """Decide every row; ``copy_bounds[c][i]``: copy c, row i, per hidden layer (l, u)."""
    rows, d = lo.shape
    verdict = np.full(rows, "inconclusive", dtype=object)
    stage = np.full(rows, "open", dtype=object)
    lower = symbolic_lower.astype(np.float64).copy()
    value = np.full(rows, np.nan)
    point = np.full((rows, d), np.nan)

    def holds(v):
        return np.where(strict, v > 0, v >= 0)

    def fails(v):
        return np.where(strict, v <= 0, v < 0)

    at_centre = evaluate(net, centres, coefs, centres[0], free)
    bad = fails(at_centre)
    verdict[bad], stage[bad], value[bad], point[bad] = "falsified", "centre", at_centre[bad], centres[0][bad]
    ok = ~bad & holds(lower)
    verdict[ok], stage[ok] = "verified", "symbolic"
    open_ = verdict == "inconclusive"
    if open_.any() and params.attack_steps > 0:
        idx = np.flatnonzero(open_)
        _, where = attack.search(layers, [x[idx] for x in centres], [c[idx] for c in coefs],
                                     lo[idx], hi[idx], free, params.attack_steps, params.attack_restarts)
        found = evaluate(net, [x[idx] for x in centres], [c[idx] for c in coefs], where, free)
        hit = np.where(strict[idx], found <= 0, found < 0)
        j = idx[hit]
        verdict[j], stage[j], value[j], point[j] = "falsified", "search", found[hit], where[hit]
    for stage_name, enabled in (("lp", params.lp), ("milp", params.milp)):
        if not enabled:
            continue
        for i in np.flatnonzero(verdict == "inconclusive"):
            bounds_i = [[(l[i], u[i]) for l, u in cb] for cb in copy_bounds]
            if stage_name == "milp":
                unstable = sum(int(((l < 0) & (u > 0)).sum()) for cb in bounds_i for l, u in cb)
                if unstable > params.milp_max_unstable:
                    continue
            copies = [lp.Copy(x[i], b, float(c[i])) for x, b, c in zip(centres, bounds_i, coefs)]
            res = lp.solve(net, copies, lo[i], hi[i], sensitive, shared if len(copies) > 1 else None,
                           exact=stage_name == "milp", time_limit=params.time_limit, highs=highs)
            lower[i] = max(lower[i], res.bound)
            if (lower[i] > 0) if strict[i] else (lower[i] >= 0):
                verdict[i], stage[i] = "verified", stage_name
                continue
            if res.point is not None:
                g = evaluate(net, [x[i:i + 1] for x in centres], [c[i:i + 1] for c in coefs],
                             res.point[None, :], free)[0]
                if (g <= 0) if strict[i] else (g < 0):
                    verdict[i], stage[i], value[i], point[i] = "falsified", stage_name, g, res.point
    return Outcome(verdict, stage, lower, value, point)


def to_numpy_bounds(bounds) -> list[tuple[np.ndarray, np.ndarray]]:
    """Torch per-layer (l, u) of the hidden layers -> numpy."""
    return [(l.numpy(), u.numpy()) for l, u in bounds[:-1]]


def as_tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))
