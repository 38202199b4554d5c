#!/usr/bin/python3
"""PNG charts of an attnlab sweep folder (written by `attnlab sweep`).

    /usr/bin/python3 tools/plot_sweep.py runs/<sweep> [--out DIR] [--x KEY]

Writes into DIR (default: the sweep folder):
  accuracy.png        final eval token accuracy against the x key (mean and std over seeds)
  steps_to_target.png first eval step at the target accuracy against the x key
  entropy_heads.png   final normalised entropy of every head (layer x head grid) per cell
  score_std.png       standard deviation of the initial attention scores (metrics.h5,
                      /attention/<kind>/score_std row 0, averaged over layers and heads)
                      against the x key: the seed chapter's Figure 21.5 measurement

The x key is the first swept key other than run.seed (or --x); every other swept key
but run.seed gives one line per value combination.
"""
import argparse
import math
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def text(values):
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


def as_number(value):
    try:
        return float(value)
    except ValueError:
        return None


def load(sweep_dir):
    with h5py.File(os.path.join(sweep_dir, "summary.h5"), "r") as f:
        tables = {}
        for group in ("cells", "aggregated"):
            g = f[group]
            keys = {k: text(g["keys"][k][()]) for k in g["keys"]}
            columns = {c: g[c][()] for c in g if isinstance(g[c], h5py.Dataset) and c not in ("name", "status")}
            tables[group] = {"keys": keys, "columns": columns, "name": text(g["name"][()]), "status": text(g["status"][()])}
    return tables


def series(table, x_key):
    """{label: [(x, row index), ...]} with rows grouped by every key but x and run.seed."""
    keys = [k for k in table["keys"] if k not in (x_key, "run.seed")]
    out = {}
    n = len(table["keys"][x_key])
    for i in range(n):
        label = ", ".join(f"{k}={table['keys'][k][i]}" for k in keys) or "all"
        out.setdefault(label, []).append((table["keys"][x_key][i], i))
    return out


def x_positions(values):
    numbers = [as_number(v) for v in values]
    if all(n is not None for n in numbers):
        return numbers, None
    return list(range(len(values))), values


def line_chart(table, x_key, column, ylabel, title, path, log_x=False):
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for label, points in series(table, x_key).items():
        xs, ticks = x_positions([p[0] for p in points])
        ys = [table["columns"][column][i] for _, i in points]
        std = table["columns"].get(column + "_std")
        errs = [std[i] if std is not None and not math.isnan(std[i]) else 0 for _, i in points]
        ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=label)
        if ticks:
            ax.set_xticks(xs, ticks)
    if log_x and all(as_number(v) for v in table["keys"][x_key]):
        ax.set_xscale("log", base=2)
    ax.set_xlabel(x_key)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cell_metrics(sweep_dir, name):
    path = os.path.join(sweep_dir, name, "metrics.h5")
    if not os.path.exists(path):
        return None
    return h5py.File(path, "r", libver="latest", swmr=True)


def entropy_grid(sweep_dir, cells, path):
    names = cells["name"]
    fig, axes = plt.subplots(1, len(names), figsize=(max(6, 1.6 * len(names)), 2.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        f = cell_metrics(sweep_dir, name)
        ax.set_title(name.split("_", 1)[1].replace(",", "\n"), fontsize=7)
        ax.set_xticks([])
        ax.set_yticks([])
        if f is None:
            continue
        with f:
            kind = sorted(f["attention"].keys())[0]
            norm = f["attention"][kind]["entropy_norm"][-1]  # [layers, heads], last log row
            ax.imshow(norm, vmin=0, vmax=1, cmap="viridis", aspect="auto")
            ax.set_xlabel("head", fontsize=7)
            ax.set_ylabel("layer", fontsize=7)
    fig.suptitle("final normalised entropy per head (0 = one key, 1 = uniform)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def score_std_chart(sweep_dir, cells, x_key, path):
    values = {}
    for i, name in enumerate(cells["name"]):
        f = cell_metrics(sweep_dir, name)
        if f is None:
            continue
        with f:
            kind = sorted(f["attention"].keys())[0]
            if "score_std" not in f["attention"][kind]:
                return False
            values[i] = float(np.mean(f["attention"][kind]["score_std"][0]))
    if not values:
        return False
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for label, points in series(cells, x_key).items():
        pts = [(as_number(x), values[i]) for x, i in points if i in values]
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    if all(as_number(v) for v in cells["keys"][x_key]):
        ax.set_xscale("log", base=2)
    ax.set_xlabel(x_key)
    ax.set_ylabel("std of initial scores")
    ax.set_title("initial attention score scale")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir")
    parser.add_argument("--out", help="folder for the PNGs (default: the sweep folder)")
    parser.add_argument("--x", help="swept key for the x axis")
    args = parser.parse_args()
    if not os.path.exists(os.path.join(args.sweep_dir, "summary.h5")):
        print(f"plot_sweep: {args.sweep_dir}: no summary.h5 (run `attnlab sweep` first)", file=sys.stderr)
        return 2
    out = args.out or args.sweep_dir
    os.makedirs(out, exist_ok=True)
    tables = load(args.sweep_dir)
    keys = list(tables["cells"]["keys"])
    x_key = args.x or next((k for k in keys if k != "run.seed"), keys[0])
    if x_key not in keys:
        print(f"plot_sweep: --x {x_key} is not a swept key ({', '.join(keys)})", file=sys.stderr)
        return 2
    agg = tables["aggregated"]
    written = []
    line_chart(agg, x_key, "eval_token_acc", "eval token accuracy", "final accuracy (mean ± std over seeds)",
               os.path.join(out, "accuracy.png"))
    written.append("accuracy.png")
    line_chart(agg, x_key, "first_step_at_target", "step", "first eval step at the target accuracy",
               os.path.join(out, "steps_to_target.png"))
    written.append("steps_to_target.png")
    entropy_grid(args.sweep_dir, tables["cells"], os.path.join(out, "entropy_heads.png"))
    written.append("entropy_heads.png")
    if score_std_chart(args.sweep_dir, tables["cells"], x_key, os.path.join(out, "score_std.png")):
        written.append("score_std.png")
    print("plot_sweep: wrote " + ", ".join(os.path.join(out, w) for w in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
