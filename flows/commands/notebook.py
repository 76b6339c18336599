"""``aequum.audit(frame, spec)``: an audit of an in-memory frame from a notebook.

The same path as ``aequum audit`` without Prefect, Dask or a warehouse to keep: the frame is
validated and staged exactly as a source file is (into a throwaway warehouse and lake), the
spec's model is built or fitted and assessed, and every engine the spec names runs in this
process (``run_serial``). The result (:class:`AuditResult`) holds every table the CLI would write,
each group code's label beside it as the warehouse holds it (``group_label``), plus ``quarantine``
(the rejected rows and why) and ``model_quality``; the run is recorded in that
warehouse as ``aequum audit`` records it, so that ``audit.findings``, the conclusion and the
report are those of the command line.
"""
from __future__ import annotations

import copy
import json
import tempfile
import time
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

RUN_ID = "notebook"  # the run's id in its temporary warehouse


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


class AuditResult:
    """What ``aequum.audit`` returns: ``conclusion`` (the conclusion's sentences, one a line, as
    ``aequum audit`` prints them), ``findings`` (``audit.findings`` ranked, with ``group_label``:
    "Female against Male"), ``tables`` (every result table, ``quarantine`` and ``model_quality``
    among them) and :meth:`report`. ``result["cst_summary"]`` is ``result.tables["cst_summary"]``.
    Frames are of the kind the audited frame was: pandas, polars or Arrow."""

    def __init__(self, tables: dict[str, pl.DataFrame], findings: pa.Table, record: dict, kind: str,
                 workdir: tempfile.TemporaryDirectory):
        from aequum.flows.reporting.conclusion import ordered, sentences
        from aequum.flows.reporting.labels import Labels

        self._workdir = workdir  # the run's warehouse, kept for report() while the result lives
        self.run_id = record["run_id"]
        parameters = json.loads(record.get("parameters") or "{}")
        labels = Labels(parameters)
        rows = ordered(findings.to_pylist())  # audit.findings, group_label among its columns
        self.conclusion = "\n".join(sentences(record, parameters, rows, labels)) if rows else ""
        self.findings = _as(kind, pl.from_arrow(pa.Table.from_pylist(rows, schema=findings.schema))
                            if rows else pl.DataFrame({"group_label": []}, schema={"group_label": pl.String}))
        self.tables = {name: _as(kind, t) for name, t in tables.items()}

    @property
    def warehouse(self) -> Path:
        """The run's temporary DuckDB warehouse (deleted with this result)."""
        return Path(self._workdir.name) / "wh.duckdb"

    def report(self, path: str | Path) -> Path:
        """Write the HTML report of the run (as ``aequum report``) to ``path``; return it."""
        from aequum.flows.commands.report import write_report

        return write_report(self.warehouse, self.run_id, path)

    def __getitem__(self, name: str):
        return self.tables[name]

    def __contains__(self, name: str) -> bool:
        return name in self.tables

    def __iter__(self):
        return iter(self.tables)

    def __len__(self) -> int:
        return len(self.tables)

    def keys(self):  # the mapping's methods: code written for the dict of tables keeps working
        return self.tables.keys()

    def items(self):
        return self.tables.items()

    def values(self):
        return self.tables.values()

    def __repr__(self) -> str:
        said = self.conclusion or "(no findings)"
        return (f"AuditResult\nConclusion:\n" + "\n".join(f"  {s}" for s in said.splitlines())
                + f"\nFindings: {len(self.findings)} rows (.findings)\nTables: " + ", ".join(self.tables))


def _kind(frame: Any) -> str:
    if isinstance(frame, pl.DataFrame):
        return "polars"
    if isinstance(frame, (pa.Table, pa.RecordBatch)):
        return "arrow"
    return "pandas"


def _as(kind: str, frame: pl.DataFrame):
    """``frame`` as the kind of frame the user gave."""
    if kind == "pandas":
        return frame.to_pandas()
    if kind == "arrow":
        return frame.to_arrow()
    return frame


