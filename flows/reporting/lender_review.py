"""The file review of a flagged lender (``aequum report --cases RANK`` on a lenders finding): what
an examiner's comparative file review pulls for one lender × comparison × outcome.

* Denial: each of the lender's refused protected applicants (decision unfavourable) beside the
  ``k`` reference-group applicants of the SAME lender and the same product who were approved and
  are nearest on the recorded controls of the comparison (those of the engine's pooled fit for
  the outcome); the cases with the nearest approved comparators first (the strongest
  comparisons). The product is held equal: the engine's products (``engines.lenders.products``)
  and every categorical control (loan type, loan purpose); the distance runs over the numeric and
  ordinal controls (income, loan amount, property value, CLTV, the DTI bin).
* A price (rate spread): each of the lender's protected borrowers (originations reporting the
  price) beside the ``k`` nearest reference borrowers of the same lender and product, with their
  prices; the cases whose price most exceeds their comparators' mean first.

Distance: the mixed distance of Thanh et al. (2011) that CST uses (``engines.core.knn``, exact
k-NN): numeric controls z-scored over the lender's records (log values for the controls the
engine takes as logs), ordinal ones as ranks r/(levels − 1), the absolute differences summed and
divided by the number of these controls (0: identical). Records with a null
control are left out, as the engine's fit leaves them out. The records are the staged ones, read
from the lake copy of the run's dataset version, the lender's alone.

On the public LAR a file review is where the unexplained disparity meets the inputs the LAR lacks
(the credit score, the credit history): the exhibit says which files to pull, not what they hold.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aequum.engines.core.data import DECISION, ID, group_column
from aequum.engines.core.knn import Points, knn
from aequum.flows.reporting.exhibit import write_rows
from aequum.flows.reporting.html import Section, markup, page, table
from aequum.flows.reporting.labels import Labels, utc
from aequum.flows.store.guard import UsageError

K = 3  # comparators per case
DENIAL = "denial"


@dataclass
class Review:
    """One lender finding's cases: one row per record (case or comparator), in case order."""

    finding: dict
    lei: str
    field: str
    controls: list[str]             # the distance's
    shown_columns: list[str]
    exact: list[str] = field(default_factory=list)   # held equal: the product
    rows: list[dict] = field(default_factory=list)
    cases: int = 0
    shown: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return self.finding["rank"]


def reviewable(f: dict) -> bool:
    """A lenders finding naming one lender (not the comparison's headline)."""
    return f.get("engine") == "lenders" and not f.get("headline") and bool(f.get("group_name"))


def outcome(f: dict) -> str:
    """The outcome of a lender finding's label ("lender against peers: rate_spread")."""
    m = re.fullmatch(r"lenders? against peers: (.+)", f.get("finding") or "")
    return m.group(1) if m else DENIAL


def controls_of(parameters: dict, name: str) -> tuple[list[str], set[str], list[str]]:
    """The controls of outcome ``name`` as the lenders engine took them from the run's parameters
    (engines.lenders.controls, else the regression's for denial and the pricing engine's for a
    price), those entered as logs, and the products."""
    lenders, reg, pricing = (parameters.get(k) or {} for k in ("lenders", "regression", "pricing"))
    names = lenders.get("controls") or (reg.get("controls") if name == DENIAL else pricing.get("controls")) or []
    logs = set(reg.get("log_controls") or []) if name == DENIAL else set()
    products = lenders.get("products")
    products = list(reg.get("segments") or []) if products is None else list(products)
    return [n for n in names if n not in products], logs, products


def _groups(table: pa.Table, attribute: str) -> np.ndarray:
    """1 protected, 0 reference, −1 neither (an intersection: every part's side)."""
    out = None
    for part in attribute.split("&"):
        g = table[group_column(part)].to_numpy(zero_copy_only=False)
        g = np.where(np.isnan(g.astype(np.float64)), -1, g).astype(np.int64)
        out = g if out is None else np.where(out == g, out, -1)
    return out


def _text(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table[name].cast(pa.string()).to_numpy(zero_copy_only=False), object)


def categorical(col) -> bool:
    return pa.types.is_dictionary(col.type) or pa.types.is_string(col.type) or pa.types.is_large_string(col.type)


