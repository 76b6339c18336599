"""The proxy step of staging: each source batch, before it is validated, gets the BISG
probabilities of its records and, where race was not recorded, the inferred race in the
attribute's column (``engines.core.proxy_spec.Proxy``; docs/proxies.md).

Staged columns (besides the attribute's column, filled):

``p_white`` ... ``p_other``  the five posterior probabilities (DOUBLE) of each record the proxy
                             filled; null where race was recorded (or neither input was found)
``_proxy_surname``           the surname is on the Census list (null where race was recorded)
``_proxy_geography``         the geography is in the composition table (likewise)
``_proxy_inferred``          int8: 1 assigned a race (largest probability >= threshold), 0 below
                             the threshold or without a proxy, null where race was recorded
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa

from aequum.engines.core.proxy_spec import BELOW_THRESHOLD, NO_PROXY, Proxy
from aequum.engines.core.validation import SourceSchemaError
from aequum.engines.proxy.bisg import GEOGRAPHY_FOUND, SURNAME_FOUND, assign, bisg_probabilities
from aequum.engines.proxy.census import PROB_COLUMNS, composition_tables

INFERRED = "_proxy_inferred"
_SURNAME = "_proxy_surname_text"


@dataclass(frozen=True)
class ProxyInputs:
    """What a proxy reads besides the source: its names file (id as text, surname) and the
    geography's composition, each read once per staging."""

    names: pl.DataFrame | None = None
    composition: pl.DataFrame | None = None


def _read(path: Path, what: str) -> pl.DataFrame:
    """A CSV (every column as text: ids and codes keep their leading zeros) or Parquet file; a
    missing or unreadable one is a :class:`SourceSchemaError` naming the field."""
    if not path.is_file():
        raise SourceSchemaError(f"{what}: no file {path}")
    parquet = path.suffix.lower() in (".parquet", ".pq")
    try:
        return pl.read_parquet(path) if parquet else pl.read_csv(path, infer_schema_length=0)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise SourceSchemaError(f"{what}: {path} cannot be read as {'Parquet' if parquet else 'CSV'}: "
                                f"{str(exc).splitlines()[0]}") from None


def load_inputs(proxy: Proxy, spec_dir: Path) -> ProxyInputs:
    """Read the proxy's names file and composition (paths relative to the spec's folder)."""
    names = composition = None
    if proxy.names is not None:
        raw = _read(Path(spec_dir) / proxy.names.path, "proxy.names.path")
        for c in (proxy.names.id_column, proxy.names.surname):
            if c not in raw.columns:
                raise SourceSchemaError(f"proxy.names: {proxy.names.path} has no column {c!r} "
                                        f"(it has {raw.columns[:8]})")
        names = raw.select(pl.col(proxy.names.id_column).cast(pl.Utf8).str.strip_chars().alias("_proxy_id"),
                           pl.col(proxy.names.surname).cast(pl.Utf8).alias(_SURNAME)).unique("_proxy_id", keep="first")
    if proxy.composition is not None:
        composition = _read(Path(spec_dir) / proxy.composition.path, "proxy.composition.path")
        try:  # its columns checked now, not at the first batch
            composition_tables(composition, proxy.composition.geography_column)
        except ValueError as exc:
            raise SourceSchemaError(str(exc)) from None
    return ProxyInputs(names, composition)


def proxy_batch(batch: pa.RecordBatch | pa.Table, column: str, proxy: Proxy, id_column: str | None,
                row_offset: int, inputs: ProxyInputs) -> pa.Table:
    """The batch with the proxy's columns (module docstring) and ``column`` filled where race
    was not recorded. Rows keep their order; a pure function of the batch and the inputs."""
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    read = {proxy.surname, proxy.geography_column, column, *([id_column] if id_column else [])}
    for i, field in enumerate(table.schema):  # the columns it reads as plain text, not dictionaries
        if field.name in read and pa.types.is_dictionary(field.type):
            table = table.set_column(i, field.name, table[field.name].cast(field.type.value_type))
    df = pl.from_arrow(table)
    if not isinstance(df, pl.DataFrame):
        df = df.to_frame()
    surname = proxy.surname
    if inputs.names is not None:
        ids = (pl.col(id_column).cast(pl.Utf8).str.strip_chars() if id_column is not None
               else pl.int_range(row_offset, row_offset + df.height, dtype=pl.Int64).cast(pl.Utf8))
        df = (df.with_row_index("_proxy_n").with_columns(ids.alias("_proxy_id"))
              .join(inputs.names, on="_proxy_id", how="left").sort("_proxy_n").drop("_proxy_n", "_proxy_id"))
        surname = _SURNAME
    key = proxy.composition.geography_column if proxy.composition is not None else "geography"
    lf = bisg_probabilities(df, surname, proxy.geography_column, proxy.geography, inputs.composition, key)
    if proxy.recorded:
        text = pl.col(column).cast(pl.Utf8).str.strip_chars()
        missing = text.is_null() | (text == "") | text.is_in([str(v).strip() for v in proxy.fill])
        recorded_text = pl.col(column).cast(pl.Utf8)
    else:
        missing, recorded_text = pl.lit(True), pl.lit(None, pl.Utf8)
    race = assign(proxy.threshold)
    label = (race.replace_strict(list(proxy.values), list(proxy.values.values()), default=None, return_dtype=pl.Utf8))
    has_proxy = pl.col(PROB_COLUMNS[0]).is_not_null()
    inferred = (pl.when(race.is_not_null()).then(label)
                .when(has_proxy).then(pl.lit(BELOW_THRESHOLD)).otherwise(pl.lit(NO_PROXY)))
    out = lf.with_columns(
        pl.when(missing).then(inferred).otherwise(recorded_text).alias(column),
        *[pl.when(missing).then(pl.col(c)).alias(c) for c in (*PROB_COLUMNS, SURNAME_FOUND, GEOGRAPHY_FOUND)],
        pl.when(missing).then(race.is_not_null().cast(pl.Int8)).alias(INFERRED))
    drop = [_SURNAME] if inputs.names is not None else []
    return out.drop(drop).collect().to_arrow()
