"""The checks of a run that need neither Prefect nor Dask, made before either starts (a bad
spec or source is then one line and exit 2 within a second, not after the cluster is up)."""
from __future__ import annotations

from pathlib import Path

from aequum.engines.core.spec import AuditSpec, SpecError, load_spec
from aequum.engines.registry import ENGINES


def preflight(spec_path: str | Path, engines: list[str] | None = None, warehouse: str | Path | None = None
              ) -> AuditSpec:
    """Everything about a run that can be checked before Prefect and Dask start: the spec
    (engine names and parameters included), that the source opens and has the spec's columns,
    and that the model file loads; that the source is not the ``warehouse``. Raises the user
    error naming the field, file or column."""
    from aequum.engines.core.validation import check_columns
    from aequum.flows.store.guard import UsageError
    from aequum.flows.store.readers import SourceError, open_source, source_files

    spec_file = Path(spec_path).resolve()
    spec = load_spec(spec_file)
    unknown = [n for n in engines or [] if n not in ENGINES]
    if unknown:
        raise SpecError(f"--engines: unknown engine(s) {unknown}; known: {sorted(ENGINES)}")
    if engines == []:
        raise SpecError("--engines: name at least one engine")
    if warehouse is not None:
        home = Path(warehouse).expanduser().resolve()
        if any(f.resolve() in (home, Path(f"{home}.wal")) for f in source_files(spec.source, spec_file.parent)):
            raise UsageError(f"source.path {spec.source.path} is the warehouse {warehouse}: the audit cannot "
                             "read its source from the file it writes (copy the table to another file)")
    with open_source(spec.source, spec_file.parent, batch_rows=1_000, columns=spec.columns()) as stream:
        check_columns(stream.columns, spec)
        if not any(batch.num_rows for batch in stream.batches):  # stops at the first rows
            raise SourceError(f"source {spec.source.path or spec.source.table or spec.source.kind} has no rows "
                              "(a header line only?)")
    check_counterfactual_sources(spec, spec_file.parent)
    check_group_sizes(spec, spec_file.parent, engines or spec.engines.run)
    if spec.model is not None and spec.model.kind != "surrogate":
        from aequum.engines.core.models import build_model

        build_model(spec.model, base_dir=spec_file.parent)
    return spec


def _needs(spec: AuditSpec, names: list[str]) -> tuple[dict[str, dict], dict[str, tuple[int, int]]]:
    """Per engine whose parameters need groups of some size (``min_group_sizes``, e.g. CST's
    k), its needs per unit (attribute or ``a&b``), and the largest need per unit."""
    needs = {n: spec.engines.params(n).min_group_sizes(spec) for n in names
             if hasattr(spec.engines.params(n), "min_group_sizes")}
    wanted: dict[str, tuple[int, int]] = {}
    for need in needs.values():
        for unit, (p, r) in need.items():
            wanted[unit] = (max(p, wanted.get(unit, (0, 0))[0]), max(r, wanted.get(unit, (0, 0))[1]))
    return needs, wanted


def _size_problems(spec: AuditSpec, needs: dict, sizes: dict[str, tuple[int, int]], counted: str) -> dict[str, str]:
    """Per engine whose groups are too small, the first such group said in one line."""
    problems = {}
    for name, need in needs.items():
        for unit, (p_need, r_need) in need.items():
            have_p, have_r = sizes[unit]
            for group, have, want in (("protected", have_p, p_need), ("reference", have_r, r_need)):
                if have < want and name not in problems:
                    field = getattr(spec.engines.params(name), "group_size_field", "")
                    problems[name] = (f"engines.{name}{'.' + field if field else ''} needs at least {want:,} "
                                      f"members in the {group} group of {unit!r}; {counted} {have:,}")
    return problems


def check_group_sizes(spec: AuditSpec, spec_dir: Path, names: list[str]) -> None:
    """Engines whose parameters need groups of some size are checked against the source's
    groups, counted from its protected columns only until every group is large enough (one
    batch of a large source). Rows that staging will quarantine count here:
    :func:`check_staged_group_sizes` checks again once they are gone."""
    from aequum.engines.core.validation import group_sizes
    from aequum.flows.store.readers import open_source

    needs, wanted = _needs(spec, names)
    if not needs or any(p.proxy is not None for p in spec.protected):
        return  # groups a proxy infers exist once staged: check_staged_group_sizes counts them
    units = [unit.split("&") for unit in wanted]
    with open_source(spec.source, spec_dir, batch_rows=200_000,
                     columns=[p.column for p in spec.protected]) as stream:
        sizes = group_sizes(stream.batches, spec, units, wanted)
    problems = _size_problems(spec, needs, sizes, "the source has")
    if problems:
        raise SpecError(next(iter(problems.values())))


