"""Reading a dataset version's staged records from the Parquet lake: whole columns in record
order (:func:`load_lake`) or blocks in storage order (:func:`lake_blocks`), one read at a time
per process, and the memory of a large read given back (:func:`release_memory`). Imported by
the flow's process and its Dask workers (through :mod:`aequum.flows.audit`), which therefore
use the system allocator."""
from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from aequum.engines.core.data import ID, ROW, is_text
from aequum.engines.core.sampling import record_order


# Arrow's default allocator (mimalloc) keeps what its reading threads freed in their own heaps,
# out of reach of release_memory: after the model step's reads the flow's process held 0.24 GB
# more with it than with the system allocator (0.11 GB), and CST's preparation at 10M peaked
# 0.3 GB higher. The flow's process and its workers (which import this module) use malloc: here
# for what Python asks Arrow for, and, unless pyarrow was imported before aequum, for Arrow's
# own C++ allocations too (``ARROW_DEFAULT_MEMORY_POOL``, set in the package's ``__init__``).
pa.set_memory_pool(pa.system_memory_pool())


def release_memory() -> None:
    """Give the memory freed by a large step back to the system: Arrow's allocator keeps freed
    blocks for reuse and glibc's heap keeps its top, so a worker that once held a 10M-record
    engine would otherwise stay that large through every later task (and the flow's process
    through the whole run after the model fit)."""
    import ctypes

    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


_LAKE_READS = threading.Lock()  # a process's reads of the lake, one at a time: each may hold GBs


_KEEP_BYTES = 64 * 2 ** 20  # a read larger than this gives back the memory of its steps


def _lake_files(lake_path: str, wanted: Iterable[str]) -> tuple[list[str], pa.Schema]:
    """A dataset version's Parquet files and their schema; a column in ``wanted`` that the
    records lack is an error naming it."""
    files = sorted(str(p) for p in Path(lake_path).rglob("*.parquet"))
    if not files:
        raise ValueError(f"no staged records at {lake_path}")
    schema = pq.read_schema(files[0])
    missing = [c for c in dict.fromkeys(wanted) if c not in schema.names]
    if missing:
        raise ValueError(f"the staged records at {lake_path} lack column(s) {missing}")
    return files, schema


def load_lake(lake_path: str, columns: list[str] | None = None, ordered: bool = True,
              where: dict[str, int] | None = None, rows: pa.Array | None = None) -> pa.Table:
    """A dataset version's staged records from the lake: only ``columns`` (default all) of the
    records whose columns have the values in ``where`` and whose source row numbers (``_row``)
    are in ``rows`` (default all records), in record order (by id,
    :func:`~aequum.engines.core.sampling.record_order`: the same records come in the same order
    however the source's rows were ordered, so no engine's result depends on it), or in
    storage order when ``ordered`` is false. Text columns other than the ids come dictionary-encoded, as Parquet
    stores them (a staged text column is a category, a grade, a code: at 10M HMDA records the
    three recorded protected values took 409 MB as strings, 101 MB so), except those whose values
    are nearly all distinct within a row group (the census tract: :func:`_nearly_distinct`).

    Read with Arrow's Parquet reader into Arrow's memory, and put in record order a column at a
    time, each column let go (and its memory given back) once its copy in that order is made.
    Through DuckDB, whose allocator kept what it had freed, the CST read at 10M HMDA records
    (0.58 GB) peaked at 1.85 GB; so, at 1.1 GB."""
    files, schema = _lake_files(lake_path, [*(columns or []), *(where or {})])
    names = list(dict.fromkeys(columns)) if columns is not None else list(schema.names)
    read = list(dict.fromkeys([*names, *([ID] if ordered else [])]))
    plain = _nearly_distinct(files[0], [f.name for f in schema if _encoded(f) and f.name in read])
    text = [f.name for f in schema if _encoded(f) and f.name not in plain]
    dataset = ds.dataset(files, schema=_read_schema(schema, plain), format=ds.ParquetFileFormat(
        read_options=ds.ParquetReadOptions(dictionary_columns=text)))
    condition = None
    for column, value in (where or {}).items():  # each file holds one partition: most are skipped
        term = ds.field(column) == value
        condition = term if condition is None else condition & term
    if rows is not None:
        term = ds.field(ROW).isin(pa.array(rows, pa.int64()))
        condition = term if condition is None else condition & term
    pool = pa.default_memory_pool()
    with _LAKE_READS:
        table = dataset.to_table(columns=read, filter=condition)
        if ordered:
            fields = {f.name: f for f in table.schema}
            order = pa.array(record_order(table[ID]))
            columns_in_order = []
            for name in names:  # each column is let go as soon as its copy in record order is made
                # combining unifies a column's row groups' dictionaries; a chunked take is 1.3x slower
                columns_in_order.append(table[name].combine_chunks().take(order))
                table = table.drop_columns([name])
                pool.release_unused()  # else the freed columns stay with the allocator
            table = pa.table(columns_in_order, schema=pa.schema([fields[n] for n in names]))
            del columns_in_order
        if table.nbytes > _KEEP_BYTES:
            release_memory()
    return table


