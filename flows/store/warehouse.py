"""The DuckDB warehouse: a thin layer over the SQL files in ``sql/`` (DESIGN, "Warehouse contract").

SQL text comes only from ``sql/*.sql``; values are bound as named parameters. The only
identifiers ever placed in SQL are (a) engine-declared result table names, checked against a
strict pattern, (b) staged-table names derived from a hex digest, and (c) user column / table
names, always through :func:`quote_ident`.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

import duckdb
import pyarrow as pa

from aequum.flows.store.guard import check_run_id, is_duckdb
from aequum.flows.store.paths import DEFAULT_WAREHOUSE

SQL_DIR = Path(__file__).resolve().parents[2] / "sql"
_TABLE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_VERSION = re.compile(r"^[0-9a-f]{16}$")
_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
# Views that are the union of per-engine parts: sql/views/<name>.sql creates the empty view
# (its column contract), sql/views/<name>_<engine>.sql one part each (see findings.sql).
UNION_VIEWS = ("findings", "input_strength")
_VIEWS_MARK = "aequum views "  # audit.runs' comment: the digest of what its views were made from


class WarehouseError(RuntimeError):
    """A warehouse operation that cannot proceed (message says which table or run)."""


def _memory(limit: str) -> str:
    """A DuckDB memory size such as 2GB or 512MB (checked, since SET takes no parameters)."""
    if not re.fullmatch(r"\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", limit.strip()):
        raise WarehouseError(f"DuckDB memory limit must look like 2GB or 512MB, got {limit!r}")
    return limit.strip()


def settings_wait(wait: float | None) -> float:
    """Seconds to wait for a busy warehouse: ``wait``, else ``$AEQUUM_WAREHOUSE_WAIT`` (checked),
    else 120."""
    if wait is not None:
        return float(wait)
    text = os.environ.get("AEQUUM_WAREHOUSE_WAIT", "120")
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise WarehouseError(f"AEQUUM_WAREHOUSE_WAIT must be a number of seconds, got {text!r}")
    return seconds


def quote_ident(name: str) -> str:
    """Quote one SQL identifier for DuckDB/Postgres (doubling embedded quotes); reject NUL."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ValueError(f"invalid identifier {name!r}")
    return '"' + name.replace('"', '""') + '"'


def quote_qualified(name: str) -> str:
    """Quote ``schema.table`` (split on the first dot when the name has one) or ``table``."""
    parts = name.split(".", 1) if "." in name else [name]
    return ".".join(quote_ident(p) for p in parts)


def load_sql(name: str) -> list[str]:
    """The statements of ``sql/<name>.sql``, comments kept, split on statement ends."""
    text = (SQL_DIR / f"{name}.sql").read_text(encoding="utf-8")
    return [s.strip() for s in re.split(r";\s*(?:\n|$)", text) if _has_code(s)]


def _has_code(stmt: str) -> bool:
    return any(line.strip() and not line.strip().startswith("--") for line in stmt.splitlines())


def staged_table(version: str) -> str:
    """The staging table of a dataset version (the version is our own hex digest)."""
    if not _VERSION.match(version):
        raise ValueError(f"invalid dataset version {version!r}")
    return f"staging.d_{version}"


def check_table_name(name: str) -> str:
    if not _TABLE_NAME.match(name):
        raise ValueError(f"engine table name {name!r} must match {_TABLE_NAME.pattern}")
    return name


# Storage format of new warehouse files: readable by every DuckDB release since 1.0 (the DuckDB
# command line, BI drivers), not only by the DuckDB that aequum runs on (2.x writes format 69,
# which 1.x cannot open). An existing file keeps the format it was created with.
STORAGE_VERSION = "v1.0.0"
_LOCKED = "Could not set lock on file"


def _process_start(pid: int) -> float | None:
    """The start time of process ``pid`` (None when no such process): a pid plus its start
    time names one process, even after the pid is reused."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def process_alive(pid: int, started: float | None) -> bool:
    now = _process_start(pid)
    return now is not None and (started is None or abs(now - started) < 1.0)


def this_process() -> dict:
    """Who owns a run or a temporary staging object: host, pid and the pid's start time."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "pid_started": _process_start(pid)}


