"""The CST engine: counterfactuals from the spec's SCM, then situation testing per complainant.

``prepare`` puts the records in record order (by id, see :func:`record_order`), builds, per
protected attribute (and per intersection), the counterfactual world do(A := reference) by
abduction–action–prediction on the fitted SCM (or takes the user's table for that attribute),
re-decides it with the spec's model, and normalises both worlds for the distance; mediators
(``engines.cst.mediators``) stay at their factual values (a path-specific effect), and the
complainants are all, or the spec's stratified sample (``engines.cst.sample``). ``pieces``
are chunks of complainants (the chunks of tests with one reference group together, up to
``chunk_size``: the group is indexed once for them); ``run_piece`` searches their control and
test groups and writes
their claims, evidence and, for the complainants whose evidence it keeps, their counterfactual
values (``cst_counterfactuals``: :mod:`engines.matching.cst.counterfactual_values`); ``combine``
adds the Table 1 style summary and the sampling table (the evidence and the counterfactual
values are streamed: they never reach ``combine``). On a cluster the points of every
record go to files before the state is sent to the workers (``spill``).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aequum.engines.core.data import ROW, AuditData, record_columns
from aequum.engines.core.engine import Tables, chunks, concat_parts, stable_sort
from aequum.engines.core.intersections import resolve, unit_groups
from aequum.engines.core.points_file import PointsFile
from aequum.engines.core.sampling import record_order, stratified_sample
from aequum.engines.matching.cst.bias_correction import fit_group, surface
from aequum.engines.matching.cst.counterfactual_values import COUNTERFACTUALS, counterfactual_rows, kept
from aequum.engines.matching.cst.params import CSTParams
from aequum.engines.matching.cst.scm import Equation, LinearSCM, SCMError
from aequum.engines.matching.cst.situation_testing import (CLAIMS, EVIDENCE, SAMPLING, SUMMARY, claims, evidence,
                                                evidence_depth, flag_claims, normalise, search_shared,
                                                summary)


@dataclass
class Test:
    """One protected attribute (or intersection) ready for situation testing. The group masks
    are kept one bit per record (every worker holds the state: 16 masks of 8.4M records at 10M
    HMDA rows were 134 MB a copy) and unpacked for a piece."""

    attribute: str
    factual: object          # Points (or a PointsFile, once spilled) of every record
    counterfactual: object   # Points of the complainants' counterfactuals, row i for complainants[i]
    protected_bits: np.ndarray  # np.packbits of the protected group's mask
    reference_bits: np.ndarray  # np.packbits of the reference group's mask
    decision_cf: np.ndarray  # ŷ^CF of the complainants, entry i for complainants[i]
    complainants: np.ndarray
    sampling: pa.Table  # per stratum: population and sampled complainants
    # the bias correction (CSTParams.bias_correction), or None: the one surface of both groups
    surface: np.ndarray | None = None
    # the raw counterfactual values of the distance's features (row i: complainants[i]), for
    # cst_counterfactuals; None with engines.cst.evidence: none (nothing is stored)
    cf_values: np.ndarray | None = None

    @property
    def protected(self) -> np.ndarray:
        return np.unpackbits(self.protected_bits, count=len(self.factual)).view(bool)

    @property
    def reference(self) -> np.ndarray:
        return np.unpackbits(self.reference_bits, count=len(self.factual)).view(bool)


@dataclass
class State:
    ids: pa.Array  # record ids (str), in record order
    decision: np.ndarray
    tests: list[Test]
    params: CSTParams
    effect: str  # what CF and CST measure (cst_summary.effect)
    skipped: dict[str, str]  # intersections auto did not test, and why
    dims: int  # the distance's numeric attributes (the dimension its overlap check reads)
    features: list[str]  # the distance's features (cst_counterfactuals.feature)
    levels: list[list[str] | None]  # their ordered levels (None: numeric)


def _in_record_order(data: AuditData) -> AuditData:
    """The records in record order, as a view of the engine's own (``prepare`` lets columns go
    from it; the caller's view keeps them)."""
    order = record_order(data.id_text)
    if np.array_equal(order, np.arange(len(order))):
        return replace(data)
    cf = data.counterfactuals
    if isinstance(cf, dict):
        cf = {key: table.take(order) for key, table in cf.items()}
    elif cf is not None:
        cf = cf.take(order)
    return AuditData(data.spec, data.table.take(order), data.categories, data.model, cf)


