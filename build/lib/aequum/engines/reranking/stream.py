"""RAGUEL-Block over a ranked list that need not fit in memory (§3.5.3, "scale").

Input: Arrow record batches of the list already ranked by ascending recourse cost (e.g. a DuckDB
``ORDER BY`` that spills to disk), with columns ``record_id``, ``group`` (int code), ``cost``
and the recourse features. Algorithm 2 only ever looks at a block and the next one, so the
list is processed as a sliding window: rows are cut into blocks of ``block_size``; every block
but the last held one is repaired against its successor and written out; the successor (with
any record pushed down into it) is carried into the next window. Memory is bounded by one
input batch plus one block, whatever the list's length.

Output batches: position (rank from 1), record_id, group, block, cost_before, cost_after, moved, and the
features before/after for moved records; the running :class:`StreamSummary` has the figures
of the engine's summary (r before/after, unfair blocks, points changed, modification cost,
rKL/rND/rRD over the head of the list).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from aequum.engines.reranking.algorithms import block_step, describe_block
from aequum.engines.reranking.fairness import ratio
from aequum.engines.reranking.metrics import ranked_fairness

HEAD_ROWS = 50_000


@dataclass
class StreamSummary:
    n_groups: int
    rows: int = 0
    blocks: int = 0
    unfair_before: int = 0
    unfair_after: int = 0
    points_changed: int = 0
    modification_cost: float = 0.0
    sums_before: np.ndarray = None
    sums_after: np.ndarray = None
    counts: np.ndarray = None
    head_before: list = field(default_factory=list)
    head_after: list = field(default_factory=list)

    def __post_init__(self):
        self.sums_before = np.zeros(self.n_groups)
        self.sums_after = np.zeros(self.n_groups)
        self.counts = np.zeros(self.n_groups, np.int64)

    def result(self) -> dict:
        before = ranked_fairness(np.concatenate(self.head_before) == 0) if self.head_before else {}
        after = ranked_fairness(np.concatenate(self.head_after) == 0) if self.head_after else {}
        return {"n": self.rows, "blocks": self.blocks, "unfair_blocks_before": self.unfair_before,
                "unfair_blocks_after": self.unfair_after, "points_changed": self.points_changed,
                "total_modification_cost": self.modification_cost,
                "r_before": ratio(self.sums_before, self.counts), "r_after": ratio(self.sums_after, self.counts),
                **{f"{k}_before": v for k, v in before.items()}, **{f"{k}_after": v for k, v in after.items()}}


def rerank_stream(batches: Iterable[pa.RecordBatch], features: list[str], recourse_model, p: np.ndarray,
                  block_size: int, t: float = 1 / 3, eps_r: float = 0.1, recourse: str = "improve",
                  rounding: str = "nearest", summary: StreamSummary | None = None,
                  eq3: str = "outside_tolerance") -> Iterator[pa.RecordBatch]:
    """Yield the re-ranked list batch by batch (see module docstring)."""
    G = len(p)
    summary = summary if summary is not None else StreamSummary(G)
    buf = None              # rows not yet emitted: the held block first, then unread rows
    held_before = None      # the held block as it stood in the input (before moves reached it)
    position = number = 0
    it = iter(batches)
    while True:
        batch = next(it, None)
        exhausted = batch is None
        if batch is not None and batch.num_rows:
            new = {"record_id": np.asarray(batch.column("record_id").to_numpy(zero_copy_only=False), object),
                   "group": batch.column("group").to_numpy().astype(np.int64),
                   "cost0": batch.column("cost").to_numpy().astype(np.float64),
                   "X0": np.column_stack([batch.column(f).to_numpy().astype(np.float64) for f in features])}
            new["cost"], new["X"] = new["cost0"].copy(), new["X0"].copy()
            new["movable"] = np.ones(len(new["cost"]), bool)
            have = sum(len(h) for h in summary.head_before)
            if have < HEAD_ROWS:
                summary.head_before.append(new["group"][:HEAD_ROWS - have])
            buf = new if buf is None else {k: np.concatenate([buf[k], new[k]]) for k in new}
        if buf is None:
            if exhausted:
                break
            continue
        n = len(buf["cost"])
        if exhausted:
            starts = list(range(0, n, block_size))
            emit = len(starts)                      # every block; the last has no successor
        else:
            starts = list(range(0, n - block_size + 1, block_size))   # complete blocks only
            emit = len(starts) - 1                  # the last complete block is held
            if emit < 1:
                continue
        blocks = [list(range(a, min(a + block_size, n))) for a in starts]
        before = [describe_block(m, buf["cost"], buf["group"], p, t, rounding) for m in blocks]
        if held_before is not None:
            before[0] = held_before
        out_idx, out_block = [], []
        for b in range(emit):
            nxt = blocks[b + 1] if b + 1 < len(blocks) else None
            cur, nxt, info = block_step(blocks[b], nxt, number, buf["cost"], buf["group"], buf["X"],
                                        recourse_model, p, t, eps_r, recourse, rounding, buf["movable"],
                                        eq3, before[b])
            if nxt is not None:
                blocks[b + 1] = nxt
            summary.blocks += 1
            summary.unfair_before += not info["fair_before"]
            summary.unfair_after += not info["fair_after"]
            summary.points_changed += sum(1 for _, _, a in info["moves"] if a.attributes)
            summary.modification_cost += sum(a.modification_cost for _, _, a in info["moves"])
            out_idx += cur
            out_block += [number] * len(cur)
            number += 1
        idx = np.asarray(out_idx, np.int64)
        yield _emit(buf, idx, np.asarray(out_block, np.int64), position, features, summary, G)
        position += len(idx)
        if exhausted:
            break
        held_before = before[emit]
        keep = np.asarray(blocks[emit] + list(range(starts[-1] + block_size, n)), np.int64)
        buf = {k: v[keep] for k, v in buf.items()}


def _emit(c: dict, idx: np.ndarray, block: np.ndarray, position: int, features: list[str],
          summary: StreamSummary, G: int) -> pa.RecordBatch:
    g = c["group"][idx]
    moved = c["cost"][idx] != c["cost0"][idx]
    summary.rows += len(idx)
    summary.counts += np.bincount(g, minlength=G)
    summary.sums_after += np.bincount(g, weights=c["cost"][idx], minlength=G)
    summary.sums_before += np.bincount(c["group"][idx], weights=c["cost0"][idx], minlength=G)
    have = sum(len(h) for h in summary.head_after)
    if have < HEAD_ROWS:
        summary.head_after.append(g[:HEAD_ROWS - have])
    cols = {"position": pa.array(np.arange(position + 1, position + len(idx) + 1, dtype=np.int64)),   # ranks from 1
            "record_id": pa.array(c["record_id"][idx].astype(str)),
            "group": pa.array(g.astype(np.int8)), "block": pa.array(block),
            "cost_before": pa.array(c["cost0"][idx]), "cost_after": pa.array(c["cost"][idx]),
            "moved": pa.array(moved)}
    for j, f in enumerate(features):
        cols[f"{f}_before"] = pa.array(c["X0"][idx, j])
        cols[f"{f}_after"] = pa.array(c["X"][idx, j])
    return pa.RecordBatch.from_pydict(cols)
