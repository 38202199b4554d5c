"""docs/induction_heads.md's figures: the model of its command 1 (and seeds 1 and
2, and 4 heads of width 64), `attnlab eval`, `audit` and `ablate` of it, and
tools/plot_heads.py's previous-token and induction scores of the ablation's maps."""
import re

from doc_figures_work import ablation, bullets, number, paragraph, table
from plot_heads import induction_scores, read_maps

ROWS = [((0, 0), "0.0"), ((0, 1), "0.1"), ((1, 0), "1.0"), ((1, 1), "1.1")]


def model(work, *overrides):
    """The page's model (seed 0), or the same command with OVERRIDES (run.seed=1, model.width=64 model.heads=4)."""
    name = "induction_heads" + "".join("_" + o.split("=")[1] for o in overrides)
    return work.induction_model(*overrides, name=name)


def scores(work, *overrides):
    """tools/plot_heads.py --induction on the ablation's maps: {(layer, head): (previous-token score, induction score)},
    the batch's tokens and lengths."""
    def make():
        kinds, axes = read_maps(work.path(ablation(work, model(work, *overrides))["maps"]))
        found = {}
        for layer, weights in enumerate(kinds["self"]):
            prev, induction = induction_scores(weights, axes["self"][2])
            found.update({(layer, h): (float(prev[h]), float(induction[h])) for h in range(weights.shape[1])})
        return found, axes["self"][0], axes["self"][2]
    return work.once(("plot_heads scores", overrides), make)


def evaluation(work):
    """`attnlab eval` of the checkpoint: (loss, token acc, seq acc, sequences, counted tokens)."""
    def make():
        printed = work.attnlab_run("eval", model(work))
        found = re.search(r"loss (\S+)\s+token accuracy (\S+)\s+sequence accuracy (\S+)\s+\((\d+) sequences, (\d+) counted", printed)
        return tuple(float(x) for x in found.groups()[:3]) + tuple(int(x) for x in found.groups()[3:])
    return work.once("eval", make)


def induction_baseline(work):
    summary = work.summary(model(work))
    loss, token, seq, sequences, counted = evaluation(work)
    return paragraph(
        f"Training ends at eval token accuracy {summary['eval_token_acc']:.3f}, sequence accuracy {summary['eval_seq_acc']:.3f}",
        "(the run's held-out batches); on the fresh data stream `attnlab eval` and `ablate` use, the baseline is",
        f"loss {loss:.4f}, token accuracy {token:.4f}, sequence accuracy {seq:.4f} ({sequences} sequences, {counted:,} predicted tokens).")


def induction_audit(work):
    printed = work.once("audit", lambda: work.attnlab_run("audit", model(work)))

    def find(pattern):
        return re.search(pattern, printed).group(1)
    passed = find(r"audit: (\d+) passed, 0 failed")
    cache = find(r"KV cache vs full recomputation: max \|cached - full\| of logits = (\S+)")
    reference = find(r"attention op vs dense reference \(model's q, k, v\): max \|op - reference\| of per-head outputs = (\S+)")
    per_token = find(r"KV cache per token\s+(\d+) B")
    longest, tokens = re.search(r"KV cache, longest\s+(\d+) B for one sequence of (\d+) tokens", printed).groups()
    elements = find(r"score matrix\s+self: H \* Tq \* Tk = [\d * ]+ = (\d+) elements")
    return paragraph(
        f"The audit passes all {passed} live tests (causal perturbation of the whole model and of each layer: 0 change before",
        f"the cut; padding invariance; KV cache against full recomputation: {short(cache)}; the attention op against the",
        f"dense triple-loop reference on the model's own q, k, v: {short(reference)}; all-masked rows; masked mass exactly 0).",
        f"Its cost lines: KV cache {per_token} B per token (2 x 2 layers x 2 K/V heads x 16 x 4 bytes), {int(longest):,} B at",
        f"the longest input ({tokens} tokens); {elements} score elements per layer and sequence at that length.")


