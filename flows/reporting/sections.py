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


def shown_engines(run: Run) -> list[str]:
    """The engines whose sections the report has: those that ran, in the spec's engine order
    (then by name), with a registered section whose tables exist."""
    order = [n for n in run.parameters.get("run", []) if n in run.engines]
    return [name for name in order + sorted(set(run.engines) - set(order))
            if (reg := SECTIONS.get(name)) is not None and run.ran(name) and set(reg.tables) <= run.tables]


def engine_sections(run: Run, done=None) -> list[Section]:
    """The sections of :func:`shown_engines`; ``done(name)`` is called as each is ready."""
    out = []
    for name in shown_engines(run):
        reg = SECTIONS[name]
        sec = Section(f"engine-{name}", reg.title, fold="Show the evidence")
        reg.build(run, sec)
        out.append(sec)
        if done is not None:
            done(name)
    return out
