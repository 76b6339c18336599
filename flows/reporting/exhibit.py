"""The matched-pair exhibit of an individual finding: each case's complainant beside the
records the engine compared it with, of both groups, feature by feature with the spec's units,
decisions as the spec records them, and distances — the file an examiner's matched-pair review
produces (CSV, and a printable page: :mod:`flows.reporting.exhibit_page`).

CST findings (Alvarez & Ruggieri 2023, Defs. 3.3–3.5): the complainants the finding counts
(significant for ST and CST; for CF, which has no test, those whose decision flips), each with
its control group (the k members of its own group nearest its inputs) and its test group (the k
reference members nearest its inputs for ST, nearest its counterfactual for CST). The groups are
read as the engine stored them at run time in ``audit.cst_evidence``: with
``engines.cst.evidence: significant`` (the default) it holds the groups of every complainant
a method found significantly discriminated, up to the largest k at which it did — so every case
a finding counts — and nothing is recomputed (a recomputation would have to rebuild the SCM's
counterfactuals, the sample and the bias correction exactly; the stored groups are the engine's
own). With ``evidence: none`` the cases are listed without comparators and the exhibit says so.
CF has no comparators: one decision against its counterfactual's.

Beside each CST, CST-without-centres and CF complainant, a row of role ``counterfactual``: the
complainant in the world do(A := reference) (Def. 3.2: abduction, action, prediction on the
spec's SCM), the point its test group was searched around and whose decision CF compares — the
distance features' values in the spec's units and its decision, as the engine stored them in
``audit.cst_counterfactuals`` (mediators at their factual values). ST's test group is searched
around the complainant itself: its cases have none. A run with ``evidence: none``, or written
before the values were stored, lists its cases without one and the exhibit says so.

CEC findings (regime B, same decision for different reasons): each pair's record beside its
counterpart of the other group (``audit.cec_pairs``).

The feature values are the staged records' (the lake copy of the run's dataset version,
``audit.datasets.lake_path``), read once for every case of every finding exhibited."""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from aequum.flows.store.guard import UsageError
from aequum.flows.reporting.labels import Labels
from aequum.flows.reporting.run import Run

CASES = 50  # cases per finding in an exhibit (`aequum report --cases`, --limit changes it)

# sql/views/findings_cst.sql's finding labels -> cst_claims.method
CST_METHODS = {"counterfactual situation testing without centres": "CST_wo_centres",
               "counterfactual situation testing": "CST", "situation testing": "ST",
               "counterfactual fairness": "CF"}
TEST_CENTRE = {"ST": "factual", "CST": "counterfactual", "CST_wo_centres": "counterfactual"}
COUNTERFACTUAL = ("CST", "CST_wo_centres", "CF")  # the methods whose cases read the counterfactual


@dataclass
class Exhibit:
    """One finding's cases: one row per person (complainant or comparator), in case order."""

    finding: dict
    features: list[str]
    rows: list[dict] = field(default_factory=list)
    cases: int = 0          # the cases the finding counts in all
    shown: int = 0          # the cases exhibited (the surest first)
    notes: list[str] = field(default_factory=list)
    claims: dict[str, dict] = field(default_factory=dict)  # per case: its claim or pair

    @property
    def rank(self) -> int:
        return self.finding["rank"]


def individual(f: dict) -> bool:
    """A finding with individual cases to exhibit: CST's (ST, CST, CF) and CEC's pairs."""
    return ((f.get("engine") == "cst" and f.get("cases_table") == "cst_claims" and cst_method(f["finding"]) is not None)
            or (f.get("engine") == "cec" and f.get("cases_table") == "cec_pairs"))


def cst_method(finding: str) -> tuple[str, int | None] | None:
    """The method and k of a CST finding's label ("situation testing, k = 50" -> ("ST", 50))."""
    m = re.fullmatch(r"(.*?)(?:, k = (\d+))?", finding or "")
    method = CST_METHODS.get(m.group(1)) if m else None
    return None if method is None else (method, int(m.group(2)) if m.group(2) else None)


def find(run: Run, key: str) -> dict:
    """The finding ``key`` names (its rank in the run); one clear error for any other key."""
    hint = (f"`aequum show findings --run-id {run.run_id}` lists them (column rank); --cases takes the "
            "rank of a CST/ST/CF or CEC finding, or of a flagged lender's (its file review)")
    if not re.fullmatch(r"\s*\d{1,9}\s*", str(key)):
        raise UsageError(f"--cases {key!r} is not a finding's rank in run {run.run_id}: {hint}")
    if "findings" not in run.tables:
        raise UsageError(f"run {run.run_id} has no findings (audit.findings)")
    rows = run.query("finding_by_rank", rank=int(key))
    if not rows:
        raise UsageError(f"run {run.run_id} has no finding of rank {int(key)}: {hint}")
    f = rows[0]
    if not individual(f) and not (f.get("engine") == "lenders" and not f.get("headline")):  # a lender's file review
        raise UsageError(f"finding {int(key)} of run {run.run_id} ({f['engine']}: {f['finding']}) has no matched "
                         f"cases: {hint}")
    return f


