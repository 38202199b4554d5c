#!/usr/bin/python3
"""Where attention goes under each variant of a sweep: for every finished cell of
runs/<sweep>/summary.csv, the last evaluation's entropy (nats) and masked mass per
layer and head from its metrics.h5 (/attention/self/entropy, masked_mass_max; see
docs/file_formats.md), grouped by the sweep's axes other than the seed.

    /usr/bin/python3 tools/variants_study.py runs/<sweep> [--keys model.window,model.sinks] [--out DIR]

Writes into DIR (default: the sweep folder):
  variants_entropy.md    per group (means over its seeds): eval token accuracy, each
                         layer's mean head entropy, each run's lowest head entropy, and
                         the largest masked mass anywhere
  variants_entropy.png   entropy per layer and head, one panel per group (the mean over
                         seeds of each (layer, head) position)
With attention sinks the weights over the keys sum to less than 1, and the entropy
is -sum_j a_j log a_j over the keys only: the sink's own share is not counted.
"""
import argparse
import os

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import length_generalisation  # noqa: E402  (the same folder: its cells())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir")
    parser.add_argument("--keys", default="model.window,model.sinks")
    parser.add_argument("--out")
    args = parser.parse_args()
    keys = args.keys.split(",")
    groups = {}
    for cell_dir, name, row in length_generalisation.cells(args.sweep_dir, args.keys):
        if len(keys) == 1:
            name = f"{keys[0].split('.')[-1]}={name}"
        with h5py.File(os.path.join(cell_dir, "metrics.h5"), "r") as m:
            entropy = m["attention/self/entropy"][-1]  # (layers, heads), the last evaluation
            masked = float(np.max(m["attention/self/masked_mass_max"][-1]))
        groups.setdefault(name, []).append((float(row["eval_token_acc"]), entropy, masked))
    out_dir = args.out or args.sweep_dir
    layers = next(iter(groups.values()))[0][1].shape[0]
    lines = ["| " + " | ".join(keys) + " | eval token acc | " + " | ".join(f"entropy L{l} (mean of heads)" for l in range(layers))
             + " | lowest head entropy | masked mass max |", "|---" * (len(keys) + 3 + layers) + "|"]
    for name, cells in groups.items():
        acc = np.mean([c[0] for c in cells])
        entropy = np.mean([c[1] for c in cells], axis=0)
        values = [v.split("=", 1)[1] for v in name.split(", ")]
        lines.append("| " + " | ".join(values) + f" | {acc:.3f} | " + " | ".join(f"{e:.3f}" for e in entropy.mean(axis=1))
                     + f" | {np.mean([c[1].min() for c in cells]):.3f} | {max(c[2] for c in cells):.3g} |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "variants_entropy.md"), "w") as f:
        f.write(table)
    print(table)

    fig, axes = plt.subplots(1, len(groups), figsize=(2.2 * len(groups), 2.8), sharey=True)
    top = max(float(np.max(np.mean([c[1] for c in cells], axis=0))) for cells in groups.values())
    for ax, (name, cells) in zip(np.atleast_1d(axes), groups.items()):
        image = ax.imshow(np.mean([c[1] for c in cells], axis=0), vmin=0, vmax=top, cmap="viridis")
        ax.set_title(name.replace(", ", "\n"), fontsize=8)
        ax.set_xlabel("head")
        ax.set_xticks(range(image.get_array().shape[1]))
    np.atleast_1d(axes)[0].set_ylabel("layer")
    fig.colorbar(image, ax=axes, shrink=0.8, label="entropy (nats)")
    png = os.path.join(out_dir, "variants_entropy.png")
    fig.savefig(png, dpi=110, bbox_inches="tight")
    print(f"wrote {png} and variants_entropy.md in {out_dir}")


if __name__ == "__main__":
    main()