def _read_schema(stored: pa.Schema, plain: set[str] = frozenset()) -> pa.Schema:
    """The columns as read: every column nullable (the staged files mark some required; the
    tables of one engine are put together whatever they were read from) and text other than
    the ids and the ``plain`` columns dictionary-encoded."""
    return pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), f.type) if _encoded(f) and f.name not in plain
                               else f.type) for f in stored])


def _nearly_distinct(path: str, names: list[str]) -> set[str]:
    """The text columns among ``names`` whose values are nearly all distinct within a row group
    of the file at ``path`` (its first row group's dictionary page, if any, holds more than half
    the column's bytes): read as plain text, not dictionary-encoded. Each row group's dictionary
    is then about as large as its values, and reading the census tract of 8.4M HMDA records
    dictionary-encoded peaked at 2.3 GB (its 240 chunks' dictionaries 0.45 GB, and 7.3 s of
    CPU) where as plain text it peaks at 0.5 GB (0.12 GB, 1.8 s)."""
    if not names:
        return set()
    meta = pq.ParquetFile(path).metadata
    if not meta.num_row_groups:
        return set()
    group = meta.row_group(0)
    chunks = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
    out = set()
    for name in names:
        chunk = chunks.get(name)
        if chunk is None:
            continue
        if not chunk.has_dictionary_page or chunk.dictionary_page_offset is None:
            out.add(name)  # the writer gave up its dictionary: too many distinct values
        elif chunk.data_page_offset - chunk.dictionary_page_offset > chunk.total_compressed_size / 2:
            out.add(name)
    return out


def _encoded(field: pa.Field) -> bool:
    """Whether :func:`load_lake` reads a staged column dictionary-encoded: text other than the ids."""
    return field.name != ID and is_text(field.type)


def lake_blocks(lake_path: str, columns: list[str], rows: int = 1_000_000) -> Iterator[pa.Table]:
    """``columns`` of every staged record in blocks of about ``rows`` records, in storage order:
    for a pass over all records in the memory of one block (files read one after another, a
    row group at a time)."""
    files, schema = _lake_files(lake_path, columns)
    plain = pa.schema([schema.field(c).with_nullable(True) for c in columns])  # as load_lake's, text as stored
    with _LAKE_READS:
        held: list[pa.RecordBatch] = []
        for path in files:
            with pq.ParquetFile(path) as file:
                for batch in file.iter_batches(batch_size=rows, columns=list(columns)):
                    held.append(batch)
                    if sum(b.num_rows for b in held) >= rows:
                        yield pa.Table.from_batches(held).cast(plain)
                        held = []
        if held:
            yield pa.Table.from_batches(held).cast(plain)