def lake_roots(wh: "Warehouse") -> list[Path]:
    """The lakes the warehouse's dataset versions were staged to (a version's copy is
    ``<lake>/<spec>/<version>``)."""
    if "datasets" not in wh.table_names():
        return []
    paths = wh.con.execute("SELECT DISTINCT lake_path FROM audit.datasets WHERE lake_path IS NOT NULL").fetchall()
    return sorted({Path(p).parent.parent for (p,) in paths if Path(p).is_absolute()})


def source_paths(wh: "Warehouse") -> list[Path]:
    """The files the warehouse's dataset versions were read from (``audit.datasets.source_files``)."""
    if "datasets" not in wh.table_names():
        return []
    try:
        rows = wh.con.execute("SELECT DISTINCT source_files FROM audit.datasets WHERE source_files IS NOT NULL").fetchall()
    except duckdb.BinderException:  # a warehouse written before the column existed
        return []
    return sorted({Path(p) for (files,) in rows for p in json.loads(files)})


# the write connections of this process, one at a time: two threads writing at once (an
# interrupted run's ending and the flow's own failure path, both recreating the views) failed
# with "Catalog write-write conflict on alter"; reentrant for one thread's nested opens
_WRITER = threading.RLock()


class Warehouse:
    """A DuckDB warehouse file with the ``audit`` and ``staging`` schemas.

    DuckDB lets one process write a file, or any number read it. aequum therefore holds a write
    connection only for short steps (recording a run, staging a dataset, writing a run's results
    in one transaction) and every opener waits up to ``wait`` seconds for the file to be free
    (default ``$AEQUUM_WAREHOUSE_WAIT`` or 120 s) before failing with a message naming the
    process that holds it. BI tools should open the file read-only and not keep it open.
    """

    def __init__(self, path: str | Path = DEFAULT_WAREHOUSE, read_only: bool = False,
                 memory_limit: str | None = None, wait: float | None = None,
                 notify: Callable[[str], None] | None = None):
        """Open (creating when needed) a warehouse file.

        ``memory_limit`` caps DuckDB's buffer pool (default ``$AEQUUM_DUCKDB_MEMORY_LIMIT`` or
        1GB) so staging ten million rows spills to disk instead of growing with the data.
        A write connection first closes the records of runs whose process is gone
        (``abandoned``) and drops staging tables such a process left behind. ``notify`` is
        told once when the file is busy and the open starts waiting.
        """
        self.path = Path(path)
        self.read_only = read_only
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.exists():
            raise WarehouseError(f"no warehouse at {self.path}")
        if self.path.is_file() and self.path.stat().st_size and not is_duckdb(self.path):
            raise WarehouseError(f"{self.path} is not a DuckDB database (an existing file of another kind); "
                                 "name a new file or a warehouse")
        limit = _memory(memory_limit or os.environ.get("AEQUUM_DUCKDB_MEMORY_LIMIT", "1GB"))
        wait = settings_wait(wait)
        self._writer = False
        if not read_only:  # one writer of this process at a time (see _WRITER)
            if not _WRITER.acquire(timeout=max(wait, 0.001)):
                raise WarehouseError(f"warehouse {self.path} is being written by another thread of this process")
            self._writer = True
        try:
            self.con = self._connect(read_only, limit, wait, notify)
            if not read_only:
                self.run_sql("schema")
                self.recover()
                if not self._views_current():  # seconds of DDL on every write open otherwise
                    from aequum.flows.store.group_labels import label_older_runs

                    with self.transaction():  # what the findings' sentences read
                        label_older_runs(self)
                    self.create_views()
        except BaseException:
            self._release()
            raise

    def _connect(self, read_only: bool, limit: str, wait: float,
                 notify: Callable[[str], None] | None) -> duckdb.DuckDBPyConnection:
        config = {"memory_limit": limit}
        if not read_only:
            config["storage_compatibility_version"] = STORAGE_VERSION
        deadline = time.monotonic() + wait
        delay = 0.05
        while True:
            try:
                con = duckdb.connect(str(self.path), read_only=read_only, config=config)
                con.execute("SET enable_progress_bar = false")  # the flow reports its own progress
                return con
            except duckdb.Error as exc:
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                if _LOCKED not in message:
                    raise WarehouseError(f"cannot open warehouse {self.path}: {message}") from None
                holder = re.search(r"held in (.*?)\.(?: |$)", message)
                if notify is not None and delay == 0.05 and wait > 0:
                    notify(f"warehouse {self.path} is in use"
                           f"{' by ' + holder.group(1) if holder else ''}; waiting up to {wait:g} s")
                if time.monotonic() >= deadline:
                    raise WarehouseError(
                        f"warehouse {self.path} is in use by another process"
                        f"{' (' + holder.group(1) + ')' if holder else ''} and stayed busy for "
                        f"{wait:g} s; retry when it is done (AEQUUM_WAREHOUSE_WAIT sets the wait)") from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    @property
    def storage_version(self) -> str | None:
        """The file's DuckDB storage format (e.g. ``v1.0.0+``)."""
        rows = self.con.execute("SELECT tags['storage_version'] FROM duckdb_databases() "
                                "WHERE database_name = current_database()").fetchall()
        return rows[0][0] if rows else None

    def recover(self) -> dict[str, list[str]]:
        """Close what dead processes left open: ``running`` runs of this host whose process is
        gone become ``abandoned``; ``staging.incoming_*`` tables of dead processes are dropped.
        (A run of another host cannot be checked from here and is left as it is.)"""
        me = this_process()
        abandoned = [r[0] for r in self.con.execute(
            "SELECT run_id, pid, pid_started FROM audit.runs WHERE status = 'running' AND host = $host",
            {"host": me["host"]}).fetchall() if r[1] is not None and not process_alive(r[1], r[2])]
        self._abandon(abandoned, "the process running it ended before it finished")
        orphans = []
        for (name,) in self.con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'staging' "
                "AND table_name LIKE 'incoming_%'").fetchall():
            owner = re.match(r"incoming_(\d+)_(\d+)_[0-9a-f]+$", name)
            if owner is None or not process_alive(int(owner.group(1)), int(owner.group(2)) / 1000):
                self.con.execute(f"DROP TABLE IF EXISTS staging.{quote_ident(name)}")
                orphans.append(name)
        return {"abandoned": abandoned, "orphans": orphans}

    def abandon_own_runs(self, reason: str) -> list[str]:
        """Mark the runs of this process (host, pid and the pid's start time) that are running,
        or that it recorded failed while it was being interrupted, ``abandoned`` (an interrupted
        audit), none of their rows kept."""
        me = this_process()
        own = [r[0] for r in self.con.execute(
            "SELECT run_id, pid_started FROM audit.runs WHERE status IN ('running', 'failed') "
            "AND host = $host AND pid = $pid", {"host": me["host"], "pid": me["pid"]}).fetchall()
            if r[1] is None or me["pid_started"] is None or abs(r[1] - me["pid_started"]) < 1.0]
        self._abandon(own, reason)
        return own

    def _abandon(self, run_ids: list[str], reason: str) -> None:
        for run_id in run_ids:
            with self.transaction():
                self.purge_run(run_id)
                self.run_sql("run_finish", {"run_id": run_id, "status": "abandoned", "dataset_version": None,
                                            "source_fingerprint": None, "model_fingerprint": None,
                                            "error": reason})

    def create_views(self) -> list[str]:
        """(Re)create the views of ``sql/views`` whose tables exist (engine tables appear with
        the engine's first run); return the names of the views created."""
        made = []
        for view in sorted((SQL_DIR / "views").glob("*.sql")):
            try:
                self.run_sql(f"views/{view.stem}")
                made.append(view.stem)
            except (duckdb.CatalogException, duckdb.BinderException):
                continue  # a table (or a newer column) the view reads has not been written yet
        for union in UNION_VIEWS:
            self._union_view(union)
        self.con.execute(f"COMMENT ON TABLE audit.runs IS '{_VIEWS_MARK}{self._view_digest()}'")
        return made

    def _view_digest(self) -> str:
        """What the views depend on: the text of ``sql/views`` and the ranked unions, the audit
        schema's tables and columns (a view is made only when its tables and columns exist) and
        the views there now."""
        h = hashlib.sha256()
        for f in sorted([*(SQL_DIR / "views").glob("*.sql"), *SQL_DIR.glob("*_ranked.sql")]):
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
        for row in self.con.execute(
                "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE schema_name = 'audit' "
                "AND NOT internal ORDER BY table_name, column_index").fetchall():
            h.update("\t".join(map(str, row)).encode() + b"\n")
        return h.hexdigest()[:32]

    def _views_current(self) -> bool:
        """Whether the views were made (:meth:`create_views`) from the files, tables and views
        there are now (the digest it left on ``audit.runs``)."""
        rows = self.con.execute("SELECT comment FROM duckdb_tables() WHERE schema_name = 'audit' "
                                "AND table_name = 'runs'").fetchall()
        return bool(rows) and rows[0][0] == f"{_VIEWS_MARK}{self._view_digest()}"

    def _union_view(self, name: str) -> None:
        """Replace ``audit.<name>`` (created empty by ``sql/views/<name>.sql``) by the UNION ALL
        BY NAME of the part views ``audit.<name>_<engine>`` that exist (their names come from
        the catalog and pass the table-name pattern)."""
        parts = [r[0] for r in self.con.execute(
            "SELECT view_name FROM duckdb_views() WHERE schema_name = 'audit' AND NOT internal "
            "AND starts_with(view_name, $prefix) ORDER BY view_name", {"prefix": f"{name}_"}).fetchall()]
        if parts:
            body = " UNION ALL BY NAME ".join(f"SELECT * FROM audit.{quote_ident(check_table_name(p))}"
                                              for p in parts)
            # a union ranked by sql/<name>_ranked.sql is written to all_<name> and ranked from there
            ranked = (SQL_DIR / f"{name}_ranked.sql").exists()
            target = f"all_{name}" if ranked else name
            self.con.execute(f"CREATE OR REPLACE VIEW audit.{quote_ident(target)} AS {body}")
            if ranked:
                self.run_sql(f"{name}_ranked")

    def close(self) -> None:
        try:
            self.con.close()
        finally:
            self._release()

    def _release(self) -> None:
        if self._writer:
            self._writer = False
            _WRITER.release()

    def __enter__(self) -> "Warehouse":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- SQL files ------------------------------------------------------------------------
    def run_sql(self, name: str, params: Mapping[str, object] | None = None,
                con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
        con = con or self.con
        params = dict(params or {})
        for stmt in load_sql(name):
            used = {p: params[p] for p in _PARAM.findall(stmt) if p in params}
            missing = set(_PARAM.findall(stmt)) - set(used)
            if missing:
                raise WarehouseError(f"sql/{name}.sql needs parameter(s) {sorted(missing)}")
            con.execute(stmt, used or None)
        return con

    def query(self, name: str, params: Mapping[str, object] | None = None) -> pa.Table:
        """Run a one-statement SQL file and return its result as Arrow."""
        (stmt,) = load_sql(name)
        params = dict(params or {})
        return self.con.sql(stmt, params={p: params[p] for p in _PARAM.findall(stmt)} or None).to_arrow_table()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """BEGIN ... COMMIT, or ROLLBACK on any error: nothing half-written."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield self.con
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    @contextmanager
    def one_thread(self) -> Iterator[None]:
        """DuckDB's work on one thread while in the block (its ``threads`` setting put back
        after): for a bulk insert. Inserting on two threads, DuckDB compresses each thread's
        row groups apart and its checkpoint rewrote them: the 8.2M rows of ``cst_evidence``
        (1M HMDA records) took 10.2 CPU-s so and 7.0 on one thread (the whole results, 12.1
        and 9.6), in less time on 2 loaded cores, and a smaller file; the rows are the same."""
        (threads,) = self.con.execute("SELECT current_setting('threads')").fetchone()
        self.con.execute("SET threads = 1")
        try:
            yield
        finally:
            with suppress(duckdb.Error):  # (a connection that failed: the error in flight stands)
                self.con.execute(f"SET threads = {int(threads)}")

    # -- engine result tables -------------------------------------------------------------
    def ensure_result_table(self, name: str, schema: pa.Schema) -> None:
        """Create ``audit.<name>`` (run_id + the declared columns) or add new declared columns."""
        check_table_name(name)
        target = f"audit.{name}"
        empty = pa.schema([pa.field("run_id", pa.string())] + list(schema)).empty_table()
        self.con.register("_aequum_empty", empty)
        try:
            exists = self.con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'audit' "
                "AND table_name = $name", {"name": name}).fetchall()[0][0]
            self.run_sql("table_register", {"table_name": name})
            if not exists:
                self.con.execute(f"CREATE TABLE {target} AS SELECT * FROM _aequum_empty")
                return
            have = {r[0] for r in self.con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'audit' "
                "AND table_name = $name", {"name": name}).fetchall()}
            types = {r[0]: r[1] for r in self.con.execute(
                "DESCRIBE SELECT * FROM _aequum_empty").fetchall()}
            for col in empty.column_names:
                if col not in have:
                    self.con.execute(f"ALTER TABLE {target} ADD COLUMN {quote_ident(col)} {types[col]}")
        finally:
            self.con.unregister("_aequum_empty")

    def purge_run(self, run_id: str) -> None:
        """Inside an open transaction: delete the run's rows from every table of aequum's that
        holds rows per run (results and engine statuses; the run record stays), so that a
        replaced run keeps nothing of its previous attempt, whichever engines that one ran.
        Only registered tables (``audit.aequum_tables``): another table of the audit schema
        with a run_id column is not aequum's to change."""
        for name in self.query("run_tables")["table_name"].to_pylist():
            self.con.execute(f"DELETE FROM audit.{quote_ident(check_table_name(name))} WHERE run_id = $run_id",
                             {"run_id": run_id})

    def insert_run_rows(self, name: str, run_id: str, table: pa.Table | str | list[str]) -> int:
        """Inside an open transaction, after :meth:`purge_run`: insert ``table`` (or the Parquet
        file(s) at that path or those paths, read by DuckDB in its memory limit, rows in file
        order) as the run's rows of ``audit.<name>``."""
        check_table_name(name)
        target = f"audit.{name}"
        if isinstance(table, (str, list)):
            if not table:
                return 0
            return self.con.execute(
                f"INSERT INTO {target} BY NAME SELECT $run_id AS run_id, * FROM read_parquet($path)",
                {"run_id": run_id, "path": table}).fetchall()[0][0]
        if table.num_rows:
            self.con.register("_aequum_rows", table)
            try:
                self.con.execute(
                    f"INSERT INTO {target} BY NAME SELECT $run_id AS run_id, * FROM _aequum_rows",
                    {"run_id": run_id})
            finally:
                self.con.unregister("_aequum_rows")
        return table.num_rows

    def write_results(self, run_id: str, results: Mapping[str, tuple[pa.Schema, pa.Table]]) -> dict[str, int]:
        """Write every result table of a run in one transaction, replacing all the run's old rows,
        each group code with its label beside it and the labels of the groups they name
        (audit.group_labels)."""
        from aequum.flows.store.group_labels import label_tables, run_parameters, write_group_labels

        results = label_tables(run_parameters(self, run_id), results)  # group_label beside the codes
        for name, (schema, _) in results.items():
            self.ensure_result_table(name, schema)
        with self.transaction():
            self.purge_run(run_id)
            counts = {name: self.insert_run_rows(name, run_id, table) for name, (_, table) in results.items()}
            write_group_labels(self, run_id)
            return counts

    def result(self, name: str, run_id: str | None = None) -> pa.Table:
        """Read ``audit.<name>`` (optionally one run's rows) as Arrow."""
        check_table_name(name)
        if run_id is None:
            return self.con.sql(f"SELECT * FROM audit.{name}").to_arrow_table()
        return self.con.sql(f"SELECT * FROM audit.{name} WHERE run_id = $run_id", params={"run_id": run_id}).to_arrow_table()

    def table_names(self) -> list[str]:
        return [r[0] for r in self.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'audit' "
            "ORDER BY table_name").fetchall()]

    # -- runs -----------------------------------------------------------------------------
    def start_run(self, run_id: str, spec_name: str, spec_hash: str, code_version: str,
                  parameters: dict) -> None:
        """Record a run as started (a run id of the same spec is reset, its rows replaced when
        it closes); a run id of another spec is an error naming both."""
        check_run_id(run_id)
        with self.transaction() as con:
            self.check_run_owner(run_id, spec_name)
            self.run_sql("run_start", {"run_id": run_id, "spec_name": spec_name,
                                       "spec_hash": spec_hash, "code_version": code_version,
                                       "parameters": json.dumps(parameters, sort_keys=True),
                                       **this_process()}, con)

    def check_run_owner(self, run_id: str, spec_name: str) -> None:
        """A run id belongs to the spec that first used it: reusing it for another spec would
        replace that spec's results."""
        owner = self.query("run_owner", {"run_id": run_id})["spec_name"].to_pylist()
        if owner and owner[0] != spec_name:
            raise WarehouseError(f"run id {run_id!r} is a run of spec {owner[0]!r} in {self.path}; this "
                                 f"run is of spec {spec_name!r}, and reusing the id would replace the "
                                 "other spec's results: give another --run-id")

    def record_engine(self, run_id: str, engine: str, status: str, seconds: float | None,
                      pieces: int | None, tables: dict[str, int] | None, error: str | None,
                      started: float | None = None) -> None:
        self.run_sql("run_engine", {"run_id": run_id, "engine": engine, "status": status,
                                    "seconds": seconds, "pieces": pieces,
                                    "tables": json.dumps(tables or {}), "error": error, "started": started})

    def finish_run(self, run_id: str, status: str, dataset_version: str | None = None,
                   source_fingerprint: str | None = None, model_fingerprint: str | None = None,
                   error: str | None = None) -> None:
        self.run_sql("run_finish", {"run_id": run_id, "status": status,
                                    "dataset_version": dataset_version,
                                    "source_fingerprint": source_fingerprint,
                                    "model_fingerprint": model_fingerprint, "error": error})

    def runs(self, spec_name: str | None = None, limit: int = 50) -> pa.Table:
        return self.query("runs_list", {"spec_name": spec_name, "limit": limit})

    def run(self, run_id: str) -> dict | None:
        rows = self.con.sql("SELECT * FROM audit.runs WHERE run_id = $run_id", params={"run_id": run_id}).to_arrow_table().to_pylist()
        return rows[0] if rows else None

    def engine_status(self, run_id: str) -> dict[str, dict]:
        rows = self.con.sql("SELECT * FROM audit.run_engines WHERE run_id = $run_id", params={"run_id": run_id}).to_arrow_table().to_pylist()
        return {r["engine"]: r for r in rows}

    # -- datasets -------------------------------------------------------------------------
    def dataset(self, version: str) -> dict | None:
        rows = self.query("dataset_lookup", {"dataset_version": version}).to_pylist()
        return rows[0] if rows else None

    def staged(self, version: str) -> pa.Table:
        """The staged records of a dataset version, in source row order."""
        return self.con.sql(f"SELECT * FROM {staged_table(version)} ORDER BY _row").to_arrow_table()
