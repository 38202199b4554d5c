"""docs/circuits.md's figures: patching, path patching, the lens, the composition
scores, `attnlab circuit` and `decompose` on docs/induction_heads.md's model and
tools/induction_pairs.py's value and key pairs (the page's commands 1 to 6)."""
import math
import re
import sys

import numpy as np

from doc_figures_work import ablation, bullets, number, paragraph, signed, table

PROMPT = "19 30 23 11 45 37 54 7 19 30 23 11 45 37 54"  # the lens section's clean prompt (answer 7)
HEADS = ["L0.H0", "L0.H1", "L1.H0", "L1.H1"]


def model(work):
    return work.induction_model()


def pairs(work, kind):
    return work.induction_pairs(kind, "--kind", kind)


def metric_options(kind):
    return ["--metric", "prob"] if kind == "key" else []


def patch(work, kind, hooks, *options):
    """`attnlab patch` on the pairs KIND: ({hook: grid [layer, head(, position)]}, clean metric, corrupted metric)."""
    def make():
        out = f"patch_{kind}_{hooks.replace(',', '+')}{''.join(options)}.h5"
        work.attnlab_run("patch", model(work), "--pairs", pairs(work, kind), "--hooks", hooks, *metric_options(kind), *options, "--out", out)
        with work.h5(out) as f:
            return ({hook: f[f"grid/{hook}/values"][()] for hook in f["grid"]}, f.attrs["clean_metric"], f.attrs["corrupt_metric"])
    return work.once(("patch", kind, hooks, options), make)


def path_patch(work, kind, sender, receiver):
    """`attnlab path-patch`: the patched metric of the edge SENDER -> RECEIVER."""
    def make():
        printed = work.attnlab_run("path-patch", model(work), "--pairs", pairs(work, kind), *metric_options(kind),
                                   "--sender", sender, "--receiver", receiver)
        return float(re.search(r"patched \w+ (-?[\d.]+)", printed).group(1))
    return work.once(("path-patch", kind, sender, receiver), make)


def circuit(work, kind, method):
    """`attnlab circuit --compare exact`: (edges {(sender, receiver): (exact, score)}, Spearman, recall, prompt copies)."""
    def make():
        out = f"circuit_{kind}_{method}.h5"
        printed = work.attnlab_run("circuit", model(work), "--pairs", pairs(work, kind), *metric_options(kind), "--method", method,
                                   "--compare", "exact", "--recall-k", "5", "--out", out)
        found = re.search(r"Spearman (-?[\d.]+), top-5 recall ([\d.]+)", printed)
        if not found:
            sys.exit(f"doc_figures: no 'Spearman ..., top-5 recall ...' line in circuit's output:\n{printed}")
        copies = int(re.search(r"\((\d+) prompt copies run\)", printed).group(1))
        with work.h5(out) as f:
            e = f["edges"]
            edges = {(s.decode(), r.decode()): (x, y)
                     for s, r, x, y in zip(e["sender"][()], e["receiver"][()], e["exact"][()], e["score"][()])}
        return edges, float(found.group(1)), float(found.group(2)), copies
    return work.once(("circuit", kind, method), make)


def exact_circuit(work):
    """`attnlab circuit` on the key pairs, exact (docs/circuits.md's first circuit command): the prompt copies it ran."""
    def make():
        printed = work.attnlab_run("circuit", model(work), "--pairs", pairs(work, "key"), "--metric", "prob", "--out", "circuit_key_exact.h5")
        return int(re.search(r"\((\d+) prompt copies run\)", printed).group(1))
    return work.once("exact circuit", make)


