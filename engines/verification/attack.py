"""Counterexample search: projected gradient on the twin pair, batched in torch.

A bound that fails to prove min_z G(z) > 0 (G the PBA objective of Eq. 1 for one setting,
or ±score for robustness) leaves the input open; a concrete z in the box with G(z) ≤ 0
*falsifies* it (NOTES: report falsified apart from inconclusive). The search minimises
G(z) = Σ_c coef_c · score([s_c, z]) — both copies read the same z — by signed gradient steps
projected onto the box, from the box centre and from fixed quasi-random points of the box
(the same relative points for every input, so a result does not depend on the batch it ran
in), and keeps the best point met.
"""
from __future__ import annotations

import numpy as np
import torch

from aequum.engines.verification.bounds import Layers


def relative_starts(restarts: int, width: int, seed: int = 0) -> np.ndarray:
    """(restarts, width) points in [0, 1]: the centre first, then fixed uniform draws."""
    rng = np.random.default_rng(seed)
    return np.vstack([np.full((1, width), 0.5), rng.random((max(restarts - 1, 0), width))])


def score_and_gradient(layers: Layers, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """score(x) and d score / dx per row, by one forward and one backward pass of the ReLU net."""
    masks = []
    h = x
    for k, (W, b) in enumerate(layers):
        h = h @ W.T + b
        if k < len(layers) - 1:
            masks.append(h > 0)
            h = h * masks[-1]
    g = layers[-1][0][0].expand(x.shape[0], -1)
    for k in range(len(layers) - 2, -1, -1):
        g = (g * masks[k]) @ layers[k][0]
    return h[:, 0], g


def objective(layers: Layers, centres: list[torch.Tensor], coefs: list[torch.Tensor],
              z: torch.Tensor, free: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """G(z) per row, Σ_c coef_c · score(x_c with its free columns replaced by z), and dG/dz."""
    total, grad = 0, 0
    for x, c in zip(centres, coefs):
        v, g = score_and_gradient(layers, torch.where(free, z, x))
        total, grad = total + c * v, grad + c[:, None] * g
    return total, grad


def search(layers: Layers, centres: list[np.ndarray], coefs: list[np.ndarray], lo: np.ndarray,
           hi: np.ndarray, free: np.ndarray, steps: int = 40, restarts: int = 8,
           seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Smallest G found per row and its input point (rows × d, the first copy's inputs).

    ``centres``: per copy, (rows, d) inputs (their sensitive columns are kept); ``free``: (d,)
    bool, the columns that move within [lo, hi] (rows × d).
    """
    rows, d = lo.shape
    R = max(int(restarts), 1)
    rel = torch.from_numpy(relative_starts(R, d, seed))
    lo_t = torch.from_numpy(lo).repeat_interleave(R, 0)
    hi_t = torch.from_numpy(hi).repeat_interleave(R, 0)
    width = hi_t - lo_t
    z = lo_t + rel.repeat(rows, 1) * width
    free_t = torch.from_numpy(free)
    xs = [torch.from_numpy(x).repeat_interleave(R, 0) for x in centres]
    cs = [torch.from_numpy(np.asarray(c, np.float64)).repeat_interleave(R, 0) for c in coefs]
    best = torch.full((rows * R,), np.inf, dtype=torch.float64)
    best_z = z.clone()
    done = torch.zeros(rows * R, dtype=torch.bool)
    for t in range(int(steps) + 1):
        g, grad = objective(layers, xs, cs, z, free_t)
        better = (g < best) & ~done
        best = torch.where(better, g, best)
        best_z[better] = z[better]
        # a row stops at the first step that finds G ≤ 0 (so its result never depends on the
        # other rows of the batch); the search ends when every row has stopped
        done = (best.reshape(rows, R).min(1).values <= 0).repeat_interleave(R)
        if t == steps or bool(done.all()):
            break
        step = width * (0.25 * (1 - t / steps) + 0.02)
        z = torch.minimum(torch.maximum(z - step * torch.sign(grad), lo_t), hi_t)
    best = best.reshape(rows, R)
    k = best.argmin(1)
    value = best[torch.arange(rows), k].numpy()
    point = best_z.reshape(rows, R, d)[torch.arange(rows), k]
    point = torch.where(free_t, point, torch.from_numpy(centres[0])).numpy()
    return value, point
