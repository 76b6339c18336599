"""The registry of report sections: one function per engine, registered with the tables it reads
(:func:`section`). The engines' section modules register here; :mod:`sections` imports them
and renders the sections of a run."""
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
