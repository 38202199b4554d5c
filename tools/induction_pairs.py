#!/usr/bin/python3
"""Clean/corrupted prompt pairs for an induction model, as `attnlab patch --pairs` reads them.

    tools/induction_pairs.py OUT.h5 [--kind value|key] [--n 8] [--count 32] [--vocab 64] [--seed 0]

Each clean prompt is r r[:-1]: a prefix r of n distinct content tokens (3 ..
vocab-1) and its repeat without the last token, so the answer at the last
position is r[-1], the token after the current token's first occurrence.
  value: the first copy's r[-1] is replaced by a token not in r: an induction
         head now copies that token (the corrupted answer, written to the file)
  key:   the first copy's r[0] .. r[-2] are replaced by tokens not in r: the
         current token has no earlier occurrence, so nothing says where to copy
         from (no corrupted answer: read it with --metric prob or loss)
Writes /clean, /corrupt [count, 2n - 1]; for value also /positions,
/clean_answers, /corrupt_answers [count, 1]. Needs python3-h5py and numpy.
"""
import argparse
import sys

import h5py
import numpy as np


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--kind", choices=["value", "key"], default="value")
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--count", type=int, default=32)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.n < 2 or a.count < 1 or 2 * a.n > a.vocab - 3:
        print(f"induction_pairs.py: need n >= 2, count >= 1 and 2n <= vocab - 3 (n {a.n}, vocab {a.vocab})", file=sys.stderr)
        return 2
    rng = np.random.default_rng(a.seed)
    clean, corrupt, corrupt_answers = [], [], []
    for _ in range(a.count):
        pool = rng.permutation(np.arange(3, a.vocab))
        r, others = pool[: a.n], pool[a.n:]
        c = np.concatenate([r, r[:-1]])
        x = c.copy()
        if a.kind == "value":
            x[a.n - 1] = others[0]
            corrupt_answers.append(others[0])
        else:
            x[: a.n - 1] = others[: a.n - 1]
        clean.append(c)
        corrupt.append(x)
    with h5py.File(a.out, "w") as f:
        f["clean"], f["corrupt"] = np.array(clean), np.array(corrupt)
        if a.kind == "value":
            f["positions"] = np.full((a.count, 1), 2 * a.n - 2)
            f["clean_answers"] = np.array(clean)[:, a.n - 1 : a.n]
            f["corrupt_answers"] = np.array(corrupt_answers)[:, None]
    print(f"wrote {a.out}: {a.count} {a.kind} pairs of {2 * a.n - 1} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
