"""Progress lines (issue 48): one line per engine (or report step) with its pieces done of the
total, the time taken and an estimate; live on a terminal (rich), plain lines elsewhere; and
nothing on standard output from the libraries of an audit (the HiGHS banner, Prefect, Dask)."""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import yaml

from conftest import REPO
from aequum.flows.progress import Board, clock, plain_line


def test_plain_lines_say_done_elapsed_and_what_is_left():
    assert clock(5.2) == "5 s" and clock(125) == "2 min 05 s" and clock(3720) == "1 h 02 min"
    assert plain_line("engine cst", 0, None, 3.0) == "engine cst: preparing, 3 s elapsed"
    # 2 of 8 pieces in 10 s: 6 left at 5 s each
    assert plain_line("engine cst", 2, 8, 10.0) == "engine cst: 2/8 pieces done, 10 s elapsed, about 30 s left"
    assert plain_line("engine cst", 8, 8, 40.0) == "engine cst: 8/8 pieces done, 40 s elapsed"
    assert plain_line("report", 3, 4, 6.0, "sections") == "report: 3/4 sections done, 6 s elapsed, about 2 s left"


def test_the_plain_board_spaces_its_lines_and_always_says_the_end():
    said = []
    board = Board(said.append, every=3600)
    board.update("engine a", 0, None, 0.0)
    for done in range(1, 5):
        board.update("engine a", done, 4, float(done))
    board.update("engine a", 4, 4, 4.0)  # the end once
    assert said == ["engine a: 4/4 pieces done, 4 s elapsed"]
    board.update("engine a", 1, 2, 5.0)  # a new round of pieces
    board.update("engine a", 2, 2, 6.0)
    assert said[-1] == "engine a: 2/2 pieces done, 6 s elapsed"
    every = []
    board = Board(every.append, every=0)
    for done in range(1, 4):
        board.update("engine b", done, 3, float(done))
    assert [line.split(",")[0] for line in every] == [f"engine b: {d}/3 pieces done" for d in (1, 2, 3)]


def test_the_live_board_draws_one_line_per_step():
    from rich.console import Console

    out = io.StringIO()
    board = Board(lambda _line: None, Console(file=out, force_terminal=True, width=140), unit="pieces")
    board.update("engine outcome", 10, 10, 1.0)
    board.update("engine pricing", 3, 90, 2.0)
    board.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    last = text.rsplit("\r", 1)[-1] if "\r" in text else text
    assert "engine outcome" in text and "10/10" in text and "engine pricing" in text and " 3/90" in text
    assert "elapsed" in last or "elapsed" in text


def test_highs_prints_no_banner():
    """HiGHS prints its banner on the first instance of a process, from C++: none here."""
    code = ("from aequum.engines.core.highs import quiet_highs, silent_highs\n"
            "quiet_highs(1e-9); silent_highs()\n"
            "import highspy; highspy.Highs()\n")  # a later instance prints nothing either
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == ""
    control = subprocess.run([sys.executable, "-c", "import highspy; highspy.Highs()"], capture_output=True,
                             text=True, check=True)
    assert "HiGHS" in control.stdout  # what the first instance prints unless silenced


def test_an_audit_prints_only_its_own_lines_and_engine_progress(tmp_path):
    """`aequum audit` with stdout and stderr not terminals: stdout holds the command's summary
    only (no HiGHS banner from FGCE's selections, no Prefect or Dask log line), stderr a plain
    progress line per engine."""
    raw = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
    raw["source"]["rows"] = 2000
    raw["engines"]["run"] = ["outcome", "fgce"]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API") and k != "AEQUUM_PROGRESS"}
    env.update(PREFECT_LOGGING_LEVEL="INFO", AEQUUM_LOG_DIR=str(tmp_path / "logs"))
    out = subprocess.run([sys.executable, "-m", "aequum.flows.commands.cli", "audit", "--spec", str(tmp_path / "s.yaml"),
                          "--warehouse", str(tmp_path / "wh.duckdb"), "--lake", str(tmp_path / "lake")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "HiGHS" not in out.stdout and "Copyright" not in out.stdout
    assert not [line for line in out.stdout.splitlines() if re.match(r"\d\d:\d\d:\d\d\.\d{3} \|", line)
                or "distributed." in line or "prefect" in line.lower()]
    assert re.search(r"^run loan-\S+: succeeded$", out.stdout, re.M)
    for engine in ("outcome", "fgce"):
        assert re.search(rf"engine {engine}: (\d+)/\1 pieces done, \d+ s elapsed", out.stderr), out.stderr[-3000:]


def test_the_report_says_its_steps_and_reads_the_findings_once(small_audit_warehouse, tmp_path, monkeypatch):
    """`aequum report`: its steps done of the total (findings, exhibits, file reviews, each
    engine's section, the page), the last one always; findings handed in are not read again."""
    from aequum.flows.commands import report
    from aequum.flows.reporting.run import Run
    from aequum.flows.store.warehouse import Warehouse

    said = []
    path = report.write_report(small_audit_warehouse, out=tmp_path / "a" / "r.html", say=said.append)
    assert path.is_file()
    with Warehouse(small_audit_warehouse, read_only=True) as wh:
        run = Run.open(wh)
        from aequum.flows.reporting.sections import shown_engines

        total = 4 + len(shown_engines(run))
        findings = run.query("findings")
    assert said and re.fullmatch(rf"report: {total}/{total} steps done, \d+ s elapsed", said[-1])
    asked, query = [], Run.query

    def counted(self, name, **params):
        asked.append(name)
        return query(self, name, **params)

    monkeypatch.setattr(Run, "query", counted)
    again = report.write_report(small_audit_warehouse, out=tmp_path / "b" / "r.html", findings=findings)
    assert "findings" not in asked
    assert again.read_text() == path.read_text()
