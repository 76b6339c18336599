"""Detection quality: engines' individual findings scored against a ground truth of harm."""
from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import stage_spec
from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import SpecError, load_spec, parse_spec
from aequum.engines.detection import DETECTION, GroundTruth, cst_detection, detection_table, scores
from aequum.engines.matching.cst.engine import CSTEngine
from aequum.engines.matching.cst.situation_testing import CLAIMS
from aequum.flows.engine_tasks import EngineOutcome
from aequum.flows.ground_truth import load_truth, score_run

REPO_SPEC = "data/specs/hmda.yaml"


def test_scores_worked_example():
    s = scores(np.array([1, 1, 1, 0, 0, 0], bool), np.array([1, 1, 0, 1, 0, 0], bool))
    assert (s["population"], s["flagged"], s["harmed"], s["true_positives"]) == (6, 3, 3, 2)
    assert s["precision"] == pytest.approx(2 / 3) and s["recall"] == pytest.approx(2 / 3)
    assert s["f1"] == pytest.approx(2 / 3) and s["base_rate"] == pytest.approx(0.5)
    none = scores(np.zeros(4, bool), np.array([1, 0, 0, 0], bool))
    assert none["precision"] is None and none["recall"] == 0.0 and none["f1"] is None
    missed = scores(np.array([1, 0], bool), np.array([0, 1], bool))
    assert missed["precision"] == 0.0 and missed["f1"] == 0.0
    # Wilson (1927): 2 of 3 -> [0.208, 0.939]; 0 of 0 -> no interval
    assert (s["precision_ci_low"], s["precision_ci_high"]) == pytest.approx((0.2077, 0.9385), abs=1e-4)
    assert none["precision_ci_low"] is None and none["recall_ci_high"] == pytest.approx(0.7935, abs=1e-4)


def test_groups_of_a_split_attribute_are_scored_apart():
    claims = _claims([("0", "CF", 0, True, None), ("1", "CF", 0, True, None), ("2", "CF", 0, False, None)])
    claims = claims.append_column("group", pa.array(["Black", "Asian", "Asian"]))
    truth = GroundTruth(np.array(["0", "1", "2"]), np.array([True, False, True]))
    rows = {r["group"]: r for r in detection_table({"cst": {"cst_claims": claims}}, truth).to_pylist()}
    assert (rows["Black"]["population"], rows["Black"]["precision"]) == (1, 1.0)
    assert (rows["Asian"]["population"], rows["Asian"]["precision"], rows["Asian"]["recall"]) == (2, 0.0, 0.0)


def _claims(rows):
    cols = {f.name: [] for f in CLAIMS}
    for rid, method, k, disc, sig in rows:
        for f in CLAIMS:
            cols[f.name].append({"record_id": rid, "protected_attribute": "race", "method": method, "k": k,
                                 "discriminated": disc, "significant": sig}.get(f.name))
    return pa.table(cols, schema=CLAIMS)


def test_cst_detection_scores_each_method_against_both_truths():
    claims = _claims([("0", "ST", 15, True, True), ("1", "ST", 15, True, False), ("2", "ST", 15, False, None),
                      ("3", "ST", 15, True, True), ("0", "CF", 0, True, None), ("1", "CF", 0, False, None),
                      ("2", "CF", 0, True, None), ("3", "CF", 0, False, None)])
    truth = GroundTruth(np.array(["0", "1", "2", "3", "4"]), np.array([True, False, False, True, True]),
                        {"race": pa.array([True, True, None, False, True], pa.bool_())})
    rows = {(r["method"], r["finding"], r["effect"]): r
            for r in detection_table({"cst": {"cst_claims": claims}}, truth).to_pylist()}
    st = rows[("ST", "significant", "direct")]
    assert (st["population"], st["flagged"], st["harmed"], st["true_positives"]) == (4, 2, 2, 2)
    assert st["precision"] == 1.0 and st["recall"] == 1.0 and st["same_kind"] and st["parameter"] == "k=15"
    # record 2 has no total-effect truth: not scored, and the note says so
    cf = rows[("CF", "discriminated", "total")]
    assert (cf["population"], cf["flagged"], cf["harmed"], cf["true_positives"]) == (3, 1, 2, 1)
    assert cf["same_kind"] and cf["note"].startswith("1 record(s)")
    assert not rows[("CF", "discriminated", "direct")]["same_kind"]
    assert ("CF", "significant", "direct") not in rows          # CF has no test
    assert not rows[("ST", "discriminated", "total")]["same_kind"]
    # the engines' row order does not matter
    again = detection_table({"cst": {"cst_claims": claims.take(np.arange(claims.num_rows)[::-1])}}, truth)
    assert again.equals(detection_table({"cst": {"cst_claims": claims}}, truth))


