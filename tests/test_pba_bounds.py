"""PBA bounds and LP (seed 004 §A.2) against brute force on small networks."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from aequum.engines.verification import bounds as bnd
from aequum.engines.verification import lp
from aequum.engines.verification.network import Network, shared_neurons

D = 4          # inputs: three numeric z and the sensitive s (last column)
SENS = [3]


def network(hidden, seed, scale=1.0) -> Network:
    rng = np.random.default_rng(seed)
    sizes = [D, *hidden, 1]
    Ws = tuple(rng.normal(scale=scale / np.sqrt(a), size=(b, a)) for a, b in zip(sizes[:-1], sizes[1:]))
    bs = tuple(rng.normal(scale=0.3, size=b) for b in sizes[1:])
    return Network(Ws, bs, ("z1", "z2", "z3", "s"))


def boxes(n, seed, radius):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D))
    x[:, 3] = rng.integers(0, 2, n)
    lo, hi = x - radius, x + radius
    lo[:, 3] = hi[:, 3] = x[:, 3]
    xb = x.copy()
    xb[:, 3] = 1 - x[:, 3]
    return x, xb, lo, hi


def sampled_twin(net, x, xb, lo, hi, coef, samples=4000, seed=0):
    """min over dense random points (and the box corners) of coef·(score(x) − score(x′))."""
    rng = np.random.default_rng(seed)
    out = np.empty(len(x))
    corners = np.array(np.meshgrid(*[[0, 1]] * 3)).reshape(3, -1).T
    for i in range(len(x)):
        u = np.vstack([rng.random((samples, 3)), corners])
        z = lo[i, :3] + u * (hi[i, :3] - lo[i, :3])
        a = np.column_stack([z, np.full(len(z), x[i, 3])])
        b = np.column_stack([z, np.full(len(z), xb[i, 3])])
        out[i] = (coef[i] * (net.score(a) - net.score(b))).min()
    return out


def twin_bounds(net, x, xb, lo, hi, coef):
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))  # noqa: E731
    layers = net.torch_layers()
    lo_b, hi_b = lo.copy(), hi.copy()
    lo_b[:, 3] = hi_b[:, 3] = xb[:, 3]
    n = len(x)
    sym = bnd.symbolic_bounds(layers, t(np.vstack([lo, lo_b])), t(np.vstack([hi, hi_b])))
    ba, bb = [(l[:n], u[:n]) for l, u in sym], [(l[n:], u[n:]) for l, u in sym]
    shared = [torch.from_numpy(m) for m in shared_neurons(net, SENS)]
    c = t(coef[:, None])
    symbolic = bnd.twin_lower_bound(layers, ba, bb, c, t(x), t(xb), t(lo), t(hi), SENS, shared)[:, 0].numpy()
    ia, ib = bnd.interval_bounds(layers, t(lo), t(hi)), bnd.interval_bounds(layers, t(lo_b), t(hi_b))
    interval = bnd.twin_interval_lower_bound(ia, ib, c)[:, 0].numpy()
    np_a = [(l.numpy(), u.numpy()) for l, u in ba[:-1]]
    np_b = [(l.numpy(), u.numpy()) for l, u in bb[:-1]]
    return symbolic, interval, np_a, np_b


@pytest.mark.parametrize("hidden,seed", [((16,), 0), ((20, 10), 1), ((12, 8, 6), 2)])
def test_symbolic_bound_is_sound_and_at_least_the_interval_bound(hidden, seed):
    net = network(hidden, seed)
    x, xb, lo, hi = boxes(40, seed, radius=0.3)
    coef = np.where(np.arange(40) % 2 == 0, 1.0, -1.0)
    symbolic, interval, _, _ = twin_bounds(net, x, xb, lo, hi, coef)
    truth = sampled_twin(net, x, xb, lo, hi, coef)
    assert np.all(symbolic <= truth + 1e-9)
    assert np.all(interval <= truth + 1e-9)
    assert np.all(symbolic >= interval - 1e-9)
    assert np.mean(symbolic > interval + 1e-6) > 0.9      # and strictly tighter almost always


@pytest.mark.parametrize("hidden,seed", [((6,), 3), ((6, 4), 4), ((8, 5), 5)])
def test_lp_bound_never_exceeds_the_true_minimum_and_the_milp_is_it(hidden, seed):
    net = network(hidden, seed, scale=2.0)
    x, xb, lo, hi = boxes(12, seed, radius=0.6)
    coef = np.where(np.arange(12) % 2 == 0, 1.0, -1.0)
    symbolic, _, np_a, np_b = twin_bounds(net, x, xb, lo, hi, coef)
    shared = shared_neurons(net, SENS)
    truth = sampled_twin(net, x, xb, lo, hi, coef, samples=20000)
    h = lp.new_highs()
    tighter = 0
    for i in range(len(x)):
        copies = lambda: [lp.Copy(x[i], [(l[i], u[i]) for l, u in np_a], coef[i]),  # noqa: E731
                          lp.Copy(xb[i], [(l[i], u[i]) for l, u in np_b], -coef[i])]
        relaxed = lp.solve(net, copies(), lo[i], hi[i], SENS, shared, time_limit=None, highs=h)
        exact = lp.solve(net, copies(), lo[i], hi[i], SENS, shared, exact=True, time_limit=None, highs=h)
        assert symbolic[i] <= relaxed.bound + 1e-5          # the LP is at least the symbolic bound
        assert relaxed.bound <= exact.bound + 1e-5          # ... a relaxation of the MILP
        assert exact.bound <= truth[i] + 1e-6               # ... which never exceeds the true min
        # the MILP's optimum is attained by its own point, replayed through the network
        a, b = exact.point.copy(), exact.point.copy()
        b[3] = xb[i, 3]
        replay = coef[i] * (net.score(a[None])[0] - net.score(b[None])[0])
        assert replay == pytest.approx(exact.bound, abs=1e-5)
        assert replay <= truth[i] + 1e-6                    # sampling cannot beat the exact optimum
        tighter += relaxed.bound > symbolic[i] + 1e-6
    assert tighter > 0


def test_shared_neurons_make_a_network_without_s_cancel_exactly():
    net = network((10, 6), 7)
    W0 = net.weights[0].copy()
    W0[:, 3] = 0.0
    net = Network((W0, *net.weights[1:]), net.biases, net.feature_names)
    assert all(m.all() for m in shared_neurons(net, SENS))
    x, xb, lo, hi = boxes(20, 7, radius=0.5)
    coef = np.ones(20)
    symbolic, interval, np_a, np_b = twin_bounds(net, x, xb, lo, hi, coef)
    assert np.all(symbolic == 0.0) and np.all(interval < 0)
    res = lp.solve(net, [lp.Copy(x[0], [(l[0], u[0]) for l, u in np_a], 1.0),
                         lp.Copy(xb[0], [(l[0], u[0]) for l, u in np_b], -1.0)],
                   lo[0], hi[0], SENS, shared_neurons(net, SENS), time_limit=None)
    assert abs(res.bound) <= 2e-6


def test_linear_model_bounds_are_exact():
    rng = np.random.default_rng(8)
    net = Network((rng.normal(size=(1, D)),), (np.array([0.2]),), ("z1", "z2", "z3", "s"))
    x, xb, lo, hi = boxes(10, 8, radius=0.4)
    coef = np.ones(10)
    symbolic, interval, _, _ = twin_bounds(net, x, xb, lo, hi, coef)
    w = net.weights[0][0, 3]
    assert np.allclose(symbolic, w * (x[:, 3] - xb[:, 3]), atol=1e-12)