def _supplied_tables(data: AuditData, units: list[list[str]]) -> dict[str, pa.Table]:
    """The user's counterfactual tables by tested unit label ('a' or 'a&b')."""
    cf = data.counterfactuals
    if cf is None:
        return {}
    names = [p.name for p in data.spec.protected]
    if not isinstance(cf, dict):
        if len(names) != 1:
            raise ValueError(f"one counterfactual table is do(A := a') for one attribute, but {names} are "
                             "protected: supply one table per attribute")
        cf = {names[0]: cf}
    labels = {frozenset(u): "&".join(u) for u in units}
    # a table for an intersection this run does not test is not used
    return {labels[frozenset(key.split("&"))]: table for key, table in cf.items()
            if frozenset(key.split("&")) in labels}


def _scm_values(data, names: list[str], in_hand: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The SCM's variables (``in_hand``: columns already computed, not copied; the protected
    attributes as int8 group indicators, which the SCM reads as float64)."""
    values: dict[str, np.ndarray] = {}
    for p in data.spec.protected:
        # records in neither group enter abduction and prediction as 0: in an additive model
        # the value cancels between the two steps, so only the intervened attribute moves them
        values[p.name] = np.maximum(data.groups[p.name], 0)  # int8: the SCM reads it as float64
    for name in names:
        if data.spec.feature(name).type == "categorical":
            raise SCMError(f"SCM variable {name!r} is categorical: additive-noise equations need numeric "
                           "or ordinal variables (declare it ordinal, or supply scm.counterfactuals)")
        values[name] = in_hand[name] if name in in_hand else data.column_values(name)
    return values


def _scm_variables(spec) -> list[str]:
    """The SCM's variables other than the protected attributes (features), sorted."""
    equations = spec.scm.equations if spec.scm is not None else []
    return sorted({v for eq in equations for v in [eq.target, *eq.parents]} - {p.name for p in spec.protected})


def _fit_scm(data, in_hand: dict[str, np.ndarray]) -> tuple[LinearSCM, dict[str, np.ndarray]]:
    spec = data.spec
    values = _scm_values(data, _scm_variables(spec), in_hand)
    parents = {v for eq in spec.scm.equations for v in eq.parents}
    # fit on the records whose protected parents are all known (in one of the groups)
    known = np.logical_and.reduce([data.groups[p.name] >= 0 for p in spec.protected
                                   if p.name in parents] or [np.ones(len(data), bool)])
    scm = LinearSCM.fit([Equation(e.target, list(e.parents), e.link,
                                  e.intercept if e.fit == "explicit" else None,
                                  dict(e.coefficients or {}))
                         for e in spec.scm.equations], values, rows=known)
    return scm, values


_BLOCK = 1 << 19  # records whose counterfactuals are computed at a time


def _counterfactual_values(data, label: str, attributes: list[str], names: list[str], X: np.ndarray,
                           scm: LinearSCM | None, values: dict[str, np.ndarray],
                           table: pa.Table | None, mediators: list[str], rows: np.ndarray) -> np.ndarray:
    """Raw feature matrix (columns ``names``) of ``rows`` in the world do(attributes :=
    reference), with the ``mediators`` held at their factual values (path-specific; a
    supplied table's mediator columns are replaced by the factual ones, from ``X``, the
    factual matrix of columns ``names``). Abduction, action and prediction act record by
    record, so the rows' counterfactuals are those of the whole set, and they are computed
    ``_BLOCK`` records at a time (at 10M HMDA records the steps' copies of every variable for
    the 2-3M members of a group took 0.4 GB)."""
    if table is not None:
        missing = [f for f in names if f not in table.column_names]
        if missing:
            raise ValueError(f"the counterfactual table for {label!r} lacks feature column(s) {missing} "
                             "(map them with scm.counterfactuals.columns)")
        M = data.feature_values(names, table=table, rows=rows)
        for f in mediators:
            if f in names:
                M[:, names.index(f)] = X[rows, names.index(f)]
        return M
    M = np.empty((len(rows), len(names)))
    for s in range(0, len(rows), _BLOCK):  # a block of records at a time: the SCM's steps copy every variable
        block = rows[s:s + _BLOCK]
        out = scm.counterfactual({k: v[block] for k, v in values.items()}, {a: 0.0 for a in attributes},
                                 hold=mediators)
        for j, f in enumerate(names):
            M[s:s + _BLOCK, j] = out[f] if f in out else X[block, j]
    return M


