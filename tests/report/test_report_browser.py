#!/usr/bin/python3
"""Every kind of `attnlab report` opened in headless Chromium (tests/report/cdp.py:
the DevTools protocol over Debian's python3-websocket): no console error, no
uncaught exception and no network request of any kind; every chart the page
lists is drawn (its SVG exists) and holds data; hovering a heatmap cell shows that
cell's value (compared with metrics.h5 or `attnlab inspect` directly); the
summary tables sort on a click; in the attention viewer the head menu switches
the map and a click on a query draws that query's row of weights, the grid draws a
thumbnail per head, hovering a token shades the token row by its weights, and the
prompt selector switches the map to the other prompt's.

    /usr/bin/python3 tests/report/test_report_browser.py ATTNLAB_BINARY REPO_ROOT

Skips (saying so; exit status 77, which ctest shows as skipped) only when
chromium is not installed; scripts/setup.sh installs it. With ATTNLAB_REPORT_SCREENSHOTS=DIR it also saves a PNG of each page there.
"""
import json
import os
import unittest

import h5py
import numpy as np

import report_common as rc
from report_common import Fixtures

import cdp

BROWSER = None
MISSING = None if cdp.find_chromium() else "chromium is not installed (scripts/setup.sh installs Debian's chromium)"

# Per chart div: traces, points (x, y or z entries) and what is drawn in its SVG.
CHARTS = """(function () {
  var ids = document.querySelector('meta[name=attnlab-report-charts]').content.split(' ').filter(Boolean);
  return ids.map(function (id) {
    var gd = document.getElementById(id);
    if (!gd || !gd._fullData) return {id: id, missing: true};
    var points = 0;
    gd.data.forEach(function (t) { points += (t.z || t.y || t.x || []).length; });
    return {id: id, traces: gd._fullData.length, points: points,
            svg: gd.querySelectorAll('.main-svg').length,
            drawn: gd.querySelectorAll('.scatterlayer .trace, .barlayer .trace, .heatmaplayer .hm image').length};
  });
})()"""


def setUpModule():
    global BROWSER
    if MISSING is None:
        BROWSER = cdp.Browser()


def tearDownModule():
    if BROWSER is not None:
        BROWSER.close()
    Fixtures.cleanup()


