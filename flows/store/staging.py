"""Stage a source under a spec: validate, quarantine, version, write warehouse + lake.

A dataset version is the hash of the spec's record contract and the source fingerprint (row
count + order-independent content hash), so re-ingesting the same data under the same spec
reuses the staged copy, and a run can always name exactly the records it audited.

Atomicity: rows stream into a private ``staging.incoming_<uuid>`` table and a temporary lake
folder; only when every check has passed are the table renamed, the quarantine written and the
version registered, in one transaction, and the folder renamed into place. A failure at any
point leaves the warehouse and lake as they were (the incoming table and folder are removed).

Reading, validating and storing overlap: the source's next batch is read on one thread while
this one is validated and the ones before are inserted into the warehouse on another and
written to the lake on a third (:func:`read_ahead`, :func:`write_behind`,
:class:`~aequum.flows.store.lake_writer.PartitionedWriter`); an error on any of them stops the
ingest as above.
"""
from __future__ import annotations

import hashlib
import json
import queue
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from aequum.engines.core.data import DECISION, ID, LABEL, ROW, group_column
from aequum.engines.core.spec import AuditSpec
from aequum.engines.core.validation import QUARANTINE_SCHEMA, check_columns, validate_batch
from aequum.engines.proxy.stage import load_inputs, proxy_batch
from aequum.flows.store.lake_writer import PartitionedWriter
from aequum.flows.store.paths import DEFAULT_LAKE
from aequum.flows.store.readers import content_digest, open_source, read_ahead, source_files, source_stamp
from aequum.flows.store.warehouse import (Warehouse, load_sql, process_alive, quote_ident, staged_table,
                                    this_process)


class IngestError(ValueError):
    """The ingest failed its validation policy; the message says how and where."""


@dataclass
class DatasetRef:
    """A staged dataset version: where its records are and what they are."""

    version: str
    spec_name: str
    staged_table: str
    lake_path: str
    categories: dict[str, list[str]]
    fingerprint: str
    rows_read: int
    rows_staged: int
    rows_quarantined: int
    rows_out_of_scope: int
    reused: bool = False
    # per optional pricing field, the kept records whose value was not a number (staged as null)
    fields_nulled: dict[str, int] = field(default_factory=dict)


def record_contract(spec: AuditSpec) -> str:
    """The part of the spec that decides what is staged (not engine parameters); for a generated
    source in a world other than the default, the world (a different world is a different dataset
    version even where the staged records happen to coincide, e.g. a sample without harm)."""
    part = spec.model_dump(mode="json", include={"protected", "decision", "label", "features"})
    part["id_column"] = spec.source.id_column
    if spec.geography is not None:  # its tract columns are staged
        part["geography"] = spec.geography.model_dump(mode="json")
    if spec.pricing is not None:  # staged only with the section (the contracts of other specs stand)
        part["pricing"] = spec.pricing.model_dump(mode="json")
    if spec.source.kind == "generated" and spec.source.world != "dti_penalty":
        part["world"] = spec.source.world
    if spec.source.kind == "generated" and spec.source.effect != 1.0:
        part["effect"] = spec.source.effect
    return json.dumps(part, sort_keys=True, separators=(",", ":"))


def lake_partitions(spec: AuditSpec) -> list[str]:
    """Hive partition columns: the first protected attribute's group and the label (or ŷ)."""
    cols = [group_column(spec.protected[0].name)]
    if spec.label is not None:
        cols.append(LABEL)
    elif spec.decision is not None:
        cols.append(DECISION)
    return cols


