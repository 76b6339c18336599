"""The README as a newcomer reads it: short, with the two commands first, links that resolve,
and every command in it working as written — the minimal spec on a CSV written here (in the
normal suite), the whole walk on a fresh warehouse (slow)."""
from __future__ import annotations

import csv
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    """The README's fenced code blocks of ``language``, in order."""
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


def commands(text: str) -> list[list[str]]:
    """The ``aequum`` command lines of the bash blocks in ``text`` (comments dropped)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == "aequum":
                out.append(words[1:])
    return out


def run(args: list[str], cwd: Path, api: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_API_URL": api}
    done = subprocess.run([sys.executable, "-m", "aequum.flows.commands.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done


def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = README.splitlines()
    assert len(lines) <= 250
    assert [n for n, line in enumerate(lines, 1) if len(line) > 100] == []
    first = blocks("bash")[0].splitlines()
    assert [line.split()[0] for line in first] == [".ci/audit", ".ci/test"]
    assert README.index(".ci/audit") < 600  # on the first screen
    for word in ("seed 00", "FAIR_LENDING", "../shared", "Table 1", "Eq. ", "Algorithm "):
        assert word not in README, word
    for link in re.findall(r"\]\(([^)#]+)", README):
        assert (REPO / link).exists(), link
    for doc in (REPO / "docs").glob("*.md"):
        for link in re.findall(r"\]\(([^)#:]+\.md)", doc.read_text(encoding="utf-8")):
            assert (doc.parent / link).exists(), (doc.name, link)


def write_decisions(path: Path, rows: int = 600) -> None:
    """``decisions.csv`` with the README's header: women refused more often at equal inputs."""
    header = blocks("csv")[0].splitlines()[0].split(",")
    assert header == ["id", "sex", "income", "debt_ratio", "approved"]
    rng = np.random.default_rng(7)
    sex = rng.choice(["Female", "Male"], rows)
    income = rng.normal(60, 15, rows).round(1)
    debt = rng.uniform(10, 50, rows).round(1)
    score = 0.05 * (income - 60) - 0.08 * (debt - 30) - 0.8 * (sex == "Female") + rng.normal(0, 1, rows)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(zip(range(rows), sex, income, debt, (score > 0).astype(int)))


def minimal_spec(tmp_path: Path) -> Path:
    spec_text = re.findall(r"```yaml\n(.*?)```", section("Your own data"), flags=re.S)[0]
    assert len(spec_text.splitlines()) <= 10
    spec = tmp_path / "my_spec.yaml"
    spec.write_text(spec_text, encoding="utf-8")
    write_decisions(tmp_path / "decisions.csv")
    return spec


def test_the_proxy_example_is_the_shipped_bisg_specs_attribute():
    """The README's race proxy, put in place of data/specs/bisg.yaml's race attribute, makes the
    same spec (the shipped spec audits generated people: tests/test_bisg_audit.py)."""
    import yaml

    from aequum.engines.core.spec import parse_spec

    (text,) = re.findall(r"```yaml\n(.*?)```", section("When race was never recorded"), flags=re.S)
    (attribute,) = yaml.safe_load(text)["protected"]
    shipped = yaml.safe_load((REPO / "data" / "specs" / "bisg.yaml").read_text())
    readme = {**shipped, "protected": [{**shipped["protected"][0], **attribute}]}
    assert parse_spec(readme).protected[0].proxy == parse_spec(shipped).protected[0].proxy


@pytest.mark.prefect
def test_the_minimal_spec_runs_as_written(tmp_path, prefect_server):
    minimal_spec(tmp_path)
    said = commands(section("Your own data"))
    assert said[0][:3] == ["audit", "--spec", "my_spec.yaml"]
    for args in said:
        run(args, tmp_path, prefect_server)
    with (tmp_path / "my_findings.csv").open() as fh:
        findings = list(csv.DictReader(fh))
    flagged = [f for f in findings if f["flagged"] == "true"]
    assert flagged and {f["group_label"] for f in flagged} == {"Female against Male"}
    assert (tmp_path / "my_report.html").is_file() and (tmp_path / "my_report-findings.xlsx").is_file()


def test_the_notebook_example_runs_as_written(tmp_path, monkeypatch):
    pd = pytest.importorskip("pandas")
    minimal_spec(tmp_path)
    monkeypatch.chdir(tmp_path)
    (code,) = blocks("python")[:1]
    scope = {"frame": pd.read_csv("decisions.csv")}
    exec(compile(code, "README.md", "exec"), scope)
    result = scope["result"]
    assert "against Male" in result.conclusion and isinstance(result.findings, pd.DataFrame)
    assert (tmp_path / "my_report.html").is_file()


@pytest.mark.slow
@pytest.mark.prefect
def test_a_newcomers_walk_through_the_readme(tmp_path, prefect_server):
    """A fresh folder holding the specs, `.ci/audit`'s audit, then every `aequum` command of the
    README in order, and its Python query of the warehouse."""
    import shutil

    shutil.copytree(REPO / "data" / "specs", tmp_path / "data" / "specs")
    minimal_spec(tmp_path)
    run(["audit"], tmp_path, prefect_server)  # what .ci/audit runs
    for args in commands(README):
        run(args, tmp_path, prefect_server, timeout=1800)
    query = blocks("python")[1]
    done = subprocess.run([sys.executable, "-c", query], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Female against Male" in done.stdout, done.stderr
