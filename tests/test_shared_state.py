"""flows.store.shared_state: an engine's state shared through mapped files gives the same results as
the state broadcast to the workers or run in one process."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from aequum.flows.store import shared_state
from aequum.flows.store.shared_state import SharedState, forget, share
from test_row_order import canonical, small_raw, source_table, staged


@dataclass
class _Part:
    codes: np.ndarray
    label: str


def test_a_shared_state_is_the_state_with_its_large_arrays_mapped_read_only(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_state, "FILE_ARRAY_BYTES", 1024)
    rng = np.random.default_rng(3)
    y = rng.normal(size=5_000)
    state = {"y": y, "again": y, "small": np.arange(3), "codes": [_Part(rng.integers(0, 9, 4_000).astype(np.int8), "a")],
             "strided": rng.normal(size=(400, 6))[:, 2], "params": {"k": 3}, "words": np.array(["x", "y"] * 800, object)}
    loaded, handle = share(state, tmp_path / "s")
    assert isinstance(handle, SharedState) and Path(handle.path).parent == tmp_path / "s"
    assert np.array_equal(loaded["y"], y) and loaded["again"] is loaded["y"]  # one array, one file
    assert np.array_equal(loaded["codes"][0].codes, state["codes"][0].codes) and loaded["codes"][0].label == "a"
    assert loaded["codes"][0].codes.dtype == np.int8 and np.array_equal(loaded["strided"], state["strided"])
    assert loaded["params"] == {"k": 3} and list(loaded["words"]) == list(state["words"])
    assert isinstance(loaded["y"].base, np.memmap) and not loaded["y"].flags.writeable
    assert loaded["small"].flags.writeable  # small arrays travel in the pickle
    with pytest.raises(ValueError, match="read-only"):
        loaded["y"][0] = 1.0
    files = sorted((tmp_path / "s").glob("array-*.npy"))
    assert len(files) == 3  # y, the codes, the strided column (as a contiguous copy)
    # a later round's state keeps the first's arrays: they are not written again
    again, handle2 = share({**loaded, "starts": {"u": 1.5}}, tmp_path / "s")
    assert sorted((tmp_path / "s").glob("array-*.npy")) == files and handle2 != handle
    assert np.array_equal(again["y"], y) and again["starts"] == {"u": 1.5}
    # ... and, in the process that holds the first round's arrays, not mapped a second time
    assert again["y"] is loaded["y"] and again["codes"][0].codes is loaded["codes"][0].codes
    assert handle2.load() is handle2.load()  # read once per process
    same, handle3 = share(again, tmp_path / "s")  # the state loaded from there: as it is
    assert same is again and handle3 == handle2
    forget()


@pytest.mark.parametrize("case", ["hmda", "loan"])
def test_engines_give_the_same_tables_with_their_state_shared_by_two_worker_processes(tmp_path, monkeypatch, case):
    """Every engine of the spec: in one process, and fanned out on a 2-process LocalCluster
    with every state shared through files (the sizes that decide it set to nothing)."""
    from distributed import Client, LocalCluster

    from aequum.flows import engine_tasks
    from aequum.flows.cluster import local_cluster_options
    from aequum.flows.engine_tasks import run_engine_pieces

    raw, rows = small_raw(case)
    spec, ref, model, _quality, cfs = staged(raw, source_table(raw, rows, tmp_path), tmp_path)

    alone = {}
    for name in spec.engines.run:
        outcome = run_engine_pieces(name, spec, ref.lake_path, ref.categories, model, cfs)
        assert outcome.status == "succeeded", (name, outcome.error)
        alone[name] = {t: canonical(v) for t, v in outcome.results().items()}

    monkeypatch.setattr(engine_tasks, "SHARE_ABOVE", 0)
    monkeypatch.setattr(shared_state, "FILE_ARRAY_BYTES", 0)
    written = []
    real_share = engine_tasks.share

    def counted(state, folder):
        written.append(folder)
        return real_share(state, folder)

    monkeypatch.setattr(engine_tasks, "share", counted)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, **local_cluster_options()) as cluster, \
            Client(cluster) as client:
        for name in spec.engines.run:
            spool = tmp_path / "spool"
            outcome = run_engine_pieces(name, spec, ref.lake_path, ref.categories, model, cfs, client,
                                        spool=str(spool))
            assert outcome.status == "succeeded", (name, outcome.error)
            got = {t: canonical(v) for t, v in outcome.results().items()}
            assert got == alone[name], name
    assert written  # the states went through files
    forget()
