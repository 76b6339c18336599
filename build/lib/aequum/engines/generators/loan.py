"""The CST paper's synthetic loan applications (Alvarez & Ruggieri 2023, §4.1, Fig. 1).

    A  ~ Ber(female_share)                       (1 = female, the protected status)
    X1 <- (-$1500) · Poi(10) · A + U1,   U1 ~ $10000 · Poi(10)          annual salary
    X2 <- (-$300) · χ²(4) · A + (3/10) · X1 + U2,   U2 ~ $2500 · N(0, 1)   account balance
    Ŷ  = sign(X1 + 5·X2 − 225000) ∈ {−1, +1}

Columns as in the reference's ``LoanApplication_v2.csv`` (LoanApproval, AnnualSalary,
AccountBalance, u1, u2, Gender) plus ``id``. The paper says A ~ Ber(0.45); the reference data
has 35 % women (1,712 of 4,993): ``female_share`` defaults to the reference's 0.35.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

DEFAULT_ROWS = 5000


def generate_loan(n: int = DEFAULT_ROWS, seed: int | list[int] = 0, female_share: float = 0.35,
                  first_id: int = 0) -> pa.Table:
    """``n`` loan applications drawn from the paper's SCM with a seeded generator."""
    if n <= 0:
        raise ValueError(f"loan generator: rows must be positive, got {n}")
    if not 0 <= female_share <= 1:
        raise ValueError(f"loan generator: female_share must be in [0, 1], got {female_share}")
    rng = np.random.default_rng(seed)
    a = (rng.random(n) < female_share).astype(np.int64)
    u1 = 10000.0 * rng.poisson(10, n)
    x1 = -1500.0 * rng.poisson(10, n) * a + u1
    u2 = 2500.0 * rng.standard_normal(n)
    x2 = -300.0 * rng.chisquare(4, n) * a + 0.3 * x1 + u2
    y = np.where(x1 + 5 * x2 - 225000 >= 0, 1.0, -1.0)
    return pa.table({"id": np.arange(first_id, first_id + n), "LoanApproval": y, "AnnualSalary": x1,
                     "AccountBalance": x2, "u1": u1, "u2": u2, "Gender": a})


def iter_loan_batches(n: int = DEFAULT_ROWS, seed: int = 0, batch_rows: int = 250_000,
                      female_share: float = 0.35) -> Iterator[pa.RecordBatch]:
    """The same draws in batches (one generator stream per batch index, seeded from ``seed``)."""
    if n <= batch_rows:
        yield from generate_loan(n, seed, female_share).to_batches()
        return
    for i, start in enumerate(range(0, n, batch_rows)):
        size = min(batch_rows, n - start)
        yield from generate_loan(size, [seed, i], female_share, start).to_batches()
