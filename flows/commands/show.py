"""``aequum show``: a run's audit table for a person (fitted to the terminal) or a file (CSV /
Parquet, every row, streamed). Without a table name it lists the run's tables; a table whose
engine the run did not execute (or that failed) is said so, not printed empty.

A table is a run's by its ``run_id`` column (the result tables, ``runs``, ``run_engines``), or by
the run's dataset when it has only ``dataset_version`` (``datasets``, ``quarantine``); the
registry ``aequum_tables`` belongs to no run and is shown whole."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import NamedTuple

import polars as pl
import pyarrow as pa

from aequum.flows.store.guard import check_output
from aequum.flows.store.warehouse import (Warehouse, WarehouseError, check_table_name, lake_roots, quote_ident,
                                         source_paths)

MAX_CELL = 40  # characters of a text cell in the terminal


def fit_columns(frame: pl.DataFrame, width: int) -> tuple[list[str], list[str]]:
    """The leading columns whose rendered width fits ``width`` characters, and the rest."""
    shown, used = [], 1
    for name in frame.columns:
        col = frame[name]
        values = col.head(50).to_list()
        if col.dtype.is_float():
            values = [v if v is None else f"{v:.4f}" for v in values]
        cells = [len(name)] + [min(len(str(v)), MAX_CELL) for v in values]
        need = max(cells) + 3
        if shown and used + need > width:
            break
        shown.append(name)
        used += need
    return shown, [c for c in frame.columns if c not in shown]


def print_table(table: pa.Table, width: int | None = None, title: str | None = None,
                total: int | None = None, out=None, hint: str | None = "--format csv shows all") -> None:
    """Print an Arrow table so that it fits ``width`` (default: the terminal's) columns; the
    columns left out are named, with ``hint`` (how the command shows them all), if any."""
    out = out or sys.stdout
    width = width or shutil.get_terminal_size((120, 40)).columns
    frame = pl.from_arrow(table)
    if isinstance(frame, pl.Series):
        frame = frame.to_frame()
    shown, hidden = fit_columns(frame, width)
    if title:
        count = total if total is not None else frame.height
        rows = f"{count:,} row{'' if count == 1 else 's'}"
        more = f", first {frame.height:,} shown" if total is not None and total > frame.height else ""
        print(f"{title}: {rows}{more}", file=out)
    with pl.Config(tbl_rows=max(frame.height, 1), tbl_cols=-1, tbl_width_chars=width,
                   fmt_str_lengths=MAX_CELL, float_precision=4, tbl_hide_column_data_types=True,
                   tbl_hide_dataframe_shape=True):
        print(frame.select(shown), file=out)
    if hidden:
        print(f"{len(hidden)} more column(s): {', '.join(hidden)}{f' ({hint})' if hint else ''}", file=out)


def latest_run(wh: Warehouse) -> str:
    runs = wh.runs(limit=1).to_pylist()
    if not runs:
        raise WarehouseError(f"warehouse {wh.path} has no runs")
    return runs[0]["run_id"]


def engine_note(wh: Warehouse, name: str, run_id: str) -> str | None:
    """Why the run has no rows of ``name`` when its engine did not run or failed; else None."""
    engines = wh.engine_status(run_id)
    owners = wh.query("table_engines", {"table_name": name})["engine"].to_pylist()
    if not owners:
        return None
    for owner in owners:
        status = engines.get(owner)
        if status is not None and status["status"] == "succeeded":
            return None
    owner = owners[0]
    if owner in engines:
        return (f"engine {owner!r} {engines[owner]['status']} in run {run_id}"
                + (f": {engines[owner]['error']}" if engines[owner].get("error") else "")
                + f"; audit.{name} has no rows of this run")
    ran = ", ".join(sorted(engines)) or "none"
    return (f"engine {owner!r} did not run in run {run_id} (engines run: {ran}); audit.{name} has "
            f"no rows of this run. Pick another run with --run-id (aequum runs lists them).")


def missing_table(wh: Warehouse, name: str) -> str:
    """The error for a table the warehouse does not hold yet: what writes it, when aequum writes
    it (an engine's table appears with the engine's first run), then the tables it holds."""
    from aequum.engines.registry import ENGINES, get_engine
    from aequum.engines.matching.cec.training import TRAINED

    held = f"tables: {', '.join(wh.table_names())}"
    if name in TRAINED:
        return f"no table audit.{name} yet: `aequum train --spec SPEC` writes it; {held}"
    if name == "detection":
        return (f"no table audit.detection yet: a run whose source has a ground truth writes it "
                f"(a generated source always has); {held}")
    for engine in ENGINES:
        if name in get_engine(engine).tables:
            return (f"no table audit.{name} yet: the {engine!r} engine writes it, and no run in "
                    f"{wh.path} has run it (a spec's engines.run); {held}")
    return f"no table audit.{name}; {held}"


class Scope(NamedTuple):
    """The rows of ``audit.<name>`` (aliased ``t``) that are a run's: ``where`` (SQL, parameter
    ``$key``), ``key``, the column the terminal leaves out (it holds ``key`` on every row), and a
    title."""
    where: str
    key: str | None
    hidden: str | None
    title: str


def table_columns(wh: Warehouse, name: str) -> list[str]:
    return [r[0] for r in wh.con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'audit' "
        "AND table_name = $name ORDER BY ordinal_position", {"name": name}).fetchall()]


def run_scope(wh: Warehouse, name: str, run_id: str) -> Scope:
    """Which rows of ``audit.<name>`` belong to run ``run_id`` (module docstring)."""
    columns = set(table_columns(wh, name))
    if "run_id" in columns:
        return Scope("WHERE t.run_id = $key", run_id, "run_id", f"audit.{name}, run {run_id}")
    if "dataset_version" in columns:
        version = wh.run(run_id)["dataset_version"]
        if version is None:
            raise WarehouseError(f"run {run_id} staged no dataset, so audit.{name} has no rows of it; "
                                 f"pick another run with --run-id (aequum runs lists them)")
        return Scope("WHERE t.dataset_version = $key", version, "dataset_version",
                     f"audit.{name}, dataset {version} of run {run_id}")
    return Scope("", None, None, f"audit.{name} (every run)")


def labelled(wh: Warehouse, name: str, hidden: str | None = None) -> tuple[str, str]:
    """The select list and FROM clause of ``audit.<name>`` (aliased ``t``) with each group code's
    label beside it: ``group_name`` / ``group`` -> ``group_label``, ``reference_group`` ->
    ``reference_group_label``, ...; a table of one row per attribute (regression_estimates,
    cst_summary) gets ``group_label``, its protected group against the reference ("Female
    against Male"). A table that stores them (written since the tables carry labels) gives its
    own; rows of runs written before, and tables without them, read audit.group_labels.
    Identifiers come from the catalog."""
    from aequum.flows.store.group_labels import TABLE, label_column, labelled_columns

    columns = table_columns(wh, name)
    attribute, groups = labelled_columns(wh, name)
    table = f"audit.{quote_ident(check_table_name(name))} AS t"
    view = wh.con.execute("SELECT count(*) FROM duckdb_views() WHERE schema_name = 'audit' AND view_name = $name",
                          {"name": name}).fetchall()[0][0]
    if (attribute is None or "run_id" not in columns or view or name == TABLE
            or TABLE not in wh.table_names()):
        return ", ".join(f"t.{quote_ident(c)}" for c in columns if c != hidden), table
    codes = groups or [attribute]
    stored = {label_column(c, bool(groups)) for c in codes} & set(columns)
    select, joins = [], [table]
    for c in columns:
        if c != hidden and c not in stored:
            select.append(f"t.{quote_ident(c)}")
        if c in codes:
            i = len(joins)
            code = quote_ident(c) if groups else "'protected'"
            label = label_column(c, bool(groups))
            joins.append(f"LEFT JOIN audit.{TABLE} AS l{i} ON l{i}.run_id = t.run_id AND "
                         f"l{i}.attribute = t.{quote_ident(attribute)} AND l{i}.group_name = "
                         f"{'t.' + code if groups else code}")
            words = f"l{i}.{'group_label' if groups else 'versus_label'}"
            if label in stored:  # the run's own label, else (a run written before) the table of labels
                words = f"coalesce(t.{quote_ident(label)}, {words})"
            select.append(f"{words} AS {quote_ident(label)}")
    return ", ".join(select), " ".join(joins)


def scoped_sql(wh: Warehouse, name: str, scope: Scope, count: bool = False, tail: str = "",
               hide: bool = False) -> tuple[str, dict]:
    """``SELECT`` of the labelled ``audit.<name>`` (:func:`labelled`; ``count``: its rows)
    limited to ``scope`` (``hide``: without the column holding its key), and its parameters."""
    select, source = labelled(wh, name, scope.hidden if hide else None)
    sql = f"SELECT {'count(*)' if count else select} FROM {source} {scope.where} {tail}"
    return sql, ({"key": scope.key} if scope.key is not None else {})


def write_file(wh: Warehouse, name: str, run_id: str, fmt: str, out: str | None) -> None:
    """Stream every row of the run's ``audit.<name>``, labelled, to a CSV or Parquet file
    (XLSX: :func:`aequum.flows.store.xlsx.write_xlsx`, in memory: a findings-sized table)."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    if fmt in ("parquet", "xlsx") and out is None:
        raise WarehouseError(f"--format {fmt} needs --out FILE")
    sql, params = scoped_sql(wh, name, run_scope(wh, name, run_id),
                             tail="ORDER BY t.rank" if name == "findings" else "")
    reader = wh.con.sql(sql, params=params or None).to_arrow_reader(100_000)
    if fmt == "xlsx":
        from aequum.flows.store.xlsx import write_xlsx

        write_xlsx(reader.read_all(), out, sheet=name)
    elif fmt == "csv":
        sink = sys.stdout.buffer if out is None else Path(out).open("wb")
        try:
            with pcsv.CSVWriter(sink, reader.schema) as writer:
                for batch in reader:
                    writer.write_batch(batch)
        finally:
            if out is not None:
                sink.close()
    else:
        with pq.ParquetWriter(out, reader.schema) as writer:
            for batch in reader:
                writer.write_batch(batch)


def show(args, notify=None) -> int:
    with Warehouse(args.warehouse, read_only=True, wait=getattr(args, "wait", None), notify=notify) as wh:
        if args.table is not None and args.table not in wh.table_names():
            raise WarehouseError(missing_table(wh, args.table))
        run_id = args.run_id or latest_run(wh)
        if wh.run(run_id) is None:
            raise WarehouseError(f"no run {run_id!r} in {wh.path}; `aequum runs` lists them")
        if args.table is None:
            counts = []
            for e in wh.engine_status(run_id).values():
                counts += [{"table": t, "engine": e["engine"], "rows": n, "engine status": e["status"]}
                           for t, n in json.loads(e["tables"] or "{}").items()]
            print_table(pa.Table.from_pylist(sorted(counts, key=lambda r: (r["engine"], r["table"])))
                        if counts else pa.table({"table": pa.array([], pa.string())}),
                        title=f"tables of run {run_id}")
            return 0
        note = engine_note(wh, args.table, run_id)
        if note is not None:
            print(note, file=sys.stderr)
            return 1
        if args.format != "table":
            if args.out is not None:
                check_output(args.out, "--out", args.warehouse, lake_roots(wh), source_paths(wh))
            write_file(wh, args.table, run_id, args.format, args.out)
            if args.out:
                print(f"wrote audit.{args.table} of run {run_id} to {args.out}", file=sys.stderr)
            return 0
        name = check_table_name(args.table)
        scope = run_scope(wh, name, run_id)
        sql, params = scoped_sql(wh, name, scope, count=True)
        total = wh.con.execute(sql, params).fetchall()[0][0]
        sql, params = scoped_sql(wh, name, scope, hide=True, tail="ORDER BY t.rank LIMIT $limit"
                                 if name == "findings" else "LIMIT $limit")
        rows = wh.con.sql(sql, params=params | {"limit": args.limit}).to_arrow_table()
        print_table(rows, title=scope.title, total=total)
        return 0
