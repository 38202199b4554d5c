"""The pages of tools/report.py for one run and for several runs side by side."""
import math
import os

import numpy as np
import plotly.graph_objects as go

from report_html import Page, esc, number_text
from report_load import value_text

COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]

# The per-head statistics of metrics.h5 /attention/<kind>/, as heatmaps over training.
HEAD_METRICS = [
    ("entropy", "entropy (nats)", "entropy {z:.4f} nats"),
    ("entropy_norm", "normalised entropy (entropy / log eligible keys: 0 = one key, 1 = uniform)",
     "normalised entropy {z:.4f}"),
    ("masked_mass", "masked mass (weight on ineligible keys)", "masked mass {z:.4g}"),
    ("score_std", "score std (std of scale * q.k over eligible pairs)", "score std {z:.4f}"),
]


def colour(i):
    return COLOURS[i % len(COLOURS)]


def base_layout(title, xtitle, ytitle, height=360, **extra):
    layout = dict(title=dict(text=title, font=dict(size=14)), height=height, margin=dict(l=60, r=20, t=50, b=50),
                  xaxis=dict(title=xtitle), yaxis=dict(title=ytitle), hovermode="closest",
                  legend=dict(font=dict(size=10)), template="plotly_white")
    layout.update(extra)
    return layout


def say_if_empty(fig, text):
    """A chart without data says why, rather than showing an empty frame."""
    if not fig.data:
        fig.add_annotation(text=text, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False,
                           font=dict(size=13, color="#555"))
    return fig


def has(series, field="step"):
    return series is not None and field in series and len(series[field]) > 0


def loss_figure(runs, title):
    fig = go.Figure()
    positive = True
    for i, run in enumerate(runs):
        name = run.label if len(runs) > 1 else ""
        if has(run.train):
            fig.add_trace(go.Scatter(x=run.train["step"], y=run.train["loss"], mode="lines", line=dict(color=colour(i)),
                                     name=f"{name} train".strip(), legendgroup=name,
                                     hovertemplate="step %{x}<br>train loss %{y:.4f}<extra>" + esc(name) + "</extra>"))
            positive &= bool(np.all(run.train["loss"] > 0))
        if has(run.eval):
            fig.add_trace(go.Scatter(x=run.eval["step"], y=run.eval["loss"], mode="lines+markers",
                                     line=dict(color=colour(i), dash="dot"), marker=dict(size=5),
                                     name=f"{name} held-out".strip(), legendgroup=name,
                                     hovertemplate="step %{x}<br>held-out loss %{y:.4f}<extra>" + esc(name) + "</extra>"))
            positive &= bool(np.all(run.eval["loss"] > 0))
    layout = base_layout(title, "step", "cross-entropy (nats)")
    if positive and fig.data:
        log_axis(layout["yaxis"], [y for trace in fig.data for y in trace.y])
    fig.update_layout(**layout)
    return say_if_empty(fig, "no loss logged yet")


def log_axis(axis, values):
    """A log axis; over two decades or more, ticks at the powers of ten only (plotly's
    default labels 2 and 5 of every decade as well, which crowds a short chart)."""
    axis["type"] = "log"
    values = [v for v in values if v is not None and v > 0 and np.isfinite(v)]
    if values and np.log10(max(values) / min(values)) >= 2:
        axis["dtick"] = 1


def accuracy_figure(runs, title):
    fig = go.Figure()
    for i, run in enumerate(runs):
        name = run.label if len(runs) > 1 else ""
        if has(run.train, "token_acc"):  # a metrics.h5 that logs training accuracy
            fig.add_trace(go.Scatter(x=run.train["step"], y=run.train["token_acc"], mode="lines",
                                     line=dict(color=colour(i), width=1), name=f"{name} train token".strip(),
                                     legendgroup=name, hovertemplate="step %{x}<br>train token accuracy %{y:.4f}<extra></extra>"))
        if has(run.eval):
            fig.add_trace(go.Scatter(x=run.eval["step"], y=run.eval["token_acc"], mode="lines+markers",
                                     line=dict(color=colour(i)), marker=dict(size=5),
                                     name=f"{name} held-out token".strip(), legendgroup=name,
                                     hovertemplate="step %{x}<br>held-out token accuracy %{y:.4f}<extra>" + esc(name) + "</extra>"))
            fig.add_trace(go.Scatter(x=run.eval["step"], y=run.eval["seq_acc"], mode="lines+markers",
                                     line=dict(color=colour(i), dash="dash"), marker=dict(size=5, symbol="square"),
                                     name=f"{name} held-out sequence".strip(), legendgroup=name,
                                     hovertemplate="step %{x}<br>held-out sequence accuracy %{y:.4f}<extra>" + esc(name) + "</extra>"))
    layout = base_layout(title, "step", "accuracy")
    layout["yaxis"]["range"] = [-0.02, 1.02]
    fig.update_layout(**layout)
    return say_if_empty(fig, "no held-out evaluation yet")


