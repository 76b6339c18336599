"""The engine contract every aequum engine implements (DESIGN.md, "The engine contract").

An engine is pure computation: it receives an :class:`~engines.core.data.AuditData`
(records, encoded features, protected masks, decisions, labels, model) plus its typed
parameters, and returns named Arrow tables whose schemas it declares up front.

Work splitting is part of the contract so that the orchestration layer (``flows/``) can fan
any engine out the same way on one core or on a Dask cluster, with no engine knowing which:

``prepare``   shared, picklable state computed once (fitted SCM, counterfactuals, graph ...)
``pieces``    the picklable work units (complainant chunks, groups/components, blocks ...)
``run_piece`` one unit -> ``{table name: Arrow table}``; a pure function of (state, piece)
``combine``   all units' outputs -> the final ``{table name: Arrow table}``

An engine whose work has two levels (FGCE: groups, then the components found in each group's
graph) may also define ``next_round(state, parts) -> (state, pieces) | None``: after a round
of pieces it returns the state and pieces of the next round (or None when done); ``combine``
then receives the parts of every round. A part may carry a non-table ``"_carry"`` entry for
the next round; only declared tables are written.

An engine that re-decides records with the audited model sets ``uses_model = True``: the audit
then does not run it when a fitted surrogate cannot stand in for the lender's model
(``engines.core.model_quality``), and says why.

The run's model is built (a surrogate fitted, its quality measured) only when an engine of the
run reads it, or when it makes the run's decisions (``model.use_for_decisions``). An engine
that reads it says so on its parameters model, ``reads_model(self, spec) -> bool`` (CST, CEC,
PBA: always; the outcome metrics: only for the AUC, with labels); one whose parameters do not
define it does not read the model (:func:`declared_reads_model`). The declaration is on the
parameters, which validating the spec imports anyway, so that deciding whether to build the
model imports no engine (PBA's and CEC's modules import torch: 8 s and its memory in the
flow's process). An engine with ``uses_model = True`` must declare it (tests/test_model_readers.py).

An engine reads only the staged columns it needs: ``columns(spec, params)`` returns their
names (``engines.core.data.record_columns`` gives the usual ones), and the orchestration
layer then reads just those from the lake; an engine without it gets every staged column.
The records come in record order (by id: the same whatever the order of the source's rows),
except for an engine that sets ``row_order = False``
because its results cannot depend on the order (counts): it gets them in storage order,
which saves a sort of the whole dataset. An engine that looks only at some records may
define ``rows(spec, params)``: staged column → value (e.g. ``{"_decision": 0}``, the
unfavourable decisions), and gets only the records that have them (None: all); the lake's
partitions by group and decision or label make such a read skip whole files.

A table an engine lists in ``streamed`` (table name → key columns) is only the pieces' rows in
a fixed order: stably sorted by its keys, the pieces in order within a key (CST's evidence:
12.5M rows at 10M HMDA records). It never reaches ``combine``: as a piece finishes,
:func:`run_piece` cuts its rows by key into :class:`Section` s, which the orchestration layer
keeps in memory or writes to files on the worker that ran the piece, and the table is its
sections in (key, round, piece) order (:func:`run_rounds`, :func:`assemble`), so its rows never
gather in one process.

An engine whose state holds large arrays every piece reads may define ``spill(state, folder)
-> state``: the state with those arrays moved to files in ``folder`` (CST's points of every
record, 0.4 GB a worker at 10M HMDA records). The orchestration layer calls it, with a folder
every worker reads, before the state is sent to the workers; in-process runs keep the state
as it is (:func:`spill`).

An engine whose piece can itself spread its work over a cluster (the regression: a logit's
passes over parts of its rows, ``engines.regression.passes.Executor``) sets ``spreads = True``
and asks :func:`spread_client` in ``run_piece``: the orchestration layer gives it a Dask
client (:func:`spreading`) when a round has fewer pieces than the cluster has workers (the
regression's first round of two comparisons on a cluster of many), so that the idle workers
take part; the results are the same bits either way.

Result tables carry no ``run_id``: the warehouse writer adds it and writes every table of
the run in one transaction. Table names are global (``cst_claims``, ``fgce_curves`` ...) and
become ``audit.<name>`` in the warehouse.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Tables = dict[str, pa.Table]

_SPREAD: ContextVar[Any] = ContextVar("aequum_spread_client", default=None)


@contextmanager
def spreading(client) -> Iterator[None]:
    """While in the block, :func:`spread_client` is ``client`` (a Dask client)."""
    token = _SPREAD.set(client)
    try:
        yield
    finally:
        _SPREAD.reset(token)


def spread_client():
    """The Dask client a piece of an engine with ``spreads = True`` may spread its work over
    (None: do it here)."""
    return _SPREAD.get()


@runtime_checkable
class Engine(Protocol):
    name: str
    tables: Mapping[str, pa.Schema]

    def prepare(self, data: Any, params: Any) -> Any: ...

    def pieces(self, state: Any) -> Sequence[Any]: ...

    def run_piece(self, state: Any, piece: Any) -> Tables: ...

    def combine(self, state: Any, parts: Sequence[Tables]) -> Tables: ...


def declared_columns(engine: Engine, spec: Any, params: Any) -> list[str] | None:
    """The staged columns an engine declares it reads (None: all of them)."""
    columns = getattr(engine, "columns", None)
    return None if columns is None else list(columns(spec, params))


def declared_rows(engine: Engine, spec: Any, params: Any) -> dict[str, int] | None:
    """The staged column values an engine's records must have (None: every record)."""
    rows = getattr(engine, "rows", None)
    return None if rows is None else rows(spec, params)


