"""Integrated gradients on the model's score (logit), batched in torch over records.

IG_j(x; b) = (x_j − b_j) · ∫₀¹ ∂f/∂x_j (b + α(x − b)) dα  (Sundararajan et al. 2017, as used by
Popoola & Sheppard §"The Consistent Baseline Principle"). Two ways to take the integral:

* ``exact`` (the audit's default): every model the audit can explain is piecewise linear (a ReLU
  MLP, or a linear rule), so along the straight path the gradient is piecewise constant and the
  integral is a finite sum, Σ_segments length × gradient, with the segments' ends at the path
  positions α where a hidden unit's pre-activation changes sign. Completeness,
  Σ_j IG_j = f(x) − f(b), then holds to rounding error (the paper asks for 1%).
* ``riemann``: the paper's midpoint rule over T steps (``integrated_gradients``), differentiable
  in the model's parameters: the CEC training loss uses it (Algorithm 2). On a ReLU network its
  error is O(1/T) at the kinks: 1.5–2.3% of f(x) − f(b) at T = 32 on random MLPs.

Completeness is checked for every record. The input space is the model's own
(``model.feature_names``, raw units): a protected attribute that the model takes as an input is a
coordinate like any other, so its attribution counts in Δ_CEC.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import numpy as np
import torch

from aequum.engines.core.models import LinearRule, TorchMLP

ScoreFn = Callable[[torch.Tensor], torch.Tensor]
Layers = list[tuple[torch.Tensor, torch.Tensor]]
COMPLETENESS_FLOOR = 1e-3  # |f(x) − f(b)| below this: the completeness error is absolute
METHODS = ("exact", "riemann")
PATH_CHUNK = 32  # paths of one padded width in the exact two-hidden-layer integral (chunk_widths)
PATH_BLOCK = 512  # paths integrated together (of one width): their intermediates stay in cache


def _check_differentiable(model) -> None:
    if not isinstance(model, (TorchMLP, LinearRule)):
        raise ValueError(f"CEC explains the model with integrated gradients, which needs a differentiable "
                         f"model (kind mlp, surrogate or linear); got {type(model).__name__}")


def score_function(model) -> ScoreFn:
    """The model's score as a differentiable torch function of raw inputs (float64).

    Torch MLPs (loaded or surrogate) and linear rules are differentiable; any other model is
    refused with a clear error (integrated gradients need ∂f/∂x along the path).
    """
    _check_differentiable(model)
    if isinstance(model, TorchMLP):
        mean = torch.from_numpy(model.input_mean)
        scale = torch.from_numpy(model.input_scale)
        return lambda X: model._forward((X - mean) / scale)
    w = torch.from_numpy(model.weights)
    return lambda X: X @ w + model.intercept


def relu_layers(model) -> Layers:
    """The model as affine layers on raw inputs with ReLU between them (float64 torch), the last
    giving the score: the piecewise-linear form ``exact`` integrates."""
    _check_differentiable(model)
    return [(torch.from_numpy(np.ascontiguousarray(W)), torch.from_numpy(np.ascontiguousarray(b)))
            for W, b in model.relu_layers()]


def path_points(X: torch.Tensor, B: torch.Tensor, steps: int) -> torch.Tensor:
    """The (n, T, d) midpoints b + α_t (x − b), α_t = (t + ½)/T."""
    alphas = (torch.arange(steps, dtype=X.dtype) + 0.5) / steps
    return B[:, None, :] + alphas[None, :, None] * (X - B)[:, None, :]


def integrated_gradients(f: ScoreFn, X: torch.Tensor, B: torch.Tensor, steps: int,
                         create_graph: bool = False) -> torch.Tensor:
    """IG(x; b) by the midpoint rule over T steps, for every row of ``X`` against the baseline in
    the same row of ``B``.

    One forward and one backward pass over all n·T path points. ``create_graph`` keeps the
    result differentiable in the model's parameters (CEC training, Algorithm 2).
    """
    n, d = X.shape
    P = path_points(X, B, steps).reshape(n * steps, d).detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(f(P).sum(), P, create_graph=create_graph)
    return (X - B) * grad.reshape(n, steps, d).mean(dim=1)


def _forward(layers: Layers, P: torch.Tensor, upto: int) -> torch.Tensor:
    """Pre-activation of layer ``upto`` (the score for the last layer) at points ``P``."""
    h = P
    for i, (W, b) in enumerate(layers[:upto + 1]):
        h = h @ W.T + b
        if i < upto:
            h = torch.relu(h)
    return h


def _first_layer(layers: Layers, V: torch.Tensor, B: torch.Tensor):
    """Pre-activations c + α·s of the first hidden layer along the path (affine in α), and the
    position t where each changes sign, +inf when that is not inside (0, 1)."""
    W, b = layers[0]
    c, s = B @ W.T + b, V @ W.T
    t = -c / torch.where(s != 0, s, 1.0)
    return c, s, torch.where((s != 0) & (t > 0) & (t < 1), t, torch.inf)


def _gradient_integral_shallow(layers: Layers, V: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """∫₀¹ ∇f(b + αv) dα exactly for at most two hidden layers, without a gradient per segment.

    A first-layer unit j is active on one interval I_j of the path (its pre-activation c_j + α·s_j
    is affine in α), and ∫∇f = Σ_j r_j W1_j with r_j = Σ_k w_k W2_kj |I_j ∩ A_k|, A_k where the
    second-layer unit k is active (one hidden layer: r_j = w_j |I_j|). A second-layer
    pre-activation is linear between consecutive first-layer sign changes, so its values there
    (one matrix product) give its active length up to each of them by interpolation and a
    cumulative sum.
    """
    if len(layers) == 1:
        return layers[0][0][0].expand_as(V)
    c, s, t = _first_layer(layers, V, B)
    flips = torch.isfinite(t)
    on_at_0 = (c > 0) | ((c == 0) & (s > 0))
    if len(layers) == 2:
        # active on [t, 1] (switches on) or [0, t] (switches off); constant otherwise
        length = torch.where(flips, torch.where(s > 0, 1 - t, t), on_at_0.to(V.dtype))
        return (layers[1][0][0] * length) @ layers[0][0]
    count = flips.sum(1).numpy()
    return _two_hidden_by_width(layers, V, B, chunk_widths(count, np.zeros_like(count), np.arange(len(count))))


def chunk_widths(count: np.ndarray, batch: np.ndarray, local: np.ndarray) -> np.ndarray:
    """Per path, the sign-change count that the two-hidden-layer integral pads it to: each
    batch's paths in order of ``count`` (ties in ``local`` order), cut into chunks of PATH_CHUNK
    paths, each padded to its largest count. The padding changes the integral's last bits, so
    paths integrated together in larger blocks keep the widths of these chunks."""
    order = np.lexsort((local, count, batch))
    b, at = batch[order], np.arange(len(order))
    new_batch = np.r_[True, b[1:] != b[:-1]]
    rank = at - np.maximum.accumulate(np.where(new_batch, at, 0))
    new_chunk = new_batch | np.r_[True, rank[1:] // PATH_CHUNK != rank[:-1] // PATH_CHUNK]
    last = np.r_[np.flatnonzero(new_chunk)[1:] - 1, len(order) - 1]   # the chunk's largest count
    out = np.empty_like(count)
    out[order] = count[order][last][np.cumsum(new_chunk) - 1]
    return out


def _two_hidden_by_width(layers: Layers, V: torch.Tensor, B: torch.Tensor, width: np.ndarray) -> torch.Tensor:
    """∫₀¹ ∇f(b + αv) dα of two hidden layers for every path (rows of ``V``, ``B``): the paths of
    each padded width (:func:`chunk_widths`) together, PATH_BLOCK at a time (a path's result does
    not depend on the other paths of its block, only on its width)."""
    out = torch.empty_like(V)
    by = np.argsort(width, kind="stable")
    for group in np.split(by, np.flatnonzero(np.diff(width[by])) + 1):
        for start in range(0, len(group), PATH_BLOCK):
            r = torch.from_numpy(group[start:start + PATH_BLOCK])
            c, s, t = _first_layer(layers, V[r], B[r])
            flips = torch.isfinite(t)
            on_at_0 = (c > 0) | ((c == 0) & (s > 0))
            out[r] = _two_hidden_integral(layers, c, s, t, on_at_0, flips, int(width[group[0]]))
    return out


def _two_hidden_integral(layers: Layers, c, s, t, on_at_0, flips, k: int) -> torch.Tensor:
    """The two-hidden-layer case of ``_gradient_integral_shallow`` for paths whose first layer
    changes sign at most ``k`` times inside (0, 1)."""
    (W1, _), (W2, b2), (w3, _) = layers
    n = len(c)
    t_sorted, order = torch.sort(t, dim=1)
    t_sorted, order = t_sorted[:, :k], order[:, :k]          # the units that flip, in path order
    ends = torch.cat([c.new_zeros(n, 1), torch.where(torch.isinf(t_sorted), 1.0, t_sorted), c.new_ones(n, 1)], 1)
    hidden = torch.relu(torch.addcmul(c[:, None, :], ends[:, :, None], s[:, None, :]))
    values = hidden @ W2.T + b2                               # second layer at the ends (n, k + 2, h2)
    pos, mag = values.clamp_min(0), values.abs()
    share = ((pos[:, :-1] + pos[:, 1:]) / (mag[:, :-1] + mag[:, 1:])).nan_to_num_(0.0)
    upto = (share * (ends[:, 1:] - ends[:, :-1])[:, :, None]).cumsum(1)   # active length to each end
    total = upto[:, -1, :]
    at_flip = upto[:, :-1]                                    # (n, k, h2): up to each unit's t
    signed = torch.where(s.gather(1, order)[:, :, None] > 0, total[:, None, :] - at_flip, at_flip)
    V2 = W2 * w3[0][:, None]                                  # w_k W2_kj
    r_flip = (signed * V2.T[order]).sum(-1) * torch.isfinite(t_sorted)   # (n, k) without padding
    r_fixed = (total @ V2) * (on_at_0 & ~flips)
    return r_fixed @ W1 + (r_flip[:, :, None] * W1[order]).sum(1)


def _gradient_integral_deep(layers: Layers, V: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """∫₀¹ ∇f(b + αv) dα exactly for any depth: the path's linear segments found layer by layer
    (the first layer's sign changes in closed form; a deeper layer's pre-activation is linear
    between the sign changes found so far, so its own are found by interpolation), then the
    gradient at each segment's midpoint weighted by the segment's length."""
    n = len(V)
    _, _, t = _first_layer(layers, V, B)
    ends = torch.sort(torch.cat([V.new_zeros(n, 1), torch.where(torch.isinf(t), 1.0, t), V.new_ones(n, 1)], 1),
                      dim=1).values
    for depth in range(1, len(layers) - 1):
        v = _forward(layers, B[:, None, :] + ends[:, :, None] * V[:, None, :], depth)
        v0, v1 = v[:, :-1], v[:, 1:]
        cross = ((v0 < 0) & (v1 > 0)) | ((v0 > 0) & (v1 < 0))
        k = int(cross.reshape(n, -1).sum(1).max())
        if k == 0:
            continue
        t0, t1 = ends[:, :-1, None], ends[:, 1:, None]
        at = t0 + (t1 - t0) * (v0 / torch.where(cross, v0 - v1, 1.0))
        new = torch.topk(torch.where(cross, at, torch.inf).reshape(n, -1), k, dim=1, largest=False).values
        ends = torch.sort(torch.cat([ends, torch.where(torch.isinf(new), 1.0, new)], 1), dim=1).values
    mids, lengths = (ends[:, :-1] + ends[:, 1:]) / 2, ends[:, 1:] - ends[:, :-1]
    with torch.enable_grad():
        P = (B[:, None, :] + mids[:, :, None] * V[:, None, :]).detach().requires_grad_(True)
        (grad,) = torch.autograd.grad((_forward(layers, P, len(layers) - 1)[..., 0] * lengths).sum(), P)
    return grad.sum(1)


def exact_integrated_gradients(layers: Layers, X: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """IG(x; b) exactly for a piecewise-linear (ReLU) network given as affine ``layers``:
    (x − b) ⊙ Σ_segments length × gradient (see the module docstring).

    Runs on one torch thread (:func:`one_thread`).
    """
    V = X - B
    with one_thread():
        if len(layers) <= 3:
            with torch.no_grad():
                return V * _gradient_integral_shallow(layers, V, B)
        return V * _gradient_integral_deep(layers, V, B)


@contextmanager
def one_thread():
    """Torch on one thread for the block: the engine's many small products (a batch of paths
    through a small MLP) lose more to handing work to a second thread than they gain, and far
    more when the cores are busy (a 1536-row forward pass: 31 ms of CPU on two threads of a
    loaded machine, 0.3 ms on one); parallelism comes from the engine's pieces."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _two_hidden_pairs(layers: Layers, X: np.ndarray, Xc: np.ndarray, B: np.ndarray, batch_pairs: int) -> np.ndarray:
    """IG(x; b) exactly for every factual (rows ``n``) then counterpart (the next ``n``) of a
    two-hidden-layer network, equal bit for bit to ``exact_integrated_gradients`` of each batch
    of ``batch_pairs`` pairs (its factuals then its counterparts): each path keeps the padded
    width its batch's chunk would give it."""
    n = len(X)
    both, base = torch.from_numpy(np.concatenate([X, Xc])), torch.from_numpy(np.concatenate([B, B]))
    V = both - base
    count = np.concatenate([torch.isfinite(_first_layer(layers, V[s:s + PATH_BLOCK], base[s:s + PATH_BLOCK])[2])
                            .sum(1).numpy() for s in range(0, 2 * n, PATH_BLOCK)])
    pair = np.arange(2 * n) % n
    batch = pair // batch_pairs
    start = batch * batch_pairs
    local = pair - start + np.where(np.arange(2 * n) < n, 0, np.minimum(start + batch_pairs, n) - start)
    with torch.no_grad():
        return (V * _two_hidden_by_width(layers, V, base, chunk_widths(count, batch, local))).numpy()


