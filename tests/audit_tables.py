"""A small real audit written straight to a warehouse (no Prefect): the loan spec at a few
hundred rows, every engine of the spec run serially, results written with
``Warehouse.write_results`` and the run recorded as a flow would. For the findings view and
report tests."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def small_audit(tmp: Path, rows: int = 400, engines: list[str] | None = None,
                run_id: str = "loan-small", spec_name: str = "loan.yaml", edit=None,
                records: bool = False) -> Path:
    """Write one run of ``data/specs/<spec_name>`` at ``rows`` rows to ``tmp/wh.duckdb``
    (``edit(raw)`` may change the raw spec first). ``records``: the records are staged into that
    warehouse (and ``tmp/lake``) and the run names their dataset version, as an audit's does."""
    from conftest import stage_spec
    from aequum.engines.core.engine import run_serial
    from aequum.engines.core.models import model_fingerprint
    from aequum.engines.core.spec import parse_spec
    from aequum.engines.registry import get_engine
    from aequum.flows.store.warehouse import Warehouse

    raw = yaml.safe_load((REPO / "data" / "specs" / spec_name).read_text())
    raw["source"]["rows"] = rows
    if engines is not None:
        raw["engines"]["run"] = engines
    if edit is not None:
        edit(raw)
    spec = parse_spec(raw)
    path = tmp / "wh.duckdb"
    data = stage_spec(spec, tmp, REPO / "data" / "specs", path if records else None)
    version = "0123456789abcdef"
    if records:
        with Warehouse(path, read_only=True) as wh:
            (version,) = wh.con.execute("SELECT dataset_version FROM audit.datasets").fetchone()
    results, statuses = {}, {}
    for name in spec.engines.run:
        engine = get_engine(name)
        tables = run_serial(engine, data, spec.engines.params(name))
        statuses[name] = {t: v.num_rows for t, v in tables.items()}
        results.update({t: (engine.tables[t], v) for t, v in tables.items()})
    with Warehouse(path) as wh:
        wh.start_run(run_id, spec.name, spec.digest(), "test", spec.run_parameters())
        wh.write_results(run_id, results)
        for name, counts in statuses.items():
            wh.record_engine(run_id, name, "succeeded", 0.1, 1, counts, None)
        wh.finish_run(run_id, "succeeded", version, f"{rows}:{json.dumps(rows)}",
                      model_fingerprint(data.model) if data.model is not None else None)
        wh.create_views()
    return path
