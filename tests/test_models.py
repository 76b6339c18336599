"""The model adapter: linear rule, safe MLP loading, gradients, ReLU layers, surrogate fits."""
from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch

from aequum.engines.core.models import LinearRule, ModelError, TorchMLP, fit_surrogate, model_fingerprint


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


# torch notes the file's pickle protocol before refusing the object: that is the point here
@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")
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


def test_adam_is_torchs_to_the_bit():
    """The surrogate's own Adam (no torch._dynamo import) updates parameters exactly as
    torch.optim.Adam does, with the learning rate changing between steps."""
    from aequum.engines.core.models import Adam, _mlp

    torch.manual_seed(0)
    a, b = _mlp(5, [32, 16], 1), _mlp(5, [32, 16], 1)
    b.load_state_dict(a.state_dict())
    theirs, ours = torch.optim.Adam(a.parameters(), lr=1e-2), Adam(list(b.parameters()))
    X = torch.randn(500, 5, dtype=torch.float64)
    y = (X[:, 0] > 0).double()
    for i in range(40):
        for net, opt in ((a, theirs), (b, ours)):
            opt.zero_grad()
            torch.nn.functional.binary_cross_entropy_with_logits(net(X)[:, 0], y).backward()
        lr = 1e-2 * (1 - i / 50)
        theirs.param_groups[0]["lr"] = lr
        theirs.step()
        ours.step(lr)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(next(a.parameters()), _mlp(5, [32, 16], 1).state_dict()["0.weight"])


def test_a_fit_cut_short_anneals_its_rate(monkeypatch):
    """A fit that max_steps cuts short steps at lr·(1 + cos(π t / T)) / 2 (t = 0 .. T-1); a fit
    given all its epochs keeps the constant rate."""
    from aequum.engines.core import models

    rates: list[float] = []
    step = models.Adam.step
    monkeypatch.setattr(models.Adam, "step", lambda self, lr: (rates.append(lr), step(self, lr)))
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1_000, 2))
    y = (X[:, 0] > 0).astype(int)
    fit_surrogate(X, y, ["a", "b"], hidden=(4,), epochs=50, seed=0, lr=0.02, batch_size=200, max_steps=30)
    assert rates == [0.02 * 0.5 * (1 + math.cos(math.pi * t / 30)) for t in range(30)]
    rates.clear()
    fit_surrogate(X, y, ["a", "b"], hidden=(4,), epochs=5, seed=0, lr=0.02, batch_size=200, max_steps=30)
    assert rates == [0.02] * 20  # 5 epochs of 4 batches of the 800 training rows


def test_surrogate_single_class_is_an_error():
    with pytest.raises(ModelError, match="single class"):
        fit_surrogate(np.ones((10, 1)), np.ones(10), ["x"])


