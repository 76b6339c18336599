"""``aequum bench validity``: the audit's own power and false-alarm table.

For each lender world of the HMDA generator (``engines.generators.hmda.WORLDS``: no
discriminatory term; a score penalty on two groups; on one intersection; on tract minority
share; on one input for one group) the shipped specs are run on the same applications twice:

* external: ``data/specs/hmda.yaml`` — the public LAR (no credit score), a surrogate model;
* internal: ``data/specs/hmda_lender.yaml`` — the lender's own records, every input of its
  decision (``decision.inputs: complete``), with a surrogate of the world's decisions as the
  model (:func:`lender_world`).

Both test the intersections the data allow (``intersections: auto`` of CST and regression): in
the internal audit Black women against White men among them.

Every engine of the spec runs serially in this process and writes one run to a scratch
warehouse, as the audit flow would; the table then reads ``audit.findings``: per world ×
audit × engine × attribute, whether a finding is flagged (a difference that calls for
attention) and whether it is evidence of disparate treatment, its robustness value, and the
truth: whether the world's penalty treats the attribute's protected group worse because of that
attribute (``affected``: :func:`affected`, the generator's controlled direct effects). A false
alarm is evidence on an unaffected attribute; a miss is an affected attribute with no evidence.
Where the generator knows who was harmed, each individual direct-effect finding (ST at each k;
CF where it holds every mediator) is scored too: its share of refused protected applicants
flagged, precision and recall against the direct truth (``audit.detection``).
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
AUDITS = {"external": "hmda.yaml", "internal": "hmda_lender.yaml"}
# the fewest applications bench validity runs: at 10 rows a world's target had a single class
# (refused by the model fit after ~30 s); below a few thousand the smallest groups fall under
# the engines' minimums in every world
MIN_ROWS = 5_000


def lender_world(raw: dict) -> None:
    """The internal audit of any world: the shipped lender spec's model is the default world's
    rule, so here a surrogate is fitted to the world's decisions from every input of them and
    the group indicators (on complete inputs the decisions' dependence on a group is identified,
    so the surrogate's is a direct effect, not an omitted input's shadow); CF holds every SCM
    variable (the direct effect); an ``asian`` attribute (Asian against White applicants) so
    the input-penalty world's group can be named."""
    raw["protected"].append({"name": "asian", "column": "derived_race", "protected_values": ["Asian"],
                             "reference_values": ["White"], "unmapped": "exclude"})
    raw["model"] = {"kind": "surrogate", "target": "decision", "seed": 0,
                    "features": ["log_income", "debt_to_income", "ltv", "credit_score", "underwriting_adjustment",
                                 "race", "ethnicity", "sex", "tract", "asian"]}
    raw["engines"]["cst"]["mediators"] = ["log_income", "debt_to_income", "ltv", "credit_score"]


def _spec(audit: str, world: str, rows: int, seed: int, engines: list[str] | None, edit=None, effect: float = 1.0):
    import yaml

    from aequum.engines.core.spec import parse_spec

    raw = yaml.safe_load((REPO / "data" / "specs" / AUDITS[audit]).read_text())
    raw["source"].update({"rows": rows, "seed": seed, "world": world, "effect": effect})
    if engines is not None:
        raw["engines"]["run"] = [e for e in raw["engines"]["run"] if e in engines]
    if audit == "internal":
        lender_world(raw)
    if edit is not None:
        edit(raw)
    return parse_spec(raw)


def affected(data, world: str, rows: int, seed: int, effect: float = 1.0) -> dict[str, bool]:
    """Per tested unit of ``data`` (attribute or intersection): is its protected group treated
    worse *because of* the unit's attributes — does any of its members lose an approval to the
    world's penalty (the generator's ``harmed``) that intervening on the unit's columns alone
    switches off (``hmda.penalised_after``: the controlled direct effect, jointly for an
    intersection)? A group that only shares members, inputs or tracts with the penalised
    (majority-minority tracts where Black applicants are penalised; Black applicants where the
    tracts are) is not affected: evidence on it is a false alarm."""
    import pyarrow as pa

    from aequum.engines.core.intersections import resolve, unit_groups
    from aequum.engines.generators import catalogue
    from aequum.engines.generators.hmda import penalised_after

    # the applications as the lender holds them (the same draws as either audit's records)
    pairs = list(catalogue.stream("hmda_lender", rows, seed, world=world, effect=effect))  # one generation
    records = pa.Table.from_batches([b for b, _ in pairs])
    harmed = np.asarray(pa.Table.from_batches([t for _, t in pairs])["harmed"]
                        .fill_null(False).to_numpy(zero_copy_only=False))
    mine = data.id_text.cast(pa.int64()).to_numpy()  # generated ids are the row numbers
    tract_columns = ("tract_minority_share", "tract_minority_population_percent")
    column = {p.name: "tract_minority_share" if p.column in tract_columns else p.column for p in data.spec.protected}
    units = [[a] for a in data.groups]
    engines = data.spec.engines
    if "cst" in engines.run:
        units += resolve(data.spec, data.groups, engines.cst.intersections, engines.cst.min_cell()).units
    if "regression" in engines.run:
        reg = engines.regression
        units += resolve(data.spec, data.groups, reg.intersections, reg.min_cell(data.spec)).units
    out = {}
    for unit in units:  # an intersection's protected group: protected in each of its attributes
        direct = harmed & ~penalised_after(world, records, {column[a] for a in unit}, effect)
        out["&".join(unit)] = bool(direct[mine][unit_groups(data.groups, unit) == 1].any())
    return out


