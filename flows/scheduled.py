"""The deployable entry point (prefect.yaml): one scheduled audit of one spec on Dask."""
from __future__ import annotations

from prefect import flow

from aequum.flows.audit import run_audit
from aequum.flows.preflight import preflight
from aequum.flows.store.staging import DEFAULT_LAKE
from aequum.flows.store.warehouse import DEFAULT_WAREHOUSE


@flow(name="aequum-scheduled-audit")
def scheduled_audit(spec_path: str, warehouse: str = str(DEFAULT_WAREHOUSE), lake: str = str(DEFAULT_LAKE),
                    dask_address: str | None = None, workers: int | None = None) -> str:
    """Run the audit flow as a subflow on a Dask cluster and return the run_id (a bad spec or
    source fails first, before the cluster starts)."""
    preflight(spec_path)
    return run_audit(spec_path, warehouse=warehouse, lake=lake, dask_address=dask_address,
                     workers=workers)