def _world(X: np.ndarray, members: np.ndarray, cf: np.ndarray):
    """Column j of every record in a counterfactual world, one column at a time: the factual
    values, with the ``members`` (rows of ``cf``) moved (a whole world's matrix: 0.27 GB per
    test at 10M records)."""
    def column(j: int) -> np.ndarray:
        values = X[:, j].copy()
        values[members] = cf[:, j]
        return values
    return column


def _model_inputs(data, names: list[str], M: np.ndarray, intervened: list[str], rows: np.ndarray) -> np.ndarray:
    """The model's input matrix for ``rows``: declared features from ``M`` (columns ``names``,
    one row per entry of ``rows``), protected attributes as group indicators, set to the
    reference value 0 for ``intervened`` ones."""
    return np.column_stack([M[:, names.index(f)] if f in names
                            else np.zeros(len(M)) if f in intervened else data.column_values(f)[rows]
                            for f in data.model.feature_names])


def _counterfactual_decision(data, names: list[str], X: np.ndarray, Xcf: np.ndarray,
                             attributes: list[str], rows: np.ndarray) -> np.ndarray:
    """ŷ^CF of the protected ``rows`` (X, Xcf: their factual and counterfactual features): the
    recorded decision, changed only where the model's decision changes between the factual and
    the counterfactual record — do(A := reference) moves the features the SCM says A causes
    and, when the model reads A itself, A's input. With the production model (which made the
    recorded decisions) this is simply b(x^CF); with a surrogate of imperfect fidelity it keeps
    the surrogate's own disagreements with the recorded decisions from posing as effects of A."""
    factual = data.model.decide(_model_inputs(data, names, X, [], rows)).astype(np.int8)
    counterfactual = data.model.decide(_model_inputs(data, names, Xcf, attributes, rows)).astype(np.int8)
    return np.where(factual != counterfactual, counterfactual, data.decision[rows]).astype(np.int8)