def flagged_individual(findings: list[dict]) -> list[dict]:
    """The findings the report exhibits: flagged, with individual cases."""
    return [f for f in findings if f.get("flagged") and individual(f)]


def build(run: Run, findings: list[dict], limit: int = CASES) -> list[Exhibit]:
    """The exhibits of ``findings`` (each's ``limit`` surest cases), the records read once."""
    out = [_cases(run, f, limit) for f in findings]
    ids = sorted({r["record_id"] for e in out for r in e.rows})
    records, note = read_records(run, ids)
    features = [c for c in (next(iter(records.values())).keys() if records else []) if not c.startswith("_")]
    if not records:  # the lake copy is gone: the stored counterfactual values are still shown
        features = list(dict.fromkeys(f for e in out for r in e.rows for f in r.get("values", {})))
    for e in out:
        e.features = features
        if note:
            e.notes.append(note)
        for r in e.rows:
            if r["role"] == "counterfactual":  # the values the engine stored, not a record's
                r.update({f: r["values"].get(f) for f in features})
                continue
            rec = records.get(r["record_id"], {})
            r["decision"] = rec.get("_decision")
            r.update({f: rec.get(f) for f in features})
    return out


def _cases(run: Run, f: dict, limit: int) -> Exhibit:
    e = Exhibit(f, [])
    if f["engine"] == "cec":
        pairs = run.query("exhibit_cec_cases", attribute=f["attribute"], group_name=f["group_name"], limit=limit)
        e.cases, e.shown = (pairs[0]["cases"] if pairs else 0), len(pairs)
        for p in pairs:
            e.claims[p["record_id"]] = p
            mine, other = ("protected", "reference") if p["group"] == 1 else ("reference", "protected")
            e.rows.append(_row(p["record_id"], "record", mine, p["record_id"], None, None))
            e.rows.append(_row(p["record_id"], "counterpart", other, p["counterpart_id"], None, p["distance"]))
        return e
    method, k = cst_method(f["finding"])
    claims = run.query("exhibit_cst_cases", attribute=f["attribute"], method=method, k=k or 0, limit=limit)
    e.cases, e.shown = (claims[0]["cases"] if claims else 0), len(claims)
    ids = [c["record_id"] for c in claims]
    e.claims = {c["record_id"]: c for c in claims}
    groups: dict[str, list[dict]] = {}
    if method != "CF" and ids:
        if "cst_evidence" in run.tables:
            for g in run.query("exhibit_cst_comparators", attribute=f["attribute"], ids=ids, k=k,
                               test_centre=TEST_CENTRE.get(method, "counterfactual")):
                groups.setdefault(g["record_id"], []).append(g)
        missing = [i for i in ids if i not in groups]
        if missing:
            e.notes.append(f"{len(missing)} of the {len(ids)} cases have no comparison groups stored "
                           "(engines.cst.evidence: none, or a warehouse written before it): they are listed alone")
    elif method == "CF":
        e.notes.append("CF compares each complainant's decision with its counterfactual's decision (the same "
                       "applicant in the reference group, through the SCM): there are no comparators")
    points = _counterfactuals(run, e, f["attribute"], ids) if method in COUNTERFACTUAL and ids else {}
    for c in claims:
        e.rows.append(_row(c["record_id"], "complainant", "protected", c["record_id"], None, None))
        if c["record_id"] in points:
            e.rows.append(points[c["record_id"]])
        for g in groups.get(c["record_id"], []):
            side = "protected" if g["search_group"] == "control" else "reference"
            e.rows.append(_row(c["record_id"], g["search_group"], side, g["neighbour_id"], g["rank"], g["distance"]))
    return e


def _counterfactuals(run: Run, e: Exhibit, attribute: str, ids: list[str]) -> dict[str, dict]:
    """The exhibit rows of the complainants' counterfactual points (``audit.cst_counterfactuals``),
    by case: the complainant as a member of the reference group, its stored values (an ordinal's
    or a category's level where there is one) and its counterfactual decision; a note for the
    cases without one."""
    if "cst_counterfactuals" not in run.tables:
        e.notes.append("this warehouse was written before CST stored the complainants' counterfactual points "
                       "(no audit.cst_counterfactuals): the point each test group was searched around is not "
                       "shown; an audit run again stores it")
        return {}
    out: dict[str, dict] = {}
    for v in run.query("exhibit_cst_counterfactuals", attribute=attribute, ids=ids):
        row = out.setdefault(v["record_id"], {**_row(v["record_id"], "counterfactual", "reference", v["record_id"],
                                                      None, None), "decision": v["decision_counterfactual"],
                                              "values": {}})
        row["values"][v["feature"]] = v["level"] if v["level"] is not None else v["value"]
    missing = [i for i in ids if i not in out]
    if missing:
        e.notes.append(f"{len(missing)} of the {len(ids)} cases have no counterfactual point stored "
                       "(engines.cst.evidence: none, or a run written before CST stored them): they are "
                       "listed without one")
    return out


