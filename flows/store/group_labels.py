"""``audit.group_labels``: every group a run's tables name, in the words the report uses, written
once with the run's results so that SQL readers, ``aequum show`` and the notebook join one
table instead of re-deriving labels.

One row per run x attribute x group code:

    attribute      the attribute or intersection as the tables name it (sex, race=Asian, race&sex)
    group_name     the code the tables hold (protected, reference, race=protected,sex=reference, all)
    group_label    the group as people read it ("Female", "Asian", "minority race (pooled) & Female")
    versus_label   the group against its attribute's reference group ("Female against Male"): what a
                   finding or a per-attribute row (regression_estimates, cst_summary) compares

The codes are read from the run's own rows (every column named ``attribute`` or
``protected_attribute`` beside a group column), so a new engine's table is labelled without a
list to keep; each attribute also gets its protected and reference sides (what the
per-attribute tables compare). Labels come from the run's parameters
(:class:`aequum.flows.reporting.labels.Labels`). sql/schema.sql creates the table."""
from __future__ import annotations

import json

import pyarrow as pa

ATTRIBUTE_COLUMNS = ("attribute", "protected_attribute")
GROUP_COLUMNS = ("group_name", "group", "reference_group", "highest_group", "presented_group")
SCHEMA = pa.schema([("attribute", pa.string()), ("group_name", pa.string()),
                    ("group_label", pa.string()), ("versus_label", pa.string())])
TABLE = "group_labels"


def labelled_columns(wh, table: str) -> tuple[str | None, list[str]]:
    """The attribute column of ``audit.<table>`` and its group columns (none: not a group table)."""
    cols = [r[0] for r in wh.con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'audit' "
        "AND table_name = $name AND data_type = 'VARCHAR' ORDER BY ordinal_position", {"name": table}).fetchall()]
    attribute = next((c for c in ATTRIBUTE_COLUMNS if c in cols), None)  # (cec_pairs' group is a 0/1 flag)
    return attribute, [c for c in GROUP_COLUMNS if c in cols] if attribute else []


def label_column(column: str, grouped: bool) -> str:
    """The name of the label beside a group column: group_name / group -> group_label,
    reference_group -> reference_group_label; a per-attribute table's (``grouped`` false) label
    of its attribute column is group_label (its protected group against the reference)."""
    return "group_label" if column in ("group_name", "group") or not grouped else f"{column}_label"


def label_frame(frame, labels):
    """A polars frame of a run's table with each group code's label beside it, as ``aequum
    show`` prints it; ``labels`` is the run's ``audit.group_labels`` rows (a polars frame)."""
    import polars as pl

    cols = frame.columns
    text = [c for c in cols if frame.schema[c] == pl.String]
    attribute = next((c for c in ATTRIBUTE_COLUMNS if c in text), None)
    if attribute is None or "group_label" in cols or labels.height == 0:
        return frame
    groups = [c for c in GROUP_COLUMNS if c in text]
    keyed = labels.select("attribute", "group_name", "group_label", "versus_label")
    order = []
    for c in cols:
        order.append(c)
        if c in groups or (c == attribute and not groups):
            name = label_column(c, bool(groups))
            code = c if groups else "_code"
            if not groups:
                frame = frame.with_columns(pl.lit("protected").alias("_code"))
            right = keyed.select(pl.col("attribute").alias(attribute), pl.col("group_name").alias(code),
                                 pl.col("group_label" if groups else "versus_label").alias(name))
            frame = frame.join(right, on=[attribute, code], how="left", maintain_order="left")
            order.append(name)
    return frame.select(order)


def _codes(wh, run_id: str) -> set[tuple[str, str]]:
    """(attribute, group code) of every row of the run's result tables, and each attribute's sides."""
    from aequum.flows.store.warehouse import quote_ident

    pairs: set[tuple[str, str]] = set()
    for table in wh.query("run_tables")["table_name"].to_pylist():
        if table == TABLE:
            continue
        attribute, groups = labelled_columns(wh, table)
        if attribute is None:
            continue
        selects = [f"SELECT DISTINCT {quote_ident(attribute)}, {quote_ident(g)} FROM audit.{quote_ident(table)} "
                   f"WHERE run_id = $run_id" for g in groups] or [
            f"SELECT DISTINCT {quote_ident(attribute)}, 'protected' FROM audit.{quote_ident(table)} WHERE run_id = $run_id"]
        for a, g in wh.con.execute(" UNION ".join(selects), {"run_id": run_id}).fetchall():
            if a is not None:
                pairs.add((a, g if g is not None else "protected"))
    for a in {a for a, _ in pairs}:
        pairs |= {(a, "protected"), (a, "reference")}
    return pairs


def group_label_rows(parameters: dict, pairs) -> pa.Table:
    """The labels of ``pairs`` (attribute, group code) under a run's ``parameters``, sorted."""
    from aequum.flows.reporting.labels import Labels

    labels = Labels(parameters)
    rows = sorted(pairs)
    return pa.table({"attribute": [a for a, _ in rows], "group_name": [g for _, g in rows],
                     "group_label": [labels.group(a, g) for a, g in rows],
                     "versus_label": [labels.versus(a, g) for a, g in rows]}, schema=SCHEMA)


def write_group_labels(wh, run_id: str) -> int:
    """Inside the transaction that wrote the run's results (after them): the run's group labels,
    replacing any it had; the number of rows."""
    record = wh.run(run_id)
    parameters = json.loads((record or {}).get("parameters") or "{}")
    wh.con.execute(f"DELETE FROM audit.{TABLE} WHERE run_id = $run_id", {"run_id": run_id})
    return wh.insert_run_rows(TABLE, run_id, group_label_rows(parameters, _codes(wh, run_id)))