def stage(spec: AuditSpec, spec_dir: Path, wh: Warehouse, lake_root: Path = DEFAULT_LAKE,
          batch_rows: int = 250_000, progress: Callable[[str], None] | None = None,
          check_source: bool = False, trust_mtime: bool = False) -> DatasetRef:
    """Ingest ``spec.source`` into the warehouse and lake; return the dataset version. A source
    whose files are unchanged since they were staged is reused without staging it again:
    unchanged means the same paths, sizes and modification times and the same bytes (a
    streaming hash of the files, :func:`~aequum.flows.store.readers.content_digest`, at GB/s);
    with ``trust_mtime`` (``--trust-mtime``) the sizes and times alone, the files unread. A
    file edited with its size and modification time kept was reused unread before the hash.
    ``check_source`` (``--check-source``) or the spec's ``ingest.reuse_unchanged_files: false``
    reads and fingerprints the source in any case."""
    say = progress or (lambda _msg: None)
    con = wh.con
    lake_root = Path(lake_root).resolve()  # workers elsewhere read the lake by this path
    owner = this_process()
    # named after its process, so that a later writer can tell an orphan from a live ingest
    incoming = (f"staging.incoming_{owner['pid']}_{int((owner['pid_started'] or 0) * 1000)}_"
                f"{uuid.uuid4().hex[:12]}")
    tmp: Path | None = None
    bad_parts: list[pa.Table] = []
    categories: dict[str, set[str]] = {}
    nulled: dict[str, int] = {}
    rows = 0
    skipped = 0
    digest = 0
    t0 = time.perf_counter()
    contract = hashlib.sha256(record_contract(spec).encode()).hexdigest()[:16]
    _remove_orphan_tmp(lake_root / spec.name)  # also when the staged copy is reused unread
    proxied = next((p for p in spec.protected if p.proxy is not None), None)
    # a proxy's own files (surnames, composition) are not part of the source's stamp: read it again
    own_files = proxied is not None and (proxied.proxy.names or proxied.proxy.composition)
    stamp = source_stamp(spec.source, spec_dir) if spec.ingest.reuse_unchanged_files and not own_files else None
    proxy_inputs = load_inputs(proxied.proxy, spec_dir) if proxied is not None else None
    # the bytes of the source's files, recorded at staging and compared before a reuse (not with
    # trust_mtime, which reuses on the stamp alone, unless staging records it)
    content: str | None = None
    if stamp is not None and not check_source:
        found = wh.query("dataset_by_stamp", {"source_stamp": stamp, "contract_hash": contract}).to_pylist()
        if found and not trust_mtime:
            content = content_digest(spec.source, spec_dir)
            if content != found[0]["source_content"]:
                say("source files have the sizes and modification times they had when staged as dataset "
                    f"version {found[0]['dataset_version']} but "
                    + ("different content: staging them again" if found[0]["source_content"] else
                       "their content was not recorded then: staging them again"))
                found = []
        if found and _intact(wh, found[0]):
            known = found[0]
            say(f"source reused unread: same files, sizes and modification times as when it was staged "
                f"as dataset version {known['dataset_version']} (--trust-mtime: its content was not read; "
                "--check-source reads and fingerprints it)" if trust_mtime else
                f"source reused: same files and content (hashed) as when it was staged as dataset version "
                f"{known['dataset_version']}")
            return DatasetRef(known["dataset_version"], spec.name, known["staged_table"], known["lake_path"],
                              json.loads(known["categories"] or "{}"), known["source_fingerprint"],
                              known["rows_read"], known["rows_staged"], known["rows_quarantined"],
                              known["rows_out_of_scope"], reused=True,
                              fields_nulled=json.loads(known["fields_nulled"] or "{}"))
    made = False  # the incoming table exists
    positional = spec.source.id_column is None  # row numbers as ids: `_id` is computed (see below)

    def store(good: pa.Table) -> None:
        nonlocal made
        con.register("_aequum_batch", good)
        try:
            if not made:
                _create_incoming(con, incoming, positional)
                made = True
            if positional:
                con.execute(f"INSERT INTO {incoming} BY NAME SELECT * EXCLUDE ({ID}) FROM _aequum_batch")
            else:
                con.execute(f"INSERT INTO {incoming} SELECT * FROM _aequum_batch")
        finally:
            con.unregister("_aequum_batch")

    try:
        tmp = lake_root / spec.name / f".incoming.{owner['pid']}.{uuid.uuid4().hex[:12]}.tmp"
        lake = PartitionedWriter(tmp, lake_partitions(spec))
        with open_source(spec.source, spec_dir, batch_rows, columns=spec.columns(), text_as_dictionary=True) as stream:
            check_columns(stream.columns, spec)
            # four steps overlap, each on its own thread (DuckDB, polars and Arrow release the
            # GIL): the next batch is read while this one is validated and the ones before are
            # stored in the warehouse and written to the lake
            # (DuckDB inserting on one thread: fewer CPU-s, Warehouse.one_thread; 2.8 -> 2.5 at 1M)
            with (wh.one_thread(), read_ahead(stream.batches) as batches, lake, write_behind(store) as insert,
                  write_behind(lake.write) as write):
                for batch in batches:
                    if proxied is not None:  # BISG probabilities, and race where it was not recorded
                        batch = proxy_batch(batch, proxied.column, proxied.proxy, spec.source.id_column, rows,
                                            proxy_inputs)
                    res = validate_batch(batch, spec, rows)
                    rows += res.rows
                    skipped += res.out_of_scope
                    digest = (digest + res.content_hash) % (1 << 64)
                    if res.bad.num_rows:
                        bad_parts.append(res.bad)
                    for name, vals in res.categories.items():
                        categories.setdefault(name, set()).update(vals)
                    for name, n in res.nulled.items():
                        nulled[name] = nulled.get(name, 0) + n
                    insert(res.good)
                    write(res.good)
                    say(f"read {rows:,} rows ({rows / max(time.perf_counter() - t0, 1e-9):,.0f} rows/s)")
        if rows == 0:
            raise IngestError(f"source {spec.source.path or spec.source.table or spec.source.kind} has no rows")

        fingerprint = f"{rows}:{digest:016x}"
        version = hashlib.sha256((record_contract(spec) + fingerprint).encode()).hexdigest()[:16]
        known = wh.dataset(version)
        if known is not None and not _intact(wh, known):
            say(f"dataset version {version} is registered but its staged table or lake copy is "
                "missing, incomplete or changed: staging it again")
            _forget(wh, known)
            known = None
        if known is not None:
            say(f"dataset version {version} already staged: reusing it")
            return DatasetRef(version, spec.name, known["staged_table"], known["lake_path"],
                              json.loads(known["categories"] or "{}"), fingerprint, rows,
                              known["rows_staged"], known["rows_quarantined"], known["rows_out_of_scope"],
                              reused=True, fields_nulled=json.loads(known["fields_nulled"] or "{}"))

        con.execute(f"CREATE OR REPLACE TEMP VIEW staged_batch AS SELECT * FROM {incoming}")
        (dup_sql,) = load_sql("duplicate_ids")
        # row numbers as ids (id_column: null) cannot repeat: no search for duplicates
        dups = con.sql(dup_sql).to_arrow_table() if spec.source.id_column is not None else None
        if dups is not None and dups.num_rows:
            con.register("_aequum_dups", dups)
            try:
                con.execute(f"DELETE FROM {incoming} WHERE _row IN (SELECT source_row FROM _aequum_dups)")
            finally:
                con.unregister("_aequum_dups")
            bad_parts.append(pa.table({
                "source_row": dups["source_row"], "record_id": dups["record_id"],
                "field": pa.array([spec.source.id_column or "_row"] * dups.num_rows, pa.string()),
                "value": dups["record_id"], "reason": dups["reason"]}).cast(QUARANTINE_SCHEMA))
        bad = pa.concat_tables(bad_parts) if bad_parts else QUARANTINE_SCHEMA.empty_table()
        staged_rows = rows - skipped - bad.num_rows
        share = bad.num_rows / max(rows - skipped, 1)
        if share > spec.ingest.max_bad_fraction or staged_rows == 0:
            _record_quarantine(wh, version, bad)
            first = bad.slice(0, 3).to_pylist()
            shown = "; ".join(f"row {r['source_row']} field {r['field']!r} value {r['value']!r}: {r['reason']}"
                              for r in first)
            raise IngestError(
                f"{bad.num_rows:,} of {rows - skipped:,} in-scope rows ({share:.1%}) failed validation, above "
                f"ingest.max_bad_fraction={spec.ingest.max_bad_fraction:g}; nothing was staged. "
                f"First: {shown}. All bad rows: audit.quarantine where dataset_version = '{version}'")

        lake_path = lake_root / spec.name / version
        if dups is not None and dups.num_rows:  # the lake written as the rows came holds them
            say(f"writing lake partitions to {lake_path} again, without the duplicate ids")
            shutil.rmtree(tmp, ignore_errors=True)
            _write_lake(con, incoming, tmp, lake_partitions(spec))
        cats = {k: sorted(v) for k, v in categories.items()}
        target = staged_table(version)
        with wh.transaction():
            con.execute(f"ALTER TABLE {incoming} RENAME TO {target.split('.')[1]}")
            _insert_quarantine(wh, version, bad)
            wh.run_sql("dataset_register", {
                "dataset_version": version, "spec_name": spec.name, "source_kind": spec.source.kind,
                "source_fingerprint": fingerprint, "rows_read": rows, "rows_staged": staged_rows,
                "rows_quarantined": bad.num_rows, "rows_out_of_scope": skipped, "staged_table": target,
                "lake_path": str(lake_path), "categories": json.dumps(cats),
                "source_stamp": stamp, "contract_hash": contract, "lake_stamp": lake_stamp(tmp),
                "source_files": json.dumps([str(f) for f in source_files(spec.source, spec_dir)]),
                "fields_nulled": json.dumps({k: v for k, v in nulled.items() if v}),
                "source_content": content if content is not None or stamp is None
                else content_digest(spec.source, spec_dir)})
            made = False  # it is the staged table now
            if lake_path.exists():
                shutil.rmtree(lake_path)
            tmp.rename(lake_path)
        nulled = {k: v for k, v in nulled.items() if v}
        say(f"staged {staged_rows:,} rows as dataset version {version} "
            f"({bad.num_rows:,} quarantined, {skipped:,} out of scope) in {time.perf_counter() - t0:.1f} s")
        if nulled:
            say("not a number, staged as null for the pricing engine, the records kept for every other: "
                + ", ".join(f"{k} in {v:,} record(s)" for k, v in nulled.items())
                + f" (audit.datasets.fields_nulled of dataset version {version})")
        return DatasetRef(version, spec.name, target, str(lake_path), cats, fingerprint, rows,
                          staged_rows, bad.num_rows, skipped, fields_nulled=nulled)
    finally:
        if made:
            try:
                con.execute(f"DROP TABLE IF EXISTS {incoming}")
            except duckdb.Error:
                pass
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        _remove_orphan_tmp(lake_root / spec.name)


