#!/usr/bin/python3
"""`attnlab report` as a process, without a browser: each kind of report is one
self-contained HTML file (plotly.js inside, no external reference of any kind,
the charts the kind promises), written through a temporary name; bad input ends
with one line `attnlab report: ...`, exit status 2, and nothing written.

    /usr/bin/python3 tests/report/test_report.py ATTNLAB_BINARY REPO_ROOT
"""
import json
import os
import re
import shutil
import stat
import xml.etree.ElementTree as ET

import h5py
import numpy as np

import report_common as rc
from report_common import Fixtures

# Any reference a browser would fetch: src/href attributes, <link>, CSS @import and url().
EXTERNAL = re.compile(r"\b(?:src|href)\s*=|<link\b|<iframe\b|@import|url\(", re.I)
PRUNED = ("--prune", "0.01", "--compare", "exact", "--method", "eap")  # the circuit file with every part
SVG = "{http://www.w3.org/2000/svg}"


def read_circuit(path):
    """The edge table of a circuit file, as the page should show it."""
    with h5py.File(path, "r") as f:
        edges = {k: f["edges"][k][()] for k in ("sender", "receiver", "score")}
        edges["sender"] = [s.decode() for s in edges["sender"]]
        edges["receiver"] = [r.decode() for r in edges["receiver"]]
        edges["exact"] = f["edges/exact"][()] if "exact" in f["edges"] else None
        edges["kept"] = f["circuit/kept"][()].astype(bool) if "circuit" in f else None
        edges["faithfulness"] = {k: f["faithfulness"][k][()] for k in ("edges_kept", "metric")} if "faithfulness" in f else None
    return edges


def graph_of(page, graph_id):
    """The SVG graph `graph_id` of a circuit page: (edges as {(sender, receiver): (title, colour, width)}, node labels)."""
    start = page.index(f'<svg id="{graph_id}"')
    svg = ET.fromstring(page[start:page.index("</svg>", start) + 6])
    edges = {}
    for g in svg.iter(SVG + "g"):
        if g.get("class") == "edge":
            lines = [p for p in g.iter(SVG + "path") if p.get("class") == "line"]
            assert len(lines) == 1, ET.tostring(g)
            key = (g.get("data-sender"), g.get("data-receiver"))
            assert key not in edges, key
            edges[key] = (g.find(SVG + "title").text, lines[0].get("stroke"), float(lines[0].get("stroke-width")))
    labels = [t.text for g in svg.iter(SVG + "g") if "node" in (g.get("class") or "").split() for t in g.iter(SVG + "text")
              if t.get("class") != "port"]
    return edges, labels


def tearDownModule():
    Fixtures.cleanup()