def _row(case: str, role: str, side: str, record_id: str, rank: int | None, distance: float | None) -> dict:
    return {"case": case, "role": role, "side": side, "record_id": record_id, "rank": rank, "distance": distance}


def read_records(run: Run, ids: list[str]) -> tuple[dict[str, dict], str | None]:
    """The staged records of ``ids`` from the lake copy of the run's dataset version, by id;
    when the copy is gone, none and a note saying so."""
    if not ids:
        return {}, None
    dataset = run.query("dataset") if run.record.get("dataset_version") and "datasets" in run.tables else []
    lake = Path(dataset[0]["lake_path"]) if dataset and dataset[0].get("lake_path") else None
    files = sorted(str(p) for p in lake.rglob("*.parquet")) if lake is not None and lake.is_dir() else []
    if not files:
        return {}, (f"the staged records of dataset version {run.record.get('dataset_version')} are not in "
                    f"the lake ({lake or 'no lake copy recorded'}): features and decisions are not shown")
    rows = run.wh.query("report/exhibit_records", {"files": files, "ids": ids}).to_pylist()
    return {str(r["_id"]): r for r in rows}, None


def group_name(attribute: str, side: str) -> str:
    """An attribute's side as a group name: an intersection's ("race&sex") side is every part's."""
    if "&" in attribute:
        return ",".join(f"{a}={side}" for a in attribute.split("&"))
    return side


def header(name: str, labels: Labels) -> str:
    unit = labels.units.get(name)
    return f"{name} [{unit}]" if unit else name


def csv_rows(e: Exhibit, labels: Labels, page: bool = False) -> tuple[list[str], list[dict]]:
    """The exhibit as CSV columns and rows: one row per person, decisions as the spec records
    them (``decision``: the recorded one; the counterfactual's decision on its row; CEC's
    ``model_decision``: the examined model's, which CEC compares), features with their units in
    the header, the case's claim on the complainant's row. ``page``: for the printable page,
    decisions as words (the page names the codes once) and protected columns' values by their
    labels (Gender 1 -> Female); the CSV keeps what the records hold."""
    def decision(value):
        return labels.decision(value, code=not page)

    cst = e.finding["engine"] == "cst"
    extra = (["delta_p", "ci_low", "ci_high", "p_control", "p_test", "counterfactual_decision"] if cst
             else ["model_decision", "delta_cec", "model_score"])
    columns = ["finding_rank", "case", "role", "group", "rank", "record_id", "distance", "decision",
               *extra, *(header(f, labels) for f in e.features)]
    out = []
    for r in e.rows:
        claim = e.claims.get(r["case"], {})
        row = {"finding_rank": e.rank, "case": r["case"], "role": r["role"],
               "group": labels.group(e.finding["attribute"], group_name(e.finding["attribute"], r["side"])),
               "rank": r["rank"], "record_id": r["record_id"], "distance": r["distance"],
               "decision": decision(r["decision"]) if r["decision"] is not None else "n/a"}
        first = r["role"] in ("complainant", "record")  # the case's own row carries its claim
        if cst:
            row.update({"delta_p": claim.get("delta_p"), "ci_low": claim.get("ci_low"), "ci_high": claim.get("ci_high"),
                        "p_control": claim.get("p_c"), "p_test": claim.get("p_t"),
                        "counterfactual_decision": decision(claim.get("decision_counterfactual"))}
                       if first else {})
        else:
            row.update({"model_decision": decision(claim.get("decision" if first else "counterpart_decision")),
                        "delta_cec": claim.get("delta_cec") if first else None,
                        "model_score": claim.get("score") if first else claim.get("counterpart_score")})
        row.update({header(f, labels): labels.value(f, r.get(f)) if page else r.get(f) for f in e.features})
        out.append(row)
    return columns, out


def write_csv(e: Exhibit, labels: Labels, path: Path) -> Path:
    return write_rows(*csv_rows(e, labels), path)


def write_rows(columns: list[str], rows: list[dict], path: Path) -> Path:
    """A case file's rows as CSV (a null is an empty cell), its folder made on the way."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, columns, extrasaction="ignore")
        w.writeheader()
        w.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)
    return path


def file_name(e: Exhibit) -> str:
    """``finding-<rank>-<engine>.csv``: the rank is the finding's key in its run."""
    return f"finding-{e.rank}-{e.finding['engine']}.csv"
