"""The geography engine on the generated LAR: with the lender_redlining world's five lenders that
avoid majority-minority tracts planted, the redlining screen names them and no other lender
beyond the false-discovery level; in the null world (the same applicants, nobody avoiding
anything) it names none beyond that level. And the world itself: its decisions are the null
world's, and only the planted lenders take fewer applications from those tracts."""
from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import yaml

from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import parse_spec
from aequum.engines.generators import hmda_lenders
from aequum.engines.generators.hmda import hmda_truth, iter_hmda_batches, mechanism
from aequum.engines.registry import get_engine

ROWS = 100_000
SCREEN = "minority share > 50%"


def audit(tmp_path, world: str):
    """The geography engine's tables on the generated LAR of ``world`` (the shipped hmda spec)."""
    from conftest import REPO, stage_spec

    raw = yaml.safe_load((REPO / "data" / "specs" / "hmda.yaml").read_text())
    raw["source"].update(rows=ROWS, world=world)
    raw["engines"] = {"run": ["geography"]}
    raw.pop("model")
    spec = parse_spec(raw)
    data = stage_spec(spec, tmp_path, REPO / "data" / "specs")
    return run_serial(get_engine("geography"), data, spec.engines.geography)


def named(out) -> set[str]:
    rows = pl.from_arrow(out["geography_lenders"])
    return set(rows.filter(pl.col("flagged") & (pl.col("measure") == SCREEN))["lender"].to_list())


def test_the_planted_lenders_are_named_and_no_others_beyond_the_false_discovery_level(tmp_path):
    planted = set(mechanism("lender_redlining")["lenders"])
    assert len(planted) == hmda_lenders.PLANTED == 5
    out = audit(tmp_path, "lender_redlining")
    found = named(out)
    assert planted <= found
    # BH at 5 %: among the names, the share of false ones is at most 5 % in expectation; with five
    # true ones, more than one other would be far beyond it
    assert len(found - planted) <= 1
    rows = pl.from_arrow(out["geography_lenders"]).filter(pl.col("lender").is_in(sorted(planted))
                                                          & (pl.col("measure") == SCREEN) & pl.col("flagged"))
    assert (rows["share"] < rows["peer_share"]).all() and set(rows["basis"]) == {"applications", "approvals"}


def test_the_null_world_names_no_lender_beyond_the_false_discovery_level(tmp_path):
    out = audit(tmp_path, "null")
    rows = pl.from_arrow(out["geography_lenders"])
    # every family (measure × basis) is a complete null: BH then holds the chance of any name at 5 %
    assert rows.filter(pl.col("flagged"))["lender"].n_unique() <= 1
    assert rows.filter(pl.col("p_value").is_not_null()).height > 500  # the screen did test
    disparities = pl.from_arrow(out["geography_disparities"])
    assert disparities.filter(pl.col("flagged")).height <= 1
    assert disparities.filter(pl.col("p_value").is_not_null()).height > 50


def test_the_world_moves_applications_not_decisions():
    n = 60_000
    assert hmda_truth(n, 1, "lender_redlining").equals(hmda_truth(n, 1, "null"))
    lar = {w: pl.from_arrow(pa.Table.from_batches([b for b, _ in iter_hmda_batches(n, 1, n, world=w)]))
           for w in ("null", "lender_redlining")}
    planted = mechanism("lender_redlining")["lenders"]

    def high_share(df, lenders):
        rows = df.filter(pl.col("lei").is_in(lenders))
        return (rows["tract_minority_population_percent"].cast(pl.Float64) > 50).mean(), rows.height

    null_share, _ = high_share(lar["null"], planted)
    world_share, _ = high_share(lar["lender_redlining"], planted)
    assert world_share < 0.5 * null_share  # 75 % fewer of those tracts' applications
    others = sorted(set(lar["null"]["lei"]) - set(planted))
    assert high_share(lar["lender_redlining"], others)[0] == pytest.approx(high_share(lar["null"], others)[0], abs=0.01)
    # the market shares: a few national lenders, a long tail, every market served by many lenders
    counts = lar["null"]["lei"].value_counts()["count"].to_numpy()
    assert counts.max() > 0.02 * n and np.median(counts) < 0.002 * n
    assert lar["null"].group_by("derived_msa_md").agg(pl.col("lei").n_unique())["lei"].min() > 100
