"""The engines aequum can run, by the name used in ``spec.engines.run`` and in the CLI."""
from __future__ import annotations

from importlib import import_module

from engines.core.engine import Engine

ENGINES = {
    "outcome": "engines.outcome:OutcomeEngine",
    "cst": "engines.matching.engine:CSTEngine",
    "raguel": "engines.reranking.engine:RaguelEngine",
    "fgce": "engines.feasibility.engine:FGCEEngine",
}


def get_engine(name: str) -> Engine:
    """Instantiate the engine registered under ``name``."""
    try:
        target = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {sorted(ENGINES)}") from None
    module, cls = target.split(":")
    return getattr(import_module(module), cls)()


def engine_params(spec, name: str):
    """The engine's parameter model from the spec."""
    return getattr(spec.engines, name)
