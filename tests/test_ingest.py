"""Ingest: readers, validation, quarantine, versioning, atomicity, hostile identifiers."""
from __future__ import annotations

import copy

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aequum.engines.core.spec import parse_spec
from aequum.engines.core.validation import SourceSchemaError
from aequum.flows.store.readers import SourceError, sniff_delimiter
from aequum.flows.store.staging import IngestError, stage

COLS = ["app id", 'sex"; DROP TABLE audit.runs; --', "income", "grade", "city", "y"]
SEX = COLS[1]


def spec_for(path, kind="csv", max_bad=0.9, **source):
    raw = {
        "name": "t",
        "source": {"kind": kind, "path": str(path), "id_column": "app id", **source},
        "protected": [{"name": "sex", "column": SEX, "protected_values": ["F"], "reference_values": ["M"]}],
        "decision": {"column": "y", "favourable": [1], "unfavourable": [0]},
        "features": [
            {"name": "income", "type": "numeric", "range": [0, 1000]},
            {"name": "grade", "type": "ordinal", "order": ["C", "B", "A"]},
            {"name": "city", "type": "categorical"},
        ],
        "ingest": {"max_bad_fraction": max_bad},
    }
    return parse_spec(raw)


GOOD_ROWS = [
    ["1", "F", "10", "A", "x", "1"],
    ["2", "M", "20.5", "B", "y", "0"],
    ["3", "F", "30", "C", "x", "0"],
    ["4", "M", "40", "A", "z", "1"],
]
BAD_ROWS = [
    (["5", "F", "abc", "A", "x", "1"], "income", "not a number"),
    (["6", "X", "10", "A", "x", "1"], SEX, "neither the protected nor the reference"),
    (["7", "M", "5000", "A", "x", "1"], "income", "outside range"),
    (["8", "M", "10", "Z", "x", "1"], "grade", "not in the spec's ordinal order"),
    (["9", "M", "10", "A", "x", "2"], "y", "neither a favourable nor an unfavourable"),
    (["", "M", "10", "A", "x", "1"], "app id", "missing record id"),
    (["10", "M", "", "A", "x", "1"], "income", "missing value"),
    (["2", "F", "10", "A", "x", "1"], "app id", "duplicate id (first seen at source row 1)"),
]


def write_csv(path, rows, delim=","):
    path.write_text("\n".join(delim.join(r) for r in [COLS, *rows]) + "\n")
    return path


def test_good_and_bad_rows_are_split_with_reasons(tmp_path, warehouse):
    src = write_csv(tmp_path / "d.csv", GOOD_ROWS + [r for r, _, _ in BAD_ROWS])
    ref = stage(spec_for(src), tmp_path, warehouse, tmp_path / "lake")
    assert (ref.rows_read, ref.rows_staged, ref.rows_quarantined) == (12, 4, 8)
    q = warehouse.con.execute("SELECT source_row, field, value, reason FROM audit.quarantine "
                              "ORDER BY source_row").fetchall()
    assert len(q) == len(BAD_ROWS)
    for (row, field, value, reason), (raw, want_field, want_reason) in zip(q, BAD_ROWS):
        assert field == want_field and want_reason in reason, (row, field, reason)
    staged = warehouse.staged(ref.version)
    assert staged["_id"].to_pylist() == ["1", "2", "3", "4"]
    assert staged["_g_sex"].to_pylist() == [1, 0, 1, 0]
    assert staged["_decision"].to_pylist() == [1, 0, 0, 1]
    assert staged["income"].to_pylist() == [10.0, 20.5, 30.0, 40.0]
    assert ref.categories == {"city": ["x", "y", "z"]}
    parts = sorted(p.relative_to(ref.lake_path).parts[0] for p in tmp_path.joinpath("lake").rglob("*.parquet"))
    assert parts == ["_g_sex=0", "_g_sex=0", "_g_sex=1", "_g_sex=1"]


def test_reingest_reuses_the_version_and_writes_nothing_twice(tmp_path, warehouse):
    src = write_csv(tmp_path / "d.csv", GOOD_ROWS + [BAD_ROWS[0][0]])
    spec = spec_for(src)
    first = stage(spec, tmp_path, warehouse, tmp_path / "lake")
    again = stage(spec, tmp_path, warehouse, tmp_path / "lake")
    assert again.reused and again.version == first.version
    assert warehouse.con.execute("SELECT count(*) FROM audit.datasets").fetchall()[0][0] == 1
    assert warehouse.con.execute("SELECT count(*) FROM audit.quarantine").fetchall()[0][0] == 1
    tables = warehouse.con.execute("SELECT table_name FROM information_schema.tables "
                                   "WHERE table_schema = 'staging'").fetchall()
    assert tables == [(f"d_{first.version}",)]


def test_row_order_does_not_change_the_version(tmp_path, warehouse):
    a = stage(spec_for(write_csv(tmp_path / "a.csv", GOOD_ROWS)), tmp_path, warehouse, tmp_path / "l")
    b = stage(spec_for(write_csv(tmp_path / "b.csv", GOOD_ROWS[::-1])), tmp_path, warehouse, tmp_path / "l")
    assert a.version == b.version and b.reused


