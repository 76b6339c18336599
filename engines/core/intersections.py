"""Which intersections of protected attributes an engine tests (``intersections: auto``).

An intersection joins attributes of different columns — race × sex: the applicants protected in
both (Black women) against those in the reference group of both (White men). A penalty that
falls on one intersection only (Black women, not Black men nor White women) shows in no
attribute alone with its full size, so the engines that compare individuals (CST) and the
group-level test beside them (regression) compare intersections by default where the data
allow: every pair of the spec's attributes on different columns (each column's first
attribute: the pooled comparison, never a per-value one of ``protected[].compare``) whose four
cells — protected in both, protected in one and reference in the other, reference in both —
each have at least ``min_cell`` records. A pair with a smaller cell is skipped and named
(:class:`Resolved`), not an error: the spec did not ask for it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# the fewest records of any cell of an intersection tested by default: below it no group-level
# comparison of the cell is worth reporting (the regression engine's min_group_size default)
MIN_CELL = 30


@dataclass(frozen=True)
class Resolved:
    """The intersections to test (lists of attribute names) and the pairs skipped, with why."""

    units: list[list[str]]
    skipped: dict[str, str] = field(default_factory=dict)


def column_attributes(spec) -> dict[str, str]:
    """Each protected column's first attribute that is not a per-value comparison (the pooled
    one of ``protected[].compare``), by column, in spec order."""
    first: dict[str, str] = {}
    for p in spec.protected:
        if p.of is None:
            first.setdefault(p.column, p.name)
    return first


def candidate_pairs(spec) -> list[list[str]]:
    """Every pair of protected attributes on different columns, in spec order (each column's
    :func:`column_attributes`)."""
    names = list(column_attributes(spec).values())
    return [[a, b] for i, a in enumerate(names) for b in names[i + 1:]]


def unit_groups(groups: dict[str, np.ndarray], unit: list[str]) -> np.ndarray:
    """Per record: 1 protected in every attribute of ``unit``, 0 in the reference group of every
    one, -1 otherwise (``groups``: per attribute, 1 / 0 / -1); an attribute alone is its groups."""
    if len(unit) == 1:
        return groups[unit[0]].astype(np.int8, copy=False)
    prot = np.logical_and.reduce([groups[a] == 1 for a in unit])
    ref = np.logical_and.reduce([groups[a] == 0 for a in unit])
    return np.where(prot, 1, np.where(ref, 0, -1)).astype(np.int8)


def resolve(spec, groups: dict[str, np.ndarray], declared, min_cell: int) -> Resolved:
    """The intersections tested: ``declared`` when it is a list (the spec's choice, tested as
    given); for ``"auto"`` the candidate pairs whose four cells each hold ``min_cell`` records
    (``groups``: per attribute, 1 protected / 0 reference / -1 neither)."""
    if declared != "auto":
        return Resolved([list(u) for u in declared])
    units, skipped = [], {}
    for a, b in candidate_pairs(spec):
        cells = {f"{sa}×{sb}": int(np.count_nonzero((groups[a] == va) & (groups[b] == vb)))
                 for sa, va in (("protected", 1), ("reference", 0)) for sb, vb in (("protected", 1), ("reference", 0))}
        small = {cell: n for cell, n in cells.items() if n < min_cell}
        if small:
            skipped[f"{a}&{b}"] = ", ".join(f"{cell} {n:,}" for cell, n in small.items()) + \
                f" record(s), fewer than {min_cell:,}"
        else:
            units.append([a, b])
    return Resolved(units, skipped)


def tested_units(spec, groups: dict[str, np.ndarray], declared, min_cell: int,
                 other_groups: bool) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """The units a controlled comparison tests and the groups it holds for each: every attribute,
    and the intersections :func:`resolve` gives (``a&b``: protected in every attribute of one, 1,
    against reference in every one, 0: :func:`unit_groups`); per unit, with ``other_groups``, the
    attributes of the other columns (each column's :func:`column_attributes`) whose groups are held.
    Returned: unit label -> its groups (1 / 0 / -1), unit label -> the held attributes."""
    first = column_attributes(spec)
    column = {p.name: p.column for p in spec.protected}
    out = dict(groups)
    units = {a: [a] for a in groups}
    for unit in resolve(spec, groups, declared, min_cell).units:
        label = "&".join(unit)
        out[label] = unit_groups(groups, unit)
        units[label] = list(unit)
    held = {label: [name for c, name in first.items() if c not in {column[a] for a in unit}]
            if other_groups else [] for label, unit in units.items()}
    return out, held
