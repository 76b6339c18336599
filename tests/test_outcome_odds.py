"""The unadjusted measures of unfavourable decisions in the outcome gaps (denials, in lending):
the unfavourable-rate ratio with its log-method interval and the odds ratio with Woolf's
interval, against statsmodels (Table2x2, and a logit of the decision on the group dummy,
whose coefficient's Wald interval is Woolf's); Haldane's 0.5 added to every cell only when
one is 0."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import statsmodels.api as sm
from statsmodels.stats.contingency_tables import Table2x2

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import parse_spec
from aequum.engines.outcome.engine import OutcomeEngine
from aequum.engines.outcome.stats import odds_ratio_woolf

SPEC = {
    "name": "odds",
    "source": {"kind": "csv", "path": "x.csv", "id_column": "id"},
    "protected": [{"name": "race", "column": "race", "protected_values": ["B"], "reference_values": ["W"]}],
    "decision": {"column": "y", "favourable": [1]},
    "features": [{"name": "x"}],
}


def gaps(group: np.ndarray, decision: np.ndarray, confidence: float = 0.95) -> dict:
    spec = parse_spec({**SPEC, "engines": {"outcome": {"confidence": confidence, "min_group_size": 1}}})
    n = len(decision)
    table = pa.table({"_id": [str(i) for i in range(n)], "_row": pa.array(range(n), pa.int64()),
                      "_g_race": pa.array(group, pa.int8()), "_decision": pa.array(decision, pa.int8()),
                      "x": np.zeros(n)})
    data = AuditData(spec, table)
    (row,) = run_serial(OutcomeEngine(), data, spec.engines.outcome)["outcome_gaps"].to_pylist()
    return row


@pytest.mark.parametrize("cells", [(30, 70, 50, 50), (5, 7, 40, 1), (812, 1188, 900, 1500), (1, 99, 1, 99)])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_woolf_odds_ratio_equals_statsmodels_table2x2(cells, confidence):
    ref = Table2x2(np.array(cells, float).reshape(2, 2))
    odds, low, high, corrected = odds_ratio_woolf(*cells, confidence)
    ref_low, ref_high = ref.oddsratio_confint(alpha=1 - confidence)
    assert not corrected
    assert odds == pytest.approx(ref.oddsratio, rel=1e-12)
    assert (low, high) == (pytest.approx(ref_low, rel=1e-12), pytest.approx(ref_high, rel=1e-12))
    # hand-computed: (30·50)/(70·50) = 0.4286, se = sqrt(1/30 + 1/70 + 1/50 + 1/50) = 0.29600
    if cells == (30, 70, 50, 50) and confidence == 0.95:
        assert odds == pytest.approx(3 / 7) and low == pytest.approx(3 / 7 * np.exp(-1.959964 * 0.296005), rel=1e-5)


@pytest.mark.parametrize("cells", [(0, 40, 12, 30), (10, 0, 12, 30), (3, 17, 0, 0 + 20), (0, 5, 0, 9)])
def test_a_zero_cell_adds_haldanes_half_to_every_cell(cells):
    """Haldane's estimator: Table2x2 of the table with 0.5 added to every cell (its own
    ``shift_zeros`` puts 0.5 in the zero cells only, which is another estimator)."""
    ref = Table2x2(np.array(cells, float).reshape(2, 2) + 0.5)
    odds, low, high, corrected = odds_ratio_woolf(*cells, 0.95)
    assert corrected
    assert odds == pytest.approx(ref.oddsratio, rel=1e-12)
    assert (low, high) == tuple(pytest.approx(v, rel=1e-12) for v in ref.oddsratio_confint(alpha=0.05))


def test_an_empty_row_has_no_odds_ratio():
    assert odds_ratio_woolf(0, 0, 10, 20, 0.95) == (None, None, None, False)
    assert odds_ratio_woolf(10, 20, 0, 0, 0.95) == (None, None, None, False)


@pytest.mark.parametrize("seed", [0, 1])
def test_gap_rows_equal_statsmodels_logit_and_risk_ratio(seed):
    """Records with a planted denial gap: the engine's odds ratio and Woolf interval equal a
    statsmodels logit of the unfavourable decision on the protected group's dummy (1e-6
    relative); its unfavourable-rate ratio and interval equal Table2x2's risk ratio."""
    rng = np.random.default_rng(seed)
    group = rng.permutation(np.r_[np.ones(700, np.int8), np.zeros(2300, np.int8)])
    denied = rng.random(group.size) < np.where(group == 1, 0.31, 0.17)
    row = gaps(group, (~denied).astype(np.int8), confidence=0.95)

    fit = sm.Logit(denied.astype(float), sm.add_constant(group.astype(float))).fit(disp=0)
    assert row["odds_ratio"] == pytest.approx(np.exp(fit.params[1]), rel=1e-6)
    low, high = np.exp(fit.conf_int(alpha=0.05)[1])
    assert row["odds_ratio_ci_low"] == pytest.approx(low, rel=1e-6)
    assert row["odds_ratio_ci_high"] == pytest.approx(high, rel=1e-6)

    a, b = int(denied[group == 1].sum()), int((~denied[group == 1]).sum())
    c, d = int(denied[group == 0].sum()), int((~denied[group == 0]).sum())
    table = Table2x2(np.array([[a, b], [c, d]], float))
    assert row["unfavourable_rate"] == pytest.approx(a / (a + b)) and row["reference_unfavourable_rate"] == pytest.approx(c / (c + d))
    assert row["unfavourable_rate_ratio"] == pytest.approx(table.riskratio, rel=1e-12)
    ref_low, ref_high = table.riskratio_confint(alpha=0.05)
    assert row["unfavourable_ratio_ci_low"] == pytest.approx(ref_low, rel=1e-12)
    assert row["unfavourable_ratio_ci_high"] == pytest.approx(ref_high, rel=1e-12)
    assert row["odds_ratio"] > row["unfavourable_rate_ratio"] > 1.4  # the planted gap, in both measures
    assert row["note"] is None


def test_a_group_with_no_denials_gets_the_corrected_odds_ratio_and_says_so():
    group = np.r_[np.ones(40, np.int8), np.zeros(100, np.int8)]
    decision = np.r_[np.ones(40, np.int8), np.ones(80, np.int8), np.zeros(20, np.int8)]
    row = gaps(group, decision)
    ref = Table2x2(np.array([[0, 40], [20, 80]], float) + 0.5)
    assert row["odds_ratio"] == pytest.approx(ref.oddsratio, rel=1e-12)
    assert "Haldane" in row["note"]
    assert row["unfavourable_rate_ratio"] == 0.0 and row["unfavourable_ratio_ci_low"] is None


def test_a_reference_with_no_denials_leaves_the_rate_ratio_undefined_not_an_error():
    group = np.r_[np.ones(40, np.int8), np.zeros(100, np.int8)]
    decision = np.r_[np.zeros(10, np.int8), np.ones(30, np.int8), np.ones(100, np.int8)]
    row = gaps(group, decision)
    assert row["unfavourable_rate_ratio"] is None and row["unfavourable_ratio_ci_low"] is None
    assert row["odds_ratio"] > 1 and "Haldane" in row["note"]
