"""The HTML page of a report: sections, embedded figures and tables, one inline stylesheet.

Nothing is fetched when the page opens: figures are PNGs embedded as base64 ``data:`` URIs, the
stylesheet is inline, and one small inline script (:data:`SCRIPT`) makes the long tables
filterable and sortable (without it they are plain scrolling tables).
"""

from __future__ import annotations

import base64
import html
import io
import re
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")  # reports are written headless
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

DPI = 90
# Readable in grey print and by colour-blind readers: lines differ by style and marker too.
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
COLORS = ("#000000", "#444444", "#777777", "#222222", "#999999", "#555555")
# One colour per draft length k in every figure (Okabe and Ito's colour-blind-safe palette;
# k = 0, no SD, in black): the same k looks the same in the speedup, latency and k* figures.
K_COLORS = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#D55E00", "#0072B2", "#CC79A7",
            "#F0E442", "#999999")

# matplotlib settings of every figure (report.draw applies them): a title sits at the top
# of its panel, where no figure puts tick labels, instead of being moved above whatever is
# there, which matplotlib measures on each draw (a tenth of a figure's time).
RC = {"axes.titley": 1.0}

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #111;
       max-width: 1200px; margin: 2em auto; padding: 0 1em; line-height: 1.45; }
h1 { border-bottom: 2px solid #333; padding-bottom: .2em; }
h2 { border-bottom: 1px solid #999; margin-top: 2.2em; }
nav ol { columns: 2; }
figure { margin: 1.2em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { font-size: .92em; color: #333; }
table { border-collapse: collapse; font-size: .85em; margin: .8em 0; }
th, td { border: 1px solid #bbb; padding: .25em .5em; text-align: right; }
th { background: #eee; }
td:first-child, th:first-child { text-align: left; }
.scroll { max-height: 32em; overflow: auto; }
.filter { margin: .6em 0 0; font-size: .85em; }
table.long th { cursor: pointer; }
table.long th[data-sorted]::after { content: attr(data-sorted); }
table.answer td:nth-child(4) { font-weight: bold; white-space: nowrap; }
table.answer td:last-child, table.answer th:last-child { text-align: left; }
.note { background: #f4f4f4; border-left: 4px solid #555; padding: .5em 1em; }
.warn { background: #fff4e0; border-left: 4px solid #a60; padding: .5em 1em; }
.alert { background: #fde8e8; border: 2px solid #a00; padding: .6em 1em; font-weight: bold; }
code { background: #f2f2f2; padding: 0 .2em; }
"""


@dataclass
class Section:
    """One section of the report: an anchor id, a title and its HTML body parts."""

    id: str
    title: str
    parts: list[str] = field(default_factory=list)

    def add(self, *parts: str) -> Section:
        self.parts.extend(parts)
        return self

    def html(self) -> str:
        body = "\n".join(self.parts)
        return (f'<section id="{self.id}">\n<h2>{html.escape(self.title)}</h2>\n{body}\n'
                "</section>")


def text(paragraph: str, cls: str | None = None) -> str:
    """A paragraph of plain text (escaped)."""
    attr = f' class="{cls}"' if cls else ""
    return f"<p{attr}>{html.escape(paragraph)}</p>"


def items(lines: list[str]) -> str:
    """A bulleted list of plain-text lines."""
    return "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>"


def figure(fig, caption: str, alt: str | None = None) -> str:
    """Render a matplotlib figure as an embedded PNG with a caption, and close it."""
    from matplotlib.layout_engine import PlaceHolderLayoutEngine
    from PIL import Image  # matplotlib's own dependency

    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        # left by tight_layout(), which has placed everything: without this savefig draws the
        # whole figure twice (a third of a report's time)
        fig.set_layout_engine(None)
    _fewer_ticks(fig)
    fig.set_dpi(DPI)
    fig.canvas.draw()
    # the drawn pixels, not savefig's PNG: it would be encoded only to be decoded again here
    pixels = Image.fromarray(np.asarray(fig.canvas.buffer_rgba())).convert("RGB")
    plt.close(fig)
    # a palette of 256 colours: a third of the bytes of full colour, no visible loss here
    # (the fast octree: a tenth of the median cut's time, and smaller files of these figures)
    small = io.BytesIO()
    pixels.quantize(256, method=Image.Quantize.FASTOCTREE).save(small, format="png")
    data = base64.b64encode(small.getvalue()).decode("ascii")
    alt = html.escape(alt or caption, quote=True)
    return (f'<figure><img alt="{alt}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def _fewer_ticks(fig) -> None:
    """At most about five major ticks on each linear axis of ``fig``: on these small panels
    matplotlib's default (up to nine) crowds the labels, and creating and drawing ticks is the
    largest part of a figure's time."""
    from matplotlib import ticker

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if type(axis.get_major_locator()) is ticker.AutoLocator:
                axis.set_major_locator(ticker.MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))


IMAGE = re.compile(r'<img alt="(?P<alt>[^"]*)" src="data:image/png;base64,(?P<data>[^"]+)">')


def images(page_html: str) -> list[tuple[str, bytes]]:
    """The embedded figures of a page: ``(alt text, PNG bytes)`` in page order."""
    return [(html.unescape(m["alt"]), base64.b64decode(m["data"]))
            for m in IMAGE.finditer(page_html)]


def slug(alt: str) -> str:
    """A file name stem for a figure from its alt text."""
    return re.sub(r"[^a-z0-9]+", "-", alt.lower()).strip("-") or "figure"


# Long tables (class "long"): a filter box above each (rows containing every word typed) and
# sorting by a click on a column's header (numbers as numbers, "–" last). No library, nothing
# fetched.
SCRIPT = """
document.querySelectorAll("table.long").forEach(function (table) {
  var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
  var box = document.createElement("input");
  box.type = "search"; box.className = "filter";
  box.placeholder = "filter " + rows.length + " rows (words, all must match)";
  table.parentNode.parentNode.insertBefore(box, table.parentNode);
  box.addEventListener("input", function () {
    var words = box.value.toLowerCase().split(/\\s+/).filter(Boolean);
    rows.forEach(function (row) {
      var text = row.textContent.toLowerCase();
      row.style.display = words.every(function (w) { return text.indexOf(w) >= 0; })
        ? "" : "none";
    });
  });
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
    th.addEventListener("click", function () {
      var down = th.getAttribute("data-sorted") === " \\u25B2";
      Array.prototype.forEach.call(th.parentNode.cells, function (c) {
        c.removeAttribute("data-sorted");
      });
      th.setAttribute("data-sorted", down ? " \\u25BC" : " \\u25B2");
      function key(row) {
        var t = row.cells[col].textContent.trim(), x = parseFloat(t);
        return isNaN(x) ? t : x;
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b), d;
        if (typeof x === typeof y) d = x < y ? -1 : x > y ? 1 : 0;
        else d = typeof x === "number" ? -1 : 1;
        return down ? -d : d;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""


def table(df: pd.DataFrame, floatfmt: str = "{:.3g}", scroll: bool = False,
          cls: str | None = None) -> str:
    """An HTML table of ``df`` (values escaped), floats formatted with ``floatfmt``; ``cls``:
    the table's CSS class. A ``scroll`` table is a long one: it scrolls, and :data:`SCRIPT`
    gives it a filter box and sorting by column."""
    out = df.copy()
    for col in out.columns:
        if pd.api.types.is_float_dtype(out[col]):
            out[col] = out[col].map(lambda v: "–" if pd.isna(v) else floatfmt.format(v))
    classes = " ".join(c for c in (cls, "long" if scroll else None) if c) or None
    body = out.to_html(index=False, escape=True, border=0, classes=classes)
    return f'<div class="scroll">{body}</div>' if scroll else body


def render(title: str, meta: list[str], sections: list[Section],
           alerts: list[str] = ()) -> str:
    """The whole page: title, warnings that must be read first (``alerts``, e.g. a fit that
    did not converge), what it was made from, a table of contents, the sections."""
    toc = "".join(f'<li><a href="#{s.id}">{html.escape(s.title)}</a></li>' for s in sections)
    top = "".join(text(line, "alert") + "\n" for line in alerts)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            f"<h1>{html.escape(title)}</h1>\n{top}{items(meta)}\n<nav><ol>{toc}</ol></nav>\n"
            + "\n".join(s.html() for s in sections)
            + f"\n<script>{SCRIPT}</script>\n</body>\n</html>\n")


# Marks of the load axis of speedup and k* panels.
EXTRAPOLATION = "extrapolation"
CEILING = "measured ceiling"
HIGHEST = "highest measured load"


def mark_loads(ax, measured: float, ceiling: float | None, label: bool = True,
               shade: str = "0.5", alpha: float = 0.18) -> None:
    """Mark a load axis: loads beyond the highest measured one (``measured``, req/s) shaded
    (``shade``, ``alpha``; a white veil suits dark maps) and labelled "extrapolation" at the
    panel's bottom right, and a dashed vertical line at the measured ceiling (or, where none
    was measured, at the highest measured load). Call after the x-limits are set."""
    from matplotlib import transforms

    lo, hi = ax.get_xlim()
    trans = transforms.blended_transform_factory(ax.transData, ax.transAxes)
    if np.isfinite(measured) and measured < hi:
        ax.axvspan(measured, hi, facecolor=shade, alpha=alpha, lw=0, zorder=2.5)
        ax.axvline(measured, color="0.35", ls=":", lw=0.8, zorder=2.6)
        if label:
            ax.text(hi, 0.02, EXTRAPOLATION, transform=trans, rotation=90, ha="right",
                    va="bottom", fontsize=6.5, color="0.1", zorder=4,
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.6, "pad": 0.5})
    line, name = (ceiling, CEILING) if ceiling is not None and np.isfinite(ceiling) else (
        measured, HIGHEST)
    if np.isfinite(line) and lo <= line <= hi:
        ax.axvline(line, color="k", ls=(0, (4, 2)), lw=1.1, zorder=3)
        if label:
            ax.text(line, 0.5, f"{name} {line:.3g}", transform=trans, rotation=90, ha="right",
                    va="center", fontsize=6.5, color="k", zorder=4,
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7, "pad": 1})


# Margins (inches: left, right, bottom, top) of a panel in a grid whose panels have tick
# labels of a few characters, axis labels at font size 8 and a title of two lines at 7.
GRID_MARGINS = (0.6, 0.15, 0.45, 0.42)


def subplots(n: int, ncols: int, width: float = 3.6, height: float = 2.8,
             margins: tuple[float, float, float, float] | None = None, aside: float = 0.0,
             **kwargs):
    """A grid of ``n`` panels in ``ncols`` columns; unused panels are hidden.

    ``margins`` (inches: left, right, bottom, top; the space between panels is the left
    plus the right margin across and the top plus the bottom one down) places the panels for
    good: for panels whose labels have a known size, with no layout engine to measure every
    text on each draw (``layout="constrained"`` and ``tight_layout`` are most of a figure's
    drawing time). ``aside`` (inches) is added at the right for a colour bar."""
    ncols = max(1, min(ncols, n))
    nrows = -(-n // ncols)
    if margins is not None:
        left, right, bottom, top = margins
        w, h = width * ncols + aside, height * nrows
        kwargs["gridspec_kw"] = {
            "left": left / w, "right": 1 - (right + aside) / w, "bottom": bottom / h,
            "top": 1 - top / h,
            "wspace": (left + right) / (width - left - right),
            "hspace": (top + bottom) / (height - top - bottom)}
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols + aside, height * nrows),
                             squeeze=False, **kwargs)
    flat = axes.ravel()
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def key(ax, entries: list[tuple[str, dict]], **kwargs) -> None:
    """A legend on ``ax`` of ``(label, style)`` entries that need no plotted artist: a style
    with ``facecolor`` is a filled patch, any other a line (``color``, ``lw``, ``ls``,
    ``marker``, ...)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(label=label, **style) if "facecolor" in style else
               Line2D([], [], label=label, **{"color": "k"} | style)
               for label, style in entries]
    ax.legend(handles=handles, **{"fontsize": 7} | kwargs)


def two_lines(label: str) -> str:
    """A long setup label broken before its drafter (``group\nmethod:drafter``)."""
    head, _, tail = label.rpartition(" ")
    return f"{head}\n{tail}" if head else label


def style(i: int) -> dict:
    """Line style, marker and grey level of the ``i``-th series."""
    return {"linestyle": LINESTYLES[i % len(LINESTYLES)], "marker": MARKERS[i % len(MARKERS)],
            "color": COLORS[i % len(COLORS)]}


def k_style(k: int) -> dict:
    """Colour (:data:`K_COLORS`), line style and marker of draft length ``k``, the same in
    every figure."""
    k = int(k)
    return {"linestyle": LINESTYLES[k % len(LINESTYLES)], "marker": MARKERS[k % len(MARKERS)],
            "color": K_COLORS[k % len(K_COLORS)]}
