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
            "the values of the variable the reason cites are compared between the groups. A reason "
            "cited at markedly better values for the protected group means the variable is judged by "
            "a different standard for them.</p>")
    sec.add(table([{"attribute": r["attribute"], "reason": r["reason_code"], "variable": r["feature"],
                    "protected citing": r["protected_citing"], "reference citing": r["reference_citing"],
                    "protected median": r["protected_median"], "reference median": r["reference_median"],
                    "adjusted p": r["p_adjusted"], "significant": r["significant"],
                    "direction": r["direction"], "note": r["note"]}
                   for r in sorted(rows, key=lambda r: (r["attribute"], r["reason_code"]))]))
