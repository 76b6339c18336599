"""Outcome metrics against hand-computed values; empty groups, single classes, intersections."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import parse_spec
from aequum.engines.core.models import auc
from aequum.engines.outcome.engine import OutcomeEngine, two_proportion_p
from aequum.engines.outcome.params import OutcomeParams

SPEC = parse_spec({
    "name": "o",
    "source": {"kind": "csv", "path": "x.csv", "id_column": "id"},
    "protected": [
        {"name": "sex", "column": "sex", "protected_values": ["F"], "reference_values": ["M"]},
        {"name": "race", "column": "race", "protected_values": ["B"], "reference_values": ["W"]},
    ],
    "decision": {"column": "y", "favourable": [1]},
    "label": {"column": "repaid", "positive": [1]},
    "features": [{"name": "x"}],
})

#            F  F  F  F  M  M  M  M  M  M
SEX = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
RACE = [1, 0, 1, 0, 1, 0, 0, 0, 0, 0]
DEC = [1, 0, 0, 0, 1, 1, 1, 0, 1, 0]
LAB = [1, 1, 0, 0, 1, 1, 0, 0, 1, 1]


def data(sex=SEX, race=RACE, dec=DEC, lab=LAB):
    n = len(dec)
    t = pa.table({"_id": [str(i) for i in range(n)], "_row": pa.array(range(n), pa.int64()),
                  "_g_sex": pa.array(sex, pa.int8()), "_g_race": pa.array(race, pa.int8()),
                  "_decision": pa.array(dec, pa.int8()), "_label": pa.array(lab, pa.int8()),
                  "x": [float(i) for i in range(n)]})
    return AuditData(SPEC, t)


def rows(table, **where):
    return [r for r in table.to_pylist() if all(r[k] == v for k, v in where.items())]


def test_hand_computed_sex_metrics_and_gaps():
    out = run_serial(OutcomeEngine(), data(), OutcomeParams(min_group_size=1))
    (f,) = rows(out["outcome_metrics"], attribute="sex", group_name="protected")
    (m,) = rows(out["outcome_metrics"], attribute="sex", group_name="reference")
    # F: decisions 1,0,0,0 labels 1,1,0,0 -> tp 1 fn 1 fp 0 tn 2
    assert (f["n"], f["n_favourable"], f["tp"], f["fn"], f["fp"], f["tn"]) == (4, 1, 1, 1, 0, 2)
    assert f["favourable_rate"] == 0.25 and f["tpr"] == 0.5 and f["fpr"] == 0.0
    assert f["accuracy"] == 0.75 and f["precision"] == 1.0 and f["f1"] == pytest.approx(2 / 3)
    # M: decisions 1,1,1,0,1,0 labels 1,1,0,0,1,1 -> tp 3 fn 1 fp 1 tn 1
    assert (m["tp"], m["fn"], m["fp"], m["tn"]) == (3, 1, 1, 1)
    assert m["favourable_rate"] == pytest.approx(4 / 6) and m["tpr"] == 0.75 and m["fpr"] == 0.5
    (g,) = rows(out["outcome_gaps"], attribute="sex")
    assert g["spd"] == pytest.approx(0.25 - 4 / 6)
    assert g["di_ratio"] == pytest.approx(0.25 / (4 / 6)) and g["four_fifths_violation"] is True
    assert g["tpr_gap"] == pytest.approx(-0.25) and g["fpr_gap"] == pytest.approx(-0.5)
    assert g["eo_gap"] == pytest.approx(0.5)
    assert 0 < g["spd_p_value"] < 1


def test_intersection_has_all_four_subgroups():
    out = run_serial(OutcomeEngine(), data(), SPEC.engines.outcome)
    inter = rows(out["outcome_metrics"], attribute="sex&race")
    assert sorted(r["n"] for r in inter) == [1, 2, 2, 5]
    assert len(rows(out["outcome_gaps"], attribute="sex&race")) == 3


def test_empty_group_gives_nulls_and_a_note():
    out = run_serial(OutcomeEngine(), data(sex=[0] * 10), SPEC.engines.outcome)
    (f,) = rows(out["outcome_metrics"], attribute="sex", group_name="protected")
    assert f["n"] == 0 and f["favourable_rate"] is None and "no members" in f["note"]
    (g,) = rows(out["outcome_gaps"], attribute="sex")
    assert g["spd"] is None and g["di_ratio"] is None and "no members" in g["note"]


def test_single_label_class_is_noted():
    out = run_serial(OutcomeEngine(), data(lab=[1] * 10), SPEC.engines.outcome)
    (f,) = rows(out["outcome_metrics"], attribute="sex", group_name="protected")
    assert f["fpr"] is None and "single label class" in f["note"]


def test_auc_and_z_test_reference_values():
    assert auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])) == 0.75
    assert auc(np.array([0, 1]), np.array([1.0, 1.0])) == 0.5
    assert auc(np.array([1]), np.array([1.0])) is None
    # 30/100 vs 50/100: pooled p = 0.4, z = -0.2 / sqrt(0.24 * 0.02) = -2.887
    assert two_proportion_p(30, 100, 50, 100) == pytest.approx(0.003892, abs=1e-5)


@pytest.mark.parametrize("name", ["loan", "cec_synthetic", "hmda"])
def test_shipped_generated_specs_stage_and_measure(staged_data, name):
    from conftest import REPO

    data = staged_data(REPO / "data" / "specs" / f"{name}.yaml")
    out = run_serial(OutcomeEngine(), data, data.spec.engines.outcome)
    gaps = out["outcome_gaps"].to_pylist()
    assert gaps and all(g["n_group"] > 0 and g["n_reference"] > 0 for g in gaps)
    if name == "hmda":  # the planted penalty shows up as a large race gap in outcomes
        race = next(g for g in gaps if g["attribute"] == "race")
        assert race["spd"] < -0.03 and race["spd_p_value"] < 1e-6


@pytest.mark.parametrize("attributes", [1, 3, 4, 6])  # keys in uint8 up to 3 attributes, uint16 beyond
@pytest.mark.parametrize("labelled", [False, True])
def test_joint_counts_equal_counting_each_cell(attributes, labelled):
    from aequum.engines.outcome.engine import joint_counts

    rng = np.random.default_rng(attributes)
    n = 5_000
    groups = [rng.integers(-1, 2, n).astype(np.int8) for _ in range(attributes)]
    decision = rng.integers(0, 2, n).astype(np.int8)
    label = rng.integers(0, 2, n).astype(np.int8) if labelled else None
    counts = joint_counts(groups, decision, label)
    assert counts.shape == (3,) * attributes + (2, 2) and counts.dtype == np.int64
    expected = np.zeros_like(counts)
    for i in range(n):  # one record at a time: the definition
        cell = tuple(int(g[i]) + 1 for g in groups) + (int(decision[i]), int(label[i]) if labelled else 0)
        expected[cell] += 1
    assert (counts == expected).all()
    reversed_rows = joint_counts([g[::-1] for g in groups], decision[::-1], None if label is None else label[::-1])
    assert (reversed_rows == counts).all()
