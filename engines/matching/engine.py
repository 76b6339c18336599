"""The CST engine: counterfactuals from the spec's SCM, then situation testing per complainant.

``prepare`` builds, per protected attribute (and per intersection), the counterfactual world
do(A := reference) by abduction–action–prediction on the fitted SCM (or takes the user's
counterfactual table), re-decides it with the spec's model, and normalises both worlds for the
distance. ``pieces`` are chunks of complainants; ``run_piece`` searches their control and test
groups and writes their claims and evidence; ``combine`` adds the Table 1 style summary.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engines.core.engine import Tables, concat_parts
from engines.matching.params import CSTParams
from engines.matching.scm import Equation, LinearSCM, SCMError
from engines.matching.situation_testing import (CLAIMS, EVIDENCE, SUMMARY, claims, evidence,
                                                normalise, search, summary)


@dataclass
class Test:
    """One protected attribute (or intersection) ready for situation testing."""

    attribute: str
    factual: object          # Points
    counterfactual: object   # Points
    protected: np.ndarray
    reference: np.ndarray
    decision_cf: np.ndarray
    complainants: np.ndarray


@dataclass
class State:
    ids: np.ndarray
    decision: np.ndarray
    tests: list[Test]
    params: CSTParams


def _scm_values(data, names: list[str]) -> dict[str, np.ndarray]:
    values: dict[str, np.ndarray] = {}
    for p in data.spec.protected:
        # records in neither group enter abduction and prediction as 0: in an additive model
        # the value cancels between the two steps, so only the intervened attribute moves them
        values[p.name] = np.maximum(data.groups[p.name], 0).astype(np.float64)
    for name in names:
        if data.spec.feature(name).type == "categorical":
            raise SCMError(f"SCM variable {name!r} is categorical: additive-noise equations need numeric "
                           "or ordinal variables (declare it ordinal, or supply scm.counterfactuals)")
        values[name] = data.column_values(name)
    return values


def _counterfactual_values(data, attributes: list[str], features: list[str], scm: LinearSCM | None,
                           values: dict[str, np.ndarray]) -> np.ndarray:
    """Raw feature matrix of the counterfactual world do(attributes := reference)."""
    if scm is None:
        cf = data.counterfactuals
        return data.feature_values(features, table=cf)
    out = scm.counterfactual(values, {a: 0.0 for a in attributes})
    return np.column_stack([out[f] if f in out else data.column_values(f) for f in features])


def _counterfactual_decision(data, X: np.ndarray, Xcf: np.ndarray, model_cols: list, prot: np.ndarray) -> np.ndarray:
    """ŷ^CF: the recorded decision, changed only where the model's decision changes between
    the factual and the counterfactual record. With the production model (which made the
    recorded decisions) this is simply b(x^CF); with a surrogate of imperfect fidelity it keeps
    the surrogate's own disagreements with the recorded decisions from posing as effects of A."""
    def decide(M: np.ndarray) -> np.ndarray:
        cols = [M[:, j] if j is not None else data.column_values(f)
                for j, f in zip(model_cols, data.model.feature_names)]
        return data.model.decide(np.column_stack(cols)).astype(np.int8)

    factual, counterfactual = decide(X), decide(Xcf)
    moved = prot & (factual != counterfactual)
    return np.where(moved, counterfactual, data.decision).astype(np.int8)


