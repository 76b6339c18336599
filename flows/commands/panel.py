"""``aequum panel FILE``: lenders' names by LEI into the warehouse (``audit.lender_panel``), for
the per-lender findings and the report to name the lenders they flag.

The HMDA reporter panel (a CSV or Parquet file with ``lei`` and ``respondent_name`` among its
columns; ``--lei-column`` and ``--name-column`` for others) is read as text. A row without an LEI
or a name is left out and counted; an LEI listed twice with two names is refused, naming it.
Names are added or replaced by LEI, in one transaction; a later panel year overwrites an
earlier one's names for the lenders it lists."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from aequum.flows.store.guard import UsageError
from aequum.flows.store.warehouse import Warehouse


def read_panel(path: str | Path, lei: str = "lei", name: str = "respondent_name") -> tuple[pa.Table, int]:
    """The panel's (lei, name) rows, text, without blanks and duplicates, and how many rows had a
    blank LEI or name."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"panel: no file {str(path)!r}")
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    else:
        import pyarrow.csv as pacsv

        from aequum.flows.store.readers import header_names, sniff_delimiter

        delimiter = sniff_delimiter(path)  # a source's rule: the one that splits the header most
        try:
            table = pacsv.read_csv(path, parse_options=pacsv.ParseOptions(delimiter=delimiter),
                                   convert_options=pacsv.ConvertOptions(
                                       column_types={c: pa.string() for c in header_names([path], delimiter)}))
        except pa.ArrowInvalid as exc:
            raise UsageError(f"panel: {path.name} is not a readable CSV ({str(exc).splitlines()[0]})") from None
    for column in (lei, name):
        if column not in table.column_names:
            raise UsageError(f"panel: {path.name} has no column {column!r} (it has {table.column_names[:10]})")
    rows = pa.table({"lei": pc.utf8_trim_whitespace(table[lei].cast(pa.string())),
                     "name": pc.utf8_trim_whitespace(table[name].cast(pa.string()))})
    keep = pc.and_(pc.invert(pc.is_null(rows["lei"])), pc.invert(pc.is_null(rows["name"])))
    keep = pc.and_(keep, pc.and_(pc.not_equal(rows["lei"], ""), pc.not_equal(rows["name"], "")))
    blank = rows.num_rows - pc.sum(keep.cast(pa.int64())).as_py()
    rows = rows.filter(keep).group_by(["lei", "name"]).aggregate([])
    counts = rows.group_by("lei").aggregate([("name", "count")])
    twice = counts.filter(pc.greater(counts["name_count"], 1))["lei"].to_pylist()
    if twice:
        raise UsageError(f"panel: LEI {twice[0]!r} has more than one name in {path.name}"
                         f"{f' (and {len(twice) - 1} more LEIs)' if len(twice) > 1 else ''}")
    return rows.sort_by("lei"), blank


def load_panel(warehouse: str | Path, path: str | Path, lei: str = "lei", name: str = "respondent_name",
               wait: float = 30.0, notify=None) -> tuple[int, int]:
    """Add or replace the panel's names in the warehouse; (names written, rows left out)."""
    rows, blank = read_panel(path, lei, name)
    with Warehouse(warehouse, wait=wait, notify=notify) as wh:
        with wh.transaction() as con:
            con.register("panel_rows", rows)
            try:
                wh.run_sql("lender_panel_load", {"source": Path(path).name}, con=con)
            finally:
                con.unregister("panel_rows")
        wh.create_views()
    return rows.num_rows, blank
