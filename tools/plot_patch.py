#!/usr/bin/python3
"""Heatmaps of an `attnlab patch` file: one PNG per patched hook.

    tools/plot_patch.py PATCH.h5 [--out-dir DIR]

Writes DIR/patch_<hook>.png (DIR default: PATCH.h5 without .h5, plus "_png"):
layer x head for per-head hooks, layer x position with --per-position (one
panel per head for per-head hooks), a bar per layer otherwise. The colour scale
of the normalised logit difference is fixed at [-1, 1] around 0 (0 = corrupted,
1 = clean); other metrics use their own range. Needs /usr/bin/python3 with
python3-h5py, python3-numpy, python3-matplotlib.
"""
import argparse
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import h5_probe  # noqa: E402
from output_files import save_figure  # noqa: E402


def text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def draw(values, axes, hook, metric, direction, path):
    norm = metric == "norm_logit_diff"
    # one colour scale for every panel
    lim = dict(vmin=-1.0, vmax=1.0) if norm else dict(vmin=float(np.min(values)), vmax=float(np.max(values)))
    if axes == ["layer"]:
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.bar(np.arange(len(values)), values, color="#2b8cbe")
        ax.set_xlabel("layer")
        ax.set_ylabel(metric)
    elif len(axes) == 2:
        fig, ax = plt.subplots(figsize=(1.0 + 0.5 * values.shape[1], 1.0 + 0.5 * values.shape[0]))
        im = ax.imshow(values, cmap="RdBu_r", aspect="auto", **lim)
        ax.set_xlabel(axes[1])
        ax.set_ylabel("layer")
        ax.set_xticks(range(values.shape[1]))
        ax.set_yticks(range(values.shape[0]))
        for (i, j), v in np.ndenumerate(values):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7)
        fig.colorbar(im, ax=ax, label=metric)
    else:  # layer, head, position
        heads = values.shape[1]
        fig, axs = plt.subplots(1, heads, figsize=(2 + 0.4 * values.shape[2] * heads, 1.5 + 0.4 * values.shape[0]), squeeze=False)
        for h in range(heads):
            im = axs[0][h].imshow(values[:, h, :], cmap="RdBu_r", aspect="auto", **lim)
            axs[0][h].set_title(f"head {h}")
            axs[0][h].set_xlabel("position")
            axs[0][h].set_ylabel("layer")
        fig.colorbar(im, ax=axs[0][-1], label=metric)
    fig.suptitle(f"patching {hook} ({direction})", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file")
    p.add_argument("--out-dir")
    args = p.parse_args()
    out_dir = args.out_dir or (args.file[:-3] if args.file.endswith(".h5") else args.file) + "_png"
    try:
        h5_probe.probe(args.file)  # a crafted file: one line naming it, not a crash
    except h5_probe.H5ProbeError as e:
        print(f"plot_patch.py: {e}", file=sys.stderr)
        return 2
    try:
        with h5py.File(args.file, "r") as f:
            if text(f.attrs.get("format", "")) != "attnlab-patch":
                raise ValueError("not an attnlab patch file (attribute format)")
            metric, direction = text(f.attrs["metric"]), text(f.attrs["direction"])
            os.makedirs(out_dir, exist_ok=True)
            for hook in f["grid"]:
                g = f["grid"][hook]
                path = os.path.join(out_dir, f"patch_{hook.replace('.', '_')}.png")
                draw(np.asarray(g["values"]), text(g.attrs["axes"]).split(","), hook, metric, direction, path)
                print(f"wrote {path}")
    except (OSError, KeyError, ValueError) as e:
        print(f"plot_patch.py: {args.file}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
