"""Source readers: every source kind becomes a stream of Arrow record batches.

CSV and HMDA LAR files are read by DuckDB as text (every column VARCHAR) so that validation,
not the CSV sniffer, decides what a bad value is ("NA", "Exempt", "1,000"): a type guess made
on a sample must never abort a 10-million-row ingest at row 9,999,999. The header line is read
here and DuckDB is given the dialect, so its sniffer does not sample the file first.

Parquet files are read by Arrow's reader, which can hand a dictionary-encoded text column over
as it is stored (:func:`_parquet`); DuckDB's reader builds every row's string.
"""
from __future__ import annotations

import csv
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa

from aequum.engines.core.data import is_text
from aequum.engines.core.spec import Source
from aequum.flows.store.warehouse import quote_qualified

DELIMITERS = [",", "|", "\t", ";"]


class SourceError(ValueError):
    """The source cannot be read (message names the path, table or driver error)."""


# A DuckDB source is read on a connection that cannot write, attach, read other files or
# change its own settings: whatever a query says, it can only read the source database.
LOCKED_DOWN = {"enable_external_access": False, "autoload_known_extensions": False,
               "autoinstall_known_extensions": False, "lock_configuration": True}


def checked_query(query: str) -> str:
    """The spec's ``source.query`` if DuckDB's parser (which reads Postgres' dialect too) finds
    exactly one SELECT statement in it; :class:`SourceError` naming the problem otherwise.

    The text is never wrapped or pasted into other SQL: what runs is the one parsed statement."""
    con = duckdb.connect()
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:
        raise SourceError(f"source.query is not a valid SQL query: {_first_line(exc)}") from None
    finally:
        con.close()
    if len(statements) != 1:
        raise SourceError(f"source.query must be exactly one SELECT statement, got {len(statements)} statements")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise SourceError(f"source.query must be a SELECT statement, got a {kind.name} statement")
    text = statements[0].query.strip().rstrip(";").strip()
    writes = _writing_nodes(text)
    if writes:
        raise SourceError(f"source.query must only read: it holds {', '.join(writes)} (a data-modifying "
                          "common table expression)")
    return text


# the query nodes of DuckDB's parse tree that only read (json_serialize_sql): a SELECT, a UNION
# and the like, a recursive or materialised CTE; any other (DELETE_QUERY_NODE,
# INSERT_QUERY_NODE, UPDATE_QUERY_NODE, ...) changes data
_READING_NODES = {"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"}


def _writing_nodes(query: str) -> list[str]:
    """The kinds of statement nested in a SELECT that change data (``WITH d AS (DELETE ...
    RETURNING *) SELECT ...``), read from DuckDB's own parse tree of it; a tree DuckDB cannot
    serialise counts as one."""
    import json

    con = duckdb.connect()
    try:
        tree = json.loads(con.execute("SELECT json_serialize_sql($q)", {"q": query}).fetchall()[0][0])
    finally:
        con.close()
    if tree.get("error"):
        return [f"a statement DuckDB cannot check ({tree.get('error_message', 'unknown')})"]
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, str) and kind.endswith("_NODE") and kind not in _READING_NODES:
                found.add(kind.removesuffix("_QUERY_NODE").removesuffix("_NODE"))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return sorted(found)