def distance_space(table: pa.Table, controls: list[str], logs: set[str], ordinal: dict[str, list[str]],
                   required: list[str] = ()):
    """The records' points in the mixed space (module docstring) and the rows with every control
    (and every column of ``required``) recorded."""
    metric, nominal = [], []
    ok = np.ones(table.num_rows, bool)
    for name in required:
        ok &= table[name].is_valid().to_numpy(zero_copy_only=False)
    for name in controls:
        col = table[name]
        if name in ordinal:
            levels = pa.array(ordinal[name], pa.string())
            at = pc.index_in(col.cast(pa.string()), value_set=levels)
            v = np.asarray(at.cast(pa.float64()).to_numpy(zero_copy_only=False), np.float64)  # null: NaN
            ok &= ~np.isnan(v)
            metric.append(("rank", v / max(len(levels) - 1, 1)))
        elif categorical(col):
            values = _text(table, name)
            ok &= values != None  # noqa: E711
            _, codes = np.unique(np.where(values == None, "", values).astype(str), return_inverse=True)  # noqa: E711
            nominal.append(codes)
        else:
            v = np.asarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), np.float64)
            if name in logs:
                with np.errstate(divide="ignore", invalid="ignore"):
                    v = np.where(v > 0, np.log(np.where(v > 0, v, 1.0)), np.nan)
            ok &= np.isfinite(v)
            metric.append(("z", v))
    cols = []
    for kind, v in metric:
        if kind == "z":
            sd = np.std(v[ok]) if ok.any() else 0.0
            v = (v - (np.mean(v[ok]) if ok.any() else 0.0)) / (sd if sd > 0 else 1.0)
        cols.append(np.where(ok, v, 0.0))
    rows = np.flatnonzero(ok)
    m = np.column_stack(cols)[rows] if cols else np.zeros((len(rows), 0))
    n = np.column_stack(nominal)[rows] if nominal else np.zeros((len(rows), 0), np.int64)
    return Points(m, n), rows


def comparisons(points: Points, product: np.ndarray, cases: np.ndarray, pool: np.ndarray, k: int):
    """For each case (index into ``points``), the ``k`` nearest of ``pool`` with its product, as
    (indices, distances) padded with −1 / NaN; exact (``engines.core.knn``), ties by pool order."""
    idx = np.full((len(cases), k), -1, np.int64)
    dist = np.full((len(cases), k), np.nan)
    for p in np.unique(product[cases]):
        mine, theirs = np.flatnonzero(product[cases] == p), pool[product[pool] == p]
        if len(theirs) == 0:
            continue
        i, d = knn(points.take(theirs), points.take(cases[mine]), k)
        idx[mine[:, None], np.arange(i.shape[1])] = theirs[i]
        dist[mine[:, None], np.arange(i.shape[1])] = d
    return idx, dist


def lake_path(run) -> str:
    dataset = run.query("dataset") if run.record.get("dataset_version") and "datasets" in run.tables else []
    lake = dataset[0].get("lake_path") if dataset else None
    if not lake or not Path(lake).is_dir():
        raise UsageError(f"the staged records of dataset version {run.record.get('dataset_version')} are not in "
                         f"the lake ({lake or 'no lake copy recorded'}): a lender's file review reads them")
    return lake


def _layout(run) -> dict:
    layout = (run.parameters.get("audit") or {}).get("records") or {}
    if not layout.get("lender"):
        raise UsageError(f"run {run.run_id} was written before runs recorded the lender column: run the audit "
                         "again for a lender's file review")
    return layout


def columns(run, f: dict) -> list[str]:
    """The staged columns the file review of ``f`` reads."""
    layout = _layout(run)
    name = outcome(f)
    controls, _, products = controls_of(run.parameters, name)
    market, decided = layout.get("market"), layout.get("decision")
    return list(dict.fromkeys([ID, DECISION, *(group_column(a) for a in f["attribute"].split("&")), layout["lender"],
                               *([market] if market else []), *products, *controls,
                               *([decided] if decided else []), *([name] if name != DENIAL else [])]))


def read_lender(run, lei: str, wanted: list[str]) -> pa.Table:
    """The staged records of lender ``lei`` (``wanted`` columns), in record order."""
    from aequum.flows.store.lake_reading import load_lake

    try:
        return load_lake(lake_path(run), wanted, where={_layout(run)["lender"]: lei})
    except ValueError as exc:
        raise UsageError(f"lender file review: {exc}") from None


