"""``aequum bench cec``: CEC matching, integrated gradients and the CEC loss, measured.

1. Algorithm 1 at 1M records (cec_synthetic, 10 financial features, 4 partitions): pairs
   matched per second by the KD-tree matching, against blocked brute-force numpy (all pairs of
   the same partitions) on a random subsample of the same queries — brute force over 1M x 250k
   distances would take hours — checked to find the same counterparts.
2. Integrated gradients (MLP [128, 64], 20 inputs, float64 as the audit runs them), exact (the
   audit's default) and the paper's midpoint rule at T = 32: pairs per second, the FLOPs that
   implies, the ratio to this CPU's measured float64 matmul rate at the same thread count, and
   the completeness error each leaves.
3. Training overhead of the CEC loss: seconds per epoch of the cec objective against the plain
   one (the paper reports 3–5x), on cec_synthetic records with the paper's network, at the
   training defaults (CEC loss on 32 pairs per batch, T = 8 stratified points) and on every pair
   at the paper's T = 32.
"""
from __future__ import annotations

import time

import numpy as np
import torch


def _matching(n: int, sample: int) -> dict:
    from aequum.engines.generators.cec_synthetic import FINANCIAL, generate_cec
    from aequum.engines.matching.cec.matching import match, standardise

    t = generate_cec(n, seed=0)
    Z = standardise(np.column_stack([t[c].to_numpy() for c in FINANCIAL]))
    group, label = t["group"].to_numpy().astype(np.int8), t["label"].to_numpy().astype(np.int8)
    t0 = time.perf_counter()
    m = match(Z, group, label)
    seconds = time.perf_counter() - t0

    rng = np.random.default_rng(0)
    queries = np.sort(rng.choice(len(m), size=min(sample, len(m)), replace=False))
    t0 = time.perf_counter()
    agree = 0
    for s_, a in [(s_, a) for s_ in (0, 1) for a in (0, 1)]:
        q = m.factual[queries][(m.group[queries] == a) & (m.stratum[queries] == s_)]
        pool = np.flatnonzero((group == 1 - a) & (label == s_))
        qpos = np.searchsorted(m.factual, q)
        found = np.empty(len(q), np.int64)
        sq_pool = (Z[pool] ** 2).sum(1)
        for b in range(0, len(q), 256):
            qq = Z[q[b:b + 256]]
            d2 = sq_pool[None, :] - 2 * qq @ Z[pool].T + (qq ** 2).sum(1)[:, None]
            found[b:b + 256] = pool[np.argmin(d2, axis=1)]
        agree += int((found == m.counterpart[qpos]).sum())
    brute_seconds = time.perf_counter() - t0
    return {"records": n, "seconds": seconds, "pairs_per_s": len(m) / seconds,
            "brute_queries": len(queries), "brute_seconds": brute_seconds,
            "brute_pairs_per_s": len(queries) / brute_seconds, "agree": agree}


def _ig_rate(pairs: int, steps: int = 32, d: int = 20, batch_pairs: int = 512) -> dict:
    import torch as th

    from aequum.engines.core.models import TorchMLP
    from aequum.engines.matching.cec.attributions import _first_layer, attribute_pairs, relu_layers

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = TorchMLP([f"x{j}" for j in range(d)], [128, 64], 1)
    X, Xc = rng.normal(size=(pairs, d)), rng.normal(size=(pairs, d))
    B = np.tile(X.mean(0), (pairs, 1))
    out = {"pairs": pairs, "threads": torch.get_num_threads()}
    w = d * 128 + 128 * 64 + 64    # multiply-adds of one forward pass
    # exact: per path the first layer (2 products with d x 128), the second layer at the first
    # layer's sign changes (k + 2 points, padded to the batch's largest k), the contraction
    # over (k, 64) and one 64 x 128 and one 128 x d product
    layers = relu_layers(model)
    work = 0.0
    for s in range(0, pairs, batch_pairs):
        both = th.from_numpy(np.concatenate([X[s:s + batch_pairs], Xc[s:s + batch_pairs]]))
        base = th.from_numpy(np.concatenate([B[s:s + batch_pairs]] * 2))
        _, _, t = _first_layer(layers, both - base, base)
        k = int(th.isfinite(t).sum(1).max())
        work += len(both) * 2 * (2 * d * 128 + (k + 2) * (128 * 64 + 128) + k * 64 + 64 * 128 + 128 * d)
    # riemann: each pair has 2·T path points, each a forward (2w FLOPs) and a backward to the
    # input (about 4w), plus 3 scored rows (x, x̃, b) in both methods
    for method, flops in (("exact", work + pairs * 3 * 2 * w), ("riemann", pairs * (2 * steps * 6 * w + 3 * 2 * w))):
        attribute_pairs(model, X[:512], Xc[:512], B[:512], method, steps)   # warm-up
        t0 = time.perf_counter()
        res = attribute_pairs(model, X, Xc, B, method, steps)
        seconds = time.perf_counter() - t0
        out[method] = {"seconds": seconds, "pairs_per_s": pairs / seconds, "gflops": flops / seconds / 1e9,
                       "completeness_max": float(res["completeness"].max()),
                       "completeness_mean": float(res["completeness"].mean())}
    n = 1024
    A, Bm = torch.randn(n, n, dtype=torch.float64), torch.randn(n, n, dtype=torch.float64)
    A @ Bm
    reps = 5
    t0 = time.perf_counter()
    for _ in range(reps):
        A @ Bm
    out["matmul_gflops"] = reps * 2 * n ** 3 / (time.perf_counter() - t0) / 1e9
    for method in ("exact", "riemann"):
        out[method]["ratio"] = out[method]["gflops"] / out["matmul_gflops"]
    return out


