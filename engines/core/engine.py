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

An engine reads only the staged columns it needs: ``columns(spec, params)`` returns their
names (``engines.core.data.record_columns`` gives the usual ones), and the orchestration
layer then reads just those from the lake; an engine without it gets every staged column.
The records come in source row order, except for an engine that sets ``row_order = False``
because its results cannot depend on the order (counts): it gets them in storage order,
which saves a sort of the whole dataset. An engine that looks only at some records may
define ``rows(spec, params)``: staged column → value (e.g. ``{"_decision": 0}``, the
unfavourable decisions), and gets only the records that have them (None: all); the lake's
partitions by group and decision or label make such a read skip whole files.

Result tables carry no ``run_id``: the warehouse writer adds it and writes every table of
the run in one transaction. Table names are global (``cst_claims``, ``fgce_curves`` ...) and
become ``audit.<name>`` in the warehouse.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

Tables = dict[str, pa.Table]


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
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise ValueError(f"engine table {name!r} lacks declared column(s) {missing}")
    try:
        return table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"engine table {name!r} does not match its declared schema: {exc}") from exc


def run_serial(engine: Engine, data: Any, params: Any) -> Tables:
    """Run an engine in-process, piece by piece (tests, small data, one core)."""
    state = engine.prepare(data, params)
    state, parts, _ = run_rounds(engine, state, lambda st, pieces: [engine.run_piece(st, p) for p in pieces])
    out = engine.combine(state, parts)
    return {name: conform(out[name], schema, name) for name, schema in engine.tables.items()}


def run_rounds(engine: Engine, state: Any, run_pieces) -> tuple[Any, list[Tables], int]:
    """Every round of an engine's pieces: ``run_pieces(state, pieces) -> parts`` runs one round
    (in-process or on a cluster); ``next_round``, when the engine has it, yields the next.
    Returns the final state, the parts of all rounds and the number of pieces run."""
    pieces = list(engine.pieces(state))
    parts: list[Tables] = []
    n = 0
    while pieces:
        n += len(pieces)
        done = list(run_pieces(state, pieces))
        parts += done
        nxt = engine.next_round(state, done) if hasattr(engine, "next_round") else None
        state, pieces = nxt if nxt is not None else (state, [])
    return state, parts, n
