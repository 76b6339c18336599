"""CEC's factual sample (engines.cec.sample): stratified by group × stratum, drawn in record
order, matched against the whole other-group pool, reported in cec_summary."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.models import TorchMLP
from aequum.engines.matching.cec.engine import CECEngine
from aequum.engines.matching.cec.matching import match
from aequum.engines.matching.cec.params import CECParams
from aequum.tests.test_cec import spec_for, world

NAMES = ["x1", "x2", "p", "a"]


def mlp() -> TorchMLP:
    torch.manual_seed(7)
    return TorchMLP(NAMES, [8], 1)


def run(table, **params):
    model = mlp()
    return run_serial(CECEngine(), AuditData(spec_for(NAMES), table, {}, model), CECParams(**params))


def allocation(counts: dict, size: int) -> dict:
    """Proportional allocation by largest remainders (ties: larger stratum, then smaller key)."""
    total = sum(counts.values())
    quota = {k: c * size / total for k, c in counts.items()}
    alloc = {k: int(np.floor(q)) for k, q in quota.items()}
    rest = size - sum(alloc.values())
    for k in sorted(counts, key=lambda k: (-(quota[k] - alloc[k]), -counts[k], k))[:rest]:
        alloc[k] += 1
    return alloc


def test_sampled_pairs_are_the_full_runs_pairs_of_the_sampled_factuals():
    table = world(n=700, seed=11)
    full = pl.from_arrow(run(table)["cec_pairs"])
    sampled = pl.from_arrow(run(table, sample=90, sample_seed=3)["cec_pairs"])
    assert sampled.height == 90 and sampled["record_id"].is_sorted()
    restricted = full.filter(pl.col("record_id").is_in(sampled["record_id"].to_list()))
    assert sampled.equals(restricted)
    # the counterparts come from the whole pool, not from the sample
    assert not set(sampled["counterpart_id"]).issubset(set(sampled["record_id"]))


@pytest.mark.parametrize("size", [1, 57, 200])
def test_the_sample_is_stratified_by_group_and_stratum(size):
    table = world(n=600, seed=12)
    df = pl.from_arrow(table)
    counts = {(int(r["_g_a"]), int(r["_label"])): r["len"]
              for r in df.group_by(["_g_a", "_label"]).len().to_dicts()}
    pairs = pl.from_arrow(run(table, sample=size)["cec_pairs"])
    got = {(int(r["group"]), int(r["stratum"])): r["len"] for r in pairs.group_by(["group", "stratum"]).len().to_dicts()}
    # strata keys in the engine: stratum * 2 + group (so ties break by that key)
    want = allocation({y * 2 + g: n for (g, y), n in counts.items()}, size)
    assert got == {(k % 2, k // 2): v for k, v in want.items() if v}
    assert sum(got.values()) == size


def test_sampling_is_reported_in_the_summary():
    table = world(n=600, seed=13)
    full = pl.from_arrow(run(table)["cec_summary"])
    s = pl.from_arrow(run(table, sample=100, sample_seed=1)["cec_summary"])
    assert s["population"].to_list() == full["records"].to_list()
    assert s.filter(pl.col("group") == "all")["records"].item() == 100
    assert s["records"].sum() == 200 and (s["records"] <= s["population"]).all()
    assert "stratified sample of 100 of 600 records" in s["note"][0]
    assert full["note"].is_null().all() and (full["population"] == full["records"]).all()


def test_sample_does_not_depend_on_row_order_and_seed_matters():
    table = world(n=500, seed=14)
    one = run(table, sample=60, sample_seed=5)
    rev = run(table.take(np.arange(table.num_rows)[::-1]), sample=60, sample_seed=5)
    for name in ("cec_pairs", "cec_summary", "cec_regimes", "cec_features"):
        assert one[name].equals(rev[name]), name
    other = run(table, sample=60, sample_seed=6)
    assert one["cec_pairs"]["record_id"] != other["cec_pairs"]["record_id"]


@pytest.mark.parametrize("size", [400, 401, 10_000])
def test_a_sample_at_least_the_population_is_the_full_run(size):
    table = world(n=400, seed=15)
    full, sampled = run(table), run(table, sample=size)
    for name in ("cec_pairs", "cec_summary", "cec_regimes", "cec_features"):
        assert full[name].equals(sampled[name]), name


def test_match_on_queried_positions_searches_the_whole_pool():
    rng = np.random.default_rng(16)
    Z = rng.normal(size=(300, 2))
    group = rng.integers(-1, 2, 300).astype(np.int8)
    stratum = rng.integers(0, 2, 300).astype(np.int8)
    full = match(Z, group, stratum)
    chosen = np.flatnonzero(group >= 0)[::7]
    part = match(Z, group, stratum, 0.0, chosen)
    keep = np.isin(full.factual, chosen)
    assert part.factual.tolist() == chosen.tolist()
    assert part.counterpart.tolist() == full.counterpart[keep].tolist()
    assert np.array_equal(part.distance, full.distance[keep])


def test_sample_must_be_positive():
    with pytest.raises(ValueError, match="sample"):
        CECParams(sample=0)


def matched(data, params):
    """The engine's second-round state: the pools searched (the first round), then next_round."""
    engine = CECEngine()
    first = engine.prepare(data, params)
    state, _ = engine.next_round(first, [engine.run_piece(first, job) for job in engine.pieces(first)])
    return state


def test_the_state_holds_only_the_sampled_factuals_and_their_counterparts():
    """What the workers receive for the pairs grows with the sample, not with the dataset (the
    first round, the pools' searches, reads the merit features of every record)."""
    table = world(n=800, seed=17)
    data = AuditData(spec_for(NAMES), table, {}, mlp())
    state = matched(data, CECParams(sample=40))
    pairs = pl.from_arrow(run(table, sample=40)["cec_pairs"])
    involved = set(pairs["record_id"]) | set(pairs["counterpart_id"].drop_nulls())
    assert sorted(involved) == state.ids.tolist() and len(state.inputs) == len(involved) < 80
    full = matched(data, CECParams())
    assert len(full.ids) == 800