def _first_line(exc: BaseException) -> str:
    """An error's first line, without the file content DuckDB may quote after it."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@dataclass
class Stream:
    columns: list[str]
    batches: Iterator[pa.RecordBatch]


def sniff_delimiter(path: Path) -> str:
    """The delimiter that splits the header line into the most fields."""
    try:
        with open(path, "rb") as fh:
            header = fh.readline(1 << 20)
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror}") from None
    if b"\x00" in header:
        raise SourceError(f"{path} is not a delimited text file (it holds binary data)")
    text = header.decode("utf-8", errors="replace")
    if not text.strip():
        raise SourceError(f"{path}: empty file or empty header line")
    return max(DELIMITERS, key=text.count)


def header_names(files: list[Path], delimiter: str) -> list[str]:
    """The column names of delimited text files with a header line, named as DuckDB's CSV
    reader names them (trimmed; an empty name becomes ``column<i>``, ``i`` zero-padded to the
    width of the column count; the k-th repeat of a name gets ``_k``, itself made unique the
    same way). Every file must have the first file's header: :class:`SourceError` names the
    first that does not."""
    first: list[str] | None = None
    for f in files:
        try:
            with open(f, encoding="utf-8-sig", errors="replace", newline="") as fh:
                names = next(csv.reader(fh, delimiter=delimiter, quotechar='"'), [])
        except (OSError, csv.Error) as exc:
            raise SourceError(f"cannot read the header line of {f}: {exc}") from None
        if first is None:
            first = names
            if not names:
                raise SourceError(f"{f}: empty file or empty header line")
        elif names != first:
            raise SourceError(f"{f} has another header line than {files[0]} (every file of "
                              f"source.path must have the same columns in the same order)")
    assert first is not None
    width = len(str(len(first) - 1))
    taken: set[str] = set()
    repeats: dict[str, int] = {}

    def unique(name: str) -> str:
        if name not in taken:
            return name
        repeats[name] = repeats.get(name, 0) + 1
        return unique(f"{name}_{repeats[name]}")

    out = []
    for i, raw in enumerate(first):
        name = unique(raw.strip() or f"column{i:0{width}d}")
        taken.add(name)
        out.append(name)
    return out


def resolve(path: str, base_dir: Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else (base_dir / p)


def _files(path: Path) -> list[Path]:
    if any(ch in str(path) for ch in "*?["):
        found = sorted(path.parent.glob(path.name))
        if not found:
            raise SourceError(f"no file matches {path}")
        return found
    if not path.exists():
        raise SourceError(f"source file not found: {path}")
    if path.is_dir():
        raise SourceError(f"source.path {path} is a directory: name a file, or a glob such as "
                          f"{path / '*.csv'}")
    return [path]


def source_files(source: Source, base_dir: Path) -> list[Path]:
    """The files a source reads (a DuckDB source: its database file); none for a database
    server or a generator, or when the path names no file."""
    if source.path is None or source.kind in ("postgres", "generated"):
        return []
    try:
        return _files(resolve(source.path, base_dir))
    except SourceError:
        return []


def source_stamp(source: Source, base_dir: Path) -> str | None:
    """What identifies a source without reading it, or None when only reading can tell (a
    database table or query): for files, each file's absolute path, size and modification time
    (nanoseconds); for a built-in generator, its name, rows, seed, world and the generator's code."""
    import hashlib

    h = hashlib.sha256(source.kind.encode())
    if source.kind in ("csv", "hmda_lar", "parquet"):
        for f in _files(resolve(source.path, base_dir)):
            st = f.stat()
            h.update(f"\x1f{f.resolve()}\x1f{st.st_size}\x1f{st.st_mtime_ns}".encode())
        h.update(repr((source.delimiter, source.header_names)).encode())
        return h.hexdigest()
    if source.kind == "generated":
        from aequum.engines.generators import catalogue

        h.update(repr((source.generator, source.rows, source.seed, source.world)
                      + ((source.effect,) if source.effect != 1.0 else ())).encode())
        h.update(Path(catalogue.module_file(source.generator)).read_bytes())
        return h.hexdigest()
    return None


def content_digest(source: Source, base_dir: Path, chunk: int = 8 << 20) -> str | None:
    """A digest of the bytes of a file source (each file's resolved path and content, streamed
    in ``chunk``-byte reads; xxHash's XXH3-128, several GB/s, or BLAKE2b where the xxhash package
    is absent), or None for a source that is not files. Staging records it beside the stamp
    (:func:`source_stamp`) so that a source edited with its sizes and modification times kept is
    not reused unread: measured in docs/operations.md against the staging it can save."""
    if source.kind not in ("csv", "hmda_lar", "parquet"):
        return None
    try:
        import xxhash

        h = xxhash.xxh3_128()
    except ImportError:  # pragma: no cover - the declared dependency is missing
        import hashlib

        h = hashlib.blake2b(digest_size=16)
    buf = bytearray(chunk)
    view = memoryview(buf)
    for f in _files(resolve(source.path, base_dir)):
        h.update(f"\x1f{f.resolve()}\x1f".encode())
        with open(f, "rb", buffering=0) as fh:
            while n := fh.readinto(buf):
                h.update(view[:n])
    return h.hexdigest()