def head_labels(values):
    """'L0 H0', 'L0 H1', ... for values [K, layers, heads]."""
    return [f"L{l} H{h}" for l in range(values.shape[1]) for h in range(values.shape[2])]


def head_heatmap(kind, series, field, title, hover):
    values = np.asarray(series[field], dtype=float)  # [K, layers, heads]
    rows = head_labels(values)
    z = values.reshape(values.shape[0], -1).T  # [layers * heads, K]
    zmin, zmax = float(np.nanmin(z)), float(np.nanmax(z))
    if field in ("entropy_norm", "previous_token", "duplicate_token", "induction"):  # shares of attention
        zmin, zmax = 0.0, 1.0
    if field == "copying":  # sum Re(eigenvalue) / sum |eigenvalue|
        zmin, zmax = -1.0, 1.0
    if field in ("masked_mass", "entropy"):
        zmin = 0.0
    if field == "masked_mass":
        worst = float(np.max(series["masked_mass_max"])) if "masked_mass_max" in series else zmax
        title += " — all 0 (mask correct)" if worst == 0.0 else f" — NONZERO, max {worst:.3g}"
        zmax = max(zmax, 1e-12) if worst != 0.0 else 1.0
    fig = go.Figure(go.Heatmap(
        x=series["step"], y=rows, z=z.tolist(), zmin=zmin, zmax=zmax, colorscale="Viridis",
        colorbar=dict(title=dict(text=field, side="right"), thickness=14),
        hovertemplate="step %{x}<br>%{y}<br>" + hover.replace("{z", "%{z") + "<extra></extra>"))
    layout = base_layout(f"{kind}: {title}", "step (row 0: the model at initialisation)", "layer, head",
                         height=130 + 24 * len(rows))
    layout["yaxis"].update(autorange="reversed", type="category")
    fig.update_layout(**layout)
    return fig


# train.head_scores's per-head series (experiments/run/head_scores.h)
HEAD_SCORES = [
    ("induction", "induction score (attention from a repeated token to the token after its first occurrence)",
     "induction score {z:.4f}"),
    ("previous_token", "previous-token score (attention to position t - 1)", "previous-token score {z:.4f}"),
    ("duplicate_token", "duplicate-token score (attention to the same token's first occurrence)", "duplicate-token score {z:.4f}"),
    ("copying", "copying score of the OV circuit (-1 to 1)", "copying score {z:.4f}"),
]


def optimiser_figure(run):
    """The learning rate the schedule gave and the gradient norm before clipping, per logged step."""
    fig = go.Figure()
    if has(run.train, "lr"):
        fig.add_trace(go.Scatter(x=run.train["step"], y=run.train["lr"], mode="lines", name="learning rate",
                                 line=dict(color=colour(0)), hovertemplate="step %{x}<br>lr %{y:.3g}<extra></extra>"))
    if has(run.train, "grad_norm"):
        fig.add_trace(go.Scatter(x=run.train["step"], y=run.train["grad_norm"], mode="lines", name="gradient norm",
                                 yaxis="y2", line=dict(color=colour(1)),
                                 hovertemplate="step %{x}<br>gradient norm %{y:.4g}<extra></extra>"))
    layout = base_layout("learning rate and gradient norm (before clipping)", "step", "learning rate")
    layout["yaxis2"] = dict(title="gradient norm", overlaying="y", side="right", showgrid=False)
    fig.update_layout(**layout)
    return say_if_empty(fig, "no training rows logged yet")


def repeat_loss_figure(run):
    heads = run.head_scores
    fig = go.Figure(go.Scatter(x=heads["step"], y=heads["repeat_loss"], mode="lines+markers", marker=dict(size=4),
                               name="repeat loss", hovertemplate="step %{x}<br>loss on the repeat %{y:.4f}<extra></extra>"))
    if has(run.eval):
        fig.add_trace(go.Scatter(x=run.eval["step"], y=run.eval["loss"], mode="lines", line=dict(dash="dot"),
                                 name="held-out loss", hovertemplate="step %{x}<br>held-out loss %{y:.4f}<extra></extra>"))
    fig.update_layout(**base_layout("loss on the repeated-token batch (from its second copy's second token)", "step",
                                    "cross-entropy (nats)"))
    return fig


