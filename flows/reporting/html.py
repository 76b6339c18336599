"""The page: escaping, tables, figures, sections and one inline stylesheet (no external
resource of any kind, so the file opens offline and makes no request).

Every value from the warehouse (attribute and group names, record ids, errors, statements)
reaches the page through :func:`esc`: in table cells by :func:`table`, in text by
:func:`markup`, whose template is the only markup; the report's modules build no HTML from
f-strings (tests/test_hostile_names.py checks that)."""
from __future__ import annotations

import html
import re
import string
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#111827;margin:0;background:#f9fafb}
main{max-width:1100px;margin:0 auto;padding:24px 28px 60px;background:#fff}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;border-bottom:2px solid #e5e7eb;padding-bottom:4px;margin-top:36px}
h3{font-size:15px;margin:22px 0 6px}p.lead{color:#4b5563;margin-top:0}
table{border-collapse:collapse;width:100%;margin:8px 0 14px;font-size:12.5px}
th,td{border-bottom:1px solid #e5e7eb;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f3f4f6;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;font-size:13px}
dl.meta dt{color:#6b7280}dl.meta dd{margin:0;font-family:ui-monospace,Menlo,monospace;word-break:break-all}
.flag{display:inline-block;padding:0 6px;border-radius:9px;font-size:11px;font-weight:600;white-space:nowrap}
.flag.yes,.flag.flagged{background:#fee2e2;color:#991b1b}.flag.no,.flag.quiet{background:#e5e7eb;color:#374151}
.flag.evidence{background:#991b1b;color:#fff}.flag.quality{background:#dbeafe;color:#1e3a8a}
.flag.repair{background:#ede9fe;color:#4c1d95}
p.conclusion{font-size:15px;margin:6px 0}td{overflow-wrap:anywhere}td.nb{white-space:nowrap}
table.wide{display:block;overflow-x:auto}section>details>summary{margin:4px 0 8px}
@media print{details{display:block}details>*{display:block}}
figure.plot{margin:10px 0 18px}figure.plot svg{max-width:100%;height:auto}
figcaption{font-size:12px;color:#4b5563}.note{font-size:12px;color:#6b7280}
details summary{cursor:pointer;color:#1d4ed8}nav a{margin-right:12px}
pre{white-space:pre-wrap;overflow-wrap:anywhere}
th{overflow-wrap:normal;word-break:keep-all;hyphens:manual}table.findings td{overflow-wrap:break-word}
table.exhibit{font-size:11px}table.exhibit th{font-size:10.5px}
table.exhibit td,table.exhibit th{padding:3px 4px}table.exhibit td{overflow-wrap:normal}main.wide{max-width:none}
@page{size:landscape;margin:10mm}
@media print{nav{display:none}main{max-width:none;padding:0}body{background:#fff;font-size:10pt}
table{font-size:8pt}table.exhibit{font-size:7pt}table.exhibit th{font-size:7pt}thead{display:table-header-group}
tr,figure,dl{break-inside:avoid}h2,h3,summary{break-after:avoid}main *{max-width:100%}
table.wide{display:table;overflow:visible}a{color:inherit;text-decoration:none}td.nb{white-space:normal}}
"""


def esc(value) -> str:
    return html.escape("" if value is None else str(value))


class _Escaping(string.Formatter):
    def format_field(self, value, format_spec: str) -> str:
        if isinstance(value, Raw):
            return value.html
        return esc(format(value, format_spec))


def markup(template: str, *args, **kwargs) -> str:
    """HTML from ``template`` (trusted markup, ``str.format`` fields) with every field's value
    escaped after formatting (``{:g}``, ``{:,}`` work); a :class:`Raw` value goes in as it is."""
    return _Escaping().format(template, *args, **kwargs)


def fmt(value, digits: int = 3) -> str:
    """A cell value for people: thousands separators, a few significant decimals, n/a."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:
            return "n/a"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}" if abs(value) < 1e-3 and value else f"{value:.{digits}f}"
    return str(value)


def percent(value) -> str:
    """A share as the statements write it: "85.4 %"."""
    return "n/a" if value is None or value != value else f"{100 * value:.1f}\u00a0%"


def points(value, low=None, high=None) -> str:
    """A difference of two shares in percentage points, signed, as the statements write it:
    "+4.8", with its interval "+4.8 (+4.1 to +5.5)"; the header names the unit (points)."""
    if value is None or value != value:
        return "n/a"
    text = f"{100 * value:+.1f}"
    return text if low is None or high is None else f"{text} ({100 * low:+.1f} to {100 * high:+.1f})"


def column_format(values: Iterable) -> Callable[[object], str]:
    """One number format for a table column, so that its numbers read alike (never 1,442 beside
    981.513): whole numbers with thousands separators when every number is whole; otherwise the
    same decimals for every number (3 below 100, 2 below 10,000, none above), thousands
    separated; a column of small fractions some of which are below 0.001 in three significant
    digits. Other cells (text, yes/no, n/a) as :func:`fmt` writes them."""
    numbers = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
               and v == v and abs(v) != float("inf")]
    if not numbers:
        return fmt
    top = max(abs(v) for v in numbers)
    if all(v == int(v) for v in numbers) and (top >= 1 or all(isinstance(v, int) for v in values
                                                            if isinstance(v, (int, float)) and not isinstance(v, bool))):
        spec = ",.0f"
    elif top < 1 and any(0 < abs(v) < 1e-3 for v in numbers):
        spec = ".3g"
    else:
        spec = ",.3f" if top < 100 else ",.2f" if top < 10_000 else ",.0f"

    def write(value) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            return fmt(value)
        return format(value, spec)
    return write


# a short text cell that is a figure ("< 0.001", "87.2 %", "0.92 to 0.93", "2.31 (2.17 to 2.46)"):
# kept on one line, so that a narrow column never breaks inside a number
_FIGURE = re.compile(r"[<>+\-\u2212]?[\s\u00a0]*\d[\d,.]*(?:[\s\u00a0]*%)?(?:[\s(]+(?:to[\s]+)?[+\-\u2212]?\d[\d,.]*\)?)*")


def figure_cell(text: str) -> bool:
    """A formatted figure (not a record id or a code: those are digits alone)."""
    return len(text) <= 24 and not text.isdigit() and _FIGURE.fullmatch(text) is not None


def table(rows: Sequence[dict], columns: Sequence[str] | None = None,
          headers: dict[str, str] | None = None, cls: str = "", fields: dict[str, str] | None = None) -> str:
    """An HTML table of row dicts (numbers right-aligned, one number format per column:
    :func:`column_format`); empty rows give a short note. ``fields``: per column, the field
    name it shows, in the header's tooltip (title attribute)."""
    if not rows:
        return '<p class="note">No rows.</p>'
    columns = list(columns or rows[0].keys())
    headers = headers or {}
    fields = fields or {}
    head = "".join(f'<th title="{esc(fields[c])}">{esc(headers.get(c, c))}</th>' if c in fields
                   else f"<th>{esc(headers.get(c, c))}</th>" for c in columns)
    formats = {c: column_format(r.get(c) for r in rows) for c in columns}
    body = []
    for r in rows:
        cells = []
        for c in columns:
            v = r.get(c)
            if isinstance(v, Raw):
                cells.append(f"<td>{v.html}</td>")
            else:
                num = isinstance(v, (int, float)) and not isinstance(v, bool)
                text = esc(formats[c](v))
                cells.append(f'<td class="num">{text}</td>' if num
                             else f'<td class="nb">{text}</td>' if figure_cell(formats[c](v)) else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


@dataclass(frozen=True)
class Raw:
    """Already-escaped HTML for a table cell."""

    html: str


def flag(on: bool | None, yes: str = "flagged", no: str = "not flagged") -> Raw:
    return Raw(f'<span class="flag {"yes" if on else "no"}">{esc(yes if on else no)}</span>')


def badge(text: str, kind: str) -> str:
    """A word in its colour: flagged / evidence (red: something is wrong with the decisions),
    quiet (grey), quality (blue: a grade of the audit itself), repair (violet: what a re-ranking
    achieved)."""
    return markup('<span class="flag {}">{}</span>', kind, text)


def plot(svg: str, caption: str) -> str:
    return f'<figure class="plot">{svg}<figcaption>{esc(caption)}</figcaption></figure>'


@dataclass
class Section:
    """One part of the report: an anchor id, a heading and its HTML body."""

    id: str
    title: str
    body: list[str] = field(default_factory=list)
    fold: str | None = None  # the body folds under this summary (a <details>) when given

    def add(self, *parts: str) -> "Section":
        self.body.extend(parts)
        return self

    def render(self) -> str:
        body = "".join(self.body)
        if self.fold is not None:
            body = f"<details><summary>{esc(self.fold)}</summary>{body}</details>"
        return (f'<section id="{esc(self.id)}" data-section="{esc(self.id)}">'
                f"<h2>{esc(self.title)}</h2>{body}</section>")


def page(title: str, subtitle: str, sections: Iterable[Section], wide: bool = False) -> str:
    """The whole HTML document; ``wide``: the page's width, not a column of 1100 px (the
    exhibit's tables of many features)."""
    sections = list(sections)
    nav = "".join(f'<a href="#{esc(s.id)}">{esc(s.title)}</a>' for s in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'; img-src data:\">"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>{'<main class=wide>' if wide else '<main>'}"
            f"<h1>{esc(title)}</h1><p class=\"lead\">{esc(subtitle)}</p><nav>{nav}</nav>"
            + "".join(s.render() for s in sections) + "</main></body></html>\n")