def prune(work, method):
    """`attnlab circuit --prune 0.01` on the key pairs: (kept edges, the circuit's metric, circuits run, faithfulness [k])."""
    def make():
        out = f"prune_{method}.h5"
        printed = work.attnlab_run("circuit", model(work), "--pairs", pairs(work, "key"), "--metric", "prob", "--method", method,
                                   "--prune", "0.01", "--out", out)
        runs = int(re.search(r"\((\d+) circuits run", printed).group(1))
        with work.h5(out) as f:
            e = f["edges"]
            kept = {(s.decode(), r.decode()) for s, r, k in zip(e["sender"][()], e["receiver"][()], f["circuit/kept"][()]) if k}
            curve = f["faithfulness/metric"][()]
        return kept, float(re.search(r"metric ([\d.]+) \(", printed).group(1)), runs, curve
    return work.once(("prune", method), make)


def lens(work, tokens, name):
    """`attnlab lens` of one prompt: the file's name."""
    return work.once(("lens", name), lambda: (work.attnlab_run("lens", model(work), "--tokens", tokens, "--out", name), name)[1])


def decompose(work, key):
    """`attnlab decompose` of L1.H0's score from the last position to KEY: (score, modifier, [(query side, key side, part)])."""
    def make():
        printed = work.attnlab_run("decompose", model(work), "--tokens", PROMPT, "--head", "1.0", "--query", "14", "--key", str(key),
                                   "--out", f"parts_{key}.h5")
        parts = [(q, k, float(v)) for q, k, v in re.findall(r"^\s+(\S+)\s+x (\S+)\s+([-+][\d.]+)$", printed, re.M)]
        with work.h5(f"parts_{key}.h5") as f:
            return float(f.attrs["score"]), float(f.attrs["modifier"]), parts
    return work.once(("decompose", key), make)


def heads(work, checkpoint, name):
    """`attnlab heads` of CHECKPOINT: the file's name."""
    return work.once(("heads", name), lambda: (work.attnlab_run("heads", checkpoint, "--out", name), name)[1])


def up(x, digits):
    """|x| rounded up to DIGITS significant digits, as text ("at most" figures)."""
    x = abs(x)
    exponent = math.floor(math.log10(x)) - digits + 1
    value = math.ceil(x / 10 ** exponent) * 10 ** exponent
    if exponent < -4:
        mantissa = round(value / 10 ** (exponent + digits - 1), digits - 1)
        return f"{mantissa:g}e{exponent + digits - 1}"
    return f"{value:.{max(0, -exponent)}f}"


def head_name(text):
    """"0.0" -> "L0.H0", "1.0:k" -> "L1.H0:k"; embed and logits as they are."""
    return re.sub(r"^(\d+)\.(\d+)", r"L\1.H\2", text)


def edge_name(sender, receiver):
    return f"{head_name(sender)} -> {head_name(receiver)}"


def circuits_model(work):
    summary = work.summary(model(work))
    _, clean, _ = patch(work, "key", "z,q,k,v")
    return paragraph(f"The model reaches eval token accuracy {summary['eval_token_acc']:.3f} (sequence {summary['eval_seq_acc']:.3f}),",
                     f"as in `docs/induction_heads.md`. On the clean prompts it gives the answer probability {clean:.3f}",
                     "(mean over the 32 pairs).")


def circuits_unpatched(work):
    _, value_clean, value_corrupt = patch(work, "value", "z,q,k,v,resid_pre")
    _, key_clean, key_corrupt = patch(work, "key", "z,q,k,v")
    return paragraph(f"Unpatched, the value pairs' logit difference is {value_clean:.2f} clean and {value_corrupt:.2f} corrupted;",
                     f"the key pairs' probability of the clean answer is {key_clean:.3f} clean and {key_corrupt:.3f} corrupted.")


def grid_rows(grid, hooks, bold):
    rows = []
    for hook in hooks:
        cells = [number(x) for x in grid[hook].reshape(-1)]
        rows.append([hook] + [f"**{c}**" if bold(hook, i) else c for i, c in enumerate(cells)])
    return rows


