"""The HMDA generator's worlds: one known mechanism each (or none), on the same applicants.

Every world must keep the generator's invariants (same seed, same output for any batch size),
plant exactly the intended penalty, and carry a ground truth that follows its structural
equations; the default world (dti_penalty) must be the generator as it was before worlds.
"""
from __future__ import annotations

import hashlib
import json
import typing

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aequum.engines.generators import catalogue, hmda
from aequum.engines.generators.hmda import (ASIAN, BLACK, DEFAULT_WORLD, HISPANIC, INTERVENTIONS, LENDER, TRUTH,
                                            WORLDS, hmda_truth, iter_hmda_batches, iter_lender_batches, lender_rule,
                                            score_shift)

N = 60_000  # two blocks of the generator's streams
LENDERS = ["lei", "derived_msa_md"]  # hmda_lenders' columns: the lender_redlining world moves the lei
# the worlds whose penalty moves decisions (lender_redlining moves applications, pricing_penalty
# prices the null world's loans)
PENALTY_WORLDS = [w for w in WORLDS if WORLDS[w]["kind"] not in ("none", "lender", "pricing")]
PRICING = ["interest_rate", "rate_spread", "total_loan_costs", "origination_charges", "discount_points", "lender_credits"]
PRICING_TRUTH = ["overcharged", "rate_spread_overcharge"]


def _digest(df: pl.DataFrame) -> str:
    return hashlib.sha256(df.write_csv().encode()).hexdigest()


def lar_truth(world, n=N, seed=0, batch_rows=N):
    parts = list(iter_hmda_batches(n, seed, batch_rows, world=world))
    return (pl.from_arrow(pa.Table.from_batches([p[0] for p in parts])),
            pl.from_arrow(pa.Table.from_batches([p[1] for p in parts])))


def lender(world, n=N, seed=0, batch_rows=N):
    return pl.from_arrow(pa.Table.from_batches([b for b, _ in iter_lender_batches(n, seed, batch_rows, world=world)]))


_CACHE: dict = {}


def world_data(world):
    """(LAR's decision columns, truth, lender records) of N rows, seed 0: one generation per
    world per session."""
    if world not in _CACHE:
        lar, truth = lar_truth(world)
        _CACHE[world] = (lar.select("action_taken", "denial_reason_1", "tract_minority_population_percent"),
                         truth, lender(world))
    return _CACHE[world]


def applies(world, rec: pl.DataFrame) -> np.ndarray:
    """Who the world's penalty should apply to, from the lender's records (exact tract share)."""
    race, sex = rec["derived_race"].to_numpy(), rec["derived_sex"].to_numpy()
    black, hisp = race == BLACK, rec["derived_ethnicity"].to_numpy() == HISPANIC
    return {"null": np.zeros(rec.height, bool), "dti_penalty": black | hisp, "score_penalty": black | hisp,
            "intersection": black & (sex == "Female"), "redlining": rec["tract_minority_share"].to_numpy() > 50,
            "input_penalty": race == ASIAN, "lender_redlining": np.zeros(rec.height, bool),
            "pricing_penalty": black | hisp}[world]


# Recorded from the generator before worlds were added (commit 8b16637's engines/generators/hmda.py),
# seed 3, 60,000 rows, one batch: sha256 of polars' CSV of the LAR without denial_reason_1 and
# tract_minority_population_percent, of the truth, of the lender records (their columns then), and
# of which denials cited the debt-to-income ratio (denial_reason_1 == "1"). The LAR's digest is
# also without lei and derived_msa_md, which hmda_lenders now assigns, and without the pricing
# fields, which the pricer (engines.generators.hmda_pricing) now sets (recorded from that
# commit's generator with those columns dropped too); the pricing truth is left out of the truth's.
BEFORE_WORLDS = {
    "lar_kept": "b6dbf993a3ba617d077a33dc2119fda8301e4387657e45c274976b954e41cd8d",
    "truth": "5f2ae5b429c2b80f84ea5f532f4de20e35cec52d03cd6b0bebbefe9556f3b126",
    "lender": "0b8b1aecd3d42eb9d4d9dec5690165ab70db4ff70d9d2df976fee8ead58ebfdd",
    "reason1": "277c2f7a036817d5890078459524a33e7f61ef93c32ead804ba1fcf2c80f3452",
}


