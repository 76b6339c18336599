"""The model adapter: linear rule, safe MLP loading, gradients, ReLU layers, surrogate fits."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from engines.core.models import LinearRule, ModelError, TorchMLP, fit_surrogate, model_fingerprint


def test_cst_loan_rule_exact():
    rule = LinearRule({"AnnualSalary": 1.0, "AccountBalance": 5.0}, -225000.0)
    X = np.array([[35000, 7947.678089944852], [120000, 36940.097383453845], [200000, 5000]])
    assert rule.score(X).tolist() == pytest.approx([35000 + 5 * 7947.678089944852 - 225000,
                                                    120000 + 5 * 36940.097383453845 - 225000, 0.0])
    assert rule.decide(X).tolist() == [0, 1, 1]  # score 0 is on the favourable side (sign >= 0)
    assert rule.gradient(X).tolist() == [[1, 5]] * 3


def _mlp(seed=0, outputs=1):
    torch.manual_seed(seed)
    return TorchMLP(["a", "b", "c"], [8, 4], outputs, input_mean=[1.0, -2.0, 0.5], input_scale=[2.0, 0.5, 3.0])


@pytest.mark.parametrize("outputs", [1, 2])
def test_mlp_round_trip_and_relu_layers(tmp_path, outputs):
    m = _mlp(outputs=outputs)
    m.save(tmp_path / "m.pt")
    back = TorchMLP.load(tmp_path / "m.pt", ["a", "b", "c"], [8, 4], outputs)
    X = np.random.default_rng(0).normal(size=(50, 3)) * 3
    assert np.array_equal(m.score(X), back.score(X))
    assert model_fingerprint(m) == model_fingerprint(back)
    # numpy forward pass through relu_layers reproduces the score on raw inputs
    h = X
    layers = back.relu_layers()
    for i, (W, b) in enumerate(layers):
        h = h @ W.T + b
        if i < len(layers) - 1:
            h = np.maximum(h, 0)
    assert np.allclose(h[:, 0], back.score(X), atol=1e-10)


def test_mlp_gradient_matches_finite_differences():
    m = _mlp()
    X = np.random.default_rng(1).normal(size=(5, 3))
    g = m.gradient(X)
    eps = 1e-6
    for j in range(3):
        d = np.zeros(3)
        d[j] = eps
        fd = (m.score(X + d) - m.score(X - d)) / (2 * eps)
        assert np.allclose(g[:, j], fd, atol=1e-5)


class Payload:
    def __reduce__(self):
        return (print, ("owned",))


def test_pickled_objects_are_refused(tmp_path):
    path = tmp_path / "evil.pt"
    with open(path, "wb") as fh:
        pickle.dump({"0.weight": Payload()}, fh)
    with pytest.raises(ModelError, match="weights_only=True"):
        TorchMLP.load(path, ["a", "b", "c"], [8, 4])


def test_architecture_mismatch_names_the_tensor(tmp_path):
    _mlp().save(tmp_path / "m.pt")
    with pytest.raises(ModelError, match=r"tensor '0.weight' has shape \(8, 3\).*\(16, 3\)"):
        TorchMLP.load(tmp_path / "m.pt", ["a", "b", "c"], [16, 4])
    with pytest.raises(ModelError, match="missing"):
        TorchMLP.load(tmp_path / "m.pt", ["a", "b", "c"], [8, 4, 2])
    with pytest.raises(ModelError, match="not found"):
        TorchMLP.load(tmp_path / "none.pt", ["a"], [1])


def test_nan_weights_are_refused(tmp_path):
    m = _mlp()
    with torch.no_grad():
        m.net[0].weight[0, 0] = float("nan")
    m.save(tmp_path / "m.pt")
    with pytest.raises(ModelError, match="NaN"):
        TorchMLP.load(tmp_path / "m.pt", ["a", "b", "c"], [8, 4])


def test_surrogate_is_deterministic_and_faithful():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 2)) * [1000, 10] + [5000, 50]
    y = ((X[:, 0] - 5000) / 1000 + (X[:, 1] - 50) / 10 > 0).astype(int)
    a = fit_surrogate(X, y, ["x", "z"], hidden=(16,), epochs=150, seed=3)
    b = fit_surrogate(X, y, ["x", "z"], hidden=(16,), epochs=150, seed=3)
    assert np.array_equal(a.score(X), b.score(X))
    assert a.fidelity["train"] > 0.95 and a.fidelity["holdout"] > 0.9


def test_surrogate_single_class_is_an_error():
    with pytest.raises(ModelError, match="single class"):
        fit_surrogate(np.ones((10, 1)), np.ones(10), ["x"])
