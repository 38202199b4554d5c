"""The circuit page of tools/report.py: an `attnlab circuit` file
(experiments/analysis/circuit.cpp; docs/file_formats.md, "circuit: .circuit.h5")
drawn as a graph of its edges, with the faithfulness curve and the top edges.

The graph is an SVG drawn here, inline (no graph library): one row per layer,
from the embedding at the bottom to the logits at the top; in a layer's row its
heads side by side and its feed-forward to their right, half a row up (it reads
the heads' output). A head's input is three ports, q, k and v. An edge is a curve
from its sender's output (the top of its box) to its receiver's input (the bottom),
as wide as its |value|, blue when positive and red when negative.
"""
import re

import numpy as np
import plotly.graph_objects as go

from report_html import Page, esc, number_text
from report_load import ReportError, number_attr, numbers, open_h5, reading, strings, text
from report_run import base_layout

# Edge names as the writer spells them: senders embed, L.H (a head's output),
# mlp.L; receivers L.H:q, L.G:k, L.G:v (G a K/V head), mlp.L, logits.
SENDER = re.compile(r"embed|(\d+)\.(\d+)|mlp\.(\d+)")
RECEIVER = re.compile(r"logits|(\d+)\.(\d+):([qkv])|mlp\.(\d+)")
MAX_NODES = 20000      # a grid larger than this is no model attnlab trains: a garbled name
TOP_EDGES = 50         # the all-edges graph: the largest |scores| ...
SMALL = 0.01           # ... of at least this fraction of the largest
TABLE_EDGES = 100
POSITIVE, NEGATIVE = "#1f5fbf", "#c8322d"

# The graph's geometry, in pixels: a box is BOX_W x BOX_H, columns COLUMN apart,
# layers ROW apart (a feed-forward sits ROW / 2 above its layer's heads).
BOX_W, BOX_H, COLUMN, ROW, PORT_DX = 84, 40, 110, 160, 24
LEFT, MARGIN = 64, 16
# An inline SVG's <style> applies to the whole page: every rule is scoped to svg.circuit.
GRAPH_STYLE = ("<style>svg.circuit .edge path { fill: none; stroke-linecap: round; } "
               "svg.circuit .edge .line { stroke-opacity: 0.7; } svg.circuit .edge:hover .line { stroke-opacity: 1; } "
               "svg.circuit .edge .hit { stroke: transparent; stroke-width: 9px; } "
               "svg.circuit text { font: 12px sans-serif; fill: #222; } svg.circuit text.row { fill: #777; } "
               "svg.circuit text.port { font-size: 10px; fill: #555; } "
               "svg.circuit .node rect { fill: #f4f4f4; stroke: #aaa; } "
               "svg.circuit .node.used rect { fill: #fff; stroke: #333; }</style>")


def parse_sender(path, name, i):
    """("embed",), ("head", layer, head) or ("mlp", layer)."""
    m = SENDER.fullmatch(name)
    if m is None:
        raise ReportError(f"{path}: /edges/sender[{i}] is {name[:40]!r}, not embed, L.H or mlp.L")
    if m.group(1) is not None:
        return ("head", int(m.group(1)), int(m.group(2)))
    return ("mlp", int(m.group(3))) if m.group(3) is not None else ("embed",)


def parse_receiver(path, name, i):
    """(node, port): port "q", "k" or "v" of a head, None for mlp.L and logits."""
    m = RECEIVER.fullmatch(name)
    if m is None:
        raise ReportError(f"{path}: /edges/receiver[{i}] is {name[:40]!r}, not L.H:q, L.H:k, L.H:v, mlp.L or logits")
    if m.group(1) is not None:
        return ("head", int(m.group(1)), int(m.group(2))), m.group(3)
    return (("mlp", int(m.group(4))) if m.group(4) is not None else ("logits",)), None


def member(path, group, name):
    if name not in group:
        raise ReportError(f"{path}: not a complete circuit file (no {group.name.rstrip('/')}/{name})")
    return group[name]


def finite(path, dataset, values):
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        raise ReportError(f"{path}: {dataset.name}[{bad[0]}] is {values[bad[0]]}, not a finite number")
    return values


