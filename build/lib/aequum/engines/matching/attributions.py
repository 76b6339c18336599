"""Integrated gradients on the model's score (logit), batched in torch over records x steps.

IG_j(x; b) = (x_j − b_j) · ∫₀¹ ∂f/∂x_j (b + α(x − b)) dα  (Sundararajan et al. 2017, as used by
Popoola & Sheppard §"The Consistent Baseline Principle"), approximated with the midpoint rule
over T steps. Completeness, Σ_j IG_j = f(x) − f(b), is checked for every record. The input
space is the model's own (``model.feature_names``, raw units): a protected attribute that the
model takes as an input is a coordinate like any other, so its attribution counts in Δ_CEC.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from aequum.engines.core.models import LinearRule, TorchMLP

ScoreFn = Callable[[torch.Tensor], torch.Tensor]
COMPLETENESS_FLOOR = 1e-3  # |f(x) − f(b)| below this: the completeness error is absolute


def score_function(model) -> ScoreFn:
    """The model's score as a differentiable torch function of raw inputs (float64).

    Torch MLPs (loaded or surrogate) and linear rules are differentiable; any other model is
    refused with a clear error (integrated gradients need ∂f/∂x along the path).
    """
    if isinstance(model, TorchMLP):
        mean = torch.from_numpy(model.input_mean)
        scale = torch.from_numpy(model.input_scale)
        return lambda X: model._forward((X - mean) / scale)
    if isinstance(model, LinearRule):
        w = torch.from_numpy(model.weights)
        return lambda X: X @ w + model.intercept
    raise ValueError(f"CEC explains the model with integrated gradients, which needs a differentiable "
                     f"model (kind mlp, surrogate or linear); got {type(model).__name__}")


def path_points(X: torch.Tensor, B: torch.Tensor, steps: int) -> torch.Tensor:
    """The (n, T, d) midpoints b + α_t (x − b), α_t = (t + ½)/T."""
    alphas = (torch.arange(steps, dtype=X.dtype) + 0.5) / steps
    return B[:, None, :] + alphas[None, :, None] * (X - B)[:, None, :]


def integrated_gradients(f: ScoreFn, X: torch.Tensor, B: torch.Tensor, steps: int,
                         create_graph: bool = False) -> torch.Tensor:
    """IG(x; b) for every row of ``X`` against the baseline in the same row of ``B``.

    One forward and one backward pass over all n·T path points. ``create_graph`` keeps the
    result differentiable in the model's parameters (CEC training, Algorithm 2).
    """
    n, d = X.shape
    P = path_points(X, B, steps).reshape(n * steps, d).detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(f(P).sum(), P, create_graph=create_graph)
    return (X - B) * grad.reshape(n, steps, d).mean(dim=1)


def normalise(ig: torch.Tensor | np.ndarray, eps: float = 1e-8):
    """IG_norm = IG / (‖IG‖₂ + ε) (the paper's normalisation, ε = 1e−8)."""
    if isinstance(ig, torch.Tensor):
        return ig / (torch.linalg.vector_norm(ig, dim=-1, keepdim=True) + eps)
    return ig / (np.linalg.norm(ig, axis=-1, keepdims=True) + eps)


def completeness_error(ig: np.ndarray, f_x: np.ndarray, f_b: np.ndarray) -> np.ndarray:
    """|Σ IG − (f(x) − f(b))| relative to |f(x) − f(b)| (absolute below ``COMPLETENESS_FLOOR``)."""
    gap = f_x - f_b
    return np.abs(ig.sum(axis=1) - gap) / np.maximum(np.abs(gap), COMPLETENESS_FLOOR)


def attribute_pairs(model, X: np.ndarray, Xc: np.ndarray, B: np.ndarray, steps: int,
                    batch_pairs: int = 512) -> dict[str, np.ndarray]:
    """IG of both members of each pair against the factual's baseline (Principle 1).

    ``X`` factuals, ``Xc`` their counterparts, ``B`` the factual's b_{y,a} per pair (rows of
    the model's inputs). Returns ig, ig_counterpart, score, score_counterpart, score_baseline
    and the completeness error (the larger of the pair's two).
    """
    f = score_function(model)
    n, d = X.shape
    out = {k: np.empty((n, d)) for k in ("ig", "ig_counterpart")}
    out.update({k: np.empty(n) for k in ("score", "score_counterpart", "score_baseline", "completeness")})
    for s in range(0, n, batch_pairs):
        e = min(s + batch_pairs, n)
        both = torch.from_numpy(np.concatenate([X[s:e], Xc[s:e]]))
        base = torch.from_numpy(np.concatenate([B[s:e], B[s:e]]))
        ig = integrated_gradients(f, both, base, steps).numpy()
        with torch.no_grad():
            scores = f(torch.cat([both, base[: e - s]])).numpy()
        m = e - s
        f_x, f_c, f_b = scores[:m], scores[m:2 * m], scores[2 * m:]
        out["ig"][s:e], out["ig_counterpart"][s:e] = ig[:m], ig[m:]
        out["score"][s:e], out["score_counterpart"][s:e], out["score_baseline"][s:e] = f_x, f_c, f_b
        out["completeness"][s:e] = np.maximum(completeness_error(ig[:m], f_x, f_b),
                                              completeness_error(ig[m:], f_c, f_b))
    return out
