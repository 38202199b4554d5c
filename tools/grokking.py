#!/usr/bin/python3
"""Nanda et al. 2023's progress measures of a modular-arithmetic run, from its checkpoints.

    tools/grokking.py RUN_DIR_OR_CHECKPOINT [--checkpoints newest|all] [--out OUT.json]
                      [--plot OUT.png] [--key-frequencies K] [--keys newest|each]

RUN_DIR is a run folder of `attnlab train task.name=modular ...` (holding
checkpoints/step_NNNNNNN.h5 and, with task.train_size = N, train_set.h5); a
checkpoint file alone finds its train_set.h5 two folders up
(<run>/checkpoints/x.h5 -> <run>/train_set.h5). --checkpoints newest (the
default) takes the newest checkpoint of a run folder, all takes every one, in
step order. For each checkpoint, with p = task.modulus and number n = token 3 + n:

Fourier spectrum of the embedding. The rows of tok_emb.weight for the numbers
0..p-1 (E, p x D) projected on the real Fourier basis of Z_p: the constant
1/sqrt(p), sqrt(2/p) cos(2 pi k x / p) and sqrt(2/p) sin(2 pi k x / p) for
k = 1..(p-1)//2, and for even p (-1)^x / sqrt(p) (k = p/2). The norm of
frequency k is sqrt(|cos_k . E|^2 + |sin_k . E|^2) over the width D.

Key frequencies. Frequency k's share of the non-constant Fourier energy is
norm_k^2 / sum_j norm_j^2; the key frequencies are those whose share is at
least 3 / (number of frequencies), i.e. 3x the uniform share, at most 10,
strongest first. --key-frequencies K takes the K strongest instead.

Logits. torch_bridge's model of the checkpoint, float64, eval mode, on all
pairs (a, b) (op "/": b != 0) as inputs [a+3, b+3, 1]; L[a, b, c] is the logit
of number c at the "=" position (index 2). Losses are cross-entropy in nats
over these p number logits only (the other tokens' logits are left out, as in
Nanda et al.'s code; attnlab's own /eval_train loss normalises over the whole
vocabulary, so it is a little higher), accuracies the share of pairs whose
argmax over the p numbers is the answer. Train: the pairs of train_set.h5;
test: every other pair (without train_set.h5 there are no train figures and
test means all pairs).

Restricted and excluded loss (Nanda et al. section 5.1; op "+" only, null for
the other ops). Per output c, the column L[:, :, c] over the (a, b) grid is
projected on cos(w_k (a+b)) and sin(w_k (a+b)) for each key frequency k,
w_k = 2 pi k / p: this keeps exactly the components along cos(w_k (a+b-c))
and sin(w_k (a+b-c)) (see project_key_frequencies). Restricted logits = that
projection plus each output's mean over the inputs, loss over all pairs;
excluded logits = L minus the projection, loss over the training pairs. By
default (--keys newest) every checkpoint uses the key frequencies of the newest
checkpoint analysed, as Nanda et al. fix theirs from the final model, so the
curves over training measure one circuit; --keys each uses each checkpoint's own.

Output: a table on stdout; --out a JSON file with every figure per checkpoint
and the per-frequency norms; --plot a PNG with the losses against step (log
scale) and the newest checkpoint's spectrum. Bad input: one line on stderr,
exit status 2, nothing written.

Needs Debian's /usr/bin/python3 with python3-torch, python3-h5py, python3-numpy,
python3-matplotlib.
"""
import argparse
import json
import math
import os
import re
import sys
import tempfile

import numpy as np
import torch

import h5_probe
import torch_bridge

FIRST_NUMBER = 3   # number n is token 3 + n
SEP = 1            # plays "="
KEY_RATIO = 3.0    # a key frequency holds at least 3x the uniform share of the energy
MAX_KEYS = 10
BATCH = 4096       # pairs per forward
CHECKPOINT_NAME = re.compile(r"step_(\d+)\.h5$")
FORMAT = "attnlab-grokking"