@unittest.skipIf(MISSING, MISSING)
class InBrowser(rc.cc.TempDirTest):
    def open(self, args, name):
        out = self.path(name + ".html")
        r = rc.report(list(args) + ["--out", out], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        url = BROWSER.open(out)
        BROWSER.wait_for("document.querySelectorAll('.plotly-graph-div .main-svg').length > 0 && "
                         "Array.from(document.querySelectorAll('.plotly-graph-div')).every(g => g._fullLayout)")
        charts = BROWSER.evaluate(CHARTS)
        self.assertTrue(charts, "the page lists no charts")
        for chart in charts:
            self.assertFalse(chart.get("missing"), f"{chart['id']}: not drawn")
            self.assertGreater(chart["traces"], 0, chart)
            self.assertGreater(chart["points"], 0, chart)
            self.assertGreaterEqual(chart["svg"], 1, chart)
            self.assertGreater(chart["drawn"], 0, chart)
        self.addCleanup(self.no_problems, url)
        shots = os.environ.get("ATTNLAB_REPORT_SCREENSHOTS")
        if shots:
            BROWSER.screenshot(os.path.join(shots, f"report_{name}.png"), height=1400)
        return {c["id"]: c for c in charts}

    def no_problems(self, url):
        BROWSER.pump(0.2)
        self.assertEqual(BROWSER.problems(url), [])

    def point(self, div, x, y):
        """Viewport pixel of data point (x, y) of a chart (linear values; category index for categories)."""
        return BROWSER.evaluate(f"""(function () {{
            var gd = document.getElementById({json.dumps(div)});
            gd.scrollIntoView({{block: 'center'}});
            var r = gd.getBoundingClientRect(), xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            return [r.left + xa._offset + xa.l2p({x}), r.top + ya._offset + ya.l2p({y})];
        }})()""")

    def hover_text(self, div, x, y):
        px, py = self.point(div, x, y)
        BROWSER.hover(px - 3, py + 1)  # first elsewhere, so that the next move is a change
        BROWSER.hover(px, py)
        layer = json.dumps("#" + div + " .hoverlayer")
        return BROWSER.wait_for(f"(function () {{ var h = document.querySelector({layer}); return h && h.textContent; }})()")

    def test_harness_sees_problems(self):
        """The checks above mean something: a page that logs an error, throws and fetches is caught."""
        page = self.path("bad.html")
        with open(page, "w") as f:
            f.write("<!DOCTYPE html><img src='http://example.invalid/a.png'><script>console.error('boom');"
                    "fetch('http://192.0.2.1/x').catch(function () {}); undefinedFunction();</script>")
        url = BROWSER.open(page)
        BROWSER.pump(0.5)
        problems = "\n".join(BROWSER.problems(url))
        self.assertIn("console.error: boom", problems)
        self.assertIn("undefinedFunction", problems)
        self.assertIn("network request: http://example.invalid/a.png", problems)
        self.assertIn("network request: http://192.0.2.1/x", problems)

    def test_run(self):
        run = Fixtures.analysed_run()
        charts = self.open([run], "run")
        self.assertEqual(set(charts), {"loss", "accuracy", "optimiser", "self-entropy", "self-entropy_norm", "self-masked_mass",
                                       "self-score_std", "ablation"})
        with h5py.File(os.path.join(run, "metrics.h5"), "r") as f:  # the optimiser chart: lr and gradient norm as logged
            np.testing.assert_allclose(BROWSER.evaluate("document.getElementById('optimiser').data[0].y"), f["train/lr"][()], rtol=1e-12)
            np.testing.assert_allclose(BROWSER.evaluate("document.getElementById('optimiser').data[1].y"), f["train/grad_norm"][()],
                                       rtol=1e-12)
        with h5py.File(os.path.join(run, "metrics.h5"), "r") as f:
            steps = f["attention/self/step"][()]
            entropy = f["attention/self/entropy"][()]  # [K, layers, heads]
            score_std = f["attention/self/score_std"][()]
        k, layer, head = 2, 1, 0  # row "L1 H0" is category 2 (layer * heads + head)
        text = self.hover_text("self-entropy", steps[k], layer * 2 + head)
        self.assertIn(f"{entropy[k, layer, head]:.4f}", text)
        self.assertIn("L1 H0", text)
        self.assertIn(f"step {steps[k]}", text)
        text = self.hover_text("self-score_std", steps[0], 1)
        self.assertIn(f"{score_std[0, 0, 1]:.4f}", text)
        with h5py.File(os.path.join(run, "checkpoints", "step_0000040.ablation.h5"), "r") as f:
            zero = f["ranked/zero_loss"][()] - f.attrs["baseline_loss"]
        bars = BROWSER.evaluate("document.getElementById('ablation').data[0].y")
        np.testing.assert_allclose(bars, zero, rtol=1e-9)
        tests = BROWSER.evaluate("Array.from(document.querySelectorAll('#audit-tests tbody tr td:nth-child(2)'))"
                                 ".map(td => td.textContent)")
        self.assertGreaterEqual(len(tests), 10)
        self.assertEqual(set(tests), {"PASS"})

    def test_several_runs(self):
        a = Fixtures.train("dec", rc.DECODER)
        b = Fixtures.train("wide", dict(rc.DECODER, **{"model.heads": "4"}))
        charts = self.open([a, b], "runs")
        self.assertEqual(charts["runs-loss"]["traces"], 4)  # train and held-out per run
        keys = BROWSER.evaluate("Array.from(document.querySelectorAll('#config-diff tbody tr td:first-child'))"
                                ".map(td => td.textContent)")
        self.assertEqual(keys, ["run.name", "model.heads"])

    def test_sweep(self):
        sweep = Fixtures.sweep()
        charts = self.open([sweep], "sweep")
        self.assertEqual(charts["sweep-curves-accuracy"]["traces"], 8)
        title = BROWSER.evaluate("document.getElementById('sweep-steps').layout.title.text")
        self.assertIn("no cell reached", title)
        xs = BROWSER.evaluate("document.getElementById('sweep-score-std').data.filter(t => t.mode === 'markers')"
                              ".map(t => t.x).flat()")
        self.assertEqual(sorted(set(xs)), [4, 8])  # against head width
        # Sorting: a click on a numeric header orders the rows ascending, a second click descending.
        column = BROWSER.evaluate("Array.from(document.querySelectorAll('#cells-table thead th'))"
                                  ".findIndex(th => th.textContent === 'eval_loss')")
        self.assertGreater(column, 0)
        read = (f"Array.from(document.querySelectorAll('#cells-table tbody tr'))"
                f".map(tr => parseFloat(tr.cells[{column}].getAttribute('data-sort')))")
        for expected in (sorted, lambda v: sorted(v, reverse=True)):
            BROWSER.evaluate(f"document.querySelectorAll('#cells-table thead th')[{column}].click()")
            values = BROWSER.evaluate(read)
            self.assertEqual(values, expected(values))
            self.assertEqual(len(values), 8)
        # Hover on the final-entropy heatmap: cell (row 3, head 1) from that cell's metrics.h5.
        name = BROWSER.evaluate("document.getElementById('sweep-entropy-self').data[0].y[3]")
        with h5py.File(os.path.join(sweep, name, "metrics.h5"), "r") as f:
            final = f["attention/self/entropy_norm"][-1]
        text = self.hover_text("sweep-entropy-self", 1, 3)
        self.assertIn(f"{final[0, 1]:.4f}", text)

    def test_attention_viewer(self):
        checkpoint = Fixtures.checkpoint("dec", rc.DECODER)
        expected = rc.inspect_weights(checkpoint, rc.PROMPT, self.tmp)
        self.open([checkpoint, "--tokens", rc.PROMPT], "attention")
        labels = BROWSER.evaluate("document.getElementById('attention').data.map(t => t.name)")
        self.assertEqual(labels, [f"self · layer {l} · head {h}" for l in (0, 1) for h in (0, 1)])
        # hover: layer 0, head 0, query 3 -> key 1
        text = self.hover_text("attention", 1, 3)
        self.assertIn(f"weight {expected[('self', 0)][0, 3, 1]:.4f}", text)
        self.assertIn("query 3 (<SEP>)", text)
        # the head menu: open it and pick the third entry (layer 1, head 0)
        header = BROWSER.evaluate("(function () { var r = document.querySelector('#attention .updatemenu-header')"
                                  ".getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()")
        BROWSER.click(*header)
        BROWSER.wait_for("document.querySelectorAll('#attention .updatemenu-dropdown-button').length === 4")
        option = BROWSER.evaluate("(function () { var r = document.querySelectorAll('#attention "
                                  ".updatemenu-dropdown-button')[2].getBoundingClientRect();"
                                  " return [r.left + r.width / 2, r.top + r.height / 2]; })()")
        BROWSER.click(*option)
        BROWSER.wait_for("document.getElementById('attention').data[2].visible === true")
        visible = BROWSER.evaluate("document.getElementById('attention').data.map(t => t.visible)")
        self.assertEqual(visible, [False, False, True, False])
        # a click on query 2 outlines its row and draws its weights (the future as 0)
        px, py = self.point("attention", 0, 2)
        BROWSER.click(px, py)
        BROWSER.wait_for("window.attnlabAttention.state.query === 2")
        state = BROWSER.evaluate("[window.attnlabAttention.state.map, document.getElementById('query-pattern').data[0].y,"
                                 " document.getElementById('query-pattern').layout.title.text,"
                                 " document.getElementById('attention').layout.shapes[0].y0]")
        self.assertEqual(state[0], 2)
        np.testing.assert_allclose(state[1], expected[("self", 1)][0, 2], atol=1e-6)
        self.assertIn("layer 1 · head 0: query 2 (5)", state[2])
        self.assertEqual(state[3], 1.5)

    def centre(self, selector):
        """Viewport pixel of the centre of the element `selector` (scrolled into view)."""
        return BROWSER.evaluate(f"""(function () {{ var e = document.querySelector({json.dumps(selector)});
            e.scrollIntoView({{block: 'center'}}); var r = e.getBoundingClientRect();
            return [r.left + r.width / 2, r.top + r.height / 2]; }})()""")

    def hover_token(self, i):
        """Hovers token span i; its keys' spans' data-weight (the weights shown in the token row)."""
        BROWSER.hover(*self.centre(f"#token-row .token[data-index='{i}']"))
        BROWSER.wait_for(f"window.attnlabAttention.state.token === {i}")
        return BROWSER.evaluate("Array.from(document.querySelectorAll('#token-row .token'))"
                                ".map(s => [parseFloat(s.dataset.weight), s.style.backgroundColor])")

    def test_attention_grid_tokens_and_prompts(self):
        """Two prompts: the grid draws a thumbnail per head of the layer picked; a click on one makes it the
        big map; hovering a token shades the token row by that head's weights from it (as `inspect` has them)
        and outlines its row and column; another prompt redraws the map with its own weights."""
        checkpoint = Fixtures.checkpoint("dec", rc.DECODER)
        second = "4 4 2 8"
        expected = [rc.inspect_weights(checkpoint, t, self.tmp) for t in (rc.PROMPT, second)]
        self.open([checkpoint, "--tokens", f"{rc.PROMPT} | {second}"], "attention_prompts")
        thumbs = """Array.from(document.querySelectorAll('#head-grid .head-thumb')).filter(b => b.checkVisibility())
          .map(function (b) { var c = b.querySelector('canvas'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            var colours = new Set(); for (var k = 0; k < d.length; k += 4) colours.add(d[k] + ',' + d[k + 1] + ',' + d[k + 2] + ',' + d[k + 3]);
            return [+b.dataset.map, c.width, colours.size, d[3]]; })"""
        drawn = BROWSER.evaluate(thumbs)
        self.assertEqual([t[0] for t in drawn], [0, 1])  # layer 0: heads 0 and 1
        for _, width, colours, alpha in drawn:
            self.assertGreater(width, 0)
            self.assertGreater(colours, 3)  # a map, not a blank canvas
            self.assertEqual(alpha, 255)
        BROWSER.evaluate("var s = document.getElementById('layer-select'); s.value = '1'; s.dispatchEvent(new Event('change'))")
        BROWSER.wait_for("window.attnlabAttention.state.map === 2")
        self.assertEqual([t[0] for t in BROWSER.evaluate(thumbs)], [2, 3])
        BROWSER.click(*self.centre("#head-grid .head-thumb[data-map='3']"))  # layer 1, head 1
        BROWSER.wait_for("window.attnlabAttention.state.locked === 3 && document.getElementById('attention').data[3].visible")
        self.assertEqual(BROWSER.evaluate("document.getElementById('attention').data.map(t => t.visible !== false)"),
                         [False, False, False, True])
        self.assertEqual(BROWSER.evaluate("document.querySelector('#head-grid .selected').dataset.map"), "3")
        for prompt, text in enumerate((rc.PROMPT, second)):
            if prompt:
                BROWSER.evaluate("var s = document.getElementById('prompt-select'); s.value = '1';"
                                 " s.dispatchEvent(new Event('change'))")
                BROWSER.wait_for("window.attnlabAttention.state.prompt === 1 && "
                                 "document.getElementById('attention').data[3].z.length === 4")
                self.assertEqual(BROWSER.evaluate("[window.attnlabAttention.state.map, "
                                                  "document.getElementById('attention').data[3].visible]"), [3, True])
                z = np.array(BROWSER.evaluate("document.getElementById('attention').data[3].z"), dtype=float)
                np.testing.assert_allclose(np.nan_to_num(z), expected[1][("self", 1)][1], atol=1e-12)
            T = len(text.split())
            self.assertEqual(BROWSER.evaluate("document.querySelectorAll('#token-row .token').length"), T)
            query = 2
            shown = self.hover_token(query)
            np.testing.assert_allclose([w for w, _ in shown], expected[prompt][("self", 1)][1, query], atol=1e-12)
            self.assertEqual([bool(colour) for _, colour in shown], [True] * T)
            shapes = BROWSER.evaluate("document.getElementById('attention').layout.shapes.map(s => [s.x0, s.y0])")
            self.assertEqual(shapes, [[-0.5, query - 0.5], [query - 0.5, -0.5]])  # its row, its column
            BROWSER.hover(5, 5)  # off the token: the shading goes
            BROWSER.wait_for("window.attnlabAttention.state.token === null")
            self.assertFalse(BROWSER.evaluate("Array.from(document.querySelectorAll('#token-row .token'))"
                                              ".some(s => s.dataset.weight !== undefined)"))

    def test_circuit(self):
        """The circuit's graph is drawn (every edge a curve of nonzero length inside the SVG, every node
        labelled), an edge's line is what the pointer finds over it (its tooltip), the second graph
        opens, and the faithfulness curve holds the file's values."""
        path = Fixtures.circuit("--prune", "0.01", "--compare", "exact", "--method", "eap")
        with h5py.File(path, "r") as f:
            kept = f["circuit/kept"][()].astype(bool)
            senders = [s.decode() for s in f["edges/sender"][()]]
            receivers = [r.decode() for r in f["edges/receiver"][()]]
            faithfulness = f["faithfulness/edges_kept"][()], f["faithfulness/metric"][()]
        charts = self.open([path], "circuit")
        self.assertEqual(set(charts), {"faithfulness", "agreement"})
        np.testing.assert_allclose(BROWSER.evaluate("document.getElementById('faithfulness').data[0].x"), faithfulness[0])
        np.testing.assert_allclose(BROWSER.evaluate("document.getElementById('faithfulness').data[0].y"), faithfulness[1],
                                   rtol=1e-12)
        graph = """(function (id) {
          var svg = document.getElementById(id), box = svg.getBoundingClientRect();
          var edges = Array.from(svg.querySelectorAll('g.edge')).map(function (g) {
            var line = g.querySelector('path.line'), b = line.getBBox();
            return {edge: g.dataset.sender + ' ' + g.dataset.receiver, title: g.querySelector('title').textContent,
                    length: line.getTotalLength(), inside: b.x >= 0 && b.y >= 0 && b.x + b.width <= svg.width.baseVal.value
                    && b.y + b.height <= svg.height.baseVal.value};
          });
          var labels = Array.from(svg.querySelectorAll('g.node > text:not(.port)')).map(function (t) { return t.textContent; });
          return {width: box.width, height: box.height, edges: edges, labels: labels};
        })"""
        drawn = BROWSER.evaluate(graph + "('circuit-graph')")
        self.assertGreater(drawn["width"], 200)
        self.assertGreater(drawn["height"], 400)
        self.assertEqual(sorted(e["edge"] for e in drawn["edges"]),
                         sorted(f"{s} {r}" for s, r, k in zip(senders, receivers, kept) if k))
        for edge in drawn["edges"]:
            self.assertGreater(edge["length"], 20, edge)
            self.assertTrue(edge["inside"], edge)
            self.assertTrue(edge["title"].startswith(edge["edge"].replace(" ", " -> ") + ": "), edge)
        self.assertEqual(sorted(drawn["labels"]), sorted(["embed", "L0.H0", "L0.H1", "L1.H0", "L1.H1", "mlp 0", "mlp 1",
                                                           "logits"]))
        # the pointer halfway along the strongest edge (drawn last, on top) finds that edge, whose title is the tooltip
        found = BROWSER.evaluate("""(function () {
          var edges = document.querySelectorAll('#circuit-graph g.edge'), g = edges[edges.length - 1];
          var line = g.querySelector('path.line'), p = line.getPointAtLength(line.getTotalLength() / 2);
          g.scrollIntoView({block: 'center'});
          var at = p.matrixTransform(line.getScreenCTM());
          var hit = document.elementFromPoint(at.x, at.y);
          return [hit && hit.closest('g.edge') === g, g.querySelector('title').textContent];
        })()""")
        self.assertTrue(found[0], found)
        # the second graph, of the largest |scores|, is inside a closed <details> until its summary is clicked
        self.assertFalse(BROWSER.evaluate("document.getElementById('edges-graph').checkVisibility()"))
        BROWSER.evaluate("document.querySelector('details > summary').click()")
        BROWSER.wait_for("document.getElementById('edges-graph').checkVisibility()")
        everything = BROWSER.evaluate(graph + "('edges-graph')")
        self.assertGreater(len(everything["edges"]), len(drawn["edges"]))
        self.assertTrue(all(e["length"] > 20 and e["inside"] for e in everything["edges"]))

    def test_encoder_decoder_viewer(self):
        checkpoint = Fixtures.checkpoint("encdec", rc.ENC_DEC)
        self.open([checkpoint, "--tokens", "3 4 5", "--target", "2 6 7"], "attention_encdec")
        names = BROWSER.evaluate("document.getElementById('attention').data.map(t => t.name)")
        self.assertEqual(len(names), 3 * 2 * 2)  # enc_self, dec_self, cross x 2 layers x 2 heads
        self.assertEqual({n.split(" ·")[0] for n in names}, {"enc_self", "dec_self", "cross"})


if __name__ == "__main__":
    if MISSING:  # ctest shows exit status 77 as "Skipped" (SKIP_RETURN_CODE)
        print(f"skipped: {MISSING}")
        raise SystemExit(77)
    rc.main()
