"""The design of a controlled model of a decision, ``y ~ 1 + d + X``, as the regression engine's
models fit it: which rows (nulls dropped and counted), which columns (numeric controls as
values, categorical ones as a block of dummies without the most frequent level; a control
without variation dropped with a note), the degenerate inputs that leave no estimate, and the
design's rows a block at a time (the n × p matrix never exists beyond a block). Shared by the
linear probability model (``engines.regression.sensitivity.controlled_lpm``) and the denial
logit (``engines.regression.logit.controlled_logit``), so both fit the same rows and columns.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from aequum.engines.regression.absorb import Effects, absorb_rows, dense_codes, no_effects


@dataclass(frozen=True)
class Categorical:
    """A categorical (or ordinal) control: integer codes into ``levels`` (a NaN or negative code
    is a null). It enters the regression as one block of dummies, one per level present
    except the most frequent (the reference; the first such level on a tie) — the block's
    partial R² and d's estimate do not depend on which level is left out."""

    codes: np.ndarray
    levels: Sequence[str]


@dataclass
class Block:
    name: str
    index: int                    # position among the given controls
    values: np.ndarray | None     # numeric values, or categorical codes (:func:`code_type`, −1 null); once designed the
                                  # kept rows' codes, a numeric one's centred values being its row of ``Design.dense``
    levels: np.ndarray | None     # dummy codes of a categorical (reference left out)
    start: int = 0
    stop: int = 0
    lookup: np.ndarray | None = None  # a categorical's code -> its dummy's column (−1: the reference)


def code_type(levels: int) -> type:
    """The smallest signed integer type holding the codes of ``levels`` levels and −1 (a null):
    a categorical's codes in the design (and the state) at a byte or two a row, not eight."""
    return np.int8 if levels < 2 ** 7 else np.int16 if levels < 2 ** 15 else np.int32 if levels < 2 ** 31 else np.int64


def null_mask(values: np.ndarray, categorical: bool) -> np.ndarray:
    if np.issubdtype(values.dtype, np.floating):
        return np.isnan(values)
    return values < 0 if categorical else np.zeros(len(values), bool)


def spans(n: int, size: int):
    """``(pos, pos)`` a block of the ``n`` kept rows at a time (a slice, twice: the block's
    positions, and its rows in the gathered arrays of :class:`Design`)."""
    for s in range(0, n, size):
        pos = slice(s, min(s + size, n))
        yield pos, pos


def fill(z: np.ndarray, idx: slice, des: "Design") -> np.ndarray:
    """The design's kept rows ``idx`` (d, then each block's columns) centred at the design's
    means, into ``z``: d and the numeric controls from :attr:`Design.dense`, a categorical's
    dummies as zeros and a one a row (none at its reference) less their means."""
    rows = np.arange(len(z))
    at = 0
    for b in [None, *des.blocks]:
        if b is None or b.levels is None:
            z[:, 0 if b is None else b.start] = des.dense[at, idx]
            at += 1
        else:
            if b.lookup is None:
                b.lookup = np.full(int(b.values.max(initial=0)) + 1, -1, np.int64)
                b.lookup[b.levels] = np.arange(len(b.levels))
            column = b.lookup[b.values[idx]]
            z[:, b.start:b.stop] = 0.0
            hit = column >= 0
            z[rows[hit], b.start + column[hit]] = 1.0
            z[:, b.start:b.stop] -= des.means[b.start:b.stop]
    return z


