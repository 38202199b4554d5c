"""The page of tools/report.py for a sweep folder (written by `attnlab sweep`)."""
import math

import numpy as np
import plotly.graph_objects as go

from report_html import Page, esc, number_text
from report_load import value_text
from report_run import base_layout, colour, head_labels, log_axis

# summary.h5 columns shown in the tables, in this order (the entropy ones follow).
TABLE_COLUMNS = ["eval_loss", "eval_token_acc", "eval_seq_acc", "first_step_at_target", "reached_target"]
TAIL_COLUMNS = ["masked_mass_max", "wall_s", "tokens_per_s"]


def as_number(value):
    try:
        x = float(value)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def x_axis(values):
    """Axis settings for the swept values (strings as categories, in grid order)."""
    numbers = [as_number(v) for v in values]
    if values and all(n is not None for n in numbers):
        positive = [n for n in numbers if n > 0]
        if len(positive) == len(numbers) and max(positive) / min(positive) >= 8:
            return {"type": "log"}, numbers
        return {"type": "linear"}, numbers
    order = list(dict.fromkeys(values))
    return {"type": "category", "categoryorder": "array", "categoryarray": order}, list(values)


def groups(table, keys, x_key, leave_out=("run.seed",)):
    """{label: [row index, ...]}: rows grouped by every key but x_key and leave_out."""
    others = [k for k in keys if k != x_key and k not in leave_out]
    out = {}
    for i in range(len(table["name"])):
        label = ", ".join(f"{k}={table['keys'][k][i]}" for k in others) or "all cells"
        out.setdefault(label, []).append(i)
    return out


def columns_of(table):
    cols = [c for c in TABLE_COLUMNS if c in table["columns"]]
    cols += sorted(c for c in table["columns"] if c.startswith("entropy") and not c.endswith("_std"))
    cols += [c for c in TAIL_COLUMNS if c in table["columns"]]
    return cols


def table_rows(sweep, group):
    table = sweep.tables[group]
    cols = columns_of(table)
    header = list(sweep.keys) + ["status"] + (["n"] if group == "aggregated" else []) + cols
    rows = []
    for i in range(len(table["name"])):
        row = [table["keys"][k][i] for k in sweep.keys] + [table["status"][i]]
        if group == "aggregated":
            row.append(int(table["columns"]["n"][i]) if "n" in table["columns"] else float("nan"))
        for c in cols:
            value = float(table["columns"][c][i])
            std = table["columns"].get(c + "_std")
            if group == "aggregated" and std is not None and not math.isnan(value) and not math.isnan(std[i]):
                row.append((f"{number_text(value)} ± {number_text(float(std[i]), 2)}", repr(value)))
            else:
                row.append(value)
        rows.append(row)
    return header, rows


def mean_chart(sweep, column, ytitle, title, div_title_suffix=""):
    """Aggregated rows against the first swept key: mean with the seeds' std as error bars."""
    table = sweep.tables["aggregated"]
    x_key = sweep.x_key
    axis, _ = x_axis(table["keys"][x_key])
    fig = go.Figure()
    for g, (label, rows) in enumerate(groups(table, sweep.keys, x_key).items()):
        xs = [table["keys"][x_key][i] for i in rows]
        if axis["type"] != "category":
            xs = [float(x) for x in xs]
        ys = [float(table["columns"][column][i]) for i in rows]
        std = table["columns"].get(column + "_std")
        errs = [0.0 if std is None or math.isnan(std[i]) else float(std[i]) for i in rows]
        n = [int(table["columns"]["n"][i]) if "n" in table["columns"] else 1 for i in rows]
        fig.add_trace(go.Scatter(x=xs, y=[None if math.isnan(y) else y for y in ys], mode="lines+markers",
                                 error_y=dict(type="data", array=errs, visible=True), name=label,
                                 line=dict(color=colour(g)), customdata=list(zip(errs, n)),
                                 hovertemplate=f"{esc(x_key)} = %{{x}}<br>{esc(ytitle)} %{{y:.4g}} ± %{{customdata[0]:.2g}}"
                                               " (%{customdata[1]} cells)<extra>" + esc(label) + "</extra>"))
    layout = base_layout(title + div_title_suffix, x_key, ytitle)
    layout["xaxis"].update(axis)
    fig.update_layout(**layout)
    return fig