def load_circuit(path):
    """What the page shows of a circuit file, checked: {"attrs", "sender", "receiver",
    "score", "exact" or None, "agreement", "kept" or None, "circuit", "faithfulness"
    or None, "pairs"}."""
    with open_h5(path) as f, reading(path):
        if text(f.attrs.get("format", "")) != "attnlab-circuit":
            raise ReportError(f"{path}: not an `attnlab circuit` file (format attribute)")
        for name in ("checkpoint", "step", "metric", "direction", "method", "clean_metric", "corrupt_metric"):
            if name not in f.attrs:
                raise ReportError(f"{path}: not a complete circuit file (no attribute {name})")
        attrs = {name: text(f.attrs[name]) for name in ("checkpoint", "metric", "direction", "method")}
        attrs["step"] = int(number_attr(path, f, "step"))
        for name in ("clean_metric", "corrupt_metric"):
            attrs[name] = number_attr(path, f, name)
        if "ig_steps" in f.attrs:
            attrs["ig_steps"] = int(number_attr(path, f, "ig_steps"))
        edges = member(path, f, "edges")
        sender = strings(path, member(path, edges, "sender"))
        receiver = strings(path, member(path, edges, "receiver"))
        score = member(path, edges, "score")
        score = finite(path, score, numbers(path, score, 1).astype(float))
        exact = None
        if "exact" in edges:
            exact = finite(path, edges["exact"], numbers(path, edges["exact"], 1).astype(float))
        agreement = {name: number_attr(path, edges, name) for name in ("spearman", "top_k", "top_k_recall")
                     if name in edges.attrs}
        kept, circuit = None, {}
        if "circuit" in f:
            kept = numbers(path, member(path, f["circuit"], "kept"), 1)
            if not np.isin(kept, (0, 1)).all():
                raise ReportError(f"{path}: /circuit/kept holds values other than 0 and 1")
            kept = kept.astype(bool)
            circuit = {name: number_attr(path, f["circuit"], name) for name in ("threshold", "metric", "edges_kept")
                       if name in f["circuit"].attrs}
        faithfulness = None
        if "faithfulness" in f:
            group = f["faithfulness"]
            faithfulness = {}
            for name in ("edges_kept", "metric"):
                dataset = member(path, group, name)
                faithfulness[name] = finite(path, dataset, numbers(path, dataset, 1).astype(float))
            if len(faithfulness["edges_kept"]) != len(faithfulness["metric"]):
                raise ReportError(f"{path}: /faithfulness holds columns of different lengths")
        pairs = f["clean"].shape if "clean" in f and getattr(f["clean"], "ndim", 0) == 2 else None
    columns = {"sender": sender, "receiver": receiver, "score": score, "exact": exact, "kept": kept}
    if len({len(v) for v in columns.values() if v is not None}) > 1:
        raise ReportError(f"{path}: /edges (and /circuit/kept) hold columns of different lengths: "
                          + ", ".join(f"{k} {len(v)}" for k, v in columns.items() if v is not None))
    senders = [parse_sender(path, name, i) for i, name in enumerate(sender)]
    receivers = [parse_receiver(path, name, i) for i, name in enumerate(receiver)]
    return dict(columns, attrs=attrs, agreement=agreement, circuit=circuit, faithfulness=faithfulness, pairs=pairs,
                senders=senders, receivers=receivers, path=path)


def node_meaning(node):
    if node[0] == "head":
        return f"head {node[2]} of layer {node[1]}"
    if node[0] == "mlp":
        return f"the feed-forward of layer {node[1]}"
    return "the embedding" if node[0] == "embed" else "the logits"


def node_label(node):
    if node[0] == "head":
        return f"L{node[1]}.H{node[2]}"
    if node[0] == "mlp":
        return f"mlp {node[1]}"
    return node[0]


