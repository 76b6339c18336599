"""Row validation of decision records against an audit spec (pure; polars expressions).

Each batch of source rows becomes (a) the staged rows with the derived columns that
``engines.core.data`` documents and (b) the bad rows, one per row, naming the first failing
field, its value and the reason. Column names from the spec are only ever used through
``pl.col`` (never in SQL text).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa

from aequum.engines.core.data import DECISION, ID, LABEL, ROW, group_column, is_text
from aequum.engines.core.proxy_spec import PROXY_COLUMNS
from aequum.engines.core.spec import AuditSpec, Feature

QUARANTINE_SCHEMA = pa.schema([
    ("source_row", pa.int64()), ("record_id", pa.string()), ("field", pa.string()),
    ("value", pa.string()), ("reason", pa.string()),
])


class SourceSchemaError(ValueError):
    """The source lacks columns the spec needs (names them) or has unusable types."""


def check_columns(columns: list[str], spec: AuditSpec) -> None:
    """Fail fast, naming every spec column the source does not have."""
    have = set(columns)
    missing = [c for c in spec.columns() if c not in have]
    if missing:
        shown = ", ".join(repr(c) for c in missing)
        if len(missing) == len(set(spec.columns())):
            # nothing matches: most likely not the file meant, or a wrong delimiter; its "header"
            # may be any content, so it is not echoed
            raise SourceSchemaError(f"source has none of the spec's columns ({shown}); it reads as "
                                    f"{len(columns)} column(s): check source.path and source.delimiter")
        raise SourceSchemaError(f"source lacks column(s) named in the spec: {shown}; "
                                f"it has {len(columns)} columns: {columns[:12]}"
                                f"{' ...' if len(columns) > 12 else ''}")


def _check_scalar(schema, columns: list[str]) -> None:
    """Fail, naming the column, where a source column holds nested values (lists, structs,
    maps, arrays: a Parquet file of another schema) instead of one number or text per field."""
    nested = [(c, schema[c]) for c in dict.fromkeys(columns) if c in schema and schema[c].is_nested()]
    if nested:
        shown = ", ".join(f"{c!r} holds {t}" for c, t in nested)
        raise SourceSchemaError(f"source column(s) of another type: {shown}; aequum reads one number or text "
                                "per field")


TEXT, NUMBER = "_aequum_text:", "_aequum_number:"


def _text(name: str) -> pl.Expr:
    """A column's values as stripped text (computed once per batch by :func:`_prepare`)."""
    return pl.col(TEXT + name)


def _number(name: str) -> pl.Expr:
    """A column's values as numbers, null where they are not (see :func:`_prepare`)."""
    return pl.col(NUMBER + name)


def _prepare(lf: pl.LazyFrame, schema, names: list[str], done: frozenset[str] = frozenset()) -> pl.LazyFrame:
    """Each column's stripped text and its value as a number, as columns that the checks and
    the staged values share, so that every column is stripped and parsed once per batch (the
    ones nothing uses are never computed: the plan drops them). The columns ``done`` have
    both already (:func:`_frame`)."""
    names = [c for c in dict.fromkeys(names) if c not in done]
    return lf.with_columns(
        pl.col(c).cast(pl.Utf8).str.strip_chars().alias(TEXT + c) for c in names
    ).with_columns(
        (pl.col(TEXT + c) if schema[c] == pl.Utf8 else pl.col(c)).cast(pl.Float64, strict=False).alias(NUMBER + c)
        for c in names)


