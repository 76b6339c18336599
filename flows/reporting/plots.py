"""Matplotlib figures rendered to inline SVG (no pyplot state, no files, no JavaScript).

Text stays text (``svg.fonttype = none``) so plots are small and selectable; ids are salted with
a fixed string and the date left out, so the same run gives the same bytes."""
from __future__ import annotations

import io
import re

import matplotlib

matplotlib.use("Agg")
from matplotlib import rcParams  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from aequum.flows.reporting.html import markup  # noqa: E402

rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "aequum", "font.size": 9,
                 "axes.spines.top": False, "axes.spines.right": False,
                 "font.family": ["DejaVu Sans", "sans-serif"],
                 "text.parse_math": False})  # names and values are text: a '$' in them is a dollar sign

PROTECTED, REFERENCE, SIGNIFICANT, NEUTRAL = "#c2410c", "#1d4ed8", "#b91c1c", "#6b7280"


def figure(width: float = 7.5, height: float = 3.2) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def to_svg(fig: Figure, title: str) -> str:
    """The figure as an ``<svg>`` element with an accessible title (no XML prolog)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = _GEOMETRY.sub(lambda m: m.group(1) + '="' + _DECIMALS.sub(_two_decimals, m.group(2)).replace(" \n", " ")
                        + '"', svg)
    svg = _BETWEEN_TAGS.sub("><", _METADATA.sub("", svg))
    opening = markup('<svg role="img" aria-label="{}" ', title)
    svg = re.sub(r"<svg ", lambda _m: opening, svg, count=1)
    return svg


# coordinates in the geometry attributes, to two decimals of a point (1/7200 inch; matplotlib
# writes six), never the text (tick labels are <text> content); with the metadata and the
# indentation left out, a plot is a third smaller
_GEOMETRY = re.compile(r'\b(d|transform|x|y|x1|x2|y1|y2|width|height|points|viewBox)="([^"]*)"')
_DECIMALS = re.compile(r"-?\d+\.\d{3,}")
_METADATA = re.compile(r"<metadata>.*?</metadata>", re.S)  # an RDF block saying "an SVG image"
_BETWEEN_TAGS = re.compile(r">\s+<")  # the indentation between elements


def _two_decimals(m: re.Match) -> str:
    text = f"{float(m.group(0)):.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def group_colour(name: str) -> str:
    """Protected groups orange, reference groups blue, mixed intersections grey."""
    parts = [p.split("=")[-1] for p in name.split(",")]
    if all(p == "reference" for p in parts):
        return REFERENCE
    if all(p == "protected" for p in parts):
        return PROTECTED
    return NEUTRAL
