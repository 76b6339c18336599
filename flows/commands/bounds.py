"""``aequum bounds``: the strength of an input the public data lack, measured on a lender's own
records, as the ``decision.bounds`` entries of a public-data screening's spec.

An internal audit whose records hold the input (the credit score, recorded as a control of the
regression and pricing engines) measures, per tested unit and outcome, its partial R² with
group membership and with the outcome given the other controls (``audit.input_strength``). The
screening of the same lender's public LAR then bounds what that input, which it cannot see, can
do to its controlled differences (Cinelli & Hazlett 2020, bounds with explicit values;
``engines.regression.bounds``). The figures are rounded up to three decimals (a looser bound,
never a tighter one) and carry their source: the run, its spec and its date. They hold for the
screening when its controls are the internal audit's without the input: give both specs the
same controls and unit names.

For denial, measure the input in the form the decision uses: the lender's own predicted
probability of denial (its risk model, or the automated underwriting result), not a raw score.
A decision that is a threshold on a score is a curve in it, and the linear probability model the
bound applies to leaves part of that curve on the group when it holds the raw score (a fair
lender's records then keep a significant group residual); with the predicted probability it
does not. A price is linear in the score: the score itself is the input there."""
from __future__ import annotations

import math

import yaml

from aequum.flows.store.guard import UsageError
from aequum.flows.store.warehouse import Warehouse


def _up(x: float) -> float:
    return math.ceil(x * 1000 - 1e-9) / 1000


def bound_entries(warehouse, control: str, run_id: str | None = None, wait: float = 30.0,
                  notify=None, outcomes: list[str] | None = None) -> tuple[list[dict], dict]:
    """The ``decision.bounds`` entries for ``control`` from ``run_id`` (default: the latest
    succeeded run that measured it), for every outcome it was measured on or only ``outcomes``
    (denial, a pricing field), and the run they come from."""
    with Warehouse(warehouse, read_only=True, wait=wait, notify=notify) as wh:
        rows = wh.query("input_strength_of_run", {"control": control, "run_id": run_id}).to_pylist()
    if not rows:
        where = f"run {run_id}" if run_id else "any succeeded run"
        raise UsageError(f"control {control!r}: not a control of the regression or pricing engine in {where} "
                         "(aequum show input_strength lists the controls measured)")
    first = rows[0]
    source = f"internal audit run {first['run_id']} (spec {first['spec_name']}, {first['started_at']:%Y-%m-%d}): {control}"
    entries = [{"outcome": r["outcome"], "attributes": [r["attribute"]], "r2_group": _up(r["r2_group"]),
                "r2_outcome": _up(r["r2_outcome"]), "source": source}
               for r in rows if r["r2_group"] is not None and r["r2_outcome"] is not None
               and r["r2_group"] < 1 and (not outcomes or r["outcome"] in outcomes)]
    if not entries:
        raise UsageError(f"control {control!r}: run {first['run_id']} measured it for "
                         f"{sorted({r['outcome'] for r in rows})}, none of --outcome {outcomes}")
    return entries, first


def bounds_yaml(entries: list[dict], run: dict, control: str) -> str:
    """The entries as YAML to paste under ``decision:`` in the screening's spec."""
    head = (f"# {control}'s strength measured on the records of run {run['run_id']} (spec {run['spec_name']}):\n"
            "# paste under `decision:` in the public-data screening's spec (with inputs: partial)\n")
    return head + yaml.safe_dump({"bounds": entries}, sort_keys=False, width=120, default_flow_style=None)