def _frame(batch: pa.RecordBatch | pa.Table, names: list[str]) -> tuple[pl.DataFrame, frozenset[str]]:
    """The batch as a polars frame, and which of ``names`` came dictionary-encoded (a Parquet
    source's text, :func:`aequum.flows.store.readers._parquet`). Such a column is decoded to plain
    text (its values are what the content hash and the quarantine read), and its stripped
    text and number (:func:`_prepare`) are computed on the dictionary's distinct values once
    and gathered by the rows' indices (polars' gather: a short string is copied as its 16-byte
    view). The values are those of the decoded text, and plain text as a CSV source's are.

    The stripped text was once kept a dictionary (a polars Categorical): every distinct value
    then entered polars' process-wide category table, which only grows (a census tract, a loan
    cost: nearly one value per row). At 1M generated LAR rows under the HMDA spec (31 source
    columns) this function took 2.9 CPU-s that way, 0.9 so; the staged rows are the same."""
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    coded = [c for c in dict.fromkeys(names)
             if pa.types.is_dictionary(table[c].type) and is_text(table[c].type.value_type)]
    if not coded:
        return pl.from_arrow(table), frozenset()
    derived: dict[str, pl.Series] = {}
    for c in coded:
        plain, text, number = [], [], []
        for chunk in table[c].chunks:
            values, rows = pl.Series(c, chunk.dictionary), pl.Series(chunk.indices)
            stripped = values.str.strip_chars()
            plain.append(values.gather(rows))
            # values without surrounding blanks (the usual case) are their own stripped text
            text.append(plain[-1] if stripped.equals(values) else stripped.gather(rows))
            number.append(stripped.cast(pl.Float64, strict=False).gather(rows))
        derived[c] = _joined(plain, c, pl.Utf8)
        derived[TEXT + c] = _joined(text, TEXT + c, pl.Utf8)
        derived[NUMBER + c] = _joined(number, NUMBER + c, pl.Float64)
    rest = pl.from_arrow(table.drop_columns(coded))
    assert isinstance(rest, pl.DataFrame)
    df = rest.with_columns(derived.values()) if rest.width else pl.DataFrame(list(derived.values()))
    order = [c for c in table.column_names] + [n for n in derived if n not in table.column_names]
    return df.select(order), frozenset(coded)


def _joined(parts: list[pl.Series], name: str, dtype: pl.DataType) -> pl.Series:
    """One series of a column's pieces (one per Arrow chunk), named ``name``."""
    if not parts:
        return pl.Series(name, [], dtype)
    return (parts[0] if len(parts) == 1 else pl.concat(parts, rechunk=True)).rename(name).cast(dtype)


def _membership(name: str, values: list) -> pl.Expr:
    """``col in values``, numerically when the column is numeric and the values are numbers.

    Never null: a value of another type (the text ``female`` or ``NA`` where the spec lists
    numbers) is simply not a member, so it falls to the spec's rule for values outside the
    declared sets instead of slipping through as a null."""
    numeric_values = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if numeric_values:  # "1.0" in a CSV and 1 in the spec are the same value
        member = _number(name).is_in([float(v) for v in values])
    else:
        member = _text(name).is_in([str(v) for v in values])
    return member.fill_null(False)


def _in_range(name: str, r) -> pl.Expr:
    """``col`` in the numeric range ``r`` (a protected attribute's protected_range /
    reference_range); never null: a value that is not a number is in no range."""
    value = _number(name)
    member = pl.lit(True)
    for bound, op in ((r.gt, value.__gt__), (r.ge, value.__ge__), (r.lt, value.__lt__), (r.le, value.__le__)):
        if bound is not None:
            member = member & op(bound)
    return member.fill_null(False)


@dataclass
class Check:
    field: str
    bad: pl.Expr
    reason: str


@dataclass
class BatchResult:
    good: pa.Table
    bad: pa.Table
    rows: int
    out_of_scope: int
    content_hash: int
    categories: dict[str, set[str]] = field(default_factory=dict)
    # per optional field (spec.pricing.fields), the kept records whose value was not a finite
    # number and is staged as null
    nulled: dict[str, int] = field(default_factory=dict)