def test_the_default_world_is_the_generator_before_worlds():
    """Decisions, truth and every LAR column but the two the worlds had to change and the
    pricing fields are bit for bit those of the generator before worlds: the tract share is now
    drawn (from its own stream) before the decision, a denial cites collateral (4) where it once
    cited credit history (3), the set citing debt-to-income (1) is unchanged, and the prices
    come from the risk-based pricer."""
    assert hmda.MECHANISM == hmda.mechanism(DEFAULT_WORLD) and DEFAULT_WORLD == "dti_penalty"
    for world in (DEFAULT_WORLD, None):  # by name and by default
        kw = {} if world is None else {"world": world}
        parts = list(iter_hmda_batches(60_000, 3, 60_000, **kw))
        lar = pl.from_arrow(pa.Table.from_batches([p[0] for p in parts]))
        truth = pl.from_arrow(pa.Table.from_batches([p[1] for p in parts]))
        rec = pl.from_arrow(pa.Table.from_batches([b for b, _ in iter_lender_batches(60_000, 3, 60_000, **kw)]))
        assert _digest(lar.drop(["denial_reason_1", "tract_minority_population_percent", *LENDERS, *PRICING])) \
            == BEFORE_WORLDS["lar_kept"]
        assert _digest(truth.drop(PRICING_TRUTH)) == BEFORE_WORLDS["truth"]
        assert _digest(rec.drop(["tract_minority_share", *LENDERS])) == BEFORE_WORLDS["lender"]
        assert _digest(lar.select(pl.col("denial_reason_1") == "1")) == BEFORE_WORLDS["reason1"]
    assert hmda.LENDER_RULE == lender_rule(DEFAULT_WORLD) and hmda.LENDER_RULE["penalty"] is None


@pytest.mark.parametrize("world", list(WORLDS))
def test_every_world_is_deterministic_and_independent_of_batch_size(world):
    lar, truth = lar_truth(world, 55_000, seed=2, batch_rows=55_000)
    lar2, truth2 = lar_truth(world, 55_000, seed=2, batch_rows=20_000)
    assert lar.equals(lar2) and truth.equals(truth2) and truth.columns == TRUTH.names
    assert pl.from_arrow(hmda_truth(55_000, 2, world)).equals(truth)
    rec = lender(world, 55_000, seed=2, batch_rows=55_000)
    assert rec.equals(lender(world, 55_000, seed=2, batch_rows=17_000)) and rec.columns == LENDER.names
    for c in ("derived_race", "derived_ethnicity", "derived_sex", "action_taken"):
        assert rec[c].equals(lar[c])


def test_worlds_share_the_applicants():
    """Only the decision and what follows from it differ between worlds: the draws do not."""
    base, _ = lar_truth(DEFAULT_WORLD, 20_000)
    _, _, rec = world_data(DEFAULT_WORLD)
    follows = ["action_taken", "denial_reason_1", "purchaser_type", "hoepa_status", *PRICING]
    for world in WORLDS:
        lender = ["lei"] if world == "lender_redlining" else []  # there the lenders take other applications
        lar = lar_truth(world, 20_000)[0]
        assert lar.drop([*follows, *lender]).equals(base.drop([*follows, *lender])), world
        assert not lar["action_taken"].equals(base["action_taken"]) or world in ("score_penalty", DEFAULT_WORLD)
        lar, _, other = world_data(world)
        assert other.drop(["action_taken", *lender]).equals(rec.drop(["action_taken", *lender])), world
        # the LAR publishes the tract share the decision read (rounded to 2 decimals)
        assert np.allclose(lar["tract_minority_population_percent"].cast(pl.Float64).to_numpy(),
                           other["tract_minority_share"].to_numpy(), atol=0.0051)


def test_the_null_world_has_no_mechanism():
    _, truth, _ = world_data("null")
    _, dti_truth, _ = world_data(DEFAULT_WORLD)
    assert not truth["penalised"].any() and not truth["harmed"].any()
    for c in INTERVENTIONS:
        assert not truth[f"harmed_direct_{c}"].any()
    assert truth["decision"].equals(truth["decision_without_mechanism"])
    # the same applicants decided without the penalty: the default world's counterfactual
    assert truth["decision"].equals(dti_truth["decision_without_mechanism"])
    refused = truth.filter(pl.col("decision") == 0)
    assert refused.height > 0 and (refused["p_harmed"] == 0).all()
    # groups still differ in the inputs: a total effect of race remains without any treatment
    assert truth["harmed_total_derived_race"].sum() > 0
    assert hmda.mechanism("null")["score_shift"] == 0 and lender_rule("null")["coefficients"]["race"] == 0


