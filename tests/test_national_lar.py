"""The lending market's national shape (issue 48): 5,000 lenders of Zipf sizes, 400 markets,
70,000 tracts, at any row count, streamed batch by batch."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from aequum.engines.generators import catalogue, lar_market, lar_national, lar_structure as st

SHAPE = catalogue.shape("hmda_market", national=True)


def national(rows: int, seed: int = 0, batch_rows: int = 250_000, world: str = "null"):
    pairs = list(lar_market.iter_lar_batches(rows, seed, batch_rows, world=world, **SHAPE))
    return pa.Table.from_batches([d for d, _ in pairs]), pa.Table.from_batches([t for _, t in pairs])


def test_the_structure_has_the_national_counts():
    ms = st.markets(False, SHAPE["n_markets"])
    codes = [m[0] for m in ms]
    assert len(ms) == 400 and len(set(codes)) == 400 and codes[-1] == "99999"
    assert codes[:12] == [m[0] for m in st.METROS]  # the twelve real metros first
    tr = st.tracts(False, SHAPE["n_markets"])
    assert len(tr["tract"]) == lar_national.NATIONAL_TRACTS == 70_000 and len(set(tr["tract"])) == 70_000
    assert all(len(t) == 11 for t in tr["tract"][:1000])
    per_market = np.bincount(tr["market"], minlength=400)
    assert per_market.min() >= lar_national.MIN_TRACTS and per_market[0] > per_market[-2]
    u = st.lenders(False, SHAPE["n_lenders"], SHAPE["n_markets"])
    assert len(u["lei"]) == 5000 and len(set(u["lei"])) == 5000 and {len(x) for x in u["lei"]} == {20}
    present = u["volume"] > 0
    assert present[:50].all() and present.sum(0).min() >= 50  # the 50 largest in every market
    assert set(present[50:].sum(1)) <= {1, 2, 3, 4}


def test_the_default_market_is_unchanged_by_the_national_shape():
    """Twelve metros, 250 tracts each, 8 lenders in every market: the shape the worlds' tests know."""
    assert len(st.markets()) == 13 and len(st.tracts()["tract"]) == 13 * st.TRACTS
    assert (st.lenders()["volume"] > 0).all(axis=1).sum() >= st.NATIONAL == st.national_count(st.N_LENDERS)
    assert st.lei(7) == "549300070000056667XX"


def test_a_national_sample_has_every_market_most_lenders_and_zipf_sizes():
    data, truth = national(100_000)
    assert data.num_rows == truth.num_rows == 100_000
    assert pc.count_distinct(data["derived_msa_md"]).as_py() == 400
    counts = np.sort(np.array(pc.value_counts(data["lei"]).field("counts")))[::-1]
    assert len(counts) > 4500  # of 5,000; the smallest expect a few applications here
    ranks = np.arange(1, 501)
    slope = np.polyfit(np.log(ranks), np.log(counts[:500]), 1)[0]
    assert -1.25 < slope < -0.8  # Zipf: size ∝ 1/rank
    assert counts[0] / counts[99] > 40  # the largest lender ~100x the 100th (Zipf 1)
    tracts = pc.count_distinct(data["census_tract"]).as_py()
    assert 15_000 < tracts <= 70_000
    assert set(pc.unique(data["census_tract"]).to_pylist()) <= set(st.tracts(False, SHAPE["n_markets"])["tract"])


def test_same_seed_same_rows_other_seed_other_rows():
    a, _ = national(12_000, seed=3)
    b, _ = national(12_000, seed=3)
    c, _ = national(12_000, seed=4)
    assert a.equals(b) and not a.equals(c)


def test_chunks_give_the_rows_of_one_chunk():
    one, truth_one = national(60_123, batch_rows=60_123, world="named_score_penalty")
    many, truth_many = national(60_123, batch_rows=7_001, world="named_score_penalty")
    assert one.equals(many) and truth_one.equals(truth_many)
    first = national(lar_market.BLOCK, world="named_score_penalty")[0]
    assert one.slice(0, lar_market.BLOCK).equals(first)  # a longer file begins with its whole blocks


def test_generation_is_streamed_batch_by_batch():
    """A 16M-row national year yields its first batch without drawing the rest."""
    stream = lar_market.iter_lar_batches(16_000_000, 0, 50_000, world="null", **SHAPE)
    data, truth = next(stream)
    assert data.num_rows == truth.num_rows == 50_000
    stream.close()


def test_generate_national_from_the_command_line(tmp_path, capsys):
    from aequum.flows.commands.cli import main

    out = tmp_path / "national.parquet"
    assert main(["generate", "hmda", "--national", "--rows", "3000", "--world", "null", "--out", str(out)]) == 0
    table = pq.read_table(out)
    assert table.num_rows == 3000 and "lei" in table.column_names and len(table.column_names) == 99
    assert (tmp_path / "national_truth.parquet").is_file() and (tmp_path / "national_mechanism.json").is_file()
    assert main(["generate", "loan", "--national", "--rows", "10", "--out", str(tmp_path / "x.parquet")]) == 2
    assert "--national is for the hmda_market" in capsys.readouterr().err
    with pytest.raises(ValueError, match="national shape"):
        catalogue.shape("hmda_single", True)
