"""The code's layout stays readable: no import circle between aequum's modules, no module over
600 lines, and the folders the README's "Development" section names (issue: a codebase a
newcomer can carry on)."""
from __future__ import annotations

import ast

import networkx as nx

from conftest import REPO

LIMIT = 600


def modules() -> dict[str, object]:
    out = {}
    for top in ("engines", "flows"):
        for p in (REPO / top).rglob("*.py"):
            name = "aequum." + ".".join(p.relative_to(REPO).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = p
    return out


def import_graph() -> nx.DiGraph:
    """Edges of the imports made when a module is imported (its top-level statements; imports
    inside functions are made on use and cannot form a circle at import time)."""
    mods = modules()
    g = nx.DiGraph()
    for name, path in mods.items():
        g.add_node(name)
        for node in ast.parse(path.read_text()).body:
            for stmt in (node.body if isinstance(node, ast.If) else [node]):
                if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith("aequum."):
                    for alias in stmt.names:
                        target = f"{stmt.module}.{alias.name}"
                        g.add_edge(name, target if target in mods else stmt.module)
                elif isinstance(stmt, ast.Import):
                    g.add_edges_from((name, a.name) for a in stmt.names if a.name.startswith("aequum."))
    return g


def test_the_graph_sees_the_imports():
    g = import_graph()
    assert g.has_edge("aequum.flows.audit", "aequum.flows.store.warehouse")
    assert g.has_edge("aequum.flows.reporting.sections", "aequum.flows.reporting.cst")


def test_no_import_circle():
    assert list(nx.simple_cycles(import_graph())) == []


def test_no_module_over_600_lines():
    long = {str(p.relative_to(REPO)): n for p in [*(REPO / "engines").rglob("*.py"), *(REPO / "flows").rglob("*.py")]
            if (n := len(p.read_text().splitlines())) > LIMIT}
    assert long == {}


def test_the_folders_the_readme_names():
    readme = (REPO / "README.md").read_text()
    for folder in ("flows/store", "flows/commands", "flows/bench", "flows/reporting", "engines/matching/cst",
                   "engines/matching/cec", "engines/core"):
        assert (REPO / folder / "__init__.py").is_file(), folder
        assert f"`{folder}/`" in readme or f"`{folder.split('/', 1)[1]}/`" in readme, folder
    # one package per engine, as the registry names them
    for engine in ("outcome", "reasons", "regression", "pricing", "geography", "feasibility", "reranking", "verification"):
        assert (REPO / "engines" / engine / "engine.py").is_file(), engine
    # flows/ itself holds the flows and their tasks only
    top = sorted(p.stem for p in (REPO / "flows").glob("*.py") if p.stem != "__init__")
    assert top == ["audit", "child_process", "cluster", "engine_tasks", "ground_truth", "model_step",
                   "prefect_api", "preflight", "progress", "raguel_stream", "run_control", "scheduled", "terminal"]


def test_every_source_path_the_readme_and_docs_name_exists():
    """A path in backticks under engines/, flows/, sql/, tests/ or data/specs/ in the README or
    docs/*.md names a file or folder of the repository (a `*` or `<name>` part: at least one
    match), so a module that moves cannot leave its old path in the manual."""
    import re

    pattern = re.compile(r"`((?:engines|flows|sql|tests|data/specs)/[A-Za-z0-9_./*<>-]*)")
    stale = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for path in pattern.findall(doc.read_text()):
            glob = re.sub(r"<[^>]*>", "*", path.rstrip("/.:"))
            if not any(REPO.glob(glob)):
                stale.append(f"{doc.relative_to(REPO)}: {path}")
    assert stale == []