def circuits_value_patch(work):
    grid, _, _ = patch(work, "value", "z,q,k,v,resid_pre")
    rows = grid_rows(grid, ["z", "v"], lambda hook, i: i >= 2)
    qk = max(abs(grid["q"]).max(), abs(grid["k"]).max())
    rows.append(["q, k", f"within {up(qk, 2)} of 0", "", "", ""])
    return table(["hook"] + HEADS, rows)


def circuits_value_prose(work):
    grid, _, _ = patch(work, "value", "z,q,k,v,resid_pre")
    v = patch(work, "value", "v", "--per-position")[0]["v"]
    others = v[1].copy()
    others[:, 7] = 0
    noised = patch(work, "value", "z", "--noising")[0]["z"]
    resid = grid["resid_pre"]
    exactly = "exactly" if (resid == 1).all() else f"(to {np.abs(resid - 1).max():.1e})"
    ablated = ablation(work, model(work))
    return paragraph(
        f"Patching the whole residual stream (`resid_pre` of either layer) gives {number(resid.min())} {exactly}, as it must.",
        "The new token reaches the answer through the induction heads' **values** (per position: `v` of L1.H0 at position 7,",
        f"where r[-1] sits in the first copy, gives {number(v[1, 0, 7])}, of L1.H1 {number(v[1, 1, 7])}, and at every other position",
        f"at most {up(np.abs(others).max(), 1)}): each of the two heads carries about half, which is why ablating one of them alone",
        f"costs little (`docs/induction_heads.md`: {signed(ablated['zero'][(1, 0)][0])} and {signed(ablated['zero'][(1, 1)][0])} nats)",
        "and both together everything. Noising (the corrupted z into the clean run) agrees:",
        f"L1.H0 {number(noised[1, 0])} and L1.H1 {number(noised[1, 1])} of the clean logit difference remain,",
        f"L0.H0 {number(noised[0, 0])}, L0.H1 {number(noised[0, 1])}.")


def circuits_key_patch(work):
    grid, _, _ = patch(work, "key", "z,q,k,v")
    large = {"z": (0, 2, 3), "k": (2, 3), "v": (0,), "q": ()}
    return table(["hook"] + HEADS, grid_rows(grid, ["z", "k", "v", "q"], lambda hook, i: i in large[hook]))


def circuits_key_positions(work):
    grid = patch(work, "key", "z,k", "--per-position")[0]
    z, k = grid["z"].copy(), grid["k"].copy()
    named = (z[0, 0, 7], k[1, 0, 7], k[1, 1, 7], z[1, 0, 14], z[1, 1, 14])
    z[0, 0, 7] = k[1, :, 7] = z[1, :, 14] = 0
    return paragraph(
        f"Per position the effect sits where the circuit says it should: L0.H0's z at **position 7** alone gives {number(named[0])}",
        "(the previous-token head writes \"the token before me was r[-2]\" into the position of r[-1]), the induction heads' k at",
        f"position 7 gives {number(named[1])} and {number(named[2])}, and their z at the last position (their own output)",
        f"{number(named[3])} and {number(named[4])}; every other cell of the two grids is at most {up(max(z.max(), k.max()), 3)}.",
        "(L0.H0's v matters because its value at position 6 is what it moves to position 7.)")


def circuits_path_patch(work):
    rows = []
    for sender, receiver in (("0.0", "1.0"), ("0.0", "1.1"), ("0.1", "1.0")):
        cells = [number(path_patch(work, "key", sender, f"{receiver}:{x}")) for x in "qkv"]
        cells[1] = f"**{cells[1]}**" if sender == "0.0" else cells[1]
        rows.append([f"{head_name(sender)} -> {head_name(receiver)}"] + cells)
    rows.append(["all upstream -> L1.H0", "", number(path_patch(work, "key", "all", "1.0:k")), ""])
    return table(["sender -> receiver", "q", "k", "v"], rows)


