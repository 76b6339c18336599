"""Network import for PBA verification: the audited model as affine layers on raw inputs.

PBA (seed 004, §2, Eqs. 1–8) bounds a ReLU network ``f`` over a box of raw inputs. This module
turns the model adapter (``engines.core.models``) into :class:`Network`: affine layers
``(W_k, b_k)`` acting on the *raw* model inputs (the input standardisation folded into the
first layer, exactly), ReLU between them, and one output, the score:

* 1 logit: the logit l (it equals l₁ − l₀ of the two-class softmax [0, l]);
* 2 logits: l₁ − l₀, so the paper's log-odds objective (l_ci − l_cj)(x) − (l_ci − l_cj)(x′)
  (Eq. 1 and Lemma 1) is ± (score(x) − score(x′)), signed by the true class c_i.

Only ``Linear`` and ``ReLU`` layers are accepted (``Dropout`` and ``Identity`` are the identity
at inference); any other layer is an error naming it. Consecutive ``Linear`` layers are composed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


class NetworkError(ValueError):
    """A model PBA cannot bound; the message names the layer or the model."""


@dataclass(frozen=True)
class Network:
    """Affine layers on raw inputs: x → W_0 x + b_0 → ReLU → … → W_{L−1} · + b_{L−1} (one output)."""

    weights: tuple[np.ndarray, ...]
    biases: tuple[np.ndarray, ...]
    feature_names: tuple[str, ...]

    @property
    def depth(self) -> int:
        return len(self.weights)

    @property
    def hidden(self) -> tuple[int, ...]:
        return tuple(w.shape[0] for w in self.weights[:-1])

    def score(self, X: np.ndarray) -> np.ndarray:
        """The score of raw input rows (float64): the same function as the model's ``score``."""
        h = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float64))
        with torch.no_grad():
            for k, (W, b) in enumerate(self.torch_layers()):
                h = h @ W.T + b
                if k < self.depth - 1:
                    h = h.clamp(min=0)
        return h[:, 0].numpy()

    def torch_layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(torch.from_numpy(W), torch.from_numpy(b)) for W, b in zip(self.weights, self.biases)]


def _affine_layers(net: torch.nn.Module) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """The module's layers as affine maps, ``None`` marking a ReLU; anything else is an error."""
    modules = list(net) if isinstance(net, torch.nn.Sequential) else [net]
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for i, m in enumerate(modules):
        if isinstance(m, torch.nn.Linear):
            W = m.weight.detach().cpu().numpy().astype(np.float64)
            b = (m.bias.detach().cpu().numpy().astype(np.float64) if m.bias is not None
                 else np.zeros(W.shape[0]))
            if out and out[-1] is not None:  # Linear after Linear: compose exactly
                W0, b0 = out[-1]
                out[-1] = (W @ W0, W @ b0 + b)
            else:
                out.append((W, b))
        elif isinstance(m, torch.nn.ReLU):
            if not out or out[-1] is None:
                raise NetworkError(f"layer {i} (ReLU) must follow a Linear layer")
            out.append(None)
        elif isinstance(m, (torch.nn.Dropout, torch.nn.Identity)):
            continue
        else:
            raise NetworkError(f"layer {i} ({type(m).__name__}) is not supported: PBA bounds "
                               "networks of Linear and ReLU layers only")
    if not out or out[-1] is None:
        raise NetworkError("the network must end with a Linear layer (the logits)")
    return out


def import_network(model) -> Network:
    """The :class:`Network` of a model adapter (``TorchMLP``, ``LinearRule``).

    ``TorchMLP``: its layers are checked one by one, the standardisation x ↦ (x − μ)/σ folded
    into the first layer (W_0/σ, b_0 − W_0 μ/σ) and two logits reduced to l₁ − l₀.
    """
    from aequum.engines.core.models import LinearRule, TorchMLP

    names = tuple(getattr(model, "feature_names", ()))
    if isinstance(model, LinearRule):
        return Network((model.weights[None, :].astype(np.float64),), (np.array([model.intercept]),), names)
    if not isinstance(model, TorchMLP):
        raise NetworkError(f"PBA verifies ReLU networks; the model is a {type(model).__name__}")
    layers = _affine_layers(model.net)
    affine = [layer for layer in layers if layer is not None]
    W0, b0 = affine[0]
    if W0.shape[1] != len(names):
        raise NetworkError(f"the first Linear layer takes {W0.shape[1]} inputs, the model has "
                           f"{len(names)} features")
    affine[0] = (W0 / model.input_scale, b0 - W0 @ (model.input_mean / model.input_scale))
    W, b = affine[-1]
    if W.shape[0] == 2:
        affine[-1] = ((W[1] - W[0])[None, :], np.array([b[1] - b[0]]))
    elif W.shape[0] != 1:
        raise NetworkError(f"the network has {W.shape[0]} outputs; PBA needs 1 logit or 2 class logits")
    weights = tuple(np.ascontiguousarray(w) for w, _ in affine)
    biases = tuple(np.ascontiguousarray(v) for _, v in affine)
    for k, w in enumerate(weights):
        if not (np.all(np.isfinite(w)) and np.all(np.isfinite(biases[k]))):
            raise NetworkError(f"affine layer {k} holds NaN or infinite weights")
    return Network(weights, biases, names)


def shared_neurons(net: Network, sensitive: list[int]) -> list[np.ndarray]:
    """Per hidden layer, the neurons whose value cannot depend on the ``sensitive`` inputs.

    A first-layer neuron with zero weight on every sensitive input computes the same function
    of z in both twin copies x = [s, z] and x′ = [s′, z]; a later neuron whose every non-zero
    weight comes from such neurons does too. Both copies then share it exactly (one variable
    in the LP, one coefficient in the symbolic bound) instead of being relaxed twice.
    """
    out = []
    same = np.ones(net.weights[0].shape[1], bool)
    same[sensitive] = False
    for W in net.weights[:-1]:
        same = ~np.any((W != 0) & ~same[None, :], axis=1)
        out.append(same)
    return out