def short(text):
    """The audit's "2.92e-06" as "2.9e-6"; "0" as it is."""
    value = float(text)
    if value == 0:
        return "0"
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def ranked(found):
    """The heads as `ablate` ranks them: by the larger loss increase of the two ablations."""
    return sorted(ROWS, key=lambda row: -max(found["zero"][row[0]][0], found["mean"][row[0]][0]))


def induction_ablation(work):
    found = ablation(work, model(work))
    rows = []
    for rank, (head, name) in enumerate(ranked(found), 1):
        shown = f"**{name}**" if rank <= 3 else name
        rows.append([str(rank), shown] + [f"{x:+.4f}" for way in ("zero", "mean") for x in found[way][head]])
    text = table(["rank", "layer.head", "zero: Δloss", "Δtoken acc", "Δseq acc", "mean: Δloss", "Δtoken acc", "Δseq acc"], rows,
                 ["r", "c", "r", "r", "r", "r", "r", "r"])
    labels = {"self 1.0 + self 1.1": "1.0 + 1.1 (all of layer 1)", "self 0.0 + self 0.1": "0.0 + 0.1 (all of layer 0)"}
    together = [[labels[name]] + [f"{x:.4f}" for x in zero + mean] for name, zero, mean in found["together"]]
    return text + "\nHeads ablated together (`--together`):\n\n" + table(
        ["heads", "zero: loss", "token acc", "seq acc", "mean: loss", "token acc", "seq acc"], together)


def induction_ablation_prose(work):
    found = ablation(work, model(work))
    base = found["baseline"]
    zero, mean = found["zero"], found["mean"]
    together = {name: (z, m) for name, z, m in found["together"]}
    layer1, layer0 = together["self 1.0 + self 1.1"], together["self 0.0 + self 0.1"]
    costs = [zero[(1, h)][0] for h in (0, 1)]
    accuracy = [min(zero[(1, h)][1], mean[(1, h)][1]) for h in (0, 1)] + [max(zero[(1, h)][1], mean[(1, h)][1]) for h in (0, 1)]
    agree = max(abs(zero[h][0] - mean[h][0]) for h, _ in ROWS)
    return bullets([
        f"**Head 0.0 alone carries layer 0.** Removing it costs {zero[(0, 0)][0]:.1f} nats and drops token accuracy from"
        f" {base[1]:.2f} to {base[1] + zero[(0, 0)][1]:.2f}, about what removing all of layer 0 costs ({layer0[0][1]:.2f})."
        f" Head 0.1 is nearly idle ({max(zero[(0, 1)][0], mean[(0, 1)][0]):+.3f}).",
        "**Layer 1's two heads are an induction circuit in duplicate.** Each alone costs only"
        f" {min(costs):.2f}-{max(costs):.2f} nats (accuracy {max(accuracy):+.2f} to {min(accuracy):+.2f}): the other one still does"
        f" the job. Together they take accuracy to {layer1[0][1]:.2f}, below what the model gets without layer 0. A single-head"
        " ablation ranks them just below the previous-token head, but only the joint ablation shows that the model cannot"
        " predict the repeat without them.",
        f"For single heads, zero and mean ablation agree here (within {agree:.2f} nats), so the effect is the information"
        " these heads route, not a constant offset they add."])


def induction_scores_table(work):
    found, _, _ = scores(work)
    rows = []
    for head, name in ROWS:
        prev, induction = (number(x) for x in found[head])
        role = "prev" if head[0] == 0 and found[head][0] > 0.5 else "induction" if found[head][1] > 0.5 else ""
        rows.append([f"**{name}**" if role else name, f"**{prev}**" if role == "prev" else prev,
                     f"**{induction}**" if role == "induction" else induction])
    return table(["layer.head", "previous-token score", "induction score"], rows, ["c", "r", "r"])