def _training_overhead(n: int, epochs: int) -> dict:
    from aequum.engines.generators.cec_synthetic import FINANCIAL, NOISE, PROXY, generate_cec
    from aequum.engines.matching.cec.training import TrainConfig, make_pairs, train

    t = generate_cec(n, seed=1)
    names = FINANCIAL + PROXY + NOISE
    X = np.column_stack([t[c].to_numpy() for c in names])
    merit = X[:, :len(FINANCIAL)]
    y, a = t["label"].to_numpy().astype(np.int8), t["group"].to_numpy().astype(np.int8)
    pairs = make_pairs(X, merit, y, a)
    default = TrainConfig(epochs=epochs)
    runs = {"plain": default.for_objective("plain"), "eo": default.for_objective("eo"),
            "cec": default.for_objective("cec"),
            "cec_t32_all": TrainConfig(epochs=epochs, steps=32, cec_pairs=0).for_objective("cec")}
    out = {}
    for name, config in runs.items():
        per_epoch = []
        train(X, y, a, pairs, names, config, lambda e: per_epoch.append(e["seconds"]))
        out[name] = float(np.median(per_epoch))
    return {"records": n, "epochs": epochs, "steps": default.steps, "cec_pairs": default.cec_pairs, **out,
            **{f"overhead_{k}": out[k] / out["plain"] for k in ("eo", "cec", "cec_t32_all")}}


def run(quick: bool = False) -> dict:
    n = 100_000 if quick else 1_000_000
    m = _matching(n, sample=2_000 if quick else 5_000)
    print(f"Algorithm 1 matching, {m['records']:,} records (cec_synthetic, 10 financial features):")
    print(f"  KD-tree per (label, group) partition: {m['seconds']:.2f} s, {m['pairs_per_s']:,.0f} pairs/s")
    print(f"  brute-force numpy (all distances to the partition) on {m['brute_queries']:,} of the same "
          f"queries: {m['brute_seconds']:.2f} s, {m['brute_pairs_per_s']:,.0f} pairs/s "
          f"-> matching is {m['pairs_per_s'] / m['brute_pairs_per_s']:.0f}x faster; "
          f"same counterpart for {m['agree']:,}/{m['brute_queries']:,}")
    ig = _ig_rate(2_000 if quick else 20_000)
    ex, ri = ig["exact"], ig["riemann"]
    print(f"Integrated gradients, MLP [128, 64], 20 inputs, float64, {ig['threads']} thread(s), {ig['pairs']:,} pairs; "
          f"float64 matmul on this CPU {ig['matmul_gflops']:.2f} GFLOP/s:")
    print(f"  exact (the audit's default: the path's linear segments, second layer evaluated at the first "
          f"layer's sign changes): {ex['pairs_per_s']:,.0f} pairs/s, {ex['gflops']:.2f} GFLOP/s "
          f"(ratio {ex['ratio']:.2f}); completeness error worst {ex['completeness_max']:.1e}, "
          f"mean {ex['completeness_mean']:.1e}")
    print(f"  riemann T = 32 (the paper's midpoint rule): {ri['pairs_per_s']:,.0f} pairs/s, {ri['gflops']:.2f} GFLOP/s "
          f"(ratio {ri['ratio']:.2f}); completeness error worst {ri['completeness_max']:.1e}, "
          f"mean {ri['completeness_mean']:.1e} -> exact is {ex['pairs_per_s'] / ri['pairs_per_s']:.2f}x its speed")
    tr = _training_overhead(2_000 if quick else 10_000, 2 if quick else 3)
    print(f"Training (MLP [128, 64], batch 64), {tr['records']:,} records, median s/epoch over {tr['epochs']} epochs:")
    print(f"  plain {tr['plain']:.2f} s, eo {tr['eo']:.2f} s ({tr['overhead_eo']:.1f}x), "
          f"cec {tr['cec']:.2f} s ({tr['overhead_cec']:.1f}x plain; the paper: 3-5x) with the CEC loss on "
          f"{tr['cec_pairs']} pairs per batch at T = {tr['steps']} stratified points; "
          f"on every pair at T = 32: {tr['cec_t32_all']:.2f} s ({tr['overhead_cec_t32_all']:.1f}x)")
    return {"matching": m, "ig": ig, "training": tr}
