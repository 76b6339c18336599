"""The audit flow: stage the records, build the model, fan the engines out on Dask, write results.

Orchestration only. Staging and all warehouse writes happen in the flow's process (DuckDB has
one writer); engines run as Prefect tasks on a Dask cluster (a LocalCluster by default, or any
scheduler address), and each engine's pieces fan out again on the same cluster. Engine tasks
read the dataset version from the Parquet lake, never from the warehouse file.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pyarrow as pa
from prefect import flow, get_run_logger
from prefect.context import get_run_context
from prefect.exceptions import TerminationSignal

from aequum.engines.core.model_quality import QUALITY
from aequum.engines.core.spec import AuditSpec, load_spec
from aequum.engines.detection import DETECTION
from aequum.engines.registry import get_engine
from aequum.flows.cluster import dask_runner, engine_results, owned_cluster, renew_workers, size_workers
from aequum.flows.engine_tasks import EngineOutcome, engine_task
from aequum.flows.ground_truth import score_run
from aequum.flows.store.group_labels import label_outcomes, write_group_labels
from aequum.flows.store.lake_reading import release_memory
from aequum.flows.model_step import PackedModel, model_readers, prepare_model, supplied_counterfactuals
from aequum.flows.preflight import staged_group_problems
from aequum.flows.progress import following
from aequum.flows import run_control, terminal
from aequum.flows.run_control import INTERRUPTED, drain_workers, flow_api, flow_result, user_failure
from aequum.flows.store.staging import DEFAULT_LAKE, DatasetRef, stage
from aequum.flows.store.versioning import code_version
from aequum.flows.store.warehouse import DEFAULT_WAREHOUSE, Warehouse, WarehouseError


# staged records above which the engines run one at a time, on a cluster the run started each
# on fresh workers when the last one left a worker holding much (renew_workers). Renewals take
# about 4 s each and the new workers import torch again: at 8.4M records renewing after every
# engine saved 0.61 GB (3.70 -> 3.09 GB) in a 10-11 min run; at 0.84M, 0.34 GB (2.54 -> 2.20),
# but the run took 228-258 s against 176-183 s without renewals
RENEW_WORKERS_ROWS = 2_000_000
# engines of a run of at most RENEW_WORKERS_ROWS that may hold the cluster at once: one
# prepares its state (on one worker) while the other's pieces use the rest. Above it, one at a
# time (their memory would add up). At any size the engines that do not read the model run
# while it is fitted
SMALL_RUN_ENGINES = 2


def dask_setup(worker) -> None:
    """Run by Dask in each worker of a cluster that preloads this module (flows.cluster): no
    Prefect API log error on standard error as the run's API stops before its workers."""
    run_control.quiet_api_logging()


# engines whose workers hold least (at 10M records: 1-2 GB a worker, against 2.7-2.9 GB for the
# regression and pricing): on a large run they take their turns first while the model, in its
# own process (about 1 GB), is fitted, so that the model's process is not held beside the
# heaviest engines
LIGHT_ENGINES = ("outcome", "reasons", "geography", "lenders")


def light_first(engines: list[str]) -> list[str]:
    """``engines`` with those of ``LIGHT_ENGINES`` first, each part in its own order."""
    return sorted(engines, key=lambda n: n not in LIGHT_ENGINES)