def test_duplicate_truth_ids_are_an_error():
    with pytest.raises(ValueError, match="duplicate ids"):
        cst_detection(_claims([("0", "CF", 0, True, None)]), GroundTruth(np.array(["0", "0"]), np.array([1, 0], bool)))


def _hmda_spec(tmp_path, rows=20_000, **truth):
    """The HMDA spec at ``rows`` with its applicant attributes only: the generator's truth has a
    column per applicant attribute (race, ethnicity, sex), none for the tract."""
    raw = yaml.safe_load(open(REPO_SPEC))
    raw["protected"] = [p for p in raw["protected"] if p["name"] != "tract"]
    raw["source"]["rows"] = rows
    raw["engines"]["cst"]["k"] = [15]
    if truth:
        raw["source"]["truth"] = truth
    path = tmp_path / "hmda.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_truth_spec_fields_are_checked(tmp_path):
    with pytest.raises(SpecError, match="source.truth.total"):
        load_spec(_hmda_spec(tmp_path, path="t.parquet", total={"religion": "x"}))
    with pytest.raises(SpecError, match="direct. or .total"):
        load_spec(_hmda_spec(tmp_path, path="t.parquet"))
    pq.write_table(pa.table({"id": ["0"], "harmed": [True]}), tmp_path / "t.parquet")
    spec = load_spec(_hmda_spec(tmp_path, path="t.parquet", direct="harmed", total={"race": "nope"}))
    with pytest.raises(SpecError, match=r"\['nope'\]"):
        load_truth(spec, tmp_path)
    pq.write_table(pa.table({"id": ["0"], "harmed": ["maybe"]}), tmp_path / "t.parquet")
    spec = load_spec(_hmda_spec(tmp_path, path="t.parquet", direct="harmed"))
    with pytest.raises(SpecError, match="source.truth.direct: column 'harmed' must be boolean"):
        load_truth(spec, tmp_path)


def test_only_the_scored_records_of_a_truth_file_are_read(tmp_path):
    """score_run reads the truth of the records some finding names (a 10M-record truth is not
    held for 0.16M scored): Parquet with integer ids and CSV score as the whole truth does, a
    duplicate id among records no engine examined does not matter, one among them is an error."""
    claims = _claims([("0", "ST", 15, True, True), ("1", "ST", 15, True, False), ("3", "ST", 15, False, None),
                      ("0", "CF", 0, True, None), ("1", "CF", 0, False, None), ("3", "CF", 0, True, None)])
    harmed = [True, False, True, True, False, True, False, True, False, True]
    total = [True, True, None, False, True, False, True, False, True, False]
    whole = detection_table({"cst": {"cst_claims": claims}},
                            GroundTruth(np.arange(10).astype(str), np.array(harmed), {"race": pa.array(total, pa.bool_())}))
    truth = pa.table({"id": list(range(10)) + [7], "harmed": harmed + [True], "tot": total + [None]})
    outcome = EngineOutcome("cst", "succeeded", 0.0, 1, {"cst_claims": claims}, {"cst_claims": CLAIMS})
    for name, write in (("t.parquet", lambda t, p: pq.write_table(t, p)),
                        ("t.csv", lambda t, p: pl.from_arrow(t).write_csv(p))):
        write(truth, tmp_path / name)
        spec = load_spec(_hmda_spec(tmp_path, path=name, direct="harmed", total={"race": "tot"}))
        assert score_run(spec, tmp_path, [outcome], lambda _m: None).equals(whole), name
        assert score_run(spec, tmp_path, [outcome.spool(tmp_path / f"spool_{name}")], lambda _m: None).equals(whole), name
        read = load_truth(spec, tmp_path, pa.array(["3", "1"]))
        assert sorted(read.frame["record_id"].to_list()) == ["1", "3"]
    pq.write_table(pa.table({"id": ["0", "1", "3", "3"], "harmed": [True] * 4}), tmp_path / "d.parquet")
    spec = load_spec(_hmda_spec(tmp_path, path="d.parquet", direct="harmed"))
    with pytest.raises(ValueError, match="duplicate ids"):
        score_run(spec, tmp_path, [outcome], lambda _m: None)


