"""``aequum generate``: stream a built-in dataset to Parquet or CSV without holding it in memory.

The HMDA generator's ground truth (which records the planted mechanism harmed) is written
beside the data as ``<name>_truth.parquet``, with the mechanism's description as JSON
(``<name>_mechanism.json``). A world other than the default (``--world``, the generators with worlds)
is in the default file name: ``data/generated/hmda_null.parquet``; so is the national shape of the
lending market (``national``: ``data/generated/hmda_market_national.parquet``).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from aequum.engines.generators import catalogue

GENERATED = Path("data/generated")


class _Sink:
    """A streaming Parquet or CSV (comma, unquoted like the public LAR) writer."""

    def __init__(self, path: Path, schema: pa.Schema, fmt: str):
        self.fmt = fmt
        if fmt == "parquet":
            self.writer = pq.ParquetWriter(path, schema, compression="zstd")
        else:
            opts = pacsv.WriteOptions(include_header=True, quoting_style="none"
                                      if all(pa.types.is_string(t) for t in schema.types) else "needed")
            self.writer = pacsv.CSVWriter(path, schema, write_options=opts)

    def write(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch)

    def close(self) -> None:
        self.writer.close()


def generate_to_file(name: str, out: str | Path | None = None, rows: int | None = None, seed: int = 0,
                     fmt: str = "parquet", batch_rows: int = 250_000,
                     progress: Callable[[str], None] | None = None,
                     world: str = catalogue.DEFAULT_WORLD, effect: float = 1.0, national: bool = False) -> Path:
    """Write generator ``name`` (in ``world``, its penalty times ``effect``; ``national``: the
    lending market's national shape, ``catalogue.shape``) to ``out`` (default
    ``data/generated/<name>.<fmt>``, ``<name>_<world>.<fmt>`` for a world other than the default,
    ``…_x<effect>`` for another effect, ``…_national`` for the national shape), batch by batch:
    the memory it takes does not grow with ``rows``."""
    say = progress or (lambda _m: None)
    catalogue.check_world(name, world, effect)
    catalogue.shape(name, national)
    stem = (f"{name}_national" if national else name) + ("" if world == catalogue.DEFAULT_WORLD else f"_{world}")
    if effect != 1.0:
        stem += f"_x{effect:g}"
    path = Path(out) if out else GENERATED / f"{stem}.{fmt}"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    truth_path = path.with_name(f"{path.stem}_truth.parquet")
    truth_tmp = truth_path.with_name(f".{truth_path.name}.tmp")
    t0 = time.perf_counter()
    n = 0
    sink = truth = None
    try:
        for batch, truth_batch in catalogue.stream(name, rows=rows, seed=seed, batch_rows=batch_rows, world=world,
                                                   effect=effect, national=national):
            if sink is None:
                sink = _Sink(tmp, batch.schema, fmt)
            sink.write(batch)
            if truth_batch is not None:
                if truth is None:
                    truth = pq.ParquetWriter(truth_tmp, truth_batch.schema, compression="zstd")
                truth.write_batch(truth_batch)
            n += batch.num_rows
            say(f"{name}: {n:,} rows ({n / max(time.perf_counter() - t0, 1e-9):,.0f} rows/s)")
    except BaseException:
        for w in (sink, truth):
            if w is not None:
                w.close()
        tmp.unlink(missing_ok=True)
        truth_tmp.unlink(missing_ok=True)
        raise
    sink.close()
    tmp.replace(path)
    if truth is not None:
        truth.close()
        truth_tmp.replace(truth_path)
        mechanism = catalogue.mechanism(name, world, effect, national)
        if mechanism is not None:
            path.with_name(f"{path.stem}_mechanism.json").write_text(json.dumps(mechanism, indent=2))
    say(f"{name}: wrote {n:,} rows to {path} in {time.perf_counter() - t0:.1f} s")
    return path
