"""Bounds on a ReLU network over input boxes, batched in torch (float64).

* :func:`interval_bounds` — interval bound propagation: every pre-activation in [l, u].
* :func:`symbolic_bounds` — back-substitution (CROWN / DeepPoly style; Zhang et al. 2018,
  Singh et al. 2019): each neuron's bound is a linear function of the input, obtained by
  substituting the layers backwards through the ReLU relaxations of seed 004 §A.2 — upper
  y ≤ u(x̂ − l)/(u − l), lower y ≥ α x̂ with α ∈ {0, 1} (the smaller-area choice) — and then
  intersected with the interval step, so it is never looser than :func:`interval_bounds`.
* :func:`twin_lower_bound` — the PBA objective (Eq. 1) over the two copies x = [s, z] and
  x′ = [s′, z] that *share* z: min of a·score(x) − a·score(x′) over the box, back-substituting
  both copies at once so their common z cancels where it can; neurons that cannot depend on s
  (``network.shared_neurons``) get one coefficient for both copies, so a network that ignores
  s gives exactly 0.

Everything takes many boxes at once (rows of ``lo``/``hi``).
"""
from __future__ import annotations

import torch

Layers = list[tuple[torch.Tensor, torch.Tensor]]
CHUNK_ELEMENTS = 1 << 20
Bounds = list[tuple[torch.Tensor, torch.Tensor]]


def interval_bounds(layers: Layers, lo: torch.Tensor, hi: torch.Tensor) -> Bounds:
    """Pre-activation [l, u] of every layer (the last one is the score) by interval arithmetic."""
    out = []
    for k, (W, b) in enumerate(layers):
        l, u = _interval_step(W, b, lo, hi)
        out.append((l, u))
        lo, hi = l.clamp(min=0), u.clamp(min=0)
    return out


def _interval_step(W, b, lo, hi):
    mid, rad = (lo + hi) / 2, (hi - lo) / 2
    c = mid @ W.T + b
    r = rad @ W.abs().T
    return c - r, c + r


def relaxation(l: torch.Tensor, u: torch.Tensor):
    """Linear bounds of ReLU on [l, u]: α x̂ ≤ y ≤ s x̂ + t (per neuron; exact when stable)."""
    active, dead = l >= 0, u <= 0
    unstable = ~active & ~dead
    width = torch.where(unstable, u - l, torch.ones_like(u))
    slope_up = torch.where(unstable, u / width, active.to(u.dtype))
    icpt_up = torch.where(unstable, -u * l / width, torch.zeros_like(u))
    slope_lo = torch.where(unstable, (u > -l).to(u.dtype), active.to(u.dtype))
    return slope_lo, slope_up, icpt_up


def _substitute(A: torch.Tensor, const: torch.Tensor, relax, W: torch.Tensor, b: torch.Tensor):
    """Coefficients A on a layer's post-activations -> on its input, for a lower bound."""
    slope_lo, slope_up, icpt_up = relax
    const = const + (A.clamp(max=0) @ icpt_up[:, :, None])[..., 0]
    A = A * torch.where(A < 0, slope_up[:, None, :], slope_lo[:, None, :])
    return A @ W, const + A @ b