def test_generated_hmda_is_scored_against_its_own_truth(tmp_path):
    """The generated source's truth is its generator's; the table agrees with a direct join, and
    a named truth file (the same truth, written by ``aequum generate``) gives the same table."""
    spec_path = _hmda_spec(tmp_path)
    spec = load_spec(spec_path)
    data = stage_spec(spec, tmp_path, tmp_path)
    # the attributes, whose truth a named truth file gives column by column (no intersections)
    out = run_serial(CSTEngine(), data, spec.engines.cst.model_copy(update={"evidence": "none", "intersections": []}))
    outcome = EngineOutcome("cst", "succeeded", 0.0, 1, out, dict(CSTEngine.tables))
    table = score_run(spec, tmp_path, [outcome], lambda _m: None)
    # as the audit flow scores it: the results written to Parquet by the engine's task
    spooled = outcome.spool(tmp_path / "spool")
    assert not spooled.tables and spooled.row_counts() == {t: v.num_rows for t, v in out.items()}
    assert score_run(spec, tmp_path, [spooled], lambda _m: None).equals(table)
    assert table.schema == DETECTION
    det = pl.from_arrow(table)
    races = {f"race={v}" for v in spec.protected[0].protected_values}  # compare: both
    assert set(det["protected_attribute"]) == {"race", *races, "ethnicity", "sex"}
    from aequum.engines.generators.hmda import hmda_truth

    truth = pl.from_arrow(hmda_truth(20_000, 0))
    claims = pl.from_arrow(out["cst_claims"]).join(truth.rename({"id": "record_id"}), on="record_id")
    for attr, column in (("race", "harmed_total_derived_race"), ("sex", "harmed_total_derived_sex")):
        for method, flag in (("CST", "significant"), ("CF", "discriminated")):
            g = claims.filter((pl.col("protected_attribute") == attr) & (pl.col("method") == method)
                              & (pl.col("k") == (0 if method == "CF" else 15)))
            f, h = g[flag].fill_null(False), g[column]
            row = det.filter((pl.col("protected_attribute") == attr) & (pl.col("method") == method)
                             & (pl.col("finding") == flag) & (pl.col("effect") == "total")).row(0, named=True)
            assert (row["population"], row["flagged"], row["harmed"], row["true_positives"]) == \
                (g.height, f.sum(), h.sum(), (f & h).sum())
    # the same truth named in the spec (id, direct, per-attribute total columns)
    pq.write_table(hmda_truth(20_000, 0), tmp_path / "truth.parquet")
    named = load_spec(_hmda_spec(tmp_path, path="truth.parquet",
                                 direct={p.name: f"harmed_direct_{p.column}" for p in spec.protected},
                                 total={p.name: f"harmed_total_{p.column}" for p in spec.protected},
                                 direct_posterior={p.name: f"p_harmed_direct_{p.column}" for p in spec.protected},
                                 total_posterior={p.name: f"p_harmed_total_{p.column}" for p in spec.protected}))
    assert score_run(named, tmp_path, [outcome], lambda _m: None).equals(table)
    # the best achievable with as many findings: flagging by the generator's posterior
    assert det.filter(pl.col("flagged") > 0)["oracle_precision"].is_not_null().all()
    cf = det.filter((pl.col("method") == "CF") & (pl.col("effect") == "total") & (pl.col("protected_attribute") == "race"))
    assert cf["oracle_precision"][0] >= cf["base_rate"][0]


def test_lender_spec_is_the_generators_rule():
    from aequum.engines.generators.hmda import LENDER_RULE

    spec = load_spec("data/specs/hmda_lender.yaml")
    assert spec.model.intercept == pytest.approx(LENDER_RULE["intercept"], abs=1e-12)
    assert spec.model.coefficients == pytest.approx(LENDER_RULE["coefficients"], abs=1e-12)