@pytest.mark.parametrize("world", PENALTY_WORLDS)
def test_exactly_the_intended_records_are_penalised(world):
    lar, truth, rec = world_data(world)
    intended = applies(world, rec)
    assert intended.any() and (~intended).any()
    assert (truth["penalised"].to_numpy() == intended).all()
    harmed = truth["harmed"].to_numpy()
    assert harmed.sum() > 0
    assert (truth.filter(pl.col("harmed"))["decision"] == 0).all() and intended[harmed].all()
    assert (lar.filter(pl.Series(harmed))["action_taken"] == "3").all()
    # without the penalty nobody unpenalised changes decision
    un = truth.filter(~pl.col("penalised") & pl.col("decision").is_not_null())
    assert (un["decision"] == un["decision_without_mechanism"]).all()
    # the penalty only hurts: nobody is approved with it and denied without
    decided = truth.filter(pl.col("decision").is_not_null())
    assert (decided["decision"] <= decided["decision_without_mechanism"]).all()
    for c in INTERVENTIONS:
        assert (truth[f"harmed_direct_{c}"] <= truth["harmed"]).all()


def test_the_intersection_penalises_black_women_only():
    _, truth, rec = world_data("intersection")
    pen = rec.filter(truth["penalised"])
    assert (pen["derived_race"] == BLACK).all() and (pen["derived_sex"] == "Female").all()
    # the controlled direct effect follows race and sex, not ethnicity
    assert truth["harmed_direct_derived_race"].equals(truth["harmed"])
    assert truth["harmed_direct_derived_sex"].equals(truth["harmed"])
    assert not truth["harmed_direct_derived_ethnicity"].any()


def test_redlining_has_a_total_effect_of_race_and_no_direct_one():
    _, truth, rec = world_data("redlining")
    for c in INTERVENTIONS:
        assert not truth[f"harmed_direct_{c}"].any(), c
        refused = truth.filter(pl.col("decision") == 0)
        assert (refused[f"p_harmed_direct_{c}"] == 0).all()
    assert truth["harmed"].sum() > 0 and truth["harmed_total_derived_race"].sum() > 0
    # race moves the tract share (a structural equation of the groups), and the penalty with it
    for column, group, reference in (("derived_race", BLACK, "White"),
                                     ("derived_ethnicity", HISPANIC, "Not Hispanic or Latino")):
        share = dict(rec.group_by(column).agg(pl.col("tract_minority_share").mean()).iter_rows())
        assert 25 < share[group] - share[reference] < 35, (column, share)
    assert truth["harmed_total_derived_ethnicity"].sum() > 0
    # penalised White applicants without Hispanic ethnicity are harmed alike: race is not read
    white = truth.filter((rec["derived_race"] == "White") & (rec["derived_ethnicity"] != HISPANIC))
    assert white["harmed"].sum() > 0 and not white["harmed_total_derived_race"].any()
    # a Black applicant in a tract over 50% but not over 80% leaves it under do(race := White)
    # (the share falls by 30 points): those harmed by the penalty are harmed in total
    only_black = (rec["derived_race"] == BLACK) & (rec["derived_ethnicity"] != HISPANIC)
    moved = truth.filter(only_black & rec["tract_minority_share"].is_between(50, 80, closed="none"))
    assert moved["harmed"].sum() > 0 and (moved.filter(pl.col("harmed"))["harmed_total_derived_race"]).all()


@pytest.mark.parametrize("world", list(WORLDS))
def test_posteriors_are_probabilities_of_refused_records(world):
    _, truth, _ = world_data(world)
    refused = truth["decision"] == 0
    for p in [c for c in TRUTH.names if c.startswith("p_harmed")]:
        assert truth.filter(~refused)[p].null_count() == (~refused).sum(), p
        assert truth.filter(refused)[p].is_between(0, 1).all(), p