def _create_incoming(con: duckdb.DuckDBPyConnection, table: str, positional: bool) -> None:
    """The incoming table with the columns of the registered batch ``_aequum_batch``. With row
    numbers as ids (``positional``) its ``_id`` is a virtual column, the text of ``_row``
    (:func:`~aequum.engines.core.validation.validate_batch` gives it the same values): the
    table reads the same, but the ids are not stored a second time as text (at 1M generated
    LAR rows that store took 0.6-0.8 s of staging's 5.7-6.0 s, on the critical path of the
    warehouse insert). Names are quoted identifiers, types DuckDB's own."""
    columns = []
    for name, dtype, *_ in con.execute("DESCRIBE SELECT * FROM _aequum_batch").fetchall():
        if positional and name == ID:
            columns.append(f"{ID} VARCHAR GENERATED ALWAYS AS (CAST({ROW} AS VARCHAR)) VIRTUAL")
        else:
            columns.append(f"{quote_ident(name)} {dtype}")
    con.execute(f"CREATE TABLE {table} ({', '.join(columns)})")


def _write_lake(con: duckdb.DuckDBPyConnection, table: str, folder: Path, keys: list[str]) -> None:
    """The lake copy of a staged table, written in batches by the lake writer that staging
    uses (:class:`~aequum.flows.store.lake_writer.PartitionedWriter`: the same layout and folder
    names, one batch in memory at a time)."""
    # the lake's row order is not kept (readers sort when they need it)
    con.execute("SET preserve_insertion_order = false")
    try:
        reader = con.table(table).to_arrow_reader(250_000)
        with PartitionedWriter(folder, keys) as lake:
            for batch in reader:
                lake.write(pa.Table.from_batches([batch]))
    finally:
        con.execute("RESET preserve_insertion_order")