def test_cf_with_the_lenders_model_recovers_the_total_effect(tmp_path):
    """An internal audit (the lender's inputs and rule, the generator's SCM structure with OLS
    coefficients): CF's findings are the total-effect truth, up to the few applicants both Black
    and Hispanic and the generator's clipping of DTI and LTV."""
    raw = yaml.safe_load(open("data/specs/hmda_lender.yaml"))
    raw["source"]["rows"] = 30_000
    raw["engines"]["cst"]["k"] = [15]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    spec = load_spec(tmp_path / "s.yaml")
    data = stage_spec(spec, tmp_path, tmp_path)
    out = run_serial(CSTEngine(), data, spec.engines.cst.model_copy(update={"evidence": "none"}))
    det = pl.from_arrow(score_run(spec, tmp_path, [EngineOutcome("cst", "succeeded", 0.0, 1, out, {})],
                                  lambda _m: None))
    cf = det.filter((pl.col("method") == "CF") & (pl.col("effect") == "total"))
    assert cf.height == 3 and (cf["harmed"] >= 20).all()
    big = cf.filter(pl.col("protected_attribute") != "sex")
    assert (big["precision"] >= 0.95).all() and (big["recall"] >= 0.95).all()
    # sex moves only income, by an OLS-estimated 0.1 in log income: ~20 marginal applicants
    assert (cf["precision"] >= 0.85).all() and (cf["recall"] >= 0.9).all()
    # against the direct effect CF over-reports: the total effect is larger than the penalty
    direct = det.filter((pl.col("method") == "CF") & (pl.col("effect") == "direct")
                        & (pl.col("protected_attribute") == "race"))
    assert direct["precision"][0] < 0.8


def test_pba_inputs_are_scored_among_the_refused_considered_inputs():
    from aequum.engines.verification.engine import INPUTS

    rows = [  # record, setting, considered, decision, verdict
        ("0", "observed", True, 0, "verified"), ("1", "observed", True, 0, "falsified"),
        ("2", "observed", True, 0, "verified"), ("3", "observed", False, 0, "verified"),
        ("4", "observed", True, 1, "verified"), ("0", "flipped", True, 0, "falsified"),
    ]
    cols = {f.name: [] for f in INPUTS}
    for rid, setting, considered, decision, verdict in rows:
        for f in INPUTS:
            cols[f.name].append({"attribute": "race", "record_id": rid, "group_name": "protected",
                                 "setting": setting, "delta": 1.0, "considered": considered,
                                 "decision": decision, "verdict": verdict}.get(f.name))
    truth = GroundTruth(np.array(["0", "1", "2", "3", "4"]), np.array([True, True, False, True, True]))
    det = {(r["method"]): r for r in detection_table({"pba": {"pba_inputs": pa.table(cols, schema=INPUTS)}},
                                                     truth).to_pylist()}
    obs = det["observed"]
    assert (obs["population"], obs["flagged"], obs["harmed"], obs["true_positives"]) == (3, 2, 2, 1)
    assert obs["parameter"] == "delta=1.0" and obs["effect"] == "direct" and obs["same_kind"]
    assert det["flipped"]["flagged"] == 0 and det["flipped"]["precision"] is None


def test_path_specific_runs_have_no_truth_of_their_kind():
    claims = _claims([("0", "CF", 0, True, None), ("1", "CF", 0, False, None), ("0", "ST", 15, True, True),
                      ("1", "ST", 15, False, False)])
    from aequum.engines.matching.cst.situation_testing import summary

    truth = GroundTruth(np.array(["0", "1"]), np.array([True, False]), {"race": np.array([True, True])})
    s = summary(claims, effect="path-specific: income held at factual values")
    det = pl.from_arrow(detection_table({"cst": {"cst_claims": claims, "cst_summary": s}}, truth))
    assert not det.filter(pl.col("method") == "CF")["same_kind"].any()
    assert det.filter((pl.col("method") == "ST") & (pl.col("effect") == "direct"))["same_kind"].all()