@pytest.mark.parametrize("world", PENALTY_WORLDS)
def test_posteriors_are_calibrated_in_every_world(world):
    """p_harmed* given the observed variables (the tract share included): among refused
    applicants its mean matches the harm rate."""
    truth = pl.from_arrow(hmda_truth(150_000, 0, world)).filter(pl.col("decision") == 0)
    for p, h in [("p_harmed", "harmed"), ("p_harmed_total_derived_race", "harmed_total_derived_race"),
                 ("p_harmed_direct_derived_race", "harmed_direct_derived_race")]:
        assert abs(truth[p].mean() - truth[h].mean()) < 0.01, (world, p, truth[p].mean(), truth[h].mean())
    assert (truth.filter(~pl.col("penalised"))["p_harmed"] == 0).all()


@pytest.mark.parametrize("world", list(WORLDS))
def test_denial_reasons_follow_the_inputs_as_read(world):
    lar, truth, rec = world_data(world)
    w = WORLDS[world]
    pen = truth["penalised"].to_numpy()
    dti, ltv = rec["debt_to_income"].to_numpy(), rec["ltv"].to_numpy()
    dti_read = dti + w["size"] * pen if w.get("variable") == "debt_to_income_ratio" else dti
    ltv_read = ltv + w["size"] * pen if w.get("variable") == "combined_loan_to_value_ratio" else ltv
    expected = np.where(dti_read > 43, "1", np.where(ltv_read > 95, "4", "3"))
    denied = (lar["action_taken"] == "3").to_numpy()
    assert (lar["denial_reason_1"].to_numpy()[denied] == expected[denied]).all()
    assert (lar["denial_reason_1"].to_numpy()[~denied] == "10").all()
    assert {"1", "3", "4"} <= set(expected[denied])


def test_the_input_penalty_shows_in_the_collateral_reason():
    """Asian denials cite collateral at a true LTV no one else is denied for collateral at."""
    lar, _, rec = world_data("input_penalty")
    collateral = rec.filter((lar["action_taken"] == "3") & (lar["denial_reason_1"] == "4"))
    asian = collateral["derived_race"] == ASIAN
    assert (collateral.filter(~asian)["ltv"] > 95).all()
    low = collateral.filter(asian)["ltv"]
    assert (low > 87).all() and (low <= 95).sum() > 0
    # in the default world collateral is cited above 95 for everyone
    lar0, _, rec0 = world_data(DEFAULT_WORLD)
    assert (rec0.filter((lar0["action_taken"] == "3") & (lar0["denial_reason_1"] == "4"))["ltv"] > 95).all()


@pytest.mark.parametrize("world", list(WORLDS))
def test_lender_records_reproduce_the_decisions(world):
    """approved iff the rule's score >= 0: exactly where the penalty is linear in the rule's columns
    (but for applicants both Black and Hispanic, whom the rule penalises twice); elsewhere the rule
    without the penalty, less the penalty where it applies."""
    _, truth, rec = world_data(world)
    rule = lender_rule(world)
    w = rule["coefficients"]
    black = (rec["derived_race"] == BLACK).to_numpy()
    hisp = (rec["derived_ethnicity"] == HISPANIC).to_numpy()
    score = (rule["intercept"] + sum(w[c] * rec[c].to_numpy() for c in w if c in rec.columns)
             + w["race"] * black + w["ethnicity"] * hisp)
    if rule["penalty"] is not None:
        assert isinstance(rule["penalty"], str) and w["race"] == w["ethnicity"] == 0
        score = score - score_shift(world) * applies(world, rec)
    decided = truth["decision"].is_not_null().to_numpy()
    approved = truth["decision"].fill_null(0).to_numpy() == 1
    wrong = decided & ((score >= 0) != approved)
    linear = world in ("null", "dti_penalty", "score_penalty", "lender_redlining", "pricing_penalty")
    assert (rule["penalty"] is None) == linear
    if world in ("dti_penalty", "score_penalty"):
        assert wrong.sum() > 0 and (black & hisp)[wrong].all()
    else:
        assert not wrong.any()


def test_unknown_worlds_are_rejected_by_name():
    known = str(list(WORLDS))
    for call in (lambda: hmda_truth(10, 0, "nul"), lambda: next(iter_hmda_batches(10, 0, world="nul")),
                 lambda: next(iter_lender_batches(10, 0, world="nul")), lambda: hmda.mechanism("nul"),
                 lambda: lender_rule("nul"), lambda: next(catalogue.stream("hmda", 10, world="nul")),
                 lambda: catalogue.truth("hmda_lender", 10, world="nul")):
        with pytest.raises(ValueError, match="unknown world 'nul'") as err:
            call()
        assert known in str(err.value)
    with pytest.raises(ValueError, match="no worlds"):
        next(catalogue.stream("loan", 10, world="null"))
    assert catalogue.truth("loan", 10) is None and catalogue.mechanism("loan") is None


