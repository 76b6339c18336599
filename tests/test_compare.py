"""Each protected value against the reference as well as pooled (`protected[].compare`, issue 16)."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import aequum
from aequum.engines.core.spec import SpecError, parse_spec

RACES = ["White", "Black", "Asian", "Not given"]


def frame(n: int = 1200, seed: int = 3) -> pl.DataFrame:
    """Approval depends on income; Black applicants earn less (through the SCM) and are also
    denied more at equal income; Asian applicants are treated as White."""
    rng = np.random.default_rng(seed)
    race = rng.choice(RACES, size=n, p=[0.55, 0.2, 0.15, 0.1])
    sex = rng.choice(["F", "M"], size=n)
    income = rng.normal(80, 15, n) - 12 * (race == "Black")
    score = income - 75 - 6 * (race == "Black") + rng.normal(0, 5, n)
    return pl.DataFrame({"id": [f"a{i}" for i in range(n)], "race": race, "sex": sex,
                         "income": income, "approved": (score > 0).astype(int)})


def spec(compare: str = "both", unmapped: str = "exclude", **engines) -> dict:
    return {
        "name": "compare",
        "source": {"id_column": "id"},
        "protected": [{"name": "race", "column": "race", "protected_values": ["Black", "Asian"],
                       "reference_values": ["White"], "unmapped": unmapped, "compare": compare},
                      {"name": "sex", "column": "sex", "protected_values": ["F"], "reference_values": ["M"]}],
        "decision": {"column": "approved", "favourable": [1]},
        "model": {"kind": "linear", "features": ["income", "race"],
                  "coefficients": {"income": 1.0, "race": -6.0}, "intercept": -75.0},
        "features": [{"name": "income", "type": "numeric", "financial": True}],
        "scm": {"equations": [{"target": "income", "parents": ["race", "sex"]}]},
        "engines": {"run": ["outcome"], **engines},
    }


def each_spec(**kw) -> dict:
    """``compare: each``: no pooled race, so the model and the SCM name the comparisons."""
    raw = spec("each", **kw)
    raw["model"].update(features=["income"], coefficients={"income": 1.0})
    raw["scm"]["equations"][0]["parents"] = ["race=Black", "race=Asian", "sex"]
    return raw


def parsed_spec(raw: dict):
    """A notebook spec as a spec file would have it (with a source)."""
    return parse_spec({**raw, "source": {"kind": "parquet", "path": "x.parquet", "id_column": "id"}})


def test_both_expands_into_the_pooled_and_one_comparison_per_value():
    parsed = parsed_spec(spec())
    assert [p.name for p in parsed.protected] == ["race", "race=Black", "race=Asian", "sex"]
    black = parsed.protected[1]
    assert (black.protected_values, black.reference_values, black.others, black.of) == (
        ["Black"], ["White"], ["Asian"], "race")
    each = spec("each")
    with pytest.raises(SpecError, match=r"model\.features: \['race'\].*`compare: both` keeps the pooled"):
        parsed_spec(each)
    assert [p.name for p in parsed_spec(each_spec()).protected] == ["race=Black", "race=Asian", "sex"]
    # the validated spec read back is the same spec (the expansion does not run twice)
    again = parse_spec(parsed.model_dump(mode="json"))
    assert again.digest() == parsed.digest() and len(again.protected) == 4


def test_intersections_of_two_comparisons_of_one_column_are_refused():
    with pytest.raises(SpecError, match=r"engines\.cst\.intersections.*same column \('race'\)"):
        parsed_spec(spec(run=["cst"], cst={"k": [5], "intersections": [["race", "race=Asian"]]}))
    with pytest.raises(SpecError, match=r"engines\.outcome\.intersections"):
        parsed_spec(spec(outcome={"intersections": [["race=Black", "race=Asian"]]}))
    ok = parsed_spec(spec(run=["cst"], cst={"k": [5], "intersections": [["race=Black", "sex"]]}))
    assert ok.engines.params("cst").intersections == [["race=Black", "sex"]]


def test_a_value_holding_the_intersection_joiner_is_refused():
    raw = spec()
    raw["protected"][0]["protected_values"] = ["Black", "Asian & Pacific"]
    with pytest.raises(SpecError, match=r"protected\[0\]\.compare: value 'Asian & Pacific'"):
        parsed_spec(raw)


def test_each_value_is_measured_against_the_reference_by_hand():
    df = frame()
    out = aequum.audit(df, spec(outcome={"intersections": True}), say=None)
    gaps = out["outcome_gaps"]
    white = df.filter(pl.col("race") == "White")["approved"].mean()
    for value in ("Black", "Asian"):
        rate = df.filter(pl.col("race") == value)["approved"].mean()
        row = gaps.filter(pl.col("attribute") == f"race={value}")
        assert row.height == 1
        assert row["di_ratio"][0] == pytest.approx(rate / white, rel=1e-12)
    pooled = df.filter(pl.col("race").is_in(["Black", "Asian"]))["approved"].mean()
    assert gaps.filter(pl.col("attribute") == "race")["di_ratio"][0] == pytest.approx(pooled / white, rel=1e-12)
    # Black applicants are denied more, Asian applicants are not (the planted difference)
    di = dict(zip(gaps["attribute"].to_list(), gaps["di_ratio"].to_list()))
    assert di["race=Black"] < 0.8 < di["race=Asian"]
    # `true` intersects the attributes as written (race x sex), never race=Black with race
    metrics = out["outcome_metrics"]
    assert set(metrics["attribute"].unique().to_list()) == {"race", "race=Black", "race=Asian", "sex", "race&sex"}


def test_unmapped_reject_still_rejects_unknown_values_once():
    df = frame()
    raw = each_spec(unmapped="reject")
    raw["ingest"] = {"max_bad_fraction": 0.2}
    out = aequum.audit(df, raw, say=None)
    q = out["quarantine"]
    not_given = int((df["race"] == "Not given").sum())
    assert q.height == not_given                       # one row each, not one per comparison
    assert set(q["value"].to_list()) == {"Not given"}
    assert "group of 'race'" in q["reason"][0]
    # Black and Asian applicants are valid rows, each in its own comparison only
    groups = out["outcome_metrics"].filter(pl.col("attribute") == "race=Asian")
    n = dict(zip(groups["group_name"].to_list(), groups["n"].to_list()))
    assert n == {"protected": int((df["race"] == "Asian").sum()), "reference": int((df["race"] == "White").sum())}


def test_a_per_value_counterfactual_sets_the_pooled_indicator_too():
    """CST's CF for race=Black moves income and the model's race input as the pooled test does
    for the same applicants (one SCM: do(race := White) is the same world for them)."""
    df = frame()
    out = aequum.audit(df, spec(run=["cst"], cst={"k": [10], "complainants": "negative"}), say=None)
    claims = out["cst_claims"].filter((pl.col("method") == "CF"))
    by = {a: claims.filter(pl.col("protected_attribute") == a) for a in ("race", "race=Black", "race=Asian")}
    black_ids = set(df.filter(pl.col("race") == "Black")["id"].to_list())
    pooled = by["race"].filter(pl.col("record_id").is_in(list(black_ids))).sort("record_id")
    single = by["race=Black"].sort("record_id")
    assert single.height == pooled.height > 0
    assert single["discriminated"].to_list() == pooled["discriminated"].to_list()
    # the planted penalty reaches Black applicants' CF (the model reads race); it shows there
    assert single["discriminated"].sum() > 0


def test_pba_flips_the_pooled_input_for_a_per_value_comparison():
    """race=Asian is verified by flipping the model's race input (Asian vs White members):
    input for input the same result as the pooled race unit gives the same applicant."""
    df = frame(300)
    raw = spec(run=["pba"], pba={"truth": "decision", "deltas": [1.0]})
    raw["features"][0]["perturbation"] = 1.0
    out = aequum.audit(df, raw, say=None)
    inputs = out["pba_inputs"]
    assert set(inputs["attribute"].unique().to_list()) == {"race", "race=Black", "race=Asian"}
    keys = ["record_id", "setting", "delta"]
    cols = keys + ["considered", "twin_decision", "verified", "falsified"]
    cols = [c for c in cols if c in inputs.columns]
    asian = inputs.filter(pl.col("attribute") == "race=Asian").select(cols).sort(keys)
    pooled = inputs.filter((pl.col("attribute") == "race") & pl.col("record_id").is_in(asian["record_id"].unique().to_list()))
    assert asian.height > 0 and asian.equals(pooled.select(cols).sort(keys))
    ids = set(asian["record_id"].to_list())
    assert ids == set(df.filter(pl.col("race").is_in(["Asian", "White"]))["id"].to_list())


def test_findings_name_the_value_of_a_per_value_comparison(warehouse):
    """audit.findings reads 'Black applicants' for race=Black's protected group."""
    from aequum.engines.outcome.engine import OutcomeEngine

    out = aequum.audit(frame(), spec(), say=None)
    parsed = parse_spec({**spec(), "source": {"kind": "csv", "path": "unused.csv", "id_column": "id"}})
    warehouse.start_run("c-1", "compare", "x", "0", parsed.run_parameters())  # names its comparisons
    # the notebook's tables carry group labels beside the codes; the engine's own columns are written
    warehouse.write_results("c-1", {t: (schema, out[t].select(schema.names).to_arrow())
                                    for t, schema in OutcomeEngine.tables.items()})
    warehouse.finish_run("c-1", "succeeded", "v", "1:ff", None)
    warehouse.create_views()
    rows = warehouse.con.execute(
        "SELECT attribute, statement FROM audit.findings WHERE engine = 'outcome' AND group_name = 'protected' "
        "ORDER BY attribute").fetchall()
    said = dict(rows)
    assert said["race=Black"].startswith("Black applicants received favourable decisions at")
    assert said["race=Asian"].startswith("Asian applicants received")
    assert said["race"].startswith("Black / Asian applicants received")  # pooled: its values
    assert all(" for White applicants: " in said[a] for a in ("race", "race=Black", "race=Asian"))  # race's reference


def test_outcome_counts_per_unit_when_the_joint_table_would_be_too_large(monkeypatch):
    """A column compared value by value adds an attribute per value; past MAX_JOINT_CELLS the
    outcome engine counts each unit on its own, with the same tables."""
    import aequum.engines.outcome.engine as outcome

    raw = spec(outcome={"intersections": "all_pairs"})
    one_pass = aequum.audit(frame(), raw, say=None)
    monkeypatch.setattr(outcome, "MAX_JOINT_CELLS", 0)
    per_unit = aequum.audit(frame(), raw, say=None)
    for name in ("outcome_metrics", "outcome_gaps"):
        assert one_pass[name].equals(per_unit[name]), name
    assert set(one_pass["outcome_gaps"]["attribute"]) >= {"race=Black&sex", "race&sex"}
