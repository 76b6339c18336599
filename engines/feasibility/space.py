"""FGCE feature space: the encoded points and the feasibility constraints between them.

Fragkathoulas et al., *Feasible group counterfactual explanations* (FGCE, §3–4), and
the FGCE paper's reference setup (docs/engines.md, FGCE):

* every feature is mapped into [0, 1]: numeric min–max (a constant column becomes 0), ordinal
  rank / (levels − 1), a categorical feature with exactly two levels as one 0/1 column (its
  code, the reference's label encoding), a categorical feature with more levels as one-hot
  columns ``name=level``;
* the reference optionally discretises listed continuous features into
  min(6, ⌊log2 #unique⌋ + 1, range) uniform bins; here that is opt-in (``discretise``) and the
  bin index is then scaled like an ordinal rank;
* a directed move x_i → x_j is *feasible* when every feature's change respects its
  constraint: immutable features stay equal, increase-only features do not decrease,
  decrease-only features do not increase, and a categorical (or ordinal) feature with declared
  ``transitions`` changes only along an allowed (from, to) pair (staying equal is always
  allowed). For a one-hot block the direction applies to the decoded category code.

The protected attribute is not a feature of the space: callers group by it (groups never
connect, see :mod:`engines.feasibility.graph`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from aequum.engines.core.encoding import Encoder

KINDS = ("numeric", "ordinal", "categorical")
MUTABILITY = {"free": 0, "increase": 1, "decrease": -1, "immutable": 0}


def n_bins(values: np.ndarray) -> int:
    """Bins of the reference's discretisation: min(6, ⌊log2 #unique⌋ + 1, ⌊range⌋), at least 1."""
    v = values[np.isfinite(values)]
    if len(v) == 0:
        return 1
    uniq = len(np.unique(v))
    rng = int(math.floor(v.max() - v.min()))
    return max(1, min(6, int(math.floor(math.log2(uniq))) + 1, rng))


def discretise_column(values: np.ndarray, bins: int) -> np.ndarray:
    """Uniform-width bin index 0..bins−1 of each value over [min, max] (the top edge is closed)."""
    lo, hi = np.nanmin(values), np.nanmax(values)
    if bins <= 1 or hi <= lo:
        return np.zeros(len(values))
    idx = np.floor((values - lo) / (hi - lo) * bins)
    return np.clip(idx, 0, bins - 1)