class CSTEngine:
    """Counterfactual situation testing with ST and CF baselines (seed 003)."""

    uses_model = True  # re-decides counterfactuals: not run when the surrogate is degenerate

    name = "cst"
    tables = {"cst_claims": CLAIMS, "cst_evidence": EVIDENCE, "cst_summary": SUMMARY}

    def prepare(self, data, params: CSTParams) -> State:
        spec = data.spec
        if data.model is None:
            raise ValueError("CST needs the spec's model to re-decide the counterfactuals")
        if data.decision is None:
            raise ValueError("CST needs decisions: a decision column or model.use_for_decisions")
        features = list(params.features or spec.feature_names)
        unknown = [f for f in features if f not in spec.feature_names]
        if unknown:
            raise ValueError(f"engines.cst.features: {unknown} are not declared features")
        kinds = [spec.feature(f).type for f in features]
        levels = [len(data.levels(f)) if spec.feature(f).type != "numeric" else None for f in features]
        X = data.feature_values(features)
        factual = normalise(X, kinds, levels, params.normalization)

        scm = None
        values: dict[str, np.ndarray] = {}
        if data.counterfactuals is None:
            if spec.scm is None or not spec.scm.equations:
                raise ValueError("CST needs an SCM (scm.equations) or a counterfactual table")
            names = sorted({v for eq in spec.scm.equations for v in [eq.target, *eq.parents]}
                           - {p.name for p in spec.protected})
            values = _scm_values(data, names)
            parents = {v for eq in spec.scm.equations for v in eq.parents}
            # fit on the records whose protected parents are all known (in one of the groups)
            known = np.logical_and.reduce([data.groups[p.name] >= 0 for p in spec.protected
                                           if p.name in parents] or [np.ones(len(data), bool)])
            scm = LinearSCM.fit([Equation(e.target, list(e.parents), e.link,
                                          e.intercept if e.fit == "explicit" else None,
                                          dict(e.coefficients or {}))
                                 for e in spec.scm.equations], values, rows=known)

        model_cols = [features.index(f) if f in features else None for f in data.model.feature_names]
        tests = []
        units = [[p.name] for p in spec.protected] + [list(g) for g in params.intersections]
        if data.counterfactuals is not None:
            units = units[:1]  # a supplied table is one intervention: the first attribute's
        kmax = max(params.k)
        for attrs in units:
            prot = np.logical_and.reduce([data.groups[a] == 1 for a in attrs])
            ref = np.logical_and.reduce([data.groups[a] == 0 for a in attrs])
            label = "&".join(attrs)
            if prot.sum() < kmax + 1:
                raise ValueError(f"protected group of {label!r} has {int(prot.sum())} members; CST with "
                                 f"k={kmax} needs at least {kmax + 1}")
            if ref.sum() < kmax:
                raise ValueError(f"reference group of {label!r} has {int(ref.sum())} members; CST with "
                                 f"k={kmax} needs at least {kmax}")
            Xcf = _counterfactual_values(data, attrs, features, scm, values)
            Xcf = np.where(prot[:, None], Xcf, X)  # only complainants move; others are as observed
            stats = Xcf if params.counterfactual_normalization == "own" else X
            cf_points = normalise(Xcf, kinds, levels, params.normalization, stats=stats)
            decision_cf = _counterfactual_decision(data, X, Xcf, model_cols, prot)
            comp = np.flatnonzero(prot & ((data.decision == 0) if params.complainants == "negative" else True))
            tests.append(Test(label, factual, cf_points, prot, ref, decision_cf, comp))
        return State(np.asarray(data.ids), data.decision, tests, params)

    def pieces(self, state: State) -> list[tuple[int, int, int]]:
        size = state.params.chunk_size
        return [(t, s, min(s + size, len(test.complainants)))
                for t, test in enumerate(state.tests) for s in range(0, len(test.complainants), size)]

    def run_piece(self, state: State, piece: tuple[int, int, int]) -> Tables:
        t, s, e = piece
        test = state.tests[t]
        p = state.params
        comp = test.complainants[s:e]
        hood = search(test.factual, test.counterfactual, test.protected, test.reference, comp, max(p.k))
        table = claims(state.ids, test.attribute, comp, hood, state.decision, test.decision_cf,
                       p.k, p.alpha, p.tau, p.max_distance)
        if p.evidence == "all":
            keep = np.ones(len(comp), bool)
        elif p.evidence == "discriminated":
            flagged = table.filter(pc.and_(
                pc.is_in(table["method"], pa.array(["ST", "CST_wo_centres", "CST"])),
                table["discriminated"]))["record_id"]
            keep = np.isin(state.ids[comp].astype(str), np.asarray(flagged.to_pylist(), dtype=str))
        else:
            keep = np.zeros(len(comp), bool)
        return {"cst_claims": table, "cst_evidence": evidence(state.ids, test.attribute, comp, hood, keep)}

    def combine(self, state: State, parts) -> Tables:
        out = concat_parts(parts, {"cst_claims": CLAIMS, "cst_evidence": EVIDENCE})
        # group rows by their keys, complainants in record order: independent of the chunking
        out["cst_claims"] = _stable_sort(out["cst_claims"], ["protected_attribute", "method", "k"])
        out["cst_evidence"] = _stable_sort(out["cst_evidence"], ["protected_attribute", "centre", "search_group"])
        out["cst_summary"] = summary(out["cst_claims"])
        return out


def _stable_sort(table: pa.Table, keys: list[str]) -> pa.Table:
    import polars as pl

    return pl.from_arrow(table).sort(keys, maintain_order=True).to_arrow().cast(table.schema)