def test_catalogue_and_command_line_know_the_worlds():
    from aequum.engines.core.spec import Source
    from aequum.flows.commands.cli import DEFAULT_WORLD as CLI_DEFAULT, WORLDS as CLI_WORLDS

    from aequum.engines.generators import lar_worlds
    from aequum.flows.commands.cli import MARKET_WORLDS

    literal = typing.get_args(Source.model_fields["world"].annotation)
    assert list(WORLDS) == list(CLI_WORLDS)
    # the lending-market generators' worlds: hmda's names where they mean the same term, and three more
    assert list(literal) == [*WORLDS, *MARKET_WORLDS] == [*WORLDS, *(w for w in lar_worlds.WORLDS if w not in WORLDS)]
    assert Source.model_fields["world"].default == DEFAULT_WORLD == CLI_DEFAULT == catalogue.DEFAULT_WORLD
    for world in WORLDS:
        m = catalogue.mechanism("hmda_lender", world)
        assert m["world"] == world and m == hmda.mechanism(world)
        assert catalogue.truth("hmda", 1_000, 0, world).equals(hmda_truth(1_000, 0, world))
    assert catalogue.mechanism("hmda")["penalised"] == {"derived_race": [BLACK], "derived_ethnicity": [HISPANIC]}
    assert score_shift("input_penalty") == pytest.approx(0.4) and score_shift("redlining") == 0.45


def _hmda_spec(world=None, generator="hmda", rows=2_000):
    from aequum.engines.core.spec import load_spec, parse_spec
    from conftest import REPO

    raw = load_spec(REPO / "data" / "specs" / "hmda.yaml").model_dump(mode="json")
    raw["source"] = {"kind": "generated", "generator": generator, "rows": rows, "seed": 0, "id_column": None}
    if world is not None:
        raw["source"]["world"] = world
    return parse_spec(raw)


def test_the_spec_takes_a_world_and_it_is_part_of_the_dataset_identity(tmp_path):
    from aequum.engines.core.spec import SpecError, parse_spec
    from aequum.flows.store.readers import source_stamp
    from aequum.flows.store.staging import record_contract

    assert _hmda_spec().source.world == DEFAULT_WORLD
    specs = {w: _hmda_spec(w) for w in WORLDS}
    assert specs["redlining"].source.world == "redlining"
    stamps = {source_stamp(s.source, tmp_path) for s in specs.values()}
    assert len(stamps) == len(WORLDS)
    assert len({record_contract(s) for s in specs.values()}) == len(WORLDS)
    assert record_contract(specs[DEFAULT_WORLD]) == record_contract(_hmda_spec())  # versions before worlds
    assert specs["null"].digest() != specs[DEFAULT_WORLD].digest()
    with pytest.raises(SpecError, match="world"):
        _hmda_spec("nowhere")
    raw = _hmda_spec().model_dump(mode="json")
    raw["source"] = {"kind": "generated", "generator": "loan", "world": "null", "id_column": "id"}
    with pytest.raises(SpecError, match="is for the hmda, hmda_lender, .* generators only"):
        parse_spec(raw)
    raw["source"]["world"] = DEFAULT_WORLD  # the default is no choice: accepted anywhere
    assert parse_spec(raw).source.world == DEFAULT_WORLD


