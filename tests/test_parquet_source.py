"""Parquet sources: Arrow's reader, text columns read with their Parquet dictionaries, files
read together. Staging must give the same records, quarantine and fingerprint whether a text
column comes dictionary-encoded or as plain text."""
from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aequum.engines.core.validation import group_sizes, validate_batch
from aequum.flows.store.readers import SourceError, open_source
from aequum.flows.store.staging import stage
from aequum.flows.store.warehouse import Warehouse
from test_ingest import SEX, spec_for

# every value text, as a LAR file keeps them: padded values, values that strip to the same
# category (" x", "x"), nulls, numbers as text and a value that is not one ("NA")
ROWS = [
    ("1", "F", "10", "A", "x", "1"),
    ("2", " M", "20.5", "B ", " x", "0"),
    ("3", "F ", " 30 ", "C", "x ", "0"),
    ("4", "M", "NA", "A", "z", "1"),
    ("5", None, "10", "A", "x", "1"),
    ("6", "X", "10", "A", "y", "1"),
    ("7", "M", "5000", "Z", None, "1"),
    ("8", "F", "", "B", "", "2"),
    ("9", "M", "40", "A", "y", " 1"),
    ("10", "F", "1e1", "C", "z", "0"),
    ("11", "M", "15", "B", "x", "1"),
]


def _table(rows=ROWS) -> pa.Table:
    names = ["app id", SEX, "income", "grade", "city", "y"]
    return pa.table({n: pa.array(list(col), pa.string()) for n, col in zip(names, zip(*rows))})


def _spec(path):
    return spec_for(path, kind="parquet")


def _staged(tmp_path, name: str, **write) -> tuple:
    """Stage ``ROWS`` written with the Parquet writer options ``write`` in a warehouse of its
    own; the staged records, quarantine, fingerprint, categories and lake rows."""
    folder = tmp_path / name
    folder.mkdir()
    pq.write_table(_table(), folder / "d.parquet", row_group_size=4, **write)
    with Warehouse(folder / "wh.duckdb") as wh:
        ref = stage(_spec(folder / "d.parquet"), folder, wh, folder / "lake")
        records = wh.con.execute(f"SELECT * FROM {ref.staged_table} ORDER BY _row").fetchall()
        bad = wh.con.execute("SELECT source_row, record_id, field, value, reason FROM audit.quarantine "
                             "ORDER BY source_row").fetchall()
    lake = duckdb.sql(f"SELECT * EXCLUDE (_g_sex, _decision) FROM read_parquet('{folder}/lake/**/*.parquet') "
                      "ORDER BY _row").fetchall()
    return records, bad, ref.fingerprint, ref.categories, lake


def test_dictionary_encoded_text_stages_as_the_same_text(tmp_path):
    plain = _staged(tmp_path, "plain", use_dictionary=False)
    coded = _staged(tmp_path, "coded")  # the writer's default: every text column a dictionary
    assert coded == plain
    records, bad, _, categories, _ = coded
    assert [r[0] for r in records] == ["1", "2", "3", "9", "10", "11"]  # padded values are their category
    assert categories == {"city": ["x", "y", "z"]}
    assert [(r[0], r[2], r[4]) for r in bad] == [
        (3, "income", "not a number"),
        (4, SEX, "value maps to neither the protected nor the reference group of 'sex'"),
        (5, SEX, "value maps to neither the protected nor the reference group of 'sex'"),
        (6, "income", "outside range [0, 1000]"), (7, "y", "neither a favourable nor an unfavourable value")]
    assert [r[3] for r in bad] == ["NA", None, "X", "5000", "2"]  # the quarantine shows the value as read


def test_the_reader_keeps_stored_dictionaries_except_the_record_ids(tmp_path):
    pq.write_table(_table(), tmp_path / "coded.parquet", row_group_size=4)
    pq.write_table(_table(), tmp_path / "plain.parquet", use_dictionary=False)
    for name, coded in (("coded", True), ("plain", False)):
        spec = _spec(tmp_path / f"{name}.parquet")
        with open_source(spec.source, tmp_path, batch_rows=5, columns=spec.columns(), text_as_dictionary=True) as s:
            batches = list(s.batches)
        assert [b.num_rows for b in batches] == [5, 5, 1]
        types = batches[0].schema
        assert not pa.types.is_dictionary(types.field("app id").type)
        assert pa.types.is_dictionary(types.field("city").type) is coded
        with open_source(spec.source, tmp_path, batch_rows=5, columns=spec.columns()) as s:
            assert not any(pa.types.is_dictionary(f.type) for f in next(s.batches).schema)