def audit(frame: Any, spec: dict | str | Path, engines: list[str] | None = None,
          verbose: bool = False, say=None) -> AuditResult:
    """Audit ``frame`` under ``spec`` (a mapping as in a spec file, or a YAML path) in this
    process and return an :class:`AuditResult` (the conclusion, the ranked findings, every
    result table, the report), its frames of the kind ``frame`` is.

    ``spec`` needs no ``source`` section (the frame is the source); ``source.id_column`` names
    the id column if the frame has one (default: the row number). ``engines`` overrides
    ``engines.run``. Bad input raises the same errors, naming the field, row or value, as the
    command line reports. Silent unless ``verbose`` (progress lines on stdout) or ``say`` (a
    callable that receives them)."""
    from aequum.engines.core.model_quality import QUALITY
    from aequum.engines.core.models import model_fingerprint
    from aequum.flows.model_step import prepare_model
    from aequum.flows.store.counterfactuals import load_counterfactuals
    from aequum.flows.store.group_labels import label_tables
    from aequum.flows.store.staging import stage
    from aequum.flows.store.warehouse import Warehouse

    say = say or (print if verbose else (lambda _message: None))
    raw, spec_dir = _spec_mapping(spec)
    table = _to_arrow(frame)
    kind = _kind(frame)
    workdir = tempfile.TemporaryDirectory(prefix="aequum-notebook-")
    tmp = Path(workdir.name)
    try:
        source = tmp / "frame.parquet"
        pq.write_table(table, source)
        id_column = (raw.get("source") or {}).get("id_column")
        raw["source"] = {"kind": "parquet", "path": str(source), "id_column": id_column}
        if engines is not None:
            raw.setdefault("engines", {})["run"] = list(engines)
        parsed = parse_spec(raw, where="(aequum.audit)")
        warehouse = tmp / "wh.duckdb"
        with Warehouse(warehouse) as wh:
            ref = stage(parsed, spec_dir, wh, tmp / "lake", progress=say)
            staged = wh.staged(ref.version)
            quarantine = wh.con.sql(
                "SELECT source_row, record_id, field, value, reason FROM audit.quarantine "
                "WHERE dataset_version = $v ORDER BY source_row", params={"v": ref.version}).to_arrow_table()
        model, quality, problem = prepare_model(parsed, spec_dir, ref, say, engines=parsed.engines.run)
        data = AuditData(parsed, staged, ref.categories, model,
                         load_counterfactuals(parsed, spec_dir, staged))
        out: dict[str, pa.Table] = {"quarantine": quarantine}
        written: dict[str, tuple[pa.Schema, pa.Table]] = {}
        if quality is not None:
            out["model_quality"] = quality
            written["model_quality"] = (QUALITY, quality)
        statuses: dict[str, tuple[str, float, dict, str | None]] = {}
        for name in parsed.engines.run:
            engine = get_engine(name)
            if problem and getattr(engine, "uses_model", False):
                say(f"engine {name}: not run: {problem}")
                statuses[name] = ("skipped", 0.0, {}, f"not run: {problem}")
                continue
            t0 = time.perf_counter()
            tables = run_serial(engine, data, parsed.engines.params(name))
            out.update(tables)
            written.update({t: (engine.tables[t], v) for t, v in tables.items()})
            statuses[name] = ("succeeded", round(time.perf_counter() - t0, 3),
                              {t: v.num_rows for t, v in tables.items()}, None)
            say(f"engine {name}: done")
        written = label_tables(parsed.run_parameters(), written)  # the labels the warehouse's tables carry
        out.update({name: table for name, (_, table) in written.items()})
        with Warehouse(warehouse) as wh:  # the run, as `aequum audit` records it: audit.findings
            wh.start_run(RUN_ID, parsed.name, parsed.digest(), "notebook", parsed.run_parameters())
            wh.write_results(RUN_ID, written)
            for name, (status, seconds, counts, error) in statuses.items():
                wh.record_engine(RUN_ID, name, status, seconds, 1, counts, error)
            wh.finish_run(RUN_ID, "succeeded", ref.version, ref.fingerprint,
                          model_fingerprint(model) if model is not None else None)
            wh.create_views()
            record = wh.run(RUN_ID)
            findings = (wh.query("report/findings", {"run_id": RUN_ID}) if "findings" in wh.table_names()
                        else pa.table({}))
    except BaseException:
        workdir.cleanup()
        raise
    return AuditResult({name: pl.from_arrow(t) for name, t in out.items()},
                       findings, record, kind, workdir)