def declared_reads_model(params: Any, spec: Any) -> bool:
    """Whether an engine with these parameters reads the run's model under this spec: its
    parameters' ``reads_model(spec)``, False when they do not define it."""
    reads = getattr(params, "reads_model", None)
    return bool(reads(spec)) if reads is not None else False


def spill(engine: Engine, state: Any, folder: str | None) -> Any:
    """The engine's state with its large arrays in files under ``folder`` (the engine's
    ``spill``), or as it is (no folder, or an engine without ``spill``)."""
    move = getattr(engine, "spill", None)
    return state if move is None or folder is None else move(state, folder)


def chunks(lengths: Sequence[int], size: int) -> list[tuple[int, int, int]]:
    """Pieces ``(unit, start, stop)`` that cut each unit of work (a test, a partition, a batch of
    inputs) of the given length into consecutive chunks of at most ``size`` items."""
    return [(u, s, min(s + size, n)) for u, n in enumerate(lengths) for s in range(0, n, size)]


def concat_parts(parts: Sequence[Tables], schemas: Mapping[str, pa.Schema]) -> Tables:
    """Concatenate the same-named tables of every piece (the common ``combine``)."""
    out: Tables = {}
    for name, schema in schemas.items():
        chunks = [conform(p[name], schema, name) for p in parts if name in p]
        out[name] = pa.concat_tables(chunks) if chunks else schema.empty_table()
    return out


def conform(table: pa.Table, schema: pa.Schema, name: str) -> pa.Table:
    """Select and cast ``table`` to the declared ``schema``; name the table and column on error."""
    present = set(table.column_names)  # a new list at each access of ``column_names``
    missing = [f.name for f in schema if f.name not in present]
    if missing:
        raise ValueError(f"engine table {name!r} lacks declared column(s) {missing}")
    try:
        return table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"engine table {name!r} does not match its declared schema: {exc}") from exc


@dataclass(frozen=True)
class Section:
    """One piece's rows of a streamed table that share the key ``key``: in memory (``table``)
    or, once written, in the Parquet file ``path`` (``rows`` rows either way)."""

    name: str
    key: tuple
    rows: int
    table: pa.Table | None = None
    path: str | None = None


def streamed(engine: Engine) -> Mapping[str, Sequence[str]]:
    """The engine's streamed tables and their key columns (none unless it declares them)."""
    return getattr(engine, "streamed", {})


def run_piece(engine: Engine, state: Any, piece: Any,
              keep: Callable[[Section], Section] | None = None) -> Tables:
    """``engine.run_piece`` with each streamed table conformed to its schema and cut by key into
    sections, each handed to ``keep`` (e.g. written to a file; default: kept as it is); the
    part carries them, in key order, as ``"_sections"``."""
    part = engine.run_piece(state, piece)
    sections = []
    for name, keys in streamed(engine).items():
        if name in part:
            for key, rows in by_key(conform(part.pop(name), engine.tables[name], name), list(keys)):
                section = Section(name, key, rows.num_rows, table=rows)
                sections.append(section if keep is None else keep(section))
    if sections:
        part["_sections"] = sections
    return part


