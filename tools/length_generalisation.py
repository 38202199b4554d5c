#!/usr/bin/python3
"""Length generalisation of a sweep's runs: each cell's final checkpoint
evaluated (`attnlab eval --min-len A --max-len B`) at every length from the
task's min_len to twice its max_len, and in three bands, 1x (the training
lengths), 1.5x and 2x.

    /usr/bin/python3 tools/length_generalisation.py runs/<sweep> [--attnlab build/attnlab]
        [--batches N] [--out DIR] [--group KEY]

Writes into DIR (default: the sweep folder):
  length_generalisation.md   the bands: token and sequence accuracy, mean and std
                             over the seeds, one row per value of KEY
  length_generalisation.png  token and sequence accuracy against the length, one
                             line per value of KEY (mean over seeds, std shaded),
                             the training lengths marked
  length_generalisation.csv  every cell at every length and band
KEY (default model.positional) is a column of the sweep's summary.csv, or several
joined by commas (model.window,model.sinks: one row per combination). Bands for
training lengths a..b: 1x a..b, 1.5x b+1..floor(1.5 b), 2x floor(1.5 b)+1..2b.
A cell whose model refuses a length (a learned table too short for it) gets no
figure there (printed, and left empty in the files).
"""
import argparse
import csv
import math
import os
import re
import subprocess
import sys
import tomllib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

EVAL_LINE = re.compile(r"token accuracy (?P<tok>\S+)\s+sequence accuracy (?P<seq>\S+)")


def cells(sweep_dir, key):
    """(cell folder, group value, its summary.csv row) for every finished cell of
    summary.csv; key one column, or several joined by commas ("window=4, sinks=true").
    tools/variants_study.py groups its cells with it too."""
    tool = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    path = os.path.join(sweep_dir, "summary.csv")
    if not os.path.exists(path):
        sys.exit(f"{tool}: {path} not found (run attnlab sweep first)")
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["row"] != "cell" or row["status"] != "ok":
                continue
            keys = key.split(",")
            for k in keys:
                if k not in row:
                    sys.exit(f"{tool}: {path} has no column {k}")
            group = row[key] if len(keys) == 1 else ", ".join(f"{k.split('.')[-1]}={row[k]}" for k in keys)
            out.append((os.path.join(sweep_dir, row["name"]), group, row))
    if not out:
        sys.exit(f"{tool}: no finished cell in {path}")
    return out


def training_lengths(cell_dir):
    with open(os.path.join(cell_dir, "config.toml"), "rb") as f:
        task = tomllib.load(f).get("task", {})
    return int(task.get("min_len", 3)), int(task.get("max_len", 6))


def evaluate(attnlab, cell_dir, lo, hi, batches):
    """(token accuracy, sequence accuracy), or None when the model refuses the lengths."""
    r = subprocess.run([attnlab, "eval", cell_dir, "--min-len", str(lo), "--max-len", str(hi), "--batches", str(batches)],
                       capture_output=True, text=True)
    if r.returncode == 2:
        print(f"{os.path.basename(cell_dir)} at {lo}..{hi}: {r.stderr.strip()}", file=sys.stderr)
        return None
    if r.returncode != 0:
        sys.exit(f"length_generalisation: attnlab eval failed on {cell_dir}:\n{r.stderr}")
    m = EVAL_LINE.search(r.stdout)
    return float(m.group("tok")), float(m.group("seq"))


def mean_std(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def cell_text(values, index):
    mean, std = mean_std([v[index] if v else None for v in values])
    return "refused" if mean is None else f"{mean:.3f} ± {std:.3f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir")
    parser.add_argument("--attnlab", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "attnlab"))
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--out")
    parser.add_argument("--group", default="model.positional")
    args = parser.parse_args()
    out_dir = args.out or args.sweep_dir
    found = cells(args.sweep_dir, args.group)
    lo, hi = training_lengths(found[0][0])
    bands = {"1x": (lo, hi), "1.5x": (hi + 1, (3 * hi) // 2), "2x": ((3 * hi) // 2 + 1, 2 * hi)}
    lengths = list(range(lo, 2 * hi + 1))
    groups = list(dict.fromkeys(group for _, group, _ in found))
    per_length = {g: {n: [] for n in lengths} for g in groups}
    per_band = {g: {b: [] for b in bands} for g in groups}
    rows = []
    for cell_dir, group, _ in found:
        for name, (a, b) in bands.items():
            score = evaluate(args.attnlab, cell_dir, a, b, args.batches)
            per_band[group][name].append(score)
            rows.append([os.path.basename(cell_dir), group, name, a, b] + (list(score) if score else ["", ""]))
        for n in lengths:
            score = evaluate(args.attnlab, cell_dir, n, n, args.batches)
            per_length[group][n].append(score)
            rows.append([os.path.basename(cell_dir), group, "length", n, n] + (list(score) if score else ["", ""]))

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "length_generalisation.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["cell", args.group, "band", "min_len", "max_len", "token_acc", "seq_acc"])
        writer.writerows(rows)
    seeds = len(found) // len(groups)
    lines = [f"Trained on lengths {lo}..{hi}; {seeds} seeds per row, {args.batches} batches per figure (mean ± std over seeds).", "",
             f"| {args.group} | " + " | ".join(f"token acc {b} ({a}..{c})" for b, (a, c) in bands.items()) + " | "
             + " | ".join(f"seq acc {b}" for b in bands) + " |",
             "|---" * (1 + 2 * len(bands)) + "|"]
    for g in groups:
        lines.append(f"| {g} | " + " | ".join(cell_text(per_band[g][b], 0) for b in bands) + " | "
                     + " | ".join(cell_text(per_band[g][b], 1) for b in bands) + " |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "length_generalisation.md"), "w") as f:
        f.write(table)
    print(table)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for index, (ax, title) in enumerate(zip(axes, ["token accuracy", "sequence accuracy"])):
        for g in groups:
            stats = [mean_std([s[index] if s else None for s in per_length[g][n]]) for n in lengths]
            xs = [n for n, (m, _) in zip(lengths, stats) if m is not None]
            means = np.array([m for m, _ in stats if m is not None])
            stds = np.array([s for m, s in stats if m is not None])
            line, = ax.plot(xs, means, marker="o", markersize=3, label=g)
            ax.fill_between(xs, means - stds, means + stds, color=line.get_color(), alpha=0.2)
        ax.axvspan(lo - 0.5, hi + 0.5, color="grey", alpha=0.12, label="training lengths")
        ax.set_xlabel("length (content tokens)")
        ax.set_ylabel(title)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{os.path.basename(os.path.normpath(args.sweep_dir))}: trained on {lo}..{hi}, evaluated to {2 * hi}")
    fig.tight_layout()
    png = os.path.join(out_dir, "length_generalisation.png")
    fig.savefig(png, dpi=110)
    print(f"wrote {png}, length_generalisation.md and .csv in {out_dir}")


if __name__ == "__main__":
    main()