def new_run_id(spec_name: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{spec_name}-{stamp}-{uuid.uuid4().hex[:6]}"


@flow(name="aequum-audit", log_prints=True)
def audit_flow(spec_path: str, warehouse: str = str(DEFAULT_WAREHOUSE), lake: str = str(DEFAULT_LAKE),
               run_id: str | None = None, engines: list[str] | None = None, check_source: bool = False,
               trust_mtime: bool = False) -> str:
    """Run a full audit of one spec and return its run_id (written to ``audit.runs``).

    The warehouse is opened for writing only for three short steps (record the run, stage the
    dataset, write the results in one transaction), so readers and BI tools are locked out for
    seconds, not for the whole run. A user or configuration error ends the flow run Failed
    with its message (:func:`~aequum.flows.run_control.user_failure`)."""
    from aequum.flows.store.guard import user_errors

    try:
        spec_file = Path(spec_path).resolve()
        spec = load_spec(spec_file)
        run_id = run_id or new_run_id(spec.name)
        names = list(engines or spec.engines.run)
        with Warehouse(warehouse) as wh:
            wh.start_run(run_id, spec.name, spec.digest(), code_version(),
                         spec.run_parameters())
        # the engines' results until they are in the warehouse; a folder left by a process that
        # died is removed by the next staging of the spec (flows.store.staging: orphan .tmp folders)
        spool = Path(lake).resolve() / spec.name / f".results.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        reserve = reserve_space(warehouse)
        try:
            return _audit(spec, spec_file, run_id, names, warehouse, lake, spool, check_source, trust_mtime)
        finally:
            shutil.rmtree(spool, ignore_errors=True)
            reserve.unlink(missing_ok=True)
    except user_errors() as exc:
        return user_failure(exc)
    except (OSError, duckdb.Error) as exc:  # a full disk: one line, the run recorded failed (reserve_space)
        if not disk_full(exc):
            raise
        return user_failure(WarehouseError(f"the disk is full (No space left on device); run {run_id} is "
                                           "recorded failed and nothing of it was kept: free space and run it again"))


RESERVE_BYTES = 16 << 20  # what closing a run as failed writes to the warehouse, with room to spare


def reserve_space(warehouse: str) -> Path:
    """A file of ``RESERVE_BYTES`` beside the warehouse for the run's life: when the disk fills
    (the lake's or the warehouse's writes), it is deleted so that the run can still be recorded
    failed (:func:`record_failure`); without it the run stayed ``running`` until the next
    writer marked it abandoned. Removed when the run ends."""
    path = _reserve_path(warehouse)
    try:
        with open(path, "wb") as fh:
            fh.truncate(0)
            os.posix_fallocate(fh.fileno(), 0, RESERVE_BYTES)
    except OSError:  # a disk already too full for it (or no fallocate): nothing reserved
        path.unlink(missing_ok=True)
    return path


def _reserve_path(warehouse: str) -> Path:
    return Path(f"{Path(warehouse).resolve()}.{os.getpid()}.reserve")


def disk_full(exc: BaseException) -> bool:
    return getattr(exc, "errno", None) == 28 or "No space left on device" in str(exc)


def record_failure(warehouse: str, run_id: str, ref: DatasetRef | None, error: str, status: str = "failed") -> bool:
    """Record the run failed (or abandoned), freeing the run's reserved space (:func:`reserve_space`)
    when the first attempt finds the disk full; whether it could be recorded."""
    for attempt in (1, 2):
        try:
            close_failed_run(warehouse, run_id, ref, error, status)
            return True
        except (duckdb.Error, OSError, WarehouseError):
            if attempt == 2:
                return False
            _reserve_path(warehouse).unlink(missing_ok=True)
    return False


class Background:
    """``fn(*args, **kwargs)`` on a daemon thread of its own (an interrupt of the flow never
    waits for it), in a copy of the caller's context (Prefect's settings and run: without it the
    thread's log lines found no API and started a temporary one of their own): :meth:`result`
    waits for it and returns its value or raises its error."""

    def __init__(self, fn, *args, **kwargs):
        import contextvars
        import threading

        self._value, self._error = None, None

        def run():
            try:
                self._value = fn(*args, **kwargs)
            except BaseException as exc:  # raised in the flow's thread by result()
                self._error = exc

        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(run,), name="aequum-model",
                                        daemon=True)
        self._thread.start()

    def raise_failure(self) -> None:
        """Raise its error now if it has ended with one."""
        if not self._thread.is_alive() and self._error is not None:
            raise self._error

    def result(self):
        self._thread.join()
        self.raise_failure()
        return self._value


