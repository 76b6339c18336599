"""PBA in the paper's Table 3 setup (german_credit_pba_table3): docs/engines.md's table is today's
code's output, verification runs on the surrogate's held-out 20 % only, RB is robustness accuracy."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from conftest import REPO, shared_file

START, END = "<!-- aequum bench pba: table 3 -->", "<!-- /aequum bench pba -->"


@pytest.fixture(scope="module")
def table3():
    shared_file("FGCE", "GermanCredit.data")
    from aequum.flows.bench.pba import table3_summary

    return table3_summary(workers=0, time_limit=False)  # no test depends on a solver time limit


def readme_block() -> str:
    text = (REPO / "docs" / "engines.md").read_text()
    assert START in text and END in text, "docs/engines.md lacks the bench pba table markers"
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def test_the_readme_table_is_what_bench_pba_computes_today(table3):
    from aequum.flows.bench.pba import table3_markdown

    summary = table3[0]
    table = "\n".join(line for line in readme_block().splitlines() if line.startswith("|"))
    assert table == table3_markdown(summary), "docs/engines.md's PBA table drifted from the code: run aequum bench pba"


def test_only_the_records_the_surrogate_held_out_are_verified(table3):
    summary, model = table3[:2]
    held = int(model.fidelity["holdout_n"])
    first = summary.filter((pl.col("setting") == "observed") & (pl.col("delta") == 1))
    assert held == 200 and first["inputs"].sum() == held and first["population"].sum() == held
    assert len(model.holdout_ids) == held and len(set(model.holdout_ids.to_pylist())) == held


def test_robust_accuracy_is_the_robust_share_of_the_considered_inputs(table3):
    """The paper's robustness accuracy: among the considered inputs (both copies predicted as the
    true class), the share whose copy shown is proven robust; robustness: among all inputs."""
    summary, inputs = table3[0], table3[3]
    keys = ["attribute", "group_name", "setting", "delta"]
    want = inputs.group_by(keys).agg(
        acc=(pl.col("considered") & (pl.col("robust_verdict") == "verified")).sum() / pl.col("considered").sum(),
        share=(pl.col("robust_verdict") == "verified").mean())
    got = summary.join(want, on=keys)
    assert got.height == summary.height == 12
    assert np.allclose(got["robust_accuracy"], got["acc"]) and np.allclose(got["robustness"], got["share"])
    assert (got["robust_accuracy"] != got["robustness"]).any()


def test_holdout_inputs_need_a_surrogate(staged_data):
    import yaml

    from aequum.engines.core.engine import run_serial
    from aequum.engines.core.models import LinearRule
    from aequum.engines.core.spec import parse_spec
    from aequum.engines.verification.engine import PBAEngine

    shared_file("FGCE", "GermanCredit.data")
    raw = yaml.safe_load((REPO / "data" / "specs" / "german_credit_pba_table3.yaml").read_text())
    raw["source"]["path"] = str(REPO.parent / "shared" / "data" / "FGCE" / "GermanCredit.data")
    feats = raw["model"]["features"]
    raw["model"] = {"kind": "linear", "features": feats, "intercept": 0.0, "use_for_decisions": True,
                    "coefficients": {f: 0.01 for f in feats}}
    data = staged_data(parse_spec(raw))
    assert isinstance(data.model, LinearRule)
    with pytest.raises(ValueError, match="inputs 'holdout' verifies the records a surrogate was not fitted on"):
        run_serial(PBAEngine(), data, data.spec.engines.pba)
