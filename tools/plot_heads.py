#!/usr/bin/python3
"""Attention maps of single heads, as PNG heatmaps, from an attnlab maps file.

    tools/plot_heads.py MAPS.h5 [--head [KIND:]L.H ...] [--item N] [--out-dir DIR]
                        [--prefix NAME] [--induction]

MAPS.h5 is what `attnlab ablate CHECKPOINT --maps MAPS.h5` writes (the first
eval batch's tokens and per-head weights) or an `attnlab inspect --out` file:
both hold /tokens and /lengths (decoder; /src, /tgt and their lengths for an
encoder-decoder) and /attention/<kind>/layer_<l> [B, H, Tq, Tk].

Writes into DIR (default: beside MAPS.h5), for sequence N of the batch (default:
the longest one):

    <prefix>heads.png          every head of every layer of each kind in one grid
                               (one file per kind, <prefix>heads_<kind>.png, for
                               an encoder-decoder)
    <prefix>L<l>H<h>.png       one per --head (KIND defaults to self / dec_self)

Rows are query positions, columns key positions, both labelled with the token
ids; ineligible keys (the future, padding) weigh exactly 0 and show as such.

--induction (for task.name = "induction", whose sequences are r r with r a
random prefix of n tokens, inputs of length 2n - 1) prints, for every head, the
mean weight on the previous position over the first copy, t = 1 .. n-1, where
the induction head reads it (previous-token score), and over the second copy on
the position after the current token's earlier occurrence, t - n + 1 (induction
score); those cells are outlined on the single-head plots and the scores go into
the titles. Olsson et al. (2022): a previous-token head in layer 0
writes each token's predecessor into its position; an induction head in layer 1
finds the key whose predecessor equals the current token and copies it.

Needs Debian's /usr/bin/python3 with python3-h5py, python3-numpy, python3-matplotlib.
"""
import argparse
import os
import sys

import h5py
import numpy as np

import h5_probe


def read_maps(path):
    """(kinds {kind: [layer arrays (B,H,Tq,Tk)]}, token axes {kind: (query tokens, key tokens, q lengths, k lengths)})."""
    try:
        h5_probe.probe(path)  # a crafted file: one line naming it, not a crash
    except h5_probe.H5ProbeError as e:
        sys.exit(str(e))
    with h5py.File(path, "r") as f:
        if "attention" not in f:
            sys.exit(f"{path}: no /attention group (not an attnlab maps or inspect file)")
        kinds = {}
        for kind in f["attention"]:
            group = f["attention"][kind]
            layers = sorted((k for k in group if k.startswith("layer_")), key=lambda k: int(k.split("_")[1]))
            kinds[kind] = [group[k][()] for k in layers]
        if "tokens" in f:
            tokens, lengths = f["tokens"][()], f["lengths"][()]
            axes = {k: (tokens, tokens, lengths, lengths) for k in kinds}
        else:
            src, src_len = f["src"][()], f["src_lengths"][()]
            tgt, tgt_len = f["tgt"][()], f["tgt_lengths"][()]
            axes = {"enc_self": (src, src, src_len, src_len), "dec_self": (tgt, tgt, tgt_len, tgt_len),
                    "cross": (tgt, src, tgt_len, src_len)}
    return kinds, axes


def induction_scores(weights, lengths):
    """Per head (previous-token score, induction score) of one layer's weights (B, H, T, T)."""
    B, H = weights.shape[:2]
    prev = np.zeros(H)
    induction = np.zeros(H)
    for h in range(H):
        p, i = [], []
        for b in range(B):
            length = int(lengths[b])
            n = (length + 1) // 2
            p += [weights[b, h, t, t - 1] for t in range(1, n)]
            i += [weights[b, h, t, t - n + 1] for t in range(n, length)]
        prev[h], induction[h] = np.mean(p), np.mean(i)
    return prev, induction


def parse_head(text, default_kind):
    kind, _, lh = text.rpartition(":")
    try:
        layer, head = (int(x) for x in lh.split("."))
    except ValueError:
        sys.exit(f"--head {text}: expected [KIND:]LAYER.HEAD, e.g. 1.3 or cross:0.1")
    return kind or default_kind, layer, head