def _feature_checks(f: Feature, dtype: pl.DataType) -> tuple[pl.Expr, list[Check]]:
    col = pl.col(f.name)
    missing = col.is_null() | (_text(f.name) == "") if dtype == pl.Utf8 else col.is_null()
    checks = [] if f.nullable else [Check(f.name, missing, "missing value")]
    if f.type == "numeric":
        value = _number(f.name)
        checks.append(Check(f.name, ~missing & value.is_null(), "not a number"))
        checks.append(Check(f.name, value.is_nan() | value.is_infinite(), "not a finite number"))
        if f.range is not None:
            lo, hi = f.range
            checks.append(Check(f.name, (value < lo) | (value > hi), f"outside range [{lo:g}, {hi:g}]"))
        return value.alias(f.name), checks
    text = _text(f.name)
    if dtype.is_float():
        # 1.0 read from Parquet stands for the category "1" in the spec.
        # (NaN, 1.5, infinities and whole numbers beyond 2^53 stay as they read: not a category)
        whole = (col == col.round(0)) & (col.abs() < 2.0 ** 53)
        text = pl.when(whole).then(col.cast(pl.Int64, strict=False).cast(pl.Utf8)).otherwise(text)
    allowed = f.order if f.type == "ordinal" else f.categories
    if allowed:
        values = [str(v) for v in allowed]
        what = "ordinal order" if f.type == "ordinal" else "categories"
        checks.append(Check(f.name, ~missing & ~text.is_in(values),
                            f"not in the spec's {what} {values[:8]}{' ...' if len(values) > 8 else ''}"))
    return pl.when(missing).then(None).otherwise(text).alias(f.name), checks


def _pricing(spec: AuditSpec, schema) -> tuple[list[pl.Expr], list[Check]]:
    """The staged pricing columns (``spec.pricing``: each field as a number, null where the
    source does not report it — a ``missing`` text such as the LAR's "NA" or "Exempt", an empty
    cell, a null or NaN), the decision column's recorded value as text (the originations are
    picked by it) and the lien column's as text; and, per field, the records whose reported
    value is not a finite number (a word in ``interest_rate``). A pricing field is an optional
    outcome that only the pricing engine reads: such a value is staged as null too and counted
    (:class:`BatchResult` ``nulled``), and the record is kept for every engine; quarantining
    the application dropped it from the denial analyses as well (337 applications in one file)."""
    p = spec.pricing
    derived = [_text(spec.decision.column).alias(spec.decision.column)]
    unusable = []
    for c in p.fields:
        value = _number(c)
        unreported = pl.col(c).is_null() | value.is_nan()
        if schema[c] == pl.Utf8 or schema[c] == pl.Categorical:
            unreported = pl.col(c).is_null() | (_text(c) == "") | _text(c).is_in([str(v) for v in p.missing])
        bad = ~unreported & (value.is_null() | value.is_infinite())
        unusable.append(Check(c, bad, "not a finite number: staged as null, the record kept"))
        derived.append(pl.when(unreported | bad).then(None).otherwise(value).cast(pl.Float64).alias(c))
    if p.lien is not None:
        derived.append(_text(p.lien).alias(p.lien))
    return derived, unusable


def _group(p) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """Membership of a protected attribute's protected and reference values, and the group
    column they give (1 protected, 0 reference, null neither)."""
    if p.by_range:
        in_p, in_r = _in_range(p.column, p.protected_range), _in_range(p.column, p.reference_range)
    else:
        in_p, in_r = _membership(p.column, p.protected_values), _membership(p.column, p.reference_values)
    group = (pl.when(in_p).then(pl.lit(1, pl.Int8)).when(in_r).then(pl.lit(0, pl.Int8))
             .otherwise(pl.lit(None, pl.Int8)).alias(group_column(p.name)))
    return in_p, in_r, group


