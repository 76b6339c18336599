"""The built-in generators by name, as streams of Arrow record batches.

``stream`` yields (data batch, ground-truth batch or None); ``batches`` only the data.
"""
from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

NAMES = ("loan", "cec_synthetic", "hmda", "hmda_lender")


def stream(name: str, rows: int | None = None, seed: int = 0,
           batch_rows: int = 250_000) -> Iterator[tuple[pa.RecordBatch, pa.RecordBatch | None]]:
    if name == "loan":
        from aequum.engines.generators.loan import DEFAULT_ROWS, iter_loan_batches

        for b in iter_loan_batches(rows or DEFAULT_ROWS, seed, batch_rows):
            yield b, None
    elif name == "cec_synthetic":
        from aequum.engines.generators.cec_synthetic import DEFAULT_ROWS, iter_cec_batches

        for b in iter_cec_batches(rows or DEFAULT_ROWS, seed, batch_rows):
            yield b, None
    elif name == "hmda":
        from aequum.engines.generators.hmda import DEFAULT_ROWS, iter_hmda_batches

        yield from iter_hmda_batches(rows or DEFAULT_ROWS, seed, batch_rows)
    elif name == "hmda_lender":
        from aequum.engines.generators.hmda import DEFAULT_ROWS, iter_lender_batches

        yield from iter_lender_batches(rows or DEFAULT_ROWS, seed, batch_rows)
    else:
        raise ValueError(f"unknown generator {name!r}; known: {list(NAMES)}")


def batches(name: str, rows: int | None = None, seed: int = 0,
            batch_rows: int = 250_000) -> Iterator[pa.RecordBatch]:
    for data, _truth in stream(name, rows, seed, batch_rows):
        yield data


def module_file(name: str) -> str:
    """The source file of a generator (its code is part of what a generated dataset is)."""
    if name not in NAMES:
        raise ValueError(f"unknown generator {name!r}; known: {list(NAMES)}")
    from importlib import import_module

    return import_module(f"aequum.engines.generators.{name.removesuffix('_lender')}").__file__


def mechanism(name: str) -> dict | None:
    """The planted discrimination mechanism of a generator, where it has one."""
    if name in ("hmda", "hmda_lender"):
        from aequum.engines.generators.hmda import MECHANISM

        return MECHANISM
    return None


def truth(name: str, rows: int | None = None, seed: int = 0) -> pa.Table | None:
    """A generator's ground truth of harm (the table written beside its files), where it has one."""
    if name in ("hmda", "hmda_lender"):  # the same applications, so the same truth
        from aequum.engines.generators.hmda import DEFAULT_ROWS, hmda_truth

        return hmda_truth(rows or DEFAULT_ROWS, seed)
    return None
