"""The lenders engine on the generated lending market (generator ``hmda_market``: 60 lenders of
Zipf sizes in 12 metros, race tied to lender and market, a credit score the LAR lacks that drives
denial and price), against the world's truth:

* ``null`` (every lender fair): at most 5 % of the testable lenders flagged in any family;
* ``named_score_penalty`` / ``named_pricing_penalty``: each of the three planted lenders named
  (flagged for denial / rate spread in the Black or the Hispanic comparison), its interval
  covering the planted term *on the engine's scale* (tests/lenders_world.planted_sizes: the
  term's effect on the outcome, from the truth's ``harmed`` / ``rate_spread_overcharge``,
  averaged as the engine averages a lender's group gap), and no other lender flagged, nor found
  significantly better, on the planted outcome;
* ``engines.lenders.focus``: one lender's rows, tested alone against peers from the whole file.

Rows: 200k applications (600k for the denial penalty, whose effect on the denial rate is 2-8
points); seeds fixed."""
from __future__ import annotations

import numpy as np
import pytest

from aequum.engines.core.engine import run_serial
from aequum.engines.generators.lar_worlds import mechanism
from aequum.engines.registry import get_engine
from lenders_world import market_data, planted_sizes

SEED = 3
COMPARED = ["race=Black or African American", "ethnicity"]   # the planted terms' groups
WORLDS = {"named_score_penalty": ("denial", 600_000), "named_pricing_penalty": ("rate_spread", 200_000)}


def run(data):
    return run_serial(get_engine("lenders"), data, data.spec.engines.lenders)["lender_disparities"].to_pandas()




def test_the_fair_world_flags_at_most_five_percent_of_testable_lenders():
    got = run(market_data("null", 200_000, SEED))
    tested = got[got.p_value.notna()]
    counts = tested.groupby(["attribute", "field"]).agg(tested=("lei", "size"), flagged=("flagged", "sum"))
    assert (counts.tested >= 40).all(), counts
    assert (counts.flagged <= 0.05 * counts.tested).all(), counts
    assert int(counts.flagged.sum()) == 0   # the target, met at this size and seed


@pytest.mark.parametrize("world", list(WORLDS))
def test_planted_lenders_are_named_with_intervals_covering_the_planted_size(world):
    field, rows = WORLDS[world]
    data = market_data(world, rows, SEED)
    got = run(data)
    planted = mechanism(world)["planted_lenders"]
    assert len(planted) == 3
    on = got[got.field == field]
    for lei in planted:
        assert on[(on.lei == lei) & on.attribute.isin(COMPARED)].flagged.any(), (lei, field)
    for attribute in COMPARED:
        sizes = planted_sizes(data, world, rows, SEED, field, attribute, planted)
        rows_ = on[on.attribute == attribute].set_index("lei")
        for lei, size in sizes.items():
            assert size > 0.01                       # the term moves the outcome at this lender
            r = rows_.loc[lei]
            assert r.ci_low <= size <= r.ci_high, (attribute, lei, size, r.estimate, r.ci_low, r.ci_high)
    # no other lender flagged on the planted outcome, nor found significantly better than its peers
    others = on[~on.lei.isin(planted)]
    assert not others.flagged.any(), others[others.flagged]
    assert not others.significant.any(), others[others.significant]


def test_focus_on_one_lender_reports_and_tests_its_rows_alone():
    world = "named_pricing_penalty"
    data = market_data(world, 200_000, SEED)
    whole = run(data)
    planted = mechanism(world)["planted_lenders"]
    fair = whole[(whole.field == "rate_spread") & ~whole.lei.isin(planted) & whole.p_value.notna()]
    fair_lei = fair.sort_values("n").lei.iloc[-1]           # the largest fair lender
    for lei, named in ((planted[0], True), (fair_lei, False)):
        focused = run(market_data(world, 200_000, SEED, {"focus": [lei]}))
        assert set(focused.lei) == {lei}
        assert len(focused) == len(whole[whole.lei == lei])   # every comparison × field of that lender
        spread = focused[(focused.field == "rate_spread") & focused.attribute.isin(COMPARED)]
        assert spread.flagged.any() == named
        # the same estimate against the same peers; one test: its p-value is its own
        same = whole[whole.lei == lei].set_index(["attribute", "field"])
        for r in focused.itertuples():
            assert r.estimate == pytest.approx(same.loc[(r.attribute, r.field)].estimate, abs=1e-12)
            if np.isfinite(r.p_value):
                assert r.p_adjusted == pytest.approx(r.p_value)
                # shrunk towards the whole file's prior: θ* = μ + τ²/(τ² + s²) (θ̂ − μ)
                mu, tau = same.loc[(r.attribute, r.field)].prior_mean, same.loc[(r.attribute, r.field)].prior_sd
                assert (r.prior_mean, r.prior_sd) == pytest.approx((mu, tau))
                b = tau ** 2 / (tau ** 2 + r.se ** 2)
                assert r.shrunk_estimate == pytest.approx(mu + b * (r.estimate - mu), abs=1e-12)


def test_focus_names_an_unknown_lender_in_one_line():
    data = market_data("null", 5_000, SEED, {"focus": ["NOT-A-LEI"]})
    with pytest.raises(ValueError, match=r"engines.lenders.focus: \['NOT-A-LEI'\] are not lenders"):
        run(data)