class CSTEngine:
    """Counterfactual situation testing with ST and CF baselines (seed 003)."""

    uses_model = True  # re-decides counterfactuals: not run when the surrogate is degenerate

    name = "cst"
    tables = {"cst_claims": CLAIMS, "cst_evidence": EVIDENCE, "cst_summary": SUMMARY, "cst_sampling": SAMPLING,
              "cst_counterfactuals": COUNTERFACTUALS}
    # the evidence (12.5M rows at 10M HMDA records) and the counterfactual values go from the
    # pieces to the warehouse without gathering in one process (engines.core.engine, "streamed")
    streamed = {"cst_evidence": ("protected_attribute", "centre", "search_group"),
                "cst_counterfactuals": ("protected_attribute",)}

    def columns(self, spec, params) -> list[str]:
        # ids, groups, decisions, labels, the distance's features, the model's inputs and the
        # SCM's variables; with a complainant sample, the recorded protected values too: they
        # are its strata
        model = spec.model.features if spec.model is not None else []
        features = [*(params.features or spec.feature_names), *model, *_scm_variables(spec)]
        raw = (list(dict.fromkeys(p.column for p in spec.protected if not p.by_range))
               if params.sample is not None else [])  # a range attribute's strata are its groups
        return record_columns(spec, list(dict.fromkeys(features))) + raw

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
        data = _in_record_order(data)
        kinds = [spec.feature(f).type for f in features]
        levels = [len(data.levels(f)) if spec.feature(f).type != "numeric" else None for f in features]
        # the distance's features, then the declared features only the model reads: those move
        # in the counterfactual world too
        names = features + [f for f in data.model.feature_names
                            if f in spec.feature_names and f not in features]
        X = data.feature_values(names)
        nf = len(features)
        # from here the features are read from X: their staged columns (and the row numbers) go
        data.let_go([*names, ROW])

        units, skipped = _units(data, params)
        supplied = _supplied_tables(data, units)
        scm, values = None, {}
        if any("&".join(u) not in supplied for u in units):
            if spec.scm is None or not spec.scm.equations:
                lacking = ["&".join(u) for u in units if "&".join(u) not in supplied]
                raise ValueError(f"CST tests {lacking}: they need scm.equations or a counterfactual table")
            scm, values = _fit_scm(data, {f: X[:, j] for j, f in enumerate(names)})

        tests, nominal = [], []  # per test: the other protected attributes' groups in its distance
        kmax = max(params.k)
        for attrs in units:
            unit = unit_groups(data.groups, attrs)
            prot, ref = unit == 1, unit == 0
            label = "&".join(attrs)
            if prot.sum() < kmax + 1:
                raise ValueError(f"protected group of {label!r} has {int(prot.sum())} members; CST with "
                                 f"k={kmax} needs at least {kmax + 1}")
            if ref.sum() < kmax:
                raise ValueError(f"reference group of {label!r} has {int(ref.sum())} members; CST with "
                                 f"k={kmax} needs at least {kmax}")
            comp = np.flatnonzero(prot & ((data.decision == 0) if params.complainants == "negative" else True))
            comp, sampling = _sample(data, label, attrs, comp, params)
            moved = spec.intervened(attrs)  # do(race=Asian := White) also sets the pooled race
            members = np.flatnonzero(prot)  # only the protected move; others are as observed
            cf = _counterfactual_values(data, label, moved, names, X, scm, values, supplied.get(label),
                                        params.mediators, members)
            stats = None if params.counterfactual_normalization == "own" else X[:, :nf]
            # the state keeps the counterfactual centres of the complainants only: the search
            # never reads another record's counterfactual (10M records × 8 tests: ~5 GB)
            cf_points = normalise(_world(X, members, cf), kinds, levels, params.normalization, stats=stats,
                                  rows=comp)
            others = [data.groups[a] for a in params.protected_in_distance if a not in moved]
            if others:  # other protected attributes as nominal attributes (their group, as observed)
                cf_points = cf_points.with_nominal(np.column_stack(others)[comp])
            mine = cf[np.searchsorted(members, comp)]  # the complainants' counterfactuals
            del cf
            decision_cf = _counterfactual_decision(data, names, X[comp], mine, moved, comp)
            # their raw values on the distance's features, for cst_counterfactuals
            cf_values = None if params.evidence == "none" else np.ascontiguousarray(mine[:, :nf])
            del mine
            tests.append(Test(label, None, cf_points, np.packbits(prot), np.packbits(ref), decision_cf, comp,
                              sampling, cf_values=cf_values))
            nominal.append(others)
        # the factual points of every record, made once the counterfactual worlds are done (so
        # not held beside a world's columns and the SCM's steps: 0.4 GB at 10M HMDA records)
        del scm, values
        factual = normalise(X[:, :nf], kinds, levels, params.normalization)
        del X
        refused = data.decision == 0
        for test, others in zip(tests, nominal):
            test.factual = factual.with_nominal(np.column_stack(others)) if others else factual
        if params.bias_correction == "logistic":
            # the tests' surfaces are independent fits: two at a time (numpy's products let the
            # other thread run), each the same as fitted alone
            with ThreadPoolExecutor(2) as pool:
                surfaces = list(pool.map(lambda t: fit_group(factual.metric, refused,
                                                             np.flatnonzero(t.protected | t.reference)), tests))
            for test, beta in zip(tests, surfaces):
                test.surface = beta
        targets = {eq.target for eq in spec.scm.equations} if spec.scm is not None and spec.scm.equations else None
        dims = sum(kind != "categorical" for kind in kinds)
        return State(data.id_text, data.decision, tests, params, params.effect(targets), skipped, dims,
                     features, [data.levels(f) for f in features])

    def spill(self, state: State, folder: str) -> State:
        """The state with the tests' points of every record in files (one set per distinct
        points: tests that share them share the files); each piece reads them a block at a
        time (``engines.core.points_file``)."""
        written: dict[int, PointsFile] = {}
        for test in state.tests:
            key = id(test.factual)
            if key not in written:
                written[key] = PointsFile.write(test.factual, Path(folder) / f"points{len(written)}")
            test.factual = written[key]
        return state

    def pieces(self, state: State) -> list[tuple[tuple[int, int, int], ...]]:
        """Chunks (test, start, stop) of at most ``chunk_size`` complainants; consecutive chunks
        of tests that search one reference group (the race comparisons) go in one piece while
        their complainants fit in ``chunk_size``: the group is indexed once for them."""
        out: list[tuple[tuple[int, int, int], ...]] = []
        for chunk in chunks([len(test.complainants) for test in state.tests], state.params.chunk_size):
            if out and _shared(state.tests[out[-1][0][0]], state.tests[chunk[0]]) and \
                    sum(e - s for _, s, e in out[-1]) + chunk[2] - chunk[1] <= state.params.chunk_size:
                out[-1] = out[-1] + (chunk,)
            else:
                out.append((chunk,))
        return out

    def run_piece(self, state: State, piece: tuple[tuple[int, int, int], ...]) -> Tables:
        p = state.params
        tests = [state.tests[t] for t, _, _ in piece]
        hoods = search_shared(tests[0].factual, [(test.counterfactual.take(np.arange(s, e)), test.protected,
                                                  test.complainants[s:e]) for test, (_, s, e) in zip(tests, piece)],
                              tests[0].reference, max(p.k))
        parts = [_chunk_tables(state, test, s, e, hood) for test, (_, s, e), hood in zip(tests, piece, hoods)]
        # the streamed tables' rows by key: the chunks in the order of their attributes
        parts = [part for _, part in sorted(zip([test.attribute for test in tests], parts), key=lambda x: x[0])]
        return {name: pa.concat_tables([part[name] for part in parts]) for name in parts[0]}

    def combine(self, state: State, parts) -> Tables:
        out = concat_parts(parts, {"cst_claims": CLAIMS})
        # group rows by their keys, complainants in record order: independent of the chunking
        # (the evidence, streamed, is ordered the same way by its keys)
        out["cst_claims"] = flag_claims(stable_sort(out["cst_claims"], ["protected_attribute", "method", "k"]),
                                        state.params.alpha)
        sampling = pa.concat_tables([t.sampling for t in state.tests])
        population = {}
        for row in sampling.group_by("protected_attribute").aggregate([("population", "sum")]).to_pylist():
            population[row["protected_attribute"]] = row["population_sum"]
        out["cst_summary"] = summary(out["cst_claims"], population, state.effect, state.params.alpha)
        out["cst_sampling"] = pa.concat_tables([sampling, pa.Table.from_pylist(
            [{"protected_attribute": unit, "stratum": f"intersection not tested: {why}", "decision": None,
              "population": 0, "sampled": 0} for unit, why in sorted(state.skipped.items())], schema=SAMPLING)])
        return out


