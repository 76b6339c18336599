"""The ``aequum`` command line: generate, ingest, audit, runs, show, bench.

User errors (a bad spec, an unreadable source, a failed validation policy) print one clear
line and exit 2; only bugs print tracebacks.
"""
from __future__ import annotations

import argparse
import atexit
import inspect
import logging
import os
import sys
import tempfile
from importlib import import_module
from pathlib import Path

from aequum.flows.store.guard import check_output, check_run_id, user_errors
from aequum.flows.store.paths import DEFAULT_LAKE, DEFAULT_WAREHOUSE

# the HMDA generator's worlds (engines.generators.hmda.WORLDS), here so that parsing the command
# line imports neither numpy nor Arrow
WORLDS = {
    "null": "no discriminatory term",
    "dti_penalty": "DTI read 5 points higher for Black and for Hispanic applicants",
    "score_penalty": "0.45 on the risk of Black and of Hispanic applicants, through no input",
    "intersection": "0.45 on the risk of Black women only",
    "redlining": "0.45 on the risk of applications from tracts more than half minority",
    "input_penalty": "LTV read 8 points higher for Asian applicants",
    "lender_redlining": "five named lenders take 75% fewer applications from tracts more than half minority",
    "pricing_penalty": "0.25 points on the rate spread of Black and of Hispanic borrowers' loans",
}
# the worlds only the lending-market generators (hmda_market, hmda_single: engines.generators.lar_worlds) add
MARKET_WORLDS = {
    "named_score_penalty": "0.45 on the denial score of Black and of Hispanic applicants at three named lenders",
    "named_pricing_penalty": "0.30 points on Black and Hispanic borrowers' rate spread at three named lenders",
    "dti_cap": "a named lender denies every application with a DTI of 50% or more (fair otherwise)",
}
GENERATORS = ["loan", "cec_synthetic", "hmda", "hmda_lender", "hmda_market", "hmda_market_lender", "hmda_single",
              "hmda_single_lender", "bisg"]  # engines.generators.catalogue.NAMES
DEFAULT_WORLD = "dti_penalty"
LAKE_HELP = "the Parquet lake the staged records are written to and read from (default %(default)s)"
CHECK_SOURCE = ("read and fingerprint the source even when its files are unchanged since staged (otherwise "
                "the staged copy is reused)")
TRUST_MTIME = ("reuse the staged copy of a source whose files have the sizes and modification times they had "
               "when staged, without hashing their bytes (faster; an edit that keeps both goes unseen)")

BENCHMARKS = {
    "ingest": "aequum.flows.bench.ingest",
    "proxy": "aequum.flows.bench.proxy",
    "cst": "aequum.flows.bench.cst",
    "raguel": "aequum.flows.bench.raguel",
    "fgce": "aequum.flows.bench.fgce",
    "pba": "aequum.flows.bench.pba",
    "cec": "aequum.flows.bench.cec",
    "detection": "aequum.flows.bench.detection",
    "audit": "aequum.flows.bench.audit",
    "validity": "aequum.flows.bench.validity",
    "fairlending": "aequum.flows.bench.fairlending",
    "regression": "aequum.flows.bench.regression",
    "lenders": "aequum.flows.bench.lenders",
    "national": "aequum.flows.bench.national",
}


def _help_text(text: str) -> str:
    """``text`` as argparse help: its ``%`` signs doubled (argparse formats help with ``%``)."""
    return text.replace("%", "%%")


