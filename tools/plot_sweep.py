#!/usr/bin/python3
"""PNG charts of an attnlab sweep folder (written by `attnlab sweep`).

    /usr/bin/python3 tools/plot_sweep.py runs/<sweep> [--out DIR] [--x KEY]

Writes into DIR (default: the sweep folder):
  accuracy.png        final eval token accuracy against the x key (mean and std over seeds)
  steps_to_target.png first eval step at the target accuracy against the x key (when no
                      cell reached train.target_accuracy, the chart says so)
  entropy_heads.png   final normalised entropy of every head (layer x head grid) per cell,
                      with a colour bar (0 = one key, 1 = uniform)
  score_std.png       standard deviation of the initial attention scores (metrics.h5,
                      /attention/<kind>/score_std row 0, averaged over layers and heads)
                      against the head width where the grid changes it, else the x key:
                      the seed chapter's Figure 21.5 measurement

The x key is the first swept key other than run.seed in the sweep's grid
(sweep.toml), or --x; every other swept key but run.seed gives one line per value
combination. String values (model.scale = "sqrt") are categories, in grid order.
For an interactive version of all of these, see `attnlab report runs/<sweep>`.
"""
import argparse
import math
import os
import sys
import tomllib

import h5py
import matplotlib

import h5_probe

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
    with h5_probe.open_file(os.path.join(sweep_dir, "summary.h5")) as f:  # a crafted file: one line, not a crash
        tables = {}
        for group in ("cells", "aggregated"):
            g = f[group]
            keys = {k: text(g["keys"][k][()]) for k in g["keys"]}
            columns = {c: g[c][()] for c in g if isinstance(g[c], h5py.Dataset) and c not in ("name", "status")}
            tables[group] = {"keys": keys, "columns": columns, "name": text(g["name"][()]), "status": text(g["status"][()])}
    return tables


def sweep_config(sweep_dir):
    """The sweep's resolved base config with its [sweep] grid (sweep.toml), or {}."""
    try:
        with open(os.path.join(sweep_dir, "sweep.toml"), "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def ordered_keys(tables, config):
    """The swept keys in the grid's order (summary.h5 lists them alphabetically)."""
    stored = list(tables["cells"]["keys"])
    grid = list(config.get("sweep", {}))
    return [k for k in grid if k in stored] + [k for k in stored if k not in grid]


def series(table, x_key):
    """{label: [(x, row index), ...]} with rows grouped by every key but x and run.seed."""
    keys = [k for k in table["keys"] if k not in (x_key, "run.seed")]
    out = {}
    n = len(table["keys"][x_key])
    for i in range(n):
        label = ", ".join(f"{k}={table['keys'][k][i]}" for k in keys) or "all"
        out.setdefault(label, []).append((table["keys"][x_key][i], i))
    return out


def x_axis(values):
    """(position of each value, category labels or None): numbers stay numbers;
    otherwise every distinct value is a category, in the order first seen."""
    numbers = [as_number(v) for v in values]
    if all(n is not None for n in numbers):
        return numbers, None
    order = list(dict.fromkeys(values))
    return [order.index(v) for v in values], order


def log2_axis(ax, values):
    numbers = [as_number(v) for v in values]
    if all(n is not None and n > 0 for n in numbers) and max(numbers) / min(numbers) >= 8:
        ax.set_xscale("log", base=2)


def line_chart(table, x_key, column, ylabel, title, path, log_x=False, note=None):
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    positions, categories = x_axis(table["keys"][x_key])
    drawn = False
    for label, points in series(table, x_key).items():
        xs = [positions[i] for _, i in points]
        ys = [table["columns"][column][i] for _, i in points]
        std = table["columns"].get(column + "_std")
        errs = [std[i] if std is not None and not math.isnan(std[i]) else 0 for _, i in points]
        if all(math.isnan(y) for y in ys):
            continue
        drawn = True
        ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=label)
    if categories:
        ax.set_xticks(range(len(categories)), categories)
        ax.set_xlim(-0.5, len(categories) - 0.5)
    elif log_x:
        log2_axis(ax, table["keys"][x_key])
    if note and not drawn:  # nothing to draw: say why on the chart, not an empty frame
        ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=10, color="#b00020",
                wrap=True)
        ax.set_yticks([])
    elif note:
        ax.text(0.02, 0.97, note, transform=ax.transAxes, ha="left", va="top", fontsize=7, color="#555555")
    ax.set_xlabel(x_key)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def not_reached_note(table, x_key, config):
    """None when every row reached the target; else what to say on the steps chart."""
    first = table["columns"]["first_step_at_target"]
    missed = [i for i in range(len(first)) if math.isnan(first[i])]
    if not missed:
        return None
    train = config.get("train", {})
    target, steps = train.get("target_accuracy", "?"), train.get("steps", "?")
    if len(missed) == len(first):
        return f"no cell reached train.target_accuracy = {target}\nwithin train.steps = {steps}"
    names = ", ".join(f"{x_key}={table['keys'][x_key][i]}" for i in missed[:4]) + (" ..." if len(missed) > 4 else "")
    return f"not reached ({target} within {steps} steps): {names}"


