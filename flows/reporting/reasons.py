"""Report section of reason consistency: per attribute and reason, the groups' medians of the
cited variable among the decisions citing it, and the adjusted rank test."""
from __future__ import annotations

from aequum.flows.reporting.html import Section, table
from aequum.flows.reporting.run import Run
from aequum.flows.reporting.sections import section


@section("reasons", "Reason consistency of unfavourable decisions", ("reason_consistency",))
def reasons_section(run: Run, sec: Section) -> None:
    rows = run.result("reason_consistency")
    sec.add("<p>Among the unfavourable decisions that cite a reason (e.g. the debt-to-income ratio), "
            "the values of the variable the reason cites are compared between the groups. Only a "
            "reason cited at significantly <em>better</em> values for the protected group (the penalty "
            "direction: a stricter standard for them) is flagged; which values are worse is read from "
            "the denials themselves (those citing the reason against those that do not). Inputs the "
            "records lack can also produce the difference: it is a screen, not proof.</p>")
    sec.add(table([{"attribute": r["attribute"], "reason": r["reason_code"], "variable": r["feature"],
                    "protected citing": r["protected_citing"], "reference citing": r["reference_citing"],
                    "protected median": r["protected_median"], "reference median": r["reference_median"],
                    "adjusted p": r["p_adjusted"], "significant": r["significant"],
                    "direction": r["direction"], "worse values": r.get("worse_values"),
                    "penalty direction": r.get("penalty_direction"), "note": r["note"]}
                   for r in sorted(rows, key=lambda r: (r["attribute"], r["reason_code"]))]))