def audit_world(audit: str, world: str, rows: int, seed: int, tmp: Path,
                engines: list[str] | None = None, edit=None, effect: float = 1.0) -> list[dict]:
    """Run one audit of one world (its penalty times ``effect``) into ``tmp`` and return its
    findings with the truth (``edit(raw)``: a change to the shipped spec first, e.g. another
    parameter)."""
    from aequum.engines.core.engine import run_serial
    from aequum.engines.core.models import model_fingerprint
    from aequum.engines.registry import get_engine
    from aequum.flows.engine_tasks import EngineOutcome
    from aequum.flows.bench.cst import _stage
    from aequum.flows.ground_truth import score_run
    from aequum.flows.preflight import staged_group_problems
    from aequum.flows.store.guard import UsageError
    from aequum.flows.store.warehouse import Warehouse

    spec = _spec(audit, world, rows, seed, engines, edit, effect)
    spec_dir = REPO / "data" / "specs"
    data = _stage(spec, spec_dir, tmp)
    unfit = staged_group_problems(spec, str(tmp / "lake"), spec.engines.run)
    if unfit:  # as an audit would skip the engine; here the table would compare unlike audits
        raise UsageError(f"bench validity, {world} world, {audit} audit, {rows:,} rows, seed {seed}: "
                         f"{next(iter(unfit.values()))}; run it with more --rows")
    results, outcomes = {}, []
    for name in spec.engines.run:
        engine = get_engine(name)
        t0 = time.perf_counter()
        tables = run_serial(engine, data, spec.engines.params(name))
        outcomes.append(EngineOutcome(name, "succeeded", time.perf_counter() - t0, 1, tables, dict(engine.tables)))
        results.update({t: (engine.tables[t], v) for t, v in tables.items()})
    detection = score_run(spec, spec_dir, outcomes, lambda _m: None)
    if detection is not None and detection.num_rows:
        from aequum.engines.detection import DETECTION

        results["detection"] = (DETECTION, detection)
    run_id = f"{world}-{audit}"
    with Warehouse(tmp / "wh.duckdb") as wh:
        wh.start_run(run_id, spec.name, spec.digest(), "bench", spec.run_parameters())
        wh.write_results(run_id, results)
        wh.finish_run(run_id, "succeeded", "bench", f"{rows}", model_fingerprint(data.model) if data.model else None)
        wh.create_views()
        findings = wh.con.sql(
            "SELECT engine, attribute, finding, headline, flagged, significant, evidence, robust, robustness_value, estimand, claim "
            "FROM audit.findings WHERE run_id = $r AND engine <> 'detection'",
            params={"r": run_id}).to_arrow_table().to_pylist()
        scored = wh.con.sql(
            "SELECT protected_attribute AS attribute, method, parameter, population, flagged, precision, recall "
            "FROM audit.detection WHERE run_id = $r AND effect = 'direct' AND \"group\" = 'pooled' "
            "AND ((method = 'ST' AND finding = 'significant') OR (method = 'CF' AND finding = 'discriminated'))",
            params={"r": run_id}).to_arrow_table().to_pylist() if "detection" in results else []
    truth = affected(data, world, rows, seed, effect)
    for f in findings:
        f.update({"world": world, "effect": effect, "seed": seed, "audit": audit, "affected": truth.get(f["attribute"])})
    by_k = {(s["method"], s["attribute"], s["parameter"]): s for s in scored}  # parameter: "k=15"; CF's "k=0"
    for f in findings:
        if f["engine"] != "cst":
            continue
        key = (("ST", f["attribute"], "k=" + f["finding"].rsplit(" ", 1)[1])
               if f["finding"].startswith("situation testing, k = ") else
               ("CF", f["attribute"], "k=0") if f["finding"] == "counterfactual fairness" else None)
        s = by_k.get(key)
        if s is not None:
                f.update({"flagged_share": s["flagged"] / s["population"] if s["population"] else None,
                          "precision": s["precision"], "recall": s["recall"]})
    return findings


def table(findings: list[dict]) -> list[dict]:
    """Per world × effect × seed × audit × engine: the attributes with evidence, the affected
    attributes among them (found) and the unaffected ones (false alarms), the flagged ones."""
    out = {}
    for f in findings:
        key = (f["world"], f["effect"], f["seed"], f["audit"], f["engine"])
        row = out.setdefault(key, {"world": key[0], "effect": key[1], "seed": key[2], "audit": key[3],
                                   "engine": key[4], "evidence": set(), "false_alarms": set(), "missed": set(),
                                   "flagged": set(), "affected": set()})
        a = f["attribute"]
        if f["affected"]:
            row["affected"].add(a)
        if f["flagged"]:
            row["flagged"].add(a)
        if f["evidence"]:
            row["evidence"].add(a)
            if not f["affected"]:
                row["false_alarms"].add(a)
    for row in out.values():
        row["missed"] = row["affected"] - row["evidence"]
    return [{k: (", ".join(sorted(v)) if isinstance(v, set) else v) for k, v in r.items()}
            for r in sorted(out.values(), key=lambda r: (r["world"], r["effect"], r["seed"], r["audit"], r["engine"]))]