@pytest.mark.prefect
def test_audit_of_a_generated_source_writes_detection_findings_and_report(prefect_server, tmp_path):
    from aequum.flows.audit import run_audit
    from aequum.flows.commands.report import write_report
    from aequum.flows.store.warehouse import Warehouse

    raw = yaml.safe_load(open(REPO_SPEC))
    raw["source"]["rows"] = 20_000
    raw["engines"]["run"] = ["outcome", "cst"]
    # three attributes of 150 sampled complainants each (no intersections)
    raw["engines"]["cst"].update({"k": [15], "sample": 150, "intersections": []})
    raw["protected"][0]["compare"] = "pooled"
    raw["protected"] = [p for p in raw["protected"] if p["name"] != "tract"]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    wh_path = str(tmp_path / "wh.duckdb")
    run_audit(str(tmp_path / "s.yaml"), warehouse=wh_path, lake=str(tmp_path / "lake"), run_id="t-1", workers=1)
    with Warehouse(wh_path, read_only=True) as wh:
        assert wh.run("t-1")["status"] == "succeeded"
        det = pl.from_arrow(wh.result("detection", "t-1"))
        sampling = pl.from_arrow(wh.result("cst_sampling", "t-1"))
        findings = pl.from_arrow(wh.con.sql("SELECT * FROM audit.findings WHERE engine = 'detection'").to_arrow_table())
    assert set(det["engine"]) == {"cst"} and set(det["protected_attribute"]) == {"race", "ethnicity", "sex"}
    # 150 complainants sampled per attribute, and scored as sampled
    assert sampling.group_by("protected_attribute").agg(pl.col("sampled").sum())["sampled"].to_list() == [150] * 3
    assert (det.filter(pl.col("method") == "CF")["population"] == 150).all()
    assert findings.height == det["same_kind"].sum() and findings["headline"].sum() == 6
    assert all("harmed" in s for s in findings["statement"])
    text = write_report(wh_path, "t-1", tmp_path / "r.html").read_text()
    assert "Against the ground truth" in text and "Complainant sample" in text


def test_oracle_flags_the_highest_posteriors():
    claims = _claims([(str(i), "CF", 0, i in (0, 1), None) for i in range(5)])
    truth = GroundTruth(np.array([str(i) for i in range(5)]), np.array([1, 0, 0, 1, 1], bool),
                        direct_posterior=np.array([0.2, 0.1, 0.5, 0.9, 0.5]))
    (row,) = [r for r in detection_table({"cst": {"cst_claims": claims}}, truth).to_pylist()
              if r["effect"] == "direct"]
    # two flagged; the two highest posteriors are records 3 (0.9) and 2 (0.5, before 4 by id)
    assert row["flagged"] == 2 and row["precision"] == 0.5
    assert row["oracle_precision"] == 0.5 and row["oracle_recall"] == pytest.approx(1 / 3)
    # half of the 3 harmed is 2: records 3 (harmed), 2 (not), 4 (harmed) -> 2 of 3
    assert row["oracle_precision_half_recall"] == pytest.approx(2 / 3)


def _half_recall_by_hand(posterior, harmed, ids) -> float | None:
    """Flag one record at a time, highest posterior first (ties: the smaller id as text), until
    the flagged hold at least half of the harmed."""
    order = sorted(range(len(ids)), key=lambda i: (-posterior[i], ids[i]))
    total, hit = int(sum(harmed)), 0
    for m, i in enumerate(order, start=1):
        hit += int(harmed[i])
        if total and 2 * hit >= total:
            return hit / m
    return None


def test_oracle_half_recall_is_the_shortest_ranked_prefix_holding_half_the_harmed():
    from aequum.engines.detection import oracle

    rng = np.random.default_rng(7)
    for n in (1, 2, 5, 40, 301):
        posterior = np.round(rng.random(n), 1)  # many ties, broken by record id
        harmed = rng.random(n) < posterior
        ids = [str(i) for i in rng.permutation(n)]
        df = pl.DataFrame({"record_id": ids, "h": harmed, "p": posterior})
        got = oracle(df, "h", "p", min(n, 3))["oracle_precision_half_recall"]
        want = _half_recall_by_hand(posterior, harmed, ids)
        assert got == (pytest.approx(want) if want is not None else None)
        # the rows' order does not matter
        assert oracle(df.reverse(), "h", "p", min(n, 3)) == oracle(df, "h", "p", min(n, 3))
    perfect = pl.DataFrame({"record_id": ["a", "b", "c", "d"], "h": [True, False, True, True],
                            "p": [1.0, 0.0, 1.0, 1.0]})
    assert oracle(perfect, "h", "p", 1)["oracle_precision_half_recall"] == 1.0
    assert oracle(perfect.with_columns(pl.lit(False).alias("h")), "h", "p", 1)["oracle_precision_half_recall"] is None