def _prefect_env() -> None:
    """Local Prefect defaults for a command-line run (the environment may override them). The
    flow's Prefect API (a configured server, or a temporary one that the Dask workers report
    to) is set up by ``flows.run_control.flow_api``."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # and the client's: no "Prefect collects anonymous usage data" notice on a first run in a terminal
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_HOME", str(Path(tempfile.gettempdir()) / f"aequum-prefect-{os.getuid()}"))
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")


def _say(message: str) -> None:
    print(f"aequum: {message}", file=sys.stderr)


def _print_table(table, max_rows: int = 50, hint: str | None = None) -> None:
    from aequum.flows.commands.show import print_table

    print_table(table.slice(0, max_rows), hint=hint)


def cmd_generate(args) -> int:
    from aequum.engines.generators import catalogue

    if args.national and args.name == "hmda":  # the national LAR is the lending market's
        args.name = "hmda_market"
    if (args.world != DEFAULT_WORLD or args.effect != 1.0) and args.name not in catalogue.WORLD_GENERATORS:
        print(f"aequum: error: --world and --effect are for the {', '.join(catalogue.WORLD_GENERATORS)} generators, "
              f"not {args.name}", file=sys.stderr)
        return 2
    if not (args.effect >= 0 and args.effect != float("inf")):
        print(f"aequum: error: --effect must be a non-negative number, got {args.effect}", file=sys.stderr)
        return 2
    try:
        catalogue.check_world(args.name, args.world, args.effect)
    except ValueError as exc:  # a world the generator lacks
        print(f"aequum: error: {exc}", file=sys.stderr)
        return 2
    from aequum.flows.commands.generate import generate_to_file

    if args.national and args.name not in catalogue.NATIONAL:
        print(f"aequum: error: --national is for the {', '.join(catalogue.NATIONAL)} generators (hmda --national: "
              f"hmda_market --national), not {args.name}", file=sys.stderr)
        return 2
    if args.out is not None:
        check_output(args.out, "--out", os.environ.get("AEQUUM_WAREHOUSE", str(DEFAULT_WAREHOUSE)), [DEFAULT_LAKE])
    out = generate_to_file(args.name, args.out, rows=args.rows, seed=args.seed, fmt=args.format,
                           progress=lambda m: print(m, file=sys.stderr), world=args.world, effect=args.effect,
                           national=args.national)
    print(out)
    return 0


def cmd_ingest(args) -> int:
    from aequum.engines.core.spec import load_spec
    from aequum.flows.store.staging import stage
    from aequum.flows.store.warehouse import Warehouse

    spec_file = Path(args.spec).resolve()
    spec = load_spec(spec_file)
    with Warehouse(args.warehouse) as wh:
        ref = stage(spec, spec_file.parent, wh, Path(args.lake),
                    progress=lambda m: print(m, file=sys.stderr), check_source=args.check_source,
                    trust_mtime=args.trust_mtime)
    print(f"dataset version {ref.version}: {ref.rows_staged:,} rows staged, "
          f"{ref.rows_quarantined:,} quarantined{' (reused)' if ref.reused else ''}")
    print(f"warehouse: {args.warehouse} table {ref.staged_table}; lake: {ref.lake_path}")
    return 0


def _print_conclusion(record: dict, findings: list[dict]) -> None:
    """The conclusion and the ranked findings (at most 15 lines; every finding: ``aequum show
    findings``, the detection rows among them: ``aequum show detection``)."""
    import json

    from aequum.flows.reporting.conclusion import terminal_lines

    try:
        parameters = json.loads(record.get("parameters") or "{}")
    except json.JSONDecodeError:
        parameters = {}
    print("\n".join(terminal_lines(record, parameters, findings)))


def cmd_audit(args) -> int:
    from aequum.flows.preflight import check_settings, preflight
    from aequum.flows.prefect_api import TemporaryAPI
    from aequum.flows.run_control import ending_on_interrupt, quiet_api_logging
    from aequum.flows.store.warehouse import Warehouse
    from aequum.flows.terminal import Terminal

    engines = [e.strip() for e in args.engines.split(",")] if args.engines is not None else None
    if args.run_id is not None:
        check_run_id(args.run_id)
    check_settings(args.warehouse, args.lake, args.workers, args.dask_address, os.environ.get("PREFECT_API_URL"))
    # a bad spec, source or setting fails here, before Prefect and Dask start
    spec = preflight(args.spec, engines, args.warehouse)
    check_outputs(args, spec)
    _prefect_env()
    quiet_api_logging()
    # SIGINT or SIGTERM from here on ends the run abandoned within seconds, with every process
    # it started (flows.run_control)
    with Terminal("audit"), ending_on_interrupt(args.warehouse, args.lake):
        # a temporary Prefect API takes seconds to start: it starts now, while Prefect and Dask
        # are imported and the cluster starts (stopped unused if the settings name an API)
        server = None if os.environ.get("PREFECT_API_URL") else TemporaryAPI()
        try:
            from aequum.flows.audit import run_audit

            run_id = run_audit(args.spec, warehouse=args.warehouse, lake=args.lake, run_id=args.run_id,
                               engines=engines, dask_address=args.dask_address, workers=args.workers,
                               server=server, check_source=args.check_source,
                               dashboard=args.dashboard or None, trust_mtime=args.trust_mtime)
        finally:
            if server is not None:
                server.stop()
    with Warehouse(args.warehouse, read_only=True, wait=args.wait, notify=_say) as wh:
        run = wh.run(run_id)
        engines_status = wh.engine_status(run_id)
        table_names = wh.table_names()
        findings = wh.query("report/findings", {"run_id": run_id}).to_pylist() if "findings" in table_names else []
    print(f"\nrun {run_id}: {run['status']}")
    for name, e in sorted(engines_status.items()):
        print(f"  {name:8s} {e['status']:9s} {e['seconds'] or 0:7.2f} s"
              + (f"  {e['error']}" if e["error"] else ""))
    if findings:
        _print_conclusion(run, findings)
    print(f"results: DuckDB warehouse {Path(args.warehouse).resolve()} (schema audit, run_id = '{run_id}'); "
          f"every finding: aequum show findings --run-id {run_id}")
    if args.report is not None:
        from aequum.flows.commands.report import write_report

        sys.stdout.flush()
        path = write_report(args.warehouse, run_id, args.report or None, wait=args.wait, notify=_say,
                            findings=findings if "findings" in table_names else None, say=_say)
        print(f"report: {path.resolve()}")
    return 0 if run["status"] == "succeeded" else 1


def check_outputs(args, spec) -> None:
    """Before the run: ``--report FILE`` is none of the files the run keeps or reads, and a
    ``--run-id`` of another spec is refused (checked again when the run starts)."""
    from aequum.flows.store.readers import source_files
    from aequum.flows.store.warehouse import Warehouse

    spec_file = Path(args.spec).resolve()
    if args.report:
        check_output(args.report, "--report", args.warehouse, [args.lake],
                     [spec_file, *source_files(spec.source, spec_file.parent)])
    if args.run_id is not None and Path(args.warehouse).is_file():
        with Warehouse(args.warehouse, read_only=True, wait=args.wait, notify=_say) as wh:
            if "runs" in wh.table_names():
                wh.check_run_owner(args.run_id, spec.name)


def cmd_runs(args) -> int:
    from aequum.flows.store.warehouse import Warehouse

    with Warehouse(args.warehouse, read_only=True, wait=args.wait, notify=_say) as wh:
        runs = wh.runs(args.spec, args.limit)
    if args.format == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(runs, sys.stdout.buffer)
    else:
        _print_table(runs, args.limit, hint="--format csv shows all")
    return 0


def cmd_show(args) -> int:
    from aequum.flows.commands.show import show

    if args.run_id is not None:
        check_run_id(args.run_id)

    return show(args, notify=_say)


def cmd_bounds(args) -> int:
    from aequum.flows.commands.bounds import bound_entries, bounds_yaml

    if args.run_id is not None:
        check_run_id(args.run_id, "run id")
    entries, run = bound_entries(args.warehouse, args.control, args.run_id, wait=args.wait, notify=_say,
                                 outcomes=args.outcome)
    print(bounds_yaml(entries, run, args.control), end="")
    return 0


def cmd_panel(args) -> int:
    from aequum.flows.commands.panel import load_panel

    written, blank = load_panel(args.warehouse, args.file, args.lei_column, args.name_column, wait=args.wait,
                                notify=_say)
    print(f"{written:,} lenders' names in audit.lender_panel"
          + (f"; {blank:,} rows without an LEI or a name left out" if blank else ""))
    return 0


def cmd_report(args) -> int:
    from aequum.flows.commands.report import write_cases, write_report

    if args.run_id is not None:
        check_run_id(args.run_id, "run id")
    if args.cases is not None:
        for path in write_cases(args.warehouse, args.cases, args.run_id, args.out, args.limit, args.pdf,
                                wait=args.wait, notify=_say):
            print(path.resolve())
        return 0
    path = write_report(args.warehouse, args.run_id, args.out, wait=args.wait, notify=_say, say=_say, pdf=args.pdf)
    print(path.resolve())
    if args.pdf:
        print(path.with_suffix(".pdf").resolve())
    return 0


def cmd_bench(args) -> int:
    module = import_module(BENCHMARKS[args.name])
    extra = {name: getattr(args, name) for name in ("seeds", "effects", "worlds", "findings_file")
             if getattr(args, name)}
    if extra and args.name != "validity":
        print(f"aequum: error: {', '.join('--' + n.replace('_', '-') for n in extra)} are for bench validity",
              file=sys.stderr)
        return 2
    if args.rows and "rows" not in inspect.signature(module.run).parameters:
        sized = sorted(n for n, m in BENCHMARKS.items()
                       if "rows" in inspect.signature(import_module(m).run).parameters)
        print(f"aequum: error: bench {args.name} has fixed sizes (--quick for smaller ones); "
              f"--rows is for bench {', '.join(sized)}", file=sys.stderr)
        return 2
    if args.scheduler and args.name != "regression":
        print("aequum: error: --scheduler is for bench regression", file=sys.stderr)
        return 2
    module.run(quick=args.quick, **({"rows": args.rows} if args.rows else {}),
               **({"scheduler": args.scheduler} if args.scheduler else {}), **extra)
    return 0


def cmd_train(args) -> int:
    from aequum.engines.matching.cec.training import TrainConfig
    from aequum.flows.commands.train import run_train

    if args.run_id is not None:
        check_run_id(args.run_id)
    config = TrainConfig(epochs=args.epochs, lambda_eo=args.lambda_eo,
                         lambda_cec=1.0 if args.lambda_cec is None else args.lambda_cec,
                         steps=args.steps, cec_pairs=args.cec_pairs, seed=args.seed)
    run_id, table = run_train(args.spec, args.objective, folds=args.folds, config=config,
                              attribute=args.attribute, warehouse=args.warehouse, lake=args.lake,
                              out_dir=args.out_dir, run_id=args.run_id,
                              progress=lambda m: print(m, file=sys.stderr),
                              max_f1_loss=args.max_f1_loss, lambdas=args.lambdas, records=args.records,
                              spec_budget=args.lambda_cec is None)
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
        sp.add_argument("--wait", type=float, default=30.0,
                        help="seconds to wait for a warehouse another process is writing (default %(default)s)")

    g = sub.add_parser("generate", help=f"write a built-in dataset ({', '.join(GENERATORS)})")
    g.add_argument("name", choices=GENERATORS, help="the generator")
    g.add_argument("--rows", type=int, default=None, help="rows (default: the generator's)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default %(default)s)")
    g.add_argument("--format", choices=["parquet", "csv"], default="parquet", help="file format (default %(default)s)")
    g.add_argument("--out", default=None,
                   help="output file (default data/generated/NAME.FORMAT, NAME_WORLD.FORMAT for another world)")
    g.add_argument("--world", choices=[*WORLDS, *MARKET_WORLDS], default=DEFAULT_WORLD, metavar="WORLD",
                   help="hmda, hmda_market, hmda_single (and their _lender twins): the planted mechanism (default "
                        "%(default)s): " + _help_text("; ".join(f"{w}: {d}" for w, d in WORLDS.items())
                                                         + "; hmda_market only: "
                                                         + "; ".join(f"{w}: {d}" for w, d in MARKET_WORLDS.items())))
    g.add_argument("--effect", type=float, default=1.0,
                   help="the world's penalty times this (default 1; 0.5 for half)")
    g.add_argument("--national", action="store_true",
                   help="hmda_market (hmda), hmda_market_lender: a LAR of national shape, 5,000 lenders of Zipf "
                        "sizes in 400 markets and 70,000 tracts, at any --rows, written batch by batch")
    g.set_defaults(func=cmd_generate)

    i = sub.add_parser("ingest", help="validate and stage a spec's source into the warehouse and lake")
    i.add_argument("--spec", required=True, help="audit spec (YAML)")
    wh_args(i)
    i.add_argument("--lake", default=str(DEFAULT_LAKE), help=LAKE_HELP)
    i.add_argument("--check-source", action="store_true", help=CHECK_SOURCE)
    i.add_argument("--trust-mtime", action="store_true", help=TRUST_MTIME)
    i.set_defaults(func=cmd_ingest)

    a = sub.add_parser("audit", help="run a full audit of a spec (ingest + engines + run record)")
    a.add_argument("--spec", default="data/specs/loan.yaml", help="audit spec (default %(default)s)")
    wh_args(a)
    a.add_argument("--lake", default=str(DEFAULT_LAKE), help=LAKE_HELP)
    a.add_argument("--run-id", default=None, help="re-use a run id (its old rows are replaced)")
    a.add_argument("--engines", default=None, help="comma-separated engines (default: the spec's)")
    a.add_argument("--dask-address", default=os.environ.get("AEQUUM_DASK_ADDRESS"),
                   help="an existing Dask scheduler (default: a LocalCluster)")
    a.add_argument("--workers", type=int, default=None, help="LocalCluster worker processes")
    a.add_argument("--check-source", action="store_true", help=CHECK_SOURCE)
    a.add_argument("--trust-mtime", action="store_true", help=TRUST_MTIME)
    a.add_argument("--dashboard", action="store_true",
                   help="serve the Dask dashboard of the run's LocalCluster, on 127.0.0.1 only (off by default; "
                        "AEQUUM_DASHBOARD=1 too)")
    a.add_argument("--report", nargs="?", const="", default=None, metavar="FILE",
                   help="write the run's HTML report at the end (default file report-RUN_ID.html)")
    a.set_defaults(func=cmd_audit)

    r = sub.add_parser("runs", help="list runs and their status")
    wh_args(r)
    r.add_argument("--spec", default=None, help="only the runs of this spec name")
    r.add_argument("--limit", type=int, default=20, help="runs listed, latest first (default %(default)s)")
    r.add_argument("--format", choices=["table", "csv"], default="table",
                   help="table: fitted to the terminal; csv: every column (default %(default)s)")
    r.set_defaults(func=cmd_runs)

    s = sub.add_parser("show", help="print an audit table for a run (default: the latest), or "
                       "write it as CSV / Parquet; without TABLE, list the run's tables")
    s.add_argument("table", nargs="?", default=None,
                   help="an audit table or view, e.g. outcome_gaps, findings, quarantine (default: list the run's tables)")
    wh_args(s)
    s.add_argument("--run-id", default=None, help="the run (default: the latest; aequum runs lists them)")
    s.add_argument("--limit", type=int, default=50, help="rows printed (files get every row)")
    s.add_argument("--format", choices=["table", "csv", "parquet", "xlsx"], default="table",
                   help="table: fitted to the terminal; csv, parquet, xlsx (a spreadsheet): every row, "
                   "each group code's label beside it (default %(default)s)")
    s.add_argument("--out", default=None, help="output file for csv / parquet / xlsx (csv: default stdout)")
    s.set_defaults(func=cmd_show)

    bd = sub.add_parser("bounds", help="print decision.bounds entries for a public-data screening: the strength "
                        "of an input the public data lack, measured on a lender's own records")
    bd.add_argument("--control", required=True, help="the recorded input, a control of the internal audit "
                    "(e.g. credit_score)")
    wh_args(bd)
    bd.add_argument("--run-id", default=None, help="the internal audit's run (default: the latest that measured it)")
    bd.add_argument("--outcome", action="append", default=None,
                    help="only this outcome (denial, a pricing field); repeat for several (default: every one)")
    bd.set_defaults(func=cmd_bounds)

    pn = sub.add_parser("panel", help="load lenders' names by LEI (the HMDA reporter panel) into the warehouse, "
                        "for the per-lender findings and the report")
    pn.add_argument("file", help="the panel: CSV (comma or pipe) or Parquet")
    pn.add_argument("--lei-column", default="lei", help="its LEI column (default %(default)s)")
    pn.add_argument("--name-column", default="respondent_name", help="its name column (default %(default)s)")
    wh_args(pn)
    pn.set_defaults(func=cmd_panel)

    rp = sub.add_parser("report", help="write a run's self-contained HTML report (default: the latest run)")
    rp.add_argument("run_id", nargs="?", default=None, help="the run (default: the latest)")
    wh_args(rp)
    rp.add_argument("--out", default=None, help="HTML file (default report-RUN_ID.html; the cases of its "
                    "flagged findings go beside it, in REPORT-cases/); with --cases, the exhibit's files' "
                    "name without extension (default cases-RUN_ID-RANK)")
    rp.add_argument("--cases", default=None, metavar="FINDING",
                    help="write the matched-pair exhibit of one finding instead of the report: its rank in "
                    "the run (audit.findings.rank, as the report and `aequum show findings` list it), a "
                    "CST/ST/CF or CEC finding; each case's complainant beside its comparators of both "
                    "groups, feature by feature, as CSV and as a printable HTML page; a flagged lender's "
                    "finding: its file review (its refused protected applicants beside the nearest approved "
                    "reference applicants of the same lender and product)")
    rp.add_argument("--limit", type=int, default=50,
                    help="with --cases: the cases exhibited, the surest first (default %(default)s)")
    rp.add_argument("--pdf", action="store_true",
                    help="also print the report (with --cases: the exhibit) to PDF with Chromium headless "
                    "(Debian's chromium)")
    rp.set_defaults(func=cmd_report)

    t = sub.add_parser("train", help="train the CEC paper's MLP with a fair objective (k-fold compared)")
    t.add_argument("--spec", required=True, help="audit spec (label, model.features, financial features)")
    t.add_argument("--objective", nargs="+", choices=["plain", "eo", "cec"], default=["cec"],
                   help="plain: BCE; eo: + λ_EO·L_EO; cec: + λ_EO·L_EO + λ_CEC·L_CEC (several: compared)")
    t.add_argument("--folds", type=int, default=5, help="cross-validation folds (default %(default)s)")
    t.add_argument("--epochs", type=int, default=30, help="training epochs (default %(default)s)")
    t.add_argument("--lambda-eo", type=float, default=1.0, help="λ_EO, the equalized-odds loss's weight (default %(default)s)")
    t.add_argument("--lambda-cec", type=float, default=None,
                   help="a fixed λ_CEC (default 1, or the spec's F1 budget's search when it sets one)")
    t.add_argument("--steps", type=int, default=8, help="integrated-gradient steps T inside the CEC loss (stratified random points)")
    t.add_argument("--cec-pairs", type=int, default=32, help="matched pairs per batch in the CEC loss (0: all)")
    t.add_argument("--seed", type=int, default=0, help="random seed (default %(default)s)")
    t.add_argument("--max-f1-loss", type=float, default=None, metavar="LOSS",
                   help="choose λ_CEC per fold by validation: the lowest-CEC λ whose F1 is at most LOSS "
                        "below the plain model's (default: the spec's engines.cec.training.max_f1_loss; "
                        "none: the fixed --lambda-cec)")
    t.add_argument("--lambdas", type=float, nargs="+", default=None,
                   help="the λ_CEC grid of the search (default: the spec's, 0.01 0.03 0.1 0.3 1)")
    t.add_argument("--records", type=int, default=None,
                   help="train on a sample of N records stratified by label and group (default: the spec's; all)")
    t.add_argument("--attribute", default=None, help="protected attribute (default: the spec's first)")
    t.add_argument("--out-dir", default="data/models", help="model files (default %(default)s)")
    t.add_argument("--run-id", default=None, help="re-use a run id (its old rows are replaced)")
    wh_args(t)
    t.add_argument("--lake", default=str(DEFAULT_LAKE), help=LAKE_HELP)
    t.set_defaults(func=cmd_train)

    b = sub.add_parser("bench", help="run a benchmark")
    b.add_argument("name", choices=sorted(BENCHMARKS), help="the benchmark")
    b.add_argument("--quick", action="store_true", help="smaller sizes")
    b.add_argument("--rows", type=int, nargs="+", default=None,
                   help="the sizes to run (audit, fairlending, national, regression; raguel, validity, lenders and proxy: "
                        "the first)")
    b.add_argument("--seeds", type=int, nargs="+", default=None, help="validity: the generator seeds (default 1)")
    b.add_argument("--effects", type=float, nargs="+", default=None,
                   help="validity: the worlds' penalties times each of these (default 1)")
    b.add_argument("--worlds", nargs="+", default=None, choices=list(WORLDS), metavar="WORLD",
                   help="validity: the worlds to run (default all)")
    b.add_argument("--findings", dest="findings_file", default=None, metavar="FILE",
                   help="validity: write every finding with its truth to FILE (JSON lines)")
    b.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="regression: run the logit's passes on the workers of the Dask scheduler at ADDRESS "
                        "(tcp://HOST:PORT, 2 or more workers started with `dask worker`), not a LocalCluster")
    b.set_defaults(func=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except Exception as exc:
        if not isinstance(exc, user_errors()):
            raise
        print(f"aequum: error: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:  # SIGINT; SIGTERM, which Prefect raises as its TerminationSignal in a flow
        if not isinstance(exc, KeyboardInterrupt) and type(exc).__name__ != "TerminationSignal":
            raise
        from aequum.flows.run_control import interrupted_line

        print(interrupted_line(), file=sys.stderr)
        return 130


def program() -> None:
    """``aequum`` as a command (the console script, ``python -m aequum.flows.commands.cli``): ``main``,
    then an exit that skips the interpreter's teardown of the loaded libraries, 1.3–1.6 s in
    native code (measured on a small audit, of a fixed cost of about 10 s). The exit runs as
    the last exit handler (registered before Prefect and Dask are imported, and exit handlers
    run last in, first out), after theirs have drained logs and events, with every file,
    warehouse and service already closed by ``main``; logging and the standard streams are
    flushed first. The handlers it pre-empts are the in-process clean-ups of libraries imported
    earlier (polars' runtime, pyarrow's S3 finaliser, logging's, done here). An exception
    escaping ``main`` exits the ordinary way, with its traceback, except a closed output pipe."""
    finished: list[int] = []

    def exit_now() -> None:
        if finished:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(finished[0])

    atexit.register(exit_now)
    try:
        finished.append(main() or 0)
        if finished[0] == 130:  # interrupted: Prefect's exit handlers would wait on logs for the API it stopped
            exit_now()
    except BrokenPipeError:
        # the reader of the output went away (`aequum show findings | head`): stop quietly, as a
        # shell tool does, with 128 + SIGPIPE; what is still buffered goes nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        finished.append(141)
    sys.exit(finished[0])


if __name__ == "__main__":
    program()