@contextmanager
def write_behind(store: Callable[[pa.Table], None]) -> Iterator[Callable[[pa.Table], None]]:
    """A function that hands a table to ``store``, which runs on a background thread, in the
    order handed over, while the caller goes on (one table waits at most). An error in
    ``store`` is raised to the caller at its next hand-over or when the block ends; the block
    ends only when every table handed over is stored (or has failed)."""
    pending: queue.Queue = queue.Queue(maxsize=1)
    failed: list[BaseException] = []

    def work() -> None:
        while (table := pending.get()) is not None:
            if not failed:  # after an error the rest is dropped, not stored
                try:
                    store(table)
                except BaseException as exc:  # raised in the caller's thread
                    failed.append(exc)

    def hand_over(table: pa.Table) -> None:
        if failed:
            raise failed[0]
        pending.put(table)

    worker = threading.Thread(target=work, name="aequum-write-behind", daemon=True)
    worker.start()
    try:
        yield hand_over
    finally:
        pending.put(None)
        worker.join()
    if failed:
        raise failed[0]


def lake_stamp(folder: Path) -> str:
    """What a lake copy's files are without reading them: each file's path under ``folder``,
    size and modification time (nanoseconds), hashed."""
    h = hashlib.sha256()
    for f in sorted(Path(folder).rglob("*.parquet")):
        st = f.stat()
        h.update(f"\x1f{f.relative_to(folder)}\x1f{st.st_size}\x1f{st.st_mtime_ns}".encode())
    return h.hexdigest()


