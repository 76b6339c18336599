"""AuditData: the staged records as engines see them."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from aequum.engines.core.data import AuditData, record_columns
from aequum.engines.core.spec import parse_spec

SPEC = parse_spec({
    "name": "d",
    "source": {"kind": "csv", "path": "x.csv", "id_column": "id"},
    "protected": [{"name": "sex", "column": "sex", "protected_values": ["F"], "reference_values": ["M"],
                   "unmapped": "exclude"}],
    "decision": {"column": "y", "favourable": [1]},
    "label": {"column": "repaid", "positive": [1]},
    "features": [
        {"name": "income", "type": "numeric", "nullable": True},
        {"name": "grade", "type": "ordinal", "order": ["C", "B", "A"]},
        {"name": "city", "type": "categorical"},
    ],
})

TABLE = pa.table({
    "_id": ["a", "b", "c"], "_row": pa.array([0, 1, 2], pa.int64()),
    "_g_sex": pa.array([1, 0, None], pa.int8()), "sex": ["F", "M", "Joint"],
    "_decision": pa.array([0, 1, 1], pa.int8()), "_label": pa.array([1, 1, 0], pa.int8()),
    "income": [10.0, None, 30.0], "grade": ["A", "C", "B"], "city": ["y", "x", "y"],
})


def test_masks_and_outcomes():
    d = AuditData(SPEC, TABLE, categories={"city": ["x", "y"]})
    assert d.groups["sex"].tolist() == [1, 0, -1]
    assert d.protected["sex"].tolist() == [True, False, False]
    assert d.reference["sex"].tolist() == [False, True, False]
    assert d.decision.tolist() == [0, 1, 1] and d.label.tolist() == [1, 1, 0]
    assert d.ids.tolist() == ["a", "b", "c"]


def test_feature_values_encode_ordinals_and_categories():
    d = AuditData(SPEC, TABLE, categories={"city": ["x", "y"]})
    X = d.feature_values()
    assert np.array_equal(X, np.array([[10, 2, 1], [np.nan, 0, 0], [30, 1, 1]]), equal_nan=True)
    assert d.levels("grade") == ["C", "B", "A"] and d.levels("income") is None


def test_missing_staged_columns_are_named_when_used():
    """A table holding only some staged columns (an engine reads only those it declares) works
    for what it holds; a column it lacks is named when first used."""
    d = AuditData(SPEC, TABLE.drop(["city", "_id"]), categories={"city": ["x", "y"]})
    assert d.groups["sex"].tolist() == [1, 0, -1] and d.column_values("income")[0] == 10.0
    with pytest.raises(ValueError, match="lacks column 'city'"):
        d.feature_values()
    with pytest.raises(ValueError, match="lacks column '_id'"):
        d.ids
    with pytest.raises(ValueError, match="lacks column '_decision'"):
        AuditData(SPEC, TABLE.drop(["_decision"])).decision


def test_record_columns():
    """The usual columns of an engine: ids and row numbers (unless not wanted), groups,
    decision, label and the features asked for (a protected attribute as its group column);
    with a model that decides, its inputs too."""
    assert record_columns(SPEC) == ["_id", "_row", "_g_sex", "_decision", "_label", "income", "grade", "city"]
    assert record_columns(SPEC, ["grade", "sex"], ids=False) == ["_g_sex", "_decision", "_label", "grade"]
    raw = SPEC.model_dump(mode="json")
    raw["model"] = {"kind": "linear", "features": ["income", "sex"], "use_for_decisions": True,
                    "coefficients": {"income": 1.0, "sex": -5.0}, "intercept": 0.0}
    assert record_columns(parse_spec(raw), [], ids=False) == ["_g_sex", "_decision", "_label", "income"]


def test_a_protected_attribute_can_be_a_model_input():
    """model.features may name a protected attribute: the model sees its group indicator
    (1 protected, 0 reference or neither); a table without group columns (counterfactuals)
    takes the factual records' groups."""
    raw = SPEC.model_dump(mode="json")
    raw["model"] = {"kind": "linear", "features": ["income", "sex"],
                    "coefficients": {"income": 1.0, "sex": -5.0}, "intercept": 0.0}
    spec = parse_spec(raw)
    d = AuditData(spec, TABLE, categories={"city": ["x", "y"]})
    assert np.array_equal(d.feature_values(["income", "sex"]),
                          np.array([[10, 1], [np.nan, 0], [30, 0]]), equal_nan=True)
    assert d.column_values("sex", table=TABLE.drop(["_g_sex"])).tolist() == [1.0, 0.0, 0.0]
    raw["model"].update(features=["income", "race"], coefficients={"income": 1.0, "race": 1.0})
    with pytest.raises(ValueError, match=r"model.features: \['race'\] are neither"):
        parse_spec(raw)


def test_id_array_gives_record_ids_as_arrow_strings():
    """CST's evidence takes ids as Arrow strings (no Python string per id): the same ids as
    record_ids, from Arrow ids (chunked or not) and from numpy ids, rows repeated and in any order."""
    from aequum.engines.core.data import id_array, record_ids

    rows = np.array([3, 0, 3, 2])
    ids = ["a", "01", "1", "zz"]
    for source in (pa.array(ids), pa.chunked_array([ids[:2], ids[2:]]), np.array(ids, object)):
        got = id_array(source, rows)
        assert got.type == pa.string() and got.to_pylist() == list(record_ids(source, rows)) == ["zz", "a", "zz", "1"]
    assert id_array(pa.array(ids), np.array([], np.int64)).to_pylist() == []