def circuits_path_prose(work):
    edge, whole = path_patch(work, "key", "0.0", "1.0:k"), path_patch(work, "key", "all", "1.0:k")
    into = {x: path_patch(work, "value", "embed", f"1.0:{x}") for x in "vkq"}
    return paragraph(
        "The edge from the previous-token head into the induction heads' **keys** carries the whole key effect",
        f"({number(edge)} of {number(whole)} from all upstream components together); the same head reaching their queries",
        "or values does nothing. On the value pairs the new token reaches the induction head's values straight from the",
        f"embeddings (`--sender embed --receiver 1.0:v`: {number(into['v'])}; into k {number(into['k'])}, into q {number(into['q'])}):",
        "value copying is a direct path, K-composition goes through L0.H0.")


def lens_last(work, name):
    """The lens file NAME at its last position: (log p(target) per stream, top token per stream, DLA {head: part}, target logit)."""
    with work.h5(name) as f:
        logp = f["lens/target_logprob"][:, 0, -1]
        top = f["lens/top_token"][:, 0, -1]
        dla = f["dla/head"][:, :, 0, -1]
        target = float(f["dla/target_logit"][0, -1])
    return logp, top, {f"L{l}.H{h}": float(dla[l, h]) for l in range(dla.shape[0]) for h in range(dla.shape[1])}, target


def circuits_lens(work):
    logp, _, dla, target = lens_last(work, lens(work, PROMPT, "lens.h5"))
    order = sorted(dla, key=lambda h: -dla[h])
    return paragraph(
        "The lens reads the residual stream after the embeddings and after each block through the final norm and the head.",
        f"On the clean prompt above (answer 7), log p(answer) at the last position is {logp[0]:.2f} after the embeddings,",
        f"{logp[1]:.2f} after layer 0 and {logp[2]:.3f} after layer 1: the answer appears only in layer 1.",
        f"Direct logit attribution of the answer's logit ({target:.2f}): " + ", ".join(f"{h} {signed(dla[h])}" for h in order) + ".",
        "Over 16 random clean prompts of each prefix length n, the fraction whose answer is the lens's top token at the last position:")


def lens_prefixes(work):
    """Command 6: per prefix length n, (fraction of answers on top, mean log p(answer)) after the embeddings and each layer."""
    def make():
        found = {}
        for n in (4, 6, 8, 10):
            name = work.induction_pairs(f"lens_{n}", "--n", str(n), "--count", "16", "--seed", "1")
            with work.h5(name) as f:
                prompts, answers = f["clean"][()], f["clean_answers"][:, 0]
            files = [f"lens_{n}_{i}.h5" for i in range(len(prompts))]
            work.attnlab_many([["lens", model(work), "--tokens", " ".join(map(str, p)), "--out", out] for p, out in zip(prompts, files)])
            last = [lens_last(work, out) for out in files]
            on_top = np.mean([top == answer for (_, top, _, _), answer in zip(last, answers)], axis=0)
            found[n] = (on_top, np.mean([logp for logp, _, _, _ in last], axis=0))
        return found
    return work.once("lens prefixes", make)


def circuits_lens_prefixes(work):
    found = lens_prefixes(work)
    rows = []
    for n, (on_top, _) in found.items():
        cells = [f"{x:.2f}" for x in on_top]
        cells[1] = f"**{cells[1]}**" if n == 10 else cells[1]
        rows.append([str(n)] + cells)
    text = table(["n", "after embed", "after layer 0", "after layer 1"], rows, ["r", "r", "r", "r"])
    logp = np.array([m for _, m in found.values()])
    return text + "\n" + paragraph(f"(Mean log p(answer) after layer 0: {', '.join(f'{x:.2f}' for x in logp[:, 1])};",
                                   f"after layer 1: {', '.join(f'{x:.3f}' for x in logp[:, 2])}.)")


