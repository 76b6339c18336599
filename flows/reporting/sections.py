"""Report sections, one function per engine, registered with the tables it reads.

A section is rendered when its engine ran successfully in the run and its tables exist; adding
an engine's section is one module with one ``@section`` function and one import below."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aequum.flows.reporting.html import Section
from aequum.flows.reporting.run import Run


@dataclass(frozen=True)
class Registered:
    engine: str
    title: str
    tables: tuple[str, ...]
    build: Callable[[Run, Section], None]


SECTIONS: dict[str, Registered] = {}


def section(engine: str, title: str, tables: tuple[str, ...]):
    """Register ``build(run, section)`` as the report section of ``engine``."""
    def register(build: Callable[[Run, Section], None]) -> Callable[[Run, Section], None]:
        SECTIONS[engine] = Registered(engine, title, tables, build)
        return build
    return register


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


# The engines' sections register themselves on import.
from aequum.flows.reporting import cec, cst, fgce, geography, outcome, pba, pricing, raguel, reasons, regression  # noqa: E402,F401
