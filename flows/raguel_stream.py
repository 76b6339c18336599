"""RAGUEL-Block over a staged lake that need not fit in memory (issue: "scale").

DuckDB prices and sorts the records (``sql/raguel_ranked.sql``, spilling under its memory
limit) and hands Arrow batches to :func:`engines.reranking.stream.rerank_stream`, which
re-ranks block by block; the output goes to a Parquet file batch by batch. Only identifiers
(quoted) enter the SQL text; numbers are bound parameters.
"""
from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq

from aequum.engines.core.data import group_column
from aequum.engines.reranking.engine import recourse_model
from aequum.engines.reranking.recourse import LinearRecourse
from aequum.engines.reranking.stream import StreamSummary, rerank_stream
from aequum.flows.store.warehouse import SQL_DIR, _memory, quote_ident


def ranked_query(features: list[str], attribute: str, unfavourable_only: bool) -> str:
    text = (SQL_DIR / "raguel_ranked.sql").read_text(encoding="utf-8")
    feats = ", ".join(quote_ident(f) for f in features)
    margin = " + ".join(f"${i + 4} * {quote_ident(f)}" for i, f in enumerate(features))
    # records in neither group stay in the list as the group "other" (code 2), as in the engine
    filt = " AND ".join([f"{quote_ident(f)} IS NOT NULL" for f in features]
                        + ([f"{quote_ident('_decision')} = 0"] if unfavourable_only else []))
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    return body.format(features=feats, group=quote_ident(group_column(attribute)), margin=margin, filter=filt)


def rerank_lake(lake: str | Path, spec, params, attribute: str, out: str | Path,
                memory_limit: str = "1GB", batch_rows: int = 100_000) -> dict:
    """Algorithm 2 over the lake's records for one protected attribute; returns the summary."""
    features, model = recourse_model(spec, params)
    if not isinstance(model, LinearRecourse):
        raise ValueError("rerank_lake needs a linear boundary (raguel.boundary 'model' or 'linear')")
    glob = str(Path(lake) / "**" / "*.parquet")
    con = duckdb.connect()
    try:
        con.execute(f"SET memory_limit = '{_memory(memory_limit)}'")   # checked size, not user SQL
        unfav = params.population == "unfavourable"
        sql = ranked_query(features, attribute, unfav)
        args = [glob, model.b, model.norm, *map(float, model.a)]
        counts_sql = f"SELECT \"group\", count(*) FROM ({sql}) GROUP BY 1"
        counts = dict(con.sql(counts_sql, params=args).fetchall())
        G = 3 if counts.get(2) else 2
        total = sum(counts.values())
        if not counts.get(0) or not counts.get(1):
            raise ValueError(f"attribute {attribute!r}: a group is absent from the ranked records {counts}")
        p = np.array([counts.get(g, 0) / total for g in range(G)])
        summary = StreamSummary(G)
        reader = con.sql(sql, params=args).to_arrow_reader(batch_rows)
        writer = None
        try:
            for batch in rerank_stream(reader, features, model, p, params.block_size, params.tolerance,
                                       params.recourse_tolerance, params.recourse, params.rounding, summary,
                                       params.eq3):
                if writer is None:
                    writer = pq.ParquetWriter(str(out), batch.schema)
                writer.write_batch(batch)
        finally:
            if writer is not None:
                writer.close()
        return {"attribute": attribute, "protected_share": float(p[0]), **summary.result()}
    finally:
        con.close()