T = TypeVar("T")


@contextmanager
def read_ahead(items: Iterator[T]) -> Iterator[Iterator[T]]:
    """``items``, each read in a background thread while the caller works on the one before
    (DuckDB parses and converts on its own threads without the GIL, so reading the next batch
    overlaps validating and storing this one). An error while reading is raised to the caller
    at the item where it happened; leaving the block stops the thread (after the item it is
    reading) before the caller closes the source. At most two items are held ahead."""
    ahead: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()
    end = object()

    def put(entry: tuple) -> bool:
        while not stop.is_set():
            try:
                ahead.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def pump() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((end, None))
        except BaseException as exc:  # handed to the caller, raised there
            put((end, exc))

    def drain() -> Iterator[T]:
        while True:
            item, exc = ahead.get()
            if exc is not None:
                raise exc
            if item is end:
                return
            yield item

    worker = threading.Thread(target=pump, name="aequum-read-ahead", daemon=True)
    worker.start()
    try:
        yield drain()
    finally:
        stop.set()
        worker.join()


def _arrow_batches(rel: duckdb.DuckDBPyRelation, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The relation's rows as Arrow batches, its query started at the first batch (so that an
    error in the data, found only when reading, is raised where the batches are read)."""
    yield from rel.to_arrow_reader(batch_rows)


def _regroup(batches: Iterator[pa.RecordBatch], batch_rows: int) -> Iterator[pa.RecordBatch]:
    """Batches of ``batch_rows`` rows (the last one shorter) from the reader's batches of
    whatever size it makes (DuckDB's CSV reader: about 20,000 rows), so that a consumer works
    once per ``batch_rows`` rows, not once per small chunk."""
    held: list[pa.RecordBatch] = []
    count = 0
    for b in batches:
        while b.num_rows:
            take = min(b.num_rows, batch_rows - count)
            held.append(b.slice(0, take))
            count += take
            b = b.slice(take)
            if count == batch_rows:
                yield _joined(held)
                held, count = [], 0
    if count:
        yield _joined(held)


def _joined(pieces: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One batch of the pieces (a single piece as it is: no copy)."""
    return pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)


def _rename(batches: Iterator[pa.RecordBatch], names: list[str]) -> Iterator[pa.RecordBatch]:
    for b in batches:
        yield b.rename_columns(names)


def _project(rel: duckdb.DuckDBPyRelation, raw_names: list[str], names: list[str],
             wanted: list[str] | None) -> tuple[duckdb.DuckDBPyRelation, list[str]]:
    """Read only the wanted columns (by their normalised names) when they all exist."""
    if wanted is None or not set(wanted) <= set(names):
        return rel, names  # missing columns are reported by the caller, naming them all
    keep = [raw for raw, name in zip(raw_names, names) if name in set(wanted)]
    return rel.select(*[duckdb.ColumnExpression(c) for c in keep]), [n for n in names if n in set(wanted)]


