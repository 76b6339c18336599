"""``aequum bench fgce``: FGCE end to end on the papers' data, against a naive all-pairs path.

1. Student (ε = 3; the reference's setup, and every rejection of a surrogate MLP) and German
   credit (ε = 3): the engine end to end (graph, statistics,
   reachable pairs, chosen counterfactuals, k0/d0, curves, AUCs, ACF) per group, side by side
   with a naive path run in the same command — the full n × n distance matrix, every pair's
   constraints, a networkx graph and networkx descendants per factual (what the reference
   implementation does; it takes about 7 s and 18 s) — checking that both find the same edges
   and the same reachable (factual, candidate) pairs.
2. Adult (48,842 rows, ε = 0.3, sex groups): end to end, with peak RSS.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from aequum.flows.bench.measure import peak_rss_mb

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data" / "FGCE"




def naive_group(state, attribute: str, value: int) -> tuple[int, int]:
    """(edges, reachable pairs) of one group the naive way: all pairs, networkx."""
    import networkx as nx
    from scipy.spatial.distance import cdist

    space, p = state.space, state.params
    rows = np.flatnonzero(state.groups[attribute] == value)
    Z = space.Z[rows]
    D = cdist(Z, Z)
    i, j = np.nonzero((D <= p.epsilon) & ~np.eye(len(rows), dtype=bool))
    ok = space.feasible_pairs(rows[i], rows[j])
    G = nx.DiGraph()
    G.add_nodes_from(range(len(rows)))
    G.add_edges_from(zip(i[ok].tolist(), j[ok].tolist()))
    fact = np.flatnonzero(state.factual[rows])
    cand = set(np.flatnonzero(state.candidate[rows]).tolist())
    pairs = 0
    for f in fact:
        reach = nx.descendants(G, int(f)) | {int(f)}
        pairs += len(reach & cand)
    return int(ok.sum()), pairs


REFERENCE_SECONDS = {"student": 7, "student_surrogate": 7, "german_credit": 18}


def _run(engine, data, params, timings: dict | None = None):
    """Both rounds of the engine's pieces, serially (what ``run_serial`` does), timing each piece."""
    from aequum.engines.core.engine import run_rounds

    def timed(state, pieces):
        parts = []
        for piece in pieces:
            t1 = time.perf_counter()
            parts.append(engine.run_piece(state, piece))
            if timings is not None:
                timings[piece] = time.perf_counter() - t1
        return parts

    state, parts, _, _ = run_rounds(engine, engine.prepare(data, params), timed)  # FGCE streams nothing
    return state, engine.combine(state, parts)


def graph_group(state, attribute: str, value: int) -> tuple[int, int]:
    """(edges, reachable pairs) of one group the engine's way (KD-tree blocks, condensation)."""
    from aequum.engines.feasibility.graph import build_graphs, shortest_costs

    g = build_graphs(state.space, state.groups[attribute], state.params.epsilon, groups=[value])[value]
    m = g.nodes
    rows, _, _ = shortest_costs(g, m[state.factual[m]], m[state.candidate[m]])
    return g.n_edges, len(rows)


