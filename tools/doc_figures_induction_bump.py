"""docs/induction_bump.md's figures: configs/induction_bump.toml trained as
shipped (seeds 0 to 4), once more evaluated every 10 steps (the page's table),
`attnlab heads` and `inspect` of its final checkpoint; and the ablation of
docs/induction_heads.md's model, which the page quotes."""
import math

import numpy as np

from doc_figures_circuits import composition, heads
from doc_figures_induction_heads import model as induction_model
from doc_figures_induction_heads import scores as plot_heads_scores
from doc_figures_work import REPRODUCTIONS, ablation, bullets, paragraph, table

STEPS = (0, 100, 200, 250, 300, 350, 400, 500, 1500)
PROMPT = "19 30 23 11 45 37 54 7 55 61 19 30 23 11 45 37 54 7 55"  # r r[:-1], n = 10: tools/induction_pairs.py --n 10's first


def metrics(work, *overrides):
    """The run's /eval and /head_scores series: ({name: array}, {name: array})."""
    def make():
        with work.h5(f"{work.induction_bump(*overrides)}/metrics.h5") as f:
            return ({x: f[f"eval/{x}"][()] for x in f["eval"]}, {x: f[f"head_scores/{x}"][()] for x in f["head_scores"]})
    return work.once(("metrics", overrides), make)


def phase_steps(work, *overrides):
    """(first /head_scores step with some induction score >= 0.5, first eval step with loss <= half the first eval's):
    the config's induction_step and loss_drop_step, as tests/tasks/test_configs_claims.py reads them."""
    evals, heads = metrics(work, *overrides)
    induction = heads["step"][np.argmax(heads["induction"].reshape(len(heads["step"]), -1).max(axis=1) >= 0.5)]
    drop = evals["step"][np.argmax(evals["loss"] <= evals["loss"][0] / 2)]
    return int(induction), int(drop)


def bump_table(work):
    evals, heads = metrics(work, "train.eval_every=10")
    eval_at = {int(s): i for i, s in enumerate(evals["step"])}
    head_at = {int(s): i for i, s in enumerate(heads["step"])}
    rows = []
    for step in STEPS:
        e, h = eval_at.get(step), head_at[step]
        rows.append([str(step), "" if e is None else f"{evals['loss'][e]:.3f}", "" if e is None else f"{evals['token_acc'][e]:.3f}",
                     f"{heads['repeat_loss'][h]:.3f}", f"{heads['induction'][h][1, 0]:.3f}, {heads['induction'][h][1, 1]:.3f}",
                     f"{heads['previous_token'][h][0, 0]:.3f}"])
    return table(["step", "eval loss", "eval token accuracy", "repeat loss", "induction L1.H0, L1.H1", "previous-token L0.H0"], rows,
                 ["r", "r", "r", "r", "c", "r"])


def bump_prose(work):
    evals, heads = metrics(work, "train.eval_every=10")
    loss = {int(s): x for s, x in zip(evals["step"], evals["loss"])}
    head = {int(s): i for i, s in enumerate(heads["step"])}
    fall, middle = loss[200] - loss[500], loss[250] - loss[400]
    induction = heads["induction"]
    prev = heads["previous_token"]
    fine = phase_steps(work, "train.eval_every=10")
    shipped = phase_steps(work)
    seeds = [phase_steps(work, f"run.seed={seed}") for seed in (1, 2, 3, 4)]
    return bullets([
        f"The loss starts at the no-copying level (log 61 = {math.log(61):.2f} nats: without copying, a repeated token is a"
        f" uniform guess) and falls by {fall:.1f} nats between steps 200 and 500; {middle / fall:.0%} of that fall,"
        f" {middle:.1f} nats, comes between steps 250 and 400.",
        f"In the same 150 steps both layer-1 heads become induction heads ({induction[head[250]][1, 0]:.2f} to"
        f" {induction[head[400]][1, 0]:.2f} and {induction[head[250]][1, 1]:.2f} to {induction[head[400]][1, 1]:.2f}) and head"
        f" L0.H0 becomes a previous-token head ({prev[head[250]][0, 0]:.2f} to {prev[head[400]][0, 0]:.2f}). The first step at"
        f" which some head's induction score reaches 0.5 is {fine[0]} ({shipped[0]} at the config's evaluation every 20 steps);"
        f" the first evaluation whose loss is half the first evaluation's or less is at step {fine[1]} ({shipped[1]} every 20"
        " steps). The config claims both (`# Claim: ... induction_step 320 +- 150; loss_drop_step 300 +- 150`) and"
        " `tests/tasks/test_configs_claims.py` checks them in CI.",
        "Over seeds 1 to 4 (evaluations every 20 steps) the two steps are "
        + ", ".join(f"{a} and {b}" for a, b in seeds[:-1]) + f", {seeds[-1][0]} and {seeds[-1][1]}: the heads form and the loss"
        " falls together in every seed."])


