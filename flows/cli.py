"""The ``aequum`` command line: generate, ingest, audit, runs, show, bench.

User errors (a bad spec, an unreadable source, a failed validation policy) print one clear
line and exit 2; only bugs print tracebacks.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from importlib import import_module
from pathlib import Path

from engines.core.models import ModelError
from engines.core.spec import SpecError
from flows.readers import SourceError
from flows.staging import DEFAULT_LAKE, IngestError
from flows.warehouse import DEFAULT_WAREHOUSE, WarehouseError

BENCHMARKS = {
    "ingest": "flows.bench_ingest",
    "cst": "flows.bench_cst",
    "raguel": "flows.bench_raguel",
    "fgce": "flows.bench_fgce",
    "cec": "flows.bench_cec",
}
USER_ERRORS = (SpecError, SourceError, IngestError, WarehouseError, ModelError, FileNotFoundError)


def _prefect_env() -> None:
    """Local Prefect defaults for a command-line run (the environment may override them).

    Without a ``PREFECT_API_URL``, one local Prefect server is started for this command and
    its address exported, so that the Dask worker processes report their task runs to the same
    server instead of each starting an ephemeral one of its own.
    """
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_HOME", str(Path(tempfile.gettempdir()) / f"aequum-prefect-{os.getuid()}"))
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    if not os.environ.get("PREFECT_API_URL"):
        import atexit

        from prefect.server.api.server import SubprocessASGIServer

        server = SubprocessASGIServer()
        server.start(timeout=180)
        atexit.register(server.stop)
        os.environ["PREFECT_API_URL"] = server.api_url


def _print_table(table, max_rows: int = 50) -> None:
    import polars as pl

    with pl.Config(tbl_rows=max_rows, tbl_cols=20, fmt_str_lengths=60, tbl_width_chars=160):
        print(pl.from_arrow(table))


def cmd_generate(args) -> int:
    from flows.generate import generate_to_file

    out = generate_to_file(args.name, args.out, rows=args.rows, seed=args.seed, fmt=args.format,
                           progress=lambda m: print(m, file=sys.stderr))
    print(out)
    return 0


def cmd_ingest(args) -> int:
    from engines.core.spec import load_spec
    from flows.staging import stage
    from flows.warehouse import Warehouse

    spec_file = Path(args.spec).resolve()
    spec = load_spec(spec_file)
    with Warehouse(args.warehouse) as wh:
        ref = stage(spec, spec_file.parent, wh, Path(args.lake),
                    progress=lambda m: print(m, file=sys.stderr))
    print(f"dataset version {ref.version}: {ref.rows_staged:,} rows staged, "
          f"{ref.rows_quarantined:,} quarantined{' (reused)' if ref.reused else ''}")
    print(f"warehouse: {args.warehouse} table {ref.staged_table}; lake: {ref.lake_path}")
    return 0


def cmd_audit(args) -> int:
    _prefect_env()
    from flows.audit import run_audit
    from flows.warehouse import Warehouse

    engines = args.engines.split(",") if args.engines else None
    run_id = run_audit(args.spec, warehouse=args.warehouse, lake=args.lake, run_id=args.run_id,
                       engines=engines, dask_address=args.dask_address, workers=args.workers)
    with Warehouse(args.warehouse, read_only=True) as wh:
        run = wh.run(run_id)
        engines_status = wh.engine_status(run_id)
    print(f"\nrun {run_id}: {run['status']}")
    for name, e in sorted(engines_status.items()):
        print(f"  {name:8s} {e['status']:9s} {e['seconds'] or 0:7.2f} s  {e['tables']}"
              + (f"  {e['error']}" if e["error"] else ""))
    print(f"results: DuckDB warehouse {Path(args.warehouse).resolve()} (schema audit, run_id = '{run_id}')")
    print(f"  e.g. aequum show outcome_gaps --run-id {run_id}")
    return 0 if run["status"] == "succeeded" else 1


def cmd_runs(args) -> int:
    from flows.warehouse import Warehouse

    with Warehouse(args.warehouse, read_only=True) as wh:
        _print_table(wh.runs(args.spec, args.limit), args.limit)
    return 0


def cmd_show(args) -> int:
    from flows.warehouse import Warehouse

    with Warehouse(args.warehouse, read_only=True) as wh:
        if args.table not in wh.table_names():
            raise WarehouseError(f"no table audit.{args.table}; tables: {', '.join(wh.table_names())}")
        run_id = args.run_id
        if run_id is None:
            runs = wh.runs(limit=1).to_pylist()
            run_id = runs[0]["run_id"] if runs else None
        _print_table(wh.result(args.table, run_id), args.limit)
    return 0


def cmd_bench(args) -> int:
    module = import_module(BENCHMARKS[args.name])
    module.run(quick=args.quick)
    return 0


def cmd_train(args) -> int:
    from engines.matching.cec_training import TrainConfig
    from flows.train import run_train

    config = TrainConfig(epochs=args.epochs, lambda_eo=args.lambda_eo, lambda_cec=args.lambda_cec,
                         steps=args.steps, seed=args.seed)
    run_id, table = run_train(args.spec, args.objective, folds=args.folds, config=config,
                              attribute=args.attribute, warehouse=args.warehouse, lake=args.lake,
                              out_dir=args.out_dir, run_id=args.run_id,
                              progress=lambda m: print(m, file=sys.stderr))
    import polars as pl

    summary = pl.from_arrow(table).filter(pl.col("statistic") != "fold")
    _print_table(summary.drop(["attribute", "fold", "epochs", "model_path"]).to_arrow())
    print(f"run {run_id}: table audit.cec_training in {Path(args.warehouse).resolve()}")
    for path in summary["model_path"].drop_nulls():
        print(f"  model: {path}  (spec: model: {{kind: mlp, path: ..., hidden: [128, 64], features: same}})")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aequum", description="Audit automated decisions for discrimination.")
    sub = p.add_subparsers(dest="command", required=True)

    def wh_args(sp):
        sp.add_argument("--warehouse", default=os.environ.get("AEQUUM_WAREHOUSE", str(DEFAULT_WAREHOUSE)),
                        help="DuckDB warehouse file (default %(default)s)")

    g = sub.add_parser("generate", help="write a built-in dataset (loan, cec_synthetic, hmda)")
    g.add_argument("name", choices=["loan", "cec_synthetic", "hmda"])
    g.add_argument("--rows", type=int, default=None, help="rows (default: the generator's)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--format", choices=["parquet", "csv"], default="parquet")
    g.add_argument("--out", default=None, help="output file (default data/generated/NAME.FORMAT)")
    g.set_defaults(func=cmd_generate)

    i = sub.add_parser("ingest", help="validate and stage a spec's source into the warehouse and lake")
    i.add_argument("--spec", required=True)
    wh_args(i)
    i.add_argument("--lake", default=str(DEFAULT_LAKE))
    i.set_defaults(func=cmd_ingest)

    a = sub.add_parser("audit", help="run a full audit of a spec (ingest + engines + run record)")
    a.add_argument("--spec", default="data/specs/loan.yaml", help="audit spec (default %(default)s)")
    wh_args(a)
    a.add_argument("--lake", default=str(DEFAULT_LAKE))
    a.add_argument("--run-id", default=None, help="re-use a run id (its old rows are replaced)")
    a.add_argument("--engines", default=None, help="comma-separated engines (default: the spec's)")
    a.add_argument("--dask-address", default=os.environ.get("AEQUUM_DASK_ADDRESS"),
                   help="an existing Dask scheduler (default: a LocalCluster)")
    a.add_argument("--workers", type=int, default=None, help="LocalCluster worker processes")
    a.set_defaults(func=cmd_audit)

    r = sub.add_parser("runs", help="list runs and their status")
    wh_args(r)
    r.add_argument("--spec", default=None)
    r.add_argument("--limit", type=int, default=20)
    r.set_defaults(func=cmd_runs)

    s = sub.add_parser("show", help="print an audit table for a run (default: the latest)")
    s.add_argument("table")
    wh_args(s)
    s.add_argument("--run-id", default=None)
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(func=cmd_show)

    t = sub.add_parser("train", help="train the CEC paper's MLP with a fair objective (k-fold compared)")
    t.add_argument("--spec", required=True, help="audit spec (label, model.features, financial features)")
    t.add_argument("--objective", nargs="+", choices=["plain", "eo", "cec"], default=["cec"],
                   help="plain: BCE; eo: + λ_EO·L_EO; cec: + λ_EO·L_EO + λ_CEC·L_CEC (several: compared)")
    t.add_argument("--folds", type=int, default=5)
    t.add_argument("--epochs", type=int, default=30)
    t.add_argument("--lambda-eo", type=float, default=1.0)
    t.add_argument("--lambda-cec", type=float, default=1.0)
    t.add_argument("--steps", type=int, default=32, help="integrated-gradient steps T")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--attribute", default=None, help="protected attribute (default: the spec's first)")
    t.add_argument("--out-dir", default="data/models", help="model files (default %(default)s)")
    t.add_argument("--run-id", default=None)
    wh_args(t)
    t.add_argument("--lake", default=str(DEFAULT_LAKE))
    t.set_defaults(func=cmd_train)

    b = sub.add_parser("bench", help="run a benchmark")
    b.add_argument("name", choices=sorted(BENCHMARKS))
    b.add_argument("--quick", action="store_true", help="smaller sizes")
    b.set_defaults(func=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except USER_ERRORS as exc:
        print(f"aequum: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aequum: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
