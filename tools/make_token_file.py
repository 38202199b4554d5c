#!/usr/bin/python3
"""Writes a token file for the `file` task: multi-digit addition, digits reversed.

    /usr/bin/python3 tools/make_token_file.py OUT.h5 [--rows 20000] [--min-digits 3]
                                              [--max-digits 3] [--seed 0] [--no-mask]

Each row is one sum of two n-digit numbers (n drawn from [min, max] digits,
leading zeros allowed), written least significant digit first, which lets a
causal model produce the carry in the order it needs it:

    a_0 .. a_{n-1}  +  b_0 .. b_{n-1}  =  c_0 .. c_n          (c = a + b, n + 1 digits)

e.g. 47 + 85 = 132 with n = 2 is the row  7 4 + 5 8 = 2 3 1.  A row holds
3n + 3 tokens; rows are right-padded with 0 to the longest. No two rows are the
same sum, so the rows the trainer holds out for evaluation (the last tenth,
data/file_task.h) are sums the model never trained on.

With the defaults (3 digits, 20000 rows) configs/file.toml reaches 100% on the
held-out answers. Mixed lengths (--min-digits 2 --max-digits 4) are much
harder for the same model: where a_i and b_i sit then depends on n, which it
must first infer from the position of "+"; it reached ~79% in 4000 steps.

Token ids (vocab = 14; task.vocab must be at least that):
    0 <PAD> (padding only)    1 "="    3..12 the digits 0..9    13 "+"
(2, the toy tasks' <BOS>, is not used.) The ids of "=" and <PAD> are the toy
tasks' <SEP> and <PAD> (data/tasks.h).

Datasets written (the layout data/token_file.h reads):
    tokens     [N, S] int32   the rows, right-padded with 0
    lengths    [N]    int32   3n + 3 per row
    loss_mask  [N, S] uint8   1 at the digits of c (the tokens after "="), so
                              only the answer counts in loss and accuracy;
                              left out with --no-mask (every token then counts,
                              and the random digits of a and b cap the accuracy)
and the root attributes format="attnlab-tokens", task="add", vocab=14 and the
token names, for a reader's convenience (the trainer ignores them).
"""
import argparse
import os
import sys

import h5py
import numpy as np

PAD, EQUALS, PLUS = 0, 1, 13
DIGIT0 = 3  # the digit d is token DIGIT0 + d
VOCAB = 14


def digits_lsf(value, count):
    """`value` as `count` decimal digits, least significant first."""
    return [(value // 10 ** i) % 10 for i in range(count)]


def addition_rows(rows, min_digits, max_digits, rng):
    """`rows` distinct sums as token lists (see the module doc)."""
    capacity = sum(100 ** n for n in range(min_digits, max_digits + 1))
    if rows > capacity // 2:
        raise SystemExit(f"make_token_file: {rows} distinct sums of {min_digits} to {max_digits} digits "
                         f"would take more than half of the {capacity} there are; ask for fewer rows")
    seen, out = set(), []
    while len(out) < rows:
        n = int(rng.integers(min_digits, max_digits + 1))
        a, b = int(rng.integers(0, 10 ** n)), int(rng.integers(0, 10 ** n))
        if (n, a, b) in seen:
            continue
        seen.add((n, a, b))
        row = [DIGIT0 + d for d in digits_lsf(a, n)] + [PLUS] + [DIGIT0 + d for d in digits_lsf(b, n)]
        row += [EQUALS] + [DIGIT0 + d for d in digits_lsf(a + b, n + 1)]
        out.append(row)
    return out


def write(path, rows, with_mask):
    width = max(len(r) for r in rows)
    tokens = np.full((len(rows), width), PAD, np.int32)
    lengths = np.array([len(r) for r in rows], np.int32)
    mask = np.zeros((len(rows), width), np.uint8)
    for i, row in enumerate(rows):
        tokens[i, :len(row)] = row
        answer_from = row.index(EQUALS) + 1
        mask[i, answer_from:len(row)] = 1
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with h5py.File(path, "w") as f:
        f.create_dataset("tokens", data=tokens)
        f.create_dataset("lengths", data=lengths)
        if with_mask:
            f.create_dataset("loss_mask", data=mask)
        f.attrs["format"] = "attnlab-tokens"
        f.attrs["task"] = "add"
        f.attrs["vocab"] = VOCAB
        f.attrs["token_names"] = ["<PAD>", "=", "<BOS>"] + [str(d) for d in range(10)] + ["+"]
    return tokens.shape


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("out", metavar="OUT.h5", help="the token file to write (replaced if it exists)")
    parser.add_argument("--rows", type=int, default=20000, help="number of sums (default 20000)")
    parser.add_argument("--min-digits", type=int, default=3, help="fewest digits per operand (default 3)")
    parser.add_argument("--max-digits", type=int, default=3, help="most digits per operand (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--no-mask", action="store_true", help="write no loss_mask (every token counts)")
    args = parser.parse_args(argv)
    if not 1 <= args.min_digits <= args.max_digits:
        parser.error("need 1 <= --min-digits <= --max-digits")
    if args.rows < 2:
        parser.error("--rows must be at least 2 (the trainer holds out a tenth, at least one row)")
    rng = np.random.default_rng(args.seed)
    shape = write(args.out, addition_rows(args.rows, args.min_digits, args.max_digits, rng), not args.no_mask)
    print(f"{args.out}: tokens {shape[0]} x {shape[1]}, vocab {VOCAB}, "
          f"{'loss_mask on the answers' if not args.no_mask else 'no loss_mask'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
