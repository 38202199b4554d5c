"""The page of an attnlab report (tools/report.py): one self-contained HTML file.

Everything the page needs is inside it: plotly.js (Debian's python3-plotly ships
it, 8.7 MB and not minified; embedded once in <head>, gzip-compressed and
base64-encoded, 2.5 MB, which the page decompresses with the browser's own
DecompressionStream before it draws a chart; no MathJax),
the figures' data (plotly.io.to_json, drawn by Plotly.newPlot), the CSS and the few inline
scripts (table sorting, the attention viewer's click handler). A
Content-Security-Policy meta tag forbids every fetch (default-src 'none'), so the
file behaves the same offline as online, and a browser refuses any request a
future plotly.js might try.
"""
import base64
import gzip
import html
import json
import math
import re

import plotly.io as pio
import plotly.offline

_PLOTLY_SCRIPT = None


def plotly_script():
    """The <script> body that makes plotly.js: its gzip-compressed text in base64,
    decompressed by the browser (DecompressionStream, no request of any kind) and
    run as an inline script; window.attnlabPlotly is a promise that resolves once
    Plotly exists. Computed once per process (compressing takes about 0.3 s)."""
    global _PLOTLY_SCRIPT
    if _PLOTLY_SCRIPT is None:
        code = plotly.offline.get_plotlyjs()
        version = re.search(r"plotly\.js v([0-9][0-9.]*)", code[:2000])
        packed = base64.b64encode(gzip.compress(code.encode("utf-8"), compresslevel=6, mtime=0)).decode("ascii")
        _PLOTLY_SCRIPT = (
            f"/* plotly.js v{version.group(1) if version else '?'} (Debian's python3-plotly), gzip + base64, "
            "decompressed here */\n"
            "window.attnlabPlotly = (function () {\n"
            f"  var packed = \"{packed}\";\n"
            "  var bytes = Uint8Array.from(atob(packed), function (c) { return c.charCodeAt(0); });\n"
            "  var text = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));\n"
            "  return new Response(text).text().then(function (code) {\n"
            "    var script = document.createElement('script');\n"
            "    script.textContent = code;\n"
            "    document.head.appendChild(script);\n"
            "  });\n"
            "})();")
    return _PLOTLY_SCRIPT


# Shown in the modebar of every chart; no "edit in Chart Studio" link, no logo.
PLOT_CONFIG = {"displaylogo": False, "responsive": True, "showLink": False,
               "modeBarButtonsToRemove": ["select2d", "lasso2d"]}

CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "img-src data: blob:; font-src data:")

CSS = """
body { font-family: sans-serif; margin: 1.2em 2em; color: #222; max-width: 1400px; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.0em; margin: 1em 0 0.3em; }
.sub { color: #555; margin-top: 0; } .note { color: #555; font-size: 0.9em; } .bad { color: #b00020; font-weight: bold; }
.good { color: #1b7f3b; font-weight: bold; }
table.data { border-collapse: collapse; font-size: 0.85em; margin: 0.4em 0; }
table.data th, table.data td { border: 1px solid #ddd; padding: 2px 8px; text-align: left; }
table.data td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.scroll { overflow-x: auto; }
table.data th { background: #f3f3f3; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort=ascending]::after { content: " \\25B2"; }
table.sortable th[aria-sort=descending]::after { content: " \\25BC"; }
.grid { display: flex; flex-wrap: wrap; gap: 0.5em; } .grid > div { flex: 1 1 560px; min-width: 420px; }
details > summary { cursor: pointer; color: #333; }
"""

# Sorts a table.sortable by the clicked column: numbers numerically (an empty
# cell or "-" last), anything else as text; a second click reverses.
SORT_SCRIPT = """
(function () {
  function key(cell) {
    var t = cell.getAttribute('data-sort');
    if (t === null) t = cell.textContent.trim();
    var x = parseFloat(t);
    return (t !== '' && isFinite(t)) ? {n: x} : {s: t};
  }
  function compare(a, b) {
    if ('n' in a && 'n' in b) return a.n - b.n;
    if ('n' in a) return -1;
    if ('n' in b) return 1;
    return a.s < b.s ? -1 : a.s > b.s ? 1 : 0;
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    var heads = table.querySelectorAll('thead th');
    heads.forEach(function (th, column) {
      th.addEventListener('click', function () {
        var descending = th.getAttribute('aria-sort') === 'ascending';
        heads.forEach(function (h) { h.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', descending ? 'descending' : 'ascending');
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (r, s) {
          var c = compare(key(r.cells[column]), key(s.cells[column]));
          return descending ? -c : c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
"""


