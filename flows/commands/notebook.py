"""``aequum.audit(frame, spec)``: an audit of an in-memory frame from a notebook.

The same path as ``aequum audit`` without Prefect, Dask or a warehouse to keep: the frame is
validated and staged exactly as a source file is (into a throwaway warehouse and lake), the
spec's model is built or fitted and assessed, and every engine the spec names runs in this
process (``run_serial``). The result is every table the CLI would write, as polars frames,
plus ``quarantine`` (the rejected rows and why) and ``model_quality``.
"""
from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import SpecError, parse_spec
from aequum.engines.registry import get_engine


def _spec_mapping(spec: dict | str | Path) -> tuple[dict, Path]:
    """The raw spec and the folder its relative paths (model files) resolve against."""
    if isinstance(spec, dict):
        return copy.deepcopy(spec), Path.cwd()
    path = Path(spec)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"spec file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"spec file {path} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"invalid audit spec {path}: the top level must be a mapping")
    return raw, path.resolve().parent


def _to_arrow(frame: Any) -> pa.Table:
    """A pandas or polars DataFrame, or an Arrow table or record batch, as an Arrow table."""
    if isinstance(frame, pa.Table):
        return frame
    if isinstance(frame, pa.RecordBatch):
        return pa.Table.from_batches([frame])
    if isinstance(frame, pl.DataFrame):
        return frame.to_arrow()
    if type(frame).__module__.startswith("pandas"):
        return pa.Table.from_pandas(frame, preserve_index=False)
    raise TypeError(f"aequum.audit needs a pandas or polars DataFrame or an Arrow table, "
                    f"got {type(frame).__name__}")


def audit(frame: Any, spec: dict | str | Path, engines: list[str] | None = None,
          say=print) -> dict[str, pl.DataFrame]:
    """Audit ``frame`` under ``spec`` (a mapping as in a spec file, or a YAML path) in this
    process and return ``{table name: polars DataFrame}``.

    ``spec`` needs no ``source`` section (the frame is the source); ``source.id_column`` names
    the id column if the frame has one (default: the row number). ``engines`` overrides
    ``engines.run``. Bad input raises the same errors, naming the field, row or value, as the
    command line reports; ``say`` receives progress lines (``None``: quiet)."""
    from aequum.flows.model_step import prepare_model
    from aequum.flows.store.counterfactuals import load_counterfactuals
    from aequum.flows.store.staging import stage
    from aequum.flows.store.warehouse import Warehouse

    say = say or (lambda _message: None)
    raw, spec_dir = _spec_mapping(spec)
    table = _to_arrow(frame)
    with tempfile.TemporaryDirectory(prefix="aequum-notebook-") as tmp:
        source = Path(tmp) / "frame.parquet"
        pq.write_table(table, source)
        id_column = (raw.get("source") or {}).get("id_column")
        raw["source"] = {"kind": "parquet", "path": str(source), "id_column": id_column}
        if engines is not None:
            raw.setdefault("engines", {})["run"] = list(engines)
        parsed = parse_spec(raw, where="(aequum.audit)")
        with Warehouse(Path(tmp) / "wh.duckdb") as wh:
            ref = stage(parsed, spec_dir, wh, Path(tmp) / "lake", progress=say)
            staged = wh.staged(ref.version)
            quarantine = wh.con.sql(
                "SELECT source_row, record_id, field, value, reason FROM audit.quarantine "
                "WHERE dataset_version = $v ORDER BY source_row", params={"v": ref.version}).to_arrow_table()
        model, quality, problem = prepare_model(parsed, spec_dir, ref, say, engines=parsed.engines.run)
        data = AuditData(parsed, staged, ref.categories, model,
                         load_counterfactuals(parsed, spec_dir, staged))
        out: dict[str, pa.Table] = {"quarantine": quarantine}
        if quality is not None:
            out["model_quality"] = quality
        for name in parsed.engines.run:
            engine = get_engine(name)
            if problem and getattr(engine, "uses_model", False):
                say(f"engine {name}: not run: {problem}")
                continue
            out.update(run_serial(engine, data, parsed.engines.params(name)))
            say(f"engine {name}: done")
    return {name: pl.from_arrow(t) for name, t in out.items()}
