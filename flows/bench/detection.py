"""``aequum bench detection``: how well the individual findings find the harmed.

Generated HMDA applications (1M rows; 100k with --quick), audited twice with CST (ST, CST,
CF at k = 15, 50):

1. ``data/specs/hmda.yaml`` — the public LAR's columns and a surrogate of the lender's model
   fitted to the recorded decisions (an external audit);
2. ``data/specs/hmda_lender.yaml`` — the lender's own inputs (credit score, underwriting
   adjustment, unbinned variables) and its decision rule (an internal audit: the faithful model);
3. the same with every SCM variable held as a mediator (``engines.cst.mediators``): CF then
   measures each attribute's direct effect.

Each method's findings against the generator's truth of its own kind (engines/detection.py):
base rate of harm among the complainants, precision, lift (precision / base rate), recall,
and the oracle's precision — flagging as many by the Bayes posterior of harm given the exact
underwriting variables, the best any method reading the LAR's variables can do — and its
precision when it has flagged half of the harmed (``oracle_precision_half_recall``, and its lift):
the ceiling of a method's precision at recall 0.5.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from aequum.flows.bench.measure import peak_rss_mb

REPO = Path(__file__).resolve().parents[2]


def measure(spec_file: Path, rows: int, label: str, **cst):
    """Stage ``rows`` generated records of ``spec_file``, run CST serially (``cst``: parameter
    changes), score it."""
    import polars as pl
    import yaml

    from aequum.engines.core.engine import run_serial
    from aequum.engines.core.spec import parse_spec
    from aequum.engines.matching.cst.engine import CSTEngine
    from aequum.flows.bench.cst import _stage, score

    raw = yaml.safe_load(spec_file.read_text())
    raw["source"]["rows"] = rows
    raw["engines"]["cst"].update({"evidence": "none", **cst})
    spec = parse_spec(raw)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        data = _stage(spec, spec_file.parent, Path(tmp))
        staged = time.perf_counter() - t0
        out = run_serial(CSTEngine(), data, spec.engines.cst)
        seconds = time.perf_counter() - t0 - staged
    det = score(spec, spec_file.parent, out, seconds)
    fidelity = getattr(data.model, "fidelity", {})
    model = (f"; surrogate vs the recorded decisions (held out): balanced accuracy "
             f"{fidelity['holdout_balanced_accuracy']:.3f}, AUC {fidelity['holdout_auc']:.3f}, approves "
             f"{fidelity['holdout_positive_rate']:.3f} (lender {fidelity['holdout_target_positive_rate']:.3f})"
             if "holdout_balanced_accuracy" in fidelity else "")
    print(f"{label}, {rows:,} rows: staged (+ surrogate fit) in {staged:.0f} s, CST in {seconds:.0f} s, "
          f"peak RSS {peak_rss_mb():,.0f} MB{model}")
    return det.with_columns(pl.lit(label).alias("spec"))


def run(quick: bool = False) -> list[dict]:
    import polars as pl

    rows = 100_000 if quick else 1_000_000
    specs = REPO / "data" / "specs"
    det = pl.concat([measure(specs / "hmda.yaml", rows, "hmda"),
                     measure(specs / "hmda_lender.yaml", rows, "hmda_lender"),
                     measure(specs / "hmda_lender.yaml", rows, "lender_mediators",
                             mediators=["log_income", "debt_to_income", "ltv", "credit_score"])],
                    how="diagonal_relaxed")
    shown = (det.filter(pl.col("same_kind") & ((pl.col("method") == "CF") | pl.col("finding").is_in(["significant", "probable"])))
             .with_columns(pl.when(pl.col("base_rate") > 0).then(pl.col("precision") / pl.col("base_rate")).alias("lift"),
                           pl.when(pl.col("base_rate") > 0).then(pl.col("oracle_precision") / pl.col("base_rate"))
                           .alias("oracle_lift"),
                           pl.when(pl.col("base_rate") > 0).then(pl.col("oracle_precision_half_recall")
                                                                 / pl.col("base_rate")).alias("oracle_lift_half_recall"))
             .select(["spec", "protected_attribute", "method", "parameter", "finding", "effect", "population",
                      "flagged", "base_rate", "precision", "lift", "recall", "f1", "oracle_precision", "oracle_lift",
                      "oracle_precision_half_recall", "oracle_lift_half_recall"])
             .sort(["spec", "protected_attribute", "method", "parameter", "finding"]))
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=250, float_precision=3,
                   tbl_hide_column_data_types=True, tbl_hide_dataframe_shape=True):
        print(shown)
    return shown.to_dicts()