def config_rows(run):
    return [[key, value_text(value)] for key, value in run.flat.items()]


def summary_rows(run):
    s = run.summary or {}
    out = []
    for key, label in [("steps", "steps"), ("eval_loss", "held-out loss"), ("eval_token_acc", "held-out token accuracy"),
                       ("eval_seq_acc", "held-out sequence accuracy"), ("target_accuracy", "target accuracy"),
                       ("first_step_at_target", "first step at target"), ("wall_s", "wall time (s)"),
                       ("tokens_per_s", "tokens/s"), ("peak_rss_mb", "peak memory (MB)")]:
        if key in s:
            value = s[key]
            out.append([label, "not reached" if value is None and key == "first_step_at_target" else number_text(value)])
    return out


def audit_section(page, run):
    record = run.audit
    tests = record.get("tests", [])
    failed = [t for t in tests if not t.get("pass")]
    page.heading("Audit")
    verdict = (f'<span class="good">{len(tests)} passed, 0 failed</span>' if not failed
               else f'<span class="bad">{len(tests) - len(failed)} passed, {len(failed)} failed</span>')
    page.paragraph(f"{esc(run.audit_path)}: <code>attnlab audit</code> of {esc(record.get('checkpoint', '?'))} "
                   f"(step {esc(record.get('step', '?'))}): {verdict}")
    model = record.get("model", {})
    attention = record.get("attention", {})
    cost = record.get("cost", {})
    facts = [["model", f"{model.get('kind')} {model.get('layers')} layers, width {model.get('width')}, "
                       f"{model.get('heads')} heads of width {model.get('head_width')} ({model.get('kv_heads')} K/V heads), "
                       f"{model.get('parameters')} parameters"],
             ["scale", f"{attention.get('scale_spec')} = {number_text(attention.get('scale'))}"],
             ["softmax axis", attention.get("softmax_axis", "")],
             ["all-masked rows", attention.get("masked_rows", "")],
             ["KV cache per token", f"{cost.get('kv_bytes_per_token')} bytes"],
             ["tokens/s (forward)", number_text(cost.get("tokens_per_s"))]]
    page.table(["item", "value"], facts)
    page.heading("Live tests", 3)
    page.table(["test", "result", "figure", "value", "tolerance", "rule"],
               [[t.get("name", ""), "PASS" if t.get("pass") else "FAIL", t.get("figure_name", ""),
                 t.get("figure", float("nan")), t.get("tolerance", float("nan")), t.get("rule", "")] for t in tests],
               sortable=True, table_id="audit-tests")
    heads = record.get("heads", [])
    if heads:
        page.heading("Heads on the audit's batches", 3)
        page.table(["kind", "layer", "head", "score std", "entropy", "normalised entropy", "masked mass"],
                   [[h.get("kind"), h.get("layer"), h.get("head"), h.get("score_std"), h.get("entropy"),
                     h.get("entropy_norm"), h.get("masked_mass")] for h in heads], sortable=True, table_id="audit-heads")


def ablation_figure(ablation):
    rows, base = ablation["rows"], ablation["baseline"]
    labels = [f"{k} L{l} H{h}" for k, l, h in zip(rows["kind"], rows["layer"], rows["head"])]
    fig = go.Figure()
    for what, name, col in [("zero", "zero-ablated", colour(3)), ("mean", "mean-ablated", colour(0))]:
        delta_loss = rows[f"{what}_loss"] - base["loss"]
        delta_acc = rows[f"{what}_token_acc"] - base["token_acc"]
        fig.add_trace(go.Bar(x=labels, y=delta_loss.tolist(), name=name, marker_color=col,
                             customdata=np.stack([rows[f"{what}_loss"], delta_acc], axis=1).tolist(),
                             hovertemplate="%{x} " + name + "<br>loss change %{y:+.4f} (loss %{customdata[0]:.4f})"
                                           "<br>token accuracy change %{customdata[1]:+.4f}<extra></extra>"))
    fig.update_layout(**base_layout(
        f"head ablation at step {ablation['step']} (baseline loss {base['loss']:.4f}, token accuracy "
        f"{base['token_acc']:.4f}); sorted by effect", "head", "loss change (nats)", barmode="group"))
    return fig