def build_all(run, findings: list[dict], limit: int) -> tuple[list[Review], str | None]:
    """The file reviews of the flagged lender findings among ``findings`` (each lender's records
    read once), for the files beside the report; none, and why, when the records cannot be read."""
    flagged = [f for f in findings if f.get("flagged") and reviewable(f)]
    out: list[Review] = []
    try:
        for lei in dict.fromkeys(f["group_name"] for f in flagged):
            mine = [f for f in flagged if f["group_name"] == lei]
            records = read_lender(run, lei, list(dict.fromkeys(c for f in mine for c in columns(run, f))))
            out += [build(run, f, limit, records=records) for f in mine]
    except UsageError as exc:
        return [], str(exc)
    return out, None


def file_name(r: Review) -> str:
    return f"finding-{r.rank}-lenders.csv"


def build(run, f: dict, limit: int, k: int = K, records: pa.Table | None = None) -> Review:
    """The file review of lender finding ``f`` (its ``limit`` first cases, ``k`` comparators each);
    ``records``: the lender's staged records when already read (:func:`read_lender`)."""
    params = run.parameters
    layout = _layout(run)
    name = outcome(f)
    controls, logs, products = controls_of(params, name)
    market, decided = layout.get("market"), layout.get("decision")
    attribute = f["attribute"]
    if records is None:
        records = read_lender(run, f["group_name"], columns(run, f))
    shown = [c for c in dict.fromkeys([*([market] if market else []), *products, *controls,
                                       *([name] if name != DENIAL else [])])]
    review = Review(f, f["group_name"], name, controls, shown)
    group = _groups(records, attribute)
    decision = records[DECISION].to_numpy(zero_copy_only=False)
    decision = np.where(np.isnan(decision.astype(np.float64)), -1, decision).astype(np.int64)
    if name == DENIAL:
        case = (group == 1) & (decision == 0)
        pool = (group == 0) & (decision == 1)
    else:
        originated = set((params.get("lenders") or {}).get("originated") or ["1"])
        taken = np.isin(_text(records, decided), list(originated)) if decided else np.ones(records.num_rows, bool)
        priced = records[name].is_valid().to_numpy(zero_copy_only=False) & taken
        case, pool = priced & (group == 1), priced & (group == 0)
    ordinal = layout.get("ordinal") or {}
    # the product: the engine's products and every categorical control (loan type, purpose), held equal
    exact = list(dict.fromkeys([*products, *(c for c in controls if c not in ordinal and categorical(records[c]))]))
    review.exact = exact
    review.controls = [c for c in controls if c not in exact]
    points, rows = distance_space(records, review.controls, logs, ordinal, exact)
    left = int((case | pool).sum() - (case | pool)[rows].sum())
    if left:
        review.notes.append(f"{left:,} of the lender's compared records have a null control and are left out")
    product = np.zeros(len(rows), np.int64)
    for p in exact:
        _, codes = np.unique(np.where(_text(records, p) == None, "", _text(records, p)).astype(str)[rows],  # noqa: E711
                             return_inverse=True)
        product = product * (codes.max(initial=0) + 1) + codes
    cases, pool_idx = np.flatnonzero(case[rows]), np.flatnonzero(pool[rows])
    idx, dist = comparisons(points, product, cases, pool_idx, k)
    found = (idx >= 0).any(1)
    if (~found).any():
        review.notes.append(f"{int((~found).sum()):,} cases have no comparator of the same product "
                            f"({', '.join(review.exact)}) at this lender: not shown")
    cases, idx, dist = cases[found], idx[found], dist[found]
    if name == DENIAL:
        order = np.lexsort((rows[cases], np.nanmean(dist, 1)))  # nearest comparators first
        key = np.nanmean(dist, 1)
    else:
        price = np.asarray(records[name].cast(pa.float64()).to_numpy(zero_copy_only=False), np.float64)[rows]
        comp = np.where(idx >= 0, price[np.maximum(idx, 0)], np.nan)
        key = price[cases] - np.nanmean(comp, 1)
        order = np.lexsort((rows[cases], -key))  # the largest excess over its comparators first
    review.cases, review.shown = len(cases), min(limit, len(cases))
    first, near = cases[order[:limit]], idx[order[:limit]]
    shown_rows = np.unique(np.concatenate([rows[first], rows[near[near >= 0]]]))
    at = np.full(records.num_rows, -1, np.int64)    # only the rows shown become Python values
    at[shown_rows] = np.arange(len(shown_rows))
    part = records.take(pa.array(shown_rows))
    ids = np.full(records.num_rows, None, object)
    ids[shown_rows] = _text(part, ID)
    values = {c: _Column(at, part[c].to_pylist()) for c in shown}
    dec = decision
    for o in order[:limit]:
        c = cases[o]
        review.rows.append(_row(ids, values, dec, rows[c], "case", "protected", None, None, key[o], name))
        for j in range(idx.shape[1]):
            if idx[o, j] >= 0:
                review.rows.append(_row(ids, values, dec, rows[idx[o, j]], "comparator", "reference", j + 1,
                                        float(dist[o, j]), None, name, case=ids[rows[c]]))
    return review