def induction_maps_item(work):
    _, tokens, lengths = scores(work)
    item = int(lengths.argmax())
    n = (int(lengths[item]) + 1) // 2
    return paragraph(
        "The ablation and the maps name the same heads. Rows are queries, columns keys, both labelled with token ids;",
        f"sequence {item} of the batch, *n* = {n} ({' '.join(str(t) for t in tokens[item, :n])}, then again); the outlined cells",
        "are the positions each head should attend to if it is what its score says.")


def roles(work, *overrides):
    """(previous-token heads [(name, score, Δloss alone)], induction heads [(name, score, Δloss alone)], layer 1 together: token acc)."""
    found, _, _ = scores(work, *overrides)
    ablated = ablation(work, model(work, *overrides))
    effect = {head: max(ablated["zero"][head][0], ablated["mean"][head][0]) for head in found}
    prev = sorted(((f"{l}.{h}", s[0], effect[(l, h)]) for (l, h), s in found.items() if l == 0 and s[0] > 0.5), key=lambda x: -x[2])
    induction = [(f"{l}.{h}", s[1], effect[(l, h)]) for (l, h), s in sorted(found.items()) if l == 1 and s[1] > 0.5]
    layer1 = next(zero for name, zero, _ in ablated["together"] if name == "self 1.0 + self 1.1")
    return prev, induction, layer1[1]


def induction_seeds(work):
    rows = []
    for seed in (0, 1, 2):
        prev, induction, layer1 = roles(work, *([f"run.seed={seed}"] if seed else []))
        prev_text = ", and ".join(f"{name} ({score:.3f}; {effect:+.2f})" for name, score, effect in prev)
        names = ", ".join(name for name, _, _ in induction)
        rows.append([str(seed), prev_text, f"{names} ({', '.join(f'{s:.3f}' for _, s, _ in induction)};"
                     f" {', '.join(f'{e:+.2f}' for _, _, e in induction)})", f"{layer1:.3f}"])
    return table(["seed", "previous-token head (score; Δloss alone)", "induction heads (scores; Δloss alone)",
                  "layer 1 together: token acc"], rows, ["c", "l", "l", "r"])


def induction_wide(work):
    wide = ("model.width=64", "model.heads=4")
    prev, induction, _ = roles(work, *wide)
    layer1 = [s for _, s, _ in induction]
    costs = [e for _, _, e in induction]
    found, _, _ = scores(work, *wide)
    ablated = ablation(work, model(work, *wide))
    top = max(max(ablated["zero"][h][0], ablated["mean"][h][0]) for h in found)
    heads_in_layer1 = sum(1 for layer, _ in found if layer == 1)
    name, score, effect = prev[0]
    every = "all four" if len(induction) == heads_in_layer1 else f"{len(induction)} of the {heads_in_layer1}"
    seed2_prev, _, _ = roles(work, "run.seed=2")
    return bullets([
        "**Redundancy hides heads from single-head ablation.** Both layer-1 heads are induction heads; each looks"
        " dispensable alone. With 4 heads of width 64 (`model.width=64 model.heads=4`, otherwise the same)"
        f" {every} layer-1 heads have induction scores of {min(layer1):.2f}-{max(layer1):.2f} and each alone costs only"
        f" {min(costs):.2f}-{max(costs):.2f} nats, while the previous-token head there ({name}, score {score:.2f})"
        f" {'still tops the table' if effect == top else 'costs'} at {effect:+.2f}. Ablate groups (`--together`) before"
        " calling a head unimportant.",
        f"**A head number is not a role.** Seed 2 put the previous-token head at {seed2_prev[0][0]}.",
        "**An attention map is not an explanation by itself.** Head 0.0 is a clean previous-token head in the first copy"
        " but attends diffusely in the second; the map cannot say whether that part matters, an intervention can."])


PREPARE = [lambda work: model(work, "run.seed=1"), lambda work: model(work, "run.seed=2"),
           lambda work: model(work, "model.width=64", "model.heads=4")]
FIGURES = {f.__name__: f for f in (
    induction_baseline, induction_audit, induction_ablation, induction_ablation_prose, induction_scores_table,
    induction_maps_item, induction_seeds, induction_wide)}
