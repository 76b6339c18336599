"""The engines aequum can run, by the name used in ``spec.engines.run`` and in the CLI.

Each entry names the engine class and its parameters model (``module:Class``), imported only
when used. Registering an engine here is all a new engine needs: its params model validates
the spec's ``engines.<name>`` section through :func:`engines.core.spec.register_engine_params`.
"""
from __future__ import annotations

from aequum.engines.core.engine import Engine
from aequum.engines.core.imports import load
from aequum.engines.core.spec import register_engine_params

ENGINES: dict[str, tuple[str, str]] = {
    "outcome": ("aequum.engines.outcome.engine:OutcomeEngine", "aequum.engines.outcome.params:OutcomeParams"),
    "cst": ("aequum.engines.matching.cst.engine:CSTEngine", "aequum.engines.matching.cst.params:CSTParams"),
    "raguel": ("aequum.engines.reranking.engine:RaguelEngine", "aequum.engines.reranking.params:RaguelParams"),
    "fgce": ("aequum.engines.feasibility.engine:FGCEEngine", "aequum.engines.feasibility.params:FGCEParams"),
    "pba": ("aequum.engines.verification.engine:PBAEngine", "aequum.engines.verification.params:PBAParams"),
    "cec": ("aequum.engines.matching.cec.engine:CECEngine", "aequum.engines.matching.cec.params:CECParams"),
    "reasons": ("aequum.engines.reasons.engine:ReasonsEngine", "aequum.engines.reasons.params:ReasonsParams"),
    "regression": ("aequum.engines.regression.engine:RegressionEngine", "aequum.engines.regression.params:RegressionParams"),
    "geography": ("aequum.engines.geography.engine:GeographyEngine", "aequum.engines.geography.params:GeographyParams"),
    "pricing": ("aequum.engines.pricing.engine:PricingEngine", "aequum.engines.pricing.params:PricingParams"),
    "lenders": ("aequum.engines.lenders.engine:LendersEngine", "aequum.engines.lenders.params:LendersParams"),
    "proxy": ("aequum.engines.proxy.engine:ProxyEngine", "aequum.engines.proxy.params:ProxyParams"),
}


def _load(target: str):
    module, name = target.split(":")
    return getattr(load(module), name)  # engines of one worker load at once: one import at a time


def get_engine(name: str) -> Engine:
    """Instantiate the engine registered under ``name``."""
    try:
        target = ENGINES[name][0]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {sorted(ENGINES)}") from None
    return _load(target)()


def engine_params(spec, name: str):
    """The engine's parameters from the spec (its defaults when the spec has no section)."""
    return spec.engines.params(name)


for _name, (_, _params) in ENGINES.items():
    register_engine_params(_name, lambda target=_params: _load(target))