def test_validation_and_group_counts_read_a_dictionary_as_its_text(tmp_path):
    spec = _spec(tmp_path / "d.parquet")
    plain = _table()
    coded = pa.table({n: (c.dictionary_encode() if n != "app id" else c) for n, c in zip(plain.column_names, plain.columns)})
    a, b = validate_batch(plain, spec, 0), validate_batch(coded, spec, 0)
    assert a.good.to_pylist() == b.good.to_pylist()
    assert a.bad.equals(b.bad) and a.content_hash == b.content_hash and a.categories == b.categories
    units = [["sex"]]
    assert group_sizes([plain], spec, units, {"sex": (99, 99)}) == group_sizes([coded], spec, units, {"sex": (99, 99)}) \
        == {"sex": (4, 5)}


def test_files_read_together_share_the_first_files_columns(tmp_path):
    pq.write_table(_table(ROWS[:6]), tmp_path / "a.parquet")
    second = _table(ROWS[6:])
    # its income stored as numbers, its columns in another order
    second = second.set_column(2, "income", pa.array([5000.0, None, 40.0, 10.0, 15.0]))
    pq.write_table(second.select(second.column_names[::-1]), tmp_path / "b.parquet")
    spec = _spec(tmp_path / "*.parquet")
    with Warehouse(tmp_path / "wh.duckdb") as wh:
        ref = stage(spec, tmp_path, wh, tmp_path / "lake")
        staged = wh.con.execute(f"SELECT _id, income FROM {ref.staged_table} ORDER BY _row").fetchall()
    assert staged == [("1", 10.0), ("2", 20.5), ("3", 30.0), ("9", 40.0), ("10", 10.0), ("11", 15.0)]
    pq.write_table(second.drop_columns(["city"]), tmp_path / "b.parquet")
    with Warehouse(tmp_path / "wh2.duckdb") as wh, pytest.raises(SourceError, match=r"b\.parquet lacks column\(s\) \['city'\]"):
        stage(spec, tmp_path, wh, tmp_path / "lake2")


def test_a_file_that_is_not_parquet_is_named(tmp_path):
    (tmp_path / "d.parquet").write_bytes(b"app id,sex\n1,F\n")
    with Warehouse(tmp_path / "wh.duckdb") as wh, pytest.raises(SourceError, match=r"cannot read .*d\.parquet as Parquet"):
        stage(_spec(tmp_path / "d.parquet"), tmp_path, wh, tmp_path / "lake")


def test_a_dictionary_in_chunks_of_their_own_validates_as_its_text():
    """A column whose chunks carry different dictionaries (one with padded values, one without,
    one empty) gives the plain text's staged rows, quarantine and content hash; the staged text
    is plain text, never a dictionary."""
    spec = _spec("d.parquet")
    plain = _table()
    cuts = [(0, 4), (4, 0), (4, 7)]  # an empty chunk between two
    coded = pa.table({n: (c if n == "app id" else pa.chunked_array(
        [c.slice(start, length).combine_chunks().dictionary_encode() for start, length in cuts]))
        for n, c in zip(plain.column_names, plain.columns)})
    assert coded["city"].num_chunks == 3
    assert coded["city"].chunk(0).dictionary.to_pylist() != coded["city"].chunk(2).dictionary.to_pylist()
    a, b = validate_batch(plain, spec, 0), validate_batch(coded, spec, 0)
    assert a.good.to_pylist() == b.good.to_pylist() and a.good.schema == b.good.schema
    assert not any(pa.types.is_dictionary(f.type) for f in b.good.schema)
    assert a.bad.equals(b.bad) and a.content_hash == b.content_hash and a.categories == b.categories
    assert a.nulled == b.nulled and (a.rows, a.out_of_scope) == (b.rows, b.out_of_scope)