def test_too_many_bad_rows_fail_and_stage_nothing(tmp_path, warehouse):
    src = write_csv(tmp_path / "d.csv", GOOD_ROWS[:1] + [r for r, _, _ in BAD_ROWS[:5]])
    with pytest.raises(IngestError) as err:
        stage(spec_for(src, max_bad=0.5), tmp_path, warehouse, tmp_path / "lake")
    msg = str(err.value)
    assert "5 of 6 in-scope rows" in msg and "max_bad_fraction=0.5" in msg and "'income'" in msg
    assert warehouse.con.execute("SELECT count(*) FROM audit.datasets").fetchall()[0][0] == 0
    assert warehouse.con.execute("SELECT count(*) FROM information_schema.tables "
                                 "WHERE table_schema = 'staging'").fetchall()[0][0] == 0
    assert not list((tmp_path / "lake").rglob("*.parquet"))
    # the bad rows stay inspectable
    assert warehouse.con.execute("SELECT count(*) FROM audit.quarantine").fetchall()[0][0] == 5


def test_missing_column_is_named(tmp_path, warehouse):
    src = tmp_path / "d.csv"
    src.write_text("app id,income\n1,2\n")
    with pytest.raises(SourceSchemaError, match=r"'sex\"; DROP TABLE audit.runs; --'.*'y'"):
        stage(spec_for(src), tmp_path, warehouse, tmp_path / "lake")


def test_empty_source_and_missing_file(tmp_path, warehouse):
    with pytest.raises(SourceError, match="not found"):
        stage(spec_for(tmp_path / "nope.csv"), tmp_path, warehouse, tmp_path / "lake")
    empty = write_csv(tmp_path / "e.csv", [])
    with pytest.raises(IngestError, match="has no rows"):
        stage(spec_for(empty), tmp_path, warehouse, tmp_path / "lake")


def test_semicolon_delimiter_is_sniffed(tmp_path):
    (tmp_path / "s.csv").write_text("a;b;c\n1;2;3\n")
    assert sniff_delimiter(tmp_path / "s.csv") == ";"


@pytest.mark.parametrize("delim", [",", "|", "\t"])
def test_delimiters_are_detected(tmp_path, warehouse, delim):
    src = write_csv(tmp_path / "d.csv", GOOD_ROWS, delim)
    assert sniff_delimiter(src) == delim
    assert stage(spec_for(src), tmp_path, warehouse, tmp_path / "lake").rows_staged == 4


def _arrow_rows():
    cols = list(zip(*GOOD_ROWS))
    return pa.table({
        "app id": pa.array([int(v) for v in cols[0]]), SEX: pa.array(cols[1]),
        "income": pa.array([float(v) for v in cols[2]]), "grade": pa.array(cols[3]),
        "city": pa.array(cols[4]), "y": pa.array([int(v) for v in cols[5]]),
    })


def test_parquet_source_with_typed_columns(tmp_path, warehouse):
    pq.write_table(_arrow_rows(), tmp_path / "d.parquet")
    ref = stage(spec_for(tmp_path / "d.parquet", kind="parquet"), tmp_path, warehouse, tmp_path / "lake")
    assert ref.rows_staged == 4
    assert warehouse.staged(ref.version)["_decision"].to_pylist() == [1, 0, 0, 1]