def test_a_world_is_staged_as_its_own_dataset_version_and_scored_against_its_truth(tmp_path, warehouse):
    """150 records of the null and the default world (seed 0) are the same (none harmed, no
    denial reason apart), so their staged records coincide: the world alone keeps the dataset
    versions apart."""
    from aequum.flows.ground_truth import load_truth
    from aequum.flows.store.staging import stage

    assert lar_truth("null", 150)[0].equals(lar_truth(DEFAULT_WORLD, 150)[0])
    refs = {w: stage(_hmda_spec(w, rows=150), tmp_path, warehouse, tmp_path / "lake")
            for w in ("null", DEFAULT_WORLD)}
    assert refs["null"].fingerprint == refs[DEFAULT_WORLD].fingerprint
    assert refs["null"].version != refs[DEFAULT_WORLD].version
    assert not refs["null"].reused and not refs[DEFAULT_WORLD].reused
    again = stage(_hmda_spec("null", rows=150), tmp_path, warehouse, tmp_path / "lake")
    assert again.version == refs["null"].version and again.reused
    # the records staged are the world's: each staged decision is its truth's
    ref = stage(_hmda_spec("redlining"), tmp_path, warehouse, tmp_path / "lake")
    staged = pl.from_arrow(warehouse.staged(ref.version)).select("_id", "_decision")
    truth = pl.from_arrow(hmda_truth(2_000, 0, "redlining")).select("id", "decision")
    joined = staged.join(truth, left_on="_id", right_on="id")
    assert joined.height == staged.height > 1_500
    assert (joined["_decision"] == joined["decision"]).all()
    assert (joined["_decision"] != joined.join(pl.from_arrow(hmda_truth(2_000, 0, "null")).select(
        "id", pl.col("decision").alias("null_decision")), left_on="_id", right_on="id")["null_decision"]).any()
    truth = load_truth(_hmda_spec("redlining"), tmp_path)
    expected = pl.from_arrow(hmda_truth(2_000, 0, "redlining"))
    assert pl.Series(truth.direct).equals(expected["harmed"], check_names=False)
    assert not pl.Series(truth.direct_by["race"]).any() and pl.Series(truth.total["race"]).any()
    assert "redlining" in truth.source


