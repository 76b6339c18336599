"""AuditData: the one view of a staged dataset version that every engine receives.

Staged records (written by the ingest flow) hold the spec's columns, already validated, plus
derived columns with fixed names (``STAGED_COLUMNS``):

``_id``        record id as text (unique)
``_row``       the record's row number in the source (0-based), for tracing back
``_g_<attr>``  int8 per protected attribute: 1 protected group, 0 reference group, null neither
``_decision``  int8, 1 = favourable (null when the spec has no decision column)
``_label``     int8, 1 = positive (null when the spec has no label)

Numeric features are DOUBLE in raw units; ordinal and categorical features are text in raw
values. ``feature_values`` turns them into the numeric matrix the engines work on.

An engine may be given only the staged columns it declares (``engines.core.engine``,
``columns``): a column is looked up when it is first used, and one that was not read is a
clear error naming it.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aequum.engines.core.spec import AuditSpec

ID, ROW, DECISION, LABEL = "_id", "_row", "_decision", "_label"


def is_text(dtype: pa.DataType) -> bool:
    """Whether an Arrow type holds text (Arrow's two string layouts)."""
    return pa.types.is_string(dtype) or pa.types.is_large_string(dtype)


def group_column(attribute: str) -> str:
    """The staged column holding the 0/1 group of a protected attribute."""
    return f"_g_{attribute}"


def record_columns(spec: AuditSpec, features: Iterable[str] | None = None, ids: bool = True) -> list[str]:
    """The staged columns an engine needs for :class:`AuditData`'s groups, decisions and labels
    (and the record ids and source row numbers unless ``ids=False``), with the given features (default: all of the spec's; a
    protected attribute's name as a model input is its group column). When the model makes the
    decisions (``model.use_for_decisions``) its inputs are included: ``decision`` needs them.
    Not included: the raw protected values and the reason codes."""
    names = spec.feature_names if features is None else list(features)
    if spec.model is not None and spec.model.use_for_decisions:
        names = [*names, *spec.model.features]
    protected = {p.name for p in spec.protected}
    wanted = [ID, ROW] if ids else []
    wanted += [group_column(p.name) for p in spec.protected]
    wanted += [DECISION] if spec.decision is not None else []
    wanted += [LABEL] if spec.label is not None else []
    for name in names:
        column = group_column(name) if name in protected and name not in spec.feature_names else name
        if column not in wanted:
            wanted.append(column)
    return wanted


@dataclass
class AuditData:
    """One dataset version, validated against its spec.

    Attributes
    ----------
    spec : the audit spec.
    table : the staged Arrow table (see module docstring for its columns).
    categories : per categorical feature, its categories in code order (spec's, or inferred at
        ingest and recorded with the dataset version).
    model : the audited model adapter (``engines.core.models.Model``) or None.
    counterfactuals : user-supplied counterfactual tables aligned to ``table`` row by row
        (same ``_id`` order, the spec's feature columns): one table, or a mapping from protected
        attribute (or ``a&b`` intersection) name to its table; or None.
    """

    spec: AuditSpec
    table: pa.Table
    categories: dict[str, list[str]] = field(default_factory=dict)
    model: Any = None
    counterfactuals: pa.Table | dict[str, pa.Table] | None = None

    def __len__(self) -> int:
        return self.table.num_rows

    def column(self, name: str, table: pa.Table | None = None) -> pa.ChunkedArray:
        """A staged column by name; a clear error when the table does not hold it (not staged,
        or not among the columns the engine declared)."""
        table = self.table if table is None else table
        if name not in table.column_names:
            raise ValueError(f"staged table lacks column {name!r} (it has {table.column_names[:12]}"
                             f"{' ...' if table.num_columns > 12 else ''})")
        return table[name]

    def let_go(self, columns: Iterable[str]) -> None:
        """Drop staged ``columns`` this view no longer needs (an engine holding their values
        elsewhere, e.g. in its feature matrix): their memory goes with them (CST at 10M HMDA
        records: its four features and the row numbers, 0.3 GB). The groups, decisions and
        labels are taken first (a model making the decisions reads the features); a later use
        of a dropped column is an error naming it."""
        _taken = self.groups, self.decision, self.label
        self.table = self.table.drop_columns([c for c in dict.fromkeys(columns) if c in self.table.column_names])

    @cached_property
    def ids(self) -> np.ndarray:
        """Record ids as a numpy array of str (object dtype)."""
        return self.column(ID).to_numpy(zero_copy_only=False)

    @cached_property
    def id_text(self) -> pa.Array:
        """Record ids as one Arrow string array: a few bytes per record, where ``ids`` holds a
        Python string each (~0.5 GB at 10M records). Take rows with :func:`record_ids`; sort
        by id as text with ``pc.sort_indices`` (stable; UTF-8 bytes order as code points)."""
        return one_array(self.column(ID)).cast(pa.string())

    @cached_property
    def groups(self) -> dict[str, np.ndarray]:
        """Per protected attribute: int8 array, 1 protected, 0 reference, -1 neither."""
        return {p.name: self.column(group_column(p.name)).fill_null(-1).to_numpy().astype(np.int8, copy=False)
                for p in self.spec.protected}

    @cached_property
    def protected(self) -> dict[str, np.ndarray]:
        """Per protected attribute: bool mask, True = member of the protected group."""
        return {name: g == 1 for name, g in self.groups.items()}

    @cached_property
    def reference(self) -> dict[str, np.ndarray]:
        """Per protected attribute: bool mask, True = member of the reference group."""
        return {name: g == 0 for name, g in self.groups.items()}

    @cached_property
    def decision(self) -> np.ndarray | None:
        """ŷ as int8 (1 = favourable): the model's if ``model.use_for_decisions``, else recorded."""
        m = self.spec.model
        if m is not None and m.use_for_decisions:
            if self.model is None:
                raise ValueError("spec says model.use_for_decisions but no model was built")
            return self.model.decide(self.feature_values(m.features)).astype(np.int8)
        if self.spec.decision is None:
            return None
        return self.column(DECISION).to_numpy().astype(np.int8, copy=False)

    @cached_property
    def label(self) -> np.ndarray | None:
        """Ground truth as int8 (1 = positive) or None."""
        if self.spec.label is None:
            return None
        return self.column(LABEL).to_numpy().astype(np.int8, copy=False)

    def scores(self) -> np.ndarray | None:
        """The model's score (margin / logit) per record, or None without a model."""
        if self.model is None:
            return None
        return self.model.score(self.feature_values(list(self.model.feature_names)))

    def feature_values(self, names: list[str] | None = None, table: pa.Table | None = None,
                       rows: np.ndarray | None = None) -> np.ndarray:
        """Numeric matrix (rows x features, float64) of raw values.

        numeric -> the value; ordinal -> rank 0..n-1 in the spec's ``order``; categorical ->
        integer code in ``categories`` order. ``table`` defaults to the staged table (pass the
        counterfactual table to encode it the same way). Nulls (nullable features) become NaN.
        ``rows``: those rows only, in that order (taken a column at a time, without the whole
        matrix first).
        """
        table = self.table if table is None else table
        names = self.spec.feature_names if names is None else list(names)
        out = np.empty((table.num_rows if rows is None else len(rows), len(names)), dtype=np.float64)
        for j, name in enumerate(names):
            values = self.column_values(name, table)
            out[:, j] = values if rows is None else values[rows]
        return out

    def column_values(self, name: str, table: pa.Table | None = None) -> np.ndarray:
        """One feature as float64 (see ``feature_values``). A protected attribute's name gives
        its group indicator as a model input: 1 protected, 0 reference or neither."""
        table = self.table if table is None else table
        if name in self.groups and name not in self.spec.feature_names:
            column = table[group_column(name)] if group_column(name) in table.column_names else None
            if column is None:  # e.g. a counterfactual table: the factual records' groups
                return np.maximum(self.groups[name], 0).astype(np.float64)
            return np.maximum(column.fill_null(-1).to_numpy().astype(np.int8), 0).astype(np.float64)
        feat = self.spec.feature(name)
        col = self.column(name, table)
        if feat.type == "numeric":  # a float64 column without nulls is used as it is
            return np.asarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), np.float64)
        values = feat.order if feat.type == "ordinal" else self.categories.get(name, feat.categories)
        if values is None:
            raise ValueError(f"categorical feature {name!r} has no categories recorded")
        value_set = pa.array([str(v) for v in values])
        if pa.types.is_dictionary(col.type):  # look up each distinct value once, not each record's text
            col = one_array(col)
            codes = pc.index_in(col.dictionary.cast(pa.string()), value_set=value_set).take(col.indices)
        else:
            codes = pc.index_in(col.cast(pa.string()), value_set=value_set)
        return np.asarray(codes.cast(pa.float64()).to_numpy(zero_copy_only=False), np.float64)  # null: NaN

    def levels(self, name: str) -> list[str] | None:
        """The ordered raw values of an ordinal/categorical feature (None for numeric)."""
        feat = self.spec.feature(name)
        if feat.type == "ordinal":
            return [str(v) for v in feat.order]
        if feat.type == "categorical":
            return [str(v) for v in self.categories.get(name, feat.categories or [])]
        return None


def one_array(column: pa.ChunkedArray) -> pa.Array:
    """A column as one array: a single chunk as it is (combining copies even one chunk: the
    ids took 93 MB at 10M records), several combined (dictionaries unified)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def id_array(ids: pa.Array | np.ndarray, rows: np.ndarray) -> pa.Array:
    """The ids of ``rows`` as an Arrow string array, taken without a Python string or a
    fixed-width numpy string per id (CST's evidence: 2.7M ids per piece at 10M HMDA records)."""
    if isinstance(ids, (pa.Array, pa.ChunkedArray)):
        taken = ids.take(pa.array(np.asarray(rows, np.int64)))
        taken = taken.combine_chunks() if isinstance(taken, pa.ChunkedArray) else taken
        return taken.cast(pa.string())
    return pa.array(np.asarray(ids)[rows].astype(str), pa.string())


def record_ids(ids: pa.Array | np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The ids of ``rows`` as str, from :attr:`AuditData.id_text` (or a numpy array of ids)."""
    if isinstance(ids, (pa.Array, pa.ChunkedArray)):
        return np.asarray(ids.take(pa.array(np.asarray(rows, np.int64))).to_numpy(zero_copy_only=False), str)
    return np.asarray(ids)[rows].astype(str)
