"""User-supplied counterfactual tables (``scm.counterfactuals``), aligned with the staged records.

One table per tested attribute or intersection: do(A := a') differs per A. Each table is read
as it is, including the form R's ``write.table`` gives (the CST authors ship theirs so): a
header with one name fewer than the data rows (or a blank first name, ``write.csv``), quoted
names, and a first column of 1-based row names. Alignment with the staged records:

* ``id_column: <name>``: that column holds the records' ids;
* ``id_column: null``: by source row — the R row names when present (1-based), else the
  table's own row order (row i describes source row i).

``columns`` maps a feature to the column holding its counterfactual value (e.g. the authors'
``scf_LSAT``). Every problem is one line naming the table, the column or the row.
"""
from __future__ import annotations

import csv
from pathlib import Path

import polars as pl
import pyarrow as pa

from aequum.engines.core.spec import AuditSpec, CounterfactualTable
from aequum.flows.store.readers import SourceError

ROW_NAMES = "_row_name"


class CounterfactualError(SourceError):
    """A supplied counterfactual table that cannot be used (the message names it): a user error."""


def load_counterfactuals(spec: AuditSpec, spec_dir: Path, data_table: pa.Table) -> dict[str, pa.Table] | None:
    """Every supplied table, keyed by the attribute (or ``a&b`` intersection) it intervenes on,
    aligned row by row with the staged records (``_id`` first, features under their names)."""
    if spec.scm is None or spec.scm.counterfactuals is None:
        return None
    tables = spec.scm.counterfactuals
    single = isinstance(tables, CounterfactualTable)
    if single:  # the spec allows it for a single protected attribute only
        tables = {spec.protected[0].name: tables}
    out = {}
    for key, src in tables.items():
        where = "scm.counterfactuals" if single else f"scm.counterfactuals[{key}]"
        out[key] = align(read_table(src, spec_dir, where), src, spec, data_table, where)
    return out


def read_table(src: CounterfactualTable, spec_dir: Path, where: str) -> pl.DataFrame:
    """The table as text columns; R's row-name column (if any) as ``_row_name``."""
    from aequum.flows.store.readers import SourceError, open_source, resolve, sniff_delimiter

    if src.kind == "csv" and src.header_names is None:
        path = resolve(src.path, spec_dir)
        if not path.exists():
            raise CounterfactualError(f"{where}: file not found: {path}")
        delim = src.delimiter or sniff_delimiter(path)
        with open(path, encoding="utf-8", newline="") as fh:
            rows = csv.reader(fh, delimiter=delim, quotechar='"')
            header, first = next(rows, []), next(rows, [])
        if header and (len(header) == len(first) - 1 or (header[0] == "" and len(header) == len(first))):
            names = [ROW_NAMES] + header[len(header) - len(first) + 1:]
            try:
                return pl.read_csv(path, separator=delim, has_header=False, skip_rows=1,
                                   new_columns=names, infer_schema=False, quote_char='"')
            except pl.exceptions.PolarsError as exc:
                raise CounterfactualError(f"{where}: cannot read {path}: {str(exc).splitlines()[0]}") from None
    try:
        with open_source(src, spec_dir) as stream:
            return pl.from_arrow(pa.Table.from_batches(list(stream.batches)))
    except SourceError as exc:
        raise CounterfactualError(f"{where}: {exc}") from None


def align(cf: pl.DataFrame, src: CounterfactualTable, spec: AuditSpec, data_table: pa.Table,
          where: str) -> pa.Table:
    """Rename mapped columns to their features, check the numbers, and order the rows as the
    staged records (``_id`` first); a staged record without a row, or a record twice, is an error."""
    mapping = dict(src.columns or {})
    absent = sorted({c for c in [*mapping.values(), *([src.id_column] if src.id_column else [])]
                     if c not in cf.columns})
    if absent:
        raise CounterfactualError(f"{where}: no column(s) {absent} in the table (its columns: {cf.columns})")
    cf = cf.drop([f for f in mapping if f in cf.columns and f not in mapping.values()])
    cf = cf.rename({c: f for f, c in mapping.items()})
    for f in spec.features:
        if f.type == "numeric" and f.name in cf.columns:
            values = cf[f.name].cast(pl.Utf8)
            num = values.cast(pl.Float64, strict=False)
            bad = values.is_not_null() & num.is_null()
            if bad.any():
                i = int(bad.arg_max())
                raise CounterfactualError(f"{where}: column {mapping.get(f.name, f.name)!r} row {i + 1} is not a "
                                 f"number: {values[i]!r}")
            cf = cf.with_columns(num.alias(f.name))
    records = pl.from_arrow(data_table.select(["_id", "_row"]))
    if src.id_column is not None:
        key, staged = cf[src.id_column].cast(pl.Utf8), records["_id"].cast(pl.Utf8)
        what = "record id"
    else:
        if ROW_NAMES in cf.columns:
            key = cf[ROW_NAMES].cast(pl.Int64, strict=False) - 1
            if key.is_null().any() or (key < 0).any():
                i = int((key.is_null() | (key < 0)).arg_max())
                raise CounterfactualError(f"{where}: R row name {cf[ROW_NAMES][i]!r} (row {i + 1}) is not a "
                                 "positive row number; give scm.counterfactuals an id_column")
        else:
            key = pl.int_range(0, cf.height, dtype=pl.Int64, eager=True)
        staged = records["_row"].cast(pl.Int64)
        what = "source row"
    cf = cf.with_columns(key.alias("__key"))
    dup = cf.filter(pl.col("__key").is_duplicated())
    if dup.height:
        shown = dup[src.id_column or ROW_NAMES][0]
        raise CounterfactualError(f"{where}: {what} {shown!r} appears {int((cf['__key'] == dup['__key'][0]).sum())} times")
    aligned = pl.DataFrame({"__key": staged, "_id": records["_id"]}).join(
        cf.drop("_id", strict=False), on="__key", how="left", maintain_order="left", coalesce=True)
    present = aligned["__key"].is_in(cf["__key"].implode())
    if not present.all():
        lost = aligned.filter(~present)
        raise CounterfactualError(f"{where} lacks {lost.height} of the staged records (matched by {what}; "
                         f"e.g. record id {lost['_id'][0]!r})")
    return aligned.drop("__key").to_arrow()