def _shared(a: Test, b: Test) -> bool:
    """Whether two tests search one reference group among the same points."""
    return a.factual is b.factual and np.array_equal(a.reference_bits, b.reference_bits)


def _chunk_tables(state: State, test: Test, s: int, e: int, hood) -> Tables:
    """A chunk's claims, evidence and counterfactual values (complainants ``s:e`` of ``test``)."""
    p = state.params
    comp = test.complainants[s:e]
    table = claims(state.ids, test.attribute, comp, hood, state.decision, test.decision_cf[s:e],
                   p.k, p.alpha, p.tau, p.max_distance, _shifts(test, comp, hood, s, e), p.overlap,
                   state.dims)
    depth = evidence_depth(table, len(comp), max(p.k), p.evidence)
    out = {"cst_claims": table,
           "cst_evidence": evidence(state.ids, test.attribute, comp, hood, depth, p.max_distance)}
    if test.cf_values is not None:
        mine = np.flatnonzero(kept(table, depth, len(comp), p.evidence))
        out["cst_counterfactuals"] = counterfactual_rows(state.ids, test.attribute, comp[mine],
                                                         test.cf_values[s + mine], state.features,
                                                         state.levels, test.decision_cf[s + mine])
    return out


def _shifts(test: Test, comp: np.ndarray, hood, s: int, e: int) -> dict[str, np.ndarray] | None:
    """The bias correction's moves of each neighbour's decision (``CSTParams.bias_correction``)
    by the one surface of both groups: the control group's and the factual test group's to the
    complainant's inputs (ST), the counterfactual test group's to its counterfactual (CST).
    μ̂ is computed once for each record that is a complainant or a neighbour, a block of them at
    a time (on a cluster their points are in files), and read at each neighbour: the same values
    as at each neighbour's own point (``bias_correction.surface`` is row by row), without
    gathering every neighbour's point."""
    if test.surface is None:
        return None
    groups = (hood.control, hood.test_factual, hood.test_counterfactual)
    mu = np.empty(len(test.factual))
    needed = np.zeros(len(mu), bool)
    needed[comp] = True
    for g in groups:
        needed[g.ravel()] = True
    needed = np.flatnonzero(needed)
    for lo in range(0, len(needed), _SURFACE_BLOCK):
        rows = needed[lo:lo + _SURFACE_BLOCK]
        mu[rows] = surface(test.surface, test.factual.take(rows).metric)
    centres = mu[comp][:, None]
    cf_centres = surface(test.surface, test.counterfactual.take(np.arange(s, e)).metric)[:, None]
    return {"control": centres - mu[hood.control],
            "test_factual": centres - mu[hood.test_factual],
            "test_counterfactual": cf_centres - mu[hood.test_counterfactual]}


