"""What the report reads of one run: its record, its engines, and bounded queries of its
tables (``sql/report/*.sql``), so a ten-million-row run is read in seconds."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property

from aequum.flows.store.warehouse import Warehouse, WarehouseError

CASES = 20          # individual cases shown per finding; the rest stay in the warehouse
EVIDENCE_CASES = 5  # cases whose comparison groups are listed


@dataclass
class Run:
    """One run of a read-only warehouse, as the report sections see it."""

    wh: Warehouse
    run_id: str
    record: dict
    engines: dict[str, dict]
    tables: set[str] = field(default_factory=set)
    # files written beside the report, by table and format (csv, xlsx): their names, as a
    # section links them (``flows.commands.report.write_report``)
    files: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def open(cls, wh: Warehouse, run_id: str | None = None) -> "Run":
        """The run ``run_id`` (default: the latest run of the warehouse)."""
        if run_id is None:
            latest = wh.runs(limit=1).to_pylist()
            if not latest:
                raise WarehouseError(f"warehouse {wh.path} has no runs to report on")
            run_id = latest[0]["run_id"]
        record = wh.run(run_id)
        if record is None:
            raise WarehouseError(f"no run {run_id!r} in {wh.path}; `aequum runs` lists them")
        return cls(wh, run_id, record, wh.engine_status(run_id), set(wh.table_names()))

    @cached_property
    def parameters(self) -> dict:
        try:
            return json.loads(self.record.get("parameters") or "{}")
        except json.JSONDecodeError:
            return {}

    def ran(self, engine: str) -> bool:
        """Did the engine run in this run and succeed (its rows are the run's)?"""
        return self.engines.get(engine, {}).get("status") == "succeeded"

    def result(self, name: str) -> list[dict]:
        """All of the run's rows of a small per-group table."""
        return self.wh.result(name, self.run_id).to_pylist() if name in self.tables else []

    def query(self, name: str, **params) -> list[dict]:
        """Rows of ``sql/report/<name>.sql`` for this run (``$run_id`` is bound for it)."""
        return self.wh.query(f"report/{name}", {"run_id": self.run_id, **params}).to_pylist()
