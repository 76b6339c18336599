"""The CEC paper's synthetic credit data (Popoola & Sheppard, §5 "Synthetic Data").

n = 10,000 records, d = 20 features: 10 financial features F independent of the protected
attribute A, 5 proxy features P shifted by 0.5σ between groups (e.g. residential segregation),
5 noise features N. Labels depend on the financial features only:
y = 1[Σ_{j∈F} w_j x_j + ε > τ].

The paper leaves w, ε, τ and the group share unstated; here w_j ~ U(0.5, 1.5) drawn once from
a fixed stream (the same for every seed), ε ~ N(0, σ_ε²) with σ_ε = 0.5, τ = 0 (about half the
records positive), and P(A = 1) = ``protected_share`` (default 0.5).
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

DEFAULT_ROWS = 10_000
FINANCIAL = [f"fin_{j}" for j in range(1, 11)]
PROXY = [f"proxy_{j}" for j in range(1, 6)]
NOISE = [f"noise_{j}" for j in range(1, 6)]
WEIGHTS = np.random.default_rng(20260).uniform(0.5, 1.5, len(FINANCIAL))


def generate_cec(n: int = DEFAULT_ROWS, seed: int | list[int] = 0, protected_share: float = 0.5,
                 noise_sd: float = 0.5, threshold: float = 0.0, first_id: int = 0) -> pa.Table:
    if n <= 0:
        raise ValueError(f"cec_synthetic generator: rows must be positive, got {n}")
    if not 0 < protected_share < 1:
        raise ValueError(f"cec_synthetic generator: protected_share must be in (0, 1), got {protected_share}")
    rng = np.random.default_rng(seed)
    a = (rng.random(n) < protected_share).astype(np.int8)
    fin = rng.standard_normal((n, len(FINANCIAL)))
    proxy = rng.standard_normal((n, len(PROXY))) + 0.5 * a[:, None]
    noise = rng.standard_normal((n, len(NOISE)))
    y = (fin @ WEIGHTS + rng.normal(0, noise_sd, n) > threshold).astype(np.int8)
    cols = {"id": np.arange(first_id, first_id + n), "group": a}
    cols.update({c: fin[:, j] for j, c in enumerate(FINANCIAL)})
    cols.update({c: proxy[:, j] for j, c in enumerate(PROXY)})
    cols.update({c: noise[:, j] for j, c in enumerate(NOISE)})
    cols["label"] = y
    return pa.table(cols)


def iter_cec_batches(n: int = DEFAULT_ROWS, seed: int = 0, batch_rows: int = 250_000) -> Iterator[pa.RecordBatch]:
    """The records in batches, one random stream per batch index."""
    if n <= batch_rows:
        yield from generate_cec(n, seed).to_batches()
        return
    for i, start in enumerate(range(0, n, batch_rows)):
        yield from generate_cec(min(batch_rows, n - start), [seed, i], first_id=start).to_batches()
