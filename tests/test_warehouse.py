"""Warehouse: idempotent run writes, all-or-nothing transactions, identifier safety."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from aequum.flows.store.warehouse import Warehouse, load_sql, quote_ident, quote_qualified, staged_table

SCHEMA = pa.schema([("record_id", pa.string()), ("k", pa.int32()), ("delta_p", pa.float64())])


def rows(n, offset=0):
    return pa.table({"record_id": [str(i + offset) for i in range(n)], "k": [15] * n,
                     "delta_p": [0.1 * i for i in range(n)]}, schema=SCHEMA)


def count(wh, table, run_id):
    return wh.con.execute(f"SELECT count(*) FROM audit.{table} WHERE run_id = $r", {"r": run_id}).fetchall()[0][0]


def test_rewriting_a_run_replaces_its_rows(warehouse):
    warehouse.write_results("r1", {"cst_claims": (SCHEMA, rows(5))})
    warehouse.write_results("r2", {"cst_claims": (SCHEMA, rows(2))})
    warehouse.write_results("r1", {"cst_claims": (SCHEMA, rows(3, 100))})
    assert count(warehouse, "cst_claims", "r1") == 3
    assert count(warehouse, "cst_claims", "r2") == 2
    assert warehouse.result("cst_claims", "r1")["record_id"].to_pylist() == ["100", "101", "102"]


def test_rows_from_a_parquet_file_land_as_the_same_rows_from_arrow(warehouse, tmp_path):
    """The audit flow inserts the engines' spooled results from their Parquet files."""
    import pyarrow.parquet as pq

    table = rows(1000).take(pa.array(list(range(999, -1, -1))))  # order kept as written
    pq.write_table(table, tmp_path / "t.parquet")
    pq.write_table(rows(0), tmp_path / "empty.parquet")
    warehouse.ensure_result_table("cst_claims", SCHEMA)
    with warehouse.transaction():
        assert warehouse.insert_run_rows("cst_claims", "arrow", table) == 1000
        assert warehouse.insert_run_rows("cst_claims", "file", str(tmp_path / "t.parquet")) == 1000
        assert warehouse.insert_run_rows("cst_claims", "none", str(tmp_path / "empty.parquet")) == 0
    assert warehouse.result("cst_claims", "file").drop_columns("run_id").equals(
        warehouse.result("cst_claims", "arrow").drop_columns("run_id"))
    assert warehouse.result("cst_claims", "file")["record_id"][0].as_py() == "999"


def test_rows_from_many_parquet_files_land_in_file_order(warehouse, tmp_path):
    """A streamed table (CST's evidence) arrives as one file per piece and key: its rows land
    in the order of the files, each file's rows in their order; no file, no rows."""
    import pyarrow.parquet as pq

    n = 400_000  # several of DuckDB's row groups per file: read in parallel, inserted in order
    table = rows(n).take(pa.array(np.arange(n)[::-1]))
    cuts = [0, 1, 150_000, 150_000, 260_000, n - 1, n]  # an empty file among them
    paths = []
    for i, (s, e) in enumerate(zip(cuts, cuts[1:])):
        paths.append(str(tmp_path / f"{i}.parquet"))
        pq.write_table(table.slice(s, e - s), paths[-1])
    warehouse.ensure_result_table("cst_claims", SCHEMA)
    with warehouse.transaction():
        assert warehouse.insert_run_rows("cst_claims", "files", paths) == n
        assert warehouse.insert_run_rows("cst_claims", "none", []) == 0
    got = warehouse.con.sql("SELECT * EXCLUDE (run_id) FROM audit.cst_claims WHERE run_id = 'files' "
                            "ORDER BY rowid").to_arrow_table()
    assert got.equals(table.cast(got.schema))


def test_one_thread_inserts_the_same_rows_in_order_and_puts_the_setting_back(warehouse, tmp_path):
    """The audit writes its results with DuckDB on one thread (Warehouse.one_thread): the rows
    land as on several, in file order, and the thread setting is restored, after a failure too."""
    import pyarrow.parquet as pq

    def setting():
        return warehouse.con.execute("SELECT current_setting('threads')").fetchone()[0]

    warehouse.con.execute("SET threads = 3")
    n = 300_000
    table = rows(n).take(pa.array(np.arange(n)[::-1]))
    paths = [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]
    pq.write_table(table.slice(0, 100_000), paths[0])
    pq.write_table(table.slice(100_000), paths[1])
    warehouse.ensure_result_table("cst_claims", SCHEMA)
    with warehouse.one_thread(), warehouse.transaction():
        assert setting() == 1
        assert warehouse.insert_run_rows("cst_claims", "one", paths) == n
    assert setting() == 3
    with warehouse.transaction():
        warehouse.insert_run_rows("cst_claims", "three", paths)
    one, three = (warehouse.con.sql(f"SELECT * EXCLUDE (run_id) FROM audit.cst_claims WHERE run_id = '{r}' "
                                    "ORDER BY rowid").to_arrow_table() for r in ("one", "three"))
    assert one.equals(three) and one.equals(table.cast(one.schema))
    with pytest.raises(ZeroDivisionError), warehouse.one_thread():
        1 / 0
    assert setting() == 3


