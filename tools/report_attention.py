"""The attention viewer of tools/report.py: every kind, layer and head of one
forward pass per prompt (an `attnlab inspect` file each), laid out as CircuitsVis's
`attention_heads`: a prompt selector, a layer selector over a grid of small maps
(one per head; hover one to preview it, click to keep it), the prompt's tokens as a
row of spans (hover one to outline its row and column in the big map and shade
every key by the weight that query gives it), the big map with its head menu, and
the pattern of the query clicked on shown below it."""
import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from report_html import PLOT_CONFIG, Page, esc, script_json
from report_run import base_layout

# Page-specific CSS (CSP allows inline styles): thumbnails drawn cell by cell, pixelated.
VIEWER_CSS = """<style>
.viewer-controls label { margin-right: 1.5em; }
.head-group { display: flex; flex-wrap: wrap; gap: 0.6em; margin: 0.5em 0; }
.head-group[hidden], .tokens[hidden] { display: none; }
.head-thumb { cursor: pointer; text-align: center; font-size: 0.8em; padding: 3px; border: 2px solid transparent; }
.head-thumb.selected { border-color: #d62728; }
.head-thumb canvas { width: 96px; height: 96px; image-rendering: pixelated; background: #e6e6e6; display: block; }
.tokens { margin: 0.5em 0; line-height: 2.1em; font-family: monospace; font-size: 1.05em; }
.tokens .token { padding: 2px 4px; margin: 0 1px; border: 1px solid #ccc; border-radius: 3px; cursor: default;
                 white-space: pre; }
.tokens .token.hovered { outline: 2px solid #d62728; }
</style>"""

