#!/usr/bin/python3
"""Heatmaps of an `attnlab lens` file.

    tools/plot_lens.py LENS.h5 [--out-dir DIR]

Writes DIR/lens.png (log p(target) through the logit lens, stream x position,
with the lens's top token in each cell) and, where the model has an attribution,
DIR/dla_heads.png (each head's direct effect on the target logit at the last
position, layer x head). DIR defaults to LENS.h5 without .h5, plus "_png".
Needs /usr/bin/python3 with python3-h5py, python3-numpy, python3-matplotlib.
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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file")
    p.add_argument("--out-dir")
    args = p.parse_args()
    out_dir = args.out_dir or (args.file[:-3] if args.file.endswith(".h5") else args.file) + "_png"
    try:
        h5_probe.probe(args.file)  # a crafted file: one line naming it, not a crash
    except h5_probe.H5ProbeError as e:
        print(f"plot_lens.py: {e}", file=sys.stderr)
        return 2
    try:
        with h5py.File(args.file, "r") as f:
            if text(f.attrs.get("format", "")) != "attnlab-lens":
                raise ValueError("not an attnlab lens file (attribute format)")
            tokens = np.asarray(f["tokens"])[0]
            streams = [text(s) for s in f["streams"]]
            logprob = np.asarray(f["lens/target_logprob"])[:, 0, :]
            top = np.asarray(f["lens/top_token"])[:, 0, :]
            os.makedirs(out_dir, exist_ok=True)
            fig, ax = plt.subplots(figsize=(2 + 0.55 * len(tokens), 1.5 + 0.5 * len(streams)))
            im = ax.imshow(logprob, cmap="viridis", aspect="auto", vmax=0.0)
            for (i, j), v in np.ndenumerate(top):
                ax.text(j, i, str(int(v)), ha="center", va="center", fontsize=7, color="white")
            ax.set_xticks(range(len(tokens)), [str(int(t)) for t in tokens], fontsize=7)
            ax.set_yticks(range(len(streams)), streams, fontsize=7)
            ax.set_xlabel("position (input token)")
            fig.colorbar(im, ax=ax, label="log p(target)")
            ax.set_title("logit lens (cells: the lens's top token)", fontsize=10)
            fig.tight_layout()
            path = os.path.join(out_dir, "lens.png")
            save_figure(fig, path, dpi=110)
            plt.close(fig)
            print(f"wrote {path}")
            if "dla" in f:
                heads = np.asarray(f["dla/head"])[:, :, 0, -1]
                fig, ax = plt.subplots(figsize=(2 + 0.6 * heads.shape[1], 1.5 + 0.5 * heads.shape[0]))
                lim = max(1e-9, float(np.max(np.abs(heads))))
                im = ax.imshow(heads, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
                for (i, j), v in np.ndenumerate(heads):
                    ax.text(j, i, f"{v:+.2f}", ha="center", va="center", fontsize=7)
                ax.set_xlabel("head")
                ax.set_ylabel("layer")
                fig.colorbar(im, ax=ax, label="logit of the target")
                ax.set_title("direct logit attribution, last position", fontsize=10)
                fig.tight_layout()
                path = os.path.join(out_dir, "dla_heads.png")
                save_figure(fig, path, dpi=110)
                plt.close(fig)
                print(f"wrote {path}")
    except (OSError, KeyError, ValueError) as e:
        print(f"plot_lens.py: {args.file}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