def by_key(table: pa.Table, keys: list[str]) -> list[tuple[tuple, pa.Table]]:
    """``table``'s rows grouped by the values of ``keys``, groups in key order (nulls last),
    rows in their order within a group: :func:`stable_sort`, cut where the key changes."""
    if table.num_rows == 0:
        return []
    starts = _runs(table, keys)
    found = _keys(table, keys, starts) if len(starts) <= _RUNS else None
    # rows already in key order (each key in one run, the runs ascending, as an engine that
    # writes its rows by key gives them): the sort would leave them where they are
    if found is None or not all(_key_order(a) < _key_order(b) for a, b in zip(found, found[1:])):
        table = stable_sort(table, keys)
        starts = _runs(table, keys)
        found = _keys(table, keys, starts)
    ends = np.r_[starts[1:], table.num_rows]
    return [(key, table.slice(int(s), int(e - s))) for key, s, e in zip(found, starts, ends)]


_RUNS = 4096  # runs of equal keys checked for order before sorting (by_key)


def _runs(table: pa.Table, keys: list[str]) -> np.ndarray:
    """Where each run of rows with equal ``keys`` starts."""
    change = np.zeros(table.num_rows, bool)
    change[0] = True
    for k in keys:
        col = table[k]
        null = pc.is_null(col).to_numpy(zero_copy_only=False)
        change[1:] |= pc.not_equal(col[1:], col[:-1]).fill_null(False).to_numpy(zero_copy_only=False)
        change[1:] |= null[1:] != null[:-1]  # a value next to a null
    return np.flatnonzero(change)


def _keys(table: pa.Table, keys: list[str], starts: np.ndarray) -> list[tuple]:
    """The key of each run (:func:`_runs`)."""
    return [tuple(table[k][int(s)].as_py() for k in keys) for s in starts]


def _key_order(key: tuple) -> tuple:
    return tuple((v is None, v if v is not None else 0) for v in key)


def assemble(sections: Sequence[Section], schema: pa.Schema) -> pa.Table:
    """A streamed table from its sections in memory (in the order :func:`run_rounds` gives)."""
    tables = [s.table for s in sections]
    return pa.concat_tables(tables).cast(schema) if tables else schema.empty_table()


def stable_sort(table: pa.Table, keys: list[str]) -> pa.Table:
    """``table`` stably sorted by ``keys``. Rows that come in long runs keeping their order (one
    per piece and block) are the runs' slices concatenated: no copy of the rows; scattered rows
    are gathered once."""
    if table.num_rows < 2:
        return table
    order = pc.sort_indices(table, sort_keys=[(k, "ascending") for k in keys]).to_numpy()  # stable
    breaks = np.flatnonzero(np.diff(order) != 1) + 1
    if len(breaks) > max(1024, len(order) // 64):  # scattered rows: one gather
        return table.take(order)
    starts, ends = np.r_[0, breaks], np.r_[breaks, len(order)]
    return pa.concat_tables([table.slice(int(order[s]), int(e - s)) for s, e in zip(starts, ends)])


def run_serial(engine: Engine, data: Any, params: Any) -> Tables:
    """Run an engine in-process, piece by piece (tests, small data, one core)."""
    state = engine.prepare(data, params)
    state, parts, _, sections = run_rounds(engine, state,
                                           lambda st, pieces: [run_piece(engine, st, p) for p in pieces])
    out = engine.combine(state, parts)
    out.update({name: assemble(sections[name], engine.tables[name]) for name in sections})
    return {name: conform(out[name], schema, name) for name, schema in engine.tables.items()}


def run_rounds(engine: Engine, state: Any, run_pieces) -> tuple[Any, list[Tables], int, dict[str, list[Section]]]:
    """Every round of an engine's pieces: ``run_pieces(state, pieces) -> parts`` runs one round
    (in-process or on a cluster), the parts in the pieces' order, each from :func:`run_piece`;
    ``next_round``, when the engine has it, yields the next. Returns the final state, the parts
    of all rounds (without their sections), the number of pieces run and, per streamed table,
    its sections in (key, round, piece) order: the table's rows in order."""
    pieces = list(engine.pieces(state))
    parts: list[Tables] = []
    found: list[tuple[str, tuple, int, int, Section]] = []
    n = 0
    while pieces:
        done = list(run_pieces(state, pieces))
        for i, part in enumerate(done):
            found += [(s.name, _key_order(s.key), n + i, j, s) for j, s in enumerate(part.pop("_sections", []))]
        n += len(pieces)
        parts += done
        nxt = engine.next_round(state, done) if hasattr(engine, "next_round") else None
        state, pieces = nxt if nxt is not None else (state, [])
    found.sort(key=lambda f: f[:4])
    return state, parts, n, {name: [f[4] for f in found if f[0] == name] for name in streamed(engine)}