class Layout:
    """Where each node of the graph sits: (centre x, top y) of its box."""

    def __init__(self, circuit):
        nodes = set(circuit["senders"]) | {node for node, _ in circuit["receivers"]}
        self.ports = {}  # head -> the ports that receive edges, in q, k, v order
        for node, port in circuit["receivers"]:
            if port is not None:
                self.ports.setdefault(node, set()).add(port)
        layered = [n for n in nodes if n[0] in ("head", "mlp")]
        self.layers = max((n[1] for n in layered), default=-1) + 1
        self.heads = max((n[2] for n in layered if n[0] == "head"), default=-1) + 1
        self.mlp = any(n[0] == "mlp" for n in nodes)
        columns = max(1, self.heads + self.mlp)
        if self.layers * columns > MAX_NODES:
            raise ReportError(f"{circuit['path']}: {self.layers} layers x {self.heads} heads: too many nodes to draw")
        self.width = LEFT + (columns - 1) * COLUMN + BOX_W + MARGIN
        self.height = 2 * MARGIN + (self.layers + 1) * ROW + BOX_H
        self.nodes = [("embed",)] + [("head", layer, head) for layer in range(self.layers) for head in range(self.heads)]
        self.nodes += [("mlp", layer) for layer in range(self.layers) if self.mlp] + [("logits",)]

    def layer_top(self, layer):
        return MARGIN + (self.layers - layer) * ROW

    def box(self, node):
        middle = LEFT + ((self.heads + self.mlp - 1) * COLUMN) / 2 + BOX_W / 2
        if node[0] == "embed":
            return middle, MARGIN + (self.layers + 1) * ROW
        if node[0] == "logits":
            return middle, MARGIN
        if node[0] == "head":
            return LEFT + node[2] * COLUMN + BOX_W / 2, self.layer_top(node[1])
        return LEFT + self.heads * COLUMN + BOX_W / 2, self.layer_top(node[1]) - ROW / 2

    def output(self, node):
        return self.box(node)  # the top of its box

    def input(self, node, port):
        x, y = self.box(node)
        return x + {"q": -PORT_DX, "k": 0, "v": PORT_DX}.get(port, 0), y + BOX_H


def edge_values(circuit):
    """What the graph draws: the exact effects when the file has them, else the scores."""
    return circuit["exact"] if circuit["exact"] is not None else circuit["score"]


def edge_title(circuit, i):
    title = f"{circuit['sender'][i]} -> {circuit['receiver'][i]}: {number_text(float(circuit['score'][i]))}"
    if circuit["exact"] is not None:
        title += f" (exact {number_text(float(circuit['exact'][i]))})"
    return title


def graph_svg(circuit, layout, drawn, graph_id):
    """The SVG of the edges `drawn` (indices) over every node; widths scaled by the
    largest |value| of all edges, so that two graphs of one file compare."""
    values = edge_values(circuit)
    largest = float(np.max(np.abs(values))) if len(values) else 0.0
    touched = set()
    paths = []
    for i in sorted(drawn, key=lambda i: abs(values[i])):  # the strongest on top
        sender, (receiver, port) = circuit["senders"][i], circuit["receivers"][i]
        touched |= {sender, receiver}
        x1, y1 = layout.output(sender)
        x2, y2 = layout.input(receiver, port)
        bend = max(20.0, (y1 - y2) / 2)
        width = max(0.5, 10 * abs(values[i]) / largest) if largest > 0 else 0.5
        curve = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 - bend:.1f} {x2:.1f},{y2 + bend:.1f} {x2:.1f},{y2:.1f}"
        # the line, and a wider transparent copy that catches the pointer for the tooltip
        paths.append(f'<g class="edge" data-sender="{esc(circuit["sender"][i])}" '
                     f'data-receiver="{esc(circuit["receiver"][i])}" data-value="{float(values[i])!r}">'
                     f'<title>{esc(edge_title(circuit, i))}</title><path class="line" d="{curve}" '
                     f'stroke="{POSITIVE if values[i] >= 0 else NEGATIVE}" stroke-width="{width:.2f}"/>'
                     f'<path class="hit" d="{curve}"/></g>')
    boxes = [node_svg(layout, node, node in touched) for node in layout.nodes]
    rows = [f'<text class="row" x="4" y="{layout.layer_top(layer) + BOX_H / 2 + 4:.1f}">layer {layer}</text>'
            for layer in range(layout.layers)]
    return (f'<div class="scroll"><svg id="{esc(graph_id)}" class="circuit" xmlns="http://www.w3.org/2000/svg" '
            f'width="{layout.width}" height="{layout.height}" viewBox="0 0 {layout.width} {layout.height}" role="img">'
            f'{GRAPH_STYLE}{"".join(rows)}<g class="edges">{"".join(paths)}</g><g class="nodes">{"".join(boxes)}</g>'
            '</svg></div>')