# `prompts` holds, per prompt, its text, its maps' labels and its whole figure (the
# big map's traces and head menu); the figure of prompt 0 is also the one drawn first.
VIEWER_SCRIPT = """
(function () {
  var map = document.getElementById('attention');
  var bars = document.getElementById('query-pattern');
  var prompts = %(prompts)s;
  var config = %(config)s;
  var promptSelect = document.getElementById('prompt-select');
  var layerSelect = document.getElementById('layer-select');
  var queryRow = document.getElementById('token-row');
  var keyRow = document.getElementById('key-row');
  var maps = prompts[0].maps;
  var state = {prompt: 0, map: 0, locked: 0, query: maps[0].queries.length - 1, token: null, previewing: false};

  function weights(n) { return prompts[state.prompt].figure.data[n].z; }  // [Tq][Tk], null where ineligible
  function visibleMap() {
    for (var i = 0; i < map.data.length; i++) if (map.data[i].visible !== false) return i;
    return 0;
  }
  // The big map's own colour scale, so that a thumbnail reads like the map.
  function rgb(text) {
    if (text.charAt(0) === '#') return [1, 3, 5].map(function (k) { return parseInt(text.substr(k, 2), 16); });
    return text.replace(/[^0-9.,]/g, '').split(',').slice(0, 3).map(Number);
  }
  var stops = map._fullData[0].colorscale.map(function (s) { return [s[0], rgb(s[1])]; });
  function colour(v) {
    if (v === null) return 'rgb(230,230,230)';
    v = Math.max(0, Math.min(1, v));
    var i = 1;
    while (i < stops.length - 1 && v > stops[i][0]) i++;
    var a = stops[i - 1], b = stops[i], t = (v - a[0]) / ((b[0] - a[0]) || 1);
    return 'rgb(' + [0, 1, 2].map(function (k) { return Math.round(a[1][k] + t * (b[1][k] - a[1][k])); }).join(',') + ')';
  }

  function drawThumbnails() {
    document.querySelectorAll('#head-grid .head-thumb').forEach(function (box) {
      var z = weights(+box.dataset.map), cell = Math.max(1, Math.floor(96 / Math.max(z.length, z[0].length)));
      var canvas = box.querySelector('canvas'), context = canvas.getContext('2d');
      canvas.width = z[0].length * cell; canvas.height = z.length * cell;
      for (var i = 0; i < z.length; i++)
        for (var j = 0; j < z[i].length; j++) {
          context.fillStyle = colour(z[i][j]);
          context.fillRect(j * cell, i * cell, cell, cell);
        }
    });
  }
  function showGroup(g) {
    layerSelect.value = String(g);
    document.querySelectorAll('#head-grid .head-group').forEach(function (group) {
      group.hidden = group.dataset.group !== String(g);
    });
  }
  // A map's query row and key row: one row when they are the same sequence.
  function tokenSpans(row, labels, role) {
    row.textContent = '';
    labels.forEach(function (label, i) {
      var span = document.createElement('span');
      span.className = 'token'; span.textContent = label; span.dataset.index = i;
      span.title = span.dataset.name = role + ' ' + i;
      if (role === 'query') {
        span.addEventListener('mouseenter', function () { hoverToken(i); });
        span.addEventListener('mouseleave', function () { hoverToken(null); });
      }
      row.appendChild(span);
    });
  }
  function drawTokens() {
    var info = maps[state.map];
    tokenSpans(queryRow, info.queries, 'query');
    keyRow.hidden = info.same;
    if (!info.same) tokenSpans(keyRow, info.keys, 'key');
  }
  // Hovering query i: outline its row (and, in self-attention, its column as a key) and
  // shade each key's span by the weight query i gives it in the map shown.
  function hoverToken(i) {
    var info = maps[state.map];
    state.token = i;
    Array.prototype.forEach.call(queryRow.children, function (s, k) { s.classList.toggle('hovered', k === i); });
    var keys = (info.same ? queryRow : keyRow).children;
    if (i === null) {
      Array.prototype.forEach.call(keys, function (s) {
        s.style.backgroundColor = ''; s.style.color = ''; delete s.dataset.weight; s.title = s.dataset.name;
      });
      show(state.map, state.query);
      return;
    }
    var row = weights(state.map)[i];
    Array.prototype.forEach.call(keys, function (s, j) {
      var w = row[j] === null ? 0 : row[j];
      s.dataset.weight = w;
      s.style.backgroundColor = 'rgba(31, 119, 180, ' + w.toFixed(4) + ')';
      s.style.color = w > 0.5 ? 'white' : '';
      s.title = 'key ' + j + ': weight ' + w.toFixed(4) + ' from query ' + i;
    });
    var shapes = [{type: 'rect', xref: 'x', yref: 'y', x0: -0.5, x1: info.keys.length - 0.5, y0: i - 0.5, y1: i + 0.5,
                   line: {color: '#d62728', width: 3}}];
    if (info.same)
      shapes.push({type: 'rect', xref: 'x', yref: 'y', x0: i - 0.5, x1: i + 0.5, y0: -0.5, y1: info.queries.length - 0.5,
                   line: {color: '#ff7f0e', width: 3}});
    Plotly.relayout(map, {shapes: shapes});
  }
  function show(m, q) {
    var info = maps[m];
    q = Math.max(0, Math.min(q, info.queries.length - 1));
    state.map = m; state.query = q;
    var row = weights(m)[q];
    var keys = info.keys.map(function (_, j) { return j; });
    Plotly.react(bars, [{type: 'bar', x: keys, y: row.map(function (v) { return v === null ? 0 : v; }),
                         marker: {color: row.map(function (v) { return v === null ? '#cccccc' : '#1f77b4'; })},
                         customdata: info.keys,
                         hovertemplate: 'key %%{x} (%%{customdata})<br>weight %%{y:.4f}<extra></extra>'}],
                 {title: {text: info.title + ': query ' + q + ' (' + info.queries[q] + ') attends to', font: {size: 14}},
                  height: 300, margin: {l: 60, r: 20, t: 50, b: 50}, template: map.layout.template,
                  xaxis: {title: {text: 'key'}, tickvals: keys, ticktext: info.keys},
                  yaxis: {title: {text: 'weight'}, range: [0, 1.02]}},
                 config);
    Plotly.relayout(map, {shapes: [{type: 'rect', xref: 'x', yref: 'y', x0: -0.5, x1: info.keys.length - 0.5,
                                    y0: q - 0.5, y1: q + 0.5, line: {color: '#d62728', width: 3}}]});
  }
  // Makes map n the big one, as its entry in the head menu does.
  function select(n) {
    if (n === visibleMap()) return;
    var button = map.layout.updatemenus[0].buttons[n];
    Plotly.update(map, button.args[0], Object.assign({}, button.args[1], {'updatemenus[0].active': n}));
  }
  function selected(m) {  // after any change of the map shown: menu, thumbnail or prompt
    if (!state.previewing) state.locked = m;
    show(m, state.query);
    showGroup(maps[m].group);
    document.querySelectorAll('#head-grid .head-thumb').forEach(function (box) {
      box.classList.toggle('selected', +box.dataset.map === m);
    });
    drawTokens();  // another kind may read other tokens (cross attention: decoder queries, encoder keys)
  }
  function setPrompt(p) {
    var n = state.map;
    state.prompt = p; maps = prompts[p].maps; state.token = null;
    state.query = maps[n].queries.length - 1;
    var figure = JSON.parse(JSON.stringify(prompts[p].figure));  // plotly edits what it is given
    return Plotly.react(map, figure.data, figure.layout).then(function () {
      drawThumbnails(); drawTokens();
      if (n !== visibleMap()) select(n); else selected(n);
    });
  }

  map.on('plotly_click', function (event) {
    var p = event.points[0];
    show(p.curveNumber, Math.round(p.y));
  });
  map.on('plotly_update', function () { selected(visibleMap()); });
  layerSelect.addEventListener('change', function () {
    var first = document.querySelector('#head-grid .head-group[data-group="' + layerSelect.value + '"] .head-thumb');
    state.previewing = false;
    select(+first.dataset.map);
  });
  promptSelect.addEventListener('change', function () { setPrompt(+promptSelect.value); });
  document.querySelectorAll('#head-grid .head-thumb').forEach(function (box) {
    var n = +box.dataset.map;
    box.addEventListener('mouseenter', function () { state.previewing = true; select(n); });
    box.addEventListener('mouseleave', function () { state.previewing = false; select(state.locked); });
    box.addEventListener('click', function () { state.previewing = false; state.locked = n; select(n); });
  });
  window.attnlabAttention = {show: show, select: select, setPrompt: setPrompt, state: state};
  drawThumbnails(); drawTokens(); selected(0);
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


def layer_groups(maps):
    """[(kind, layer, [map indices, one per head])] in the maps' order."""
    groups = []
    for n, m in enumerate(maps):
        if not groups or groups[-1][:2] != (m["kind"], m["layer"]):
            groups.append((m["kind"], m["layer"], []))
        groups[-1][2].append(n)
    return groups