def rates(findings: list[dict]) -> list[dict]:
    """Per world × effect × audit, over the seeds run: how many runs named each attribute as
    evidence (affected ones: found; others: false alarms) and how many missed each affected one."""
    runs, named, hit = {}, {}, {}
    for f in findings:
        key = (f["world"], f["effect"], f["audit"])
        runs.setdefault(key, set()).add(f["seed"])
        if f["evidence"]:
            named.setdefault(key, {}).setdefault((f["attribute"], bool(f["affected"])), set()).add(f["seed"])
        if f["affected"]:
            hit.setdefault(key, {}).setdefault(f["attribute"], set())
    out = []
    for key in sorted(runs):
        n = len(runs[key])
        found = {a: seeds for (a, aff), seeds in named.get(key, {}).items() if aff}
        alarms = {a: seeds for (a, aff), seeds in named.get(key, {}).items() if not aff}
        missed = {a: n - len(found.get(a, ())) for a in hit.get(key, {}) if n - len(found.get(a, ())) > 0}
        out.append({"world": key[0], "effect": key[1], "audit": key[2], "runs": n,
                    "found (runs)": ", ".join(f"{a} {len(s)}" for a, s in sorted(found.items())),
                    "false alarms (runs)": ", ".join(f"{a} {len(s)}" for a, s in sorted(alarms.items())),
                    "missed (runs)": ", ".join(f"{a} {m}" for a, m in sorted(missed.items()))})
    return out


def print_table(rows: list[dict]) -> None:
    import polars as pl

    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=1000, float_precision=3, fmt_str_lengths=400,
                   tbl_hide_column_data_types=True, tbl_hide_dataframe_shape=True):
        print(pl.DataFrame(rows, infer_schema_length=None))


def run(quick: bool = False, rows: int | list[int] | None = None, seeds: list[int] | None = None,
        effects: list[float] | None = None, worlds: list[str] | None = None,
        findings_file: str | None = None) -> list[dict]:
    """The table at ``rows`` applications (the command line's ``--rows``: its first size; default
    100,000, 50,000 with ``quick``, the size of the README's table: at 20,000 the smallest race group
    is too small for CST's k in some worlds), for each of ``seeds`` (default 1) and each of ``effects``
    (the worlds' penalties times it; default 1; the null world runs once, having none), over
    ``worlds`` (default all); engines outcome, reasons, regression and CST (with ``quick``) or
    every engine of the shipped specs; ``findings_file``: every finding with its truth, as JSON
    lines, for a look beyond the tables."""
    from aequum.engines.generators.hmda import WORLDS, check_world

    rows = (rows[0] if isinstance(rows, list) else rows) or (50_000 if quick else 100_000)
    if rows < MIN_ROWS:  # refused before any world is generated (else a fit fails later, unclearly)
        from aequum.flows.store.guard import UsageError

        raise UsageError(f"bench validity: --rows {rows:,} is too few rows; it needs at least {MIN_ROWS:,} "
                         "(every world's groups large enough for its engines; default 100,000)")
    engines = ["outcome", "reasons", "regression", "cst"] if quick else None
    for world in worlds or []:
        check_world(world)
    findings = []
    for seed in seeds or [1]:
        # the pricing world decides as the null one: its pricing is tested in tests/test_pricing_worlds.py
        for world in worlds or [w for w in WORLDS if WORLDS[w]["kind"] != "pricing"]:
            for effect in ([1.0] if WORLDS[world]["kind"] == "none" else effects or [1.0]):
                check_world(world, effect)
                for audit in AUDITS:
                    t0 = time.perf_counter()
                    with tempfile.TemporaryDirectory() as tmp:
                        findings += audit_world(audit, world, rows, seed, Path(tmp), engines, effect=effect)
                    print(f"{world} ×{effect:g} / {audit}, {rows:,} rows, seed {seed}: "
                          f"{time.perf_counter() - t0:.0f} s", flush=True)
    if findings_file:
        import json

        with open(findings_file, "w") as f:
            f.writelines(json.dumps(x, default=str) + "\n" for x in findings)
    rows_out = table(findings)
    print_table(rows_out)
    print("\nOver the seeds: runs naming each attribute as evidence (found: affected; false alarms: not):")
    print_table(rates(findings))
    st = [f for f in findings if "precision" in f]
    if st:
        print("\nIndividual direct-effect findings (ST significant, CF discriminated) against the direct truth:")
        print_table([{k: f.get(k) for k in ("world", "effect", "seed", "audit", "attribute", "finding", "flagged_share", "precision",
                                            "recall", "evidence", "robust", "robustness_value")} for f in st])
    return rows_out