def composition(work, name):
    """{(sender, receiver): (K, Q, V)} of an `attnlab heads` file, layer-0 heads into layer-1 heads."""
    with work.h5(name) as f:
        kqv = [f[f"composition/{x}"][0] for x in "kqv"]
        heads_per_layer = int(f.attrs["heads"])
    found = {}
    for s in range(heads_per_layer):
        for r in range(heads_per_layer, 2 * heads_per_layer):
            found[(f"L0.H{s}", f"L1.H{r - heads_per_layer}")] = tuple(float(x[s, r]) for x in kqv)
    return found


def circuits_composition(work):
    pairs_found = composition(work, heads(work, model(work), "heads.h5"))
    rows = [[f"{s} -> {r}"] + [number(x) for x in kqv] for (s, r), kqv in sorted(pairs_found.items(), key=lambda x: -x[1][0])]
    return table(["sender -> receiver", "K-composition", "Q-composition", "V-composition"], rows, ["c", "r", "r", "r"])


def circuits_composition_prose(work):
    one_step = work.induction_bump("train.steps=1")
    early = composition(work, heads(work, f"{one_step}/checkpoints/step_0000001.h5", "heads_step1.h5"))
    values = [x for kqv in early.values() for x in kqv]
    with work.h5(heads(work, model(work), "heads.h5")) as f:
        prev, induction, copying = (f[x][0] for x in ("previous_token", "induction", "copying"))
    return paragraph(
        "The previous-token head L0.H0 composes with both induction heads through their keys, at about twice the level of",
        "anything else, and hardly through their queries or values: the K-composition path patching measured above. For scale,",
        f"the same model after one training step scores {number(min(values), 2)}-{number(max(values), 2)} on every pair",
        "and kind (configs/induction_bump.toml with `train.steps=1`). The same command gives the heads' scores (previous-token",
        f"{number(prev[0, 0])} for L0.H0; induction {both(induction[1, 0], induction[1, 1])} layer-1 heads;",
        f"copying {number(copying.min(), 2)}-{number(copying.max(), 2)} for all four) and, with `--checkpoints all`, all of it over training.")


def both(a, b):
    """"0.962 for both" or "0.961 and 0.962 for the two" (for "... layer-1 heads")."""
    return f"{number(a)} for both" if number(a) == number(b) else f"{number(a)} and {number(b)} for the two"


def circuits_graph(work):
    copies = exact_circuit(work)
    edges = circuit(work, "key", "atp")[0]
    return paragraph(
        "`attnlab circuit` patches every edge of the residual graph, one at a time: senders are the embeddings, each head's",
        "output and (with feed-forwards) each MLP's; receivers each head's query, key and value input, each MLP's input and the",
        "logits. Patching an edge gives its receiver its corrupted input plus the sender's clean-minus-corrupted change,",
        "everything else as it was, and reruns what is downstream; an edge's effect is the metric's change.",
        f"This model has {len(edges)} edges; one run scores all of them ({copies} copies of the 32 prompts, run side by side).",
        "The graph, on the key pairs (probability of the clean answer), the eight largest edges, with the estimates of the",
        "three gradient methods:")


def circuits_edges(work):
    exact_run = circuit(work, "key", "atp")[0]
    ranked = sorted(exact_run, key=lambda edge: -abs(exact_run[edge][0]))[:8]
    methods = ("atp", "eap", "eap-ig")
    scores = {m: circuit(work, "key", m)[0] for m in methods}
    lines = ["| edge | exact | atp | eap | eap-ig |", "| --- | ---: | ---: | ---: | ---: |"]
    for edge in ranked:
        exact = exact_run[edge][0]
        shown = f"**{exact:.3f}**" if abs(exact) >= 0.1 else f"{exact:.3f}"
        lines.append(f"| {edge_name(*edge)} | {shown} | " + " | ".join(f"{scores[m][edge][1]:.3f}" for m in methods) + " |")
    return "\n".join(lines) + "\n"