@dataclass
class FeatureSpace:
    """Encoded points plus per-column and per-feature constraints (FGCE §3).

    ``Z``: rows × columns in [0, 1]; ``columns``: column names; ``direction``: per column +1
    (increase-only), −1 (decrease-only), 0 (free); ``immutable``: per column; ``slices``: per
    original feature its column slice; ``transitions``: feature → set of allowed
    (from_code, to_code) pairs (codes index ``levels``); ``codes``: per categorical / ordinal
    feature the raw integer code of every row (decoded once, used by :meth:`feasible_pairs`);
    ``encoder``: the fitted :class:`engines.core.encoding.Encoder` that produced ``Z`` (its
    ``inverse`` maps encoded points back to raw rows; discretised features come back as bins).
    """

    Z: np.ndarray
    columns: list[str]
    direction: np.ndarray
    immutable: np.ndarray
    slices: dict[str, slice]
    names: list[str]
    kinds: list[str]
    levels: list[list[str] | None]
    mutability: dict[str, str]
    transitions: dict[str, set[tuple[int, int]]] = field(default_factory=dict)
    codes: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    bins: dict[str, int] = field(default_factory=dict)
    encoder: Encoder | None = field(default=None, repr=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(cls, X_raw: np.ndarray, names: Sequence[str], kinds: Sequence[str],
              levels: Sequence[Sequence[str] | None], mutability: Mapping[str, str] | None = None,
              transitions: Mapping[str, Iterable[tuple]] | None = None,
              discretise: Iterable[str] = ()) -> "FeatureSpace":
        """Encode raw rows (as :meth:`AuditData.feature_values` gives them) into the FGCE space.

        ``X_raw``: numeric values, ordinal ranks 0..n−1, categorical codes in ``levels`` order.
        ``mutability``: feature → free | increase | decrease | immutable (missing → free).
        ``transitions``: feature → iterable of allowed (from, to) changes, each given as a
        level name or an integer code. ``discretise``: numeric features to bin (see module doc).
        Statistics (min–max) are taken over all rows. Unknown features or categories in
        ``mutability`` / ``transitions`` / ``discretise`` raise ValueError naming them.
        """
        X = np.asarray(X_raw, dtype=np.float64)
        names = [str(n) for n in names]
        if X.ndim != 2 or X.shape[1] != len(names):
            raise ValueError(f"feature space: X_raw has shape {X.shape}, expected (rows, {len(names)})")
        if len(kinds) != len(names) or len(levels) != len(names):
            raise ValueError("feature space: names, kinds and levels must have the same length")
        if len(set(names)) != len(names):
            raise ValueError("feature space: duplicated feature names")
        mutability = dict(mutability or {})
        transitions = dict(transitions or {})
        discretise = list(discretise)
        known = set(names)
        for what, keys in (("mutability", mutability), ("transitions", transitions),
                           ("discretise", discretise)):
            for k in keys:
                if k not in known:
                    raise ValueError(f"feature space: {what} names unknown feature {k!r}")
        for k, m in mutability.items():
            if m not in MUTABILITY:
                raise ValueError(f"feature space: feature {k!r} has unknown mutability {m!r} "
                                 f"(expected one of {sorted(MUTABILITY)})")
        lv: list[list[str] | None] = []
        for n, k, l in zip(names, kinds, levels):
            if k not in KINDS:
                raise ValueError(f"feature space: feature {n!r} has unknown kind {k!r}")
            if k != "numeric" and not l:
                raise ValueError(f"feature space: {k} feature {n!r} needs its levels")
            lv.append([str(v) for v in l] if l is not None and k != "numeric" else None)
        for n in discretise:
            if kinds[names.index(n)] != "numeric":
                raise ValueError(f"feature space: only numeric features can be discretised, not {n!r}")
        if np.isnan(X).any():
            bad = [names[c] for c in np.flatnonzero(np.isnan(X).any(0))]
            raise ValueError(f"feature space: missing (NaN) values in feature(s) {bad}")

        # The encoding itself is the shared Encoder's (min–max, rank / (levels − 1), one-hot);
        # binary categoricals go in as two-level ordinals (one 0/1 column = the code) and
        # discretised numerics as ordinals over their bins.
        X_in = X.copy()
        enc_kinds: list[str] = []
        enc_levels: list[list[str] | None] = []
        codes: dict[str, np.ndarray] = {}
        bins: dict[str, int] = {}
        for f, (n, kind) in enumerate(zip(names, kinds)):
            x = X[:, f]
            if kind == "numeric" and n in discretise:
                b = n_bins(x)
                bins[n] = b
                X_in[:, f] = discretise_column(x, b) if len(x) else x
                codes[n] = X_in[:, f].astype(np.int64)
                enc_kinds.append("ordinal")
                enc_levels.append([str(v) for v in range(b)])
            elif kind == "numeric":
                enc_kinds.append("numeric")
                enc_levels.append(None)
            else:
                L = len(lv[f])
                if len(x) and (x.min() < 0 or x.max() > L - 1 or np.any(x != np.round(x))):
                    raise ValueError(f"feature space: {kind} feature {n!r} has codes outside 0..{L - 1}")
                codes[n] = x.astype(np.int64)
                enc_kinds.append("categorical" if kind == "categorical" and L > 2 else "ordinal")
                enc_levels.append(lv[f])
        encoder = Encoder.fit(X_in, names, enc_kinds, enc_levels,
                              numeric="minmax", ordinal="unit", categorical="onehot")
        Z = encoder.transform(X_in) if len(X_in) else np.zeros((0, encoder.width))
        direction, immutable = np.zeros(encoder.width, np.int8), np.zeros(encoder.width, bool)
        for n in names:
            sl = encoder.slices[n]
            mut = mutability.get(n, "free")
            # a one-hot block's direction is checked on the decoded code, not per column
            direction[sl] = MUTABILITY[mut] if sl.stop - sl.start == 1 else 0
            immutable[sl] = mut == "immutable"

        trans: dict[str, set[tuple[int, int]]] = {}
        for n, pairs in transitions.items():
            f = names.index(n)
            if kinds[f] == "numeric" and n not in discretise:
                raise ValueError(f"feature space: transitions need a categorical or ordinal feature, "
                                 f"not numeric {n!r}")
            L = len(lv[f]) if lv[f] is not None else bins[n]
            allowed = set()
            for pair in pairs:
                if len(pair) != 2:
                    raise ValueError(f"feature space: transition {pair!r} of {n!r} is not a (from, to) pair")
                allowed.add(tuple(_code(n, lv[f], L, v) for v in pair))
            trans[n] = allowed

        return cls(Z=np.ascontiguousarray(Z, dtype=np.float64), columns=list(encoder.columns),
                   direction=direction, immutable=immutable, slices=dict(encoder.slices),
                   names=names, kinds=list(kinds), levels=lv,
                   mutability={n: mutability.get(n, "free") for n in names},
                   transitions=trans, codes=codes, bins=bins, encoder=encoder)

    # ------------------------------------------------------------------ queries
    @property
    def n(self) -> int:
        return self.Z.shape[0]

    @property
    def width(self) -> int:
        return self.Z.shape[1]

    def feasible_pairs(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Bool mask: is the move from row ``i[t]`` to row ``j[t]`` feasible (FGCE §3)?

        Immutable columns must be equal; increase-only columns must not decrease and
        decrease-only columns must not increase; one-hot blocks with a direction compare the
        decoded codes; features with ``transitions`` may change only along an allowed pair.
        Works column by column, so memory is O(len(i)).
        """
        i = np.asarray(i, np.int64)
        j = np.asarray(j, np.int64)
        ok = np.ones(len(i), dtype=bool)
        if len(i) == 0:
            return ok
        for c in np.flatnonzero(self.immutable | (self.direction != 0)):
            a, b = self.Z[i, c], self.Z[j, c]
            if self.immutable[c]:
                ok &= a == b
            elif self.direction[c] > 0:
                ok &= b >= a
            else:
                ok &= b <= a
        for n, kind in zip(self.names, self.kinds):
            sl = self.slices[n]
            mut = self.mutability[n]
            if sl.stop - sl.start > 1 and mut in ("increase", "decrease"):
                a, b = self.codes[n][i], self.codes[n][j]
                ok &= (b >= a) if mut == "increase" else (b <= a)
            if n in self.transitions:
                L = len(self.levels[self.names.index(n)] or []) or self.bins.get(n, 1)
                allowed = np.eye(L, dtype=bool)
                for a, b in self.transitions[n]:
                    allowed[a, b] = True
                ok &= allowed[self.codes[n][i], self.codes[n][j]]
        return ok

    def feasible(self, i: int, j: int) -> bool:
        """Scalar form of :meth:`feasible_pairs`."""
        return bool(self.feasible_pairs(np.array([i]), np.array([j]))[0])


def _code(feature: str, levels: list[str] | None, L: int, value) -> int:
    """A transition endpoint as an integer code; ValueError naming unknown categories."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if 0 <= int(value) < L:
            return int(value)
        raise ValueError(f"feature space: transition of {feature!r} names unknown category code {value!r}")
    if levels is not None and str(value) in levels:
        return levels.index(str(value))
    raise ValueError(f"feature space: transition of {feature!r} names unknown category {value!r}")
