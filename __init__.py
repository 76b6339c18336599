"""aequum: batch audits of automated decisions for the discrimination that outcome metrics miss.

The installed package is this repository's root: ``aequum.engines`` (pure computation),
``aequum.flows`` (orchestration, the CLI) and the SQL files. From a notebook::

    import aequum
    tables = aequum.audit(frame, "data/specs/loan.yaml")   # or a spec mapping
    tables["cst_summary"]

runs the same staging, model and engines as ``aequum audit``, in-process (no Prefect server,
no Dask cluster), and returns every result table as a polars DataFrame.
"""
__all__ = ["audit"]


def __getattr__(name: str):
    """``aequum.audit``, imported on first use (PEP 562): importing ``aequum`` for the command
    line or an engine then does not import the notebook's polars, staging and model step."""
    if name == "audit":
        from aequum.flows.commands.notebook import audit

        return audit
    raise AttributeError(f"module 'aequum' has no attribute {name!r}")