def cell_metrics(sweep_dir, name):
    path = os.path.join(sweep_dir, name, "metrics.h5")
    if not os.path.exists(path):
        return None
    return h5_probe.open_file(path, swmr=True)


def entropy_grid(sweep_dir, cells, path):
    names = cells["name"]
    fig, axes = plt.subplots(1, len(names), figsize=(max(6, 1.6 * len(names)) + 0.8, 3.0), squeeze=False)
    image = None
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
            image = ax.imshow(norm, vmin=0, vmax=1, cmap="viridis", aspect="auto")
            layers, heads = norm.shape
            ax.set_xticks(range(heads), [str(h) for h in range(heads)], fontsize=6)
            ax.set_yticks(range(layers), [str(l) for l in range(layers)], fontsize=6)
            ax.set_xlabel("head", fontsize=7)
            ax.set_ylabel("layer", fontsize=7)
    fig.suptitle("final normalised entropy per head (0 = one key, 1 = uniform)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.94, 1))
    if image is not None:
        bar = fig.colorbar(image, cax=fig.add_axes((0.95, 0.2, 0.012, 0.6)))
        bar.set_label("entropy / log(eligible keys)", fontsize=7)
        bar.ax.tick_params(labelsize=7)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def head_width(sweep_dir, name):
    """d_h of a cell (model.head_width, else width / heads), from its config.toml; None if unknown."""
    try:
        with open(os.path.join(sweep_dir, name, "config.toml"), "rb") as f:
            model = tomllib.load(f).get("model", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None
    if model.get("head_width"):
        return int(model["head_width"])
    if model.get("width") and model.get("heads"):
        return int(model["width"]) // int(model["heads"])
    return None


def score_std_chart(sweep_dir, cells, x_key, path):
    """Initial score std per cell against d_h where the grid changes it, else against x_key."""
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
    widths = {i: head_width(sweep_dir, cells["name"][i]) for i in values}
    if len(set(widths.values())) > 1 and None not in widths.values():
        x_name, leave_out = "head width d_h", ("model.head_width", "model.width", "model.heads")
        grouping = next((k for k in leave_out if k in cells["keys"]), x_key)
        positions, categories = [widths.get(i) for i in range(len(cells["name"]))], None
    else:
        x_name, leave_out, grouping = x_key, (), x_key
        positions, categories = x_axis(cells["keys"][x_key])
    keys = [k for k in cells["keys"] if k != grouping and k != "run.seed" and k not in leave_out]
    lines = {}
    for i in values:
        label = ", ".join(f"{k}={cells['keys'][k][i]}" for k in keys) or "all"
        lines.setdefault(label, {}).setdefault(positions[i], []).append(values[i])
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for label, by_x in lines.items():
        xs = sorted(by_x)
        ax.plot(xs, [float(np.mean(by_x[x])) for x in xs], marker="o", label=label)  # mean over seeds
    if categories:
        ax.set_xticks(range(len(categories)), categories)
        ax.set_xlim(-0.5, len(categories) - 0.5)
    else:
        log2_axis(ax, [p for p in positions if p is not None])
    ax.set_xlabel(x_name)
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
    config = sweep_config(args.sweep_dir)
    keys = ordered_keys(tables, config)
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
               os.path.join(out, "steps_to_target.png"), note=not_reached_note(agg, x_key, config))
    written.append("steps_to_target.png")
    entropy_grid(args.sweep_dir, tables["cells"], os.path.join(out, "entropy_heads.png"))
    written.append("entropy_heads.png")
    if score_std_chart(args.sweep_dir, tables["cells"], x_key, os.path.join(out, "score_std.png")):
        written.append("score_std.png")
    print("plot_sweep: wrote " + ", ".join(os.path.join(out, w) for w in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
