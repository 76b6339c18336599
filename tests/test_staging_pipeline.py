"""Staging's pipeline: the CSV header read without DuckDB's sniffer, batches regrouped, and
reading / validating / storing overlapped on threads without changing what is staged."""
from __future__ import annotations

import threading

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aequum.engines.core import validation
from aequum.flows.store import staging
from aequum.flows.store.lake_reading import load_lake
from aequum.flows.store.readers import SourceError, header_names, open_source, read_ahead
from aequum.flows.store.staging import stage, write_behind
from test_ingest import BAD_ROWS, GOOD_ROWS, spec_for, write_csv

HEADERS = ["a,,c", "x,x,x", ",c0,c1,c2,c3,c4,c5,c6,c7,c8,c9,c10", " a , b ,c", "a,a,a_1", "a,a_1,a",
           "a,a,a_1,a_1,a", ",,", '"q,1","say ""hi""",z', "\ufeffa,b", '"two\nlines",b']


@pytest.mark.parametrize("header", HEADERS)
def test_header_names_are_the_ones_duckdbs_sniffer_gives(tmp_path, header):
    """Trimmed, empty and repeated names are named as DuckDB's own CSV reader names them, so
    a spec written against DuckDB's names still finds its columns."""
    import csv

    fields = len(next(csv.reader([header.replace("\n", " ")])))
    path = tmp_path / "h.csv"
    path.write_text(header + "\n" + ",".join(["1"] * fields) + "\n", encoding="utf-8")
    sniffed = duckdb.connect().read_csv(str(path), all_varchar=True, header=True, delimiter=",",
                                        quotechar='"').columns
    assert header_names([path], ",") == sniffed


def test_files_of_one_source_must_share_their_header(tmp_path, warehouse):
    write_csv(tmp_path / "a.csv", GOOD_ROWS[:2])
    other = tmp_path / "b.csv"
    other.write_text("y,app id\n1,9\n")
    with pytest.raises(SourceError, match=r"b\.csv has another header line than .*a\.csv"):
        stage(spec_for(tmp_path / "*.csv"), tmp_path, warehouse, tmp_path / "lake")


@pytest.mark.parametrize("extra", [",surplus", None])
def test_a_row_with_more_or_fewer_fields_than_the_header_names_its_line(tmp_path, warehouse, extra):
    """Without the sniffer a ragged row is still an error naming its line (a shifted row
    would otherwise put values under the wrong columns), and nothing is staged."""
    src = write_csv(tmp_path / "d.csv", GOOD_ROWS)
    lines = src.read_text().splitlines()
    lines[3] = lines[3] + extra if extra else lines[3].rsplit(",", 1)[0]
    src.write_text("\n".join(lines) + "\n")
    with pytest.raises(SourceError, match=r"d\.csv.*Line: 4"):
        stage(spec_for(src), tmp_path, warehouse, tmp_path / "lake")
    assert warehouse.con.execute("SELECT count(*) FROM information_schema.tables "
                                 "WHERE table_schema = 'staging'").fetchall() == [(0,)]
    assert warehouse.con.execute("SELECT count(*) FROM audit.datasets").fetchall() == [(0,)]


def test_batches_of_any_size_stage_the_same_records(tmp_path, warehouse):
    """Regrouping (3 rows a batch here, across DuckDB's chunks) and the overlapped threads
    change neither the version, nor the quarantine's row numbers, nor the staged rows."""
    src = write_csv(tmp_path / "d.csv", GOOD_ROWS + [r for r, _, _ in BAD_ROWS] + GOOD_ROWS[:1])
    whole = stage(spec_for(src), tmp_path, warehouse, tmp_path / "lake")
    q_whole = warehouse.con.execute("SELECT source_row, field, reason FROM audit.quarantine "
                                    "ORDER BY source_row").fetchall()
    staged_whole = warehouse.staged(whole.version)
    warehouse.con.execute("DELETE FROM audit.quarantine")
    warehouse.con.execute(f"DROP TABLE {whole.staged_table}")  # the version is staged again
    small = stage(spec_for(src), tmp_path, warehouse, tmp_path / "lake", batch_rows=3)
    assert not small.reused and small.version == whole.version
    assert (small.rows_read, small.rows_staged, small.rows_quarantined) == (13, 4, 9)
    assert warehouse.con.execute("SELECT source_row, field, reason FROM audit.quarantine "
                                 "ORDER BY source_row").fetchall() == q_whole
    assert warehouse.staged(small.version).equals(staged_whole)
    # the lake, written batch by batch as they came, holds the same records (the duplicate id
    # among the bad rows is not there: that lake is written again from the staged table)
    lake = load_lake(small.lake_path)
    assert {c: lake[c].to_pylist() for c in lake.column_names} == staged_whole.to_pydict()


def test_the_lake_holds_the_staged_records_in_any_batch_size(tmp_path, warehouse):
    """No duplicate ids: the lake is the one written as the batches came, each file a row
    group per batch, and it holds exactly the staged records."""
    many = [[str(100 * k + int(r[0])), *r[1:]] for k in range(4) for r in GOOD_ROWS]  # ids unique
    src = write_csv(tmp_path / "d.csv", many + [r for r, _, _ in BAD_ROWS[:-1]])
    ref = stage(spec_for(src), tmp_path, warehouse, tmp_path / "lake", batch_rows=2)
    lake = load_lake(ref.lake_path)
    staged = warehouse.staged(ref.version)
    assert {c: lake[c].to_pylist() for c in lake.column_names} == staged.to_pydict()
    assert max(pq.ParquetFile(f).metadata.num_row_groups for f in Path(ref.lake_path).rglob("*.parquet")) > 1


