"""The lake copy of a dataset version, written as its validated batches arrive.

The layout is hive folders ``key=value/.../data_0.parquet`` (a null value named
``__HIVE_DEFAULT_PARTITION__``), the partition columns kept inside the files, text as Parquet
strings; readers take every column from the files, never from the folder names. A key is a
staged column's name, which holds a protected attribute's name (``_g_<name>``): it enters the
path only as :func:`folder_key` encodes it, so no name can leave the lake or split a folder. One file per partition; each batch's rows of a partition are one row group. The rows
of a file are in the order they arrived, not in source row order (readers sort by ``_row``).

Written beside the warehouse insert, on a thread of its own, the lake no longer waits for the
whole staged table and is not read back from it: at 1M generated HMDA rows (Parquet), old and
new code alternated in fresh processes, staging took 6.4-6.5 s against 6.9-7.4 s.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from aequum.engines.core.data import ID, ROW

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
FILE = "data_0.parquet"
_PLAIN = re.compile(r"[A-Za-z0-9_-]")
_LONGEST = 120  # characters of an encoded key kept before a hash stands for the rest


def folder_key(column: str) -> str:
    """The lake folder name of a partition column: letters, digits, ``_`` and ``-`` as they
    are, every other character as ``%XX`` of its UTF-8 bytes (so no ``/``, ``.``, ``=`` or
    ``\\`` ever reaches the path), and a long name cut with a hash of the whole."""
    encoded = "".join(c if _PLAIN.fullmatch(c) else "".join(f"%{b:02X}" for b in c.encode("utf-8"))
                      for c in column)
    if len(encoded) > _LONGEST:
        encoded = encoded[:_LONGEST - 17] + "-" + hashlib.sha256(column.encode("utf-8")).hexdigest()[:16]
    return encoded


def partition_folder(keys: list[str], values: tuple) -> Path:
    """The relative folder of one partition, keys and values encoded by :func:`folder_key`."""
    return Path(*(f"{folder_key(k)}={HIVE_NULL if v is None else folder_key(str(v))}" for k, v in zip(keys, values)))


class PartitionedWriter:
    """Hive-partitioned Parquet files under ``root`` by the columns ``keys`` (see the module
    docstring). Every batch must have the first batch's columns; types are cast to it."""

    def __init__(self, root: Path, keys: list[str]):
        self.root = Path(root)
        self.keys = list(keys)
        self.schema: pa.Schema | None = None
        self.writers: dict[tuple, pq.ParquetWriter] = {}

    def write(self, table: pa.Table) -> None:
        if self.schema is None:
            self.schema = pa.schema([f.with_nullable(True) for f in table.schema])
        if table.schema != self.schema:
            table = table.cast(self.schema)
        if not table.num_rows:
            return
        codes, values = self._partition_codes(table)
        present = np.unique(codes)
        for code in present:
            part = table if len(present) == 1 else table.filter(pa.array(codes == code))
            self._writer(values[int(code)]).write_table(part)

    def close(self) -> None:
        """Finish every file (their footers); the files are complete only after this."""
        writers, self.writers = self.writers, {}
        for w in writers.values():
            w.close()

    def __enter__(self) -> PartitionedWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _partition_codes(self, table: pa.Table) -> tuple[np.ndarray, dict[int, tuple]]:
        """Each row's partition as one integer, and each integer's key values."""
        codes = np.zeros(table.num_rows, np.int64)
        dictionaries = []
        for key in self.keys:
            encoded = pc.dictionary_encode(table[key].combine_chunks(), null_encoding="encode")
            dictionaries.append(encoded.dictionary.to_pylist())
            codes = codes * len(encoded.dictionary) + encoded.indices.to_numpy(zero_copy_only=False)
        values = {}
        for code in np.unique(codes).tolist():
            rest, combo = code, []
            for dictionary in reversed(dictionaries):
                rest, index = divmod(rest, len(dictionary))
                combo.append(dictionary[index])
            values[code] = tuple(reversed(combo))
        return codes, values

    def _writer(self, combo: tuple) -> pq.ParquetWriter:
        writer = self.writers.get(combo)
        if writer is None:
            folder = self.root / partition_folder(self.keys, combo)
            folder.mkdir(parents=True, exist_ok=True)
            # every column dictionary-encoded where Parquet finds it pays, except the ids and
            # row numbers (unique: a dictionary of them is built only to be abandoned)
            writer = pq.ParquetWriter(folder / FILE, self.schema, store_schema=False,
                                      use_dictionary=[n for n in self.schema.names if n not in (ID, ROW)])
            self.writers[combo] = writer
        return writer