def steps_chart(sweep):
    """First eval step at the target; rows where no seed reached it are drawn as
    crosses at train.steps and the title says so (never an empty chart)."""
    table = sweep.tables["aggregated"]
    steps = sweep.config.get("train", {}).get("steps")
    target = sweep.target
    reached = table["columns"].get("reached_target")
    first = table["columns"]["first_step_at_target"]
    ok = [i for i in range(len(first)) if not math.isnan(first[i])]
    suffix = f" (target accuracy {number_text(target)})" if target is not None else ""
    fig = mean_chart(sweep, "first_step_at_target", "first step at target", "first eval step at the target accuracy",
                     suffix)
    missed = [i for i in range(len(first)) if math.isnan(first[i])]
    if missed:
        x_key = sweep.x_key
        axis, _ = x_axis(table["keys"][x_key])
        xs = [table["keys"][x_key][i] if axis["type"] == "category" else float(table["keys"][x_key][i]) for i in missed]
        labels = [", ".join(f"{k}={table['keys'][k][i]}" for k in sweep.keys if k != "run.seed") for i in missed]
        fig.add_trace(go.Scatter(x=xs, y=[steps] * len(missed), mode="markers", name=f"not reached in {steps} steps",
                                 marker=dict(symbol="x", size=11, color="#b00020"), text=labels,
                                 hovertemplate="%{text}<br>no seed reached the target in %{y} steps<extra></extra>"))
    if not ok:
        fig.update_layout(title_text=f"no cell reached the target accuracy {number_text(target)} within {steps} steps")
        fig.add_annotation(text=f"no cell reached train.target_accuracy = {number_text(target)}<br>"
                                f"(crosses at train.steps = {steps})", xref="paper", yref="paper", x=0.5, y=0.55,
                           showarrow=False, font=dict(size=13, color="#b00020"))
    elif reached is not None:
        partial = [i for i in ok if reached[i] < 1]
        if partial:
            fig.add_annotation(text=f"{len(partial)} point(s) average only the seeds that reached it",
                               xref="paper", yref="paper", x=0.02, y=0.98, showarrow=False, xanchor="left",
                               font=dict(size=11, color="#555"))
    return fig


def curves_figure(cells, field, title, ytitle, log_y=False):
    fig = go.Figure()
    for i, name, run in cells:
        if run is None:
            continue
        series = run.eval if field != "train_loss" else run.train
        column = "loss" if field == "train_loss" else field
        if series is None or column not in series or not len(series["step"]):
            continue
        fig.add_trace(go.Scatter(x=series["step"], y=series[column], mode="lines", name=name, line=dict(color=colour(i)),
                                 hovertemplate="step %{x}<br>" + ytitle + " %{y:.4f}<extra>" + esc(name) + "</extra>"))
    layout = base_layout(title, "step", ytitle, height=420)
    if log_y:
        log_axis(layout["yaxis"], [y for trace in fig.data for y in trace.y])
    if field != "train_loss":
        layout["yaxis"]["range"] = [-0.02, 1.02]
    fig.update_layout(**layout)
    return fig


def score_std_figure(sweep, cells):
    """Initial score std (metrics.h5 row 0, mean over layers and heads) per cell,
    against the head width where the grid changes it, else the first swept key."""
    points = {}
    for i, name, run in cells:
        if run is None or not run.attention:
            continue
        series = run.attention[sorted(run.attention)[0]]
        if "score_std" not in series:
            continue
        points[i] = (run.head_width(), float(np.mean(series["score_std"][0])))
    if not points:
        return None, None
    widths = {w for w, _ in points.values()}
    table = sweep.tables["cells"]
    if len(widths) > 1 and None not in widths:
        x_name = "head width d_h"
        leave_out = ("run.seed", "model.head_width", "model.width", "model.heads")
        x_of = {i: float(w) for i, (w, _) in points.items()}
        axis = {"type": "log"} if max(widths) / min(widths) >= 8 else {"type": "linear"}
        if axis["type"] == "log":
            axis.update(tickvals=sorted(widths), ticktext=[str(w) for w in sorted(widths)])
        grouping_key = "model.head_width" if "model.head_width" in sweep.keys else sweep.x_key
    else:
        x_name = sweep.x_key
        leave_out = ("run.seed",)
        axis, _ = x_axis(table["keys"][x_name])
        x_of = {i: (table["keys"][x_name][i] if axis["type"] == "category" else float(table["keys"][x_name][i]))
                for i in points}
        grouping_key = x_name
    fig = go.Figure()
    for g, (label, rows) in enumerate(groups(table, sweep.keys, grouping_key, leave_out).items()):
        rows = [i for i in rows if i in points]
        if not rows:
            continue
        names = [table["name"][i] for i in rows]
        fig.add_trace(go.Scatter(x=[x_of[i] for i in rows], y=[points[i][1] for i in rows], mode="markers",
                                 name=label, legendgroup=label, marker=dict(color=colour(g), size=8), text=names,
                                 hovertemplate="%{text}<br>" + esc(x_name) + " %{x}<br>initial score std %{y:.4f}<extra></extra>"))
        by_x = {}
        for i in rows:
            by_x.setdefault(x_of[i], []).append(points[i][1])
        xs = list(by_x) if axis["type"] == "category" else sorted(by_x)
        fig.add_trace(go.Scatter(x=xs, y=[float(np.mean(by_x[x])) for x in xs], mode="lines", legendgroup=label,
                                 showlegend=False, line=dict(color=colour(g)), hoverinfo="skip"))
    layout = base_layout("initial attention score std (step 0, mean over layers and heads)", x_name,
                         "std of scale * q.k at initialisation")
    layout["xaxis"].update(axis)
    fig.update_layout(**layout)
    return fig, x_name