def esc(value):
    return html.escape(str(value), quote=True)


def script_json(value):
    """JSON for inside a <script> element (no '</' that could close it)."""
    return json.dumps(value).replace("</", "<\\/")


def number_text(value, digits=4):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.{digits}g}"
    return str(value)


class Page:
    """Sections of HTML and plotly figures, in order; html() is the whole file."""

    def __init__(self, title, subtitle=""):
        self.title = title
        self.subtitle = subtitle
        self.parts = []
        self.charts = []  # div ids, in order
        self.figure_scripts = []  # one Plotly.newPlot per chart
        self.scripts = []

    def heading(self, text, level=2):
        self.parts.append(f"<h{level}>{esc(text)}</h{level}>")

    def paragraph(self, text, css=None):
        cls = f' class="{css}"' if css else ""
        self.parts.append(f"<p{cls}>{text}</p>")

    def raw(self, markup):
        self.parts.append(markup)

    def figure_markup(self, div_id, fig):
        """The <div> and <script> of one plotly figure (plotly.js itself is in <head>)."""
        self.charts.append(div_id)
        figure = pio.to_json(fig, validate=True).replace("</", "<\\/")
        height = fig.layout.height or 450
        # Drawn after the whole page is laid out (the scripts follow the body), so that
        # each chart takes the width its box finally has.
        self.figure_scripts.append(f"(function () {{ var figure = {figure};\n"
                                   f"Plotly.newPlot({script_json(div_id)}, figure.data, figure.layout, "
                                   f"{script_json(PLOT_CONFIG)}); }})();")
        return f'<div id="{esc(div_id)}" class="plotly-graph-div" style="height:{height}px; width:100%;"></div>'


    def figure(self, div_id, fig):
        self.parts.append(self.figure_markup(div_id, fig))

    def figures_side_by_side(self, items):
        inner = "".join(f"<div>{self.figure_markup(div_id, fig)}</div>" for div_id, fig in items)
        self.parts.append(f'<div class="grid">{inner}</div>')

    def table(self, header, rows, sortable=False, table_id=None):
        """rows: lists of cell values; numbers are right-aligned and sort numerically,
        a (text, sort key) pair shows text and sorts by the key."""
        self.parts.append(table_markup(header, rows, sortable, table_id))

    def script(self, code):
        self.scripts.append(code)

    def html(self):
        body = "\n".join(self.parts)
        # every script runs once plotly.js is there, in this order
        scripts = "".join(f"<script>window.attnlabPlotly.then(function () {{\n{s}\n}});</script>\n"
                          for s in self.figure_scripts + [SORT_SCRIPT] + self.scripts)
        sub = f'<p class="sub">{self.subtitle}</p>' if self.subtitle else ""
        return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n"
                f"<meta name=\"attnlab-report-charts\" content=\"{' '.join(self.charts)}\">\n"
                f"<title>{esc(self.title)}</title>\n<style>{CSS}</style>\n"
                f"<script>{plotly_script()}</script>\n</head>\n<body>\n"
                f"<h1>{esc(self.title)}</h1>\n{sub}\n{body}\n{scripts}</body>\n</html>\n")


def table_markup(header, rows, sortable=False, table_id=None):
    cls = "data sortable" if sortable else "data"
    ident = f' id="{esc(table_id)}"' if table_id else ""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    lines = []
    for row in rows:
        cells = []
        for value in row:
            if isinstance(value, tuple):
                shown, sort = value
                cells.append(f'<td class="num" data-sort="{esc(sort)}">{esc(shown)}</td>')
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                sort = "" if isinstance(value, float) and math.isnan(value) else repr(value)
                cells.append(f'<td class="num" data-sort="{esc(sort)}">{esc(number_text(value))}</td>')
            else:
                cells.append(f"<td>{esc(value)}</td>")
        lines.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table class="{cls}"{ident}><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(lines)}</tbody></table></div>')
