"""The attention viewer of tools/report.py: every kind, layer and head of one
forward pass (an `attnlab inspect` file), a head selector, and the pattern of the
query clicked on shown below the map."""
import numpy as np
import plotly.graph_objects as go

from report_html import PLOT_CONFIG, Page, esc, script_json
from report_run import base_layout

# On a click in the map: outline that query's row and draw its weights as bars;
# on a change of head (the dropdown), redraw both for the head now shown.
CLICK_SCRIPT = """
(function () {
  var map = document.getElementById('attention');
  var bars = document.getElementById('query-pattern');
  var maps = %(maps)s;
  var state = {map: 0, query: maps[0].queries.length - 1};
  function visibleMap() {
    for (var i = 0; i < map.data.length; i++) if (map.data[i].visible !== false) return i;
    return 0;
  }
  function show(m, q) {
    var info = maps[m];
    q = Math.max(0, Math.min(q, info.queries.length - 1));
    state.map = m; state.query = q;
    var row = map.data[m].z[q];
    var keys = info.keys.map(function (_, j) { return j; });
    Plotly.react(bars, [{type: 'bar', x: keys, y: row.map(function (v) { return v === null ? 0 : v; }),
                         marker: {color: row.map(function (v) { return v === null ? '#cccccc' : '#1f77b4'; })},
                         customdata: info.keys,
                         hovertemplate: 'key %%{x} (%%{customdata})<br>weight %%{y:.4f}<extra></extra>'}],
                 {title: {text: info.title + ': query ' + q + ' (' + info.queries[q] + ') attends to', font: {size: 14}},
                  height: 300, margin: {l: 60, r: 20, t: 50, b: 50}, template: map.layout.template,
                  xaxis: {title: {text: 'key'}, tickvals: keys, ticktext: info.keys},
                  yaxis: {title: {text: 'weight'}, range: [0, 1.02]}},
                 %(config)s);
    Plotly.relayout(map, {shapes: [{type: 'rect', xref: 'x', yref: 'y', x0: -0.5, x1: info.keys.length - 0.5,
                                    y0: q - 0.5, y1: q + 0.5, line: {color: '#d62728', width: 3}}]});
  }
  map.on('plotly_click', function (event) {
    var p = event.points[0];
    show(p.curveNumber, Math.round(p.y));
  });
  map.on('plotly_update', function () { show(visibleMap(), state.query); });
  window.attnlabAttention = {show: show, state: state};
  show(0, state.query);
})();
"""


def title_of(m):
    return f"{m['kind']} · layer {m['layer']} · head {m['head']}"


def masked(m):
    """The weights with ineligible keys (the future, for causal maps) as None, and the
    number of ineligible cells that are not 0 (a mask leak)."""
    w = m["weights"]
    Tq, Tk = w.shape
    ineligible = np.zeros((Tq, Tk), dtype=bool)
    if m["causal"]:
        ineligible = np.arange(Tk)[None, :] > np.arange(Tq)[:, None] + (Tk - Tq)
    leaked = ineligible & (w != 0)
    z = [[None if ineligible[i, j] and not leaked[i, j] else float(w[i, j]) for j in range(Tk)] for i in range(Tq)]
    return z, int(leaked.sum())


def attention_figure(maps):
    fig = go.Figure()
    buttons = []
    leaks = {}
    for n, m in enumerate(maps):
        z, leaked = masked(m)
        if leaked:
            leaks[title_of(m)] = leaked
        Tq, Tk = len(m["queries"]), len(m["keys"])
        custom = [[[m["queries"][i], m["keys"][j], i, j] for j in range(Tk)] for i in range(Tq)]
        fig.add_trace(go.Heatmap(
            z=z, x=list(range(Tk)), y=list(range(Tq)), zmin=0, zmax=1, colorscale="Viridis", visible=(n == 0),
            customdata=custom, name=title_of(m), colorbar=dict(title=dict(text="weight", side="right"), thickness=14),
            hovertemplate="query %{customdata[2]} (%{customdata[0]}) → key %{customdata[3]} (%{customdata[1]})"
                          "<br>weight %{z:.4f}<extra></extra>"))
        title = title_of(m) + (f" — MASK LEAK: {leaked} ineligible cell(s) nonzero" if leaked else "")
        buttons.append(dict(label=title_of(m), method="update",
                            args=[{"visible": [k == n for k in range(len(maps))]},
                                  {"title.text": title,
                                   "xaxis.tickvals": list(range(Tk)), "xaxis.ticktext": m["keys"],
                                   "yaxis.tickvals": list(range(Tq)), "yaxis.ticktext": m["queries"]}]))
    first = maps[0]
    size = max(len(first["keys"]), len(first["queries"]))
    layout = base_layout(buttons[0]["args"][1]["title.text"], "key", "query", height=max(420, 140 + 34 * size))
    layout["xaxis"].update(tickvals=list(range(len(first["keys"]))), ticktext=first["keys"], constrain="domain")
    layout["yaxis"].update(tickvals=list(range(len(first["queries"]))), ticktext=first["queries"], autorange="reversed",
                           scaleanchor="x")
    layout["plot_bgcolor"] = "#e6e6e6"  # ineligible keys (no value) show as grey
    layout["margin"]["t"] = 90
    layout["updatemenus"] = [dict(buttons=buttons, direction="down", x=0, xanchor="left", y=1.13, yanchor="bottom",
                                  showactive=True, active=0)]
    fig.update_layout(**layout)
    return fig, leaks


def predictions_table(inspection):
    rows = []
    for i, (token, best) in enumerate(zip(inspection["input"], inspection["argmax"])):
        rows.append([i, token, best])
    return rows


def attention_page(inspection, tokens_text):
    maps = inspection["maps"]
    page = Page(f"attnlab attention: {inspection['checkpoint']}",
                f"step {inspection['step']}, tokens “{esc(tokens_text)}”: {len(maps)} maps "
                f"({', '.join(sorted({m['kind'] for m in maps}))})")
    page.paragraph("Pick a kind, layer and head in the menu above the map; click a query (a row) to see its weights "
                   "over the keys below. Grey cells are keys the query may not attend to (the future, for causal "
                   "attention); their weight is exactly 0.", "note")
    fig, leaks = attention_figure(maps)
    if leaks:
        page.paragraph("MASK LEAK: " + "; ".join(f"{esc(k)}: {v} cell(s)" for k, v in leaks.items()), "bad")
    page.figure("attention", fig)
    page.figure("query-pattern", go.Figure(layout=dict(height=300)))
    meta = [{"title": title_of(m), "queries": m["queries"], "keys": m["keys"]} for m in maps]
    page.script(CLICK_SCRIPT % {"maps": script_json(meta), "config": script_json(PLOT_CONFIG)})
    if inspection.get("argmax"):
        page.heading("Predictions")
        page.paragraph("The decoder input and the most likely next token at each position (argmax of the logits).",
                       "note")
        page.table(["position", "input", "argmax"], predictions_table(inspection), table_id="predictions")
    return page