def group_sizes(batches, spec: AuditSpec, units: list[list[str]], wanted: dict[str, tuple[int, int]]
                ) -> dict[str, tuple[int, int]]:
    """Protected and reference members of each unit (an attribute or an intersection, named
    ``a&b``) in a stream of source batches, read only until every unit has the sizes ``wanted``
    (so a large source costs one batch). Counted before validation: rows that staging will
    quarantine are included."""
    counts = {"&".join(u): [0, 0] for u in units}
    for batch in batches:
        columns = list(dict.fromkeys(p.column for p in spec.protected))  # per-value comparisons share one
        df, decoded = _frame(batch, columns)
        g = _prepare(df.lazy(), df.schema, columns, decoded).select(
            [_group(p)[2] for p in spec.protected]).collect()
        for u in units:
            cols = [g[group_column(a)] for a in u]
            counts["&".join(u)][0] += int(np.logical_and.reduce([(c == 1).fill_null(False).to_numpy() for c in cols]).sum())
            counts["&".join(u)][1] += int(np.logical_and.reduce([(c == 0).fill_null(False).to_numpy() for c in cols]).sum())
        if all(counts[k][0] >= need[0] and counts[k][1] >= need[1] for k, need in wanted.items()):
            break
    return {k: (v[0], v[1]) for k, v in counts.items()}


def _content_hash(df: pl.DataFrame, positional_ids: bool, row_offset: int) -> int:
    """Sum of row hashes (mod 2^64): independent of row order when records carry their own id,
    but with row numbers as ids (``id_column: null``) each row's position is hashed with it,
    so a reordered file is a different dataset (record "0" must stay row 0)."""
    if not df.height:
        return 0
    if positional_ids:
        df = df.with_row_index("_aequum_row", offset=row_offset)
    return int(np.sum(df.hash_rows(seed=0).to_numpy(), dtype=np.uint64))


