"""The figures of the pages built on a sweep: docs/length_generalisation.md
(configs/sweeps/length_generalisation.toml and tools/length_generalisation.py)."""
import csv
import os
import re

import numpy as np

from doc_figures_work import bullets, config, paragraph


def sweep(work, name):
    """`attnlab sweep configs/sweeps/NAME.toml --jobs 2` into runs/: the sweep folder."""
    def make():
        if work.reuse and os.path.exists(work.path(f"runs/{name}/summary.csv")):
            return f"runs/{name}"
        printed = work.attnlab_run("sweep", config(f"sweeps/{name}.toml"), "--jobs", "2", "run.out_dir=runs")
        return re.search(r"summary in (\S+)/summary\.csv", printed).group(1)
    return work.once(("sweep", name), make)


def length_generalisation(work):
    """tools/length_generalisation.py on the sweep: (its table, {(scheme, band or length): [(token acc, seq acc) per seed]})."""
    def make():
        folder = sweep(work, "length_generalisation")
        printed = work.tool("length_generalisation.py", folder, "--attnlab", work.attnlab)
        table = "".join(line + "\n" for line in printed.splitlines() if line.startswith("|"))
        found = {}
        with open(work.path(f"{folder}/length_generalisation.csv")) as f:
            for row in csv.DictReader(f):
                key = (row["model.positional"], row["band"] if row["band"] != "length" else int(row["min_len"]))
                found.setdefault(key, []).append((float(row["token_acc"]), float(row["seq_acc"])))
        return table, found
    return work.once("length generalisation", make)


def scores(work, scheme, where, which=0):
    """The mean over seeds of token (WHICH 0) or sequence (1) accuracy of SCHEME at WHERE (a band or a length),
    computed as tools/length_generalisation.py's table does."""
    return float(np.mean([x[which] for x in length_generalisation(work)[1][(scheme, where)]]))


def spread(work, scheme, where, which=0):
    return float(np.std([x[which] for x in length_generalisation(work)[1][(scheme, where)]], ddof=1))


def lengthgen_table(work):
    return length_generalisation(work)[0]


def lengthgen_shows(work):
    tables = ("learned", "sinusoidal", "rotary")
    fit = [scores(work, s, "1x") for s in tables]
    others_2x = [scores(work, s, "2x") for s in tables]
    return bullets([
        f"**Learned, sinusoidal and rotary** fit the training lengths (token accuracy {min(fit):.3f} to {max(fit):.3f}) and"
        f" fall off a cliff just past them. Learned positions drop from {scores(work, 'learned', 8):.2f} at length 8 to"
        f" {scores(work, 'learned', 9):.2f} at 9: the rows beyond 8 were never trained. Sinusoidal and rotary degrade over two or"
        f" three more lengths ({scores(work, 'sinusoidal', 9):.2f} and {scores(work, 'rotary', 9):.2f} at 9) and then are no"
        f" better than learned; rotary ends near chance ({scores(work, 'rotary', '2x'):.2f} at 13..16), below the others,"
        " which still copy the first tokens of each string.",
        f"**ALiBi** keeps {scores(work, 'alibi', '2x'):.2f} token accuracy at twice the training length,"
        f" {scores(work, 'alibi', '2x') / scores(work, 'learned', '2x'):.1f} times the learned table's"
        f" {scores(work, 'learned', '2x'):.2f}. It pays in fit: after 1500 steps it has not solved the training lengths"
        f" ({scores(work, 'alibi', '1x'):.3f} token, {scores(work, 'alibi', '1x', 1):.3f} sequence accuracy, where the tables"
        f" reach {min(fit):.2f}+), and its errors grow smoothly with length, so whole copies at 2x are rare"
        f" ({scores(work, 'alibi', '2x', 1):.2f}).",
        f"**No positions** fit worst in distribution ({scores(work, 'none', '1x'):.3f}) and degrade smoothly, without the"
        f" cliff: {scores(work, 'none', '1.5x'):.2f} at 1.5x and {scores(work, 'none', '2x'):.2f} at 2x,"
        f" {'better than every scheme with a table or a rotation' if scores(work, 'none', '2x') > max(others_2x) else 'not better than every scheme with a table or a rotation'},"
        f" {'below' if scores(work, 'none', '2x') < scores(work, 'alibi', '2x') else 'above'} ALiBi. A causal decoder without"
        " positions can still count (the causal mask makes a token's attention depend on how many came before it), which is"
        " what lets it copy at all."])


def lengthgen_published(work):
    others = [scores(work, s, "2x") for s in ("sinusoidal", "rotary", "learned")]
    alibi, none = scores(work, "alibi", "2x"), scores(work, "none", "2x")
    return bullets([
        "**Press et al. 2022 (ALiBi, \"Train Short, Test Long\")**: ALiBi extrapolates to longer inputs than it was trained"
        " on, where sinusoidal and rotary do not (their measure: language-modelling perplexity). On copy we see the same"
        f" ordering: ALiBi holds {alibi:.2f} token accuracy at 2x against {min(others):.2f} to {max(others):.2f} for"
        " sinusoidal, rotary and learned. Agreement, with the caveat above: here ALiBi also under-fits the training lengths"
        " at this budget, which the paper's large-data setting does not show.",
        "**Kazemnejad et al. 2023 (\"The Impact of Positional Encoding on Length Generalization in Transformers\")**:"
        " decoder-only models without positional encoding (NoPE) generalise to longer inputs better than learned,"
        " sinusoidal, rotary and also ALiBi on their synthetic reasoning tasks. Partly reproduced: no positions beat"
        f" learned, sinusoidal and rotary beyond the training lengths ({none:.2f} against {min(others):.2f} to"
        f" {max(others):.2f} at 2x), but not ALiBi ({alibi:.2f}), and no scheme keeps whole-sequence accuracy at 2x. Their"
        " tasks, model sizes and training budgets differ from this one; a longer budget, which would let ALiBi and no"
        " positions fit the training lengths fully, may change the ordering between those two."])


def lengthgen_limits(work):
    widest = max(((spread(work, s, b, w), s, w) for s in ("learned", "sinusoidal", "rotary", "alibi", "none")
                  for b in ("1x", "1.5x", "2x") for w in (0, 1)))
    return paragraph(
        "One task (copy), one small model, 1500 steps, 3 seeds, 256 sequences per figure: the seed spread (± up to",
        f"{widest[0]:.2f} in {'ALiBi' if widest[1] == 'alibi' else widest[1]}'s {'sequence' if widest[2] else 'token'} accuracy)",
        "is as large as some differences.")


PREPARE = [lambda work: sweep(work, "length_generalisation")]
FIGURES = {f.__name__: f for f in (lengthgen_table, lengthgen_shows, lengthgen_published, lengthgen_limits)}
