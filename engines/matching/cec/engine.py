"""The CEC engine: does the model reason alike for matched people of the two groups?

``prepare`` puts the records in a canonical order (by id, so results do not depend on row
order), standardises the merit features F on the audited records and draws the factuals (every
record, or the spec's stratified sample, drawn in that order) per protected attribute and
intersection. The first round's pieces are the pools searched: each matches the factuals of
every unit that searches one pool (a stratum of one group) to their nearest record of it
(Algorithm 1), its tree built once (at 10M HMDA records the matching was 35 s of one worker
in ``prepare`` while the other waited); ``next_round`` gathers the matches and computes the
label-group baselines b_{y,a}. The second round's pieces are chunks of factuals; ``run_piece``
integrates gradients for both members of each matched pair against the factual's baseline
(Principle 1) and scores them; ``combine`` adds the summaries, the threshold sweep and the
feature decomposition.

The model's inputs are ``model.feature_names`` and may include protected attribute names (the
group indicator). The counterpart x̃ is a real record of the other group, so its input row is
its own: its own group indicator, its own proxies. Its baseline is still the factual's b_{y,a},
whose indicator coordinate is the factual's group (a mean over records of group a).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aequum.engines.core.data import ROW, record_columns, record_ids
from aequum.engines.core.engine import Tables, chunks, concat_parts
from aequum.engines.core.intersections import unit_groups
from aequum.engines.matching.cec.attributions import attribute_pairs, normalise, score_function
from aequum.engines.matching.cec.matching import (Matches, Standardised, gathered_baselines, pool_jobs,
                                                  pool_matches, unit_matches)
from aequum.engines.matching.cec.params import CECParams
from aequum.engines.matching.cec.scores import (FEATURES, PAIRS, REGIME_SHARES, SUMMARY, delta_cec,
                                         feature_sums, features_table, regimes, summaries)
from aequum.engines.core.sampling import stratified_sample


@dataclass
class Unit:
    """One protected attribute (or intersection) with its matched pairs and baselines."""

    attribute: str
    matches: Matches
    baseline: np.ndarray    # per factual: b_{y,a} of its stratum and group (model inputs)


@dataclass
class Matching:
    """The first round's state: what the pools' searches and ``next_round`` read (records in
    canonical order)."""

    Z: Standardised          # the merit features
    stratum: np.ndarray      # int8 label (or decision) per record
    groups: list[np.ndarray]  # per unit: 1 protected, 0 reference, -1 not in it (int8)
    factual: list[np.ndarray]  # per unit: the factuals (positions, ascending)
    labels: list[str]
    population: dict[str, dict[str, int]]
    empty: list[list[tuple[int, int, int]]]  # per unit: (stratum, group, factuals) without a pool
    jobs: list[tuple[int, tuple[tuple[int, int], ...]]]  # per pool: (stratum, ((unit, side), ...))
    others: dict[str, np.ndarray]  # the model inputs that are not merit features
    merit: list[str]
    names: list[str]         # model input names
    ids: pa.Array            # record ids (staged order) and the canonical order
    order: np.ndarray
    partition_by: str
    params: CECParams
    model: object


@dataclass
class State:
    ids: np.ndarray          # the factuals and counterparts, canonical order (sorted ids)
    inputs: np.ndarray       # their model inputs
    decision: np.ndarray     # the model's ŷ per such record
    units: list[Unit]
    names: list[str]         # model input names
    partition_by: str
    notes: dict[str, str]
    population: dict[str, dict[str, int]]  # per unit and group ("all", "protected", "reference"): records before sampling
    params: CECParams
    model: object


def _stratum(data, params: CECParams) -> tuple[np.ndarray, str]:
    use_label = params.partition == "label" or (params.partition == "auto" and data.label is not None)
    if use_label:
        if data.label is None:
            raise ValueError("engines.cec.partition 'label' needs a `label` section")
        return data.label, "label"
    if data.decision is None:
        raise ValueError("CEC stratifies on the label or the decision; the spec has neither")
    return data.decision, "decision"


_GATHER = 1 << 18  # records whose model inputs are gathered at a time


def _unit_group(data, attrs: list[str], order: np.ndarray) -> np.ndarray:
    """Per record in canonical order: 1 protected in every attribute of ``attrs``, 0 reference
    in every one, -1 otherwise (not in the unit)."""
    return unit_groups(data.groups, attrs)[order]


def _involved(units: list[Unit], n: int) -> np.ndarray:
    """The records some piece reads (factuals and their counterparts), in canonical order; the
    units' positions are renumbered into them, so the state shipped to the workers holds those
    records only (a sample's, not the whole dataset's)."""
    used = np.zeros(n, bool)
    for unit in units:
        used[unit.matches.factual] = True
        used[unit.matches.counterpart[unit.matches.counterpart >= 0]] = True
    keep = np.flatnonzero(used)
    position = np.full(n, -1, np.int64)
    position[keep] = np.arange(len(keep))
    for unit in units:
        m = unit.matches
        m.factual = position[m.factual]
        m.counterpart = np.where(m.counterpart >= 0, position[np.maximum(m.counterpart, 0)], -1)
    return keep


class CECEngine:
    """Counterfactual explanation consistency (seed 000): matching, IG, Δ_CEC, regimes."""

    name = "cec"
    tables = {"cec_pairs": PAIRS, "cec_regimes": REGIME_SHARES, "cec_features": FEATURES,
              "cec_summary": SUMMARY}
    uses_model = True  # explains the audited model: not run on a degenerate surrogate

    def columns(self, spec, params) -> list[str]:
        # ids, groups, decisions, labels, the merit features and the model's inputs
        model = spec.model.features if spec.model is not None else []
        return record_columns(spec, list(dict.fromkeys([*params.merit_features(spec), *model])))

    def prepare(self, data, params: CECParams) -> "Matching | State":
        spec = data.spec
        if data.model is None:
            raise ValueError("CEC needs the spec's model: it explains the model's reasoning")
        score_function(data.model)  # a clear error now for a model that is not differentiable
        merit = params.merit_features(spec)
        if not merit:
            raise ValueError("engines.cec.features: no feature is marked `financial: true`; CEC "
                             "matches on the financial features (mark them or list them here)")
        unknown = [f for f in merit if f not in spec.feature_names]
        if unknown:
            raise ValueError(f"engines.cec.features: {unknown} are not declared features")
        nominal = [f for f in merit if spec.feature(f).type == "categorical"]
        if nominal:
            raise ValueError(f"engines.cec.features: {nominal} are categorical; matching standardises "
                             "the merit features, so they must be numeric or ordinal")
        data = replace(data)  # the engine's own view: it lets columns go, the caller's keeps them
        stratum, partition_by = _stratum(data, params)
        ids = data.id_text
        order = pc.sort_indices(ids).to_numpy()  # by id as text, stable
        names = list(data.model.feature_names)
        merit_values = data.feature_values(merit, rows=order)
        missing = np.isnan(merit_values).any(axis=1)
        if missing.any():
            raise ValueError(f"engines.cec.features: {int(missing.sum())} record(s) have missing merit "
                             f"values (e.g. record {ids[int(order[np.argmax(missing)])].as_py()!r})")
        del missing
        # the merit features are held once, raw: matching standardises the rows it reads and the
        # model inputs among them are read from there; their staged columns (and the row numbers) go
        Z = Standardised(merit_values)
        data.let_go([*merit, ROW])
        stratum = np.asarray(stratum)[order].astype(np.int8)

        every = [[p.name] for p in spec.protected] + [list(g) for g in params.intersections]
        groups, factuals, population, empty = [], [], {}, []
        for attrs in every:
            label = "&".join(attrs)
            group = _unit_group(data, attrs, order)
            unit_rows = np.flatnonzero(group >= 0)
            factual = unit_rows if params.sample is None else stratified_sample(
                unit_rows, stratum[unit_rows].astype(np.int64) * 2 + group[unit_rows], params.sample,
                params.sample_seed)
            population[label] = {"all": len(unit_rows), "protected": int((group == 1).sum()),
                                 "reference": int((group == 0).sum())}
            groups.append(group.astype(np.int8))
            factuals.append(factual)
        # the pools the units search, each once (the race comparisons share the White applicants)
        jobs, empty = pool_jobs(groups, factuals, stratum)
        # the model inputs that are not merit features, computed once for every record (e.g. a
        # group indicator): the merit features' are read from Z's raw values
        others = {f: data.column_values(f)[order] for f in names if f not in merit}
        matching = Matching(Z, stratum, groups, factuals, ["&".join(a) for a in every], population, empty,
                            jobs, others, merit, names, ids, order, partition_by, params, data.model)
        return matching if jobs else _matched(matching, [])  # no pool to search: no first round

    def next_round(self, state, parts) -> tuple["State", list] | None:
        """After the pools' searches: the second round's state (:func:`_matched`) and pieces
        (chunks of factuals)."""
        if not isinstance(state, Matching):
            return None
        out = _matched(state, parts)
        return out, self.pieces(out)

    def pieces(self, state) -> list:
        if isinstance(state, Matching):  # the first round: a piece per pool searched
            return list(state.jobs)
        return chunks([len(unit.matches) for unit in state.units], state.params.chunk_size)

    def run_piece(self, state, piece) -> Tables:
        if isinstance(state, Matching):
            return {"_matches": pool_matches(state.Z, state.groups, state.factual, state.stratum, piece)}
        u, s, e = piece
        unit, p = state.units[u], state.params
        m = unit.matches
        fac, cp, ok = m.factual[s:e], m.counterpart[s:e], m.matched[s:e]
        n = e - s
        delta = np.full(n, np.nan)
        comp = np.full(n, np.nan)
        score = np.full(n, np.nan)
        score_c = np.full(n, np.nan)
        score_b = np.full(n, np.nan)
        regime = np.full(n, None, dtype=object)
        sums = np.zeros((2, 6, len(state.names)))
        rows = np.flatnonzero(ok)
        if len(rows):
            att = attribute_pairs(state.model, state.inputs[fac[rows]], state.inputs[cp[rows]],
                                  unit.baseline[s:e][rows], p.integration, p.steps, p.batch_pairs)
            delta[rows] = delta_cec(att["ig"], att["ig_counterpart"])
            comp[rows] = att["completeness"]
            score[rows], score_c[rows], score_b[rows] = att["score"], att["score_counterpart"], att["score_baseline"]
            same = state.decision[fac[rows]] == state.decision[cp[rows]]
            regime[rows] = regimes(same, delta[rows], p.threshold)
            sums = feature_sums(normalise(att["ig"]), normalise(att["ig_counterpart"]), m.group[s:e][rows])
        has_cp = cp >= 0
        table = pa.table({
            "attribute": pa.array([unit.attribute] * n, pa.string()),
            "record_id": pa.array(state.ids[fac], pa.string()),
            "group": pa.array(m.group[s:e], pa.int8()),
            "stratum": pa.array(m.stratum[s:e], pa.int8()),
            "counterpart_id": pa.array(np.where(has_cp, state.ids[np.maximum(cp, 0)], None), pa.string()),
            "distance": pa.array(m.distance[s:e], pa.float64(), from_pandas=True),
            "matched": pa.array(ok, pa.bool_()),
            "decision": pa.array(state.decision[fac], pa.int8()),
            "counterpart_decision": pa.array(np.where(has_cp, state.decision[np.maximum(cp, 0)], 0),
                                             pa.int8(), mask=~has_cp),
            "score": pa.array(score, pa.float64(), from_pandas=True),
            "counterpart_score": pa.array(score_c, pa.float64(), from_pandas=True),
            "baseline_score": pa.array(score_b, pa.float64(), from_pandas=True),
            "delta_cec": pa.array(delta, pa.float64(), from_pandas=True),
            "regime": pa.array(regime, pa.string()),
            "completeness_error": pa.array(comp, pa.float64(), from_pandas=True),
        })
        return {"cec_pairs": table, "_feature_sums": {unit.attribute: sums}}

    def combine(self, state: State, parts) -> Tables:
        out = concat_parts(parts, {"cec_pairs": PAIRS})
        attributes = [u.attribute for u in state.units]
        p = state.params
        out["cec_summary"], out["cec_regimes"] = summaries(
            out["cec_pairs"], attributes, p.thresholds(), p.threshold, state.partition_by, p.integration,
            p.steps if p.integration == "riemann" else None, state.notes, state.population)
        feats = []
        for a in attributes:
            sums = sum((part["_feature_sums"][a] for part in parts if a in part.get("_feature_sums", {})),
                       np.zeros((2, 6, len(state.names))))
            feats.append(features_table(a, state.names, sums, p.features_top))
        out["cec_features"] = pa.concat_tables(feats) if feats else FEATURES.empty_table()
        return out


def _matched(state: Matching, parts) -> State:
    """The second round's state from the pools' searches (``parts``' ``_matches``): each unit's
    matches, its baselines, the inputs and decisions of the records the pieces read."""
    found = [m for part in parts for m in part.get("_matches", [])]
    p, names, merit, Z, others = state.params, state.names, state.merit, state.Z, state.others

    def gather(rows: np.ndarray) -> np.ndarray:
        # the model inputs of records (positions in canonical order): a merit feature's
        # column from the merit values (their rows gathered at once), any other input from
        # its column
        out = np.empty((len(rows), len(names)))
        for s in range(0, len(rows), _GATHER):  # a block of rows of the merit values at a time
            block = rows[s:s + _GATHER]
            picked = Z.raw.take(block, axis=0)
            for j, f in enumerate(names):
                out[s:s + _GATHER, j] = picked[:, merit.index(f)] if f in merit else others[f][block]
        return out

    units, notes, known = [], {}, {}
    for u, label in enumerate(state.labels):
        group, n_unit = state.groups[u], state.population[label]["all"]
        m = unit_matches(u, group, state.stratum, state.factual[u], state.empty[u], found, p.max_distance)
        # a partition's mean taken once for the units that share it (the reference group)
        b = gathered_baselines(gather, group, state.stratum, known)
        base = np.stack([b[(int(s), int(a))] for s, a in zip(m.stratum, m.group)]) \
            if len(m) else np.empty((0, len(names)))
        note = []
        if len(m) < n_unit:
            note.append(f"a stratified sample of {len(m)} of {n_unit} records (strata: group x "
                        f"{state.partition_by}; seed {p.sample_seed}), each matched against the whole "
                        "other-group pool of its stratum")
        if state.partition_by == "decision":
            note.append("no label: matched within the model's decision instead of the label")
        for s, a, n in m.empty:
            note.append(f"{n} {'protected' if a else 'reference'} record(s) with {state.partition_by} {s} "
                        f"unmatched: no {'reference' if a else 'protected'} record has that "
                        f"{state.partition_by}")
        if not len(m):
            note.append("no records in either group")
        notes[label] = "; ".join(note)
        units.append(Unit(label, m, base))
    keep = _involved(units, len(state.order))
    inputs = gather(keep)
    decision = np.asarray(state.model.decide(inputs)).astype(np.int8)
    return State(record_ids(state.ids, state.order[keep]), inputs, decision, units, names,
                 state.partition_by, notes, state.population, p, state.model)
