"""Report sections, one function per engine, registered with the tables it reads.

A section is rendered when its engine ran successfully in the run and its tables exist; adding
an engine's section is one module with one ``@section`` function (:mod:`registry`) and its name
in the import below."""
from __future__ import annotations

# The engines' sections register themselves on import.
from aequum.flows.reporting import cec, cst, fgce, geography, lenders, outcome, pba, pricing, proxy, raguel, reasons, regression  # noqa: F401
from aequum.flows.reporting.html import Section
from aequum.flows.reporting.registry import SECTIONS
from aequum.flows.reporting.run import Run


def engine_sections(run: Run) -> list[Section]:
    """The sections of the engines that ran, in the spec's engine order (then by name)."""
    order = [n for n in run.parameters.get("run", []) if n in run.engines]
    out = []
    for name in order + sorted(set(run.engines) - set(order)):
        reg = SECTIONS.get(name)
        if reg is None or not run.ran(name) or not set(reg.tables) <= run.tables:
            continue
        sec = Section(f"engine-{name}", reg.title, fold="Show the evidence")
        reg.build(run, sec)
        out.append(sec)
    return out
