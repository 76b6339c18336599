"""Findings that hold up (issue 35): on lender worlds with a known answer, the shipped HMDA specs
call no fair lender discriminatory, and name a penalising one (``aequum bench validity``).

Each world is generated with a seed the engines were never tuned on (7), run through every
engine of the bench's quick set (outcome, reasons, regression, CST) in this process and written
to a scratch warehouse, whose ``audit.findings`` is read as a user would read it."""
from __future__ import annotations

import pytest

from aequum.flows.bench.validity import audit_world, rates, table

ROWS, SEED = 30_000, 7
ENGINES = ["outcome", "reasons", "regression", "cst"]


@pytest.fixture(scope="module")
def null_world(tmp_path_factory):
    return {audit: audit_world(audit, "null", ROWS, SEED, tmp_path_factory.mktemp(audit), ENGINES)
            for audit in ("external", "internal")}


def test_null_world_external_no_evidence_only_disparities(null_world):
    findings = null_world["external"]
    assert not [f for f in findings if f["evidence"]], "a fair lender called discriminatory"
    # the raw disparities are there, significant, and reported as descriptive raw disparities
    outcome = [f for f in findings if f["engine"] == "outcome"]
    assert any(f["significant"] for f in outcome) and all(f["estimand"] == "raw disparity" for f in outcome)
    assert not any(f["flagged"] for f in outcome)
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
    rows = [{**r, "effect": 1.0, "seed": 1} for r in rows]
    (r,) = table(rows)
    assert r["evidence"] == "race, sex" and r["false_alarms"] == "sex" and r["missed"] == "ethnicity"
    assert r["affected"] == "ethnicity, race" and r["flagged"] == "race, sex"
    # over seeds: how many runs named each attribute, found or false alarm, and missed each affected one
    again = [{**r, "seed": 2, "evidence": r["attribute"] == "race"} for r in rows]
    (over,) = rates(rows + again)
    assert over["runs"] == 2 and over["found (runs)"] == "race 2" and over["false alarms (runs)"] == "sex 1"
    assert over["missed (runs)"] == "ethnicity 2"


def test_null_world_internal_situation_testing_accuses_nobody(null_world):
    """Situation testing on the lender's records, with its bias correction (the shipped spec's
    engines.cst.bias_correction): the groups differ in where their inputs lie, and the raw
    neighbourhood comparison read that as a double standard (a third of the refused women of
    majority-minority tracts); corrected, no finding is flagged (no more significant claims than
    chance makes: cst_summary.excess_p_value) and no group has more than 10% of its refused
    applicants significant (the claims overlap, so the count scatters about its 5% level)."""
    findings = null_world["internal"]
    st = [f for f in findings if f["finding"].startswith("situation testing") and "flagged_share" in f]
    assert {"race&sex", "sex&tract", "tract"} <= {f["attribute"] for f in st}
    assert all(f["flagged_share"] <= 0.10 and not f["flagged"] for f in st), st


@pytest.mark.parametrize("world, unit", [("intersection", "race&sex")])
def test_an_intersection_only_penalty_is_named_as_the_intersection(world, unit, tmp_path):
    """Black women penalised, nobody else: the internal audit tests race × sex by default and
    names it (group-level logit and individual findings), with precision >= 0.8 and recall >= 0.5
    against the direct truth, and no unaffected group is evidence."""
    findings = audit_world("internal", world, ROWS, SEED, tmp_path, ENGINES)
    named = {f["attribute"] for f in findings if f["evidence"]}
    assert unit in named and not [f for f in findings if f["evidence"] and not f["affected"]]
    cf = [f for f in findings if f["attribute"] == unit and f["finding"] == "counterfactual fairness"]
    assert cf and cf[0]["evidence"] and cf[0]["precision"] >= 0.8 and cf[0]["recall"] >= 0.5, cf


@pytest.mark.parametrize("world, hit, spared", [
    ("redlining", {"tract", "sex&tract"}, {"race", "ethnicity", "sex", "asian"}),
    ("intersection", {"race", "sex", "race&sex"}, {"ethnicity", "tract", "asian"}),
    ("dti_penalty", {"race", "ethnicity", "race&ethnicity"}, {"sex", "tract", "asian"})])
def test_the_truth_is_the_direct_effect_of_the_attribute(world, hit, spared, tmp_path):
    """A group is affected when the penalty treats it worse because of the attribute, not when it
    shares members or tracts with the penalised: race is spared by redlining (the penalty follows
    the tract), tract by the intersection and dti worlds; women are hit where Black women are; Black
    and Hispanic applicants, penalised once, through both attributes jointly."""
    findings = audit_world("internal", world, 5_000, SEED, tmp_path, ["outcome", "regression"])
    truth = {f["attribute"]: f["affected"] for f in findings}
    assert all(truth[a] for a in hit) and not any(truth[a] for a in spared), truth


def test_a_size_too_small_for_the_engines_is_one_line(capsys):
    """At 5,000 applications the smallest race group cannot give CST its k neighbours: the
    bench says so in one line (exit 2), as an audit would, instead of a traceback."""
    from aequum.flows.commands.cli import main

    assert main(["bench", "validity", "--quick", "--rows", "5000", "--worlds", "null"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aequum: error: bench validity, null world, external audit, 5,000 rows, seed 1: "
                          "engines.cst.k needs at least") and err.rstrip().endswith("run it with more --rows")
    assert err.count("\n") == 1