def _table_sql(warehouse, table: str) -> str:
    schema, name = table.split(".")
    return warehouse.con.execute("SELECT sql FROM duckdb_tables() WHERE schema_name = $s AND table_name = $t",
                                 {"s": schema, "t": name}).fetchall()[0][0]


def test_row_number_ids_are_computed_from_the_row_not_stored_again(tmp_path, warehouse):
    """With ``id_column: null`` the staged table's ``_id`` is a virtual column, the text of
    ``_row``: it reads as the ids validation gives (and the lake holds), through every batch's
    insert; a source with its own ids stores them (they are not row numbers)."""
    src = write_csv(tmp_path / "d.csv", GOOD_ROWS * 3 + [r for r, _, _ in BAD_ROWS[:3]] + GOOD_ROWS)
    ref = stage(spec_for(src, id_column=None), tmp_path, warehouse, tmp_path / "lake", batch_rows=4)
    staged = warehouse.staged(ref.version)
    assert staged.num_rows == ref.rows_staged == 16
    assert staged["_id"].to_pylist() == [str(r) for r in staged["_row"].to_pylist()]
    assert staged["_id"].to_pylist()[12:] == ["15", "16", "17", "18"]  # after the 3 quarantined rows
    assert "GENERATED ALWAYS AS" in _table_sql(warehouse, ref.staged_table)
    lake = load_lake(ref.lake_path)
    assert {c: lake[c].to_pylist() for c in lake.column_names} == staged.to_pydict()
    own = stage(spec_for(src, max_bad=0.9), tmp_path, warehouse, tmp_path / "lake", batch_rows=4)
    assert "GENERATED" not in _table_sql(warehouse, own.staged_table)
    assert warehouse.staged(own.version)["_id"].to_pylist()[:4] == ["1", "2", "3", "4"]


def test_a_csv_stream_comes_in_batches_of_the_rows_asked_for(tmp_path):
    src = write_csv(tmp_path / "d.csv", GOOD_ROWS * 3)
    with open_source(spec_for(src).source, tmp_path, batch_rows=5) as stream:
        sizes = [b.num_rows for b in stream.batches]
    assert sizes == [5, 5, 2]


def test_read_ahead_keeps_the_order_and_raises_where_the_error_was():
    def items():
        yield from range(5)
        raise SourceError("broken at item 5")

    seen = []
    with pytest.raises(SourceError, match="broken at item 5"), read_ahead(items()) as got:
        for item in got:
            seen.append(item)
    assert seen == [0, 1, 2, 3, 4]


def test_read_ahead_stops_its_thread_when_the_caller_leaves_early():
    produced = []

    def endless():
        n = 0
        while True:
            produced.append(n)
            yield n
            n += 1

    before = threading.active_count()
    with read_ahead(endless()) as got:
        assert next(got) == 0
    assert threading.active_count() == before
    assert len(produced) <= 4  # one taken, at most two waiting, one being read


def test_write_behind_stores_in_order_and_raises_the_first_failure():
    stored = []

    def store(t):
        if t.num_rows == 2:
            raise ValueError("cannot store the table of 2 rows")
        stored.append(t.num_rows)

    with write_behind(store) as hand_over:
        for n in (1, 3, 4):
            hand_over(pa.table({"x": list(range(n))}))
    assert stored == [1, 3, 4]
    stored.clear()
    with pytest.raises(ValueError, match="table of 2 rows"), write_behind(store) as hand_over:
        for n in (1, 2, 3, 4):
            hand_over(pa.table({"x": list(range(n))}))
    assert stored == [1]  # nothing is stored after the failure


def test_a_failed_insert_midway_leaves_nothing_half_written(tmp_path, warehouse, monkeypatch):
    """The second batch cannot be stored (its columns do not match the table's, nor the lake
    files'): the error reaches the caller and the warehouse and lake are as they were."""
    src = write_csv(tmp_path / "d.csv", GOOD_ROWS * 2)
    real = validation.validate_batch
    calls = []

    def second_is_wrong(batch, spec, offset):
        res = real(batch, spec, offset)
        calls.append(1)
        if len(calls) == 2:
            res.good = res.good.drop_columns(["income"])
        return res

    monkeypatch.setattr(staging, "validate_batch", second_is_wrong)
    with pytest.raises((duckdb.Error, ValueError)):  # the warehouse's insert or the lake's write
        stage(spec_for(src), tmp_path, warehouse, tmp_path / "lake", batch_rows=4)
    assert len(calls) == 2
    assert warehouse.con.execute("SELECT count(*) FROM information_schema.tables "
                                 "WHERE table_schema = 'staging'").fetchall() == [(0,)]
    assert warehouse.con.execute("SELECT count(*) FROM audit.datasets").fetchall() == [(0,)]
    assert not list((tmp_path / "lake").rglob("*.parquet"))
