"""aequum: batch audits of automated decisions for the discrimination that outcome metrics miss.

The installed package is this repository's root: ``aequum.engines`` (pure computation),
``aequum.flows`` (orchestration, the CLI) and the SQL files. From a notebook::

    import aequum
    result = aequum.audit(frame, "data/specs/loan.yaml")   # or a spec mapping
    print(result.conclusion)        # the conclusion ``aequum audit`` prints
    result.findings                 # ranked, with group_label ("Female against Male")
    result["cst_summary"]           # any result table (result.tables: all of them)
    result.report("report.html")    # the HTML report of the run

runs the same staging, model and engines as ``aequum audit``, in-process (no Prefect server,
no Dask cluster), silently unless ``verbose=True``; frames come back of the kind given
(pandas, polars or Arrow).
"""
import os

# Arrow's C++ code (Parquet reads, datasets, compute) allocates from the default pool it picks
# when first imported, mimalloc, whose thread heaps keep what the reading threads freed out of
# reach of malloc_trim: a worker that read 10M staged records kept 0.11 GB more with it, and
# peaked 0.08 GB higher. Chosen here, before anything imports pyarrow, unless the user chose;
# Dask workers started by aequum inherit it (a worker started by hand: set it in its shell).
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

__all__ = ["audit"]


def __getattr__(name: str):
    """``aequum.audit``, imported on first use (PEP 562): importing ``aequum`` for the command
    line or an engine then does not import the notebook's polars, staging and model step."""
    if name == "audit":
        from aequum.flows.commands.notebook import audit

        return audit
    raise AttributeError(f"module 'aequum' has no attribute {name!r}")
