"""One engine of a run as a Prefect task (:func:`engine_task`): its state prepared from the
staged columns it declares, its pieces fanned out on the run's Dask cluster (a large state
mapped from files by every worker, :mod:`flows.store.shared_state`; a small one broadcast; one
too large to broadcast, in a run without a results folder, run in place), its results handed
back as an :class:`EngineOutcome` (spooled to Parquet files when the run asks)."""
from __future__ import annotations

import ctypes
import os
import time
import traceback
import uuid
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from aequum.engines.core.data import AuditData
from aequum.engines.core.engine import (Section, assemble, conform, declared_columns, declared_rows, run_piece,
                                        run_rounds, spill, spreading)
from aequum.engines.core.spec import AuditSpec
from aequum.engines.registry import engine_params, get_engine
from aequum.flows.store.lake_reading import load_lake, release_memory
from aequum.flows.cluster import worker_addresses
from aequum.flows.model_step import unpacked
from aequum.flows.store.shared_state import SHARE_ABOVE, SharedState, forget, share


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_HEAP_SET = False


def heap_for_arrays() -> None:
    """Give this process glibc's own allocation thresholds back where Dask's nanny took them
    (once a process). The nanny starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536``
    (``distributed.nanny.pre-spawn-environ``), and setting it turns off glibc's sliding mmap
    threshold: every array above 128 KiB is then a fresh ``mmap`` whose pages the kernel faults
    in and zeroes, and its ``munmap`` on free. The regression's pieces at 1M HMDA records made
    9.6M page faults that way, 14 s of system time beside 17 s of their own (0.1M faults and
    0.9 s without it), so a round on 2 workers took no less than the same pieces in one process.
    Set here as glibc's sliding threshold would end: blocks to 32 MiB from the heap, its top
    kept to 64 MiB; :func:`~aequum.flows.store.lake_reading.release_memory` still gives back
    what a step freed. A process without the variable keeps glibc's defaults."""
    global _HEAP_SET
    if _HEAP_SET or "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        return
    _HEAP_SET = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 32 * 2 ** 20)
        libc.mallopt(_M_TRIM_THRESHOLD, 64 * 2 ** 20)
    except (OSError, AttributeError):  # not glibc
        pass


def _run_piece_here(name: str, state, piece, keep, spread: bool = False):
    """:func:`run_piece` of engine ``name`` as a worker's task (with :func:`heap_for_arrays`);
    with ``spread``, the piece may spread its own work over the cluster's workers
    (``engines.core.engine.spreading``: this task's thread then leaves the worker's pool while
    it waits for that work). The engine goes by name, not as an object: the scheduler unpickles
    every task it is given, and an engine object made it import the engine's module (CEC's and
    PBA's import torch: 2-3 CPU s and 0.3 GB in the process that runs a LocalCluster's
    scheduler, the flow's)."""
    heap_for_arrays()
    engine = get_engine(name)
    if isinstance(state, SharedState):
        state = state.load()
    if not spread:
        return run_piece(engine, state, piece, keep)
    from distributed import worker_client

    with worker_client() as client, spreading(client):
        return run_piece(engine, state, piece, keep)