def controls_markup(prompts, maps, groups):
    """The prompt and layer selectors, the grid of thumbnails (one per head of every kind
    and layer; the script shows one layer's) and the token rows the script fills."""
    prompt_options = "".join(f'<option value="{p}">{p + 1}: {esc(text)}</option>' for p, text in enumerate(prompts))
    layer_options = "".join(f'<option value="{g}">{esc(kind)} · layer {layer}</option>'
                            for g, (kind, layer, _) in enumerate(groups))
    grid = []
    for g, (_, _, members) in enumerate(groups):
        thumbs = "".join(f'<div class="head-thumb" data-map="{n}" title="{esc(title_of(maps[n]))}">'
                         f'<canvas></canvas>head {maps[n]["head"]}</div>' for n in members)
        grid.append(f'<div class="head-group" data-group="{g}"{"" if g == 0 else " hidden"}>{thumbs}</div>')
    disabled = " disabled" if len(prompts) == 1 else ""
    return (f'{VIEWER_CSS}<div class="viewer-controls">'
            f'<label>prompt <select id="prompt-select"{disabled}>{prompt_options}</select></label>'
            f'<label>layer <select id="layer-select">{layer_options}</select></label></div>'
            f'<div id="head-grid">{"".join(grid)}</div>'
            f'<div id="token-row" class="tokens"></div><div id="key-row" class="tokens" hidden></div>')


def predictions_table(inspection):
    rows = []
    for i, (token, best) in enumerate(zip(inspection["input"], inspection["argmax"])):
        rows.append([i, token, best])
    return rows


def attention_page(inspections, prompts):
    """The viewer of `inspections` (load_inspection of each prompt, same checkpoint) of the prompts' texts."""
    first = inspections[0]
    maps = first["maps"]
    shown = ", ".join(f"“{esc(p)}”" for p in prompts)
    page = Page(f"attnlab attention: {first['checkpoint']}",
                f"step {first['step']}, {'tokens' if len(prompts) == 1 else f'{len(prompts)} prompts'} {shown}: "
                f"{len(maps)} maps{'' if len(prompts) == 1 else ' each'} ({', '.join(sorted({m['kind'] for m in maps}))})")
    page.paragraph("Pick a prompt and a layer above the grid: it holds every head of that layer; hover a head to see it "
                   "in the big map, click it to keep it there (the menu above the map picks any kind, layer and head). "
                   "Hover a token to outline its row (as query) and column (as key) in the map and shade every key by "
                   "the weight that query gives it. Click a query (a row) to see its weights over the keys below. Grey "
                   "cells are keys the query may not attend to (the future, for causal attention); their weight is "
                   "exactly 0.", "note")
    groups = layer_groups(maps)
    group_of = {n: g for g, (_, _, members) in enumerate(groups) for n in members}
    figures, entries = [], []
    for p, (inspection, text) in enumerate(zip(inspections, prompts)):
        fig, leaks = attention_figure(inspection["maps"])
        figures.append(fig)
        if leaks:
            where = "" if len(prompts) == 1 else f"prompt {p + 1}: "
            page.paragraph("MASK LEAK: " + where + "; ".join(f"{esc(k)}: {v} cell(s)" for k, v in leaks.items()), "bad")
        meta = [{"title": title_of(m), "queries": m["queries"], "keys": m["keys"], "group": group_of[n],
                 "same": m["kind"] != "cross" and m["queries"] == m["keys"]} for n, m in enumerate(inspection["maps"])]
        # the figure as plotly.io writes it, whole: the script hands it to Plotly.react on a change of prompt
        figure = pio.to_json(fig, validate=True).replace("</", "<\\/")
        entries.append(f'{{"text": {script_json(text)}, "maps": {script_json(meta)}, "figure": {figure}}}')
    page.raw(controls_markup(prompts, maps, groups))
    page.figure("attention", figures[0])
    page.figure("query-pattern", go.Figure(layout=dict(height=300)))
    page.script(VIEWER_SCRIPT % {"prompts": "[" + ",\n".join(entries) + "]", "config": script_json(PLOT_CONFIG)})
    for p, (inspection, text) in enumerate(zip(inspections, prompts)):
        if inspection.get("argmax"):
            page.heading("Predictions" if len(prompts) == 1 else f"Predictions, prompt {p + 1}: “{text}”")
            if p == 0:
                page.paragraph("The decoder input and the most likely next token at each position (argmax of the "
                               "logits).", "note")
            page.table(["position", "input", "argmax"], predictions_table(inspection),
                       table_id="predictions" if p == 0 else f"predictions-{p + 1}")
    return page