@dataclass
class Design:
    """The rows and columns of ``y ~ 1 + d + X`` that every controlled model here fits
    (:func:`design`): the rows kept, the controls kept (their columns ``start:stop`` in the
    design ``Z = [d, X]``, d in column 0), the columns' means, and the counts the notes use.
    ``failure``: the note of a degenerate input (no estimate), else None."""

    n: int
    dropped: int
    keep: np.ndarray
    size: int                      # rows a block
    blocks: list[Block]
    notes: list[str]
    used: list[str]                # the controls kept (all given ones until they are examined)
    n_treated: int = 0
    n_control: int = 0
    raw: float | None = None
    y_sum: float = 0.0
    y_binary: bool = False         # every outcome is 0 or 1
    p: int = 0                     # columns of Z
    means: np.ndarray | None = None
    failure: str | None = None
    y: np.ndarray | None = None              # the outcome of the kept rows in their order (int8 when 0/1), or None
    d: np.ndarray | None = None              # the group of the kept rows, in the type given (the engine's: int8)
    # the dense columns of Z over the kept rows, a row each, centred at their means (d, then each
    # numeric control kept: the one copy of them every model reads, ``engines.regression.cells``),
    # and ``columns``, the buffer they are the first rows of, its last row the outcome less its
    # mean (None for a design of another outcome, :func:`with_outcome`). None once a model
    # scaled them in place (``controlled_logit(consume=True)``): the design is then spent
    dense: np.ndarray | None = None
    columns: np.ndarray | None = None
    # ``columns`` followed by the rows ``room`` kept for other outcomes (:func:`with_outcome`
    # writes each one's centred values in the next, ``spare_used`` of them so far): one buffer
    # that several outcomes' cross products read as it is (``cells.Cells(take="outcomes")``)
    outcomes: np.ndarray | None = None
    spare_used: int = 0
    # a design of another outcome (:func:`with_outcome`): its centred values (a row of the first
    # design's ``outcomes``, ``spare_row``) in place of ``y``
    centred: np.ndarray | None = None
    spare_row: int | None = None
    effects: Effects | None = None           # the absorbed fixed effects (one level: none)
    cluster: np.ndarray | None = None        # cluster codes over the kept rows (0 … clusters − 1)
    clusters: int = 0
    separated_rows: int = 0                  # rows dropped as levels of one outcome (a binary y)
    separated: tuple[str, ...] = ()          # the levels dropped: "effect (k levels)", "control = level"

    cell_starts: np.ndarray | None = None    # the first kept row of each cell (``engines.regression.cells``)
    _layout: object = None                   # the cells' layout, once built
    within: object = None                    # the least-squares fit on this design (linear.linear_fit), once made

    @property
    def parameters(self) -> int:
        """d, the controls' columns and the fixed effects' (the intercept among them)."""
        return self.p + self.effects.parameters


def _by_cell(keep: np.ndarray, effects: Effects, categorical: Sequence[np.ndarray]
             ) -> tuple[np.ndarray, Effects, np.ndarray]:
    """The kept rows ordered by their cell — the level of each fixed effect (the absorbed one
    first, so its levels stay runs), then of each categorical control — stably (the given order
    within a cell), the effects' codes likewise, and the first row of each cell: the order every
    pass of ``engines.regression.cells`` reads."""
    n = len(keep)
    if not n:
        return keep, effects, np.zeros(0, np.int64)
    keys = [*effects.codes, *(np.asarray(c)[keep] for c in categorical)]
    sizes = [*effects.sizes, *(int(c.max(initial=0)) + 1 for c in keys[len(effects.codes):])]
    combinations = float(np.prod(np.array(sizes, dtype=np.float64)))
    if combinations < 2.0 ** 62:
        key = np.zeros(n, np.int64)
        for c, s in zip(keys, sizes):
            key = key * s + c
        if combinations * n < 2.0 ** 62:  # each key made unique by its position: an unstable sort gives the stable order, 5-10x faster
            order = np.sort(key * n + np.arange(n)) % n
        else:
            order = np.argsort(key, kind="stable")
        key = key[order]
    else:  # too many combinations for one integer: sort by each key, the first the most significant
        order = np.lexsort(keys[::-1])
        key = np.stack([c[order] for c in keys])
    if not np.all(order[1:] > order[:-1]):
        keep = keep[order]
        effects = Effects(effects.names, [c[order] for c in effects.codes], effects.sizes, effects.reference)
    change = key[1:] != key[:-1] if key.ndim == 1 else np.any(key[:, 1:] != key[:, :-1], axis=0)
    return keep, effects, np.flatnonzero(np.r_[True, change])


