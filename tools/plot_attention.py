#!/usr/bin/python3
"""Heatmaps of every attention head from an `attnlab inspect` file.

    tools/plot_attention.py OUT.h5 [--out-dir DIR] [--seqs 0,2] [--kinds self,cross]

Writes DIR/<kind>_layer<l>_head<h>_seq<b>.png (DIR default: OUT.h5 without .h5,
plus "_png"): one PNG per attention kind (self; or enc_self, dec_self, cross),
layer, head and sequence. Rows are queries, columns keys, each labelled with its
token (<PAD>, <SEP>, <BOS> for ids 0, 1, 2; the id otherwise), cropped to the
sequence's valid length. Keys a query may not attend to (the future, for causal
self-attention) are hatched grey; their weight is exactly 0 in a correct model,
and a cell there that is not 0 is drawn in red and named in the title.

`attnlab inspect CHECKPOINT ... --out OUT.h5 --png DIR` runs this script.
Needs Debian's /usr/bin/python3 with python3-h5py, python3-numpy, python3-matplotlib.
"""
import argparse
import os
import tomllib
import sys

import matplotlib

import h5_probe
from output_files import save_figure

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

SPECIAL = {0: "<PAD>", 1: "<SEP>", 2: "<BOS>"}


class PlotError(Exception):
    pass


def label(token, alphabet=None):
    """A token's tick label: a text model's character (space as '␣', newline as
    '\\n'), else the special token's name or the id."""
    if alphabet is not None:
        c = alphabet[int(token)]
        return {" ": "\u2423", "\n": "\\n", "\t": "\\t"}.get(c, c)
    return SPECIAL.get(int(token), str(int(token)))


def text_alphabet(f):
    """The characters of a text model (task.alphabet of the file's config), else None."""
    config = tomllib.loads(text(f.attrs["config"])) if "config" in f.attrs else {}
    task = config.get("task", {})
    return task.get("alphabet") if task.get("name") == "text" else None


def text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def lengths_name(tokens_name):
    return "lengths" if tokens_name == "tokens" else f"{tokens_name}_lengths"


def plot_head(weights, q_tokens, k_tokens, causal, title, path, alphabet=None):
    """weights (Tq, Tk) of one head and sequence, already cropped to the valid lengths."""
    Tq, Tk = weights.shape
    shift = Tk - Tq  # causal masks are bottom-right aligned
    ineligible = np.zeros((Tq, Tk), dtype=bool)
    if causal:
        ineligible = np.arange(Tk)[None, :] > np.arange(Tq)[:, None] + shift
    leaked = ineligible & (weights != 0)
    size = (max(3.5, 0.42 * Tk + 2.2), max(3.0, 0.42 * Tq + 1.6))
    fig, ax = plt.subplots(figsize=size)
    image = ax.imshow(np.ma.masked_where(ineligible & ~leaked, weights), cmap="viridis", vmin=0.0, vmax=1.0,
                      interpolation="nearest", aspect="auto")
    ax.set_facecolor("#dddddd")
    for i, j in zip(*np.nonzero(ineligible & ~leaked)):
        ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//", edgecolor="#aaaaaa", lw=0))
    for i, j in zip(*np.nonzero(leaked)):
        ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", lw=2))
    if Tk <= 12 and Tq <= 12:
        for i in range(Tq):
            for j in range(Tk):
                if not ineligible[i, j] or leaked[i, j]:
                    ax.text(j, i, f"{weights[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if weights[i, j] < 0.6 else "black")
    ax.set_xticks(range(Tk), [label(t, alphabet) for t in k_tokens], rotation=90, fontsize=8)
    ax.set_yticks(range(Tq), [label(t, alphabet) for t in q_tokens], fontsize=8)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if leaked.any():
        title += f"\nMASK LEAK: {int(leaked.sum())} ineligible cell(s) nonzero"
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def plot_file(path, out_dir, seqs=None, kinds=None):
    """Returns the PNG paths written."""
    if not os.path.isfile(path):
        raise PlotError(f"{path}: no such file")
    try:
        f = h5_probe.open_file(path)  # a crafted file: one line naming it, not a crash
    except h5_probe.H5ProbeError:
        raise  # its message names the file
    except OSError as e:
        raise PlotError(f"{path}: cannot open as HDF5 ({str(e).splitlines()[0]})") from None
    written = []
    with f:
        if text(f.attrs.get("format", "")) != "attnlab-inspect":
            raise PlotError(f"{path}: not an `attnlab inspect` file (format attribute)")
        if int(f.attrs.get("format_version", -1)) != 1:
            raise PlotError(f"{path}: unsupported format_version {f.attrs.get('format_version')}")
        step = int(f.attrs.get("step", -1))
        available = list(f["attention"].keys())
        alphabet = text_alphabet(f)
        for kind in kinds or available:
            if kind not in available:
                raise PlotError(f"{path}: no attention kind '{kind}' (have {', '.join(available)})")
        os.makedirs(out_dir, exist_ok=True)
        for kind in kinds or available:
            group = f["attention"][kind]
            q_name, k_name = text(group.attrs["queries"]), text(group.attrs["keys"])
            causal = bool(int(group.attrs["causal"]))
            q_tokens, k_tokens = f[q_name][()], f[k_name][()]
            q_lengths, k_lengths = f[lengths_name(q_name)][()], f[lengths_name(k_name)][()]
            layers = sorted((int(n.split("_")[1]) for n in group if n.startswith("layer_")))
            batch = q_tokens.shape[0]
            for b in (seqs if seqs is not None else range(batch)):
                if not 0 <= b < batch:
                    raise PlotError(f"{path}: sequence {b} is outside 0..{batch - 1}")
                Lq, Lk = int(q_lengths[b]), int(k_lengths[b])
                for l in layers:
                    w = group[f"layer_{l}"][b]  # (H, Tq, Tk)
                    for h in range(w.shape[0]):
                        name = os.path.join(out_dir, f"{kind}_layer{l}_head{h}_seq{b}.png")
                        plot_head(w[h, :Lq, :Lk], q_tokens[b, :Lq], k_tokens[b, :Lk], causal,
                                  f"{kind}  layer {l}  head {h}  seq {b}  (step {step})", name, alphabet)
                        written.append(name)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inspect_file", metavar="OUT.h5")
    parser.add_argument("--out-dir", metavar="DIR")
    parser.add_argument("--seqs", help="comma-separated sequence indices (default: all)")
    parser.add_argument("--kinds", help="comma-separated attention kinds (default: all)")
    args = parser.parse_args(argv)
    out_dir = args.out_dir or os.path.splitext(args.inspect_file)[0] + "_png"
    try:
        seqs = [int(s) for s in args.seqs.split(",")] if args.seqs else None
    except ValueError:
        parser.error(f"--seqs: '{args.seqs}' is not a comma-separated list of integers")
    kinds = args.kinds.split(",") if args.kinds else None
    try:
        written = plot_file(args.inspect_file, out_dir, seqs, kinds)
    except (PlotError, OSError, KeyError) as e:
        print(f"plot_attention: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(written)} heatmap(s) to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
