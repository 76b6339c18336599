"""Streamed tables (engines.core.engine): a table the pieces write that never reaches
``combine`` and never gathers in one process, in the same rows and order as the stable sort
of the pieces' concatenation by its keys."""
from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from aequum.engines.core.engine import assemble, by_key, run_piece, run_rounds, run_serial

ROWS = pa.schema([("attribute", pa.string()), ("group", pa.string()), ("piece", pa.int64()),
                  ("value", pa.int64())])
TOTALS = pa.schema([("pieces", pa.int64()), ("rows", pa.int64())])


class ToyEngine:
    """Two rounds of pieces, each writing rows with random (possibly null) keys in random order."""

    name = "toy"
    tables = {"toy_rows": ROWS, "toy_totals": TOTALS}
    streamed = {"toy_rows": ("attribute", "group")}

    def prepare(self, data, params):
        return {"round": 0, "seed": data}

    def pieces(self, state):
        return list(range(5))

    def run_piece(self, state, piece):
        rng = np.random.default_rng([state["seed"], state["round"], piece])
        n = int(rng.integers(0, 40))
        attribute = rng.choice(np.array(["b", "a", "c", None], object), n)
        group = rng.choice(np.array(["x", "y", None], object), n)
        return {"toy_rows": pa.table({"attribute": pa.array(attribute, pa.string()),
                                      "group": pa.array(group, pa.string()),
                                      "piece": np.full(n, 10 * state["round"] + piece),
                                      "value": np.arange(n)}),
                "count": n}

    def next_round(self, state, parts):
        if state["round"] == 1:
            return None
        return {**state, "round": 1}, [7, 3]

    def combine(self, state, parts):
        return {"toy_totals": pa.table({"pieces": [len(parts)], "rows": [sum(p["count"] for p in parts)]})}


def _raw_pieces(seed: int) -> list[pa.Table]:
    """The pieces' own tables, in run order (what a gathering combine would concatenate)."""
    engine = ToyEngine()
    state = engine.prepare(seed, None)
    out = [engine.run_piece(state, p)["toy_rows"] for p in engine.pieces(state)]
    state, pieces = engine.next_round(state, [])
    return out + [engine.run_piece(state, p)["toy_rows"] for p in pieces]


@pytest.mark.parametrize("seed", range(6))
def test_a_streamed_table_is_the_stable_sort_of_the_pieces_rows(seed):
    out = run_serial(ToyEngine(), seed, None)
    expected = (pl.from_arrow(pa.concat_tables(_raw_pieces(seed)))
                .sort(["attribute", "group"], nulls_last=True, maintain_order=True))
    assert pl.from_arrow(out["toy_rows"]).equals(expected)
    assert out["toy_totals"].to_pylist() == [{"pieces": 7, "rows": expected.height}]


def test_the_sections_keep_their_rows_out_of_combine_and_can_live_in_files(tmp_path):
    import pyarrow.parquet as pq

    from aequum.flows.engine_tasks import SectionFiles

    engine = ToyEngine()
    keep = SectionFiles(str(tmp_path / "sections"))
    seen = []

    def run_pieces(state, pieces):
        parts = [run_piece(engine, state, p, keep) for p in pieces]
        seen.extend(parts)
        return parts

    state, parts, n, sections = run_rounds(engine, engine.prepare(3, None), run_pieces)
    assert n == 7 and all("toy_rows" not in p and "_sections" not in p for p in parts)
    found = sections["toy_rows"]
    assert all(s.table is None and pq.read_metadata(s.path).num_rows == s.rows for s in found)
    from_files = pa.concat_tables([pq.read_table(s.path) for s in found])
    assert from_files.equals(run_serial(ToyEngine(), 3, None)["toy_rows"])


def test_by_key_cuts_where_any_key_changes_including_to_and_from_null():
    table = pa.table({"a": ["x", "x", None, None, "x", "y"], "b": [1, 2, 1, 1, 1, None], "v": range(6)})
    groups = by_key(table, ["a", "b"])
    assert [(k, t["v"].to_pylist()) for k, t in groups] == [
        (("x", 1), [0, 4]), (("x", 2), [1]), (("y", None), [5]), ((None, 1), [2, 3])]
    assert by_key(table.slice(0, 0), ["a"]) == []


def test_by_key_of_rows_in_key_order_or_not_is_the_sorted_grouping():
    """Rows already in key order (one run per key, ascending, nulls last) are cut where they
    are; any other order (a key in two runs, runs descending, NaN keys) is sorted first: the
    groups are the same as sorting gives either way."""
    def grouped(table, keys):
        return [(k, t["v"].to_pylist()) for k, t in by_key(table, keys)]

    def sorted_groups(table, keys):  # the sort's grouping, written out
        rows = sorted(range(table.num_rows), key=lambda i: tuple(
            (table[k][i].as_py() is None, table[k][i].as_py() or 0) for k in keys))
        out: dict = {}
        for i in rows:
            out.setdefault(tuple(table[k][i].as_py() for k in keys), []).append(table["v"][i].as_py())
        return list(out.items())

    for a, b in [(["c", "c", "f", "f", "f", None], ["t", "t", "c", "c", "t", "t"]),   # in order
                 (["f", "f", "c", "c", "f", "c"], ["t", "c", "t", "t", "c", "t"]),    # not
                 (["f", "f", "c", "c", None, None], ["c", "t", "t", "t", "c", "c"])]:  # descending runs
        table = pa.table({"a": a, "b": b, "v": range(6)})
        assert grouped(table, ["a", "b"]) == sorted_groups(table, ["a", "b"])
    nan = pa.table({"a": [1.0, float("nan"), 2.0], "v": range(3)})
    assert [k for k, _ in by_key(nan, ["a"])][:2] == [(1.0,), (2.0,)]  # NaN after the numbers, as sorted


def test_no_rows_gives_the_declared_empty_table():
    assert assemble([], ROWS).equals(ROWS.empty_table())
