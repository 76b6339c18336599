"""``aequum bench proxy``: the BISG proxy step on ``--rows`` records (default 1M; ``--quick``:
200k), people drawn from the generated world (``engines.generators.bisg``: surnames as people
write them, 2010 census tracts), in batches of 250k as staging runs it.

Timed: loading the Census tables (once per process), the proxy step of staging (normalised
names joined to the surname list and the tracts to their composition, the posterior, the
max-probability race above the threshold, the fill), and the proxy engine's three estimators on
the result. Baseline in the same run: the same posterior computed in numpy from the people's
row indices in the Census tables (what is left without names to normalise or tables to join).
Reports records per second and the peak memory; the issue's target is 1M records
in under a minute on 2 cores. Then the whole staging of the same number of generated
applications (``data/specs/bisg.yaml``: read, proxy, validate, warehouse and lake) against the same
records staged with their race recorded. Also reports, from the same records' true race, the accuracy of
the hard assignment and the share of records it leaves out.
"""
from __future__ import annotations

import time

import numpy as np


def run(quick: bool = False, rows: list[int] | None = None) -> None:
    import polars as pl
    import pyarrow as pa

    from aequum.engines.core.proxy_spec import Proxy
    from aequum.engines.generators import bisg as world
    from aequum.engines.proxy.census import geography_tables, surname_table
    from aequum.engines.proxy.estimates import corrected, weighted
    from aequum.engines.proxy.stage import ProxyInputs, proxy_batch
    from aequum.flows.bench.measure import peak_rss_mb

    n = (rows or [200_000 if quick else 1_000_000])[0]
    print(f"aequum bench proxy: {n:,} records, BISG from surname and 2010 census tract")
    t0 = time.perf_counter()
    surname_table(), geography_tables("tract")
    load = time.perf_counter() - t0
    t = world.tables()
    rng = np.random.default_rng(0)
    race, surname, tract = world.draw_people(n, rng)
    names = np.char.capitalize(t.surnames[surname].astype(str))
    source = pa.table({"id": pa.array(np.arange(n).astype(str)), "surname": pa.array(names),
                       "tract": pa.array(t.tracts[tract])})
    proxy = Proxy(surname="surname", geography="tract", geography_column="tract", recorded=False)
    t1 = time.perf_counter()
    parts = [proxy_batch(source.slice(s, 250_000), "race", proxy, "id", s, ProxyInputs())
             for s in range(0, n, 250_000)]
    step = time.perf_counter() - t1
    t3 = time.perf_counter()
    world.posterior(surname, tract)  # the floor: the same posterior from row indices, no names or joins
    floor = time.perf_counter() - t3
    out = pl.from_arrow(pa.concat_tables(parts))
    p = out.select("p_white", "p_black").to_numpy()
    y = (rng.random(n) < np.where(world.FOLDED[race] == 1, 0.3, 0.15)).astype(float)
    t2 = time.perf_counter()
    weighted(y, p[:, 1], p[:, 0]), corrected(y, p[:, 1], p[:, 0])
    estimate = time.perf_counter() - t2
    assigned = out["_proxy_inferred"].to_numpy() == 1
    truth = np.array(world.RACES)[world.FOLDED[race]]
    inferred = out["race"].to_numpy()
    labels = dict(zip(proxy.values.values(), proxy.values.keys()))
    right = np.array([labels.get(v) for v in inferred[assigned]]) == truth[assigned]
    print(f"  Census tables loaded in {load:.1f} s (once per process)")
    print(f"  proxy step: {step:.1f} s for {n:,} records ({n / step:,.0f} records/s), peak RSS {peak_rss_mb():,.0f} MB")
    print(f"  baseline: the same posterior in numpy from the people's row indices in the tables (no names "
          f"to normalise, no joins): {floor:.1f} s; the proxy step {step / floor:.1f}x that")
    print(f"  weighted and corrected gap: {estimate:.2f} s")
    print(f"  hard assignment (threshold {proxy.threshold}): {assigned.mean():.1%} of records assigned, "
          f"{right.mean():.1%} of them to their true race")
    with_proxy, recorded = _staging(n)
    print(f"  staging {n:,} generated applications (data/specs/bisg.yaml) with the proxy: {with_proxy:.1f} s; "
          f"baseline, the same records with their race recorded (no proxy): {recorded:.1f} s "
          f"({with_proxy / recorded:.1f}x)")


def _staging(n: int) -> tuple[float, float]:
    """Seconds to stage ``n`` records of the bisg world with the proxy, and with race recorded."""
    import tempfile
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    from aequum.engines.core.spec import parse_spec
    from aequum.engines.generators import catalogue
    from aequum.flows.store.staging import stage
    from aequum.flows.store.warehouse import Warehouse
    raw = yaml.safe_load((Path(__file__).resolve().parents[2] / "data" / "specs" / "bisg.yaml").read_text())
    out = []
    with tempfile.TemporaryDirectory(prefix="aequum-bench-proxy-") as tmp:
        folder = Path(tmp)
        pq.write_table(pa.Table.from_batches(list(catalogue.batches("bisg", rows=n, seed=0))), folder / "records.parquet")
        recorded = {"name": "race", "column": "true_race", "protected_values": ["black", "hispanic"],
                    "reference_values": ["white"], "unmapped": "exclude"}
        for protected in (raw["protected"], [recorded]):
            spec = parse_spec({**raw, "name": "bench_proxy", "protected": protected, "engines": {"run": ["outcome"]},
                               "source": {"kind": "parquet", "path": str(folder / "records.parquet"), "id_column": "id"},
                               "ingest": {"reuse_unchanged_files": False}})
            with Warehouse(folder / f"w{len(out)}.duckdb") as wh:
                t0 = time.perf_counter()
                stage(spec, folder, wh, folder / f"lake{len(out)}")
                out.append(time.perf_counter() - t0)
    return out[0], out[1]