def entropy_figure(kind, cells):
    """Final normalised entropy of every head (columns) of every cell (rows)."""
    rows, labels, width = [], [], 0
    for i, name, run in cells:
        if run is None or "entropy_norm" not in run.attention.get(kind, {}):
            continue
        final = np.asarray(run.attention[kind]["entropy_norm"][-1], dtype=float)  # [layers, heads]
        labels.append(name)
        rows.append(final)
        width = max(width, final.size)
    if not rows:
        return None
    columns = max((head_labels(r[None]) for r in rows), key=len)
    z = [list(r.reshape(-1)) + [None] * (width - r.size) for r in rows]
    fig = go.Figure(go.Heatmap(x=columns, y=labels, z=z, zmin=0, zmax=1, colorscale="Viridis",
                               colorbar=dict(title=dict(text="entropy_norm", side="right"), thickness=14),
                               hovertemplate="%{y}<br>%{x}<br>final normalised entropy %{z:.4f}<extra></extra>"))
    layout = base_layout(f"{kind}: final normalised entropy per head (0 = one key, 1 = uniform)", "layer, head", "cell",
                         height=160 + 26 * len(labels))
    layout["yaxis"].update(autorange="reversed", type="category", automargin=True)
    layout["xaxis"].update(type="category")
    layout["margin"]["l"] = 20
    fig.update_layout(**layout)
    return fig


def sweep_page(sweep):
    cells = sweep.cells()
    ok = sum(1 for s in sweep.tables["cells"]["status"] if s == "ok")
    grid = "; ".join(f"{esc(k)} = {esc(value_text(v))}" for k, v in sweep.grid.items())
    page = Page(f"attnlab sweep {sweep.name}", f"{len(cells)} cells, {ok} ok — {grid}")
    page.heading("Summary")
    page.paragraph("From summary.h5. Click a column header to sort; aggregated rows give the mean ± sample "
                   "standard deviation over run.seed (finished cells only).", "note")
    header, rows = table_rows(sweep, "aggregated")
    page.heading("Aggregated over seeds", 3)
    page.table(header, rows, sortable=True, table_id="aggregated-table")
    header, rows = table_rows(sweep, "cells")
    page.heading("Cells", 3)
    page.table(header, rows, sortable=True, table_id="cells-table")
    if sweep.x_key is None:
        return page
    page.heading(f"Against {sweep.x_key}")
    page.figures_side_by_side([
        ("sweep-accuracy", mean_chart(sweep, "eval_token_acc", "held-out token accuracy",
                                      "final held-out token accuracy (mean ± std over seeds)")),
        ("sweep-steps", steps_chart(sweep))])
    page.heading("Every cell's curves")
    page.figures_side_by_side([
        ("sweep-curves-accuracy", curves_figure(cells, "token_acc", "held-out token accuracy", "token accuracy")),
        ("sweep-curves-loss", curves_figure(cells, "train_loss", "training loss", "loss (nats)", log_y=True))])
    fig, x_name = score_std_figure(sweep, cells)
    if fig is not None:
        page.heading("Initial score scale")
        page.paragraph(f"The standard deviation of the scaled scores of the model at initialisation "
                       f"(metrics.h5 /attention/&lt;kind&gt;/score_std row 0), per cell, against {esc(x_name)}; "
                       "the line joins the means over seeds (the seed chapter's Figure 21.5).", "note")
        page.figure("sweep-score-std", fig)
    kinds = []
    for _, _, run in cells:
        if run is not None:
            kinds += [k for k in run.attention if k not in kinds]
    if kinds:
        page.heading("Heads at the end of training")
        for kind in kinds:
            fig = entropy_figure(kind, cells)
            if fig is not None:
                page.figure(f"sweep-entropy-{kind}", fig)
    return page