def test_surrogate_keeps_a_rare_class_and_the_recorded_rate():
    """7% denials: the class-balanced fit with a rate-matched threshold still finds the denials
    (an unweighted fit approves everyone) and approves as many as the lender did."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(20_000, 3))
    risk = X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.normal(size=len(X))
    y = (risk < np.quantile(risk, 0.93)).astype(int)
    m = fit_surrogate(X, y, ["a", "b", "c"], hidden=(16, 8), epochs=20, seed=0, operating_point="matched_rate")
    assert m.fidelity["holdout_balanced_accuracy"] > 0.85
    assert abs(m.fidelity["train_positive_rate"] - y.mean()) < 0.005
    assert 0.9 < m.fidelity["holdout_auc"] <= 1.0
    assert m.decide(X).min() == 0  # denials are predicted


def test_balanced_operating_point_is_the_best_threshold_by_brute_force():
    """Noisy decisions (the lender's are not a function of the inputs we see): the balanced
    threshold's balanced accuracy on the training rows equals the best over every threshold,
    exceeds the rate-matched one's, and holds on held-out rows."""
    from aequum.engines.core.models import balanced_threshold, decision_quality

    rng = np.random.default_rng(4)
    X = rng.normal(size=(20_000, 3))
    risk = X[:, 0] + 0.5 * X[:, 1] + 1.2 * rng.normal(size=len(X))  # much unseen noise
    y = (risk < np.quantile(risk, 0.93)).astype(int)
    bal = fit_surrogate(X, y, ["a", "b", "c"], hidden=(16, 8), epochs=20, seed=0)
    rate = fit_surrogate(X, y, ["a", "b", "c"], hidden=(16, 8), epochs=20, seed=0, operating_point="matched_rate")
    assert bal.fidelity["holdout_balanced_accuracy"] > rate.fidelity["holdout_balanced_accuracy"] + 0.05
    assert bal.fidelity["holdout_auc"] == pytest.approx(rate.fidelity["holdout_auc"], abs=1e-12)  # same scores
    score = rng.normal(size=300).round(1)  # ties
    target = (score + rng.normal(size=300) > 0.8).astype(int)
    best = max(decision_quality(target, score, t)["balanced_accuracy"] for t in np.r_[score, score.min() - 1])
    assert decision_quality(target, score, balanced_threshold(target, score))["balanced_accuracy"] == pytest.approx(best, abs=1e-15)
    flipped = balanced_threshold(target[::-1], score[::-1])  # row order does not matter
    assert flipped == balanced_threshold(target, score)
    with pytest.raises(ModelError, match="both classes"):
        balanced_threshold(np.ones(5), score[:5])


def test_decision_quality_against_hand_counts():
    from aequum.engines.core.models import decision_quality

    target = np.array([1, 1, 1, 0, 0])
    score = np.array([2.0, 0.5, -1.0, 0.7, -3.0])  # decisions 1, 1, 0, 1, 0
    q = decision_quality(target, score)
    assert q["accuracy"] == 3 / 5 and q["tpr"] == 2 / 3 and q["fpr"] == 1 / 2
    assert q["balanced_accuracy"] == (2 / 3 + 1 / 2) / 2 and q["positive_rate"] == 3 / 5
    # AUC by pairs: positives (2.0, 0.5, -1.0) vs negatives (0.7, -3.0): 2 + 1 + 1 = 4 of 6
    assert q["auc"] == 4 / 6


def test_a_surrogate_of_noise_is_degenerate():
    from aequum.engines.core.model_quality import degenerate

    rng = np.random.default_rng(2)
    X = rng.normal(size=(4_000, 2))
    y = (rng.random(4_000) < 0.5).astype(int)  # decisions unrelated to the inputs
    m = fit_surrogate(X, y, ["a", "b"], hidden=(8,), epochs=5, seed=0)
    assert "balanced accuracy" in degenerate(m, 0.6)
    good = fit_surrogate(X, (X[:, 0] > 0).astype(int), ["a", "b"], hidden=(8,), epochs=30, seed=0)
    assert degenerate(good, 0.6) is None


def test_average_ranks_equal_scipys_with_ties():
    """The AUC's ranks (no scipy import on the audit's path) equal scipy's average ranks."""
    from scipy.stats import rankdata

    from aequum.engines.core.models import auc, average_ranks

    rng = np.random.default_rng(5)
    for values in (rng.normal(size=500), rng.integers(0, 7, 500).astype(float), np.ones(4), np.array([2.0])):
        assert np.array_equal(average_ranks(values), rankdata(values))
    y = rng.integers(0, 2, 500)
    s = rng.integers(0, 5, 500).astype(float)
    pos, neg = s[y == 1], s[y == 0]
    by_pairs = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))
    assert auc(y, s) == pytest.approx(by_pairs, abs=1e-12)


def test_a_subsets_order_taken_from_the_whole_equals_sorting_the_subset():
    """model_quality sorts the scores once; each group's ranks come from that order."""
    from aequum.engines.core.models import auc, average_ranks, subset_order

    rng = np.random.default_rng(11)
    for values in (rng.normal(size=2000), rng.integers(0, 9, 2000).astype(float)):  # with and without ties
        order = np.argsort(values, kind="stable")
        for mask in (rng.random(2000) < 0.3, np.zeros(2000, bool), np.ones(2000, bool)):
            sub = subset_order(order, mask)
            assert np.array_equal(sub, np.argsort(values[mask], kind="stable"))
            assert np.array_equal(average_ranks(values[mask], sub), average_ranks(values[mask]))
        y = rng.integers(0, 2, 2000)
        mask = rng.random(2000) < 0.5
        assert auc(y[mask], values[mask], subset_order(order, mask)) == auc(y[mask], values[mask])
