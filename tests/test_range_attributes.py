"""A protected attribute defined by numeric ranges (a tract's minority share > 50% against
< 20%): the spec's checks, the staged groups, and the engines asking about neighbourhoods."""
from __future__ import annotations

import numpy as np
import pyarrow.csv as pacsv
import pytest
import yaml

from aequum.engines.core.spec import Range, SpecError, parse_spec

BASE = {
    "name": "tracts",
    "source": {"kind": "csv", "path": "x.csv", "id_column": "id"},
    "protected": [{"name": "tract", "column": "minority", "protected_range": {"gt": 50},
                   "reference_range": {"lt": 20}, "unmapped": "exclude"}],
    "decision": {"column": "approved", "favourable": [1]},
    "features": [{"name": "income", "type": "numeric"}],
    "engines": {"run": ["outcome", "regression"]},
}


def spec(**protected):
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    raw["protected"][0].update(protected)
    return parse_spec(raw)


def test_ranges_parse_and_say_what_they_hold():
    p = spec().protected[0]
    assert p.by_range and p.protected_range.text() == "> 50" and p.reference_range.text() == "< 20"
    assert Range(ge=10, lt=20).text() == ">= 10 and < 20"
    assert not Range(gt=50).overlaps(Range(le=50)) and Range(ge=50).overlaps(Range(le=50))
    assert Range(ge=10, le=30).overlaps(Range(gt=20)) and not Range(lt=0).overlaps(Range(gt=0))


@pytest.mark.parametrize("change, message", [
    ({"reference_range": {"lt": 60}}, "overlap"),
    ({"reference_range": None}, "go together"),
    ({"protected_values": ["a"]}, "either ranges or values"),
    ({"compare": "each"}, "compared pooled"),
    ({"protected_range": {}}, "at least one bound"),
    ({"protected_range": {"gt": 5, "ge": 4}}, "one lower bound"),
    ({"protected_range": {"gt": 5, "lt": 5}}, "empty range"),
])
def test_bad_ranges_are_named(change, message):
    with pytest.raises(SpecError, match=message):
        spec(**change)


def test_values_are_still_required_without_ranges():
    with pytest.raises(SpecError, match="needs protected_values and reference_values"):
        spec(protected_range=None, reference_range=None)


def test_staged_groups_follow_the_ranges_and_engines_compare_them(tmp_path):
    from conftest import stage_spec
    from aequum.engines.core.engine import run_serial
    from aequum.engines.registry import get_engine

    rng = np.random.default_rng(3)
    n = 4000
    minority = np.round(rng.uniform(0, 100, n), 1)
    minority[:5] = [50.0, 50.1, 20.0, 19.9, np.nan]  # the bounds themselves, and a missing share
    income = rng.normal(80, 20, n)
    redlined = minority > 50
    approved = (income / 20 - 1.5 * redlined + rng.normal(0, 1, n) > 2.5).astype(int)
    text = ["NA" if np.isnan(m) else f"{m:.1f}" for m in minority]
    lines = ["id,minority,income,approved"] + [f"{i},{t},{x:.2f},{a}" for i, (t, x, a) in
                                                enumerate(zip(text, income, approved))]
    (tmp_path / "x.csv").write_text("\n".join(lines) + "\n")
    s = parse_spec(BASE)
    data = stage_spec(s, tmp_path, tmp_path)
    ids = np.asarray(data.id_text.to_pylist(), dtype=int)
    groups = np.asarray(data.groups["tract"])
    expected = np.where(minority > 50, 1, np.where(minority < 20, 0, -1))[ids]  # -1: in neither range
    assert np.array_equal(groups == 1, expected == 1) and np.array_equal(groups == 0, expected == 0)
    at = {int(i): g for i, g in zip(ids, groups) if i < 5}  # 50.0 and 20.0 are in neither; NA neither
    assert at[1] == 1 and at[3] == 0 and at[0] not in (0, 1) and at[2] not in (0, 1) and at[4] not in (0, 1)
    assert "minority" not in data.table.column_names  # a range attribute's numbers are not staged
    # the outcome and regression engines ask about the neighbourhood
    out = run_serial(get_engine("outcome"), data, s.engines.outcome)["outcome_gaps"].to_pylist()
    (gap,) = [g for g in out if g["attribute"] == "tract"]
    assert gap["n_group"] == int((expected == 1).sum()) and gap["n_reference"] == int((expected == 0).sum())
    assert gap["favourable_rate"] < gap["reference_rate"]
    reg = run_serial(get_engine("regression"), data, s.engines.regression)["regression_estimates"].to_pylist()
    assert reg[0]["attribute"] == "tract" and reg[0]["estimate"] > 0.1 and reg[0]["significant"]
