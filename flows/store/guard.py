"""Checks at the boundary, before anything is written: a run id is a safe name, and a file a
command writes is none of the files aequum keeps or reads (the warehouse, the lake, a source,
another DuckDB database). Imports neither DuckDB nor Arrow: the command line runs them first."""
from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

# a run id names a report file (report-<run_id>.html) and appears in every audit table
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
_DUCKDB_MAGIC = b"DUCK"  # bytes 8-11 of a DuckDB database file


class UsageError(ValueError):
    """A command-line or configuration value that cannot be used (the message names it)."""


def user_errors() -> tuple[type[Exception], ...]:
    """The errors a user can act on: one line and exit 2, and inside a flow a Failed flow run
    with that line, not a traceback. Imported when an error comes, not when the command starts
    (they pull in DuckDB, Arrow, polars and pydantic: about 1.5 s before ``aequum audit`` could
    start Prefect's temporary API)."""
    from aequum.engines.core.models import ModelError
    from aequum.engines.core.spec import SpecError
    from aequum.engines.core.validation import SourceSchemaError
    from aequum.flows.cluster import WorkersLost
    from aequum.flows.store.readers import SourceError
    from aequum.flows.store.staging import IngestError
    from aequum.flows.store.warehouse import WarehouseError

    return (SpecError, SourceError, SourceSchemaError, IngestError, WarehouseError, ModelError, UsageError,
            FileNotFoundError, WorkersLost)


def check_run_id(run_id: str, where: str = "--run-id") -> str:
    """``run_id`` if it is 1-128 letters, digits, '_', '-' and '.', not starting with '.' or '-'."""
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        raise UsageError(f"{where}: run id {run_id!r} must be 1-128 letters, digits, '_', '-' or '.', "
                         "starting with a letter or digit")
    return run_id


def is_duckdb(path: Path) -> bool:
    """Whether ``path`` is a DuckDB database file (its magic bytes)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(12)[8:12] == _DUCKDB_MAGIC
    except OSError:
        return False


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_output(path: str | Path, what: str, warehouse: str | Path | None = None,
                 lakes: Iterable[str | Path] = (), sources: Iterable[str | Path] = ()) -> Path:
    """``path`` if a command may write it: not the warehouse (nor its write-ahead log), not in
    a lake folder, not a file the audit reads (its spec, its source), not an existing directory or
    DuckDB database, all compared as resolved paths (symbolic links followed). ``what`` names
    the option in the error (``--out``)."""
    target = Path(path).expanduser().resolve()
    refuse = None
    if target.is_dir():
        refuse = "is a directory"
    elif warehouse is not None and target in (Path(warehouse).expanduser().resolve(),
                                              Path(f"{Path(warehouse).expanduser().resolve()}.wal")):
        refuse = f"is the warehouse {warehouse}"
    elif is_duckdb(target):
        refuse = "is a DuckDB database"
    else:
        for lake in lakes:
            if _within(target, Path(lake).expanduser().resolve()):
                refuse = f"is inside the lake {lake}"
                break
        for source in sources:
            if refuse is None and _within(target, Path(source).expanduser().resolve()):
                refuse = f"is read by the audit ({source})"
    if refuse:
        raise UsageError(f"{what} {path} {refuse}; nothing was written (name another file)")
    return target