def side_by_side(spec_path: Path) -> dict:
    from aequum.engines.core.spec import load_spec
    from aequum.engines.feasibility.engine import FGCEEngine
    from aequum.flows.bench.cst import _stage

    spec = load_spec(spec_path)
    with tempfile.TemporaryDirectory() as tmp:
        data = _stage(spec, spec_path.parent, Path(tmp))
    engine = FGCEEngine()
    t0, c0 = time.perf_counter(), time.process_time()
    state, out = _run(engine, data, spec.engines.fgce)
    fast, cpu = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    graph_only = {piece: graph_group(state, *piece) for piece in engine.pieces(state)}
    ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    naive = {piece: naive_group(state, *piece) for piece in engine.pieces(state)}
    slow = time.perf_counter() - t0
    stats = out["fgce_graph_stats"].to_pylist()
    same = all((r["edges"], r["reachable_pairs"]) == naive[(r["attribute"], 1 if r["group_name"] == "protected" else 0)]
               for r in stats if r["factuals"] is not None)
    same = same and graph_only == naive
    print(f"{spec.name}: aequum end to end {fast:.2f} s, {cpu:.2f} s CPU (pieces run serially; the reference "
          f"implementation takes about {REFERENCE_SECONDS.get(spec.name, float('nan')):.0f} s); graph + "
          f"reachable pairs: aequum {ours:.2f} s vs naive all pairs + networkx {slow:.2f} s "
          f"({slow / ours:.1f}x); same edges and reachable pairs: {same}")
    for r in stats:
        print(f"  {r['group_name']:9s} nodes {r['nodes']:5d} edges {r['edges']:7d} SCCs {r['sccs']:4d} "
              f"WCCs {r['wccs']:3d} density {r['density']:.4%} factuals {r['factuals']} coverable {r['coverable']}")
    for r in out["fgce_k0d0"].to_pylist():
        print(f"  {r['group_name']:9s} k0 {r['k0']} d0 {r['d0_at_k0']} coverage@k={r['k']} {r['coverage_at_k']}")
    return {"seconds": fast, "cpu_seconds": cpu, "graph_seconds": ours, "naive_seconds": slow, "same": same}


def adult() -> dict:
    from aequum.engines.core.spec import load_spec
    from aequum.engines.feasibility.engine import FGCEEngine
    from aequum.flows.bench.cst import _stage

    spec_path = REPO / "data" / "specs" / "adult.yaml"
    spec = load_spec(spec_path)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        data = _stage(spec, spec_path.parent, Path(tmp))
    staging = time.perf_counter() - t0
    engine = FGCEEngine()
    timings: dict = {}
    t0 = time.perf_counter()
    _, out = _run(engine, data, spec.engines.fgce, timings)
    secs = time.perf_counter() - t0
    groups = {k: v for k, v in timings.items() if k[0] != "components"}
    comps = [v for k, v in timings.items() if k[0] == "components"]
    print(f"adult ({len(data):,} rows, eps {spec.engines.fgce.epsilon}): staged + surrogate fit {staging:.1f} s; "
          f"FGCE end to end {secs:.1f} s with every piece serial (groups: "
          + ", ".join(f"{a}={'protected' if v else 'reference'} {t:.1f} s" for (a, v), t in groups.items())
          + f"; {len(comps)} component pieces {sum(comps):.1f} s, the largest {max(comps, default=0):.1f} s); "
          f"peak RSS {peak_rss_mb():,.0f} MB")
    for r in out["fgce_graph_stats"].to_pylist():
        print(f"  {r['group_name']:9s} nodes {r['nodes']:6d} edges {r['edges']:9,d} SCCs {r['sccs']:6d} "
              f"WCCs {r['wccs']:5d} factuals {r['factuals']} coverable {r['coverable']} pairs {r['reachable_pairs']:,}")
    for r in out["fgce_k0d0"].to_pylist():
        print(f"  {r['group_name']:9s} k0 {r['k0']} ({r['k0_method']}) d0 {r['d0_at_k0']} ({r['d0_method']}) "
              f"coverage@k={r['k']} {r['coverage_at_k']}")
    return {"seconds": secs, "peak_rss_mb": peak_rss_mb()}


def run(quick: bool = False) -> dict:
    if not SHARED.exists():
        print(f"skipping: {SHARED} is absent")
        return {}
    out = {"student": side_by_side(REPO / "data" / "specs" / "student.yaml"),
           "student_surrogate": side_by_side(REPO / "data" / "specs" / "student_surrogate.yaml"),
           "german": side_by_side(REPO / "data" / "specs" / "german_credit.yaml")}
    if not quick:
        out["adult"] = adult()
    return out


if __name__ == "__main__":
    run()
