"""Detection quality: individual-level findings scored against a ground truth of harm.

When the source has a ground truth (a generator's truth table, or one the spec names), each
individual-level finding is a prediction "this record was harmed" and the truth says whether
it was. Per engine, method, parameter (k, δ), protected attribute and group, over the records
the engine examined (its *population*: CST's complainants, PBA's considered inputs):

    precision = TP / flagged,   recall = TP / harmed,   F1 = 2PR / (P + R),
    base rate = harmed / population  (the precision of flagging at random)

Two kinds of truth (``effect``):

* ``direct`` — harmed by the mechanism itself, everything else held as observed (a
  ceteris-paribus quantity: what situation testing (ST) and PBA's flip of the group target);
  per attribute where the truth gives it (the controlled direct effect of that attribute);
* ``total`` — harmed under do(attribute := reference value) through the structural equations:
  the counterfactual quantity that CF (Kusner et al. 2017) and CST (Alvarez & Ruggieri 2023,
  Def. 3.2) estimate.

Every method is scored against both; ``same_kind`` marks the truth of its own kind.

Where the truth also gives each record's posterior probability of harm given what the data
shows (the HMDA generator's ``p_harmed*``: the Bayes posterior given the underwriting
variables, knowing the generator), ``oracle_precision`` / ``oracle_recall`` are those of
flagging the same number of the same population by that posterior — the best any method
reading those variables could do with as many findings, so that an engine's figures can be
told apart from what the data allow — and ``oracle_precision_half_recall`` that of flagging
by the posterior until half of the harmed are flagged: in a population of thousands, the
highest precision any method reading those variables can expect at recall 0.5 (ranking by
the posterior maximises the expected number of harmed among any number flagged, and the
number that holds half of them varies little). Pure computation over the engines'
output tables and the truth columns; no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import polars as pl
import pyarrow as pa

from aequum.engines.outcome.stats import wilson_interval

DETECTION = pa.schema([
    ("engine", pa.string()), ("method", pa.string()), ("parameter", pa.string()),
    ("protected_attribute", pa.string()), ("group", pa.string()), ("finding", pa.string()),
    ("effect", pa.string()), ("same_kind", pa.bool_()), ("population", pa.int64()),
    ("flagged", pa.int64()), ("harmed", pa.int64()), ("true_positives", pa.int64()),
    ("base_rate", pa.float64()), ("precision", pa.float64()), ("recall", pa.float64()),
    ("f1", pa.float64()), ("note", pa.string()),
    ("oracle_precision", pa.float64()), ("oracle_recall", pa.float64()),
    ("oracle_precision_half_recall", pa.float64()),
    ("precision_ci_low", pa.float64()), ("precision_ci_high", pa.float64()),
    ("recall_ci_low", pa.float64()), ("recall_ci_high", pa.float64()),
])

# the kind of effect each CST method estimates (CF and CST: counterfactual worlds; ST: the
# same observed features in the other group)
CST_EFFECT = {"ST": "direct", "CST_wo_centres": "total", "CST": "total", "CF": "total"}
POOLED = "pooled"


@dataclass(frozen=True)
class GroundTruth:
    """Harm per record: ``direct`` (booleans, or None when unknown) and ``total`` per protected
    attribute name (booleans; records with a null truth — e.g. out of scope — are not scored).
    Arrays are NumPy or Arrow, aligned with ``ids``."""

    ids: object
    direct: object | None
    total: dict[str, object] = field(default_factory=dict)
    source: str = ""
    direct_posterior: object | None = None           # P(harmed | what the data show), per record
    total_posterior: dict[str, object] = field(default_factory=dict)
    direct_by: dict[str, object] = field(default_factory=dict)   # per attribute: its own direct effect
    direct_by_posterior: dict[str, object] = field(default_factory=dict)

    @cached_property
    def frame(self) -> pl.DataFrame:
        """Every column by record id, built (and its ids checked) once however many engines'
        findings are scored against it (10M records: 2 s each)."""
        cols = {"record_id": _arrow(self.ids, pa.string())}
        if self.direct is not None:
            cols["direct"] = _arrow(self.direct, pa.bool_())
        cols.update({f"total:{a}": _arrow(v, pa.bool_()) for a, v in self.total.items()})
        if self.direct_posterior is not None:
            cols["posterior:direct"] = _arrow(self.direct_posterior, pa.float64())
        cols.update({f"posterior:total:{a}": _arrow(v, pa.float64()) for a, v in self.total_posterior.items()})
        cols.update({f"direct:{a}": _arrow(v, pa.bool_()) for a, v in self.direct_by.items()})
        cols.update({f"posterior:direct:{a}": _arrow(v, pa.float64()) for a, v in self.direct_by_posterior.items()})
        df = pl.from_arrow(pa.table(cols))
        if df["record_id"].n_unique() != df.height:
            raise ValueError(f"truth ({self.source}): the id column has duplicate ids")
        return df


def _arrow(values, type_: pa.DataType):
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.cast(type_)
    return pa.array(np.asarray(values).astype(str) if type_ == pa.string() else values, type_)


def scores(flagged: np.ndarray, harmed: np.ndarray) -> dict[str, float | int | None]:
    """Counts, base rate, precision, recall and F1 of ``flagged`` against ``harmed`` (bools of
    one population), with 95% Wilson intervals for precision and recall (the records as a
    sample of the process that made them). A ratio with a zero denominator is null."""
    flagged, harmed = np.asarray(flagged, bool), np.asarray(harmed, bool)
    n, f, h = len(flagged), int(flagged.sum()), int(harmed.sum())
    tp = int((flagged & harmed).sum())
    p = tp / f if f else None
    r = tp / h if h else None
    f1 = 2 * p * r / (p + r) if p is not None and r is not None and p + r > 0 else (0.0 if f and h else None)
    (p_low, p_high), (r_low, r_high) = wilson_interval(tp, f, 0.95), wilson_interval(tp, h, 0.95)
    return {"population": n, "flagged": f, "harmed": h, "true_positives": tp,
            "base_rate": h / n if n else None, "precision": p, "recall": r, "f1": f1,
            "precision_ci_low": p_low, "precision_ci_high": p_high, "recall_ci_low": r_low, "recall_ci_high": r_high}


def _score_groups(df: pl.DataFrame, keys: list[str], flag: str, fixed: dict, effect_of) -> list[dict]:
    """One row per group of ``keys`` × effect, scoring column ``flag`` against the truth
    columns present (``direct``, ``total:<attribute>``)."""
    rows = []
    for key, g in df.group_by(keys, maintain_order=True):
        info = dict(zip(keys, key))
        attr = info["protected_attribute"]
        direct = f"direct:{attr}" if f"direct:{attr}" in g.columns else "direct"  # the attribute's own, if known
        for effect, column in (("direct", direct), ("total", f"total:{attr}")):
            if column not in g.columns:
                continue
            known = g.filter(pl.col(column).is_not_null())
            if known.height == 0:
                continue
            row = {**fixed, **info, "effect": effect, "same_kind": effect_of(info) == effect,
                   "note": None, **scores(known[flag].fill_null(False).to_numpy(), known[column].to_numpy())}
            if f"posterior:{column}" in known.columns:
                row.update(oracle(known, column, f"posterior:{column}", row["flagged"]))
            if known.height < g.height:
                row["note"] = f"{g.height - known.height} record(s) without a truth value not scored"
            rows.append(row)
    return rows


def oracle(df: pl.DataFrame, harmed: str, posterior: str, flagged: int) -> dict[str, float | None]:
    """Precision and recall of flagging the ``flagged`` records of ``df`` with the highest
    ``posterior`` (ties by record id), scored against ``harmed``; and the precision of
    flagging in that order until half of the harmed are flagged (null without harmed)."""
    ranked = df.sort([posterior, "record_id"], descending=[True, False], nulls_last=True)[harmed]
    hits = np.cumsum(ranked.cast(pl.Int64).to_numpy())
    total = int(hits[-1]) if len(hits) else 0
    hit = int(hits[flagged - 1]) if flagged else 0
    half = int(np.searchsorted(hits, -(-total // 2))) + 1  # the fewest flagged holding half the harmed
    return {"oracle_precision": hit / flagged if flagged else None,
            "oracle_recall": hit / total if total else None,
            "oracle_precision_half_recall": int(hits[half - 1]) / half if total else None}


def _with_truth(table: pa.Table, truth: GroundTruth) -> pl.DataFrame:
    """``table``'s rows with the truth of their records. The truth is first cut to those
    records (a pass over it with a set of the few scored ids): joined whole, the truth's 10M
    HMDA records were hashed, 1 GB, for the 0.16M records CST scores."""
    df = pl.from_arrow(table)
    scored = truth.frame.filter(pl.col("record_id").is_in(df["record_id"].unique().implode()))
    return df.join(scored, on="record_id", how="left")


def cst_detection(claims: pa.Table, truth: GroundTruth, summary: pa.Table | None = None) -> list[dict]:
    """CST claims (one per complainant × method × k): ``significant`` (ST, CST), ``probable``
    (probability of necessity > ½) and ``discriminated`` (every method; CF's finding) against
    the truth. With mediators held (``summary.effect``) CF and CST measure a path-specific
    effect, which neither truth is (``same_kind`` false), or, with every mediator held, the
    direct effect."""
    measured = {}
    if summary is not None and "effect" in summary.column_names:
        measured = {(r["protected_attribute"], r["method"]): r["effect"] for r in
                    summary.select(["protected_attribute", "method", "effect"]).to_pylist()}

    def kind(info: dict) -> str:
        effect = measured.get((info["protected_attribute"], info["method"]), "total")
        if effect.startswith("direct"):  # every mediator held: the direct effect
            return "direct"
        return CST_EFFECT.get(info["method"], "total") if effect in ("total", "ceteris paribus") else effect

    df = _with_truth(claims, truth).with_columns(
        pl.col(_group_column(claims)).cast(pl.Utf8).alias("group") if _group_column(claims)
        else pl.lit(POOLED).alias("group"),
        pl.format("k={}", pl.col("k")).alias("parameter"))
    rows = []
    for finding in ("significant", "probable", "discriminated"):
        if finding not in df.columns:
            continue
        part = df if finding == "discriminated" else df.filter(pl.col("method") != "CF")
        rows += _score_groups(part, ["method", "parameter", "protected_attribute", "group"], finding,
                              {"engine": "cst", "finding": finding}, kind)
    return rows


def pba_detection(inputs: pa.Table, truth: GroundTruth) -> list[dict]:
    """PBA inputs: among the considered inputs that were refused (decision 0; only they can
    have been harmed), a ``verified`` verdict per setting and δ against the truth. For a
    refused input, *observed* verified means its own group's logit favours refusal more than
    its twin's over the whole δ box (a persistent bias against it); *flipped* the reverse.
    PBA flips the group indicator alone: a direct-effect quantity. Considered inputs have
    both twins predicted as refused, so the flip changes no decision of the model: PBA finds
    bias in the score, not harm, and its precision against harm is bounded accordingly."""
    df = _with_truth(inputs, truth).filter(pl.col("considered").fill_null(False)
                                           & (pl.col("decision") == 0)).with_columns(
        (pl.col("verdict") == "verified").alias("verified"),
        pl.col("group_name").cast(pl.Utf8).fill_null(POOLED).alias("group"),
        pl.col("attribute").alias("protected_attribute"),
        pl.format("delta={}", pl.col("delta")).alias("parameter"),
        pl.col("setting").alias("method"))
    return _score_groups(df, ["method", "parameter", "protected_attribute", "group"], "verified",
                         {"engine": "pba", "finding": "verified"}, lambda _info: "direct")


def _group_column(claims: pa.Table) -> str | None:
    """Claims tables that split a protected attribute into groups (each protected value
    against the reference) name the group in ``group`` or ``group_name``."""
    return next((c for c in ("group", "group_name") if c in claims.column_names), None)


SCORERS = {"cst": lambda tables, truth: cst_detection(tables["cst_claims"], truth, tables.get("cst_summary")),
           "pba": lambda tables, truth: pba_detection(tables["pba_inputs"], truth)}
INDIVIDUAL = {"cst": "cst_claims", "pba": "pba_inputs"}  # the table of individual findings


def detection_table(engine_tables: dict[str, dict[str, pa.Table]], truth: GroundTruth) -> pa.Table:
    """The ``detection`` table for one run: every individual-level engine output in
    ``engine_tables`` (engine name -> its tables) scored against ``truth``."""
    rows: list[dict] = []
    for engine, scorer in SCORERS.items():
        tables = engine_tables.get(engine, {})
        if tables.get(INDIVIDUAL[engine]) is not None and tables[INDIVIDUAL[engine]].num_rows:
            rows += scorer(tables, truth)
    if not rows:
        return DETECTION.empty_table()
    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in DETECTION} for r in rows], schema=DETECTION)
    keys = ["engine", "protected_attribute", "group", "method", "parameter", "finding", "effect"]
    return table.sort_by([(k, "ascending") for k in keys])  # independent of the engines' row order