def test_a_failure_mid_write_leaves_the_warehouse_as_before(warehouse):
    warehouse.write_results("r1", {"cst_claims": (SCHEMA, rows(4)), "cst_summary": (SCHEMA, rows(1))})
    before = {t: warehouse.result(t).to_pylist() for t in ("cst_claims", "cst_summary")}
    wrong = pa.table({"record_id": ["x"], "k": ["not an int"], "delta_p": [0.0]})
    with pytest.raises(Exception):
        warehouse.write_results("r1", {"cst_claims": (SCHEMA, rows(7)), "cst_summary": (SCHEMA, wrong)})
    after = {t: warehouse.result(t).to_pylist() for t in ("cst_claims", "cst_summary")}
    assert after == before


def test_new_declared_columns_are_added(warehouse):
    warehouse.write_results("r1", {"cst_claims": (SCHEMA, rows(2))})
    wider = SCHEMA.append(pa.field("note", pa.string()))
    t = rows(1).append_column("note", pa.array(["hi"]))
    warehouse.write_results("r2", {"cst_claims": (wider, t)})
    assert warehouse.result("cst_claims", "r1")["note"].to_pylist() == [None, None]
    assert warehouse.result("cst_claims", "r2")["note"].to_pylist() == ["hi"]


@pytest.mark.parametrize("name", ['x"; DROP TABLE audit.runs; --', "Runs", "a b", "1abc", ""])
def test_result_table_names_are_checked(warehouse, name):
    with pytest.raises(ValueError):
        warehouse.write_results("r1", {name: (SCHEMA, rows(1))})
    assert "runs" in warehouse.table_names()


def test_identifier_quoting():
    assert quote_ident('a"b') == '"a""b"'
    assert quote_qualified("s.t") == '"s"."t"'
    assert quote_qualified('we"ird') == '"we""ird"'
    with pytest.raises(ValueError):
        quote_ident("a\x00b")
    with pytest.raises(ValueError):
        staged_table("'; DROP")


def test_run_bookkeeping(warehouse):
    warehouse.start_run("r1", "loan", "abc", "0.1", {"cst": {"k": [15]}})
    warehouse.record_engine("r1", "cst", "succeeded", 1.5, 4, {"cst_claims": 10}, None)
    warehouse.finish_run("r1", "succeeded", "0123456789abcdef", "10:ff", None)
    run = warehouse.run("r1")
    assert run["status"] == "succeeded" and run["dataset_version"] == "0123456789abcdef"
    assert warehouse.engine_status("r1")["cst"]["pieces"] == 4
    listed = warehouse.runs().to_pylist()
    assert listed[0]["run_id"] == "r1" and listed[0]["engines"] == "cst:succeeded"
    # starting the same run_id again resets it
    warehouse.start_run("r1", "loan", "abc", "0.1", {})
    assert warehouse.run("r1")["status"] == "running" and warehouse.engine_status("r1") == {}


def test_sql_files_all_parse():
    from aequum.flows.store.warehouse import SQL_DIR

    for f in sorted(SQL_DIR.rglob("*.sql")):
        assert load_sql(str(f.relative_to(SQL_DIR).with_suffix(""))), f


def test_read_only_open_of_a_missing_warehouse(tmp_path):
    from aequum.flows.store.warehouse import WarehouseError

    with pytest.raises(WarehouseError, match="no warehouse"):
        Warehouse(tmp_path / "none.duckdb", read_only=True)


def test_views_appear_once_their_tables_exist(warehouse):
    assert "outcome_trends" not in warehouse.create_views()
    from aequum.engines.outcome.engine import GAPS

    warehouse.write_results("r1", {"outcome_gaps": (GAPS, GAPS.empty_table())})
    assert "outcome_trends" in warehouse.create_views()


def test_memory_limit_is_checked(tmp_path):
    from aequum.flows.store.warehouse import WarehouseError

    with pytest.raises(WarehouseError, match="memory limit"):
        Warehouse(tmp_path / "w.duckdb", memory_limit="2GB'; DROP TABLE x; --")
    Warehouse(tmp_path / "w.duckdb", memory_limit="512MB").close()


def test_views_wait_for_columns_an_older_run_lacks(tmp_path):
    """A warehouse written before outcome_gaps had its interval columns still opens; the view
    that reads them appears once the engine writes its wider table."""
    from aequum.engines.outcome.engine import GAPS

    old = pa.schema([f for f in GAPS if f.name not in ("di_ci_low", "verdict")])
    with Warehouse(tmp_path / "wh.duckdb") as wh:
        wh.write_results("r0", {"outcome_gaps": (old, old.empty_table())})
    with Warehouse(tmp_path / "wh.duckdb") as wh:
        assert "outcome_trends" not in wh.create_views()
        wh.write_results("r1", {"outcome_gaps": (GAPS, GAPS.empty_table())})
        assert "outcome_trends" in wh.create_views()
