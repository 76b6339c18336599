"""How the report names what the tables hold: groups by their recorded values ("Female",
"Black or African American & Female"), decisions as the spec records them, features with their
units, and figures by human labels (the field name stays in a tooltip and the glossary).

Everything comes from the run's parameters (``spec.run_parameters``: ``audit.groups``,
``audit.decision``, ``audit.units``); a run written without them reads as the tables name it."""
from __future__ import annotations

from datetime import datetime

MEASURES = {  # field name -> what a reader calls it
    "di_ratio": "disparate impact ratio", "spd": "difference in favourable rates",
    "significant_share": "share of complainants significantly treated worse",
    "discriminated_share": "share of complainants treated worse",
    "regime_b": "share of pairs with the same decision for different reasons",
    "regime_b_share": "share of pairs with the same decision for different reasons",
    "adjusted_denial_difference": "difference in the probability of denial given the controls",
    "coverage_at_k": "share of the rejected with a feasible path to approval",
    "d0_at_k0": "largest recourse cost needed to cover the group",
    "r_before": "recourse fairness ratio (lowest over highest group mean cost)",
    "median_difference": "difference of the groups' medians of the cited variable",
    "precision": "precision of the audit's findings against the ground truth",
    "pba": "share of inputs proven persistently biased", "odds_ratio": "odds ratio of an unfavourable decision",
    "estimate": "controlled difference in the probability of approval",
    "lenders_below_peers": "lenders with a significantly lower share than their peers",
    "share_difference": "lender's share minus its peers' share",
    "lenders_above_peers": "lenders denying the protected group significantly more than their peers",
    "ratio_of_odds_ratios": "lender's odds ratio of denial over its peers'",
    "adjusted_price_difference": "difference in a loan's price after controls",
    "hpml_ratio": "ratio of the groups' higher-priced loan shares",
}


def short(label: str, attribute: str = "", keep: int = 2) -> str:
    """A pooled group of many values (a spec without a label for it) by its size: "Black or
    African American / Asian" stays, five values read "race: 5 values pooled"."""
    parts = label.split(" / ")
    if len(parts) <= keep:
        return label
    return f"{attribute or 'group'}: {len(parts)} values pooled"


class Labels:
    def __init__(self, parameters: dict):
        audit = parameters.get("audit", {}) if isinstance(parameters, dict) else {}
        self.groups = {g["attribute"]: g for g in audit.get("groups") or [] if isinstance(g, dict)}
        self.comparisons = {c["label"]: c for c in audit.get("comparisons") or [] if isinstance(c, dict)}
        self.decisions = audit.get("decision") or {}
        self.units = audit.get("units") or {}
        self.values = audit.get("values") or {}

    def side(self, attribute: str, side: str) -> str | None:
        g = self.groups.get(attribute)
        return short(g[side], attribute) if g and g.get(side) else None

    def group(self, attribute: str, group_name: str | None) -> str:
        """The group as recorded: "Female"; an intersection "Black or African American & Female"."""
        if group_name is None:
            return "n/a"
        if group_name in ("protected", "reference") and attribute in self.comparisons:
            # a per-value comparison (race=Asian): its value against its attribute's reference group
            c = self.comparisons[attribute]
            return (str(c.get("value")) if group_name == "protected"
                    else self.side(c.get("attribute", ""), "reference") or f"reference group of {c.get('attribute')}")
        if group_name in ("protected", "reference"):
            parts = attribute.split("&")
            if len(parts) > 1 and all(self.side(a, group_name) for a in parts):
                # an intersection's side is every part's: race&sex's protected group is
                # "minority race (pooled) & Female"
                return self.group(attribute, ",".join(f"{a}={group_name}" for a in parts))
            return self.side(attribute, group_name) or f"{group_name} group of {attribute}"
        if group_name in ("all", "pooled"):
            return f"all of {attribute}"
        out = []
        for part in group_name.split(","):
            for side in ("protected", "reference"):
                if part.endswith("=" + side):
                    out.append(self.side(part[: -len(side) - 1], side) or part)
                    break
            else:
                out.append(part)
        return " & ".join(out)

    def versus(self, attribute: str, group_name: str | None) -> str:
        """"Female against Male" for a group compared with its attribute's reference group."""
        ref = self.side(attribute, "reference") or (self.group(attribute, "reference")
                                                    if "&" in attribute or attribute in self.comparisons else None)
        me = self.group(attribute, group_name)
        return f"{me} against {ref}" if ref and group_name != "reference" and ref != me else me

    def decision(self, value, code: bool = True) -> str:
        """An internal decision (1 favourable, 0 unfavourable) as the spec records it: "favourable
        (1)"; without ``code``, the word alone (a page says the codes once)."""
        if value is None:
            return "n/a"
        favourable = bool(value) if not isinstance(value, str) else value in ("1", "true", "True")
        key = "favourable" if favourable else "unfavourable"
        recorded = self.decisions.get(key)
        return f"{key} ({recorded})" if recorded and code else key

    def codes(self) -> str | None:
        """The recorded decision codes in words: "favourable: recorded 1; unfavourable: recorded -1"."""
        said = [f"{k}: recorded {self.decisions[k]}" for k in ("favourable", "unfavourable") if self.decisions.get(k)]
        return "; ".join(said) or None

    def value(self, column: str, value):
        """A protected column's recorded value as the spec labels it (Gender 1 -> "Female")."""
        named = self.values.get(column)
        if not named or value is None:
            return value
        key = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
        return named.get(key, value)

    def feature(self, name: str) -> str:
        unit = self.units.get(name)
        return f"{name} ({unit})" if unit else name

    def cost_unit(self, engine: str, parameters: dict | None = None) -> str:
        """What an engine's recourse costs are measured in. RAGUEL: the weighted Euclidean
        distance to the decision boundary in the features' own units (engines.reranking.recourse,
        Eq. 2): the unit itself when the features share it. FGCE: its ``cost`` (engines.feasibility
        .params): the L2 distance, or the path weight, on features min-max scaled to [0, 1], or
        the hops of the path."""
        if engine == "fgce":
            cost = ((parameters or {}).get("fgce") or {}).get("cost", "distance")
            return {"hops": "hops", "path": "path weight, features scaled to [0, 1]"}.get(
                cost, "distance, features scaled to [0, 1]")
        units = sorted(set(self.units.values()))
        if len(units) == 1:
            return units[0]
        return "weighted distance in the features' units" + (f" ({', '.join(units)})" if units else "")

    def measure(self, name: str | None) -> str:
        return MEASURES.get(name or "", name or "")


def utc(value) -> str:
    """A warehouse time (UTC) for people: 2026-11-27 12:22:35 UTC."""
    if value is None:
        return "n/a"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{value} UTC"