class Reports(rc.cc.TempDirTest):
    def make(self, args, name="report.html"):
        out = self.path(name)
        r = rc.report(list(args) + ["--out", out], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        self.assertRegex(r.stdout, rf"^wrote {re.escape(out)}: \d+ charts, [\d.]+ MB\n$")
        self.assertEqual(rc.ls(self.tmp), [name], "a temporary file was left behind")
        # plotly.js goes in compressed (2.5 MB of base64 for 8.7 MB): a report stays under 5 MB
        self.assertLess(os.path.getsize(out), 5_000_000)
        with open(out, encoding="utf-8") as f:
            page = f.read()
        self.assertTrue(page.startswith("<!DOCTYPE html>"))
        self.assertTrue("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none';" in page)
        self.assertTrue("* plotly.js v" in page, "plotly.js is not embedded")
        # plotly.js's own code names URLs in strings (MathJax, topojson defaults) that a report never
        # uses; the page's own markup (all but the plotly.js <script>) must reference nothing.
        start = page.index("<script>", page.index("<head>"))
        end = page.index("</script>", start)
        markup = page[:start] + page[end:]
        found = EXTERNAL.search(markup)
        self.assertIsNone(found, found and markup[max(0, found.start() - 80):found.end() + 80])
        self.assertFalse("mathjax" in markup.lower())
        charts = re.search(r'<meta name="attnlab-report-charts" content="([^"]*)">', page).group(1).split()
        return page, charts

    def test_run(self):
        page, charts = self.make([Fixtures.analysed_run()])
        self.assertEqual(charts, ["loss", "accuracy", "optimiser", "self-entropy", "self-entropy_norm", "self-masked_mass",
                                  "self-score_std", "ablation"])
        for text in ['id="audit-tests"', "passed, 0 failed", 'id="config"', "all 0 (mask correct)"]:
            self.assertTrue(text in page, text)

    def test_run_without_analyses(self):
        _, charts = self.make([rc.Fixtures.train("plain", rc.DECODER)])
        self.assertNotIn("ablation", charts)
        self.assertIn("self-score_std", charts)

    def test_run_with_head_scores(self):
        page, charts = self.make([Fixtures.train("heads", dict(rc.DECODER, **{"train.head_scores": "true"}))])
        self.assertEqual(charts[:8], ["loss", "accuracy", "optimiser", "repeat_loss", "head-induction", "head-previous_token",
                                      "head-duplicate_token", "head-copying"])
        self.assertIn("Head scores over training", page)

    def test_encoder_decoder_run(self):
        _, charts = self.make([Fixtures.train("encdec", rc.ENC_DEC)])
        for kind in ("enc_self", "dec_self", "cross"):
            self.assertIn(f"{kind}-entropy_norm", charts)

    def test_several_runs(self):
        a = Fixtures.train("dec", rc.DECODER)
        b = Fixtures.train("wide", dict(rc.DECODER, **{"model.heads": "4"}))
        page, charts = self.make([a, b])
        self.assertEqual(charts, ["runs-loss", "runs-accuracy"])
        diff = page[page.index('id="config-diff"'):]
        diff = diff[:diff.index("</table>")]
        keys = re.findall(r"<tr><td>([^<]+)</td>", diff)
        self.assertEqual(keys, ["run.name", "model.heads"])

    def test_sweep(self):
        page, charts = self.make([Fixtures.sweep()])
        self.assertEqual(charts, ["sweep-accuracy", "sweep-steps", "sweep-curves-accuracy", "sweep-curves-loss",
                                  "sweep-score-std", "sweep-entropy-self"])
        for text in ['id="aggregated-table"', 'id="cells-table"', "no cell reached the target accuracy 0.99 within 40 steps"]:
            self.assertTrue(text in page, text)

    def test_attention(self):
        checkpoint = Fixtures.checkpoint("dec", rc.DECODER)
        page, charts = self.make([checkpoint, "--tokens", rc.PROMPT])
        self.assertEqual(charts, ["attention", "query-pattern"])
        for layer in (0, 1):
            for head in (0, 1):
                label = json.dumps(f"self · layer {layer} · head {head}")[1:-1]  # as in the figure's JSON
                self.assertTrue(label in page, label)

    def viewer_prompts(self, page):
        """The attention viewer's script data: per prompt its text, maps (labels) and figure."""
        start = page.index("var prompts = ") + len("var prompts = ")
        prompts, _ = json.JSONDecoder().raw_decode(page[start:])
        return prompts

    def viewer_labels(self, page):
        """The query and key labels of every map of the first prompt in the attention viewer's script."""
        return self.viewer_prompts(page)[0]["maps"]

    def test_attention_of_several_prompts(self):
        """--tokens "A | B": a prompt selector with both; each prompt's maps are `attnlab inspect`'s weights
        (the future as no value); a thumbnail per head of every layer, under a layer selector; the token row."""
        checkpoint = Fixtures.checkpoint("dec", rc.DECODER)
        second = "4 4 2 8"
        page, charts = self.make([checkpoint, "--tokens", f"{rc.PROMPT} | {second}"])
        self.assertEqual(charts, ["attention", "query-pattern"])
        select = re.search(r'<select id="prompt-select">(.*?)</select>', page).group(1)
        self.assertEqual(re.findall(r'<option value="(\d+)">([^<]*)</option>', select),
                         [("0", f"1: {rc.PROMPT}"), ("1", f"2: {second}")])
        layers = re.search(r'<select id="layer-select">(.*?)</select>', page).group(1)
        self.assertEqual(re.findall(r"<option[^>]*>([^<]*)</option>", layers), ["self · layer 0", "self · layer 1"])
        groups = re.findall(r'<div class="head-group" data-group="(\d+)"[^>]*>(.*?)</div></div>(?=<div class="head-group"|</div>)',
                            page)
        self.assertEqual([g for g, _ in groups], ["0", "1"])
        for g, inner in groups:  # 2 heads a layer: one thumbnail (a canvas) each, for maps 2g and 2g+1
            self.assertEqual(re.findall(r'class="head-thumb" data-map="(\d+)"', inner), [str(2 * int(g)), str(2 * int(g) + 1)])
            self.assertEqual(inner.count("<canvas>"), 2)
        self.assertIn('<div id="token-row" class="tokens">', page)
        prompts = self.viewer_prompts(page)
        self.assertEqual([p["text"] for p in prompts], [rc.PROMPT, second])
        for prompt in prompts:
            expected = rc.inspect_weights(checkpoint, prompt["text"], self.tmp)
            T = len(prompt["text"].split())
            self.assertEqual(len(prompt["figure"]["data"]), 4)
            for n, (m, trace) in enumerate(zip(prompt["maps"], prompt["figure"]["data"])):
                layer, head = divmod(n, 2)
                self.assertEqual(m["title"], f"self · layer {layer} · head {head}")
                self.assertEqual((m["group"], m["same"], len(m["queries"])), (layer, True, T))
                z = np.array([[np.nan if v is None else v for v in row] for row in trace["z"]])
                future = np.triu(np.ones((T, T), dtype=bool), 1)
                self.assertTrue(np.isnan(z[future]).all())
                np.testing.assert_allclose(np.where(future, 0, z), expected[("self", layer)][head], rtol=1e-12, atol=0)
        self.assertIn("Predictions, prompt 2: “4 4 2 8”", page)

    def test_attention_of_one_prompt_is_as_before(self):
        """A single --tokens: one prompt, a disabled selector, and the figure drawn is that prompt's."""
        checkpoint = Fixtures.checkpoint("dec", rc.DECODER)
        page, _ = self.make([checkpoint, "--tokens", rc.PROMPT])
        self.assertIn(f"tokens “{rc.PROMPT}”: 4 maps (self)", page)
        self.assertEqual([p["text"] for p in self.viewer_prompts(page)], [rc.PROMPT])
        self.assertRegex(page, r'<select id="prompt-select" disabled><option value="0">1: 3 7 5 1 4 9</option></select>')

    def test_attention_labels_of_a_generated_task(self):
        page, _ = self.make([Fixtures.checkpoint("dec", rc.DECODER), "--tokens", "1 2 0 7"])
        for m in self.viewer_labels(page):
            self.assertEqual(m["queries"], ["<SEP>", "<BOS>", "<PAD>", "7"], m["title"])

    def test_attention_labels_of_a_text_model(self):
        """A text model's tokens are its characters (task.alphabet): whitespace
        escaped visibly, and no special-token names (a text model has none)."""
        with open(os.path.join(Fixtures.folder(), "text.txt"), "w", encoding="utf-8") as f:
            f.write('the "cat"\tsat on\nthe mat; ' * 40)
        checkpoint = Fixtures.checkpoint("text", dict(rc.DECODER, **{"task.name": "text", "task.path": "text.txt",
                                                                     "task.max_len": "12"}))
        page, _ = self.make([checkpoint, "--tokens", 'a "t\n\tc'])
        maps = self.viewer_labels(page)
        self.assertEqual(len(maps), 4)
        for m in maps:
            self.assertEqual(m["queries"], ["a", "\u2423", '"', "t", "\\n", "\\t", "c"], m["title"])
            self.assertEqual(m["keys"], m["queries"], m["title"])
        for name in ("&lt;SEP&gt;", "&lt;PAD&gt;", "&lt;BOS&gt;", "<SEP>", "<PAD>", "<BOS>"):
            self.assertNotIn(name, page[page.index("</head>"):], "a special-token name on a text model's page")

    def test_attention_of_a_run_folder(self):
        """A run folder with --tokens stands for its newest checkpoint."""
        page, charts = self.make([Fixtures.train("dec", rc.DECODER), "--tokens", rc.PROMPT])
        self.assertEqual(charts, ["attention", "query-pattern"])
        self.assertTrue("step_0000040.h5" in page[:page.index("<script>")])

    def check_graph(self, page, graph_id, circuit, drawn):
        """The graph draws exactly the edges `drawn` (indices into the file's edges): one line each, its
        tooltip "sender -> receiver: score (exact ...)", width 10 px x |value| / the largest |value| (at
        least 0.5), blue when the value is positive, red when negative; and every node, labelled."""
        edges, labels = graph_of(page, graph_id)
        values = circuit["exact"] if circuit["exact"] is not None else circuit["score"]
        largest = np.abs(values).max()
        expected = {}
        for i in drawn:
            title = f"{circuit['sender'][i]} -> {circuit['receiver'][i]}: {circuit['score'][i]:.4g}"
            if circuit["exact"] is not None:
                title += f" (exact {circuit['exact'][i]:.4g})"
            expected[(circuit["sender"][i], circuit["receiver"][i])] = (title, "#1f5fbf" if values[i] >= 0 else "#c8322d",
                                                                         max(0.5, 10 * abs(values[i]) / largest))
        self.assertEqual(set(edges), set(expected))
        for key, (title, stroke, width) in expected.items():
            self.assertEqual(edges[key][:2], (title, stroke), key)
            self.assertAlmostEqual(edges[key][2], width, delta=0.006, msg=key)
        # the induction model: 2 layers of 2 heads and a feed-forward
        self.assertEqual(sorted(labels), sorted(["embed", "L0.H0", "L0.H1", "L1.H0", "L1.H1", "mlp 0", "mlp 1", "logits"]))
        return edges

    def test_circuit(self):
        path = Fixtures.circuit(*PRUNED)
        circuit = read_circuit(path)
        page, charts = self.make([path])
        self.assertEqual(charts, ["faithfulness", "agreement"])
        kept = np.flatnonzero(circuit["kept"])
        self.assertGreater(len(kept), 0)
        self.assertLess(len(kept), len(circuit["score"]))
        drawn = self.check_graph(page, "circuit-graph", circuit, kept)
        self.assertEqual(max(w for _, _, w in drawn.values()), 10.0)  # the largest exact effect is in this circuit
        # the second graph: the 50 largest |scores| of at least 1% of the largest
        magnitude = np.abs(circuit["score"])
        top = [i for i in np.argsort(-magnitude, kind="stable") if magnitude[i] >= 0.01 * magnitude.max()][:50]
        self.assertLess(len(top), len(circuit["score"]))  # some edges are below the floor
        self.check_graph(page, "edges-graph", circuit, top)
        # the header, the faithfulness curve's data and the table of edges, largest |score| first
        summary = page[page.index('id="summary"'):]
        summary = summary[:summary.index("</table>")]
        for text in ("<td>eap</td>", "<td>prob</td>", "<td>denoising</td>", f"{len(kept)} of {len(magnitude)}",
                     "top-20 recall", "Spearman"):
            self.assertIn(text, summary)
        start = page.index("Plotly.newPlot(\"faithfulness\"")
        figure = json.loads(page[page.rindex("var figure = ", 0, start) + len("var figure = "):page.rindex(";", 0, start)])
        np.testing.assert_allclose(figure["data"][0]["x"], circuit["faithfulness"]["edges_kept"])
        np.testing.assert_allclose(figure["data"][0]["y"], circuit["faithfulness"]["metric"], rtol=1e-12)
        table = page[page.index('id="edges-table"'):]
        rows = re.findall(r"<tr><td[^>]*>\d+</td><td>([^<]+)</td><td>([^<]+)</td>", table[:table.index("</table>")])
        order = np.argsort(-magnitude, kind="stable")
        self.assertEqual(rows, [(circuit["sender"][i], circuit["receiver"][i]) for i in order])

    def test_circuit_without_pruning(self):
        """Without --prune and --compare: one graph of the largest |scores|, widths by score, no charts."""
        path = Fixtures.circuit("--method", "exact")
        circuit = read_circuit(path)
        page, charts = self.make([path])
        self.assertEqual(charts, [])
        self.assertNotIn('id="circuit-graph"', page)
        magnitude = np.abs(circuit["score"])
        top = [i for i in np.argsort(-magnitude, kind="stable") if magnitude[i] >= 0.01 * magnitude.max()][:50]
        self.check_graph(page, "edges-graph", circuit, top)

    def test_circuit_of_a_larger_model(self):
        """A file written here: 3 layers of 4 query heads over 2 K/V heads, with feed-forwards, every edge
        a signed score. The graph holds the 50 largest |scores| (of 500), blue or red by sign; only the
        K/V heads have k and v ports."""
        layers, heads, kv_heads = 3, 4, 2
        edges = []
        for layer in range(layers + 1):
            upstream = ["embed"] + [n for l in range(layer) for n in [f"{l}.{h}" for h in range(heads)] + [f"mlp.{l}"]]
            if layer == layers:
                edges += [(s, "logits") for s in upstream]
                break
            receivers = ([f"{layer}.{h}:q" for h in range(heads)] + [f"{layer}.{g}:k" for g in range(kv_heads)]
                         + [f"{layer}.{g}:v" for g in range(kv_heads)])
            edges += [(s, r) for r in receivers for s in upstream]
            edges += [(s, f"mlp.{layer}") for s in upstream + [f"{layer}.{h}" for h in range(heads)]]
        score = np.sin(np.arange(len(edges)) * 1.7) * np.linspace(1, 3, len(edges))
        path = os.path.join(Fixtures.folder(), "big.circuit.h5")
        with h5py.File(path, "w") as f:
            f.attrs.update(format="attnlab-circuit", format_version=1, checkpoint="made/by/hand.h5", step=7,
                           metric="logit_diff", direction="denoising", method="atp", clean_metric=2.5,
                           corrupt_metric=-1.0)
            f["edges/sender"] = np.array([e[0] for e in edges], dtype=h5py.string_dtype())
            f["edges/receiver"] = np.array([e[1] for e in edges], dtype=h5py.string_dtype())
            f["edges/score"] = score
        self.assertGreater(len(edges), 100)
        page, charts = self.make([path], "big.html")
        self.assertEqual(charts, [])
        top = np.argsort(-np.abs(score), kind="stable")[:50]
        drawn, labels = graph_of(page, "edges-graph")
        self.assertEqual(set(drawn), {edges[i] for i in top})
        for i in top:
            self.assertEqual(drawn[edges[i]][1], "#1f5fbf" if score[i] >= 0 else "#c8322d")
            self.assertAlmostEqual(drawn[edges[i]][2], max(0.5, 10 * abs(score[i]) / np.abs(score).max()), delta=0.006)
        self.assertEqual(sorted(labels), sorted(["embed", "logits"] + [f"L{l}.H{h}" for l in range(layers)
                                                                        for h in range(heads)]
                                                + [f"mlp {l}" for l in range(layers)]))
        start = page.index('<svg id="edges-graph"')
        svg = ET.fromstring(page[start:page.index("</svg>", start) + 6])
        for g in svg.iter(SVG + "g"):
            if "node" in (g.get("class") or "").split() and g.get("data-node", "").startswith("L"):
                head = int(g.get("data-node").split(".H")[1])
                ports = [t.text for t in g.iter(SVG + "text") if t.get("class") == "port"]
                self.assertEqual(ports, ["q", "k", "v"] if head < kv_heads else ["q"], g.get("data-node"))
        rows = re.findall(r"<tr><td[^>]*>\d+</td>", page[page.index('id="edges-table"'):])
        self.assertEqual(len(rows), 100)  # the table: the 100 largest

    def test_out_replaced_whole(self):
        out = self.path("report.html")
        with open(out, "w") as f:
            f.write("old")
        self.make([Fixtures.train("dec", rc.DECODER)])
        with open(out) as f:
            self.assertNotEqual(f.read(3), "old")


class BadInput(rc.cc.TempDirTest):
    def refused(self, args, expected):
        """exit 2, one line `attnlab report: ...` matching expected, nothing written in self.tmp."""
        before = rc.ls(self.tmp)
        r = rc.report(args, self.tmp)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual(r.stdout, "")
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("attnlab report: "), lines[0])
        self.assertRegex(lines[0], expected)
        self.assertEqual(rc.ls(self.tmp), before, "something was written")

    def test_missing_path(self):
        self.refused([self.path("nope"), "--out", self.path("r.html")], r"nope: no such file or folder")

    def test_folder_neither_run_nor_sweep(self):
        os.mkdir(self.path("empty"))
        self.refused([self.path("empty"), "--out", self.path("r.html")],
                     r"empty: neither a run folder .* nor a sweep folder")

    def test_run_folder_without_metrics(self):
        os.mkdir(self.path("started"))
        with open(self.path("started", "config.toml"), "w") as f:
            f.write("[run]\n")
        self.refused([self.path("started"), "--out", self.path("r.html")], r"without metrics.h5")

    def test_unreadable_metrics(self):
        run = self.path("broken")
        shutil.copytree(Fixtures.train("dec", rc.DECODER), run)
        with open(os.path.join(run, "metrics.h5"), "r+b") as f:
            f.truncate(2000)
        self.refused([run, "--out", self.path("r.html")], r"broken/metrics.h5: cannot read as HDF5")
        with open(os.path.join(run, "metrics.h5"), "wb") as f:
            f.write(b"not hdf5 at all")
        self.refused([run, "--out", self.path("r.html")], r"broken/metrics.h5: cannot read as HDF5")

    def test_non_checkpoint_with_tokens(self):
        run = Fixtures.train("dec", rc.DECODER)
        self.refused([os.path.join(run, "metrics.h5"), "--tokens", "3 7", "--out", self.path("r.html")],
                     r"metrics.h5: not an attnlab checkpoint")
        self.refused([os.path.join(run, "config.toml"), "--tokens", "3 7", "--out", self.path("r.html")],
                     r"config.toml: not an HDF5 file")

    def test_checkpoint_without_tokens(self):
        self.refused([Fixtures.checkpoint("dec", rc.DECODER), "--out", self.path("r.html")], r"give --tokens")

    def test_bad_tokens(self):
        self.refused([Fixtures.checkpoint("dec", rc.DECODER), "--tokens", "3 x", "--out", self.path("r.html")],
                     r"step_0000040.h5: --tokens: 'x' is not a token id")
        self.refused([Fixtures.checkpoint("dec", rc.DECODER), "--tokens", "3 999", "--out", self.path("r.html")],
                     r"outside the vocabulary")

    def test_bad_prompt_among_several(self):
        checkpoint = Fixtures.checkpoint("dec", rc.DECODER)
        for tokens, n in (("3 7 | ", 2), (" | 3 7", 1), ("3 7 |  | 4", 2)):
            self.refused([checkpoint, "--tokens", tokens, "--out", self.path("r.html")],
                         rf"^attnlab report: --tokens: prompt {n} of \d is empty \(prompts are separated by \" \| \"\)$")
        self.refused([checkpoint, "--tokens", "3 7 | 3 999 | 4", "--out", self.path("r.html")],
                     r"step_0000040.h5: --tokens: token 999 is outside the vocabulary .* \(prompt 2 of 3\)$")
        self.refused([checkpoint, "--tokens", "3 7 | 3 x", "--out", self.path("r.html")],
                     r"step_0000040.h5: --tokens: 'x' is not a token id \(prompt 2 of 2\)$")

    def test_tokens_with_a_sweep_or_runs(self):
        self.refused([Fixtures.sweep(), "--tokens", "3", "--out", self.path("r.html")],
                     r"--tokens and --target go with one checkpoint")
        run = Fixtures.train("dec", rc.DECODER)
        self.refused([run, run, "--tokens", "3", "--out", self.path("r.html")], r"--tokens and --target go with one")

    def test_tokens_with_a_run_without_checkpoints(self):
        run = self.path("run")
        shutil.copytree(Fixtures.train("dec", rc.DECODER), run)
        shutil.rmtree(os.path.join(run, "checkpoints"))
        self.refused([run, "--tokens", "3", "--out", self.path("r.html")], r"run: a run folder without checkpoints")

    def test_out_in_missing_folder(self):
        self.refused([Fixtures.train("dec", rc.DECODER), "--out", self.path("no", "r.html")],
                     r"--out .*no/r.html: folder .*no does not exist")

    def test_out_is_a_folder(self):
        self.refused([Fixtures.train("dec", rc.DECODER), "--out", self.tmp], r"is a directory")

    def test_out_that_is_no_regular_file_is_never_replaced(self):
        # the rename would replace a FIFO or a device (as root: /dev/full) or a link itself
        fifo = self.path("fifo.html")
        os.mkfifo(fifo)
        self.refused([Fixtures.train("dec", rc.DECODER), "--out", fifo], r"fifo.html exists and is not a regular file")
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))
        target = self.path("target.html")
        with open(target, "w") as f:
            f.write("keep")
        link = self.path("link.html")
        os.symlink(target, link)
        self.refused([Fixtures.train("dec", rc.DECODER), "--out", link], r"link.html exists and is not a regular file")
        self.assertTrue(os.path.islink(link))

    def test_missing_python(self):
        os.environ["ATTNLAB_PYTHON"] = self.path("no_python")
        try:
            self.refused([Fixtures.train("dec", rc.DECODER), "--out", self.path("r.html")],
                         r"^attnlab report: .*no_python is not an executable \(it needs python3-plotly")
        finally:
            del os.environ["ATTNLAB_PYTHON"]

    def test_no_out_and_no_path(self):
        self.refused([Fixtures.train("dec", rc.DECODER)], r"--out REPORT.html is required")
        self.refused(["--out", self.path("r.html")], r"give a run folder")

    def test_circuit_with_tokens_or_other_paths(self):
        circuit = Fixtures.circuit(*PRUNED)
        self.refused([circuit, "--tokens", "3 7", "--out", self.path("r.html")],
                     r"circuit\.h5: a circuit file; --tokens and --target go with a checkpoint$")
        self.refused([circuit, "--target", "2", "--out", self.path("r.html")], r"--tokens and --target go with a checkpoint")
        self.refused([circuit, Fixtures.train("dec", rc.DECODER), "--out", self.path("r.html")],
                     r"a circuit file is reported alone")
        self.refused([Fixtures.checkpoint("dec", rc.DECODER), circuit, "--tokens", "3", "--out", self.path("r.html")],
                     r"a circuit file is reported alone")

    def test_hdf5_file_of_another_format(self):
        run = Fixtures.train("dec", rc.DECODER)
        self.refused([os.path.join(run, "metrics.h5"), "--out", self.path("r.html")],
                     r"metrics.h5: an HDF5 file of format 'attnlab-metrics'; the report reads .* an `attnlab circuit` file$")
        other = os.path.join(Fixtures.folder(), "patch.h5")
        with h5py.File(other, "w") as f:
            f.attrs["format"] = "attnlab-patch"
            f["edges/score"] = np.zeros(3)  # a circuit's datasets do not make a circuit file
        self.refused([other, "--out", self.path("r.html")], r"patch.h5: an HDF5 file of format 'attnlab-patch'")

    def test_sweep_with_others(self):
        self.refused([Fixtures.sweep(), Fixtures.train("dec", rc.DECODER), "--out", self.path("r.html")],
                     r"a sweep folder is reported alone")

    def test_sweep_without_summary(self):
        os.mkdir(self.path("sw"))
        with open(self.path("sw", "sweep.toml"), "w") as f:
            f.write('[sweep]\n"run.seed" = [0, 1]\n')
        self.refused([self.path("sw"), "--out", self.path("r.html")], r"without summary.h5")

    def test_missing_tool(self):
        env_tools = os.environ.get("ATTNLAB_TOOLS")
        os.environ["ATTNLAB_TOOLS"] = self.tmp
        try:
            self.refused([Fixtures.train("dec", rc.DECODER), "--out", self.path("r.html")],
                         r"^attnlab report: no report.py in ATTNLAB_TOOLS=")
        finally:
            if env_tools is None:
                del os.environ["ATTNLAB_TOOLS"]
            else:
                os.environ["ATTNLAB_TOOLS"] = env_tools


if __name__ == "__main__":
    rc.main()
