"""PBA scores per group, setting and δ (seed 004 §3.4–3.5, §A.4), from the per-input verdicts.

* PBA score (§3.5): the share of *considered* inputs (both x̃ and x̃′ predicted as the true
  class, Eq. 3) whose objective is proven positive over the δ-box — "observed": the model is
  persistently more confident on the input than on its twin with the attribute flipped;
  "flipped": persistently more confident on the twin. A row's ``group_name`` is the inputs'
  own group and ``presented_group`` the group the model is shown (the twin's in "flipped"),
  the column under which the paper prints it; observed(g) + flipped(g) ≤ 100 % per group.
* Verified / falsified / inconclusive counts, kept apart (the paper lumps the last two).
* Robustness bias (Nanda et al. 2021, by verification as in the paper): ``robustness``, the
  share of the group's inputs whose decision is proven constant over the δ-box, for the copy
  shown; ``robust_accuracy``, the paper's robustness accuracy Acc_rob(a) (§3.4, §A.4): the
  same share among the *considered* inputs (both copies predicted as the true class), the
  denominator its Table 3 cells imply (Junior observed, (100, 50): 22 of 23 = 95.7 %, the
  23 of the PBA row's 21.7 % = 5 / 23).
* SP: favourable rate P(ŷ = 1 | g) of the copy shown; TPR: P(ŷ = 1 | truth = 1, g) (the EO
  component the paper reports); CFA (Kusner et al. 2017): P(ŷ(x) = ŷ(x′)), point-wise.
"""
from __future__ import annotations

import polars as pl
import pyarrow as pa

SUMMARY = pa.schema([
    ("attribute", pa.string()), ("group_name", pa.string()), ("setting", pa.string()),
    ("presented_group", pa.string()), ("delta", pa.float64()),
    ("population", pa.int64()), ("inputs", pa.int64()), ("sampled", pa.bool_()),
    ("considered", pa.int64()), ("verified", pa.int64()), ("falsified", pa.int64()),
    ("inconclusive", pa.int64()), ("pba", pa.float64()), ("decided_without_lp", pa.int64()),
    ("robust_verified", pa.int64()), ("robust_falsified", pa.int64()),
    ("robust_inconclusive", pa.int64()), ("robustness", pa.float64()), ("robust_accuracy", pa.float64()),
    ("favourable_rate", pa.float64()), ("tpr", pa.float64()), ("cfa", pa.float64()),
    ("model_inputs", pa.list_(pa.string())),
])

WITHOUT_LP = ["centre", "symbolic", "search"]


def summary(inputs: pa.Table, population: dict[tuple[str, str], int], model_inputs: list[str]) -> pa.Table:
    """One row per attribute × group × setting × δ (see module docstring)."""
    if inputs.num_rows == 0:
        return SUMMARY.empty_table()
    df = pl.from_arrow(inputs)
    keys = ["attribute", "group_name", "setting", "presented_group", "delta"]
    out = (df.group_by(keys, maintain_order=True).agg(
        inputs=pl.len(),
        considered=pl.col("considered").sum(),
        verified=(pl.col("verdict") == "verified").sum(),
        falsified=(pl.col("verdict") == "falsified").sum(),
        inconclusive=(pl.col("verdict") == "inconclusive").sum(),
        decided_without_lp=(pl.col("considered") & pl.col("method").is_in(WITHOUT_LP)).sum(),
        robust_verified=(pl.col("robust_verdict") == "verified").sum(),
        robust_falsified=(pl.col("robust_verdict") == "falsified").sum(),
        robust_inconclusive=(pl.col("robust_verdict") == "inconclusive").sum(),
        robust_considered=(pl.col("considered") & (pl.col("robust_verdict") == "verified")).sum(),
        favourable_rate=pl.col("decision").cast(pl.Float64).mean(),
        tpr=pl.col("decision").filter(pl.col("truth") == 1).cast(pl.Float64).mean(),
        cfa=(pl.col("decision") == pl.col("twin_decision")).cast(pl.Float64).mean(),
    ).with_columns(
        pba=pl.when(pl.col("considered") > 0).then(pl.col("verified") / pl.col("considered")),
        robustness=pl.col("robust_verified") / pl.col("inputs"),
        robust_accuracy=pl.when(pl.col("considered") > 0).then(pl.col("robust_considered") / pl.col("considered")),
    ).sort(["attribute", "group_name", "setting", "delta"], maintain_order=True))
    pop = pl.DataFrame({"attribute": [k[0] for k in population], "group_name": [k[1] for k in population],
                        "population": list(population.values())},
                       schema={"attribute": pl.Utf8, "group_name": pl.Utf8, "population": pl.Int64})
    out = out.join(pop, on=["attribute", "group_name"], how="left").with_columns(
        sampled=pl.col("inputs") < pl.col("population"),
        model_inputs=pl.lit(list(model_inputs), dtype=pl.List(pl.Utf8)))
    return out.to_arrow().select(SUMMARY.names).cast(SUMMARY)
