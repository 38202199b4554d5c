"""docs/grokking.md's figures for configs/grokking.toml (p = 31): the run as
shipped (seed 0, one thread; about 2 minutes of CPU), its metrics.h5 and
tools/grokking.py's progress measures over its checkpoints. The p = 113 runs of
the page take an hour each and are not regenerated."""
import json
import math

import numpy as np

from doc_figures_work import REPRODUCTIONS, bullets, config, paragraph, table

CURVE_STEPS = (200, 600, 2100, 4600, 7600, 8300, 11000)
PROGRESS_STEPS = (1000, 3000, 5000, 6000, 8000, 9000)


def run(work):
    return work.train("grokking", config("grokking.toml"), "train.threads=1")


def metrics(work):
    """{group: {series: array}} of the run's metrics.h5 (eval, eval_train, train)."""
    def make():
        with work.h5(f"{run(work)}/metrics.h5") as f:
            return {g: {x: f[f"{g}/{x}"][()] for x in f[g]} for g in ("eval", "eval_train", "train")}
    return work.once("grokking metrics", make)


def progress(work, keys):
    """tools/grokking.py RUN --checkpoints all --keys KEYS --out: its JSON."""
    def make():
        out = f"grokking_{keys}.json"
        work.tool("grokking.py", run(work), "--checkpoints", "all", "--keys", keys, "--out", out)
        with open(work.path(out)) as f:
            return json.load(f)
    return work.once(("grokking.py", keys), make)


def short(x):
    """A loss as the page writes it: 3 significant digits from 1, 2 below, and 2.9e-4 below 0.01."""
    if x >= 1:
        return f"{x:.{max(0, 2 - int(math.floor(math.log10(x))))}f}"
    if x >= 0.01:
        return f"{x:.{1 - int(math.floor(math.log10(x)))}f}"
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def grokking_curve(work):
    m = metrics(work)
    held, train = m["eval"], m["eval_train"]
    at = {int(s): i for i, s in enumerate(held["step"])}
    return table(["step"] + [str(s) for s in CURVE_STEPS],
                 [["training-set accuracy"] + [f"{train['token_acc'][at[s]]:.3f}" for s in CURVE_STEPS],
                  ["held-out accuracy"] + [f"{held['token_acc'][at[s]]:.3f}" for s in CURVE_STEPS]], ["l"] * (1 + len(CURVE_STEPS)))


def grokking_curve_prose(work):
    m = metrics(work)
    held, train, loss = m["eval"], m["eval_train"], m["train"]
    memorised = int(train["step"][np.argmax(train["token_acc"] == 1.0)])
    leaves = int(held["step"][np.argmax(held["token_acc"] >= 0.1)])
    first = int(np.argmax(held["token_acc"] >= 0.99))
    after = held["token_acc"][first:]
    spikes = loss["loss"][loss["step"] > memorised]
    return bullets([
        f"The training set is memorised by step {memorised}.",
        f"Held-out accuracy stays below 0.1 until step {leaves}. Chance is 1/31 = {1 / 31:.3f}.",
        f"Held-out accuracy first reaches 99% at step {int(held['step'][first])}. After that it stays between"
        f" {after.min():.3f} and {after.max():.1f}, and is {held['token_acc'][-1]:.1f} at the end.",
        f"The train loss spikes every few thousand steps (up to {spikes.max():.0e}, then back down to {spikes.min():.0e})."
        " These are the \"slingshot\" spikes that Adam with strong weight decay shows on this task.".replace("e-0", "e-")])


def grokking_progress(work):
    found = progress(work, "newest")
    newest = found["checkpoints"][-1]
    keys = newest["key_frequencies"]
    norms = dict(zip(found["frequencies"], newest["frequency_norms"]))
    others = [norms[k] for k in norms if k not in keys]
    rows = []
    by_step = {c["step"]: c for c in found["checkpoints"]}
    for step in PROGRESS_STEPS:
        c = by_step[step]
        rows.append([str(step), f"{c['test_acc']:.3f}", short(c["test_loss"]), short(c["restricted_loss"]), short(c["excluded_loss"])])
    return paragraph(
        f"`tools/grokking.py --checkpoints all`, over the {len(found['checkpoints'])} checkpoints of the same run. The losses",
        f"are cross-entropy over the 31 number logits at \"=\". The key frequencies are those of step {newest['step']:,},",
        f"k = {' and '.join(map(str, keys))}: each holds more than 3x the uniform share of the embedding's Fourier energy. The",
        f"other {len(others)} frequencies keep norms of {min(others):.2f}-{max(others):.2f}, against",
        f"{' and '.join(f'{norms[k]:.2f}' for k in keys)}.") + "\n" + table(
        ["step", "test acc", "test loss", "restricted loss", "excluded loss"], rows, ["l"] * 5)


def grokking_progress_prose(work):
    by_step = {c["step"]: c for c in progress(work, "newest")["checkpoints"]}
    formation = [by_step[s] for s in (1000, 3000, 5000, 6000)]
    each = progress(work, "each")["checkpoints"]
    changes, seen = [], ()
    for c in each:  # the steps where a checkpoint's own key frequencies change
        if tuple(c["key_frequencies"]) != seen:
            seen = tuple(c["key_frequencies"])
            changes.append((c["step"], seen))
    keys = [f"none before step {changes[0][0]} (no frequency stands out yet)"] if not each[0]["key_frequencies"] else []
    keys += [f"k = {' and '.join(map(str, found))} from step {step}" for step, found in changes if found]
    return "This is Nanda et al.'s picture, in order:\n" + bullets([
        f"**Circuit formation.** The restricted loss falls from {short(formation[0]['restricted_loss'])} to"
        f" {short(formation[-1]['restricted_loss'])} by step 6000. Over the same steps the excluded loss rises from"
        f" {formation[0]['excluded_loss']:.2f} to {formation[-1]['excluded_loss']:.1f}: the training pairs come to depend on"
        f" the key frequencies. Meanwhile test accuracy is {min(c['test_acc'] for c in formation):.2f}-"
        f"{max(c['test_acc'] for c in formation):.2f} and the test loss still above"
        f" {math.floor(min(c['test_loss'] for c in formation))}.",
        f"**Cleanup.** The test loss then collapses to {short(by_step[9000]['test_loss'])} by step 9000."]) + (
        "\n`--keys each` gives each checkpoint's own key frequencies instead:\n" + bullets([k + ";" for k in keys[:-1]] + [keys[-1] + "."]))


def reproductions_grokking(work):
    m = metrics(work)
    held, train = m["eval"], m["eval_train"]
    memorised = int(train["step"][np.argmax(train["token_acc"] == 1.0)])
    first = int(held["step"][np.argmax(held["token_acc"] >= 0.99)])
    return table(REPRODUCTIONS, [[
        "Grokking, a CI-sized setting (p = 31, half the pairs; no published counterpart)", "",
        f"memorised by step {memorised}; held-out >= 99% first at step {first}, {held['token_acc'][-1]:.1f} at"
        f" {int(held['step'][-1]):,}", "about 170 s", "`build/attnlab train configs/grokking.toml`",
        "yes: `tools_doc_figures_runs`, and the step by the config's claim"]], ["l"] * 6)


PREPARE = [run]
FIGURES = {f.__name__: f for f in (grokking_curve, grokking_curve_prose, grokking_progress, grokking_progress_prose,
                                   reproductions_grokking)}