def final_heads(work):
    """`attnlab heads` of the shipped run's final checkpoint: the file's name."""
    return heads(work, f"{work.induction_bump()}/checkpoints/step_0001500.h5", "bump_heads.h5")


def bump_composition(work):
    kqv = composition(work, final_heads(work))
    into = [kqv[("L0.H0", f"L1.H{h}")] for h in (0, 1)]
    one_step = heads(work, f"{work.induction_bump('train.steps=1')}/checkpoints/step_0000001.h5", "heads_step1.h5")
    early = [x for scores in composition(work, one_step).values() for x in scores]
    return paragraph(
        "`attnlab heads` on the final checkpoint also gives the composition scores from the weights: the previous-token head",
        f"L0.H0 composes with the layer-1 heads through their keys (K-composition {into[0][0]:.3f} and {into[1][0]:.3f}, against",
        f"Q-composition {into[0][1]:.3f} and {into[1][1]:.3f} and V-composition {into[0][2]:.3f} and {into[1][2]:.3f}); after one",
        f"training step every pair scores {min(early):.2f}-{max(early):.2f} on all three.")


def bump_ablation(work):
    ablated = ablation(work, induction_model(work))
    base = ablated["baseline"]
    layer1 = next(zero for name, zero, _ in ablated["together"] if name == "self 1.0 + self 1.1")
    prev_there = plot_heads_scores(work)[0][(0, 0)][0]
    with work.h5(final_heads(work)) as f:
        prev_here = f["previous_token"][0][0, 0]
    return paragraph(
        "Which heads do the work is checked by ablation in [induction_heads.md](induction_heads.md) (the same model trained",
        f"for 3000 steps): zero-ablating the previous-token head L0.H0 costs {ablated['zero'][(0, 0)][0]:.1f} nats of loss, and",
        f"the two layer-1 heads together take token accuracy from {base[1]:.2f} to {layer1[1]:.2f}; [circuits.md](circuits.md)",
        "follows the K-composition between them with path patching. (`tools/plot_heads.py --induction` there scores",
        "previous-token attention over the first copy only, where the induction head reads it:",
        f"{prev_there:.3f} for L0.H0. The head scores here average over every position, the repeat included, where L0.H0",
        f"attends elsewhere: {prev_here:.3f}.)")