class GrokError(Exception):
    """Bad input: one line on stderr, exit status 2."""


# ---- Fourier basis over Z_p and the embedding's spectrum ---------------------

def frequency_count(p):
    """Non-constant frequencies k = 1 .. p//2 (for even p, k = p/2 has a cosine only)."""
    return p // 2


def fourier_basis(p):
    """-> (basis (p, p), labels): orthonormal rows over x = 0..p-1, labelled (k, "const" | "cos" | "sin")."""
    x = np.arange(p)
    rows, labels = [np.full(p, 1.0 / math.sqrt(p))], [(0, "const")]
    for k in range(1, frequency_count(p) + 1):
        angle = 2 * math.pi * k * x / p
        if 2 * k == p:  # sin(pi x) = 0: only (-1)^x
            rows.append(np.cos(angle) / math.sqrt(p))
            labels.append((k, "cos"))
            continue
        rows += [np.cos(angle) * math.sqrt(2.0 / p), np.sin(angle) * math.sqrt(2.0 / p)]
        labels += [(k, "cos"), (k, "sin")]
    return np.stack(rows), labels


def frequency_norms(embedding):
    """embedding (p, D), row x = number x -> (norms (p//2,) for k = 1..p//2, the constant's norm)."""
    p = embedding.shape[0]
    basis, labels = fourier_basis(p)
    coefficients = basis @ embedding  # (p, D): row i = basis row i . each embedding column
    energy = np.zeros(frequency_count(p) + 1)
    for (k, _), row in zip(labels, coefficients):
        energy[k] += float(row @ row)
    return np.sqrt(energy[1:]), math.sqrt(energy[0])


def key_frequencies(norms, top=None):
    """Frequencies (1-based) by the rule of the docstring, strongest first; `top`: the `top` strongest."""
    energy = np.asarray(norms, dtype=np.float64) ** 2
    order = [int(i) for i in np.argsort(-energy, kind="stable")]
    if top is not None:
        return [i + 1 for i in order[:top]]
    total = energy.sum()
    if total <= 0:
        return []
    share = energy / total
    return [i + 1 for i in order if share[i] >= KEY_RATIO / len(energy)][:MAX_KEYS]


# ---- pairs and answers ---------------------------------------------------------