def circuits_edges_prose(work):
    key = {e: x for e, (x, _) in circuit(work, "key", "atp")[0].items()}
    value = {e: x for e, (x, _) in circuit(work, "value", "atp")[0].items()}
    big = sorted(key, key=lambda e: -abs(key[e]))[:5]
    rest = max(abs(key[e]) for e in key if e not in big)
    queries = max(abs(x) for (s, r), x in key.items() if r.startswith("1.") and r.endswith(":q"))
    _, _, corrupt = patch(work, "key", "z,q,k,v")
    k_edges = [path_patch(work, "key", "0.0", "1.0:k"), path_patch(work, "key", "0.0", "1.1:k")]
    value_k = max(abs(x) for (s, r), x in value.items() if r.endswith(":k"))
    return paragraph(
        f"Five edges carry the circuit and the rest are at most {number(rest)}: the token enters the previous-token head's values",
        "(embed -> L0.H0:v), the previous-token head feeds both induction heads' keys (the K-composition; path patching's",
        f"{number(k_edges[0])} and {number(k_edges[1])} above are these effects plus the corrupted {number(corrupt)}), and the induction heads",
        f"write the answer into the logits. Nothing reaches the induction heads' queries (largest |effect| {number(queries)}).",
        "On the value pairs (normalised logit difference) the circuit is the direct one:",
        f"embed -> L1.H0:v {number(value[('embed', '1.0:v')])} and embed -> L1.H1:v {number(value[('embed', '1.1:v')])},",
        f"L1.H0 -> logits {number(value[('1.0', 'logits')])} and L1.H1 -> logits {number(value[('1.1', 'logits')])},",
        f"and no K edge (largest |effect| {number(value_k)}).")