def _intact(wh: Warehouse, known: dict) -> bool:
    """Is a registered dataset version verifiably there: its staged table and its lake copy
    (an absolute path) both holding ``rows_staged`` rows, and the lake's files those it was
    staged with (:func:`lake_stamp`, when recorded)? (Parquet row counts come from the files'
    footers: no data is read.)"""
    lake = Path(known["lake_path"] or "")
    if not lake.is_absolute() or not lake.is_dir():
        return False
    if known.get("lake_stamp") is not None and lake_stamp(lake) != known["lake_stamp"]:
        return False
    exists = wh.con.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = "
                            "'staging' AND table_name = $t",
                            {"t": known["staged_table"].split(".", 1)[1]}).fetchall()[0][0]
    if not exists:
        return False
    staged = wh.con.execute(f"SELECT count(*) FROM {staged_table(known['dataset_version'])}").fetchall()[0][0]
    files = sorted(str(f) for f in lake.rglob("*.parquet"))
    if staged != known["rows_staged"] or not files:
        return False
    try:
        in_lake = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    except (OSError, pa.ArrowException):
        return False
    return in_lake == known["rows_staged"]


def _forget(wh: Warehouse, known: dict) -> None:
    """Unregister a dataset version whose copies are incomplete (it is staged again)."""
    version = known["dataset_version"]
    with wh.transaction():
        wh.con.execute(f"DROP TABLE IF EXISTS {staged_table(version)}")
        wh.run_sql("dataset_forget", {"dataset_version": version})
    lake = Path(known["lake_path"] or "")
    if lake.is_absolute() and lake.is_dir():
        shutil.rmtree(lake, ignore_errors=True)


def _remove_orphan_tmp(spec_lake: Path) -> None:
    """Remove temporary lake folders (``.incoming.<pid>.<id>.tmp``, or ``.<version>.<pid>.<id>.tmp``
    as earlier versions named them) whose process is gone."""
    if not spec_lake.is_dir():
        return
    for leftover in spec_lake.glob(".*.tmp"):
        parts = leftover.name.split(".")
        pid = int(parts[2]) if len(parts) == 5 and parts[2].isdigit() else None
        if pid is None or not process_alive(pid, None):
            shutil.rmtree(leftover, ignore_errors=True)


def _insert_quarantine(wh: Warehouse, version: str, bad: pa.Table) -> None:
    wh.con.execute("DELETE FROM audit.quarantine WHERE dataset_version = $v", {"v": version})
    if bad.num_rows:
        wh.con.register("_aequum_bad", bad)
        try:
            wh.con.execute("INSERT INTO audit.quarantine SELECT $v, source_row, record_id, field, value, "
                           "reason FROM _aequum_bad", {"v": version})
        finally:
            wh.con.unregister("_aequum_bad")


def _record_quarantine(wh: Warehouse, version: str, bad: pa.Table) -> None:
    with wh.transaction():
        _insert_quarantine(wh, version, bad)