def run_page(run):
    page = Page(f"attnlab run {run.name}", esc(run.folder))
    rows = summary_rows(run)
    if rows:
        page.table(["summary", ""], rows, table_id="summary")
    else:
        last = int(run.train["step"][-1]) if has(run.train) else 0
        page.paragraph(f"No summary.json: the run has not finished (metrics up to step {last}).", "note")
    page.heading("Loss and accuracy")
    note = "" if has(run.train, "token_acc") else " metrics.h5 logs no training accuracy: accuracy is on held-out data."
    page.paragraph("Training loss is the mean over each log interval; held-out loss and accuracy are measured "
                   "on the run's held-out batches at each eval step." + note, "note")
    page.figures_side_by_side([("loss", loss_figure([run], "loss")),
                               ("accuracy", accuracy_figure([run], "held-out accuracy"))])
    page.heading("Optimiser")
    page.figure("optimiser", optimiser_figure(run))
    if run.head_scores is not None:
        page.heading("Head scores over training")
        page.paragraph("train.head_scores: every head on one fixed batch of repeated random tokens r r "
                       "(Olsson et al. 2022's induction and previous-token scores; docs/induction_bump.md).", "note")
        page.figure("repeat_loss", repeat_loss_figure(run))
        for field, title, hover in HEAD_SCORES:
            page.figure(f"head-{field}", head_heatmap("heads", run.head_scores, field, title, hover))
    page.heading("Attention heads over training")
    if not run.attention:
        page.paragraph("metrics.h5 has no attention series yet.", "note")
    for kind, series in run.attention.items():
        page.heading(f"{kind} attention", 3)
        for field, title, hover in HEAD_METRICS:
            if field in series:
                page.figure(f"{kind}-{field}", head_heatmap(kind, series, field, title, hover))
            else:
                page.paragraph(f"{kind}: no {field} series in this metrics.h5.", "note")
    if run.audit is not None:
        audit_section(page, run)
    if run.ablation is not None:
        page.heading("Head ablation")
        page.paragraph(f"{esc(run.ablation_path)} (<code>attnlab ablate</code>): each head's output zeroed, or "
                       "replaced by its mean, one head at a time.", "note")
        page.figure("ablation", ablation_figure(run.ablation))
    page.heading("Resolved config")
    page.paragraph(f"{esc(os.path.join(run.folder, 'config.toml'))}: every key, overrides applied.", "note")
    page.table(["key", "value"], config_rows(run), table_id="config")
    return page


def differing_keys(runs):
    keys = []
    for run in runs:
        keys += [k for k in run.flat if k not in keys]
    missing = object()
    return [k for k in keys if len({repr(run.flat.get(k, missing)) for run in runs}) > 1], len(keys)


def label_runs(runs):
    """Legend names: folder names, or paths where two runs share a name."""
    names = [run.name for run in runs]
    for run in runs:
        run.label = run.name if names.count(run.name) == 1 else os.path.normpath(run.folder)


def runs_page(runs):
    label_runs(runs)
    page = Page(f"attnlab: {len(runs)} runs compared", ", ".join(esc(r.label) for r in runs))
    page.table(["run", "folder", "steps", "held-out loss", "token accuracy", "sequence accuracy", "first step at target",
                "wall s"],
               [[r.label, r.folder, *[summary_value(r, k) for k in
                 ("steps", "eval_loss", "eval_token_acc", "eval_seq_acc", "first_step_at_target", "wall_s")]]
                for r in runs], sortable=True, table_id="runs-table")
    page.heading("Loss and accuracy")
    page.figures_side_by_side([("runs-loss", loss_figure(runs, "loss (solid: train, dotted: held-out)")),
                               ("runs-accuracy", accuracy_figure(runs, "held-out accuracy (solid: token, dashed: sequence)"))])
    page.heading("Config differences")
    keys, total = differing_keys(runs)
    page.paragraph(f"{len(keys)} of {total} keys differ; the others are the same in every run.", "note")
    page.table(["key"] + [r.label for r in runs],
               [[k] + [value_text(r.flat[k]) if k in r.flat else "(absent)" for r in runs] for k in keys],
               table_id="config-diff")
    return page


def summary_value(run, key):
    s = run.summary or {}
    value = s.get(key)
    if value is None:
        return "not reached" if key == "first_step_at_target" and run.summary else float("nan")
    return value if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isinf(value)) else str(value)