def node_svg(layout, node, used):
    x, y = layout.box(node)
    label = node_label(node)
    parts = [f'<g class="node{" used" if used else ""}" data-node="{esc(label)}"><title>{esc(label)}: '
             f'{esc(node_meaning(node))}</title>',
             f'<rect x="{x - BOX_W / 2:.1f}" y="{y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="5"/>']
    ports = sorted(layout.ports.get(node, ()), key="qkv".index)
    label_y = y + (16 if ports else BOX_H / 2 + 4)
    parts.append(f'<text x="{x:.1f}" y="{label_y:.1f}" text-anchor="middle">{esc(label)}</text>')
    for port in ports:
        px, py = layout.input(node, port)
        parts.append(f'<text class="port" x="{px:.1f}" y="{py - 6:.1f}" text-anchor="middle">{port}</text>'
                     f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="#555"/>')
    parts.append("</g>")
    return "".join(parts)


def top_edges(circuit, count, floor=0.0):
    """Indices of the `count` largest |scores| of at least `floor` x the largest, largest first."""
    magnitude = np.abs(circuit["score"])
    order = [int(i) for i in np.argsort(-magnitude, kind="stable")]
    largest = float(magnitude.max()) if len(magnitude) else 0.0
    return [i for i in order if magnitude[i] >= floor * largest][:count]


def faithfulness_figure(circuit):
    curve, attrs, found = circuit["faithfulness"], circuit["attrs"], circuit["circuit"]
    k = curve["edges_kept"]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=k, y=curve["metric"], mode="lines+markers", name="the k largest |scores|",
                             hovertemplate="%{x} edges<br>metric %{y:.4f}<extra></extra>"))
    span = [float(k.min()), float(k.max())] if len(k) else [0.0, float(len(circuit["score"]))]
    for name, value, dash in (("clean", attrs["clean_metric"], "dash"), ("corrupted", attrs["corrupt_metric"], "dot")):
        fig.add_trace(go.Scatter(x=span, y=[value, value], mode="lines", name=f"{name} ({value:.4g})",
                                 line=dict(color="#777", dash=dash), hoverinfo="skip"))
    if "edges_kept" in found and "metric" in found:
        fig.add_trace(go.Scatter(x=[found["edges_kept"]], y=[found["metric"]], mode="markers", name="circuit found",
                                 marker=dict(size=12, symbol="star", color="#d62728"),
                                 hovertemplate="circuit found: %{x} edges<br>metric %{y:.4f}<extra></extra>"))
    fig.update_layout(**base_layout(f"faithfulness: {attrs['metric']} of the circuit of the k largest |scores|",
                                    "edges kept (k)", attrs["metric"], height=400))
    return fig


def agreement_figure(circuit):
    exact, score = circuit["exact"], circuit["score"]
    names = [f"{s} -> {r}" for s, r in zip(circuit["sender"], circuit["receiver"])]
    low, high = float(min(exact.min(), score.min())), float(max(exact.max(), score.max()))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", name="score = exact",
                             line=dict(color="#999", dash="dot"), hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=exact, y=score, mode="markers", name="edges", text=names,
                             marker=dict(size=7, color=np.where(circuit["kept"], "#d62728", "#1f77b4").tolist()
                                         if circuit["kept"] is not None else "#1f77b4"),
                             hovertemplate="%{text}<br>exact %{x:.4g}<br>score %{y:.4g}<extra></extra>"))
    rho = circuit["agreement"].get("spearman")
    title = f"{circuit['attrs']['method']} score against the exact effect"
    if rho is not None:
        title += f" (Spearman {rho:.4f})"
    fig.update_layout(**base_layout(title, "exact effect", f"{circuit['attrs']['method']} score", height=400))
    return fig


def summary_rows(circuit):
    a, agreement, found = circuit["attrs"], circuit["agreement"], circuit["circuit"]
    method = a["method"] + (f" ({a['ig_steps']} steps)" if "ig_steps" in a else "")
    rows = [["file", circuit["path"]], ["checkpoint", a["checkpoint"]], ["step", a["step"]], ["method", method],
            ["metric", a["metric"]], ["direction", a["direction"]], ["clean metric", a["clean_metric"]],
            ["corrupted metric", a["corrupt_metric"]], ["edges", len(circuit["score"])]]
    if circuit["pairs"] is not None:
        rows.append(["prompt pairs", f"{circuit['pairs'][0]} of {circuit['pairs'][1]} tokens"])
    if "spearman" in agreement:
        rows.append(["Spearman (score, exact)", agreement["spearman"]])
    if "top_k_recall" in agreement:
        k = int(agreement["top_k"]) if "top_k" in agreement else "k"
        rows.append([f"top-{k} recall", agreement["top_k_recall"]])
    for key, name in (("threshold", "circuit threshold"), ("metric", "circuit metric")):
        if key in found:
            rows.append([name, found[key]])
    if circuit["kept"] is not None:
        rows.append(["edges kept", f"{int(circuit['kept'].sum())} of {len(circuit['kept'])}"])
    return rows