def test_no_ranking_beats_the_posteriors_precision_at_half_recall_on_average():
    """The ceiling the detection table reports: when harm follows the posterior, flagging by it
    finds half of the harmed with a higher precision, on average over draws, than flagging by a
    noisier score, a random order or the reverse."""
    from aequum.engines.detection import oracle

    rng = np.random.default_rng(3)
    n = 500
    posterior = rng.beta(0.6, 1.2, n)
    ids = [f"{i:04d}" for i in range(n)]
    others = {"noisy": posterior + rng.normal(0, 0.15, n), "random": rng.random(n), "reverse": -posterior}
    mean = dict.fromkeys(["posterior", *others], 0.0)
    draws = 200
    for _ in range(draws):
        harmed = rng.random(n) < posterior
        for name, score in {"posterior": posterior, **others}.items():
            df = pl.DataFrame({"record_id": ids, "h": harmed, "p": score})
            mean[name] += oracle(df, "h", "p", 1)["oracle_precision_half_recall"] / draws
    base = float(posterior.mean())
    assert mean["posterior"] > mean["noisy"] + 0.01 > mean["random"] > mean["reverse"]
    assert mean["random"] == pytest.approx(base, abs=0.02)  # random order: the base rate


def test_cf_holding_every_mediator_recovers_the_direct_effect(tmp_path):
    """The lender's model with every SCM variable held at its factual value: only the group's
    own input to the rule (the penalty) moves — CF's findings are the direct-effect truth."""
    raw = yaml.safe_load(open("data/specs/hmda_lender.yaml"))
    raw["source"]["rows"] = 30_000
    raw["engines"]["cst"].update({"k": [15], "mediators": ["log_income", "debt_to_income", "ltv", "credit_score"]})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    spec = load_spec(tmp_path / "s.yaml")
    data = stage_spec(spec, tmp_path, tmp_path)
    out = run_serial(CSTEngine(), data, spec.engines.cst.model_copy(update={"evidence": "none"}))
    assert set(pl.from_arrow(out["cst_summary"]).filter(pl.col("method") == "CF")["effect"]) == {
        "direct: every mediator (log_income, debt_to_income, ltv, credit_score) held at factual values"}
    det = pl.from_arrow(score_run(spec, tmp_path, [EngineOutcome("cst", "succeeded", 0.0, 1, out, {})],
                                  lambda _m: None))
    cf = det.filter((pl.col("method") == "CF") & (pl.col("effect") == "direct")
                    & pl.col("protected_attribute").is_in(["race", "ethnicity"]))
    assert cf["same_kind"].all() and (cf["harmed"] >= 50).all()
    # scored against each attribute's own (controlled) direct effect: for applicants both Black
    # and Hispanic the other attribute keeps the penalty
    assert (cf["precision"] >= 0.99).all() and (cf["recall"] >= 0.99).all()
    sex = det.filter((pl.col("method") == "CF") & (pl.col("protected_attribute") == "sex"))
    assert sex["flagged"].max() == 0  # sex reaches the rule only through income: no direct effect


def test_detection_intervals_are_the_outcome_metrics_wilson_intervals_exact_at_the_ends():
    from aequum.engines.detection import scores
    from aequum.engines.outcome.stats import wilson_interval

    flagged = np.array([True] * 7 + [False] * 5)
    harmed = np.array([False] * 7 + [True] * 5)  # nothing flagged was harmed: precision 0/7
    s = scores(flagged, harmed)
    assert (s["precision_ci_low"], s["precision_ci_high"]) == wilson_interval(0, 7, 0.95)
    assert s["precision_ci_low"] == 0.0 and s["recall_ci_low"] == 0.0
    s = scores(harmed, harmed)  # every harmed flagged: recall 5/5
    assert s["recall_ci_high"] == 1.0 and (s["recall_ci_low"], s["recall_ci_high"]) == wilson_interval(5, 5, 0.95)


def test_bench_detection_measures_a_spec(capsys):
    """``aequum bench detection``'s measurement, at a small size: the detection table of the
    lender's own spec, CF's findings recovering the total effect, and the ceiling at recall 0.5
    at least the base rate."""
    from pathlib import Path

    from aequum.flows.bench.detection import measure

    det = measure(Path("data/specs/hmda_lender.yaml"), 20_000, "lender", k=[15])
    assert set(det.columns) == {*DETECTION.names, "spec"} and set(det["spec"]) == {"lender"}
    cf = det.filter((pl.col("method") == "CF") & (pl.col("effect") == "total")
                    & (pl.col("protected_attribute") == "race"))
    assert cf["precision"][0] >= 0.9 and cf["recall"][0] >= 0.9
    assert (cf["oracle_precision_half_recall"] >= cf["base_rate"]).all()
    assert "lender, 20,000 rows" in capsys.readouterr().out