def test_generate_a_world_from_the_command_line(tmp_path, monkeypatch, capsys):
    import subprocess
    import sys

    from aequum.flows.commands.cli import main

    # the program itself, from a working directory of its own (default paths are relative)
    done = subprocess.run([sys.executable, "-c", "from aequum.flows.commands.cli import program; program()",
                           "generate", "hmda", "--world", "null", "--rows", "2000"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "data/generated/hmda_null.parquet", done.stderr[-2000:]
    out = tmp_path / "data" / "generated"
    assert sorted(p.name for p in out.iterdir()) == ["hmda_null.parquet", "hmda_null_mechanism.json",
                                                      "hmda_null_truth.parquet"]
    assert pq.read_metadata(out / "hmda_null.parquet").num_rows == 2_000
    truth = pq.read_table(out / "hmda_null_truth.parquet")
    assert truth.equals(hmda_truth(2_000, 0, "null")) and not truth["penalised"].to_numpy(zero_copy_only=False).any()
    assert json.loads((out / "hmda_null_mechanism.json").read_text())["world"] == "null"
    monkeypatch.chdir(tmp_path)
    assert main(["generate", "hmda_lender", "--world", "redlining", "--rows", "500"]) == 0
    assert pq.read_schema(out / "hmda_lender_redlining.parquet") == LENDER
    assert json.loads((out / "hmda_lender_redlining_mechanism.json").read_text())["kind"] == "tract"
    capsys.readouterr()
    assert main(["generate", "loan", "--world", "null", "--rows", "10"]) == 2
    assert "--world and --effect are for the hmda" in capsys.readouterr().err
    assert main(["generate", "loan", "--effect", "2", "--rows", "10"]) == 2
    assert main(["generate", "hmda", "--effect", "-1", "--rows", "10"]) == 2
    assert "--effect must be a non-negative number" in capsys.readouterr().err
    assert not (out / "loan.parquet").exists() and not (out / "hmda.parquet").exists()
    assert main(["generate", "hmda", "--world", "score_penalty", "--effect", "0.5", "--rows", "300"]) == 0
    assert json.loads((out / "hmda_score_penalty_x0.5_mechanism.json").read_text())["score_shift"] == 0.225
    assert pq.read_table(out / "hmda_score_penalty_x0.5_truth.parquet").equals(
        hmda_truth(300, 0, "score_penalty", 0.5))
    with pytest.raises(SystemExit):
        main(["generate", "hmda", "--world", "nowhere"])
    assert "invalid choice: 'nowhere'" in capsys.readouterr().err


def test_the_worlds_are_named_alike_where_they_are_listed():
    """The command line lists the worlds without importing the generator (numpy, Arrow) and the
    spec types them: the three lists and defaults agree."""
    import typing

    from aequum.engines.core.spec import Source
    from aequum.engines.generators import hmda
    from aequum.flows.commands import cli

    assert list(cli.WORLDS) == list(hmda.WORLDS)
    assert list(typing.get_args(Source.model_fields["world"].annotation)) == [*hmda.WORLDS, *cli.MARKET_WORLDS]
    assert cli.DEFAULT_WORLD == hmda.DEFAULT_WORLD == Source.model_fields["world"].default


# ---- effect sizes --------------------------------------------------------------------------
@pytest.mark.parametrize("world", ["dti_penalty", "score_penalty", "intersection", "redlining", "input_penalty"])
def test_effect_scales_the_penalty_and_nothing_else(world):
    """effect 0 decides as the null world; effect 1 is the world as listed; a larger effect harms
    a superset of the applicants a smaller one harms (the shift only grows), on the same draws."""
    n = 20_000
    null = hmda_truth(n, 5, "null")
    zero, one, half, double = (hmda_truth(n, 5, world, e) for e in (0.0, 1.0, 0.5, 2.0))
    assert zero["decision"].equals(null["decision"]) and not any(zero["harmed"].to_pylist())
    assert one.equals(hmda_truth(n, 5, world))
    harmed = [np.asarray(t["harmed"].to_numpy(zero_copy_only=False)) for t in (half, one, double)]
    assert harmed[0].sum() < harmed[1].sum() < harmed[2].sum()
    assert not (harmed[0] & ~harmed[1]).any() and not (harmed[1] & ~harmed[2]).any()
    assert score_shift(world, 0.5) == pytest.approx(0.5 * score_shift(world))
    m = hmda.mechanism(world, 2.0)
    assert m["effect"] == 2.0 and m["score_shift"] == pytest.approx(2 * score_shift(world))
    assert lender_rule(world, 0.5)["coefficients"]["race"] == pytest.approx(
        0.5 * lender_rule(world)["coefficients"]["race"])


def test_effect_is_checked_and_belongs_to_the_hmda_generators():
    from aequum.engines.core.spec import SpecError, parse_spec
    from conftest import REPO

    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="effect must be a non-negative number"):
            hmda_truth(10, 0, "score_penalty", bad)
    with pytest.raises(ValueError, match="no worlds"):
        next(catalogue.stream("loan", 10, effect=2.0))
    spec = _hmda_spec()
    raw = spec.model_dump(mode="json")
    raw["source"].update({"effect": 0.5, "world": "score_penalty"})
    half = parse_spec(raw)
    assert half.source.effect == 0.5
    from aequum.flows.store.readers import source_stamp
    from aequum.flows.store.staging import record_contract

    raw["source"]["effect"] = 1.0
    listed = parse_spec(raw)
    assert record_contract(half) != record_contract(listed)  # another effect, another dataset version
    assert source_stamp(half.source, REPO) != source_stamp(listed.source, REPO)
    raw["source"]["effect"] = 0.5
    raw["source"].update({"generator": "loan", "world": "dti_penalty"})
    with pytest.raises(SpecError, match="source.effect=0.5 is for the hmda, hmda_lender, hmda_market, .* generators only"):
        parse_spec(raw)


def test_penalised_after_an_intervention_follows_the_world():
    """do(race := White) frees Black applicants of the dti world's penalty but not those also
    Hispanic; do on both frees all; redlining's follows the tract alone."""
    rec = pa.Table.from_batches([b for b, _ in iter_lender_batches(20_000, 3, 20_000, world="dti_penalty")])
    race = np.asarray(rec["derived_race"].to_numpy(zero_copy_only=False))
    hisp = np.asarray(rec["derived_ethnicity"].to_numpy(zero_copy_only=False)) == HISPANIC
    black = race == BLACK
    assert np.array_equal(hmda.penalised_after("dti_penalty", rec, set()), black | hisp)
    assert np.array_equal(hmda.penalised_after("dti_penalty", rec, {"derived_race"}), hisp)
    assert not hmda.penalised_after("dti_penalty", rec, {"derived_race", "derived_ethnicity"}).any()
    tract = np.asarray(rec["tract_minority_share"].to_numpy(zero_copy_only=False))
    assert np.array_equal(hmda.penalised_after("redlining", rec, {"derived_race", "derived_sex"}), tract > 50)
    assert not hmda.penalised_after("redlining", rec, {"tract_minority_share"}).any()