class _Column:
    """A column's values at the rows shown, indexed by record position."""

    def __init__(self, at: np.ndarray, values: list):
        self.at, self.values = at, values

    def __getitem__(self, i):
        return self.values[self.at[i]]


def _row(ids, values, decision, i, role, side, rank, distance, key, name, case=None) -> dict:
    out = {"case": case if case is not None else ids[i], "role": role, "side": side, "rank": rank,
           "record_id": ids[i], "distance": distance, "decision": int(decision[i]) if decision[i] >= 0 else None,
           "excess" if name != DENIAL else "mean_distance": key}
    out.update({c: v[i] for c, v in values.items()})
    return out


def csv_rows(r: Review, labels: Labels) -> tuple[list[str], list[dict]]:
    """The review as CSV columns and rows: one row per record, the case's row first."""
    key = "mean_distance" if r.field == DENIAL else "excess"
    columns = ["finding_rank", "lei", "case", "role", "group", "rank", "record_id", "distance", "decision", key,
               *(_header(c, labels) for c in r.shown_columns)]
    out = []
    for row in r.rows:
        out.append({"finding_rank": r.rank, "lei": r.lei, "case": row["case"], "role": row["role"],
                    "group": labels.group(r.finding["attribute"], _side(r.finding["attribute"], row["side"])),
                    "rank": row["rank"], "record_id": row["record_id"], "distance": row["distance"],
                    "decision": labels.decision(row["decision"]) if row["decision"] is not None else "n/a",
                    key: row.get(key), **{_header(c, labels): row.get(c) for c in r.shown_columns}})
    return columns, out


def _side(attribute: str, side: str) -> str:
    return ",".join(f"{a}={side}" for a in attribute.split("&")) if "&" in attribute else side


def _header(name: str, labels: Labels) -> str:
    unit = labels.units.get(name)
    return f"{name} [{unit}]" if unit else name


def write_csv(r: Review, labels: Labels, path: Path) -> Path:
    return write_rows(*csv_rows(r, labels), path)


def review_html(run_record: dict, r: Review, labels: Labels) -> str:
    """The printable page of a lender's file review (fits a 1280 px window: one narrow table per case)."""
    f = r.finding
    what = ("refused protected applicants beside the approved reference-group applicants nearest them"
            if r.field == DENIAL else f"protected borrowers beside the reference borrowers nearest them, with their "
                                      f"{r.field}")
    about = Section("finding", f"Finding {r.rank}: file review of lender {r.lei}")
    about.add(markup("<p><strong>{}</strong>, {}. {}</p>", labels.versus(f["attribute"], "protected"), r.field,
                     f.get("statement") or ""))
    about.add(markup("<p>{:,} of the lender's {:,} cases are shown: its {}, of the same lender and product ({}), "
                     "nearest on the recorded controls ({}). Distance: the mixed distance of CST (numeric controls "
                     "z-scored over the lender's records, ordinal ones as ranks; 0 is identical). Run {}, spec {}, "
                     "started {}.</p>", r.shown, r.cases, what, r.lei + (", " + ", ".join(r.exact) if r.exact else ""),
                     ", ".join(r.controls) or "none",
                     run_record["run_id"], run_record["spec_name"], utc(run_record.get("started_at"))))
    about.add("<p>On records lacking inputs of the decision (the public LAR lacks the credit score), these are "
              "the files to pull: what they hold, not this table, says whether the difference has a reason.</p>")
    for note in r.notes:
        about.add(markup('<p class="note">{}.</p>', note))
    columns, rows = csv_rows(r, labels)
    keep = [c for c in columns if c not in ("finding_rank", "lei", "case")]
    sections = [about]
    for i, case in enumerate(dict.fromkeys(row["case"] for row in rows), 1):
        sec = Section(f"case-{i}", f"Case {i}: record {case}")
        sec.add(table([{c: row.get(c) for c in keep} for row in rows if row["case"] == case], cls="exhibit",
                      headers={"record_id": "record", "rank": "nearest"}))
        sections.append(sec)
    return page(f"File review: lender {r.lei}, finding {r.rank} of run {run_record['run_id']}",
                f"{f['finding']} — {f['attribute']}", sections, wide=False)