_SURFACE_BLOCK = 1 << 20  # records whose μ̂ is computed at a time (_shifts)


def _units(data: AuditData, params: CSTParams) -> tuple[list[list[str]], dict[str, str]]:
    """The tested units: every protected attribute, then the intersections (the spec's, or for
    ``auto`` the pairs whose cells hold ``params.min_cell()`` records and that have
    counterfactuals: SCM equations or a table of their own); the auto pairs skipped, and why."""
    spec = data.spec
    resolved = resolve(spec, data.groups, params.intersections, params.min_cell())
    units, skipped = resolved.units, dict(resolved.skipped)
    if params.intersections == "auto" and (spec.scm is None or not spec.scm.equations):
        given = _supplied_tables(data, units) if isinstance(data.counterfactuals, dict) else {}
        skipped.update({"&".join(u): "no scm.equations and no counterfactual table for it"
                        for u in units if "&".join(u) not in given})
        units = [u for u in units if "&".join(u) in given]
    return [[p.name] for p in spec.protected] + units, skipped


def _sample(data, label: str, attrs: list[str], comp: np.ndarray, params: CSTParams) -> tuple[np.ndarray, pa.Table]:
    """The complainants tested (all, or the spec's stratified sample: strata are the attributes'
    recorded values × the decision) and, per stratum, how many there were and were sampled."""
    import polars as pl

    values = [_recorded(data, a, comp) for a in attrs]
    stratum = values[0]
    for v in values[1:]:
        stratum = np.char.add(np.char.add(stratum, " & "), v)
    decision = data.decision[comp].astype(np.int8)
    keys = np.char.add(np.char.add(decision.astype(str), "|"), stratum)
    chosen = comp if params.sample is None else stratified_sample(comp, keys, params.sample, params.sample_seed)
    picked = np.isin(comp, chosen)
    df = (pl.DataFrame({"stratum": stratum, "decision": decision, "picked": picked})
          .group_by(["stratum", "decision"]).agg(pl.len().cast(pl.Int64).alias("population"),
                                                  pl.col("picked").sum().cast(pl.Int64).alias("sampled"))
          .sort(["stratum", "decision"])
          .with_columns(pl.lit(label).alias("protected_attribute")))
    return chosen, df.select([f.name for f in SAMPLING]).to_arrow().cast(SAMPLING)


def _recorded(data, name: str, rows: np.ndarray) -> np.ndarray:
    """An attribute's recorded values of ``rows`` as text (the group code where the column is
    not staged, and for a range attribute, whose strata are its groups even where a spec's
    geography section stages its numbers)."""
    attribute = next(p for p in data.spec.protected if p.name == name)
    if not attribute.by_range and attribute.column in data.table.column_names:
        values = pc.cast(data.table[attribute.column].take(pa.array(rows)), pa.string()).fill_null("")
        return np.asarray(values.to_numpy(zero_copy_only=False)).astype(str)
    return data.groups[name][rows].astype(str)
