"""Report section of geography and peers: the redlining screen (each lender's share of
applications and approvals from majority-minority and low-to-moderate income tracts against its
volume-matched peers in the same MSA) and per-lender denial disparities against the same peers."""
from __future__ import annotations

from aequum.flows.reporting.html import Section, esc, markup, table
from aequum.flows.reporting.labels import Labels
from aequum.flows.reporting.outcome import p_text
from aequum.flows.reporting.run import CASES, Run
from aequum.flows.reporting.registry import section


@section("geography", "Geography and peer lenders (redlining screen)",
         ("geography_lenders", "geography_disparities"))
def geography_section(run: Run, sec: Section) -> None:
    labels = Labels(run.parameters)
    sec.add("<p>Each lender's share of applications, and of approvals, from majority-minority tracts "
            "(and low-to-moderate income tracts) in each MSA is compared with its <em>peers</em>: the "
            "other lenders of the MSA with 50-200% of its applications there, pooled (two-proportion z "
            "test, adjusted across lenders). Only a share significantly <em>below</em> the peers' is "
            "flagged. A raw comparison: it does not see why a lender's applications come from where they "
            "do (branches, marketing, brokers, product mix) or any credit factor. It says where to look; "
            "it is not evidence of redlining by itself.</p>")
    screen = run.query("geography_screen")
    sec.add(table([{"measure": r["measure"], "basis": r["basis"], "lender-MSA pairs": r["pairs"],
                    "tested": r["tested"], "below peers": r["below_peers"], "lenders named": r["lenders"],
                    "correction": r["correction"], "note": r["note"]} for r in screen]))
    named = run.query("geography_named", limit=CASES)
    if named:
        sec.add(markup("<h4>Lender-MSA pairs below their peers (at most {}, surest first)</h4>", CASES))
        sec.add(table([{"lender": r["lender"], "MSA": r["market"], "measure": r["measure"], "basis": r["basis"],
                        "with tract reported": r["n"], "share": r["share"], "peers": r["peers"],
                        "peers' share": r["peer_share"], "adjusted p": p_text(r["p_adjusted"])} for r in named]))
    rows = run.query("geography_disparities", limit=CASES * 4)
    if rows:
        sec.add("<h4>Denial disparities against peers</h4><p>Per lender and attribute: the odds ratio of "
                "denial of the protected group against the reference group at the lender, over its peers' "
                "in the same MSAs (inverse-variance mean over its MSAs, Woolf test, adjusted across "
                "lenders). Raw rates, without underwriting controls: the controlled comparison is the "
                "regression engine's.</p>")
        tested = {r["attribute"]: r["tested"] for r in rows}
        flagged = [r for r in rows if r["flagged"]]
        sec.add("<p>" + esc("; ".join(f"{labels.versus(a, 'protected')}: {sum(r['attribute'] == a for r in flagged)} "
                                      f"of {n} lenders tested above their peers" for a, n in sorted(tested.items())))
                + ".</p>")
        if flagged:
            sec.add(table([{"attribute": r["attribute"], "lender": r["lender"], "MSAs": r["markets"],
                            "denial rate, protected": r["denial_rate_protected"],
                            "denial rate, reference": r["denial_rate_reference"], "odds ratio": r["odds_ratio"],
                            "peers' odds ratio": r["peer_odds_ratio"], "ratio": r["ratio"],
                            "CI low": r["ci_low"], "CI high": r["ci_high"], "adjusted p": p_text(r["p_adjusted"])}
                           for r in flagged]))
