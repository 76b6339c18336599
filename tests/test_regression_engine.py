"""The controlled-disparity engine (``regression``): the denial difference after controls (the
linear probability model) and the denial logit on the same rows, their tests across the run's
attributes, the LPM's sensitivity, and the findings."""
from __future__ import annotations

import copy

import numpy as np
import pyarrow as pa
import pytest

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import SpecError, parse_spec
from aequum.engines.regression.engine import ESTIMATES, RegressionEngine, held_cells, resolve_controls
from aequum.engines.regression.logit import controlled_logit
from aequum.engines.regression.design import Categorical
from aequum.engines.regression.sensitivity import ALL_CONTROLS, controlled_lpm

DTI = ["<20%", "20%-<30%", "30%-<36%", "36", "40", "45", "50%-60%", ">60%"]
RAW = {
    "name": "g", "source": {"kind": "csv", "path": "x.csv", "id_column": "id"},
    "protected": [{"name": "race", "column": "race", "protected_values": ["B"], "reference_values": ["W"]},
                  {"name": "sex", "column": "sex", "protected_values": ["F"], "reference_values": ["M"]}],
    "decision": {"column": "y", "favourable": [1]},
    "features": [{"name": "income", "units": "thousands USD"},
                 {"name": "dti", "type": "ordinal", "order": DTI},
                 {"name": "loan_type", "type": "categorical", "categories": ["1", "2", "3"]},
                 {"name": "age", "type": "ordinal", "order": ["<25", "25-44", ">44"], "mutability": "immutable"}],
    "engines": {"run": ["regression"], "regression": {"intersections": []}},  # the attributes alone
}