def _audit(spec: AuditSpec, spec_file: Path, run_id: str, names: list[str], warehouse: str, lake: str,
           spool: Path, check_source: bool = False, trust_mtime: bool = False) -> str:
    logger = get_run_logger()
    ref: DatasetRef | None = None
    try:
        with Warehouse(warehouse) as wh:
            ref = stage(spec, spec_file.parent, wh, Path(lake), progress=logger.info, check_source=check_source,
                        trust_mtime=trust_mtime)
        release_memory()  # what staging's threads freed (their heaps keep it until trimmed)
        # the source's group counts held the rows staging quarantined: an engine whose groups
        # are too small without them is recorded as failed with the reason, and not run
        unfit = staged_group_problems(spec, ref.lake_path, names)
        size_workers(owned_cluster(), ref.rows_staged, logger.info)
        candidates = [n for n in names if n not in unfit]
        readers = set(model_readers(spec, candidates))
        cfs = supplied_counterfactuals(spec, spec_file.parent, ref)
        own = owned_cluster()
        few = ref.rows_staged <= RENEW_WORKERS_ROWS
        renewing = own is not None and not few  # one engine at a time, on fresh workers when needed
        lock = (f"aequum-engines-{run_id}", SMALL_RUN_ENGINES if few else 1)

        def submit(n: str, model):
            return engine_task.submit(n, spec, ref.lake_path, ref.categories, model, cfs, lock, str(spool))

        address = getattr(get_run_context().task_runner, "address", None)

        def results(futures: list) -> list[EngineOutcome]:  # never waits on a lost worker for ever
            return engine_results(futures, address, logger.warning, own) if address else [f.result() for f in futures]

        def in_turn(engines: list[str], model, outcomes: list[EngineOutcome], between=lambda: None) -> None:
            for n in engines:  # one engine at a time, on fresh workers when the last left one holding much
                if outcomes:
                    renew_workers(own, logger.info)
                outcomes += results([submit(n, model)])
                between()
                # what the flow freed meanwhile (the model's pickle received from its process, an
                # engine's outcome) given back before the next engine's peak, not after the model's engines
                release_memory()

        # the engines that do not read the model start first and run while it is fitted (in a
        # process of its own above OWN_PROCESS_ROWS); each engine's pieces done, elapsed and
        # left: a live line each on a terminal, else log lines
        free = [n for n in candidates if n not in readers]
        with following(address, logger.info):
            if not renewing:
                # a worker keeps a task's result while its future lives: none is kept here
                early = [submit(n, None) for n in free]
                model, quality, problem = prepare_model(spec, spec_file.parent, ref, logger.info, packed=True,
                                                        engines=candidates)
            else:
                fitting = Background(prepare_model, spec, spec_file.parent, ref, logger.info, packed=True,
                                     engines=candidates)
                outcomes: list[EngineOutcome] = []
                # a model that cannot be built ends the run at the next engine
                in_turn(light_first(free), None, outcomes, fitting.raise_failure)
                model, quality, problem = fitting.result()
            release_memory()  # the flow's process waits for the engines from here on
            skipped = [n for n in candidates if problem and getattr(get_engine(n), "uses_model", False)]
            runnable = [n for n in candidates if n in readers and n not in skipped]
            if not renewing:
                outcomes = results(early + [submit(n, model) for n in runnable])
            else:
                in_turn(runnable, model, outcomes)
            outcomes.sort(key=lambda o: names.index(o.engine))  # the run's order, whichever started first
        outcomes += [EngineOutcome(n, "skipped", 0.0, 0, {}, {}, f"not run: {problem}") for n in skipped]
        outcomes += [EngineOutcome(n, "failed", 0.0, 0, {}, {}, f"not run: {why}") for n, why in unfit.items()]
        if run_control.interrupt_signalled():  # (its KeyboardInterrupt swallowed: ending_on_interrupt)
            raise KeyboardInterrupt
    except BaseException as exc:  # an interrupt (flows.run_control) leaves the run abandoned
        # the signal may reach a worker's task (a lost worker) before it reaches this thread
        interrupted = isinstance(exc, (KeyboardInterrupt, TerminationSignal)) or run_control.interrupt_signalled()
        if interrupted:
            run_control.interrupted()  # ended within seconds, however the unwinding goes
        if not (interrupted and run_control.owns_the_ending()):  # else the ending marks it abandoned
            if not record_failure(warehouse, run_id, ref, INTERRUPTED if interrupted else f"{type(exc).__name__}: {exc}",
                                  "abandoned" if interrupted else "failed"):
                logger.error("could not record run %s as failed in %s", run_id, warehouse)
        raise
    extra = {"model_quality": (QUALITY, quality)} if quality is not None else {}
    detection = score_run(spec, spec_file.parent, outcomes, logger.info)  # against the source's truth
    if detection is not None:
        extra["detection"] = (DETECTION, detection)
    rows = sum(n for o in outcomes for n in o.row_counts().values())
    logger.info(f"writing {rows:,} result rows of {len(outcomes)} engine(s) to {warehouse}")
    write_run(warehouse, run_id, outcomes, ref, model, extra)
    for o in outcomes:
        logger.info("engine %s: %s in %.2f s (%d pieces) %s", o.engine, o.status, o.seconds,
                    o.pieces, o.error or o.row_counts())
    return run_id


def close_failed_run(warehouse: str, run_id: str, ref: DatasetRef | None, error: str,
                     status: str = "failed") -> None:
    """Record a run as failed (or abandoned), with none of its rows left from an earlier attempt."""
    with Warehouse(warehouse) as wh, wh.transaction():
        wh.purge_run(run_id)
        wh.finish_run(run_id, status, ref.version if ref else None,
                      ref.fingerprint if ref else None, None, error)