def bump_differences(work):
    with work.h5(final_heads(work)) as f:
        induction = f["induction"][0]
    checkpoint = f"{work.induction_bump()}/checkpoints/step_0001500.h5"
    work.once("bump inspect", lambda: work.attnlab_run("inspect", checkpoint, "--tokens", PROMPT, "--hooks", "blocks.0.attn.pattern",
                                                       "--out", "bump_inspect.h5"))
    with work.h5("bump_inspect.h5") as f:
        row = f["hooks/blocks.0.attn.pattern"][0, 0, 18]
    _, heads = metrics(work, "train.eval_every=10")
    head = {int(s): i for i, s in enumerate(heads["step"])}
    copying = heads["copying"]

    def spread(step, what):
        low, high = f"{what[head[step]].min():.2f}", f"{what[head[step]].max():.2f}"
        return f"{low} for all four" if low == high else f"{low} to {high}" if low.startswith("-") else f"{low}-{high}"
    return bullets([
        "**A fall, not a bump.** On natural text the phase change shows as a small bump in a loss curve that is falling"
        " anyway (other skills keep improving). Here the loss only counts the repeat, which nothing but copying can predict,"
        " so the whole curve is the phase change: a short plateau near 4.1 nats (the 100 warm-up steps and about 100 more),"
        " then the fall. A task mixing unpredictable and copyable tokens, or a text task, would show the bump on the total"
        " loss; that run is not in this page.",
        f"**A positional shortcut in layer 0.** Head L0.H0 ends with an induction score of {induction[0, 0]:.3f}, although a"
        " layer-0 head cannot know what came after an earlier token. It attends by position: only the longest prefixes"
        " (n = 10) reach input position 18, so there, with learned absolute positions, \"attend to t - 9\" is the induction"
        f" target. Its attention row at position 18 of one r r sequence puts {row[9]:.2f} on position 9 (`attnlab inspect"
        f" runs/induction_bump/checkpoints/step_0001500.h5 --tokens \"{PROMPT}\" --hooks blocks.0.attn.pattern`). The"
        f" induction score counts that attention as induction; the layer-1 heads' {induction[1, 0]:.2f} and"
        f" {induction[1, 1]:.2f} are the real ones. A batch of shorter repeats (`attnlab heads --checkpoints`, a model"
        " trained on longer inputs) or rotary positions would separate the two.",
        "**Copying comes first.** The copying scores (same run, `/head_scores/copying`) rise before the attention does: at"
        f" step 0 they are {spread(0, copying)}, at step 100 {spread(100, copying)}, at step 200 {spread(200, copying)}, while"
        f" the induction scores are still {spread(200, heads['induction'])}. Every head's OV circuit learns to copy the token"
        " it reads within the first 200 steps (attending anywhere in the sequence and copying is already worth something:"
        " the answer is one of the earlier tokens); the prefix matching of the layer-1 heads then forms in the phase change,"
        " and the layer-0 head turns into a previous-token head. The copying half of Olsson et al.'s induction head is in"
        " place before the phase change; its QK half is the phase change. Seed 0 only; the other seeds' copying scores"
        " were not read."])


def reproductions_induction(work):
    _, heads = metrics(work, "train.eval_every=10")
    head = {int(s): i for i, s in enumerate(heads["step"])}
    prev = heads["previous_token"]
    copying = heads["copying"][head[200]]
    induction, drop = phase_steps(work)
    seeds = ", ".join(f"{a}/{b}" for a, b in (phase_steps(work, f"run.seed={s}") for s in (1, 2, 3, 4)))
    ablated = ablation(work, induction_model(work))
    layer1 = next(zero for name, zero, _ in ablated["together"] if name == "self 1.0 + self 1.1")
    return table(REPRODUCTIONS, [
        ["Induction heads form in a phase change, at the steps the loss falls (Olsson et al. 2022)",
         "the heads form at the loss bump, with a previous-token head",
         f"some head's induction score >= 0.5 first at step {induction}; eval loss halved at step {drop} (evaluations every 20"
         f" steps); previous-token head L0.H0 {prev[head[250]][0, 0]:.2f} to {prev[head[400]][0, 0]:.2f} in the same 150 steps"
         f" (seeds 1-4: {seeds}); every head's OV circuit copies (copying score {copying.min():.2f} or more) from step 200, before"
         " the phase change", "1.5 s", "`build/attnlab train configs/induction_bump.toml`",
         "yes: `tools_doc_figures`, and the steps by the config's claim"],
        ["Induction heads found by ablation (Olsson et al. 2022; the seed chapter's Level 4)",
         "a previous-token head in layer 0 and induction heads in layer 1",
         f"zero-ablating L0.H0: {ablated['zero'][(0, 0)][0]:+.1f} nats; L1.H0 and L1.H1 together: token accuracy"
         f" {ablated['baseline'][1]:.2f} to {layer1[1]:.2f}", "11 s", "[induction_heads.md](induction_heads.md)",
         "yes: `tools_doc_figures`"]], ["l"] * 6)


PREPARE = [lambda work: work.induction_bump(*overrides)
           for overrides in ((), ("train.eval_every=10",), ("run.seed=1",), ("run.seed=2",), ("run.seed=3",), ("run.seed=4",))]
FIGURES = {f.__name__: f for f in (bump_table, bump_prose, bump_composition, bump_ablation, bump_differences,
                                   reproductions_induction)}