def test_floats_that_are_no_whole_category_are_quarantined(tmp_path, warehouse):
    """A Parquet float column holding categories: 1.0 stands for "1"; NaN, 1.5, infinities and a
    whole number too large for an integer are values outside the categories, not a crash."""
    raw = spec_for(tmp_path / "d.parquet", kind="parquet").model_dump(mode="json")
    raw["features"][2] = {"name": "city", "type": "categorical", "categories": ["1", "2"]}
    spec = parse_spec(raw)
    odd = [float("nan"), 1.5, 1e30, float("inf"), -float("inf")]
    cities = [1.0, 2.0, *odd]
    n = len(cities)
    table = pa.table({"app id": pa.array(range(n)), SEX: pa.array(["F", "M"] * (n // 2) + ["F"] * (n % 2)),
                      "income": pa.array([10.0] * n), "grade": pa.array(["A"] * n),
                      "city": pa.array(cities, pa.float64()), "y": pa.array([1, 0] * (n // 2) + [1] * (n % 2))})
    pq.write_table(table, tmp_path / "d.parquet")
    ref = stage(spec, tmp_path, warehouse, tmp_path / "lake")
    assert warehouse.staged(ref.version)["city"].to_pylist() == ["1", "2"]
    bad = warehouse.con.execute("SELECT source_row, field, reason FROM audit.quarantine ORDER BY source_row").fetchall()
    assert [r[0] for r in bad] == list(range(2, n)) and {r[1] for r in bad} == {"city"}
    assert all("not in the spec's categories" in r[2] for r in bad)


def test_duckdb_table_with_hostile_name_and_query(tmp_path, warehouse):
    db = tmp_path / "src.duckdb"
    hostile = 'loans"; DROP TABLE x; --'
    with duckdb.connect(str(db)) as con:
        rows = _arrow_rows()
        con.register("rows_in", rows)
        con.execute(f'CREATE TABLE "{hostile.replace(chr(34), chr(34) * 2)}" AS SELECT * FROM rows_in')
        con.execute("CREATE TABLE x AS SELECT 1 AS keep")
    spec = spec_for(db, kind="duckdb", table=hostile)
    assert stage(spec, tmp_path, warehouse, tmp_path / "lake").rows_staged == 4
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT keep FROM x").fetchall()[0] == (1,)
    q = spec_for(db, kind="duckdb", query=f"SELECT * FROM \"{hostile.replace(chr(34), chr(34) * 2)}\" WHERE income > 15")
    assert stage(q, tmp_path, warehouse, tmp_path / "lake").rows_staged == 3
    smuggled = spec_for(tmp_path / "w.duckdb", kind="duckdb", query="SELECT * FROM x; DROP TABLE x")
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        con.execute("CREATE TABLE x AS SELECT 1 AS keep")
    with pytest.raises(SourceError, match="exactly one SELECT statement, got 2"):
        stage(smuggled, tmp_path, warehouse, tmp_path / "lake")
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        assert con.execute("SELECT keep FROM x").fetchall() == [(1,)]


def _bytes(*paths):
    return [p.read_bytes() for p in paths]


@pytest.mark.parametrize("query, message", [
    # escapes a wrapping subquery, then overwrites the warehouse file with COPY
    ("SELECT * FROM decisions) AS t; COPY (SELECT 1) TO '{warehouse}' (FORMAT csv); "
     "SELECT * FROM (SELECT * FROM decisions", "not a valid SQL query"),
    ("SELECT * FROM decisions; ATTACH '{other}' AS o (READ_WRITE); DROP TABLE o.precious",
     "exactly one SELECT statement, got 3"),
    ("COPY (SELECT 1) TO '{warehouse}' (FORMAT csv)", "got a COPY statement"),
    ("ATTACH '{other}' AS o (READ_WRITE)", "got a ATTACH statement"),
    # one SELECT, but reaching outside the source database: refused by the locked connection
    ("SELECT * FROM read_csv('{other}')", "cannot read query"),
    ("WITH d AS (DELETE FROM decisions RETURNING *) SELECT * FROM d", "must only read: it holds DELETE"),
])
def test_a_source_query_cannot_write_or_reach_other_files(tmp_path, query, message):
    """A DuckDB source query is exactly one SELECT (by the parser) run on a read-only, locked
    connection with no file access: the warehouse, the source and a second database stay
    byte-for-byte as they were."""
    from aequum.flows.store.warehouse import Warehouse

    src, other, wh_path = tmp_path / "src.duckdb", tmp_path / "other.duckdb", tmp_path / "wh.duckdb"
    with duckdb.connect(str(src)) as con:
        con.register("rows_in", _arrow_rows())
        con.execute("CREATE TABLE decisions AS SELECT * FROM rows_in")
    with duckdb.connect(str(other)) as con:
        con.execute("CREATE TABLE precious AS SELECT 42 AS answer")
    Warehouse(wh_path).close()
    before = _bytes(src, other, wh_path)
    spec = spec_for(src, kind="duckdb", query=query.format(warehouse=wh_path, other=other))
    with Warehouse(wh_path) as wh, pytest.raises(SourceError, match=message):
        stage(spec, tmp_path, wh, tmp_path / "lake")
    # the warehouse may only have been opened and closed: same tables, same contents
    with duckdb.connect(str(wh_path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM audit.datasets").fetchall() == [(0,)]
        assert con.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = "
                           "'staging'").fetchall() == [(0,)]
    assert _bytes(src, other) == before[:2]


def test_unmapped_protected_values_can_be_excluded(tmp_path, warehouse):
    src = write_csv(tmp_path / "d.csv", GOOD_ROWS + [["11", "Joint", "10", "A", "x", "1"]])
    spec = spec_for(src)
    raw = spec.model_dump(mode="json")
    raw["protected"][0]["unmapped"] = "exclude"
    ref = stage(parse_spec(copy.deepcopy(raw)), tmp_path, warehouse, tmp_path / "lake")
    assert ref.rows_quarantined == 0
    assert warehouse.staged(ref.version)["_g_sex"].to_pylist() == [1, 0, 1, 0, None]


def test_out_of_scope_decisions_are_skipped_not_quarantined(tmp_path, warehouse):
    src = write_csv(tmp_path / "d.csv", GOOD_ROWS + [["12", "F", "10", "A", "x", "4"]])
    raw = spec_for(src).model_dump(mode="json")
    raw["decision"]["out_of_scope"] = [4]
    ref = stage(parse_spec(raw), tmp_path, warehouse, tmp_path / "lake")
    assert (ref.rows_read, ref.rows_staged, ref.rows_quarantined, ref.rows_out_of_scope) == (5, 4, 0, 1)
