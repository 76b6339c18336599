"""Engines read only the staged columns they declare, from the Parquet lake (flows.store.lake_reading.load_lake)."""
from __future__ import annotations

import time

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import declared_columns, declared_rows, run_serial
from aequum.engines.core.spec import parse_spec
from aequum.engines.registry import ENGINES, engine_params, get_engine
from aequum.flows.engine_tasks import run_engine_pieces
from aequum.flows.store.lake_reading import load_lake
from aequum.flows.model_step import fit_model
from aequum.flows.store.staging import stage
from aequum.flows.store.warehouse import Warehouse

SPECS = Path(__file__).resolve().parents[1] / "data" / "specs"


def staged(tmp_path, name: str, rows: int, edit=None):
    raw = yaml.safe_load((SPECS / name).read_text())
    raw["source"]["rows"] = rows
    if edit is not None:
        edit(raw)
    spec = parse_spec(raw)
    with Warehouse(tmp_path / "wh.duckdb") as wh:
        ref = stage(spec, SPECS, wh, tmp_path / "lake")
        table = wh.staged(ref.version)
    return spec, ref, table


def decoded(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary-encoded columns as plain values."""
    return pa.table([c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns],
                    names=table.column_names)


def test_load_lake_reads_the_columns_asked_for_in_row_order(tmp_path):
    spec, ref, table = staged(tmp_path, "loan.yaml", 500)
    read = load_lake(ref.lake_path)
    assert decoded(read).equals(table)
    # text other than the ids comes dictionary-encoded: a category's value is stored once
    assert read.schema.field("Gender").type == pa.dictionary(pa.int32(), pa.string())
    assert read.schema.field("_id").type == pa.string()
    cols = ["_decision", "Gender", "_g_gender", "_id"]  # _row not among them: still in source row order
    assert decoded(load_lake(ref.lake_path, cols)).equals(table.select(cols))
    assert load_lake(ref.lake_path, [*cols, "_decision"]).column_names == cols  # a column asked twice: once
    unordered = load_lake(ref.lake_path, ["_row", "_decision"], ordered=False)
    assert unordered.sort_by("_row").equals(table.select(["_row", "_decision"]))
    with pytest.raises(ValueError, match=r"lack column\(s\) \['nope'\]"):
        load_lake(ref.lake_path, ["_id", "nope"])


def test_load_lake_orders_rows_across_files_and_keeps_nulls_in_encoded_text(tmp_path):
    from aequum.engines.core.sampling import record_order

    rng = np.random.default_rng(0)
    n = 5000
    rows = rng.permutation(n)
    grade = np.array(["A", "B", None, "C"], object)[rng.integers(0, 4, n)]
    table = pa.table({"_id": pa.array([f"r{r}" for r in rows]), "_row": pa.array(rows, pa.int64()),
                      "grade": pa.array(grade, pa.string()), "x": pa.array(rng.normal(size=n))})
    for i, part in enumerate(np.array_split(np.arange(n), 7)):  # several files, each its own order
        folder = tmp_path / f"_g=x{i % 3}"
        folder.mkdir(exist_ok=True)
        pq.write_table(table.take(part), folder / f"part{i}.parquet")
    read = load_lake(str(tmp_path), ["_id", "grade", "x"])
    expected = table.take(record_order(table["_id"])).select(["_id", "grade", "x"])  # by id: r0, r1, r10, ...
    assert decoded(read).equals(expected)
    assert read["grade"].null_count == expected["grade"].null_count > 0
    unordered = load_lake(str(tmp_path), ["_row", "grade"], ordered=False)
    assert sorted(unordered["_row"].to_pylist()) == list(range(n))
    assert load_lake(str(tmp_path), ["_id", "grade"], where={"_row": -1}).num_rows == 0  # none: still typed
    assert load_lake(str(tmp_path), ["grade"], where={"_row": -1}).schema.field("grade").type.value_type == pa.string()


def test_text_nearly_all_distinct_within_a_row_group_is_read_plain(tmp_path):
    """A text column whose row groups' values are nearly all distinct (the census tract) comes as
    plain text, the same values in the same order; a category stays dictionary-encoded."""
    rng = np.random.default_rng(1)
    n = 4000
    tract = pa.array([f"{t:011d}" if t % 9 else None for t in rng.permutation(10 ** 6)[:n]])
    grade = pa.array(np.array(["A", "B", "C"], object)[rng.integers(0, 3, n)])
    table = pa.table({"_id": pa.array([f"r{i:05d}" for i in range(n)]), "tract": tract, "grade": grade})
    pq.write_table(table, tmp_path / "part.parquet", row_group_size=1000)
    read = load_lake(str(tmp_path), ["_id", "tract", "grade"])
    assert read.schema.field("tract").type == pa.string() and pa.types.is_dictionary(read.schema.field("grade").type)
    assert read["tract"].to_pylist() == tract.to_pylist() and read["grade"].to_pylist() == grade.to_pylist()


def _same_results(spec, ref, table, names):
    model = fit_model(spec, SPECS, table, ref.categories)
    for name in names:
        engine = get_engine(name)
        params = engine_params(spec, name)
        columns = declared_columns(engine, spec, params)
        assert columns is not None and set(columns) < set(table.column_names), name
        whole = run_serial(engine, AuditData(spec, table, ref.categories, model), params)
        outcome = run_engine_pieces(name, spec, ref.lake_path, ref.categories, model, None)
        assert outcome.status == "succeeded", (name, outcome.error)
        for t, v in whole.items():
            timing = [c for c in v.column_names if c == "seconds"]  # wall time, not a result
            assert outcome.tables[t].drop_columns(timing).equals(v.drop_columns(timing)), (name, t)


def test_engines_declare_enough_columns_loan(tmp_path):
    """Every engine of the loan spec gives the same tables from its declared columns (read from
    the lake) as from the whole staged table."""
    spec, ref, table = staged(tmp_path, "loan.yaml", 400)
    _same_results(spec, ref, table, spec.engines.run)


@pytest.mark.slow
def test_engines_declare_enough_columns_hmda(tmp_path):
    """The HMDA spec's engines (reasons, CEC and PBA besides outcome and CST) likewise."""
    def edit(raw):
        raw["engines"]["pba"]["sample"] = 40
        raw["model"]["epochs"] = 5
        raw["protected"][0]["compare"] = "pooled"  # 3,000 rows hold too few of some races for k = 50
    spec, ref, table = staged(tmp_path, "hmda.yaml", 3000, edit)
    _same_results(spec, ref, table, spec.engines.run)


def test_every_registered_engine_declares_its_columns():
    spec = parse_spec(yaml.safe_load((SPECS / "hmda.yaml").read_text()))
    for name in ENGINES:
        columns = declared_columns(get_engine(name), spec, engine_params(spec, name))
        assert columns is not None and "_g_race" in columns, name


def test_outcome_reads_few_columns_and_ignores_row_order(tmp_path):
    """The outcome metrics need groups and decisions only (no ids, features or raw values) and
    are the same whatever the order of the records."""
    spec, ref, table = staged(tmp_path, "loan.yaml", 400)
    engine = get_engine("outcome")
    params = engine_params(spec, "outcome")
    assert engine.row_order is False
    assert sorted(declared_columns(engine, spec, params)) == sorted(
        ["_decision", *(f"_g_{p.name}" for p in spec.protected)])
    forward = run_serial(engine, AuditData(spec, table, ref.categories), params)
    backward = run_serial(engine, AuditData(spec, table.take(pa.array(np.arange(table.num_rows)[::-1])),
                                            ref.categories), params)
    for t in forward:
        assert forward[t].equals(backward[t])


def test_bench_grouping_sets_counts_what_outcome_reports(tmp_path):
    """The DuckDB query ``bench audit`` compares the outcome engine with counts the same groups."""
    import duckdb

    from aequum.flows.bench.audit import grouping_sets_sql

    spec, ref, table = staged(tmp_path, "hmda.yaml", 3000)
    metrics = run_engine_pieces("outcome", spec, ref.lake_path, ref.categories, None, None).tables["outcome_metrics"]
    engine = {(r["attribute"], r["group_name"]): (r["n"], r["n_favourable"]) for r in metrics.to_pylist()}
    names = [p.name for p in spec.protected]
    query = {}
    for row in duckdb.sql(grouping_sets_sql(spec, ref.lake_path)).fetchall():
        groups, grouped_out, n, favourable = row[:len(names)], row[len(names)], row[len(names) + 1], row[len(names) + 2]
        in_set = [a for i, a in enumerate(names) if not grouped_out >> (len(names) - 1 - i) & 1]
        values = [groups[names.index(a)] for a in in_set]
        if None in values:
            continue  # records in neither group of an attribute of the set
        word = {1: "protected", 0: "reference"}
        key = ((in_set[0], word[values[0]]) if len(in_set) == 1 else
               ("&".join(in_set), ",".join(f"{a}={word[v]}" for a, v in zip(in_set, values))))
        query[key] = (n, int(favourable))
    assert query == engine


def test_reasons_reads_only_the_unfavourable_decisions(tmp_path):
    """Reason consistency looks at denied applications only: it reads just those (the lake's
    decision partitions) and finds what it finds over every record."""
    spec, ref, table = staged(tmp_path, "hmda.yaml", 3000)
    engine = get_engine("reasons")
    params = engine_params(spec, "reasons")
    assert declared_rows(engine, spec, params) == {"_decision": 0}
    denied = load_lake(ref.lake_path, ["_row", "_decision"], where={"_decision": 0})
    assert set(denied["_decision"].to_pylist()) == {0}
    assert denied["_row"].to_pylist() == [r for r, d in zip(table["_row"].to_pylist(),
                                                             table["_decision"].to_pylist()) if d == 0]
    _same_results(spec, ref, table, ["reasons"])


def test_a_large_engine_state_runs_its_pieces_where_it_was_prepared(tmp_path, monkeypatch):
    """A state above the broadcast limit is not scattered to the workers (10M HMDA rows: CST's
    state of several GB failed Dask's broadcast); its pieces run in the preparing task, with the
    same results. state_bytes counts the arrays through dataclasses and containers."""
    import numpy as np
    import pyarrow as pa

    from aequum.engines.matching.cec.matching import Matches
    from aequum.flows import engine_tasks

    m = Matches(np.zeros(10), np.zeros(10, np.int8), np.zeros(10, np.int8), np.zeros(10, np.int64),
                np.zeros(10), np.zeros(10, bool), [])
    assert engine_tasks.state_bytes({"u": [m, (np.zeros(100), pa.array([1, 2]))], "n": 3}) == 80 + 20 + 80 + 80 + 10 + 800 + 16
    shared = np.zeros(1000)  # CST's tests share one factual point set: counted once
    assert engine_tasks.state_bytes([shared, {"a": shared, "b": [shared, np.zeros(10)]}]) == 8000 + 80

    class NoCluster:
        def scatter(self, *a, **k):
            raise AssertionError("broadcast")

    spec, ref, table = staged(tmp_path, "loan.yaml", 400, lambda raw: raw.update(
        engines={"run": ["cst"], "cst": {"k": [5], "chunk_size": 20}}))
    model = fit_model(spec, SPECS, table, ref.categories)
    serial = run_engine_pieces("cst", spec, ref.lake_path, ref.categories, model, None)
    assert serial.pieces > 1
    monkeypatch.setattr(engine_tasks, "BROADCAST_LIMIT", 0)
    local = run_engine_pieces("cst", spec, ref.lake_path, ref.categories, model, None, NoCluster())
    assert local.status == "succeeded"
    for t, v in serial.tables.items():
        assert local.tables[t].equals(v), t
    monkeypatch.setattr(engine_tasks, "BROADCAST_LIMIT", 2 ** 62)
    with pytest.raises(AssertionError, match="broadcast"):
        run_engine_pieces("cst", spec, ref.lake_path, ref.categories, model, None, NoCluster())


def test_pieces_on_a_cluster_come_back_in_piece_order_and_leave_nothing_on_the_workers(tmp_path):
    """Pieces fanned out over two workers give the serial run's tables; each piece's tables
    are taken as it finishes and its future let go, and the state's copies with them: no
    piece result or state is left in a worker's memory once the engine is done."""
    from distributed import Client

    spec, ref, table = staged(tmp_path, "loan.yaml", 400, lambda raw: raw.update(
        engines={"run": ["cst"], "cst": {"k": [5], "chunk_size": 20}}))
    model = fit_model(spec, SPECS, table, ref.categories)
    serial = run_engine_pieces("cst", spec, ref.lake_path, ref.categories, model, None)
    with Client(processes=False, n_workers=2, threads_per_worker=1, dashboard_address=":0") as client:
        fanned = run_engine_pieces("cst", spec, ref.lake_path, ref.categories, model, None, client)
        deadline = time.monotonic() + 10  # futures are let go by messages the workers act on soon after
        while sum((held := client.run(lambda dask_worker: len(dask_worker.data))).values()) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
    assert fanned.pieces == serial.pieces > 2
    for t, v in serial.tables.items():
        assert fanned.tables[t].equals(v), t
    assert sum(held.values()) == 0, held


def test_cst_evidence_goes_from_the_pieces_to_files_in_the_serial_order(tmp_path):
    """CST's evidence is streamed: each piece's rows are written where the piece ran, one file
    per piece and key, never gathered; the files in order hold the serial run's rows in its
    order, and the other tables are spooled whole as before."""
    import pyarrow.parquet as pq
    from distributed import Client

    spec, ref, table = staged(tmp_path, "loan.yaml", 400, lambda raw: raw.update(
        engines={"run": ["cst"], "cst": {"k": [5, 10], "chunk_size": 20, "evidence": "all"}}))
    model = fit_model(spec, SPECS, table, ref.categories)
    serial = run_engine_pieces("cst", spec, ref.lake_path, ref.categories, model, None)
    with Client(processes=False, n_workers=2, threads_per_worker=1, dashboard_address=":0") as client:
        spooled = run_engine_pieces("cst", spec, ref.lake_path, ref.categories, model, None, client,
                                    spool=str(tmp_path / "spool"))
    evidence = serial.tables["cst_evidence"]
    files = spooled.files["cst_evidence"]
    assert not spooled.tables and len(files) == 3 * spooled.pieces  # three (centre, group) keys each
    assert pa.concat_tables([pq.read_table(f) for f in files]).equals(evidence)
    assert spooled.row_counts() == {t: v.num_rows for t, v in serial.tables.items()}
    for t, v in serial.tables.items():
        assert spooled.results()[t].equals(v), t
    # the pieces read the points of every record from files, one set for all the tests
    assert sorted(p.name for p in (tmp_path / "spool" / "cst" / "state").iterdir()) == ["points0"]


def test_engines_of_a_run_take_the_slots_of_its_lock_on_a_cluster():
    """The run's lock: with one slot two engines never run at once (their memory would add up:
    10M HMDA records), whichever worker thread they run on; with two (a small run) two hold it
    together and a third waits; their pieces still use every worker."""
    import threading
    import time

    from distributed import Client

    from aequum.flows.engine_tasks import _holding

    def holders(client, slots: int, meet: threading.Barrier | None) -> int:
        inside, most, entered, guard = [0], [0], [0], threading.Lock()

        def prepare():
            with _holding(client, (f"aequum-engines-test-{slots}", slots)):
                with guard:
                    inside[0] += 1
                    entered[0] += 1
                    first_two = entered[0] <= 2
                    most[0] = max(most[0], inside[0])
                if meet is not None and first_two:
                    meet.wait(timeout=120)  # the first two holders meet here: never one alone
                time.sleep(0.05)
                with guard:
                    inside[0] -= 1

        threads = [threading.Thread(target=prepare) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return most[0]

    with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=":0") as client:
        assert holders(client, 1, None) == 1
        meet = threading.Barrier(2)
        assert holders(client, 2, meet) == 2 and not meet.broken
    with _holding(None, ("no cluster", 1)):  # serial runs take no lock
        pass


def test_a_large_lake_read_gives_the_memory_of_its_steps_back(tmp_path, monkeypatch):
    from aequum.flows.store import lake_reading

    spec, ref, table = staged(tmp_path, "loan.yaml", 300)
    given_back = []
    monkeypatch.setattr(lake_reading, "release_memory", lambda: given_back.append(True))
    lake_reading.load_lake(ref.lake_path, ["_row", "_decision"])
    assert given_back == []  # a small read keeps the allocators' memory for the next
    monkeypatch.setattr(lake_reading, "_KEEP_BYTES", 0)  # every read counts as large
    again = lake_reading.load_lake(ref.lake_path, ["_row", "_decision"])
    assert again.num_rows == table.num_rows and given_back == [True]

def test_a_round_of_fewer_comparisons_than_workers_spreads_the_logits_passes(tmp_path, monkeypatch):
    """The regression's first round (the two largest pooled comparisons) on a cluster of three
    workers: each piece runs its logit's passes on the cluster's workers (one task a worker a
    pass), and the tables are the serial run's bit for bit; the second round, of more pieces
    than workers, runs each piece where it is."""
    from distributed import Client

    from aequum.engines.regression import passes

    spec, ref, _ = staged(tmp_path, "hmda.yaml", 6000, lambda raw: raw.update(
        engines={**raw["engines"], "run": ["regression"]}))
    serial = run_engine_pieces("regression", spec, ref.lake_path, ref.categories, None, None)
    spread, real = [], passes.Executor.map

    def counted(self, fn, placed, *args):
        if self.client is not None:
            spread.append(len(placed))
        return real(self, fn, placed, *args)

    monkeypatch.setattr(passes.Executor, "map", counted)
    with Client(processes=False, n_workers=3, threads_per_worker=1, dashboard_address=":0") as client:
        fanned = run_engine_pieces("regression", spec, ref.lake_path, ref.categories, None, None, client)
    assert serial.status == fanned.status == "succeeded", fanned.error
    assert spread and fanned.pieces == serial.pieces > 3
    for t, v in serial.tables.items():
        assert fanned.tables[t].equals(v), t


def test_engines_whose_states_share_names_run_one_after_another_on_one_cluster(tmp_path):
    """The regression's two rounds, then pricing and lenders (each state a dict holding
    "params"), fanned out on one cluster give the serial run's tables: each state goes to the
    workers as one object under a key of its own, never its values under their names, where the
    next round's or engine's state of the same names met the copies still being let go (the
    regression failed with KeyError 'bounds', lenders read pricing's params)."""
    from distributed import Client

    spec, ref, _ = staged(tmp_path, "hmda.yaml", 6000, lambda raw: raw.update(
        engines={**raw["engines"], "run": ["regression", "pricing", "lenders"]}))
    names = ["regression", "pricing", "lenders"]
    serial = {n: run_engine_pieces(n, spec, ref.lake_path, ref.categories, None, None) for n in names}
    with Client(processes=False, n_workers=2, threads_per_worker=1, dashboard_address=":0") as client:
        fanned = {n: run_engine_pieces(n, spec, ref.lake_path, ref.categories, None, None, client) for n in names}
    for n in names:
        assert serial[n].status == "succeeded" and fanned[n].status == "succeeded", (n, fanned[n].error)
        assert fanned[n].pieces == serial[n].pieces >= 2, n
        for t, v in serial[n].tables.items():
            assert fanned[n].tables[t].equals(v), (n, t)


def test_arrow_allocates_with_malloc_in_a_process_that_imports_aequum_first():
    """Arrow's C++ pool is chosen when pyarrow is first imported: aequum chooses malloc
    (``ARROW_DEFAULT_MEMORY_POOL=system``) unless the environment already chose, so a process
    that imports it first, such as a worker of the audit's cluster, gives freed memory back."""
    import os
    import subprocess
    import sys

    code = "import aequum, pyarrow as pa; print(pa.default_memory_pool().backend_name)"  # (the C++ pool)
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    found = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert found.stdout.split() == ["system"]
    chosen = subprocess.run([sys.executable, "-c", code], env={**env, "ARROW_DEFAULT_MEMORY_POOL": "mimalloc"},
                            capture_output=True, text=True, check=True)
    assert chosen.stdout.split() == ["mimalloc"]  # the user's choice stands
