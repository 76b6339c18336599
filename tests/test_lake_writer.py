"""The lake written as batches arrive (flows/store/lake_writer.py) is the lake DuckDB's partitioned
write gives: the same folders (a null key in DuckDB's default folder), the same rows in each,
the partition columns inside the files, the same column types as read."""
from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aequum.flows.store.lake_writer import HIVE_NULL, PartitionedWriter

KEYS = ["_g_x", "_decision"]


def _records(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    group = pa.array(rng.integers(0, 2, n).astype(np.int8), mask=rng.random(n) < 0.1)
    return pa.table({
        "_id": pa.array([f"r{i}" for i in range(n)], pa.large_string()),
        "_row": pa.array(np.arange(n, dtype=np.int64)),
        "_g_x": group,
        'x"; DROP TABLE t; --': pa.array(rng.choice(["a", "b", "c'"], n), pa.large_string()),
        "_decision": pa.array(rng.integers(0, 2, n).astype(np.int8)),
        "income": pa.array(rng.normal(50, 10, n).round(1)),
    })


def _by_folder(root: Path) -> dict[str, pa.Table]:
    out = {}
    for f in sorted(root.rglob("*.parquet")):
        table = pq.read_table(f)
        out[str(f.parent.relative_to(root))] = table.sort_by("_row")
    return out


@pytest.mark.parametrize("batch", [1, 7, 500, 4_000])
def test_the_streamed_lake_is_the_one_duckdb_writes(tmp_path, batch):
    records = _records(3_000, seed=batch)
    with PartitionedWriter(tmp_path / "ours", KEYS) as writer:
        for start in range(0, records.num_rows, batch):
            writer.write(records.slice(start, batch))
    con = duckdb.connect()
    con.register("records", records)
    con.table("records").to_parquet(str(tmp_path / "duckdb"), partition_by=KEYS, write_partition_columns=True)
    ours, theirs = _by_folder(tmp_path / "ours"), _by_folder(tmp_path / "duckdb")
    assert set(ours) == set(theirs)
    assert any(HIVE_NULL in folder for folder in ours)  # the null group has its folder
    for folder, table in ours.items():
        other = theirs[folder]
        assert [(f.name, f.type) for f in table.schema] == [(f.name, f.type) for f in other.schema], folder
        assert table.to_pylist() == other.to_pylist(), folder
    assert sum(t.num_rows for t in ours.values()) == records.num_rows


def test_every_batch_takes_the_first_ones_types_and_an_empty_batch_writes_nothing(tmp_path):
    records = _records(100, seed=1)
    with PartitionedWriter(tmp_path, KEYS) as writer:
        writer.write(records.slice(0, 50))
        writer.write(records.slice(0, 0))
        narrower = records.slice(50).set_column(5, "income", records["income"].slice(50).cast(pa.float32()))
        writer.write(narrower)
    read = pa.concat_tables(_by_folder(tmp_path).values()).sort_by("_row")
    assert read.num_rows == 100 and read.schema.field("income").type == pa.float64()
    assert read["_id"].to_pylist() == records["_id"].to_pylist()
    with PartitionedWriter(tmp_path / "other", KEYS) as writer, pytest.raises(ValueError, match="field names"):
        writer.write(records)
        writer.write(records.drop_columns(["income"]))