@dataclass
class EngineOutcome:
    """One engine's run: its result tables in ``tables``, or, once :meth:`spool` has written
    them to Parquet files (``files``, with their ``rows``), there: the worker that ran the
    engine then hands the flow a few paths instead of its results (CST's evidence: 7M rows at
    1M HMDA records, 12.5M at 10M), which the flow held all at once, as pickled bytes and as
    tables, until the end of the run (1.9 GB of its 2.5 GB peak at 1M)."""

    engine: str
    status: str
    seconds: float
    pieces: int
    tables: dict[str, pa.Table]
    schemas: dict[str, pa.Schema]
    error: str | None = None
    files: dict[str, list[str]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    started: float | None = None  # when it held its slot of the run's lock (Unix seconds)

    def spool(self, folder: Path) -> EngineOutcome:
        """The outcome with its tables in memory written to ``folder/<engine>/<table>.parquet``
        (a streamed table's pieces are already in files: ``files``)."""
        if not self.tables:
            return self
        where = Path(folder) / self.engine
        where.mkdir(parents=True, exist_ok=True)
        files, rows = dict(self.files), dict(self.rows)
        for name, table in self.tables.items():
            files[name] = [str(where / f"{name}.parquet")]
            pq.write_table(table, files[name][0])
            rows[name] = table.num_rows
        return replace(self, tables={}, files=files, rows=rows)

    def row_counts(self) -> dict[str, int]:
        return {**{t: v.num_rows for t, v in self.tables.items()}, **self.rows}

    def results(self) -> Mapping[str, pa.Table]:
        """Its tables by name, each read from its files when asked for (if spooled)."""
        return self.tables if not self.files else _SpooledTables(self.tables, self.files)

    def result(self, name: str) -> pa.Table | list[str]:
        """A table to insert: in memory, or the paths of its Parquet files (rows in file order)."""
        return self.files[name] if name in self.files else self.tables[name]


class _SpooledTables(Mapping):
    def __init__(self, tables: dict[str, pa.Table], files: dict[str, list[str]]):
        self.tables, self.files = tables, files

    def __getitem__(self, name: str) -> pa.Table:
        if name in self.tables:
            return self.tables[name]
        return pa.concat_tables([pq.read_table(f) for f in self.files[name]])

    def __contains__(self, name: object) -> bool:  # without reading the table
        return name in self.tables or name in self.files

    def column(self, name: str, column: str) -> pa.ChunkedArray:
        """One column of a table, only that column read from its files."""
        if name in self.tables:
            return self.tables[name][column]
        return pa.chunked_array([c for f in self.files[name] for c in pq.read_table(f, columns=[column])[column].chunks],
                                pq.read_schema(self.files[name][0]).field(column).type)

    def __iter__(self):
        return iter({**self.tables, **self.files})

    def __len__(self) -> int:
        return len({**self.tables, **self.files})


class Progress:
    """An engine's pieces done of its total (``None``: still preparing), with the seconds since
    it started: on a Dask worker sent to the run's flow as events (``flows.progress.send``, at
    most every ``SEND_EVERY`` seconds, and the end), which shows them; elsewhere said as
    ``engine NAME: i/n pieces done, … elapsed, about … left`` lines, at most every ``every``
    seconds and at the end (``flows.progress.Board``)."""

    SEND_EVERY = 0.5

    def __init__(self, name: str, say, every: float = 10.0):
        from aequum.flows.progress import Board

        self.name, self.t0, self.sent = f"engine {name}", time.perf_counter(), -1e9
        self.board = Board(say, every=every)

    def __call__(self, done: int, total: int | None) -> None:
        from aequum.flows.progress import send

        now = time.perf_counter()
        if total is not None and done < total and now - self.sent < self.SEND_EVERY:
            return
        if send(self.name, done, total, now - self.t0):
            self.sent = now
        else:  # not on a Dask worker: said here (the board spaces its lines)
            self.sent = -1e9
            self.board.update(self.name, done, total, now - self.t0)


BROADCAST_LIMIT = 2 * 2 ** 30  # CST at 1M HMDA rows: 0.85 GB (broadcast); at 10M several GB


def state_bytes(obj: Any, depth: int = 0, seen: set[int] | None = None) -> int:
    """The array bytes an engine's state holds (numpy and Arrow, through dataclasses, lists,
    tuples and dicts), each array once however many parts of the state share it: a state above
    ``BROADCAST_LIMIT`` and no results folder to share it through (``SHARE_ABOVE``) runs its
    pieces in the task that prepared it instead of being copied to every worker (CST's state
    of 10M HMDA rows, several GB, failed Dask's broadcast and doubled the audit's memory)."""
    seen = set() if seen is None else seen
    if isinstance(obj, (np.ndarray, pa.Table, pa.Array, pa.ChunkedArray)):
        if id(obj) in seen:
            return 0
        seen.add(id(obj))
        return obj.nbytes
    if depth > 6:
        return 0
    if is_dataclass(obj) and not isinstance(obj, type):
        return sum(state_bytes(getattr(obj, f.name), depth + 1, seen) for f in fields(obj))
    if isinstance(obj, (list, tuple)):
        return sum(state_bytes(v, depth + 1, seen) for v in obj)
    if isinstance(obj, dict):
        return sum(state_bytes(v, depth + 1, seen) for v in obj.values())
    return 0


def run_engine_pieces(name: str, spec: AuditSpec, lake_path: str, categories: dict, model: Any,
                      counterfactuals: dict[str, pa.Table] | None, client=None, say=None,
                      lock: tuple[str, int] | None = None, spool: str | None = None) -> EngineOutcome:
    """Run one engine over a staged dataset version; pieces fan out on ``client`` if given.
    ``say`` receives the pieces' progress. With ``lock`` (a name on ``client``'s cluster and
    how many engines may hold it at once) the engine runs while holding one of its slots: with
    one slot the engines of one run run one at a time, each fanning its pieces out over every
    worker, so that the memory of one engine (the records it reads, the arrays built from
    them, its state on every worker, its results: 4-5 GB for CST or CEC at 10M HMDA records)
    is never needed next to another's; with two (a small run), one engine prepares its state
    on one worker while another's pieces use the rest. Its seconds count from when it holds
    its slot. With ``spool`` (a folder) the results are written there as Parquet
    before the lock is let go (:meth:`EngineOutcome.spool`)."""
    heap_for_arrays()
    engine = get_engine(name)
    params = engine_params(spec, name)
    progress = Progress(name, say or (lambda _message: None))
    # a streamed table's rows go to files where each piece ran (engines.core.engine)
    keep = SectionFiles(str(Path(spool) / name / "sections")) if spool is not None else None

    # a large state goes to the workers as files they map (flows.store.shared_state), when the run
    # has a folder for them; else broadcast, or, above BROADCAST_LIMIT, its pieces run here
    shared = Path(spool) / name / "shared" if spool is not None and client is not None else None

    def run_pieces(st, pieces):
        big = state_bytes(st)
        if client is None or len(pieces) < 2 or (big > BROADCAST_LIMIT and shared is None):
            parts = []
            for p in pieces:
                parts.append(run_piece(engine, st, p, keep))
                progress(len(parts), len(pieces))
            return parts
        from distributed import as_completed

        if shared is not None and big > SHARE_ABOVE:
            _, given = share(st, shared)  # (nothing written for the state loaded from there)
        else:
            # the state as one object under a key of its own: a dict scattered as it is would put
            # each of its values under its own name ("params"), where the next engine's or round's
            # state of the same names meets the copies still being let go. Scattered from the
            # worker task that prepared it, Dask keeps this very object under the key on that
            # worker (no second copy there: tests/test_engine_broadcast.py) and sends copies to
            # the others
            [given] = client.scatter([st], broadcast=True, hash=False)
        # a round of fewer pieces than workers: a piece that can (``spreads``) uses the idle ones
        spread = getattr(engine, "spreads", False) and len(pieces) < len(worker_addresses(client))
        futures = {client.submit(_run_piece_here, name, given, p, keep, spread, pure=False): i
                   for i, p in enumerate(pieces)}
        parts = [None] * len(pieces)  # in piece order, whatever order they finish in
        # each piece's tables come here as it finishes and its future is let go at once: the
        # worker that ran it does not keep them until the last piece is done (CST at 10M
        # records: ~0.3 GB per piece), and the state's copies go when the pieces are done
        for done, (future, part) in enumerate(as_completed(futures, with_results=True), start=1):
            parts[futures.pop(future)] = part
            del future, part
            progress(done, len(pieces))
        del given
        return parts

    with _holding(client, lock):
        t0 = progress.t0 = time.perf_counter()
        started = time.time()
        progress(0, None)  # preparing its state
        state = _prepare(engine, params, spec, lake_path, categories, model, counterfactuals)
        state = spill(engine, state, str(Path(spool) / name / "state") if spool is not None else None)
        if shared is not None and state_bytes(state) > SHARE_ABOVE:
            state, _ = share(state, shared)  # this process too keeps the mapped copy only
        release_memory()  # the records read are gone; the state is what the pieces need
        try:
            state, parts, n_pieces, sections = run_rounds(engine, state, run_pieces)
            out = engine.combine(state, parts)
        finally:
            if shared is not None and shared.exists():  # every process lets its mapped copy go
                forget()
                client.run(forget)
        del state, parts
        tables = {t: conform(out[t], schema, t) for t, schema in engine.tables.items() if t not in sections}
        del out
        files, rows = {}, {}
        for t, found in sections.items():
            if keep is None or not found:
                tables[t] = assemble(found, engine.tables[t])
            else:
                files[t], rows[t] = [s.path for s in found], sum(s.rows for s in found)
        outcome = EngineOutcome(name, "succeeded", time.perf_counter() - t0, n_pieces, tables, dict(engine.tables),
                                files=files, rows=rows, started=started)
        del tables
        if spool is not None:
            outcome = outcome.spool(Path(spool))
        release_memory()
    return outcome


@dataclass(frozen=True)
class SectionFiles:
    """Writes each section of a streamed table to its own Parquet file under ``folder``, on the
    worker that ran the piece, and hands back the section without its rows."""

    folder: str

    def __call__(self, section: Section) -> Section:
        where = Path(self.folder) / section.name
        where.mkdir(parents=True, exist_ok=True)
        path = str(where / f"{uuid.uuid4().hex}.parquet")
        pq.write_table(section.table, path)
        return replace(section, table=None, path=path)


@contextmanager
def _holding(client, lock: tuple[str, int] | None):
    if client is None or lock is None:
        yield
        return
    from distributed import Lock, Semaphore

    name, slots = lock
    # on the cluster of the client or worker this runs in
    with (Lock(name) if slots == 1 else Semaphore(max_leases=slots, name=name)):
        yield


def _prepare(engine, params, spec: AuditSpec, lake_path: str, categories: dict, model: Any,
             counterfactuals: dict[str, pa.Table] | None):
    """The engine's state from the staged columns and records it declares (read here and held
    by the engine's data only, so that a column the engine lets go is freed at once and the
    rest when the state is ready)."""
    # no name here holds the records: the engine's data alone does
    return engine.prepare(AuditData(spec, load_lake(lake_path, declared_columns(engine, spec, params),
                                                    getattr(engine, "row_order", True),
                                                    declared_rows(engine, spec, params)),
                                    categories, unpacked(model), counterfactuals), params)


@task(name="engine", cache_policy=NO_CACHE, retries=0)
def engine_task(name: str, spec: AuditSpec, lake_path: str, categories: dict, model: Any,
                counterfactuals: dict[str, pa.Table] | None, lock: tuple[str, int] | None = None,
                spool: str | None = None) -> EngineOutcome:
    """One engine as a Prefect task; failures come back as a failed outcome, not an exception.
    ``lock``, ``spool``: see :func:`run_engine_pieces`."""
    from distributed import get_worker, worker_client

    t0 = time.perf_counter()
    try:
        say = get_run_logger().info
        try:
            get_worker()
        except ValueError:  # not on a Dask worker (another task runner): run the pieces here
            return run_engine_pieces(name, spec, lake_path, categories, model, counterfactuals, say=say,
                                     spool=spool)
        # worker_client secedes this task's thread while it waits for its pieces, so the
        # pieces can run on the same workers (no deadlock when every thread holds an engine)
        with worker_client() as client:
            return run_engine_pieces(name, spec, lake_path, categories, model, counterfactuals, client, say, lock,
                                     spool)
    except Exception as exc:  # an engine failure is recorded, the other engines still land
        detail = f"{type(exc).__name__}: {exc}"
        get_run_logger().error("engine %s failed: %s\n%s", name, detail, traceback.format_exc())
        return EngineOutcome(name, "failed", time.perf_counter() - t0, 0, {}, {}, detail)