def staged_group_problems(spec: AuditSpec, lake_path: str, names: list[str]) -> dict[str, str]:
    """:func:`check_group_sizes` on the staged records (the quarantined rows removed), from
    the lake's group columns: per engine that cannot run on them, why (one line)."""
    import numpy as np
    import pyarrow.dataset as ds

    from aequum.engines.core.data import group_column

    needs, wanted = _needs(spec, names)
    if not needs:
        return {}
    attrs = sorted({a for unit in wanted for a in unit.split("&")})
    files = sorted(str(p) for p in Path(lake_path).rglob("*.parquet"))
    groups = ds.dataset(files, format="parquet").to_table(columns=[group_column(a) for a in attrs])
    sizes = {}
    for unit in wanted:
        cols = [groups[group_column(a)].to_numpy(zero_copy_only=False) for a in unit.split("&")]
        sizes[unit] = (int(np.logical_and.reduce([c == 1 for c in cols]).sum()),
                       int(np.logical_and.reduce([c == 0 for c in cols]).sum()))
    return _size_problems(spec, needs, sizes, "the staged records (without the quarantined rows) have")


def check_counterfactual_sources(spec: AuditSpec, spec_dir: Path) -> None:
    """That every supplied counterfactual table (``scm.counterfactuals``) is there: a file
    exists, a database table or query opens and gives rows (its query checked as the source's)."""
    from aequum.engines.core.spec import CounterfactualTable
    from aequum.flows.store.counterfactuals import CounterfactualError
    from aequum.flows.store.readers import SourceError, open_source, resolve

    tables = None if spec.scm is None else spec.scm.counterfactuals
    if tables is None:
        return
    for key, src in ({spec.protected[0].name: tables} if isinstance(tables, CounterfactualTable) else tables).items():
        where = "scm.counterfactuals" if isinstance(tables, CounterfactualTable) else f"scm.counterfactuals[{key}]"
        try:
            if src.kind in ("duckdb", "postgres"):
                with open_source(src, spec_dir, batch_rows=1_000) as stream:
                    next(iter(stream.batches), None)
            elif src.path is not None and not any(ch in src.path for ch in "*?[") \
                    and not resolve(src.path, spec_dir).is_file():
                raise SourceError(f"file not found: {resolve(src.path, spec_dir)}")
        except SourceError as exc:
            raise CounterfactualError(f"{where}: {exc}") from None


def check_settings(warehouse: str | Path, lake: str | Path | None = None, workers: int | None = None,
                   dask_address: str | None = None, prefect_api: str | None = None) -> None:
    """The command's settings before anything starts: the warehouse's environment variables
    (AEQUUM_WAREHOUSE_WAIT, AEQUUM_DUCKDB_MEMORY_LIMIT), the warehouse and lake paths (folders
    where folders go), ``--workers``, and that a Dask scheduler or Prefect API named answers."""
    import os

    from aequum.flows.store.guard import UsageError, is_duckdb
    from aequum.flows.store.warehouse import settings_wait, _memory

    settings_wait(None)
    _memory(os.environ.get("AEQUUM_DUCKDB_MEMORY_LIMIT", "1GB"))
    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    for what, path, folder in (("--warehouse", warehouse, False), ("--lake", lake, True)):
        if path is None:
            continue
        p = Path(path).expanduser()
        if p.exists() and p.is_dir() != folder:
            raise UsageError(f"{what} {path} is {'a file, not a folder' if folder else 'a folder, not a file'}")
        if not folder and p.is_file() and p.stat().st_size and not is_duckdb(p):
            raise UsageError(f"{what} {path} is not a DuckDB database (an existing file of another kind); "
                             "name a new file or a warehouse")
        above = next((a for a in p.parents if a.exists()), None)
        if above is not None and not above.is_dir():
            raise UsageError(f"{what} {path}: {above} is a file, not a folder")
    if dask_address:
        _answers(dask_address, "--dask-address (AEQUUM_DASK_ADDRESS)", "Dask scheduler")
    if prefect_api:
        _answers(prefect_api, "PREFECT_API_URL", "Prefect API")


def _answers(address: str, what: str, service: str, timeout: float = 5.0) -> None:
    """That something listens at ``address`` (a URL or host:port): a TCP connection within
    ``timeout`` seconds."""
    import socket
    from urllib.parse import urlsplit

    from aequum.flows.store.guard import UsageError

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise UsageError(f"{what}: {address!r} is not an address (host:port or a URL)")
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except OSError as exc:
        raise UsageError(f"{what}: no {service} answers at {address} ({exc.strerror or exc})") from None