def normalise(ig: torch.Tensor | np.ndarray, eps: float = 1e-8):
    """IG_norm = IG / (‖IG‖₂ + ε) (the paper's normalisation, ε = 1e−8)."""
    if isinstance(ig, torch.Tensor):
        return ig / (torch.linalg.vector_norm(ig, dim=-1, keepdim=True) + eps)
    return ig / (np.linalg.norm(ig, axis=-1, keepdims=True) + eps)


def completeness_error(ig: np.ndarray, f_x: np.ndarray, f_b: np.ndarray) -> np.ndarray:
    """|Σ IG − (f(x) − f(b))| relative to |f(x) − f(b)| (absolute below ``COMPLETENESS_FLOOR``)."""
    gap = f_x - f_b
    return np.abs(ig.sum(axis=1) - gap) / np.maximum(np.abs(gap), COMPLETENESS_FLOOR)


def attribute_pairs(model, X: np.ndarray, Xc: np.ndarray, B: np.ndarray, method: str = "exact",
                    steps: int = 32, batch_pairs: int = 512) -> dict[str, np.ndarray]:
    """IG of both members of each pair against the factual's baseline (Principle 1).

    ``X`` factuals, ``Xc`` their counterparts, ``B`` the factual's b_{y,a} per pair (rows of
    the model's inputs); ``method`` exact (piecewise-linear) or riemann (T = ``steps``). Returns
    ig, ig_counterpart, score, score_counterpart, score_baseline and the completeness error (the
    larger of the pair's two).
    """
    if method not in METHODS:
        raise ValueError(f"integration method must be one of {METHODS}, got {method!r}")
    f = score_function(model)
    layers = relu_layers(model) if method == "exact" else None
    n, d = X.shape
    out = {k: np.empty((n, d)) for k in ("ig", "ig_counterpart")}
    out.update({k: np.empty(n) for k in ("score", "score_counterpart", "score_baseline", "completeness")})
    with one_thread():  # the scores too: a second thread costs far more than it gains here
        # two hidden layers (the audit's surrogate): every pair's paths at once, in blocks of one
        # padded width, as each batch of batch_pairs would pad them (bit for bit)
        ig_all = _two_hidden_pairs(layers, X, Xc, B, batch_pairs) if layers is not None and len(layers) == 3 else None
        for s in range(0, n, batch_pairs):
            e = min(s + batch_pairs, n)
            both = torch.from_numpy(np.concatenate([X[s:e], Xc[s:e]]))
            base = torch.from_numpy(np.concatenate([B[s:e], B[s:e]]))
            if ig_all is not None:
                ig = np.concatenate([ig_all[s:e], ig_all[n + s:n + e]])
            elif layers is None:
                ig = integrated_gradients(f, both, base, steps).numpy()
            else:
                ig = exact_integrated_gradients(layers, both, base).numpy()
            with torch.no_grad():
                scores = f(torch.cat([both, base[: e - s]])).numpy()
            m = e - s
            f_x, f_c, f_b = scores[:m], scores[m:2 * m], scores[2 * m:]
            out["ig"][s:e], out["ig_counterpart"][s:e] = ig[:m], ig[m:]
            out["score"][s:e], out["score_counterpart"][s:e], out["score_baseline"][s:e] = f_x, f_c, f_b
            out["completeness"][s:e] = np.maximum(completeness_error(ig[:m], f_x, f_b),
                                                  completeness_error(ig[m:], f_c, f_b))
    return out
