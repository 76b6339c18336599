"""Installing aequum adds one top-level package, `aequum`, never `engines` or `flows`
(issue 17), and the notebook API `aequum.audit` is the CLI's audit in-process."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile

from conftest import REPO

IMPORT_TOP_LEVEL = re.compile(r"^\s*(from|import)\s+(engines|flows)\b", re.M)


def test_the_package_list_covers_every_folder_of_code():
    conf = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(conf["tool"]["setuptools"]["packages"])
    found = {"aequum"} | {"aequum." + ".".join(p.parent.relative_to(REPO).parts)
                          for top in ("engines", "flows") for p in (REPO / top).rglob("__init__.py")}
    sql = {"aequum." + ".".join(p.relative_to(REPO).parts)
           for p in [REPO / "sql", *(REPO / "sql").rglob("*")] if p.is_dir() and p.name != "__pycache__"}
    assert listed == found | sql
    assert conf["tool"]["setuptools"]["package-dir"] == {"aequum": "."}
    assert conf["project"]["scripts"]["aequum"] == "aequum.flows.commands.cli:program"


def test_no_code_imports_a_top_level_engines_or_flows():
    offenders = [str(p.relative_to(REPO)) for top in ("engines", "flows", "tests")
                 for p in (REPO / top).rglob("*.py") if IMPORT_TOP_LEVEL.search(p.read_text())]
    assert offenders == []


def test_an_installed_aequum_claims_no_other_top_level_name(tmp_path):
    """From a folder outside the checkout: `aequum` imports (with `aequum.audit`), while
    `engines` and `flows` are not importable at all."""
    code = ("import importlib.util, aequum; assert callable(aequum.audit); "
            "print(importlib.util.find_spec('engines'), importlib.util.find_spec('flows'))")
    out = subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "None None"


def test_the_wheel_holds_only_aequum_with_its_sql(tmp_path):
    """Built from a copy of the package's files (a build in place would leave build/ behind)."""
    src = tmp_path / "src"
    for name in ("engines", "flows", "sql"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("__init__.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path), str(src)], check=True, capture_output=True, text=True)
    assert "Warning" not in build.stdout + build.stderr, build.stdout + build.stderr
    (wheel,) = tmp_path.glob("aequum-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.startswith("aequum-")}
    assert tops == {"aequum"}
    assert "aequum/sql/schema.sql" in names and "aequum/sql/views/findings.sql" in names
    assert "aequum/engines/core/spec.py" in names and "aequum/flows/commands/cli.py" in names
    sql = {p.relative_to(REPO).as_posix() for p in (REPO / "sql").rglob("*.sql")}
    assert {n.removeprefix("aequum/") for n in names if n.endswith(".sql")} == sql


def test_the_editable_build_of_ci_setup_prints_no_warning(tmp_path):
    """The editable wheel `.ci/setup` installs, built with the warning filter it sets (from a
    copy of the package's files, as above)."""
    setup = (REPO / ".ci" / "setup").read_text()
    (filters,) = re.findall(r'PYTHONWARNINGS="([^"]+)"', setup)
    src = tmp_path / "src"
    for name in ("engines", "flows", "sql"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("__init__.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    code = ("import warnings; from setuptools import build_meta\n"
            "warnings.showwarning = lambda m, c, *a, **k: print('WARNED', c.__name__, m)\n"
            f"print(build_meta.build_editable({str(tmp_path)!r}))")
    build = subprocess.run([sys.executable, "-c", code], cwd=src, capture_output=True, text=True,
                           check=True, env=os.environ | {"PYTHONWARNINGS": filters})
    assert "WARNED" not in build.stdout, build.stdout
    assert build.stdout.strip().splitlines()[-1].endswith(".whl")