@contextmanager
def open_source(source: Source, base_dir: Path, batch_rows: int = 1_000_000,
                columns: list[str] | None = None, text_as_dictionary: bool = False) -> Iterator[Stream]:
    """Open a source as a :class:`Stream`; connections close when the block ends.

    ``columns``: the (normalised) column names the caller needs; file and DuckDB sources then
    read only those (projection pushdown). ``Stream.columns`` always lists every column.
    ``text_as_dictionary``: a Parquet file's dictionary-encoded text columns come as Arrow
    dictionary arrays, as they are stored (see :func:`_parquet`).
    """
    kind = source.kind
    if kind == "parquet":
        yield _parquet(_files(resolve(source.path, base_dir)), columns, batch_rows, text_as_dictionary,
                       source.id_column)
    elif kind in ("csv", "hmda_lar"):
        path = resolve(source.path, base_dir)
        files = _files(path)
        con = duckdb.connect()
        try:
            delim = source.delimiter or sniff_delimiter(files[0])
            if source.header_names:
                rel = con.read_csv([str(f) for f in files], delimiter=delim, all_varchar=True,
                                   quotechar='"', null_padding=False, header=False,
                                   names=list(source.header_names))
            else:
                # the dialect is known (and the header read here), so DuckDB's sniffer, which
                # samples 20,480 rows, is not run; a row with more or fewer fields than the
                # header is an error naming its line, as with the sniffer
                rel = con.read_csv([str(f) for f in files], delimiter=delim, quotechar='"',
                                   escapechar='"', header=True, null_padding=False, auto_detect=False,
                                   columns={n: "VARCHAR" for n in header_names(files, delim)})
        except duckdb.Error as exc:
            con.close()
            raise SourceError(f"cannot read {path} as a delimited text file with delimiter {delim!r} "
                              f"({'source.delimiter' if source.delimiter else 'sniffed'}): "
                              f"{_first_line(exc)}") from None
        raw = rel.columns
        names = raw
        if kind == "hmda_lar":
            from aequum.engines.generators.hmda import normalise_column_name
            names = [normalise_column_name(c) for c in raw]
        rel, kept = _project(rel, raw, names, columns)
        batches = _regroup(_arrow_batches(rel, batch_rows), batch_rows)
        if kind == "hmda_lar":
            batches = _rename(batches, kept)
        try:
            yield Stream(names, _guard(batches, str(path)))
        finally:
            con.close()
    elif kind == "duckdb":
        path = resolve(source.path, base_dir)
        if not path.exists():
            raise SourceError(f"DuckDB source file not found: {path}")
        query = checked_query(source.query) if source.query else None
        try:
            con = duckdb.connect(str(path), read_only=True, config=LOCKED_DOWN)
        except duckdb.Error as exc:
            raise SourceError(f"cannot open DuckDB file {path}: {_first_line(exc)}") from None
        try:
            rel = con.table(quote_qualified(source.table)) if source.table else con.sql(query)
            names = rel.columns
            rel, _ = _project(rel, names, names, columns)
            yield Stream(names, _guard(rel.to_arrow_reader(batch_rows), str(path)))
        except duckdb.Error as exc:
            raise SourceError(f"cannot read {source.table or 'query'} from {path}: {_first_line(exc)}") from None
        finally:
            con.close()
    elif kind == "postgres":
        yield from _postgres(source, batch_rows)
    elif kind == "generated":
        yield _generated(source, batch_rows)
    else:  # pragma: no cover - the spec's Literal forbids it
        raise SourceError(f"unknown source kind {kind!r}")


