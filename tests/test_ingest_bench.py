"""`aequum bench ingest`: its DuckDB baselines do the work the docstring says they do."""
from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from aequum.engines.core.spec import load_spec
from aequum.flows import bench_ingest
from aequum.flows.generate import generate_to_file


def _partitions(root: Path) -> set[str]:
    return {str(p.parent.relative_to(root)) for p in root.rglob("*.parquet")}


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_the_same_layout_baseline_writes_what_staging_writes(tmp_path, fmt):
    """Same partition folders, the in-scope rows (staged + quarantined), the spec's columns
    with the numeric features stored as numbers."""
    path = tmp_path / f"hmda.{fmt}"
    generate_to_file("hmda", str(path), rows=3_000, seed=0, fmt=fmt)
    (tmp_path / "stage").mkdir()
    ours = bench_ingest._measure_stage(str(path), str(tmp_path / "stage"))
    base = bench_ingest._measure_baseline(str(path), str(tmp_path / "layout"), "layout")
    lakes = [p for p in (tmp_path / "stage" / "lake" / "hmda").iterdir() if not p.name.startswith(".")]
    assert len(lakes) == 1
    assert _partitions(tmp_path / "layout") == _partitions(lakes[0])
    assert base["rows"] == ours["staged"] + ours["quarantined"]
    spec = load_spec(bench_ingest.SPEC)
    with duckdb.connect(str(tmp_path / "layout.duckdb"), read_only=True) as con:
        types = dict(zip(con.table("staged").columns, con.table("staged").types))
    assert set(spec.columns()) <= set(types)
    assert {f.name: str(types[f.name]) for f in spec.features if f.type == "numeric"} == {
        f.name: "DOUBLE" for f in spec.features if f.type == "numeric"}


def test_the_same_columns_baseline_partitions_by_the_raw_columns(tmp_path):
    path = tmp_path / "hmda.csv"
    generate_to_file("hmda", str(path), rows=2_000, seed=0, fmt="csv")
    base = bench_ingest._measure_baseline(str(path), str(tmp_path / "columns"))
    assert base["rows"] == 2_000
    folders = _partitions(tmp_path / "columns")
    assert all(f.startswith("derived_race=") and "/action_taken=" in f for f in folders)
    with pytest.raises(ValueError, match="layout must be one of"):
        bench_ingest._measure_baseline(str(path), str(tmp_path / "x"), "other")


def test_the_baseline_writes_its_table_in_the_warehouses_storage_format(tmp_path):
    """Same output as staging: a file DuckDB 1.x opens (v1.0.0). The table in DuckDB 2's own
    format, cheaper to write, is the separate 'default' run."""
    path = tmp_path / "hmda.parquet"
    generate_to_file("hmda", str(path), rows=1_000, seed=0, fmt="parquet")
    formats = {}
    for storage in bench_ingest.STORAGES:
        bench_ingest._measure_baseline(str(path), str(tmp_path / storage), "columns", storage)
        with duckdb.connect(str(tmp_path / f"{storage}.duckdb"), read_only=True) as con:
            formats[storage] = con.execute("SELECT tags['storage_version'] FROM duckdb_databases() "
                                           "WHERE database_name = current_database()").fetchall()[0][0]
    assert formats["warehouse"] == "v1.0.0+" and formats["default"] != "v1.0.0+"
    with pytest.raises(ValueError, match="storage must be one of"):
        bench_ingest._measure_baseline(str(path), str(tmp_path / "x"), "columns", "other")


def test_a_baseline_that_runs_out_of_memory_is_reported_not_fatal(monkeypatch, capsys):
    """At 10M rows DuckDB's raw-column layout can exceed the 1 GB cap: the bench says so and
    still reports the other figures."""
    import aequum.flows.generate as generate

    monkeypatch.setattr(generate, "generate_to_file", lambda *a, **k: None)

    def fake(fn, path, out, *args):
        if args == ("columns", "warehouse"):
            raise RuntimeError(f"{fn} failed (exit status 1):\nOutOfMemoryException: Out of Memory Error")
        return {"seconds": 2.0, "peak_rss_mb": 100.0, "staged": 8, "quarantined": 1, "out_of_scope": 1}

    monkeypatch.setattr(bench_ingest, "_in_subprocess", fake)
    rows = bench_ingest.run(quick=True)
    assert [r["ratio_to_duckdb"] for r in rows] == [None, None]
    assert [r["ratio_to_same_layout"] for r in rows] == [1.0, 1.0]
    out = capsys.readouterr().out
    assert "DuckDB baseline 'columns' at 200,000 parquet rows failed: OutOfMemoryException" in out