def edge_rows(circuit, indices):
    rows = []
    for rank, i in enumerate(indices, 1):
        row = [rank, circuit["sender"][i], circuit["receiver"][i], float(circuit["score"][i])]
        if circuit["exact"] is not None:
            row.append(float(circuit["exact"][i]))
        if circuit["kept"] is not None:
            row.append("yes" if circuit["kept"][i] else "")
        rows.append(row)
    return rows


def legend(circuit, drawn):
    values = edge_values(circuit)
    largest = float(np.max(np.abs(values))) if len(values) else 0.0
    what = "exact effect" if circuit["exact"] is not None else f"{circuit['attrs']['method']} score"
    return (f'{len(drawn)} edges drawn. Width: |{what}| (10 px = {number_text(largest)}, the largest of the file); '
            f'<span style="color:{POSITIVE}">&#9473; positive</span>, '
            f'<span style="color:{NEGATIVE}">&#9473; negative</span>. Hover over an edge for its score.')


def circuit_page(circuit):
    a = circuit["attrs"]
    page = Page(f"attnlab circuit: {a['checkpoint']}",
                f"step {a['step']}, {esc(a['method'])}, {esc(a['metric'])}, {esc(a['direction'])}: "
                f"{len(circuit['score'])} edges")
    page.table(["circuit", ""], summary_rows(circuit), table_id="summary")
    layout = Layout(circuit)
    page.paragraph("Nodes by layer, from the embedding (bottom) to the logits (top); a layer's feed-forward sits to "
                   "the right of its heads, half a row up. An edge runs from its sender's output (the top of a box) "
                   "to its receiver's input (the bottom: a head's q, k or v port; k and v on the K/V head). "
                   "Grey boxes take part in no edge drawn.", "note")
    threshold = SMALL * float(np.abs(circuit["score"]).max()) if len(circuit["score"]) else 0.0
    top = top_edges(circuit, TOP_EDGES, SMALL)
    if circuit["kept"] is not None:
        kept = [int(i) for i in np.flatnonzero(circuit["kept"])]
        page.heading("The circuit")
        tau = circuit["circuit"].get("threshold")
        page.paragraph("The edges kept by <code>--prune</code>" + (f" {number_text(tau)}" if tau is not None else "")
                       + ": " + legend(circuit, kept), "note")
        page.raw(graph_svg(circuit, layout, kept, "circuit-graph"))
        if not kept:
            page.paragraph("The circuit keeps no edge.", "bad")
        page.raw(f"<details><summary>All edges: the {len(top)} largest |scores| (at least "
                 f"{number_text(threshold)}, {SMALL:g} of the largest)</summary>")
        page.paragraph(legend(circuit, top), "note")
        page.raw(graph_svg(circuit, layout, top, "edges-graph") + "</details>")
    else:
        page.heading("Edges")
        page.paragraph(f"The {len(top)} largest |scores| (at least {number_text(threshold)}, {SMALL:g} of the "
                       f"largest; <code>--prune TAU</code> finds a circuit): " + legend(circuit, top), "note")
        page.raw(graph_svg(circuit, layout, top, "edges-graph"))
    if circuit["faithfulness"] is not None:
        page.heading("Faithfulness")
        page.paragraph("The metric of the circuit made of the k largest |scores| (every other edge carrying the "
                       "corrupted prompts' sender output), against k; the star is the circuit <code>--prune</code> "
                       "found.", "note")
        page.figure("faithfulness", faithfulness_figure(circuit))
    if circuit["exact"] is not None and len(circuit["exact"]):
        page.heading("Against the exact effects")
        page.figure("agreement", agreement_figure(circuit))
    page.heading("Top edges")
    shown = top_edges(circuit, TABLE_EDGES)
    page.paragraph(f"The {len(shown)} largest |scores| of {len(circuit['score'])} edges (click a header to sort).",
                   "note")
    header = ["rank", "sender", "receiver", "score"] + ["exact"] * (circuit["exact"] is not None)
    header += ["in circuit"] * (circuit["kept"] is not None)
    page.table(header, edge_rows(circuit, shown), sortable=True, table_id="edges-table")
    return page