def _parquet(files: list[Path], wanted: list[str] | None, batch_rows: int, dictionaries: bool,
             id_column: str | None) -> Stream:
    """Parquet files read by Arrow's reader, the columns of the first file's schema (every
    file must have the ones read; a type that differs is cast to the first file's).

    With ``dictionaries``, each text column that the first file stores dictionary-encoded in
    every row group (not the record ids) comes as the file holds it, the rows' indices into a
    few distinct values, without building every row's string: staging then strips and parses
    each distinct value once (:func:`~aequum.engines.core.validation.validate_batch`). At 1M
    generated LAR rows the read took 0.15 CPU-s instead of DuckDB's 0.71."""
    import pyarrow.parquet as pq

    try:
        first = pq.ParquetFile(files[0])
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(f"cannot read {files[0]} as Parquet: {_first_line(exc)}") from None
    schema = first.schema_arrow
    names = schema.names
    keep = names if wanted is None or not set(wanted) <= set(names) else [n for n in names if n in set(wanted)]
    text = []
    if dictionaries:
        meta = first.metadata
        leaf = {first.schema.column(i).path: i for i in range(meta.num_columns)}
        text = [n for n in keep if n != id_column and n in leaf and is_text(schema.field(n).type)
                and all(meta.row_group(g).column(leaf[n]).has_dictionary_page for g in range(meta.num_row_groups))]
    target = pa.schema([pa.field(n, pa.dictionary(pa.int32(), schema.field(n).type) if n in text
                                 else schema.field(n).type) for n in keep])

    def batches() -> Iterator[pa.RecordBatch]:
        for i, f in enumerate(files):
            try:
                pf = first if i == 0 else pq.ParquetFile(f)
            except (OSError, pa.ArrowException) as exc:
                raise SourceError(f"cannot read {f} as Parquet: {_first_line(exc)}") from None
            here = pf.schema_arrow
            lacking = [n for n in keep if n not in here.names]
            if lacking:
                raise SourceError(f"Parquet file {f} lacks column(s) {lacking} that {files[0]} has")
            coded = [n for n in text if here.field(n).type == schema.field(n).type]
            pf = pq.ParquetFile(f, read_dictionary=coded) if coded else pf
            for batch in pf.iter_batches(batch_size=batch_rows, columns=keep):
                yield batch if batch.schema == target else _conform(batch, target)

    where = str(files[0]) if len(files) == 1 else f"{files[0]} and {len(files) - 1} more file(s)"
    return Stream(names, _guard(_regroup(batches(), batch_rows), where))


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """A later file's batch with the first file's column types (text that is to come as a
    dictionary but is stored otherwise in this file: cast to text, then encoded)."""
    columns = []
    for field in target:  # by name: a later file may order its columns otherwise
        column = batch.column(field.name)
        if column.type != field.type:
            if pa.types.is_dictionary(field.type) and not pa.types.is_dictionary(column.type):
                column = column.cast(field.type.value_type).dictionary_encode().cast(field.type)
            else:
                column = column.cast(field.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=target)


def _guard(batches, where: str) -> Iterator[pa.RecordBatch]:
    """The batches of a file read by DuckDB; a reading error (DuckDB's, or the OSError Arrow's
    reader turns it into: a ragged CSV line) is a :class:`SourceError` naming the file, the
    line and what is wrong with it (never the line's content)."""
    try:
        yield from batches
    except (duckdb.Error, pa.ArrowException, OSError) as exc:
        found = [ln.strip() for ln in str(exc).splitlines() if ln.strip().startswith("Expected Number of Columns")]
        raise SourceError(f"error while reading {where}: {_first_line(exc)}"
                          + (f" ({found[0]})" if found else "")) from None


def _postgres(source: Source, batch_rows: int) -> Iterator[Stream]:
    import adbc_driver_postgresql.dbapi as pg

    try:
        conn = pg.connect(source.uri)
    except Exception as exc:  # the driver raises its own hierarchy
        raise SourceError(f"cannot connect to Postgres: {exc}") from None
    try:
        cur = conn.cursor()
        sql = checked_query(source.query) if source.query else f"SELECT * FROM {quote_qualified(source.table)}"
        try:
            cur.execute("SET TRANSACTION READ ONLY")  # the first statement of the driver's transaction
            cur.execute(sql)
            reader = cur.fetch_record_batch()
        except Exception as exc:
            raise SourceError(f"cannot read {source.table or 'query'} from Postgres: {exc}") from None
        yield Stream(reader.schema.names, _rebatch(reader, batch_rows))
    finally:
        conn.close()


def _rebatch(reader: pa.RecordBatchReader, batch_rows: int) -> Iterator[pa.RecordBatch]:
    for b in reader:
        for off in range(0, b.num_rows, batch_rows):
            yield b.slice(off, batch_rows)


def _generated(source: Source, batch_rows: int) -> Stream:
    from aequum.engines.generators import catalogue

    batches = catalogue.batches(source.generator, rows=source.rows, seed=source.seed,
                                batch_rows=batch_rows, world=source.world, effect=source.effect)
    first = next(batches)
    def chain() -> Iterator[pa.RecordBatch]:
        yield first
        yield from batches
    return Stream(first.schema.names, chain())