def draw(ax, w, q_tokens, k_tokens, title, outline=None, small=False):
    import matplotlib.patches as patches
    image = ax.imshow(w, cmap="YlGnBu", vmin=0, vmax=1, interpolation="nearest")
    size = 4.5 if small else 7
    ax.set_xticks(range(len(k_tokens)), [str(t) for t in k_tokens], fontsize=size, rotation=90 if small else 0)
    ax.set_yticks(range(len(q_tokens)), [str(t) for t in q_tokens], fontsize=size)
    ax.set_xlabel("key (token id)", fontsize=7 if small else 10)
    ax.set_ylabel("query (token id)", fontsize=7 if small else 10)
    ax.set_title(title, fontsize=9)
    for (i, j) in outline or []:
        ax.add_patch(patches.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#d9480f", linewidth=1.2))
    return image


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("maps")
    parser.add_argument("--head", action="append", default=[], help="[KIND:]LAYER.HEAD, repeatable")
    parser.add_argument("--item", type=int, help="sequence of the batch (default: the longest)")
    parser.add_argument("--out-dir", help="default: the folder of MAPS.h5")
    parser.add_argument("--prefix", default="", help="file name prefix, e.g. induction_")
    parser.add_argument("--induction", action="store_true", help="score and outline previous-token and induction patterns")
    args = parser.parse_args()

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not os.path.isfile(args.maps):
        sys.exit(f"{args.maps}: no such file")
    kinds, axes = read_maps(args.maps)
    out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.maps))
    os.makedirs(out_dir, exist_ok=True)
    first_kind = next(iter(kinds))
    q_lengths = axes[first_kind][2]
    item = int(np.argmax(q_lengths)) if args.item is None else args.item
    if not 0 <= item < len(q_lengths):
        sys.exit(f"--item {item}: the batch has {len(q_lengths)} sequences")

    scores = {}
    if args.induction:
        if "self" not in kinds:
            sys.exit("--induction needs a decoder model (attention kind self)")
        print(f"{'layer':>5} {'head':>4} {'prev-token':>10} {'induction':>10}   (mean weights over the batch's {len(q_lengths)} sequences)")
        for layer, w in enumerate(kinds["self"]):
            prev, ind = induction_scores(w, axes["self"][2])
            for h in range(w.shape[1]):
                scores[("self", layer, h)] = (prev[h], ind[h])
                print(f"{layer:>5} {h:>4} {prev[h]:>10.3f} {ind[h]:>10.3f}")

    def cut(kind, w, h):
        q_tokens, k_tokens, q_len, k_len = axes[kind]
        nq, nk = int(q_len[item]), int(k_len[item])
        return w[item, h, :nq, :nk], q_tokens[item, :nq], k_tokens[item, :nk]

    written = []
    for kind, layers in kinds.items():
        H = layers[0].shape[1]
        fig, grid = plt.subplots(len(layers), H, figsize=(2.8 * H + 1, 2.9 * len(layers) + 0.6), squeeze=False)
        for layer, w in enumerate(layers):
            for h in range(H):
                a, qt, kt = cut(kind, w, h)
                title = f"layer {layer} head {h}"
                if (kind, layer, h) in scores:
                    title += "\nprev %.2f  induction %.2f" % scores[(kind, layer, h)]
                image = draw(grid[layer][h], a, qt, kt, title, small=True)
        fig.colorbar(image, ax=grid, shrink=0.6, label="attention weight")
        fig.suptitle(f"{kind} attention, sequence {item} of the batch")
        name = f"{args.prefix}heads.png" if len(kinds) == 1 else f"{args.prefix}heads_{kind}.png"
        fig.savefig(os.path.join(out_dir, name), dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(name)

    default_kind = "self" if "self" in kinds else "dec_self"
    for spec in args.head:
        kind, layer, h = parse_head(spec, default_kind)
        if kind not in kinds or not 0 <= layer < len(kinds[kind]) or not 0 <= h < kinds[kind][layer].shape[1]:
            sys.exit(f"--head {spec}: no such head (kinds {', '.join(kinds)}, {len(kinds[first_kind])} layers, "
                     f"{kinds[first_kind][0].shape[1]} heads)")
        a, qt, kt = cut(kind, kinds[kind][layer], h)
        outline = None
        title = f"{kind} layer {layer} head {h}, sequence {item}"
        if args.induction and kind == "self":
            length = len(qt)
            n = (length + 1) // 2
            if layer == 0 or scores[(kind, layer, h)][0] >= scores[(kind, layer, h)][1]:
                outline = [(t, t - 1) for t in range(1, n)]
                title += "\noutlined: previous position in the first copy (score %.2f)" % scores[(kind, layer, h)][0]
            else:
                outline = [(t, t - n + 1) for t in range(n, length)]
                title += "\noutlined: after the earlier occurrence (score %.2f)" % scores[(kind, layer, h)][1]
        fig, ax = plt.subplots(figsize=(5.2, 4.6))
        image = draw(ax, a, qt, kt, title, outline)
        fig.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
        name = f"{args.prefix}L{layer}H{h}.png" if kind in ("self", "dec_self") else f"{args.prefix}{kind}_L{layer}H{h}.png"
        fig.savefig(os.path.join(out_dir, name), dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(name)
    print("wrote " + ", ".join(os.path.join(out_dir, n) for n in written))


if __name__ == "__main__":
    main()