def answer(p, op, a, b):
    """c = a op b (mod p) for int arrays a, b (op "/": b != 0, p prime)."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if op == "+":
        return (a + b) % p
    if op == "-":
        return (a - b) % p
    if op == "*":
        return (a * b) % p
    return (a * np.array([pow(int(v), p - 2, p) for v in b.ravel()], dtype=np.int64).reshape(b.shape)) % p


def all_pairs(p, op):
    """Every example of the task: (a, b) int arrays over the grid, row-major in a (b = 0 left out for "/")."""
    a, b = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    a, b = a.ravel(), b.ravel()
    keep = b != 0 if op == "/" else np.ones(len(a), dtype=bool)
    return a[keep], b[keep]


def train_mask(p, a, b, train_a, train_b):
    """Bool mask over the pairs (a, b): True where the pair is one of the training pairs."""
    trained = np.zeros((p, p), dtype=bool)
    trained[train_a, train_b] = True
    return trained[a, b]


def read_train_set(path, p, op):
    """train_set.h5 -> (a, b) int arrays, checked to be distinct examples of this task."""
    try:
        with h5_probe.open_file(path) as f:
            tokens = np.asarray(f["tokens"][()], dtype=np.int64)
            mask = np.asarray(f["loss_mask"][()])
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise GrokError(f"{path}: cannot read the training set ({str(e).splitlines()[0]})") from None
    if tokens.ndim != 2 or tokens.shape[1] != 4 or mask.shape != tokens.shape:
        raise GrokError(f"{path}: /tokens {tokens.shape} and /loss_mask {mask.shape} are not [N, 4] rows a b = c")
    a, b = tokens[:, 0] - FIRST_NUMBER, tokens[:, 1] - FIRST_NUMBER
    numbers = (a >= 0) & (a < p) & (b >= 0) & (b < p) & (b != 0 if op == "/" else True)
    if not numbers.all() or (tokens[:, 2] != SEP).any():
        raise GrokError(f"{path}: rows are not a b = c with numbers below task.modulus {p}")
    if (tokens[:, 3] - FIRST_NUMBER != answer(p, op, a, b)).any():
        raise GrokError(f"{path}: answers are not a {op} b mod {p}: not this checkpoint's training set")
    if len(set(zip(a.tolist(), b.tolist()))) != len(a):
        raise GrokError(f"{path}: holds a pair twice")
    return a, b


# ---- logits, losses ------------------------------------------------------------

def number_logits(module, arch, p, a, b):
    """(n, p) float64: the logits of the p numbers at the "=" position for inputs [a+3, b+3, 1]."""
    tokens = np.stack([a + FIRST_NUMBER, b + FIRST_NUMBER, np.full(len(a), SEP)], axis=1)
    out = []
    for start in range(0, len(a), BATCH):
        rows = tokens[start:start + BATCH]
        logits = torch_bridge.run(module, arch, {"tokens": rows, "lengths": np.full(len(rows), 3)})[0]
        out.append(logits[:, 2, FIRST_NUMBER:FIRST_NUMBER + p].double().numpy())
    return np.concatenate(out)


def cross_entropy(logits, targets):
    """Mean over rows of -log softmax(logits)[target], in nats; None for no rows."""
    if len(targets) == 0:
        return None
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(shifted).sum(axis=1))
    return float(np.mean(log_z - shifted[np.arange(len(targets)), targets]))


def accuracy(logits, targets):
    return float(np.mean(logits.argmax(axis=1) == targets)) if len(targets) else None


# ---- restricted and excluded logits ------------------------------------------

def project_key_frequencies(logits, p, keys):
    """logits L (p, p, p) indexed [a, b, c] -> its part along the key frequencies, same shape.

    Over the grid of inputs (a, b) (p^2 points) let u_k = cos(w_k (a+b)) and
    v_k = sin(w_k (a+b)), w_k = 2 pi k / p. They depend only on s = a+b mod p,
    which takes each value p times, so <u_k, u_j> = p sum_s cos(w_k s) cos(w_j s)
    = (p^2 / 2) [k = j] (p^2 for k = p/2, where v_k = 0), likewise for v and
    <u_k, v_j> = 0, and all are orthogonal to the constant: Q = the normalised
    u_k, v_k as columns (p^2, m) is orthonormal and Q Q^T projects on their span.

    Applied to each output column, Q Q^T L[:, :, c] keeps exactly the
    components along cos(w_k (a+b-c)) and sin(w_k (a+b-c)) with coefficients
    free per output c: for each fixed c,
        cos(w(a+b-c)) =  cos(wc) u + sin(wc) v,   sin(w(a+b-c)) = -sin(wc) u + cos(wc) v,
    a rotation by wc, so {cos(w(a+b-c)), sin(w(a+b-c))} span the same plane of
    functions of (a, b) as {u, v} and the projector on it is the same. In
    particular a term cos(w_k (a+b-c)) (the algorithm's logits) passes unchanged.
    """
    s = (np.arange(p)[:, None] + np.arange(p)[None, :]).ravel()  # a+b over the grid, row-major (a, b)
    directions = []
    for k in keys:
        angle = 2 * math.pi * k * s / p
        directions.append(np.cos(angle))
        if 2 * k != p:
            directions.append(np.sin(angle))
    if not directions:
        return np.zeros_like(logits)
    Q = np.stack(directions, axis=1)
    Q /= np.linalg.norm(Q, axis=0)
    columns = logits.reshape(p * p, p)  # (p^2, p): column c = L[:, :, c] over the grid
    return (Q @ (Q.T @ columns)).reshape(p, p, p)


def restricted_and_excluded(logits, p, keys):
    """-> (restricted, excluded) logits (p, p, p): each output's mean plus the key-frequency part, and L minus it."""
    kept = project_key_frequencies(logits, p, keys)
    mean = logits.mean(axis=(0, 1), keepdims=True)  # (1, 1, p): output c's mean over the inputs
    return mean + kept, logits - kept


# ---- one checkpoint ------------------------------------------------------------

def task_of(config, path):
    task, model = config.get("task", {}), config.get("model", {})
    if task.get("name") != "modular":
        raise GrokError(f"{path}: task.name is '{task.get('name')}', not 'modular'")
    if model.get("kind", "decoder") != "decoder":
        raise GrokError(f"{path}: model.kind is '{model.get('kind')}', the modular task needs a decoder")
    return int(task["modulus"]), str(task.get("op", "+"))


def load(path, task=None):
    """-> (module float64, arch, p, op, step) for a modular checkpoint; `task`: the (p, op) it must have."""
    _, config, _, _ = torch_bridge.read_checkpoint(path)
    p, op = task_of(config, path)
    if task is not None and (p, op) != task:
        raise GrokError(f"{path}: task.modulus {p}, task.op '{op}', not {task[0]}, '{task[1]}' as the newest checkpoint")
    module, arch, _, step = torch_bridge.build_module(path, torch.float64)
    return module, arch, p, op, step


def analyse(path, task, split, key_rule):
    """Every figure of one checkpoint but the restricted ones -> (figures, logits (pairs, p)).
    task: (p, op); split: (a, b, is_train) over all pairs; key_rule(norms) -> key frequencies."""
    module, arch, p, op, step = load(path, task)
    embedding = module.tok_emb.weight.detach().numpy()[FIRST_NUMBER:FIRST_NUMBER + p]  # (p, D): numbers 0..p-1
    norms, constant = frequency_norms(embedding)
    a, b, is_train = split
    logits = number_logits(module, arch, p, a, b)
    target = answer(p, op, a, b)
    test = ~is_train
    figures = {
        "step": step, "path": path,
        "train_loss": cross_entropy(logits[is_train], target[is_train]),
        "test_loss": cross_entropy(logits[test], target[test]),
        "train_acc": accuracy(logits[is_train], target[is_train]),
        "test_acc": accuracy(logits[test], target[test]),
        "key_frequencies": key_rule(norms),
        "frequency_norms": [float(v) for v in norms],
        "constant_norm": constant,
    }
    return figures, logits


def add_restricted(figures, logits, p, op, split, keys):
    """Restricted (all pairs) and excluded (training pairs) loss with `keys`; None unless op "+"."""
    figures["loss_key_frequencies"] = keys if op == "+" else None
    figures["restricted_loss"] = figures["excluded_loss"] = None
    if op != "+":
        return
    a, b, is_train = split
    grid = logits.reshape(p, p, p)  # "+" pairs are the whole grid, row-major in a
    restricted, excluded = restricted_and_excluded(grid, p, keys)
    target = answer(p, op, a, b)
    figures["restricted_loss"] = cross_entropy(restricted.reshape(p * p, p), target)
    figures["excluded_loss"] = cross_entropy(excluded.reshape(p * p, p)[is_train], target[is_train])


# ---- inputs and outputs --------------------------------------------------------

def find_checkpoints(path, which):
    """-> (checkpoint paths in step order, train_set.h5 path or None)."""
    if not os.path.exists(path):
        raise GrokError(f"{path}: no such file or folder")
    if os.path.isdir(path):
        folder = os.path.join(path, "checkpoints")
        names = os.listdir(folder) if os.path.isdir(folder) else []
        found = sorted((int(m.group(1)), os.path.join(folder, n)) for n in names if (m := CHECKPOINT_NAME.match(n)))
        if not found:
            raise GrokError(f"{path}: no checkpoints/step_NNNNNNN.h5 (not a run folder?)")
        paths, run = [f for _, f in found], path
        paths = paths if which == "all" else paths[-1:]
    else:
        if which == "all":
            raise GrokError(f"{path}: --checkpoints all needs a run folder, not one checkpoint")
        paths, run = [path], os.path.dirname(os.path.dirname(os.path.abspath(path)))
    train_set = os.path.join(run, "train_set.h5")
    return paths, (train_set if os.path.isfile(train_set) else None)


def check_output(path, option, inputs):
    if path is None:
        return
    real = os.path.realpath(path)
    if os.path.isdir(real):
        raise GrokError(f"{option} {path}: is a folder")
    if not os.path.isdir(os.path.dirname(real)):
        raise GrokError(f"{option} {path}: folder {os.path.dirname(path) or '.'} does not exist")
    if real in {os.path.realpath(i) for i in inputs}:
        raise GrokError(f"{option} {path}: would replace an input")


def write_atomically(path, write):
    """write(temporary path) in path's folder, then renamed onto path: no half-written file."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".grokking_", suffix=os.path.splitext(path)[1], dir=folder)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def fmt(value, width, spec):
    return ("-" if value is None else format(value, spec)).rjust(width)


def print_table(results, keys_note):
    print(f"{'step':>8} {'train loss':>11} {'test loss':>10} {'train acc':>9} {'test acc':>8} "
          f"{'restricted':>10} {'excluded':>9}  key frequencies")
    for r in results:
        print(f"{r['step']:>8} {fmt(r['train_loss'], 11, '.4g')} {fmt(r['test_loss'], 10, '.4g')} "
              f"{fmt(r['train_acc'], 9, '.3f')} {fmt(r['test_acc'], 8, '.3f')} {fmt(r['restricted_loss'], 10, '.4g')} "
              f"{fmt(r['excluded_loss'], 9, '.4g')}  {', '.join(map(str, r['key_frequencies'])) or '(none)'}")
    print(keys_note)


def plot(path, results):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (losses, spectrum) = plt.subplots(1, 2, figsize=(12, 4.5))
    steps = [r["step"] for r in results]
    for key, label in [("train_loss", "train"), ("test_loss", "test"),
                       ("restricted_loss", "restricted (all pairs)"), ("excluded_loss", "excluded (train pairs)")]:
        values = [np.nan if r[key] is None else max(r[key], 1e-12) for r in results]
        if not all(np.isnan(values)):
            losses.plot(steps, values, marker="o", markersize=3, label=label)
    losses.set_yscale("log")
    losses.set_xlabel("step")
    losses.set_ylabel("cross-entropy over the p numbers (nats)")
    losses.set_title("losses")
    losses.legend()
    last = results[-1]
    k = np.arange(1, len(last["frequency_norms"]) + 1)
    keys = set(last["key_frequencies"])
    spectrum.bar(k, last["frequency_norms"], color=["tab:red" if i in keys else "tab:gray" for i in k])
    spectrum.set_xlabel("frequency k")
    spectrum.set_ylabel("embedding norm")
    spectrum.set_title(f"embedding spectrum, step {last['step']} (red: key frequencies)")
    fig.tight_layout()
    write_atomically(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)


def analyse_run(args):
    """Every figure of the chosen checkpoints -> (summary dict for the JSON, one dict per checkpoint)."""
    if args.out and args.plot and os.path.realpath(args.out) == os.path.realpath(args.plot):
        raise GrokError("--out and --plot name the same file")
    paths, train_set = find_checkpoints(args.source, args.checkpoints)
    inputs = paths + ([train_set] if train_set else [])
    for option, out in (("--out", args.out), ("--plot", args.plot)):
        check_output(out, option, inputs)
    for path in inputs:
        h5_probe.probe(path)  # a damaged file: one line, before libhdf5 reads it in this process
    _, config, _, _ = torch_bridge.read_checkpoint(paths[-1])
    p, op = task_of(config, paths[-1])
    count = frequency_count(p)
    if args.key_frequencies is not None and not 1 <= args.key_frequencies <= count:
        raise GrokError(f"--key-frequencies {args.key_frequencies}: give 1 .. {count} (p = {p})")
    a, b = all_pairs(p, op)
    is_train = np.zeros(len(a), dtype=bool)
    if train_set:
        train_a, train_b = read_train_set(train_set, p, op)
        size = int(config["task"].get("train_size", 0))
        if size != len(train_a):
            raise GrokError(f"{train_set}: holds {len(train_a)} examples, {paths[-1]} has task.train_size {size}")
        is_train = train_mask(p, a, b, train_a, train_b)
    split = (a, b, is_train)

    results, logits = [], []
    for path in paths:
        figures, L = analyse(path, (p, op), split, lambda norms: key_frequencies(norms, args.key_frequencies))
        results.append(figures)
        logits.append(L)
    newest_keys = results[-1]["key_frequencies"]
    for figures, L in zip(results, logits):
        add_restricted(figures, L, p, op, split, newest_keys if args.keys == "newest" else figures["key_frequencies"])

    if op != "+":
        note = f'restricted and excluded losses are for op "+" only (this run: "{op}")'
    elif args.keys == "newest":
        note = (f"restricted/excluded losses use the key frequencies of step {results[-1]['step']}: "
                f"{', '.join(map(str, newest_keys)) or '(none)'}")
    else:
        note = "restricted/excluded losses use each checkpoint's own key frequencies"
    n_train = int(is_train.sum())
    summary = {
        "format": FORMAT, "source": args.source, "modulus": p, "op": op,
        "train_set": train_set, "train_pairs": n_train, "test_pairs": int(len(a) - n_train),
        "loss": "cross-entropy in nats over the p number logits at the '=' position; accuracy: argmax over them",
        "key_rule": (f"the {args.key_frequencies} strongest" if args.key_frequencies else
                     f"share of the non-constant embedding energy >= {KEY_RATIO:g} / {count} (3x uniform), "
                     f"at most {MAX_KEYS}"),
        "keys": args.keys, "note": note, "frequencies": list(range(1, count + 1)),
    }
    return summary, results


class Parser(argparse.ArgumentParser):
    def error(self, message):  # a bad option: one line too, not argparse's usage block
        print(f"grokking: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv=None):
    parser = Parser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("source", metavar="RUN_DIR_OR_CHECKPOINT")
    parser.add_argument("--checkpoints", choices=["newest", "all"], default="newest")
    parser.add_argument("--out", metavar="OUT.json")
    parser.add_argument("--plot", metavar="OUT.png")
    parser.add_argument("--key-frequencies", type=int, metavar="K", help="the K strongest frequencies are the key ones")
    parser.add_argument("--keys", choices=["newest", "each"], default="newest",
                        help="restricted/excluded losses use the newest checkpoint's key frequencies (default) or each's own")
    args = parser.parse_args(argv)
    try:
        summary, results = analyse_run(args)
    except (GrokError, torch_bridge.BridgeError, h5_probe.H5ProbeError) as e:
        print(f"grokking: {e}", file=sys.stderr)
        return 2

    s = summary
    print(f"p = {s['modulus']}, op \"{s['op']}\": {s['train_pairs']} training pairs "
          f"({s['train_set'] or 'no train_set.h5: test = all pairs'}), {s['test_pairs']} test pairs; "
          f"key frequencies: {s['key_rule']}; losses: cross-entropy (nats) over the p number logits at \"=\"")
    print_table(results, s["note"])
    if args.out:
        def write_json(tmp):
            with open(tmp, "w") as f:
                json.dump(dict(summary, checkpoints=results), f, indent=1)
                f.write("\n")
        write_atomically(args.out, write_json)
    if args.plot:
        plot(args.plot, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