def write_run(warehouse: str, run_id: str, outcomes: list[EngineOutcome], ref: DatasetRef, model,
              extra: dict[str, tuple[pa.Schema, pa.Table]] | None = None) -> None:
    """All result tables, engine statuses and the run's closing record in one transaction that
    first removes every row an earlier attempt of the run left. If the write fails (a full
    disk), nothing of it stays, the run is recorded as failed and the error names the file:
    the run is recorded failed, with none of its rows, before the results are written (a small
    write, while the disk still takes one), so that a disk that then cannot take even the run
    record leaves it failed, not running."""
    from aequum.engines.core.models import model_fingerprint

    failed = [o.engine for o in outcomes if o.status != "succeeded"]
    status = "succeeded" if not failed else ("failed" if len(failed) == len(outcomes) else "partial")
    try:
        with Warehouse(warehouse) as wh:
            with wh.transaction():
                wh.purge_run(run_id)
                wh.finish_run(run_id, "failed", ref.version, ref.fingerprint, None,
                              "writing the results did not complete")
            extra, outcomes = label_outcomes(wh, run_id, extra or {}, outcomes)  # group_label beside the codes
            for t, (schema, _) in extra.items():
                wh.ensure_result_table(t, schema)
            for o in outcomes:
                for t, schema in o.schemas.items():
                    wh.ensure_result_table(t, schema)
            with wh.one_thread(), wh.transaction():  # (fewer CPU-s: Warehouse.one_thread)
                wh.purge_run(run_id)
                for t, (_, tbl) in extra.items():
                    wh.insert_run_rows(t, run_id, tbl)
                for o in outcomes:
                    counts = {t: wh.insert_run_rows(t, run_id, o.result(t)) for t in o.row_counts()}
                    wh.record_engine(run_id, o.engine, o.status, round(o.seconds, 3), o.pieces, counts, o.error,
                                     o.started)
                wh.finish_run(run_id, status, ref.version, ref.fingerprint,
                              None if model is None else model.fingerprint if isinstance(model, PackedModel)
                              else model_fingerprint(model),
                              None if not failed else f"engine(s) failed: {', '.join(failed)}")
                write_group_labels(wh, run_id)
            wh.create_views()
    except (duckdb.Error, OSError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        # (a file that cannot take even the run record: the error below says so)
        record_failure(warehouse, run_id, ref, f"writing the results failed: {reason}")
        raise WarehouseError(f"could not write the results of run {run_id} to {warehouse}: {reason}; "
                             "nothing of the run was written and it is recorded as failed (if the "
                             "file could take that)") from None


def _say(message: str) -> None:
    print(f"aequum: {message}", file=sys.stderr, flush=True)


def run_audit(spec_path: str, warehouse: str = str(DEFAULT_WAREHOUSE), lake: str = str(DEFAULT_LAKE),
              run_id: str | None = None, engines: list[str] | None = None,
              dask_address: str | None = None, workers: int | None = None, server=None,
              check_source: bool = False, dashboard: bool | None = None, trust_mtime: bool = False) -> str:
    """Run ``audit_flow`` on a Dask cluster (the CLI's and the deployment's entry point).
    ``server``: a temporary Prefect API already starting (see :func:`flow_api`); ``check_source``:
    read and fingerprint a source even when its files look unchanged, ``trust_mtime``: reuse a staged
    source whose files have their sizes and modification times without hashing them (see ``stage``); ``dashboard``:
    serve the Dask dashboard of a LocalCluster, on loopback (default ``AEQUUM_DASHBOARD``)."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    from aequum.flows.prefect_api import TemporaryAPI

    # the temporary API starts first (when flow_api would start one): its start, seconds,
    # overlaps the cluster's
    started = server is None and not PREFECT_API_URL.value() and PREFECT_SERVER_EPHEMERAL_ENABLED.value()
    server = TemporaryAPI() if started else server
    try:
        with dask_runner(dask_address, workers, dashboard, say=_say) as runner, flow_api(server):
            try:  # a user error ends the flow run Failed with its message, and is raised here
                return flow_result(audit_flow.with_options(task_runner=runner)(
                    spec_path=spec_path, warehouse=warehouse, lake=lake, run_id=run_id, engines=engines,
                    check_source=check_source, trust_mtime=trust_mtime, return_state=True))
            finally:
                # the run is over: what its processes print as they close (a Dask heartbeat's
                # CommClosedError) goes to the command's log file, not to the terminal
                terminal.quiet()
                if not run_control.interrupt_signalled():
                    with suppress(OSError):  # a cluster that is gone has nothing left to send
                        drain_workers(runner.address)
    finally:
        if started:  # (already stopped by flow_api unless the cluster failed to start)
            server.stop()


@flow(name="aequum-ingest", log_prints=True)
def ingest_flow(spec_path: str, warehouse: str = str(DEFAULT_WAREHOUSE),
                lake: str = str(DEFAULT_LAKE)) -> dict:
    """Stage a spec's source (validate, quarantine, version) without running engines."""
    spec_file = Path(spec_path).resolve()
    spec = load_spec(spec_file)
    with Warehouse(warehouse) as wh:
        ref = stage(spec, spec_file.parent, wh, Path(lake), progress=get_run_logger().info)
    return json.loads(json.dumps(ref.__dict__))
