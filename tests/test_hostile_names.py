"""Identifiers never become paths or markup: a protected attribute's name with '/', '..', '=',
quotes and markup is staged inside the lake, reported escaped and stated whole; run ids are
checked where they enter."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from audit_tables import small_audit
from conftest import REPO

HOSTILE = "a/../../X\"'<img src=x onerror=alert(1)>=v"


def rename(raw: dict, name: str = HOSTILE) -> None:
    """The loan spec with its protected attribute (and the SCM's parents) named ``name``."""
    old = raw["protected"][0]["name"]
    raw["protected"][0]["name"] = name
    for eq in raw["scm"]["equations"]:
        eq["parents"] = [name if p == old else p for p in eq["parents"]]


def test_a_hostile_protected_name_is_staged_inside_the_lake_and_reported_escaped(tmp_path):
    from aequum.flows.commands.report import write_report
    from aequum.flows.store.warehouse import Warehouse

    work = tmp_path / "work"
    work.mkdir()
    def edit(raw):
        rename(raw)
        raw["engines"]["cst"]["k"] = [10]

    path = small_audit(work, rows=300, engines=["outcome", "cst", "raguel", "fgce"], edit=edit)
    outside = [p for p in tmp_path.rglob("*") if work not in p.parents and p != work]
    assert outside == []  # nothing written beside the lake (the name climbs two folders up)
    lake = work / "lake"
    folders = [p.relative_to(lake) for p in lake.rglob("*") if p.is_dir()]
    assert folders and all(".." not in p.parts and "X" not in p.parts for p in folders)
    assert all(part.count("=") <= 1 for p in folders for part in p.parts)

    report = write_report(path, "loan-small", tmp_path / "r.html").read_text()
    assert "<img" not in report and "onerror=alert" not in report.replace("&lt;img src=x onerror=alert", "")
    assert report.count("&lt;img src=x onerror=alert(1)&gt;") >= 5  # the h3 of each engine, tables, summary
    assert len(re.findall(r"<h3>[^<]*&lt;img", report)) == 3  # the CST, RAGUEL and FGCE headings
    with Warehouse(path, read_only=True) as wh:
        said = [r[0] for r in wh.con.execute("SELECT statement FROM audit.findings WHERE engine = 'outcome'").fetchall()]
    # the groups are named by the labels of the attribute's values, the name looked up whole
    assert said and all(s.startswith("Female applicants received") for s in said)


def test_a_per_value_comparison_is_stated_by_its_parts_when_the_name_holds_an_equals_sign(tmp_path):
    from aequum.flows.store.warehouse import Warehouse

    def edit(raw):
        rename(raw, "g=x")
        raw["protected"][0]["compare"] = "both"
        raw["scm"] = None
        raw["engines"]["run"] = ["outcome"]

    path = small_audit(tmp_path, rows=300, engines=["outcome"], edit=edit)
    with Warehouse(path, read_only=True) as wh:
        said = dict(wh.con.execute("SELECT attribute, statement FROM audit.findings WHERE headline "
                                   "AND group_name = 'protected'").fetchall())
    assert said["g=x=1"].startswith("applicants with g=x 1 received")  # the value of a coded column
    assert said["g=x"].startswith("Female applicants received")  # the spec's labels of its values


def test_an_intersection_joiner_or_a_control_character_in_a_name_is_a_spec_error():
    import yaml

    from aequum.engines.core.spec import SpecError, parse_spec

    for name in ("race&sex", "a\nb", "  "):
        raw = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
        rename(raw, name)
        with pytest.raises(SpecError, match="a name must not be blank"):
            parse_spec(raw)


def test_the_report_builds_no_markup_from_f_strings():
    """Every value reaches the page through reporting.html's escaping (esc, markup, table):
    outside that module no f-string holds markup."""
    found = []
    for path in [*(REPO / "flows" / "reporting").glob("*.py"), REPO / "flows" / "commands" / "report.py"]:
        if path.name == "html.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
                if "<" in text and any(isinstance(v, ast.FormattedValue) for v in node.values):
                    found.append(f"{path.name}:{node.lineno}")
    assert found == []


def test_lake_folder_keys_are_one_path_component_of_safe_characters():
    from aequum.flows.store.lake_writer import folder_key, partition_folder

    for name in ("_g_race", HOSTILE, "_g_..", "_g_/", "_g_" + "é" * 300, "_g_a\\b"):
        key = folder_key(name)
        assert re.fullmatch(r"[A-Za-z0-9_%-]{1,120}", key), key
    assert folder_key("_g_race") == "_g_race"
    assert folder_key("_g_a/b") != folder_key("_g_a%2Fb")
    assert partition_folder(["_g_a/../b", "_label"], (1, None)) == Path("_g_a%2F%2E%2E%2Fb=1/_label=__HIVE_DEFAULT_PARTITION__")