def data(n: int = 3000, penalty: float = 0.0, dti_shift: float = 0.0, seed: int = 0, n_female: int | None = None,
         everyone_approved: bool = False, raw: dict | None = None) -> AuditData:
    """Denial probability rises with the DTI bin and falls with income; B applicants carry
    ``penalty`` (a direct effect) and sit ``dti_shift`` bins higher (a recorded difference)."""
    rng = np.random.default_rng(seed)
    race = (rng.random(n) < 0.35).astype(np.int8)
    bins = np.clip(np.round(rng.normal(3.0 + dti_shift * race, 1.6)), 0, len(DTI) - 1).astype(int)
    income = rng.lognormal(4.4 - 0.2 * race, 0.5)
    loan_type = rng.choice(["1", "2", "3"], n, p=[0.6, 0.3, 0.1])
    sex = np.zeros(n, np.int8)
    sex[: (n // 2 if n_female is None else n_female)] = 1
    p = 0.05 + 0.06 * bins - 0.001 * (income - 80) + 0.03 * (loan_type == "2") + penalty * race
    denied = rng.random(n) < np.clip(p, 0.01, 0.95)
    if everyone_approved:
        denied[:] = False
    table = pa.table({
        "_id": [str(i) for i in range(n)], "_row": pa.array(np.arange(n)),
        "race": np.where(race, "B", "W"), "_g_race": pa.array(race),
        "sex": np.where(sex, "F", "M"), "_g_sex": pa.array(sex),
        "_decision": pa.array((~denied).astype(np.int8)), "income": income,
        "dti": np.array(DTI, dtype=object)[bins], "loan_type": loan_type,
        "age": rng.choice(["<25", "25-44", ">44"], n)})
    return AuditData(parse_spec(raw or RAW), table)


def run(d: AuditData) -> dict[str, list[dict]]:
    out = run_serial(RegressionEngine(), d, d.spec.engines.regression)
    return {name: t.to_pylist() for name, t in out.items()}


def by_attribute(rows):
    return {r["attribute"]: r for r in rows}


def test_a_planted_direct_penalty_is_found_and_equals_the_lpm():
    d = data(penalty=0.08)
    out = run(d)
    race = by_attribute(out["regression_estimates"])["race"]
    assert race["estimate"] == pytest.approx(0.08, abs=0.03) and race["significant"] and race["p_adjusted"] < 0.001
    assert race["ci_low"] > 0 and race["controls"] == "income, dti, loan_type"  # age is immutable
    assert race["n_protected"] + race["n_reference"] == race["n"] == len(d) and race["dropped_null"] == 0
    # the same numbers as the model fitted directly, with the ordinal DTI as dummies of its bins
    # and the other attribute's groups held (not a benchmark)
    g = d.groups["race"]
    y = 1.0 - d.decision
    sex = held_cells([d.groups["sex"]], 30, y, np.flatnonzero((g == 0) | (g == 1)))
    direct = controlled_lpm(y, g, [d.column_values("income"), Categorical(d.column_values("dti"), DTI),
                                   Categorical(d.column_values("loan_type"), ["1", "2", "3"]), sex],
                            ["income", "dti", "loan_type", "sex (groups)"], robust_multiplier=2.0, held=1)
    assert race["estimate"] == direct.estimate and race["se"] == direct.se and race["rv_q1"] == direct.rv_q
    dti = direct.bound("dti", 2.0)
    # robustness is judged at the default multiplier, 2: against each control and all together
    assert direct.strongest_control == race["strongest_control"] and race["robust_multiplier"] == 2.0
    assert race["adjusted_at_strongest"] == direct.bound(race["strongest_control"], 2.0).adjusted_estimate
    assert race["robust"] is True and dti.adjusted_ci_low > 0
    at2 = [b for c in direct.sensitivity for b in c.bounds if b.multiplier == 2.0]
    assert len(at2) == 4 and all(b.adjusted_ci_low > 0 for b in at2)
    # at 1 the same holds, and a smaller robust_multiplier never turns a robust estimate fragile
    assert controlled_lpm(y, g, [d.column_values("income"), Categorical(d.column_values("dti"), DTI),
                                 Categorical(d.column_values("loan_type"), ["1", "2", "3"]), sex],
                          ["income", "dti", "loan_type", "sex (groups)"], robust_multiplier=1.0, held=1).robust is True
    bench = [r for r in out["regression_benchmarks"] if r["attribute"] == "race"]
    assert [(r["control"], r["multiplier"]) for r in bench] == [
        (c, k) for c in ("income", "dti", "loan_type", ALL_CONTROLS) for k in (1.0, 2.0, 3.0)]
    assert all(0 <= r["r2dz_x"] < 1 and 0 <= r["r2yz_dx"] <= 1 for r in bench)
    sex = by_attribute(out["regression_estimates"])["sex"]  # nothing planted on sex
    assert not sex["significant"] and sex["robust"] is False
    # Holm over the run's two attributes
    assert race["p_adjusted"] == pytest.approx(min(1, 2 * race["p_value"]))
    # the denial logit on the same rows: the penalty as an odds ratio above 1, tested the same way
    assert race["odds_ratio"] > 1 and race["or_ci_low"] > 1 and race["logit_significant"]
    assert race["odds_ratio"] == pytest.approx(np.exp(race["logit_coefficient"]), rel=1e-12)
    assert race["ame"] == pytest.approx(0.08, abs=0.03) and race["ame_ci_low"] > 0
    assert race["logit_p_adjusted"] == pytest.approx(min(1, 2 * race["logit_p_value"]))
    assert sex["logit_p_adjusted"] == pytest.approx(max(race["logit_p_adjusted"], sex["logit_p_value"]))
    assert not sex["logit_significant"] and sex["or_ci_low"] < 1 < sex["or_ci_high"]
    assert race["e_value"] > race["e_value_ci"] > 1 and sex["e_value_ci"] == 1.0
    assert race["logit_note"] is None and sex["logit_note"] is None


def test_the_engine_logit_equals_controlled_logit_called_directly():
    """Same rows (nulls in a control dropped, as the LPM drops them), same controls, same
    numbers; the p-values adjusted across the run's attributes as the LPM's are."""
    raw = copy.deepcopy(RAW)
    raw["features"][0]["nullable"] = True
    raw["engines"]["regression"] = {"correction": "bh", "confidence": 0.9, "intersections": []}
    d = data(raw=raw, penalty=0.06, seed=11)
    income = d.table["income"].to_numpy().copy()
    income[5:35] = np.nan
    d.table = d.table.set_column(d.table.schema.get_field_index("income"), "income",
                                 pa.array(income, from_pandas=True))
    out = by_attribute(run(d)["regression_estimates"])
    names = list(ESTIMATES.names)
    assert names[names.index("odds_ratio"):names.index("logit_se_classical") + 1] == [
        "odds_ratio", "or_ci_low", "or_ci_high", "logit_coefficient", "logit_se", "logit_p_value",
        "logit_p_adjusted", "logit_significant", "ame", "ame_ci_low", "ame_ci_high", "e_value", "e_value_ci",
        "logit_note", "fixed_effects", "cluster", "clusters", "se_cluster", "logit_se_classical"]
    assert names[names.index("inference"):] == ["inference", "logit_inference", "bootstrap_draws", "bootstrap_weights",
                                                "separated_rows", "separated_levels",
                                                "logit_log_likelihood", "logit_pseudo_r2"]
    controls = [d.column_values("income"), Categorical(d.column_values("dti"), DTI),
                Categorical(d.column_values("loan_type"), ["1", "2", "3"])]
    p = {}
    for attribute, other in (("race", "sex"), ("sex", "race")):
        row = out[attribute]
        # the logit also holds the other attribute's group: protected / reference / neither
        g = d.groups[other]
        held = Categorical(np.where(g == 1, 1, np.where(g == 0, 0, 2)), ["reference", "protected", "neither"])
        direct = controlled_logit(1.0 - d.decision, d.groups[attribute], [*controls, held],
                                  ["income", "dti", "loan_type", f"{other} (group)"], confidence=0.9)
        assert direct.converged and direct.n == row["n"] == len(d) - 30 and direct.dropped_null == 30
        assert (row["odds_ratio"], row["or_ci_low"], row["or_ci_high"]) == (
            direct.odds_ratio, direct.or_ci_low, direct.or_ci_high)
        assert (row["logit_coefficient"], row["logit_se"], row["logit_p_value"]) == (
            direct.coefficient, direct.se, direct.p_value)
        assert (row["ame"], row["ame_ci_low"], row["ame_ci_high"]) == (
            direct.ame, direct.ame_ci_low, direct.ame_ci_high)
        assert (row["e_value"], row["e_value_ci"]) == (direct.e_value, direct.e_value_ci)
        # the note both models share (the rows dropped) stays in note; the logit adds nothing
        assert direct.note == "30 rows with a null in the outcome, the group or a control dropped"
        assert row["note"] == direct.note and row["logit_note"] is None
        p[attribute] = direct.p_value
    # Benjamini-Hochberg over two attributes, at 1 - confidence = 0.1
    lo, hi = sorted(p.values())
    bh = {a: min(1.0, hi) if v == hi else min(2 * lo, hi) for a, v in p.items()}
    for attribute in p:
        assert out[attribute]["logit_p_adjusted"] == pytest.approx(bh[attribute], rel=1e-12)
        assert out[attribute]["logit_significant"] == (bh[attribute] < 0.1)
    assert out["race"]["logit_significant"] is True


def test_a_disparity_the_controls_explain_is_not_significant_after_them():
    """B applicants differ only in a recorded input (higher DTI bins, lower income): a large raw
    difference in denial rates, and none after the controls."""
    race = by_attribute(run(data(n=6000, dti_shift=1.5, seed=4))["regression_estimates"])["race"]
    assert race["raw_difference"] > 0.08
    assert abs(race["estimate"]) < 0.025 and not race["significant"] and race["p_value"] > 0.05
    assert race["ci_low"] < 0 < race["ci_high"] and race["rv_q1_alpha"] == 0


def test_results_do_not_depend_on_the_row_order():
    d = data(penalty=0.05, seed=1)
    order = np.random.default_rng(2).permutation(len(d))
    a = run_serial(RegressionEngine(), d, d.spec.engines.regression)
    b = run_serial(RegressionEngine(), AuditData(d.spec, d.table.take(order)), d.spec.engines.regression)
    for name in a:
        assert a[name].schema == b[name].schema
        for column in a[name].column_names:
            x, y = a[name][column].to_pylist(), b[name][column].to_pylist()
            if pa.types.is_floating(a[name].schema.field(column).type):
                assert np.allclose(np.array(x, float), np.array(y, float), rtol=1e-12, atol=1e-15,
                                   equal_nan=True), (name, column)
            else:
                assert x == y, (name, column)


def test_degenerate_segments_give_notes():
    small = by_attribute(run(data(n_female=12, seed=5))["regression_estimates"])["sex"]
    assert small["p_value"] is None and small["significant"] is None and small["robust"] is None
    assert "fewer than 30 applicants in a group (12 protected" in small["note"]
    assert small["estimate"] is not None  # reported, not tested
    # the logit likewise: its estimates kept, not tested
    assert small["odds_ratio"] is not None and small["ame"] is not None and small["logit_se"] is not None
    assert small["logit_p_value"] is None and small["logit_p_adjusted"] is None and small["logit_significant"] is None
    out = by_attribute(run(data(everyone_approved=True))["regression_estimates"])
    for row in out.values():
        assert row["estimate"] is None and row["p_value"] is None and row["significant"] is None
        assert "the outcome takes one value" in row["note"] and row["raw_difference"] == 0
        assert row["odds_ratio"] is None and row["logit_p_value"] is None and row["logit_significant"] is None
        assert row["e_value"] is None and row["ame"] is None and row["logit_note"] is None  # the note says why
    raw = copy.deepcopy(RAW)
    raw["engines"]["regression"] = {"controls": ["income", "age"]}
    d = data(raw=raw)
    d.table = d.table.set_column(d.table.schema.get_field_index("age"), "age", pa.array(["<25"] * len(d)))
    race = by_attribute(run(d)["regression_estimates"])["race"]
    assert race["controls"] == "income" and "'age' has one level" in race["note"] and race["estimate"] is not None


def test_nulls_in_a_control_are_dropped_and_counted():
    raw = copy.deepcopy(RAW)
    raw["features"][0]["nullable"] = True
    d = data(raw=raw, penalty=0.05)
    income = d.table["income"].to_numpy().copy()
    income[:40] = np.nan
    d.table = d.table.set_column(d.table.schema.get_field_index("income"), "income",
                                 pa.array(income, from_pandas=True))
    race = by_attribute(run(d)["regression_estimates"])["race"]
    assert race["dropped_null"] == 40 and race["n"] == len(d) - 40 and "40 rows with a null" in race["note"]


def test_controls_default_and_are_checked():
    spec = parse_spec(RAW)
    assert resolve_controls(spec, spec.engines.regression) == ["income", "dti", "loan_type"]
    raw = copy.deepcopy(RAW)
    raw["engines"]["cst"] = {"features": ["income", "dti"]}
    spec = parse_spec(raw)
    assert resolve_controls(spec, spec.engines.regression) == ["income", "dti"]
    raw["engines"]["regression"] = {"controls": ["loan_type"]}
    spec = parse_spec(raw)
    assert resolve_controls(spec, spec.engines.regression) == ["loan_type"]
    assert RegressionEngine().columns(spec, spec.engines.regression) == ["_g_race", "_g_sex", "_decision", "loan_type"]
    raw["engines"]["regression"] = {"controls": ["income", "ghost"]}
    with pytest.raises(SpecError, match=r"engines.regression.controls: \['ghost'\] are not declared features"):
        parse_spec(raw)
    raw["engines"]["regression"] = {"benchmark_multipliers": [1, -2]}
    with pytest.raises(SpecError, match="benchmark_multipliers"):
        parse_spec(raw)
    raw["engines"]["regression"] = {"tolerance": 1}
    with pytest.raises(SpecError, match="tolerance"):
        parse_spec(raw)


def test_an_hmda_audit_writes_the_tables_and_the_findings(tmp_path):
    """The generated HMDA LAR (a planted +5-point DTI penalty for Black and Hispanic applicants,
    and lower latent credit for some groups that the LAR does not record) through the real
    staging and warehouse: audit.regression_estimates, audit.regression_benchmarks, the
    findings with their six extra columns, and the trend view."""
    from audit_tables import small_audit
    from aequum.flows.store.warehouse import Warehouse

    def edit(raw):
        raw.pop("model", None)  # no surrogate to fit: the regression reads the recorded decisions

    path = small_audit(tmp_path, rows=20_000, engines=["regression"], run_id="hmda-reg",
                       spec_name="hmda.yaml", edit=edit)
    with Warehouse(path, read_only=True) as wh:
        est = wh.con.sql("SELECT * FROM audit.regression_estimates ORDER BY attribute").to_arrow_table().to_pylist()
        bench = wh.con.execute("SELECT count(*) FROM audit.regression_benchmarks").fetchall()[0][0]
        found = wh.con.sql("SELECT * FROM audit.findings_regression ORDER BY attribute").to_arrow_table()
        trends = wh.con.execute("SELECT count(*) FROM audit.regression_trends").fetchall()[0][0]
        in_union = wh.con.execute("SELECT count(*) FROM audit.findings WHERE engine = 'regression'").fetchall()[0][0]
    by = {r["attribute"]: r for r in est}
    race = by["race"]
    assert race["controls"] == ("log income, log loan_amount, log property_value, combined_loan_to_value_ratio, "
                                "debt_to_income_ratio, loan_type, loan_purpose")
    assert race["estimate"] > 0 and race["significant"] and race["n"] > 5000
    # compared within market and lender, errors clustered by lender
    assert race["fixed_effects"] == "derived_msa_md, lei" and race["cluster"] == "lei" and race["clusters"] > 100
    assert race["logit_se"] != race["logit_se_classical"] and race["se_cluster"] is not None
    with Warehouse(path, read_only=True) as wh:
        segments = wh.con.sql("SELECT attribute, segment, n, odds_ratio FROM audit.regression_segments").fetchall()
    assert {s for _, s, _, _ in segments} == {f"loan_type = {t}" for t in "1234"}
    conventional = next(r for r in segments if r[:2] == ("race", "loan_type = 1"))
    assert race["n"] > conventional[2] > 0.5 * race["n"] and conventional[3] is not None
    # each control and the controls together, at k = 1, 2, 3
    assert bench == sum((len(r["controls"].split(", ")) + 1) * 3 for r in est if r["estimate"] is not None)
    contract = ["run_id", "engine", "attribute", "group_name", "finding", "headline", "flagged", "measure",
                "value", "ci_low", "ci_high", "confidence", "p_value", "significant", "individuals",
                "cases_table", "statement"]
    assert found.column_names == [*contract, "estimand", "basis", "evidence", "robust", "robustness_value",
                                  "e_value"]
    assert [str(found.schema.field(c).type) for c in found.column_names[-6:]] == [
        "string", "string", "bool", "bool", "double", "double"]
    rows = {r["attribute"]: r for r in found.to_pylist()}
    assert trends == len(est) == found.num_rows and in_union == len(est)
    r = rows["race"]
    assert r["flagged"] and r["headline"] and r["value"] == race["estimate"]
    assert r["estimand"] == "adjusted disparity"
    assert r["basis"] == "controls: " + race["controls"] + "; fixed effects: derived_msa_md, lei"
    assert r["robustness_value"] == race["rv_q1_alpha"] and r["e_value"] == race["e_value"] > 1
    # tested by the logit: its adjusted p, significance and odds ratio
    assert race["odds_ratio"] > 1 and race["logit_significant"]
    assert r["p_value"] == race["logit_p_adjusted"] and r["significant"] == race["logit_significant"]
    assert r["evidence"] is False  # the public LAR lacks inputs, and the spec states no bound on them
    assert f"their odds of denial were {race['odds_ratio']:.2f} times the reference group's" in r["statement"]
    assert f"average marginal effect of +{100 * race['ame']:.1f} points" in r["statement"]
    assert (f"E-value {race['e_value']:.2f} ({race['e_value_ci']:.2f} for the interval's limit nearer 1"
            in r["statement"])
    assert r["statement"].startswith("After controlling for log income, log loan_amount, log property_value, ")
    assert (f"and comparing within the same derived_msa_md and lei (intervals robust to clustering by lei, "
            f"{race['clusters']} clusters), " in r["statement"])
    assert "points more often than White applicants" in r["statement"]
    assert "robustness value" in r["statement"] and "An unexplained disparity for review, not evidence" in r["statement"]
    for a, row in rows.items():
        assert row["flagged"] == bool(by[a]["logit_significant"] and by[a]["odds_ratio"] > 1)
    for row in rows.values():  # a tiny group says why it was not tested
        if by[row["attribute"]]["p_value"] is None:
            assert "not tested" in row["statement"] or "could not be compared" in row["statement"]
    # the report's section: the odds-ratio figure, the table by recorded group values, the segments
    from aequum.flows.commands.report import write_report
    page = write_report(path, "hmda-reg", tmp_path / "report.html").read_text()
    part = page[page.index('id="engine-regression"'):]
    assert "Controlled denial regression" in part and "Adjusted odds ratios of denial" in part
    assert "compared within the same derived_msa_md and lei (fixed effects); intervals are robust to clustering by lei" in part
    assert f"{race['odds_ratio']:.2f} ({race['or_ci_low']:.2f} to {race['or_ci_high']:.2f})" in part
    assert "minority race (pooled)" in part and "Within each product segment" in part  # the spec names the pooled group
    assert "loan_type = 1" in part


def _estimate(attribute, **kw):
    row = {c: None for c in ESTIMATES.names}
    row.update(attribute=attribute, n=5000, n_protected=1000, n_reference=4000, dropped_null=0, raw_difference=0.05,
               estimate=0.03, se=0.01, ci_low=0.01, ci_high=0.05, confidence=0.95, p_value=0.001, p_adjusted=0.002,
               significant=True, rv_q1=0.05, rv_q1_alpha=0.02, strongest_control="dti",
               adjusted_at_strongest=0.0, adjusted_ci_low_at_strongest=-0.02, adjusted_ci_high_at_strongest=0.02,
               robust=False, controls="income, dti", correction="holm", robust_multiplier=2.0,
               odds_ratio=1.4, or_ci_low=1.2, or_ci_high=1.63, logit_coefficient=float(np.log(1.4)), logit_se=0.08,
               logit_p_value=1e-5, logit_p_adjusted=2e-5, logit_significant=True, ame=0.028, ame_ci_low=0.015,
               ame_ci_high=0.041, e_value=1.65, e_value_ci=1.43)
    row.update(kw)
    return row


@pytest.mark.parametrize("inputs", ["partial", "complete"])
def test_findings_test_the_logit_and_read_complete_inputs_as_evidence(warehouse, inputs):
    """The view alone, on written estimates: flagged/significant/p from the logit, the LPM when
    the logit has no estimate; evidence when flagged and robust, or on complete inputs."""
    rows = [
        _estimate("race"),                                                   # the logit flags it
        _estimate("sex", odds_ratio=None, or_ci_low=None, or_ci_high=None, logit_coefficient=None, logit_se=None,
                  logit_p_value=None, logit_p_adjusted=None, logit_significant=None, ame=None, ame_ci_low=None,
                  ame_ci_high=None, e_value=None, e_value_ci=None,
                  logit_note="separation: the outcome is perfectly predicted for some rows"),  # no test
        _estimate("age", logit_p_value=0.2, logit_p_adjusted=0.4, logit_significant=False, or_ci_low=0.9),
        _estimate("ethnicity", odds_ratio=0.7, or_ci_low=0.6, or_ci_high=0.82, logit_coefficient=float(np.log(0.7))),
        _estimate("tract", robust=True, bound_source="the lender's records", bound_r2_group=0.02,
                  bound_r2_outcome=0.3, bounded_estimate=0.02, bounded_ci_low=0.01, bounded_ci_high=0.03,
                  survives_bound=True),
        _estimate("age2", robust=True),                                     # robust to benchmarks only
    ]
    for run_id, question in (("dt", "disparate_treatment"), ("di", "disparate_impact")):
        warehouse.start_run(run_id, "s", "h", "test", {"audit": {"question": question, "inputs": inputs}})
        warehouse.write_results(run_id, {"regression_estimates": (ESTIMATES, pa.Table.from_pylist(rows, ESTIMATES))})
    warehouse.create_views()
    found = {(r["run_id"], r["attribute"]): r for r in warehouse.con.sql(
        "SELECT * FROM audit.findings WHERE engine = 'regression'").to_arrow_table().to_pylist()}
    race, sex, age, eth, tract = (found[("dt", a)] for a in ("race", "sex", "age", "ethnicity", "tract"))
    assert race["flagged"] and race["p_value"] == 2e-5 and race["significant"] and race["e_value"] == 1.65
    assert race["value"] == 0.03 and race["ci_low"] == 0.01  # the measure stays the LPM's difference
    # a logit that could not be fitted is no test, and the linear model stands in for none
    assert not sex["flagged"] and sex["p_value"] is None and sex["significant"] is None and sex["e_value"] is None
    assert "the denial logit has no estimate (separation: the outcome is perfectly predicted" in sex["statement"]
    assert not age["flagged"] and age["p_value"] == 0.4 and age["significant"] is False  # the logit decides
    assert not eth["flagged"] and eth["significant"]  # significant, but the odds ratio is below 1
    # evidence: the records hold every input of the decisions, or the difference survives the stated
    # bound on those they lack; robustness to the recorded controls' benchmarks is not enough
    complete = inputs == "complete"
    assert race["evidence"] is complete and sex["evidence"] is False and tract["evidence"] is True
    assert found[("dt", "age2")]["evidence"] is complete
    if not complete:
        assert "It survives the stated bound on inputs of the decisions the records lack" in tract["statement"]
        assert "source: the lender's records" in tract["statement"]
        assert "An unexplained disparity for review, not evidence" in found[("dt", "age2")]["statement"]
    assert age["evidence"] is False and eth["evidence"] is False
    assert not any(found[("di", a)]["evidence"] for a in ("race", "sex", "tract"))
    assert found[("di", "race")]["flagged"]
    assert "odds of denial were 1.40 times the reference group's (95% CI 1.20 to 1.63, p < 0.001, holm-adjusted)" \
        in race["statement"] and "average marginal effect of +2.8 points (1.5 to 4.1), E-value 1.65 (1.43" \
        in race["statement"]


def test_other_groups_are_held_as_their_joint_cells():
    """Black and Hispanic is a cell of its own (a penalty on "Black or Hispanic" counts once for
    it); among the fitted rows a cell too small or of one outcome joins the largest cell."""
    race = np.array([1, 1, 0, 0, 2, 1, 0, 0, 0, 0, 1, 0], np.int8)
    eth = np.array([1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1], np.int8)
    y = np.array([1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 1, 0], float)
    rows = np.arange(12)
    cells = held_cells([race, eth], 1, y, rows)
    codes = cells.codes
    # (race, eth): (1,1) rows 0 and 5 share a cell, apart from (1,0), (0,1) and (0,0)
    assert codes[0] == codes[5] and len({codes[0], codes[1], codes[2], codes[3]}) == 4
    # (2,0), one record of one outcome, joins the largest cell, (0,0)
    assert codes[4] == codes[3]
    small = held_cells([race, eth], 3, y, rows).codes
    assert len(set(small.tolist())) == 1  # every cell under 3 records (or of one outcome) pooled
    assert (held_cells([race, eth], 1, y, np.arange(6)).codes[6:] == -1).all()  # rows not fitted


def test_compact_codes_keep_the_levels_and_nulls_in_the_smallest_integer_type():
    from aequum.engines.regression.design import Categorical
    from aequum.engines.regression.engine import compact

    small = compact(Categorical(np.array([0.0, 2.0, np.nan, 1.0]), ["a", "b", "c"]))
    assert small.codes.dtype == np.int8 and small.codes.tolist() == [0, 2, -1, 1] and small.levels == ["a", "b", "c"]
    wide = compact(Categorical(np.array([299.0, np.nan]), [str(i) for i in range(300)]))
    assert wide.codes.dtype == np.int16 and wide.codes.tolist() == [299, -1]
    numeric = np.array([1.5, np.nan])
    assert compact(numeric) is numeric
