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
    """The lender's own records: the individual direct-effect finding (CF on a surrogate of the
    decisions from every input, every mediator held) flags at most 5% of the refused protected
    applicants of each group, and no group-level direct effect (the denial logit, adjusted
    across the run) is significant; so nothing is evidence."""
    findings = null_world["internal"]
    assert not [f for f in findings if f["evidence"]]
    cf = [f for f in findings if f["finding"] == "counterfactual fairness" and "flagged_share" in f]
    assert {f["attribute"] for f in cf} >= {"race", "ethnicity", "sex", "tract"}
    assert all(f["estimand"] == "direct effect" and f["flagged_share"] <= 0.05 for f in cf), cf
    regression = [f for f in findings if f["engine"] == "regression"]
    assert regression and not any(f["flagged"] for f in regression), regression


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