def circuits_ranks(work):
    methods = ("atp", "atp-star", "eap", "eap-ig")
    lines = ["| pairs (metric) | atp | atp-star (AtP*, vs \\|exact\\|) | eap | eap-ig (5 steps) |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for kind, label in (("key", "key (prob)"), ("value", "value (norm_logit_diff)")):
        cells = []
        for m in methods:
            _, rho, recall, _ = circuit(work, kind, m)
            cells.append(f"{rho:.3f}, {round(recall * 5)}/5")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def rank_of(edges, edge):
    """1 + how many edges score larger in |score| than EDGE."""
    return 1 + sum(abs(y) > abs(edges[edge][1]) for _, y in edges.values())


def circuits_atp_star(work):
    edges = circuit(work, "key", "atp-star")[0]
    first = ("embed", "0.0:v")
    rank = rank_of(edges, first)
    return paragraph(
        "AtP* (Kramar et al. 2024: atp with the QK fix, which takes the exact change of the attention pattern for an edge",
        "into a query or key, and GradDrop, the mean over blocks of |atp with the gradient cut at that block's outputs|)",
        "estimates the size of an effect, not its sign, so it is ranked against |exact|. On a two-layer model GradDrop hurts",
        "the edges into layer 0: cutting block 1 removes the only path by which L0.H0's change matters, and cutting block 0",
        f"removes L0.H0 itself, so embed -> L0.H0:v, the largest edge on the key pairs ({number(edges[first][0])}), scores",
        f"{number(edges[first][1])} and {'drops out of the top five' if rank > 5 else 'stays in the top five'} (rank {rank}).")


def circuits_saturation(work):
    key = circuit(work, "key", "atp")[0]
    value_ig, value_eap = circuit(work, "value", "eap-ig")[0], circuit(work, "value", "eap")[0]
    _, _, corrupt = patch(work, "key", "z,q,k,v")
    logits = ("1.1", "logits")
    pairs_shown = [("1.0", "logits"), ("embed", "1.0:v")]
    return paragraph(
        "All three find the circuit's five edges; none gets its size right where the metric saturates. The probability of",
        f"the answer is flat near both ends, so a gradient taken at the corrupted run ({number(corrupt)}) sees",
        f"{key[logits][1] / key[logits][0]:.0%} of the logits edges' real effect ({number(key[logits][1])} for {number(key[logits][0])}),",
        "and integrating the gradient along the line between the embeddings (eap-ig) does not fix it here: the change",
        "happens deep in the network, not along the input line. On the value pairs, whose metric is linear in the logits, eap-ig is close for the four big edges",
        "(" + ", ".join(f"{number(value_ig[e][1])} for {number(value_ig[e][0])}" for e in pairs_shown) + ")",
        "and eap halves them (" + ", ".join(f"{number(value_eap[e][1])}" for e in pairs_shown) + "; LayerNorm before the head",
        "squashes a large change). Attribution at the receiver (atp: the receiver's exact new q, k or v times the gradient",
        "there) ranks best in both: it only linearises what comes after the receiver. The ranks of the many near-zero edges",
        "are what pulls the gradient methods' rho down.")


def circuits_prune(work):
    kept, metric, runs, curve = prune(work, "exact")
    exact = circuit(work, "key", "atp")[0]
    five = set(sorted(exact, key=lambda e: -abs(exact[e][0]))[:5])
    same = [m for m in ("atp", "eap", "eap-ig", "atp-star") if prune(work, m)[0] == kept]
    star = prune(work, "atp-star")[3]
    reach = next(k for k, x in enumerate(star) if x >= metric - 5e-4)
    flat = star[5:reach]
    jump = next(k for k, x in enumerate(curve) if x > curve[0] + 0.01)  # the first k whose circuit does better than none
    return paragraph(
        "**The circuit, found.** `--prune 0.01` starts from all 29 edges and removes, smallest |score| first, every edge whose",
        "removal costs the circuit less than 0.01 of the metric; a circuit runs the clean prompts with each edge outside it",
        "carrying the corrupted prompts' sender output (ACDC's convention). From the exact scores it keeps",
        f"{'exactly the five edges above' if kept == five else f'{len(kept)} edges'}, whose circuit gives the clean answer probability",
        f"{number(metric)} (the whole model {number(curve[-1])}, every edge removed {number(curve[0])}), in {runs} circuit runs.",
        f"The faithfulness curve (the k largest |exact| edges): {number(curve[0])} for k <= {jump - 1}, {number(curve[jump])} at k = {jump},",
        f"{number(curve[jump + 1])} at k = {jump + 1}, and {number(min(curve[jump + 2:]))} to {number(max(curve[jump + 2:]))} for every",
        "larger k.",
        f"Pruning from the {', '.join(same[:-1])} or {same[-1]} scores keeps the same five edges: the greedy rule checks each",
        "removal against the circuit's metric, so a ranking only sets the order edges are tried in. The faithfulness curve shows",
        f"the ranking itself: by AtP*'s order the circuit needs its {reach} largest edges to reach {number(star[reach])}",
        f"({number(min(flat))} to {number(max(flat))} with 5 to {reach - 1}), as GradDrop ranks embed -> L0.H0:v",
        f"{ordinal(rank_of(circuit(work, 'key', 'atp-star')[0], ('embed', '0.0:v')))}.")


def ordinal(n):
    return {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth", 7: "seventh", 8: "eighth", 9: "ninth",
            10: "tenth"}.get(n, f"{n}th")


def circuits_decompose(work):
    score, modifier, parts = decompose(work, 7)
    other, _, _ = decompose(work, 3)
    return paragraph(
        "`attnlab decompose` splits one attention score into a part per pair of upstream components, query side times key",
        "side (the stream entering the head's block as a sum of the token embedding, the positions, each earlier head's output",
        "and the biases; the norm held at its statistics on the whole stream, as the lens's attribution does). On the clean",
        "prompt of the lens section, L1.H0 at the last position (token 54, whose earlier occurrence is at position 6) scores",
        f"{score:.2f} for key 7, the token after that occurrence, and {other:.2f} for key 3. The largest parts of {score:.2f}",
        f"(they add up to it exactly; modifier {number(modifier, 4)}):") + "\n" + table(
        ["query side", "key side", "part"],
        [[side(q), side(k), f"**{v:+.2f}**" if i == 0 else f"{v:+.2f}"] for i, (q, k, v) in enumerate(parts[:5])], ["l", "l", "r"])


def side(name):
    return head_name(name) if re.match(r"\d+\.\d+$", name) else name


def circuits_decompose_prose(work):
    score, _, parts = decompose(work, 7)
    other, _, other_parts = decompose(work, 3)
    top = parts[0][2]
    with work.h5("parts_3.h5") as f:
        names = [x.decode() for x in f["components"][()]]
        grid = f["parts"][()]  # [query side, key side]
    at = names.index("pos_emb")
    positional = grid[at, :].sum() + grid[:, at].sum() - grid[at, at]
    return paragraph(
        f"{top:.2f} of the {score:.2f} ({top / score:.0%}) is the current token's embedding on the query side meeting what",
        "the previous-token head wrote at the key (the token before the key, 54): K-composition, read off a single score.",
        f"For key 3 no part is larger than {max(abs(v) for _, _, v in other_parts):.2f} in size; the parts with the positions",
        f"on the query or the key side sum to {positional:.2f}, the others to {other - positional:.2f}.")


def circuits_disagreements(work):
    found = lens_prefixes(work)
    on_top, logp = found[10]
    grid, _, _ = patch(work, "value", "z,q,k,v,resid_pre")
    key_grid, _, corrupt = patch(work, "key", "z,q,k,v")
    _, _, dla, _ = lens_last(work, lens(work, PROMPT, "lens.h5"))
    ablated = ablation(work, model(work))
    idle = max(ablated["zero"][(0, 1)][0], ablated["mean"][(0, 1)][0])
    return bullets([
        "**A positional shortcut at the longest prefix.** For n = 10, the longest prefix the task draws, the answer is already"
        f" the top token after layer 0 in {round(on_top[1] * 16)} of 16 prompts ({on_top[1]:.0%}), and its mean log-probability"
        f" there is {logp[1]:.1f} against {found[4][1][1]:.1f} for n = 4. At the last position of the longest possible input the"
        " offset back to the answer is fixed (9), and learned positions let layer 0 attend there without any induction: the"
        " lens shows a second, position-based mechanism that the corruption experiments above (n = 8) never exercise.",
        "**Two induction heads share the work** rather than one doing it: patching either one's z restores about half"
        f" ({grid['z'][1, 0]:.2f} and {grid['z'][1, 1]:.2f} on value pairs), which is the redundancy the single-head ablations hid.",
        f"**L0.H1 is not idle.** Ablation ranked it last ({signed(idle, 3)} nats), but on the value pairs patching its z restores"
        f" {number(grid['z'][0, 1])} and direct attribution gives it {signed(dla['L0.H1'])} of the answer's logit: a small direct"
        f" contribution, not a role in the circuit (on key pairs it changes nothing: {number(key_grid['z'][0, 1])} against"
        f" {number(corrupt)} corrupted).",
        f"**L0.H0 writes against the answer directly** ({signed(dla['L0.H0'])} in the attribution): its output is there to be"
        " read by layer 1's keys, not to predict."])


# The runs the figures read, made first (two at a time) by doc_figures.py.
PREPARE = [model, lambda work: work.induction_bump("train.steps=1")]
FIGURES = {f.__name__: f for f in (
    circuits_model, circuits_unpatched, circuits_value_patch, circuits_value_prose, circuits_key_patch, circuits_key_positions,
    circuits_path_patch, circuits_path_prose, circuits_lens, circuits_lens_prefixes, circuits_composition,
    circuits_composition_prose, circuits_graph, circuits_edges, circuits_edges_prose, circuits_ranks, circuits_atp_star,
    circuits_saturation, circuits_prune, circuits_decompose, circuits_decompose_prose, circuits_disagreements)}
