"""The audit spec: good specs load, bad ones fail with the field and value named."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from aequum.engines.core.spec import SpecError, load_spec, parse_spec

REPO = Path(__file__).resolve().parents[1]

GOOD = {
    "name": "t",
    "source": {"kind": "csv", "path": "x.csv", "id_column": "id"},
    "protected": [{"name": "sex", "column": "sex", "protected_values": ["F"], "reference_values": ["M"]}],
    "decision": {"column": "y", "favourable": [1]},
    "features": [
        {"name": "income", "type": "numeric", "range": [0, 1e7]},
        {"name": "grade", "type": "ordinal", "order": ["C", "B", "A"]},
        {"name": "city", "type": "categorical", "categories": ["a", "b"]},
    ],
    "scm": {"equations": [{"target": "income", "parents": ["sex"]},
                          {"target": "grade", "parents": ["sex", "income"]}]},
    "engines": {"run": ["outcome", "cst"], "cst": {}},
}


def bad(path: str, value, message: str):
    """A copy of GOOD with one field set (dotted path, list indices as ints)."""
    spec = copy.deepcopy(GOOD)
    *head, last = path.split(".")
    node = spec
    for part in head:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is _DELETE:
        del node[int(last) if last.isdigit() else last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return pytest.param(spec, message, id=f"{path}={str(value)[:20]}")


_DELETE = object()


def test_good_spec_loads_with_defaults():
    spec = parse_spec(GOOD)
    assert spec.feature_names == ["income", "grade", "city"]
    assert spec.engines.cst.k == [15, 30, 50, 100]
    assert spec.columns() == ["id", "sex", "y", "income", "grade", "city"]
    assert spec.digest() == parse_spec(copy.deepcopy(GOOD)).digest()


@pytest.mark.parametrize("raw, message", [
    bad("source.kind", "excel", "source.kind"),
    bad("source.path", _DELETE, "needs source.path"),
    bad("source.delimiter", "||", "one character"),
    bad("protected", [], "protected"),
    bad("protected.0.reference_values", ["F"], "both protected and reference"),
    bad("features.0.type", "float", "features.0.type"),
    bad("features.1.order", _DELETE, "has no `order`"),
    bad("features.0.range", [5, 1], "low < high"),
    bad("features.2.categories", ["a", "a"], "duplicate values"),
    bad("features.0.recourse_weight", -1, "features.0.recourse_weight"),
    bad("features.0.mutability", "sometimes", "features.0.mutability"),
    bad("features.1.name", "income", "duplicate feature name"),
    bad("decision", _DELETE, "needs a `decision` column, a `model`"),
    bad("scm.equations.0.parents", ["nope"], "unknown parent(s) ['nope']"),
    bad("scm.equations.0.parents", ["grade"], "cycle"),
    bad("scm.equations.0.target", "zzz", "not a declared feature"),
    bad("engines.run", ["nonsense"], "engines.run"),
    bad("engines.cst.k", "many", "engines.cst.k"),
    bad("engines.cst.alpha", 0.9, "engines.cst.alpha"),
    bad("engines.cst.features", ["ghost"], "engines.cst.features: ['ghost']"),
    bad("engines.fgce", {"epsilon": -1}, "engines.fgce.epsilon"),
    bad("engines.fgce", {"nonsense": 1}, "engines.fgce.nonsense"),
    bad("engines.run", [], "engines.run"),
    bad("engines.run", ["cst", "cst"], "more than once"),
    bad("engines.nosuch", {}, "unknown section(s) ['nosuch']"),
    bad("name", "a b;drop", "name"),
    bad("unknown_section", 1, "unknown_section"),
    bad("features.0.name", "_id", "reserves"),
])
def test_bad_specs_name_the_field(raw, message):
    with pytest.raises(SpecError) as err:
        parse_spec(raw, where="test.yaml")
    assert message in str(err.value)
    assert "test.yaml" in str(err.value)


def test_cst_without_scm_is_refused():
    raw = copy.deepcopy(GOOD)
    del raw["scm"]
    with pytest.raises(SpecError, match="needs an `scm` section"):
        parse_spec(raw)


def test_linear_model_must_name_declared_features():
    raw = copy.deepcopy(GOOD)
    raw["model"] = {"kind": "linear", "features": ["income", "ghost"], "coefficients": {"income": 1},
                    "intercept": 0}
    with pytest.raises(SpecError, match=r"model.features: \['ghost'\]"):
        parse_spec(raw)


def test_malformed_yaml_and_non_mapping(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(f)
    f.write_text("- just\n- a list\n")
    with pytest.raises(SpecError, match="top level must be a mapping"):
        load_spec(f)
    with pytest.raises(SpecError, match="not found"):
        load_spec(tmp_path / "missing.yaml")


def test_hostile_identifiers_are_plain_strings():
    raw = copy.deepcopy(GOOD)
    raw["source"] = {"kind": "duckdb", "path": "w.duckdb", "table": 'x"; DROP TABLE audit.runs; --',
                     "id_column": "id"}
    spec = parse_spec(raw)
    assert spec.source.table.startswith('x"')


def test_query_must_be_one_select_by_the_parser():
    """The spec keeps the query as text; the reader's parser check decides (flows.store.readers)."""
    from aequum.flows.store.readers import SourceError, checked_query

    assert checked_query("SELECT * FROM t;") == "SELECT * FROM t"
    assert checked_query("FROM t WHERE a > 1") == "FROM t WHERE a > 1"
    assert checked_query("WITH a AS (SELECT 1) SELECT * FROM a")
    for bad_query in ("DELETE FROM t", "SELECT 1; SELECT 2", "SELECT * FROM (", "PRAGMA version",
                      "CALL pragma_version()", "SET memory_limit = '1TB'", ""):
        with pytest.raises(SourceError, match="source.query"):
            checked_query(bad_query)


@pytest.mark.parametrize("path", sorted((REPO / "data" / "specs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_specs_are_valid(path):
    spec = load_spec(path)
    assert spec.name


def test_engine_sections_come_from_the_registry():
    """Every registered engine has a section with its defaults; the core imports no engine."""
    from aequum.engines.registry import ENGINES

    spec = parse_spec(GOOD)
    for name in ENGINES:
        assert spec.engines.params(name) is getattr(spec.engines, name)
    with pytest.raises(KeyError, match="no engine named 'ghost'"):
        spec.engines.params("ghost")
    core_spec = (REPO / "engines" / "core" / "spec.py").read_text()
    # the core's own modules only (the geography section's model): no engine
    assert not re.search(r"aequum\.engines\.(?!core\.)", core_spec) and "import engines" not in core_spec
