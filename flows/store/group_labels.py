"""Group labels, in the words the report uses, written with a run's results: beside the codes in
the result tables themselves (:func:`label_tables`: ``group_label`` beside ``group_name``, ...),
and ``audit.group_labels``, every group a run's tables name, for the tables without them (tables
of individuals) and for the findings' sentences (sql/views/findings.sql: audit.group_label).

``audit.group_labels`` has one row per run x attribute x group code:

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
from collections.abc import Mapping

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


def label_plan(schema: pa.Schema) -> list[tuple[str, str, str]]:
    """The label columns a result table carries beside its codes: (code column, label column,
    which label) with which ``group`` (the group's own label) or ``versus`` (a per-attribute row:
    the attribute's protected group against its reference). A table of individuals (a
    ``record_id`` column) with no group per row (cst_claims, cst_evidence, cst_counterfactuals,
    cec_pairs, whose group is a 0/1 flag) gets none: every row of an attribute would carry the
    same words, and those tables are the large ones (cst_evidence: 8.2M rows at 1M HMDA records);
    ``audit.group_labels`` names their attribute's groups."""
    text = {f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
            or (pa.types.is_dictionary(f.type) and pa.types.is_string(f.type.value_type))}
    attribute = next((c for c in ATTRIBUTE_COLUMNS if c in text), None)
    if attribute is None:
        return []
    groups = [c for c in GROUP_COLUMNS if c in text]
    if groups:
        plan = [(g, label_column(g, True), "group") for g in groups]
    elif "record_id" not in schema.names:
        plan = [(attribute, "group_label", "versus")]
    else:
        plan = []
    return [p for p in plan if p[1] not in schema.names]


def labelled_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with each label column (:func:`label_plan`) right after its code column."""
    for code, name, _ in label_plan(schema):
        schema = schema.insert(schema.get_field_index(code) + 1, pa.field(name, pa.string()))
    return schema


def _as_text(column):
    import pyarrow.compute as pc

    return pc.cast(column, pa.string()) if not pa.types.is_string(column.type) else column


def _keys(table: pa.Table, attribute: str, code: str | None):
    """One text key per row: the attribute and the group code joined by a NUL (neither holds one)."""
    import pyarrow.compute as pc

    left = _as_text(table[attribute])
    right = _as_text(table[code]) if code is not None else pa.scalar("protected")
    return pc.binary_join_element_wise(left, right, "\x00")


def _attribute(schema: pa.Schema) -> str:
    return next(c for c in ATTRIBUTE_COLUMNS if c in schema.names)


def label_tables(parameters: dict | None, results: Mapping[str, tuple[pa.Schema, object]]
                 ) -> dict[str, tuple[pa.Schema, object]]:
    """A run's result tables ({name: (schema, table or Parquet path(s))}) with their label
    columns (:func:`label_plan`): ``group_label`` beside ``group_name`` / ``group``,
    ``<column>_label`` beside ``reference_group``, ``highest_group``, ``presented_group``, and on
    a per-attribute table (regression_estimates, cst_summary, pricing_estimates ...)
    ``group_label``, its protected group against the reference ("Female against Male"): the
    words of ``audit.group_labels`` and the report (:class:`~aequum.flows.reporting.labels.Labels`
    over the run's ``parameters``). Vectorised: each row's (attribute, code) is looked up among
    the distinct pairs (a hash join, rows in their order); labels are made once per distinct
    pair. A table given as Parquet files is read (only tables that get labels, which are the
    per-group ones and a few of individuals with a group per row); the others pass unchanged."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from aequum.flows.reporting.labels import Labels

    labels = Labels(parameters or {})
    out: dict[str, tuple[pa.Schema, object]] = {}
    for name, (schema, data) in results.items():
        plan = label_plan(schema)
        if not plan or data is None:  # (None: a declared table the run did not make)
            out[name] = (labelled_schema(schema), data)
            continue
        table = data if isinstance(data, pa.Table) else pq.read_table(data if isinstance(data, str) else list(data))
        attribute = _attribute(schema)
        for code, column, which in plan:
            if column in table.column_names:  # (a table read back from a warehouse has them)
                continue
            keys = _keys(table, attribute, code if which == "group" else None)
            distinct = pc.unique(keys).drop_null()
            words = [labels.group(*k.split("\x00", 1)) if which == "group" else labels.versus(*k.split("\x00", 1))
                     for k in distinct.to_pylist()]
            values = pc.take(pa.array(words, pa.string()), pc.index_in(keys, value_set=distinct))
            where = table.schema.get_field_index(code) + 1
            table = table.add_column(where, pa.field(column, pa.string()), values)
        out[name] = (labelled_schema(schema), table)
    return out


def run_parameters(wh, run_id: str) -> dict:
    """The run's recorded parameters (``audit.runs.parameters``; empty when none)."""
    record = wh.run(run_id)
    return json.loads((record or {}).get("parameters") or "{}")


def label_outcomes(wh, run_id: str, extra: Mapping, outcomes: list) -> tuple[dict, list]:
    """:func:`label_tables` over what ``flows.audit.write_run`` writes: the extra tables and each
    engine outcome's (declared schemas, tables in memory or spooled to Parquet files)."""
    from dataclasses import replace

    parameters = run_parameters(wh, run_id)
    labelled = []
    for o in outcomes:
        made = o.row_counts()
        done = label_tables(parameters, {t: (s, o.result(t) if t in made else None) for t, s in o.schemas.items()})
        tables = {t: d for t, (_, d) in done.items() if isinstance(d, pa.Table)}
        files = {t: d for t, (_, d) in done.items() if t in made and not isinstance(d, pa.Table)}
        tables.update({t: v for t, v in o.tables.items() if t not in done})  # (undeclared: as they are)
        files.update({t: v for t, v in o.files.items() if t not in done})
        labelled.append(replace(o, tables=tables, files=files,
                                rows={t: n for t, n in o.rows.items() if t in files},
                                schemas={t: s for t, (s, _) in done.items()}))
    return label_tables(parameters, extra), labelled


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


def label_older_runs(wh) -> int:
    """Inside a transaction: the group labels of every finished run written before
    ``audit.group_labels`` existed (``sql/runs_unlabelled.sql``), from its parameters and rows, as
    :func:`write_group_labels` writes them with a run; the number of runs labelled. The findings'
    sentences then read one table (``audit.group_label``) for every run."""
    runs = wh.query("runs_unlabelled")["run_id"].to_pylist()
    for run_id in runs:
        write_group_labels(wh, run_id)
    return len(runs)