def validate_batch(batch: pa.RecordBatch | pa.Table, spec: AuditSpec, row_offset: int) -> BatchResult:
    """Validate one batch of source rows (Definition of a well-formed record: the spec).

    ``row_offset`` is the 0-based source row number of the batch's first row.
    """
    # a proxied attribute's column (engines.proxy.stage) may be the proxy's, not the source's
    proxied = next((p for p in spec.protected if p.proxy is not None), None)
    names = list(dict.fromkeys([*spec.columns(), *([proxied.column] if proxied is not None else [])]))
    df, decoded = _frame(batch, names)
    _check_scalar(df.schema, names)
    n = df.height
    hashed = [*names, *(PROXY_COLUMNS if proxied is not None else [])]
    content_hash = _content_hash(df.select(hashed), spec.source.id_column is None, row_offset)
    schema = df.schema
    idc = spec.source.id_column
    if idc is None:
        id_text = pl.col("_src_row").cast(pl.Utf8)
        checks = []
    else:
        id_text = _text(idc)
        checks = [Check(idc, pl.col(idc).is_null() | (id_text == ""), "missing record id")]
    derived: list[pl.Expr] = [id_text.alias(ID), pl.col("_src_row").alias(ROW)]

    for p in spec.protected:
        in_p, in_r, group = _group(p)
        derived.append(group)
        earlier = spec.protected[:spec.protected.index(p)]
        expanded_before = p.of is not None and any(p.of in (q.name, q.of) for q in earlier)
        if p.unmapped == "reject" and not expanded_before:  # one check per expanded attribute
            known = in_p | in_r | _membership(p.column, p.others)
            checks.append(Check(p.column, ~known,
                                f"value maps to neither the protected nor the reference group of {p.of or p.name!r}"
                                + (f" (protected {p.protected_range.text()}, reference {p.reference_range.text()})"
                                   if p.by_range else "")))
        if p.column not in [q.column for q in earlier]:
            # once per column (several comparisons may read one: protected[].compare)
            checks.append(Check(p.column, pl.col(p.column).is_null(), "missing protected attribute"))
            if not p.by_range:  # a range attribute's raw numbers are not staged: its group is
                derived.append(_text(p.column).alias(p.column))

    if any(p.proxy is not None for p in spec.protected):  # added by the proxy step (engines.proxy.stage)
        derived += [pl.col(c) for c in PROXY_COLUMNS]

    for part, out in ((spec.decision, DECISION), (spec.label, LABEL)):
        if part is None:
            continue
        good_values = part.favourable if out == DECISION else part.positive
        fav = _membership(part.column, good_values)
        checks.append(Check(part.column, pl.col(part.column).is_null(), "missing value"))
        unfav_values = getattr(part, "unfavourable", None) if out == DECISION else getattr(part, "negative", None)
        if unfav_values:
            unfav = _membership(part.column, unfav_values)
            checks.append(Check(part.column, ~fav & ~unfav, "neither a favourable nor an unfavourable value"
                                if out == DECISION else "neither a positive nor a negative value"))
        derived.append(fav.cast(pl.Int8).alias(out))
    if spec.decision is not None and spec.decision.reasons is not None:
        derived += [_text(c).alias(c) for c in spec.decision.reasons.columns]  # codes, kept as text

    if spec.geography is not None:  # tract fields: "NA", empty or not a number stage as null
        for column, kind in spec.geography.staged().items():
            text = _text(column)
            derived.append((pl.when((text == "") | (text == "NA")).then(None).otherwise(text) if kind == "text"
                            else pl.when(_number(column).is_finite()).then(_number(column)).otherwise(None)).alias(column))

    categories: dict[str, set[str]] = {}
    for f in spec.features:
        expr, fchecks = _feature_checks(f, schema[f.name])
        derived.append(expr)
        checks.extend(fchecks)

    unusable: list[Check] = []
    if spec.pricing is not None:
        pricing, unusable = _pricing(spec, schema)
        derived += [e for e in pricing if e.meta.output_name() not in {d.meta.output_name() for d in derived}]

    if spec.decision is not None and spec.decision.out_of_scope:
        in_scope = ~_membership(spec.decision.column, spec.decision.out_of_scope).fill_null(False)
    else:
        in_scope = pl.lit(True)

    # Whether a row fails any check, for every row (a few bitmaps or'ed); which check fails
    # first (its index), only for the failing rows, which the quarantine lists (a minimum
    # over every check's index for every row took a tenth of validation's time).
    failing = pl.any_horizontal([c.bad.fill_null(False) for c in checks]) if checks else pl.lit(False)
    first = pl.min_horizontal([pl.when(c.bad.fill_null(False)).then(pl.lit(i, pl.Int32))
                               for i, c in enumerate(checks)])
    marked = _prepare(df.lazy(), schema, names, decoded).with_columns(
        pl.int_range(row_offset, row_offset + n, dtype=pl.Int64).alias("_src_row"),
    ).with_columns(failing.alias("_failing"), in_scope.alias("_in_scope"))
    # per optional field, whether a kept record's value was unusable: computed with the staged
    # rows and split off (a plan of its own re-evaluated every check of the batch)
    flags = [c.bad.fill_null(False).alias(f"_aequum_nulled:{i}") for i, c in enumerate(unusable)]
    good_lf = marked.filter(~pl.col("_failing") & pl.col("_in_scope")).select(*derived, *flags)
    bad_lf = marked.filter(pl.col("_failing") & pl.col("_in_scope")).with_columns(first.alias("_first")).select(
        pl.col("_src_row").alias("source_row"), id_text.alias("record_id"),
        pl.col("_first").replace_strict(list(range(len(checks))), [c.field for c in checks],
                                        return_dtype=pl.Utf8).alias("field"),
        pl.coalesce([pl.when(pl.col("_first") == i).then(pl.col(c.field).cast(pl.Utf8))
                     for i, c in enumerate(checks)]).alias("value"),
        pl.col("_first").replace_strict(list(range(len(checks))), [c.reason for c in checks],
                                        return_dtype=pl.Utf8).alias("reason"))
    good, bad = pl.collect_all([good_lf, bad_lf])
    nulled = {c.field: int(good[f"_aequum_nulled:{i}"].sum()) for i, c in enumerate(unusable)}
    good = good.drop([f"_aequum_nulled:{i}" for i in range(len(unusable))])
    for f in spec.features:
        if f.type == "categorical" and not f.categories:
            categories[f.name] = set(good[f.name].drop_nulls().unique().to_list())
    return BatchResult(good=good.to_arrow(), bad=bad.to_arrow().cast(QUARANTINE_SCHEMA), rows=n,
                       out_of_scope=n - good.height - bad.height, content_hash=content_hash,
                       categories=categories, nulled=nulled)