def concretise(A: torch.Tensor, const: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """min over the box of A x + const (rows of A: one linear function each)."""
    return const + (A.clamp(min=0) * lo[:, None, :]).sum(-1) + (A.clamp(max=0) * hi[:, None, :]).sum(-1)


def symbolic_bounds(layers: Layers, lo: torch.Tensor, hi: torch.Tensor, prior: Bounds | None = None) -> Bounds:
    """Pre-activation [l, u] of every layer by back-substitution, intersected with intervals.

    Layer 0 is exact from the box. For layer k ≥ 1 the identity on its pre-activations (and
    its negation, for the upper bound) is substituted back through layers k−1 … 0 using the
    relaxations from the bounds already found. ``prior``: bounds valid on a box that contains
    this one (a larger δ); every layer is intersected with them, so a smaller box never gets
    looser bounds.
    """
    out: Bounds = []
    relax = []
    for k, (W, b) in enumerate(layers):
        if k == 0:
            l, u = _interval_step(W, b, lo, hi)
        else:
            pl, pu = out[-1]
            il, iu = _interval_step(W, b, pl.clamp(min=0), pu.clamp(min=0))
            n = W.shape[0]
            # the identity (and its negation) on this layer, substituted through W_k at once;
            # rows in chunks of about CHUNK_ELEMENTS coefficients (cache-sized temporaries)
            rows = lo.shape[0]
            step = max(1, CHUNK_ELEMENTS // (2 * n * W.shape[1]))
            low = torch.empty(rows, 2 * n, dtype=W.dtype)
            for s in range(0, rows, step):
                e = min(s + step, rows)
                A = torch.cat([W, -W]).expand(e - s, 2 * n, W.shape[1])
                const = torch.cat([b, -b]).expand(e - s, 2 * n)
                for j in range(k - 1, -1, -1):
                    Wj, bj = layers[j]
                    A, const = _substitute(A, const, tuple(r[s:e] for r in relax[j]), Wj, bj)
                low[s:e] = concretise(A, const, lo[s:e], hi[s:e])
            l = torch.maximum(low[:, :n], il)
            u = torch.minimum(-low[:, n:], iu)
        if prior is not None:
            l, u = torch.maximum(l, prior[k][0]), torch.minimum(u, prior[k][1])
        out.append((l, u))
        if k < len(layers) - 1:
            relax.append(relaxation(l, u))
    return out


def twin_lower_bound(layers: Layers, bounds_a: Bounds, bounds_b: Bounds, coef: torch.Tensor,
                     x_a: torch.Tensor, x_b: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor,
                     sensitive: list[int], shared: list[torch.Tensor]) -> torch.Tensor:
    """Lower bounds of coef·(score(x) − score(x′)) over the shared box (Eq. 1, relaxed).

    ``coef`` (rows × m): m objectives per row (e.g. +1 and −1 for the observed and flipped
    settings). ``x_a``/``x_b``: the copies' inputs (their sensitive values are used);
    ``lo``/``hi``: the box of z (sensitive columns ignored). Returns rows × m lower bounds.
    """
    rows, m = coef.shape
    W, b = layers[-1]
    A_a = coef[:, :, None] * W[None, None, 0, :]          # on copy a's last hidden layer
    A_b = -A_a
    const = coef * b[0] - coef * b[0]
    relax_a = [relaxation(l, u) for l, u in bounds_a[:-1]]
    relax_b = [relaxation(l, u) for l, u in bounds_b[:-1]]
    for j in range(len(layers) - 2, -1, -1):
        same = shared[j]
        A_a = torch.where(same, A_a + A_b, A_a)
        A_b = torch.where(same, torch.zeros_like(A_b), A_b)
        Wj, bj = layers[j]
        A_a, const = _substitute(A_a, const, relax_a[j], Wj, bj)
        A_b, const = _substitute(A_b, const, relax_b[j], Wj, bj)
    mask = torch.zeros(lo.shape[1], dtype=torch.bool)
    mask[sensitive] = True
    const = const + (A_a * torch.where(mask, x_a, 0)[:, None, :]).sum(-1) \
        + (A_b * torch.where(mask, x_b, 0)[:, None, :]).sum(-1)
    A = torch.where(mask, torch.zeros_like(A_a), A_a + A_b)
    return concretise(A, const, lo, hi)


def twin_interval_lower_bound(bounds_a: Bounds, bounds_b: Bounds, coef: torch.Tensor) -> torch.Tensor:
    """The interval bound of coef·(score(x) − score(x′)): each copy bounded on its own."""
    la, ua = bounds_a[-1]
    lb, ub = bounds_b[-1]
    low_diff, up_diff = la[:, :1] - ub[:, :1], ua[:, :1] - lb[:, :1]
    return torch.where(coef >= 0, coef * low_diff, coef * up_diff)


def score(layers: Layers, x: torch.Tensor) -> torch.Tensor:
    """The network's score (rows), differentiable."""
    h = x
    for k, (W, b) in enumerate(layers):
        h = h @ W.T + b
        if k < len(layers) - 1:
            h = h.clamp(min=0)
    return h[..., 0]
