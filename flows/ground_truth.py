"""The ground truth of a run's source, and the run's ``detection`` table scored against it.

A spec's ``source.truth`` names a file (Parquet or CSV) and its columns; a generated source
uses its generator's truth (the HMDA generator's ``harmed_direct_<protected column>`` as each
protected attribute's direct effect, ``harmed_total_<protected column>`` as its total effect,
and the posteriors ``p_harmed_*`` for the oracle).
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from aequum.engines.core.spec import AuditSpec, SpecError
from aequum.engines.detection import INDIVIDUAL, GroundTruth, detection_table


def _read(path: Path, columns: list[str], ids: pa.Array | None) -> pa.Table:
    """``columns`` of the truth file (the first one its record ids), only the rows of ``ids``
    (text) when given: a pass over the file that keeps the few records an audit scores (at 10M
    HMDA records the whole truth and its id index took 0.9 GB of the flow's process for the
    0.16M records CST and PBA examined)."""
    if not path.exists():
        raise SpecError(f"source.truth.path: {path} does not exist")
    if path.suffix.lower() == ".csv":
        import pyarrow.csv as pacsv

        reader = pacsv.open_csv(path, convert_options=pacsv.ConvertOptions(column_types={columns[0]: pa.string()}))
        keep = ids is not None and columns[0] in reader.schema.names
        table = pa.Table.from_batches([b.filter(pc.is_in(b[columns[0]], value_set=ids)) if keep else b
                                       for b in reader], schema=reader.schema)
    else:
        import pyarrow.dataset as ds

        dataset = ds.dataset(path, format="parquet")
        have = dataset.schema.names
        read = [c for c in columns if c in have]  # only what is scored
        rows = ds.field(columns[0]).cast(pa.string()).isin(ids) if ids is not None and columns[0] in have else None
        table = dataset.to_table(columns=read, filter=rows)
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise SpecError(f"source.truth: column(s) {missing} are not in {path} (it has {table.column_names})")
    return table.select(columns)


def _flags(table: pa.Table, column: str, field: str) -> pa.Array:
    col = table[column]
    if not pa.types.is_boolean(col.type):
        try:
            col = pc.cast(col, pa.bool_())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise SpecError(f"{field}: column {column!r} must be boolean (harmed or not), "
                            f"it is {col.type}") from None
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _numbers(table: pa.Table, column: str, field: str) -> pa.Array:
    col = table[column]
    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
        raise SpecError(f"{field}: column {column!r} must be numeric (a probability), it is {col.type}")
    return col


def load_truth(spec: AuditSpec, spec_dir: Path, ids: pa.Array | None = None) -> GroundTruth | None:
    """The source's ground truth, or None when it has none; with ``ids`` (record ids as text),
    that of those records only (the truth's other records are never scored)."""
    src = spec.source
    if src.truth is not None:
        t = src.truth
        path = Path(t.path) if Path(t.path).is_absolute() else spec_dir / t.path
        by = {name: (getattr(t, name) if isinstance(getattr(t, name), dict) else {}) for name in
              ("direct", "direct_posterior")}
        one = {name: (getattr(t, name) if isinstance(getattr(t, name), str) else None) for name in
               ("direct", "direct_posterior")}
        columns = list(dict.fromkeys([t.id_column, *[c for c in one.values() if c], *t.total.values(),
                                      *t.total_posterior.values(), *by["direct"].values(),
                                      *by["direct_posterior"].values()]))
        table = _read(path, columns, ids)
        return GroundTruth(pc.cast(table[t.id_column], pa.string()),
                           _flags(table, one["direct"], "source.truth.direct") if one["direct"] else None,
                           {a: _flags(table, c, f"source.truth.total.{a}") for a, c in t.total.items()},
                           source=str(path),
                           direct_posterior=_numbers(table, one["direct_posterior"], "source.truth.direct_posterior")
                           if one["direct_posterior"] else None,
                           total_posterior={a: _numbers(table, c, f"source.truth.total_posterior.{a}")
                                            for a, c in t.total_posterior.items()},
                           direct_by={a: _flags(table, c, f"source.truth.direct.{a}") for a, c in by["direct"].items()},
                           direct_by_posterior={a: _numbers(table, c, f"source.truth.direct_posterior.{a}")
                                                for a, c in by["direct_posterior"].items()})
    if src.kind == "generated":
        from aequum.engines.generators import catalogue

        table = catalogue.truth(src.generator, src.rows, src.seed, src.world, src.effect)
        if table is None:
            return None
        if ids is not None:
            table = table.filter(pc.is_in(pc.cast(table["id"], pa.string()), value_set=ids))
        total = {p.name: f"harmed_total_{p.column}" for p in spec.protected
                 if f"harmed_total_{p.column}" in table.column_names}
        posterior = {a: f"p_{c}" for a, c in total.items() if f"p_{c}" in table.column_names}
        direct = {p.name: f"harmed_direct_{p.column}" for p in spec.protected
                  if f"harmed_direct_{p.column}" in table.column_names}
        return GroundTruth(table["id"], _flags(table, "harmed", "harmed"),
                           {a: _flags(table, c, c) for a, c in total.items()}, source=f"generator {src.generator}"
                           + (f" (world {src.world})" if src.world != catalogue.DEFAULT_WORLD else "")
                           + (f" (effect {src.effect:g})" if src.effect != 1.0 else ""),
                           direct_posterior=table["p_harmed"] if "p_harmed" in table.column_names else None,
                           total_posterior={a: table[c] for a, c in posterior.items()},
                           direct_by={a: _flags(table, c, c) for a, c in direct.items()},
                           direct_by_posterior={a: table[f"p_{c}"] for a, c in direct.items()
                                                if f"p_{c}" in table.column_names})
    return None


def score_run(spec: AuditSpec, spec_dir: Path, outcomes, say) -> pa.Table | None:
    """The run's ``detection`` table (None without a truth, or with nothing to score)."""
    tables = {o.engine: o.results() for o in outcomes if o.status == "succeeded"}
    truth = load_truth(spec, spec_dir, scored_ids(tables))
    if truth is None:
        return None
    table = detection_table(tables, truth)
    if table.num_rows:
        say(f"scored {table.num_rows} detection row(s) against the ground truth ({truth.source})")
    return table if table.num_rows else None


def scored_ids(engine_tables: dict) -> pa.Array:
    """The distinct ids (text) of the records whose findings the detection table scores."""
    chunks = []
    for engine, name in INDIVIDUAL.items():
        tables = engine_tables.get(engine, {})
        if name in tables:  # a spooled engine's table: only its ids are read
            column = tables.column(name, "record_id") if hasattr(tables, "column") else tables[name]["record_id"]
            chunks += column.cast(pa.string()).chunks if isinstance(column, pa.ChunkedArray) else [column.cast(pa.string())]
    return pc.unique(pa.chunked_array(chunks, pa.string()))
