"""Results do not depend on the order of the source's rows: every engine of the shipped example
specs, run as the audit flow runs it (staged, read from the lake, the model prepared), writes
the same tables whether the records come in their order or shuffled."""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import REPO

SPECS = REPO / "data" / "specs"
TIMING = {"seconds", "fit_seconds", "seconds_total"}

# spec file, rows, engine parameters that keep it small
CASES = {
    "loan": ("loan.yaml", 300, {"cst": {"k": [10, 20]}, "fgce": {"k": 3}}),
    "raguel_example": ("raguel_example.yaml", None, {}),
    "cec_synthetic": ("cec_synthetic.yaml", 200, {"cec": {"sample": 60}}),
    "hmda": ("hmda.yaml", 1500, {"cst": {"k": [10], "sample": 150}, "pba": {"sample": 40}, "cec": {"sample": 100}}),
}


def source_table(raw: dict, rows: int | None, tmp: Path) -> pa.Table:
    """The spec's records with an id column ``rid`` (their row number in the original order)."""
    from aequum.flows.commands.generate import generate_to_file
    from aequum.flows.store.readers import open_source, resolve

    src = raw["source"]
    if src["kind"] == "generated":
        path = generate_to_file(src["generator"], tmp / "generated.parquet", rows=rows, seed=src.get("seed", 0))
        table = pq.read_table(path)
    else:
        table = pa.csv.read_csv(resolve(src["path"], SPECS), read_options=pa.csv.ReadOptions(),
                                convert_options=pa.csv.ConvertOptions(strings_can_be_null=False))
    if src.get("id_column"):
        return table.rename_columns(["rid" if c == src["id_column"] else c for c in table.column_names])
    return table.append_column("rid", pa.array([f"r{i}" for i in range(table.num_rows)]))


def small_raw(case: str) -> tuple[dict, int | None]:
    """The case's spec (as a dict) with the parameters that keep it small, and its rows."""
    spec_file, rows, engines = CASES[case]
    raw = yaml.safe_load((SPECS / spec_file).read_text())
    for name, params in engines.items():
        raw["engines"].setdefault(name, {}).update(params)
    if raw.get("model", {}).get("kind") == "surrogate":
        raw["model"]["epochs"] = 20  # a quick fit: the order must not matter at any length of training
    for p in raw["protected"]:
        p["compare"] = "pooled"  # per-value groups of a few records are too small for CST's k
    return raw, rows


def staged(raw: dict, table: pa.Table, tmp: Path):
    """``table`` staged under ``raw`` in ``tmp``: the spec, the dataset, the model, its quality
    and the supplied counterfactuals, as the audit flow has them before its engines."""
    from aequum.engines.core.spec import parse_spec
    from aequum.flows.model_step import prepare_model, supplied_counterfactuals
    from aequum.flows.store.staging import stage
    from aequum.flows.store.warehouse import Warehouse

    tmp.mkdir(exist_ok=True)
    pq.write_table(table, tmp / "records.parquet")
    raw = {**raw, "source": {"kind": "parquet", "path": str(tmp / "records.parquet"), "id_column": "rid"}}
    spec = parse_spec(raw)
    with Warehouse(tmp / "wh.duckdb") as wh:
        ref = stage(spec, SPECS, wh, tmp / "lake")
    model, quality, _problem = prepare_model(spec, SPECS, ref, lambda _m: None)
    return spec, ref, model, quality, supplied_counterfactuals(spec, SPECS, ref)


def run_spec(raw: dict, table: pa.Table, tmp: Path) -> dict[str, list]:
    """Every engine's tables (and the model's quality) for ``table`` staged under ``raw``."""
    from aequum.flows.engine_tasks import run_engine_pieces

    tmp.mkdir()
    spec, ref, model, quality, cfs = staged(raw, table, tmp)
    out = {"model_quality": canonical(quality)} if quality is not None else {}
    for name in spec.engines.run:
        outcome = run_engine_pieces(name, spec, ref.lake_path, ref.categories, model, cfs)
        assert outcome.status == "succeeded", (name, outcome.error)
        for t, result in outcome.results().items():
            out[t] = canonical(result)
    return out


def canonical(table: pa.Table) -> list:
    """The rows as sorted tuples, floats to 9 significant digits, timings left out."""
    def value(v):
        if isinstance(v, float):
            return None if math.isnan(v) else float(f"{v:.9g}")
        if isinstance(v, (list, tuple)):
            return tuple(value(x) for x in v)
        if isinstance(v, dict):
            return tuple(sorted((k, value(x)) for k, x in v.items()))
        return v
    names = [n for n in table.column_names if n not in TIMING]
    return sorted((tuple(value(r[n]) for n in names) for r in table.select(names).to_pylist()), key=repr)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_engines_tables_are_the_same_for_shuffled_rows(tmp_path, case):
    raw, rows = small_raw(case)
    table = source_table(raw, rows, tmp_path)
    shuffled = table.take(pa.array(np.random.default_rng(7).permutation(table.num_rows)))
    first = run_spec(raw, table, tmp_path / "ordered")
    second = run_spec(raw, shuffled, tmp_path / "shuffled")
    assert set(first) == set(second)
    differ = [t for t in first if first[t] != second[t]]
    assert differ == [], f"tables that changed with the row order: {differ}"
    shutil.rmtree(tmp_path / "ordered", ignore_errors=True)