def design(y: np.ndarray, d: np.ndarray, x_blocks: Sequence[np.ndarray | Categorical],
            names: Sequence[str], rows: np.ndarray | None, block_rows: int | None,
            fixed: Sequence[Categorical] = (), fixed_names: Sequence[str] = (),
            cluster: Categorical | None = None, outcome: tuple[str, str] = ("y = 0", "y = 1"),
            room: int = 0) -> Design:
    """Drop the rows with a null in y, d, a control, a fixed effect or the cluster (counted, with
    a note) and the rows of fixed-effect levels that fit them exactly and, with a 0/1 outcome,
    of categorical controls' levels whose rows all have one outcome — the quasi-complete
    separation of a dummy (Albert & Anderson 1984), which Stata's ``logit`` drops ("X != 0
    predicts failure perfectly; X dropped and N obs not used") and fixest's ``feglm`` drops for
    fixed effects — repeated until none is left (``engines.regression.absorb.absorb_rows``;
    ``separated_rows``, ``separated`` and a note naming each level and what it predicts, in the
    words of ``outcome``: y = 0, y = 1), then in one pass
    over blocks of rows: the counts, sums and ranges; then the checks (no rows, infinite
    values, one value of y, d constant), the controls without variation dropped with a note (a
    categorical keeps its levels present, its most frequent — the first on a tie — the
    reference), the columns laid out and their means. The conventions :func:`controlled_lpm`
    and the controlled logit (``engines.regression.logit``) share. ``room``: rows kept after
    the outcome's for as many other outcomes on the same rows (:func:`with_outcome`)."""
    if len(x_blocks) != len(names):
        raise ValueError(f"{len(x_blocks)} control blocks for {len(names)} names")
    notes: list[str] = []

    # -- rows: drop nulls (over the candidate rows alone: everything below indexes them) ----
    candidates = None if rows is None else np.asarray(rows)
    if candidates is not None and candidates.dtype not in (np.int32, np.int64):  # (int32 rows kept: 4 bytes a row)
        candidates = candidates.astype(np.int64)

    def take(a):
        a = np.asarray(a)
        return a if candidates is None else a[candidates]

    y, d = take(y), take(d)
    valid = ~null_mask(y, False) & ~null_mask(d, False)
    blocks: list[Block] = []
    for j, (name, x) in enumerate(zip(names, x_blocks)):
        if isinstance(x, Categorical):
            codes = take(x.codes)
            null = null_mask(codes, True)
            valid &= ~null
            if null.any() or not np.issubdtype(codes.dtype, np.integer):
                codes = np.where(null, -1, codes)
            if len(codes) and codes.max(initial=-1) >= len(x.levels):
                raise ValueError(f"control {name!r}: a code beyond its {len(x.levels)} levels")
            # the codes in the smallest type that holds them (every later use indexes or counts by them)
            values = codes.astype(code_type(len(x.levels)), copy=False)
            blocks.append(Block(name, j, values, np.arange(len(x.levels))))
        else:  # its nulls now; its values gathered once the rows are known (below)
            values = take(x)
            if np.issubdtype(values.dtype, np.floating):
                valid &= ~np.isnan(values)
            del values
            blocks.append(Block(name, j, None, None))
    if len(fixed) != len(fixed_names):
        raise ValueError(f"{len(fixed)} fixed effects for {len(fixed_names)} names")
    fixed_codes = []
    for f in (*fixed, *([cluster] if cluster is not None else [])):
        codes = take(f.codes)
        null = null_mask(codes, True)
        valid &= ~null
        codes = np.where(null, -1, codes)
        fixed_codes.append(codes.astype(code_type(int(codes.max(initial=0)) + 1), copy=False))
    keep = np.flatnonzero(valid)          # positions among the candidates
    dropped = len(y) - len(keep)
    if dropped:
        held = "a control, a fixed effect or the cluster" if fixed or cluster is not None else "a control"
        notes.append(f"{dropped:,} rows with a null in the outcome, the group or {held} dropped")
    yk = y[keep]
    binary = bool(len(keep)) and bool(np.all((yk == 0) | (yk == 1)))
    one_value = bool(len(keep)) and bool(np.all(yk == yk[0]))  # said below as such, not as levels dropped
    del yk
    categorical = [b for b in blocks if b.levels is not None]
    fe_rows = len(keep)
    keep, effects, absorbed, gone_levels, gone_rows = absorb_rows(
        y, keep, fixed_codes[:len(fixed)] if not one_value else [], list(fixed_names), binary,
        [b.values for b in categorical] if not one_value else [], ordered=False)  # sorted by cell below
    if absorbed:
        notes.append(absorbed)
    separated_rows = fe_rows - len(keep) if binary else 0
    n_fixed = len(gone_levels) - (len(categorical) if binary and not one_value else 0)
    separated = [f"{name} ({int((lv > 0).sum()):,} level{'s' if (lv > 0).sum() > 1 else ''})"
                 for name, lv in zip(fixed_names, gone_levels[:n_fixed]) if binary and lv.any()]
    for b, lv, count in zip(categorical, gone_levels[n_fixed:], gone_rows[n_fixed:]):
        if not lv.any():
            continue
        levels = x_blocks[b.index].levels
        clauses = []
        for value, word in ((2, outcome[1]), (1, outcome[0])):
            hit = [str(levels[i]) for i in np.flatnonzero(lv == value)]
            separated += [f"{b.name} = {h}" for h in hit]
            if hit:
                shown = ", ".join(hit[:5]) + (f" and {len(hit) - 5} more" if len(hit) > 5 else "")
                clauses.append(f"{b.name} = {shown} predict{'s' if len(hit) == 1 else ''} {word} perfectly")
        many = int((lv > 0).sum()) > 1
        notes.append(f"{' and '.join(clauses)}: {'levels' if many else 'level'} and {'their' if many else 'its'} "
                     f"{count:,} {'row' if count == 1 else 'rows'} dropped, as Stata's logit and fixest's feglm do")
    keep, effects, cell_starts = _by_cell(keep, effects, [b.values for b in categorical])
    n = len(keep)
    cluster_codes, clusters = None, 0
    if cluster is not None:
        _, inverse = dense_codes(fixed_codes[-1][keep])
        clusters = int(inverse.max(initial=-1)) + 1
        cluster_codes = inverse.astype(code_type(clusters))
        del inverse
    # the kept rows gathered once, in the order the models read them: every later pass reads
    # contiguous blocks (``spans``), never a scattered gather. d, the numeric controls and y as
    # the rows of one array (centred in place below: the models' dense columns, never copied)
    source = keep if candidates is None else candidates[keep]  # the given arrays' rows
    del candidates
    numeric = [b for b in blocks if b.levels is None]
    buffer = np.empty((len(numeric) + 2 + room, n))
    columns = buffer[:len(numeric) + 2]
    columns[0] = d[keep]
    for at, b in enumerate(numeric, start=1):
        gather(x_blocks[b.index], source, columns[at])
        b.values = columns[at]
    gather(y, keep, columns[-1])
    del y
    d_kept, y_kept = columns[0], columns[-1]
    for b in categorical:
        b.values = b.values[keep]

    # -- pass 1: means, counts, variation ---------------------------------------------------
    size = block_rows or max(1024, (1 << 22) // (2 + sum(len(b.levels) if b.levels is not None else 1 for b in blocks)))
    y_sum = d_sum = y_treated = 0.0
    n_treated = n_control = y01 = 0
    lo = np.full(len(blocks), np.inf)
    hi = np.full(len(blocks), -np.inf)
    sums = np.zeros(len(blocks))
    counts = [np.zeros(len(b.levels), np.int64) if b.levels is not None else None for b in blocks]
    y_lo, y_hi, d_lo, d_hi = np.inf, -np.inf, np.inf, -np.inf
    for _, idx in spans(n, size):
        yc, dc = y_kept[idx], d_kept[idx]
        y_sum += yc.sum()
        d_sum += dc.sum()
        y01 += int(((yc == 0) | (yc == 1)).sum())
        treated = dc == 1
        n_treated += int(treated.sum())
        n_control += int((dc == 0).sum())
        y_treated += yc[treated].sum()
        y_lo, y_hi = min(y_lo, yc.min()), max(y_hi, yc.max())
        d_lo, d_hi = min(d_lo, dc.min()), max(d_hi, dc.max())
        for j, b in enumerate(blocks):
            v = b.values[idx]
            if b.levels is None:
                sums[j] += v.sum()
                lo[j], hi[j] = min(lo[j], v.min()), max(hi[j], v.max())
            else:
                counts[j] += np.bincount(v, minlength=len(b.levels))
    raw = None
    if n_treated and n_control and n_treated + n_control == n:  # d is a 0/1 indicator
        raw = float(y_treated / n_treated - (y_sum - y_treated) / n_control)
    rows_kept = source  # the given arrays' rows (4 bytes each)
    del source
    if len(rows_kept) and int(rows_kept.max()) < 2 ** 31:
        rows_kept = rows_kept.astype(np.int32, copy=False)
    out = Design(n, dropped, rows_kept, size, blocks, notes, list(names), n_treated, n_control, raw, float(y_sum),
                  y01 == n, effects=effects if n else no_effects(0), cluster=cluster_codes, clusters=clusters,
                  y=y_kept.astype(np.int8) if y01 == n else None, d=d[keep], separated_rows=separated_rows,
                  separated=tuple(separated), cell_starts=cell_starts)

    def fail(note: str) -> Design:
        out.failure = note
        return out

    if n == 0:
        return fail("no rows to estimate from")
    infinite = [nm for nm, lo_, hi_ in (("the outcome", y_lo, y_hi), ("the group", d_lo, d_hi),
                                         *((b.name, lo[b.index], hi[b.index]) for b in blocks if b.levels is None))
                if not (np.isfinite(lo_) and np.isfinite(hi_))]
    if infinite:
        return fail(f"infinite values in {', '.join(infinite)}")
    if y_lo == y_hi:
        return fail(f"the outcome takes one value ({y_lo:g}) in every row: nothing to explain")
    if d_lo == d_hi:
        return fail(f"the group indicator takes one value ({d_lo:g}) in every row: no comparison")

    # controls without variation are dropped; a categorical keeps the levels present
    kept: list[Block] = []
    for b in blocks:
        j = b.index
        if b.levels is None:
            if lo[j] == hi[j]:
                notes.append(f"control {b.name!r} has no variance among these rows: dropped")
                continue
        else:
            present = np.flatnonzero(counts[j])
            if len(present) < 2:
                notes.append(f"control {b.name!r} has one level among these rows: dropped")
                continue
            reference = present[np.argmax(counts[j][present])]
            b.levels = present[present != reference]
        kept.append(b)
    col = 1
    for b in kept:
        b.start = col
        col += 1 if b.levels is None else len(b.levels)
        b.stop = col
    means = np.empty(col)
    means[0] = d_sum / n
    for b in kept:
        if b.levels is None:
            means[b.start] = sums[b.index] / n
        else:
            means[b.start:b.stop] = counts[b.index][b.levels] / n
    out.blocks, out.used, out.p, out.means = kept, [b.name for b in kept], col, means
    # the dense columns centred in place (a dropped numeric control's row left out), and y
    rows = [0, *(numeric.index(b) + 1 for b in kept if b.levels is None), len(columns) - 1]
    if rows != list(range(len(columns))):
        for to, at in enumerate(rows):
            if to != at:
                columns[to] = columns[at]
        columns = buffer[:len(rows)]
    q = len(rows) - 1
    columns[:q] -= means[[0, *(b.start for b in kept if b.levels is None)]][:, None]
    columns[q] -= out.y_sum / n
    for at, b in enumerate([b for b in kept if b.levels is None], start=1):
        b.values = columns[at]
    out.dense, out.columns = columns[:q], columns
    if room:
        out.outcomes = buffer[:len(columns) + room]
    return out


def gather(values, rows: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[:] = values[rows]``, with no array of the gathered values between when ``values``
    are already of ``out``'s type (a float64 column: 41 MB at 5M rows)."""
    values = np.asarray(values)
    if values.dtype == out.dtype and (not len(rows) or (rows.min() >= 0 and rows.max() < len(values))):
        np.take(values, rows, out=out, mode="clip")  # (in bounds: numpy buffers ``out`` in its checking mode)
    else:  # (an index out of bounds raises here)
        out[:] = values[rows]
    return out


def with_outcome(des: Design, y: np.ndarray) -> Design | None:
    """``des`` (:func:`design`) for another outcome ``y`` over the same given arrays, whose
    nulls fall on the same candidate rows: the rows, columns, cells and layout shared, the
    outcome's own gathered values, sum and raw difference (summed a block at a time, as
    :func:`design` does), centred (``centred``: ``y - ȳ``) in the next row ``des`` has room for
    (``room``), else in an array of their own. None where :func:`design` could choose otherwise
    for ``y``: a degenerate design, or either outcome 0/1 (its levels of one outcome are
    dropped), of one value or not finite — the caller then designs that outcome on its own."""
    if des.failure is not None or des.y_binary:
        return None
    at = len(des.columns) + des.spare_used if des.outcomes is not None and des.columns is not None else None
    if at is not None and at < len(des.outcomes):
        yk = gather(y, des.keep, des.outcomes[at])
    else:
        at, yk = None, np.asarray(y)[des.keep].astype(np.float64)
    if not len(yk) or not np.all(np.isfinite(yk)) or np.all(yk == yk[0]) or np.all((yk == 0) | (yk == 1)):
        return None
    y_sum = y_treated = 0.0
    for _, idx in spans(des.n, des.size):
        yc = yk[idx]
        y_sum += yc.sum()
        y_treated += yc[des.d[idx] == 1].sum()
    raw = None
    if des.n_treated and des.n_control and des.n_treated + des.n_control == des.n:
        raw = float(y_treated / des.n_treated - (y_sum - y_treated) / des.n_control)
    yk -= y_sum / des.n
    row = None
    if at is not None:
        row = des.spare_used
        des.spare_used += 1
    return replace(des, y=None, y_sum=float(y_sum), raw=raw, within=None, columns=None, outcomes=None,
                   spare_used=0, centred=yk, spare_row=row)


def equilibrate(gram: np.ndarray, blocks: list[Block], effects: Sequence[str] = (),
                raw_diagonal: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, str | None]:
    """``(scale, g, note)``: the centred cross products ``Z'Z`` (with fixed ``effects``, the
    within cross products) equilibrated to unit diagonal (``g = S Z'Z S``, ``scale`` = S's
    diagonal), and the note of a singular design (the smallest eigenvalue of ``g`` below 1e-12
    of the largest: the controls named by the eigenvector's large entries are collinear, or the
    group is a combination of them; or a column whose within sum of squares is below 1e-10 of
    its ``raw_diagonal``, the centred one: constant within the effects' levels), else None."""
    diagonal = np.diag(gram)
    flat = ~(diagonal > (0.0 if raw_diagonal is None else 1e-10 * raw_diagonal))
    if flat.any():
        within = f" within the levels of {', '.join(effects)}" if effects else ""
        if flat[0]:
            return np.ones(len(gram)), gram, f"singular design: the group is constant{within}"
        names = [b.name for b in blocks if flat[b.start:b.stop].any()]
        return np.ones(len(gram)), gram, f"singular design: the controls {names} are constant{within}"
    scale = 1 / np.sqrt(diagonal)
    g = gram * scale[:, None] * scale[None, :]
    eig, vec = np.linalg.eigh(g)
    if eig[0] <= 1e-12 * eig[-1]:
        null = np.abs(vec[:, 0]) > 0.1
        involved = [b.name for b in blocks if null[b.start:b.stop].any()]
        within = f" within the levels of {', '.join(effects)}" if effects else ""
        what = (f"the group is an exact combination of the controls {involved}{within}" if null[0] and involved
                else f"the group is constant{within}" if null[0]
                else f"the controls {involved} are collinear{within}")
        return scale, g, f"singular design: {what}"
    return scale, g, None


def column_names(blocks: list[Block]) -> list[str]:
    """The design's column names: ``d``, each numeric control, ``name[level]`` of each dummy."""
    return ["d", *(f"{b.name}" if b.levels is None else f"{b.name}[{lv}]" for b in blocks
                   for lv in ([None] if b.levels is None else b.levels))]
