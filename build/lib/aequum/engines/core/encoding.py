"""Feature encoding shared by the engines: the papers' numeric spaces and the way back.

Input is the raw feature matrix of :meth:`engines.core.data.AuditData.feature_values`
(numeric values, ordinal ranks 0..n−1, categorical codes). :class:`Encoder` maps it to

* numeric: min–max to [0, 1] (FGCE), z-score (CST's reference, CEC), or raw;
* ordinal: rank / (levels − 1) in [0, 1] (Thanh et al.'s ordinal distance), or the rank;
* categorical: one-hot columns ``name=value`` (FGCE), or the integer code;

and :meth:`Encoder.inverse` maps encoded points (e.g. counterfactuals found in the encoded
space) back to raw units: one-hot blocks by their largest entry, ordinal ranks rounded to the
nearest level, numeric values unscaled. Statistics are fitted once (``fit``) and reused, so
factual and counterfactual points share one scale unless a caller fits them separately.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

Numeric = Literal["minmax", "zscore", "raw"]


@dataclass
class Encoder:
    names: list[str]
    kinds: list[str]                      # numeric | ordinal | categorical
    levels: list[list[str] | None]        # ordinal / categorical values in code order
    numeric: Numeric = "minmax"
    ordinal: Literal["unit", "rank"] = "unit"
    categorical: Literal["onehot", "code"] = "onehot"
    centre: np.ndarray = field(default=None, repr=False)   # per raw feature
    scale: np.ndarray = field(default=None, repr=False)
    columns: list[str] = field(default_factory=list)
    slices: dict[str, slice] = field(default_factory=dict)

    @classmethod
    def fit(cls, X: np.ndarray, names: list[str], kinds: list[str], levels: list[list[str] | None],
            numeric: Numeric = "minmax", ordinal: str = "unit", categorical: str = "onehot") -> "Encoder":
        """Fit the scaling statistics on raw rows ``X`` (rows × features)."""
        X = np.asarray(X, np.float64)
        if X.ndim != 2 or X.shape[1] != len(names):
            raise ValueError(f"encoder: X has shape {X.shape}, expected (rows, {len(names)})")
        for n, k, lv in zip(names, kinds, levels):
            if k not in ("numeric", "ordinal", "categorical"):
                raise ValueError(f"encoder: feature {n!r} has unknown type {k!r}")
            if k != "numeric" and not lv:
                raise ValueError(f"encoder: {k} feature {n!r} needs its levels")
        enc = cls(list(names), list(kinds), [list(map(str, lv)) if lv else None for lv in levels],
                  numeric, ordinal, categorical)
        centre, scale = np.zeros(len(names)), np.ones(len(names))
        for j, kind in enumerate(kinds):
            col = X[:, j][np.isfinite(X[:, j])]
            if kind == "numeric" and len(col) and numeric != "raw":
                if numeric == "minmax":
                    centre[j], spread = col.min(), col.max() - col.min()
                else:
                    centre[j], spread = col.mean(), col.std(ddof=1) if len(col) > 1 else 0.0
                scale[j] = spread if spread > 0 else 1.0
            elif kind == "ordinal" and ordinal == "unit":
                scale[j] = max(len(enc.levels[j]) - 1, 1)
        enc.centre, enc.scale = centre, scale
        start = 0
        for j, (n, kind) in enumerate(zip(names, kinds)):
            if kind == "categorical" and categorical == "onehot":
                cols = [f"{n}={v}" for v in enc.levels[j]]
            else:
                cols = [n]
            enc.columns += cols
            enc.slices[n] = slice(start, start + len(cols))
            start += len(cols)
        return enc

    @property
    def width(self) -> int:
        return len(self.columns)

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Raw rows -> encoded rows (rows × ``width``)."""
        X = np.asarray(X, np.float64)
        Z = np.zeros((len(X), self.width))
        for j, (n, kind) in enumerate(zip(self.names, self.kinds)):
            s = self.slices[n]
            if kind == "categorical" and self.categorical == "onehot":
                codes = X[:, j]
                bad = ~np.isin(codes, np.arange(len(self.levels[j])))
                if bad.any():
                    raise ValueError(f"encoder: feature {n!r} has code(s) outside its "
                                     f"{len(self.levels[j])} categories, e.g. {codes[bad][0]!r}")
                Z[np.arange(len(X)), s.start + codes.astype(np.int64)] = 1.0
            else:
                Z[:, s.start] = (X[:, j] - self.centre[j]) / self.scale[j]
        return Z

    def inverse(self, Z: np.ndarray) -> np.ndarray:
        """Encoded rows -> raw rows: one-hot by argmax, ordinal ranks rounded and clipped."""
        Z = np.asarray(Z, np.float64)
        X = np.empty((len(Z), len(self.names)))
        for j, (n, kind) in enumerate(zip(self.names, self.kinds)):
            s = self.slices[n]
            if kind == "categorical" and self.categorical == "onehot":
                X[:, j] = np.argmax(Z[:, s], axis=1)
            else:
                X[:, j] = Z[:, s.start] * self.scale[j] + self.centre[j]
                if kind != "numeric":
                    X[:, j] = np.clip(np.rint(X[:, j]), 0, len(self.levels[j]) - 1)
        return X

    def raw_values(self, X: np.ndarray) -> list[list[object]]:
        """Raw rows with ordinal / categorical codes replaced by their values (for reports)."""
        out = []
        for row in np.asarray(X):
            out.append([self.levels[j][int(v)] if self.kinds[j] != "numeric" else float(v)
                        for j, v in enumerate(row)])
        return out


def encoder_for(data, names: list[str] | None = None, **options) -> Encoder:
    """An :class:`Encoder` fitted on an AuditData's staged records (spec types and levels)."""
    names = list(names or data.spec.feature_names)
    kinds = [data.spec.feature(n).type for n in names]
    levels = [data.levels(n) for n in names]
    return Encoder.fit(data.feature_values(names), names, kinds, levels, **options)
