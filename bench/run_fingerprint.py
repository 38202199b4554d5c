#!/usr/bin/python3
"""Fingerprint of a finished run, for refactoring guard rails.

    /usr/bin/python3 bench/run_fingerprint.py RUN_DIR [--compare OTHER_RUN_DIR]

Prints one SHA-256 per recorded series of metrics.h5 (train loss, grad norm,
eval loss and accuracy, per-head entropy, masked mass, score std) and one over
the final checkpoint's parameters (every /params dataset, sorted by name, as
stored bytes). Two runs of the same config at the same thread count on the
same machine should agree bit for bit; --compare lists what differs and the
largest absolute difference of each.
"""
import argparse
import hashlib
import os
import sys

import h5py
import numpy as np

SERIES = ["train/loss", "train/grad_norm", "eval/loss", "eval/token_acc", "eval/seq_acc",
          "attention/self/entropy", "attention/self/masked_mass", "attention/self/score_std",
          "attention/cross/entropy", "attention/encoder/entropy"]


def arrays(run_dir):
    out = {}
    with h5py.File(os.path.join(run_dir, "metrics.h5"), "r") as f:
        for name in SERIES:
            if name in f:
                out["metrics:" + name] = np.asarray(f[name])
    ckpts = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    with h5py.File(os.path.join(run_dir, "checkpoints", ckpts[-1]), "r") as f:
        names = []
        f["params"].visit(lambda n: names.append(n) if isinstance(f["params"][n], h5py.Dataset) else None)
        for name in sorted(names):
            out["params:" + name] = np.asarray(f["params"][name])
    return out


def digest(values):
    h = hashlib.sha256()
    for key in sorted(values):
        if key.startswith("params:"):
            h.update(key.encode() + values[key].tobytes())
    return h.hexdigest()[:16]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("run_dir")
    p.add_argument("--compare")
    args = p.parse_args()
    a = arrays(args.run_dir)
    for key in sorted(a):
        if key.startswith("metrics:"):
            print(f"{key[8:]:28s} {hashlib.sha256(a[key].tobytes()).hexdigest()[:16]}  last {a[key].ravel()[-1]:.9g}")
    print(f"{'final parameters':28s} {digest(a)}  ({sum(1 for k in a if k.startswith('params:'))} tensors)")
    if not args.compare:
        return 0
    b = arrays(args.compare)
    differ = 0
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            print(f"only in one run: {key}")
            differ += 1
        elif a[key].shape != b[key].shape or not np.array_equal(a[key], b[key]):
            d = np.max(np.abs(a[key].astype(np.float64) - b[key].astype(np.float64))) if a[key].shape == b[key].shape else float("nan")
            print(f"differs: {key} (max |diff| {d:.3g})")
            differ += 1
    print("bit for bit identical" if differ == 0 else f"{differ} arrays differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
