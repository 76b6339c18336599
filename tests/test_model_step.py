"""The run's model step (flows.model_step.prepare_model): a surrogate fitted on a stratified sample of
``model.fit_rows`` staged records, its quality measured on every record in blocks (above ``QUALITY_ROWS``
records, on a uniform sample of that many)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from aequum.engines.core.data import DECISION, ID, ROW, record_columns
from aequum.engines.core.spec import SpecError, parse_spec
from aequum.engines.generators.hmda import iter_hmda_batches
from aequum.engines.core.models import model_fingerprint
from aequum.flows.store.lake_reading import lake_blocks, load_lake
from aequum.flows.model_step import PackedModel, assess_model, fit_model, fit_sample, prepare_model
from aequum.flows.store.staging import stage
from aequum.flows.store.warehouse import Warehouse

SPECS = Path(__file__).resolve().parents[1] / "data" / "specs"


def _stage(tmp_path: Path, source: dict, fit_rows, name: str = "wh"):
    raw = yaml.safe_load((SPECS / "hmda.yaml").read_text())
    raw["source"] = source
    raw["model"]["fit_rows"] = fit_rows
    raw["engines"] = {"run": ["outcome"]}
    spec = parse_spec(raw)
    with Warehouse(tmp_path / f"{name}.duckdb") as wh:
        ref = stage(spec, SPECS, wh, tmp_path / f"lake-{name}")
    return spec, ref


@pytest.fixture(scope="module")
def lar(tmp_path_factory):
    """3,000 generated LAR rows with an id column, in generated and in reversed order."""
    tmp = tmp_path_factory.mktemp("lar")
    table = pa.Table.from_batches([lar for lar, _truth in iter_hmda_batches(3000, seed=3)])
    table = table.append_column("app_id", pa.array([f"app-{i:05d}" for i in range(table.num_rows)]))
    pq.write_table(table, tmp / "lar.parquet")
    pq.write_table(table.take(pa.array(np.arange(table.num_rows)[::-1])), tmp / "reversed.parquet")
    return tmp


def _source(lar: Path, name: str) -> dict:
    return {"kind": "parquet", "path": str(lar / name), "id_column": "app_id"}


def test_the_fit_sample_is_stratified_reproducible_and_independent_of_row_order(lar, tmp_path):
    spec, ref = _stage(tmp_path, _source(lar, "lar.parquet"), 1000)
    assert ref.rows_staged > 1000
    picked = fit_sample(spec, ref)
    assert len(picked) == 1000 and len(set(picked.to_pylist())) == 1000
    assert fit_sample(spec, ref).equals(picked)  # reproducible
    every = load_lake(ref.lake_path, [ID, ROW, DECISION, *[f"_g_{p.name}" for p in spec.protected]])
    sample = load_lake(ref.lake_path, [ID, ROW, DECISION, *[f"_g_{p.name}" for p in spec.protected]], rows=picked)
    assert sample.num_rows == 1000 and sample[ROW].to_pylist() == sorted(picked.to_pylist())
    # each stratum (decision x every attribute's group) keeps its share, to one record
    def counts(t):
        keys = zip(*[t[c].to_pylist() for c in t.column_names if c not in (ID, ROW)])
        out: dict = {}
        for k in keys:
            out[k] = out.get(k, 0) + 1
        return out
    whole, drawn = counts(every), counts(sample)
    for key, n in whole.items():
        assert abs(drawn.get(key, 0) - n * 1000 / every.num_rows) < 1.0 + 1e-9, key
    # the same records staged from the file in reverse order: the same records are drawn
    spec_r, ref_r = _stage(tmp_path, _source(lar, "reversed.parquet"), 1000, "reversed")
    ids = sorted(load_lake(ref_r.lake_path, [ID], rows=fit_sample(spec_r, ref_r))[ID].to_pylist())
    assert ids == sorted(sample[ID].to_pylist())
    # another seed, another sample; no sample when the records fit
    other = parse_spec({**spec.model_dump(mode="json"), "model": {**spec.model.model_dump(mode="json"), "seed": 1}})
    assert not fit_sample(other, ref).equals(picked)
    assert fit_sample(parse_spec({**spec.model_dump(mode="json"),
                                  "model": {**spec.model.model_dump(mode="json"), "fit_rows": None}}), ref) is None


def test_the_model_step_fits_on_the_sample_and_measures_every_record(lar, tmp_path):
    spec, ref = _stage(tmp_path, _source(lar, "lar.parquet"), 1000)
    said: list[str] = []
    model, quality, problem = prepare_model(spec, SPECS, ref, said.append)
    rows = {r["split"]: r for r in quality.to_pylist() if r["attribute"] == "all"}
    assert rows["holdout"]["n"] == 200  # the surrogate's held-out 20% of the 1,000 it was fitted on
    assert rows["all"]["n"] == ref.rows_staged  # its quality: every staged record
    assert any(f"on 1,000 rows (a sample of the {ref.rows_staged:,} staged" in m for m in said)
    # the same model as a fit on exactly those records
    table = load_lake(ref.lake_path, record_columns(spec), rows=fit_sample(spec, ref))
    refit = fit_model(spec, SPECS, table, ref.categories)
    X = np.random.default_rng(0).normal(size=(50, len(spec.model.features))) + 1
    assert np.array_equal(model.score(X), refit.score(X))


def test_the_model_step_in_a_process_of_its_own_is_the_step_in_place(lar, tmp_path, monkeypatch):
    """Above ``OWN_PROCESS_ROWS`` staged records the step runs in a spawned process: the same
    model, quality and progress."""
    from aequum.flows import model_step as step

    spec, ref = _stage(tmp_path, _source(lar, "lar.parquet"), 1000)
    here: list[str] = []
    model, quality, problem = prepare_model(spec, SPECS, ref, here.append)
    monkeypatch.setattr(step, "OWN_PROCESS_ROWS", ref.rows_staged - 1)
    there: list[str] = []
    child_model, child_quality, child_problem = prepare_model(spec, SPECS, ref, there.append)
    X = np.random.default_rng(0).normal(size=(50, len(spec.model.features))) + 1
    assert np.array_equal(model.score(X), child_model.score(X))
    assert child_quality.equals(quality) and child_problem == problem
    assert [m.split(" in ")[0] for m in there] == [m.split(" in ")[0] for m in here]
    # packed, as the audit flow takes it: the same model once unpacked, its fingerprint with it
    packed, packed_quality, _ = prepare_model(spec, SPECS, ref, lambda _m: None, packed=True)
    assert isinstance(packed, PackedModel) and packed.fingerprint == model_fingerprint(model)
    assert np.array_equal(packed.unpack().score(X), model.score(X)) and packed_quality.equals(quality)


def test_the_flow_holds_a_model_made_in_its_own_process_without_torch(lar, tmp_path):
    """The flow's process never unpickles the model (which imports torch: 0.15 GB it has no use
    for); an engine's preparation on a worker unpacks it (``_prepare``)."""
    import subprocess
    import sys

    spec, ref = _stage(tmp_path, _source(lar, "lar.parquet"), 1000)
    script = f"""
import sys
from pathlib import Path
from aequum.engines.core.spec import parse_spec
from aequum.flows import model_step as step
from aequum.flows.store.staging import DatasetRef
step.OWN_PROCESS_ROWS = 0
spec = parse_spec({spec.model_dump(mode="json")!r})
ref = DatasetRef(**{ref.__dict__!r})
model, quality, problem = step.prepare_model(spec, Path({str(SPECS)!r}), ref, lambda _m: None, packed=True)
assert isinstance(model, step.PackedModel), type(model)
assert "torch" not in sys.modules, "the flow's process imported torch"
print(model.fingerprint)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    model, _, _ = prepare_model(spec, SPECS, ref, lambda _m: None)
    assert done.stdout.strip().splitlines()[-1] == model_fingerprint(model)


def test_quality_measured_in_blocks_equals_one_pass(lar, tmp_path):
    spec, ref = _stage(tmp_path, _source(lar, "lar.parquet"), None)
    model = fit_model(spec, SPECS, load_lake(ref.lake_path, record_columns(spec)), ref.categories)
    columns = record_columns(spec, list(spec.model.features), ids=False)
    blocks = list(lake_blocks(ref.lake_path, columns, rows=700))
    assert len(blocks) > 1 and sum(b.num_rows for b in blocks) == ref.rows_staged
    one, _ = assess_model(spec, [load_lake(ref.lake_path, columns)], ref.categories, model, lambda _m: None)
    blocked, _ = assess_model(spec, blocks, ref.categories, model, lambda _m: None)
    assert blocked.equals(one)
    shuffled = load_lake(ref.lake_path, columns)
    shuffled = shuffled.take(np.random.default_rng(0).permutation(shuffled.num_rows))
    assert assess_model(spec, [shuffled], ref.categories, model, lambda _m: None)[0].equals(one)


@pytest.mark.parametrize("value", [0, 1, -5, "many"])
def test_fit_rows_must_be_a_count_above_one(value):
    raw = yaml.safe_load((SPECS / "hmda.yaml").read_text())
    raw["model"]["fit_rows"] = value
    with pytest.raises(SpecError, match="model.fit_rows"):
        parse_spec(raw)


def test_a_model_step_that_fails_mid_pass_lets_the_lake_go(lar, tmp_path, monkeypatch):
    """The pass over the lake's blocks holds the lake's reader; an error in it must let it go
    (or the next read in the process would wait forever)."""
    import threading

    from aequum.engines.core.data import AuditData

    spec, ref = _stage(tmp_path, _source(lar, "lar.parquet"), None)

    def failing(self):
        raise RuntimeError("scoring failed")
    monkeypatch.setattr(AuditData, "scores", failing)
    with pytest.raises(RuntimeError, match="scoring failed") as caught:
        prepare_model(spec, SPECS, ref, lambda _m: None)
    read = threading.Thread(target=load_lake, args=(ref.lake_path, [ROW]), daemon=True)
    read.start()
    read.join(timeout=60)
    assert not read.is_alive()
    assert caught.value.__traceback__ is not None  # the failed frames are still held here


def test_above_quality_rows_the_quality_is_measured_on_a_uniform_sample(lar, tmp_path, monkeypatch):
    """Above ``QUALITY_ROWS`` staged records the model's quality is measured on a uniform,
    seeded sample of that many, drawn in record order (the same records from a reversed file),
    its rows' split ``sample`` and ``sampled_from`` the staged records; the measures are those
    of the sampled records read in one table. At or below the cap: every record, as before."""
    from aequum.flows import model_step as step

    spec, ref = _stage(tmp_path, _source(lar, "lar.parquet"), 1000)
    model, every, _ = prepare_model(spec, SPECS, ref, lambda _m: None)
    assert {r["split"] for r in every.to_pylist()} == {"holdout", "all"}
    assert every["sampled_from"].null_count == every.num_rows
    monkeypatch.setattr(step, "QUALITY_ROWS", ref.rows_staged)  # the cap itself: still every record
    assert prepare_model(spec, SPECS, ref, lambda _m: None)[1].equals(every)

    monkeypatch.setattr(step, "QUALITY_ROWS", 700)
    said: list[str] = []
    _, sampled, _ = prepare_model(spec, SPECS, ref, said.append)
    rows = [r for r in sampled.to_pylist() if r["split"] != "holdout"]
    assert {r["split"] for r in rows} == {"sample"} and {r["sampled_from"] for r in rows} == {ref.rows_staged}
    overall = next(r for r in rows if r["attribute"] == "all")
    assert overall["n"] == 700
    assert any(f"a uniform sample of 700 of the {ref.rows_staged:,} records" in m for m in said)
    # the holdout row is the fit's, unchanged
    assert sampled.filter(pc.equal(sampled["split"], "holdout")).equals(
        every.filter(pc.equal(every["split"], "holdout")))
    picked = step.quality_sample(spec, ref)
    assert len(set(picked.to_pylist())) == 700 and step.quality_sample(spec, ref).equals(picked)
    columns = record_columns(spec, list(spec.model.features), ids=False)
    alone, _ = assess_model(spec, [load_lake(ref.lake_path, columns, rows=picked)], ref.categories, model,
                            lambda _m: None, sampled_from=ref.rows_staged)
    assert alone.equals(sampled)
    # uniform, not stratified: another seed draws other records
    other = parse_spec({**spec.model_dump(mode="json"), "model": {**spec.model.model_dump(mode="json"), "seed": 1}})
    assert not step.quality_sample(other, ref).equals(picked)
    # the same records staged from the file in reverse order: the same sample, the same quality
    spec_r, ref_r = _stage(tmp_path, _source(lar, "reversed.parquet"), 1000, "reversed")
    ids = sorted(load_lake(ref_r.lake_path, [ID], rows=step.quality_sample(spec_r, ref_r))[ID].to_pylist())
    assert ids == sorted(load_lake(ref.lake_path, [ID], rows=picked)[ID].to_pylist())
    _, reversed_quality, _ = prepare_model(spec_r, SPECS, ref_r, lambda _m: None)
    assert reversed_quality.equals(sampled)


def test_the_sampled_records_are_filtered_from_every_block(lar, tmp_path):
    """``_records_of``: exactly the records whose row numbers were drawn, from blocks of any size."""
    from aequum.flows.model_step import _records_of

    spec, ref = _stage(tmp_path, _source(lar, "lar.parquet"), None)
    every = load_lake(ref.lake_path, [ROW], ordered=False)[ROW].to_numpy()
    drawn = np.random.default_rng(5).choice(every, size=333, replace=False)
    for rows in (100, 700, 10_000):
        got = np.concatenate([b[ROW].to_numpy() for b in
                              _records_of(lake_blocks(ref.lake_path, [ROW], rows=rows), pa.array(drawn))])
        assert sorted(got.tolist()) == sorted(drawn.tolist())
    first = _records_of(lake_blocks(ref.lake_path, [ROW]), pa.array([int(every.max()) + 1]))
    assert sum(b.num_rows for b in first) == 0  # a row number beyond every record's
