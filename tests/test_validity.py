"""Findings that hold up (issue 35): on lender worlds with a known answer, the shipped HMDA specs
call no fair lender discriminatory, and name a penalising one (``aequum bench validity``).

Each world is generated with a seed the engines were never tuned on (7), run through every
engine of the bench's quick set (outcome, reasons, regression, CST) in this process and written
to a scratch warehouse, whose ``audit.findings`` is read as a user would read it."""
from __future__ import annotations

import pytest

from aequum.flows.bench_validity import audit_world, table

ROWS, SEED = 30_000, 7
ENGINES = ["outcome", "reasons", "regression", "cst"]


@pytest.fixture(scope="module")
def null_world(tmp_path_factory):
    return {audit: audit_world(audit, "null", ROWS, SEED, tmp_path_factory.mktemp(audit), ENGINES)
            for audit in ("external", "internal")}


def test_null_world_external_no_evidence_only_disparities(null_world):
    findings = null_world["external"]
    assert not [f for f in findings if f["evidence"]], "a fair lender called discriminatory"
    # the raw disparities are there, and reported as raw disparities
    outcome = [f for f in findings if f["engine"] == "outcome"]
    assert any(f["flagged"] for f in outcome) and all(f["estimand"] == "raw disparity" for f in outcome)
    # the controlled disparity is assessed and does not survive an unobserved factor as strong
    # as the observed controls (the credit history the LAR lacks)
    regression = [f for f in findings if f["engine"] == "regression"]
    assert regression and all(f["robust"] is not True for f in regression)
    assert all(f["robustness_value"] is not None for f in regression if f["attribute"] in ("race", "ethnicity"))
    # no reason is flagged in the penalty direction
    assert not [f for f in findings if f["engine"] == "reasons" and f["flagged"]]
    assert not any(f["affected"] for f in findings)


def test_null_world_internal_direct_effect_flags_at_most_five_percent(null_world):
    findings = null_world["internal"]
    assert not [f for f in findings if f["evidence"]]
    st = [f for f in findings if "flagged_share" in f]
    assert st and all(f["flagged_share"] <= 0.05 for f in st), st
    # the linear probability model approximates the lender's threshold rule, so on the fair
    # lender's own records it can leave a significant group residual (flagged); the benchmark
    # explains it away, so it is not robust and not evidence
    regression = [f for f in findings if f["engine"] == "regression"]
    assert regression and all(f["robust"] is False for f in regression if f["flagged"])


def test_the_table_counts_false_alarms_and_misses():
    rows = [
        {"world": "w", "audit": "a", "engine": "cst", "attribute": "race", "flagged": True, "evidence": True,
         "affected": True},
        {"world": "w", "audit": "a", "engine": "cst", "attribute": "sex", "flagged": True, "evidence": True,
         "affected": False},
        {"world": "w", "audit": "a", "engine": "cst", "attribute": "ethnicity", "flagged": False, "evidence": False,
         "affected": True},
    ]
    (r,) = table(rows)
    assert r["evidence"] == "race, sex" and r["false_alarms"] == "sex" and r["missed"] == "ethnicity"
    assert r["affected"] == "ethnicity, race" and r["flagged"] == "race, sex"
