#!/usr/bin/python3
"""tools/plot_sweep.py on a tiny real sweep whose first swept key is a string
(model.scale) and where no cell reaches the target: every chart is drawn (the
score-std chart has its points, on categories or head widths), the steps chart
says that no cell reached the target instead of being empty, and the entropy
grid has a colour bar and tick labels. Each figure is caught as the script
closes it and its matplotlib artists are checked.

    /usr/bin/python3 tests/tools/test_plot_sweep.py ATTNLAB_BINARY REPO_ROOT
"""
import math
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import report_common as rc  # noqa: E402


def tearDownModule():
    rc.Fixtures.cleanup()


class PlotSweep(rc.cc.TempDirTest):
    def plot(self, sweep, *extra):
        """Runs plot_sweep.main on the sweep; {png name: figure} of what it drew."""
        sys.path.insert(0, os.path.join(rc.cc.REPO_ROOT, "tools"))
        import plot_sweep
        figures = {}
        close = plot_sweep.plt.close

        def keep(fig=None):
            if hasattr(fig, "_saved_to"):
                figures[os.path.basename(fig._saved_to)] = fig
            else:
                close(fig)

        def savefig(fig, path, **kwargs):
            fig._saved_to = path
            return original_savefig(fig, path, **kwargs)
        original_savefig = plot_sweep.plt.Figure.savefig
        plot_sweep.plt.close = keep
        plot_sweep.plt.Figure.savefig = savefig
        argv = sys.argv
        try:
            sys.argv = ["plot_sweep.py", sweep, "--out", self.tmp] + list(extra)
            self.assertEqual(plot_sweep.main(), 0)
        finally:
            plot_sweep.plt.close = close
            plot_sweep.plt.Figure.savefig = original_savefig
            sys.argv = argv
        self.assertEqual(sorted(figures), ["accuracy.png", "entropy_heads.png", "score_std.png", "steps_to_target.png"])
        for name in figures:
            self.assertTrue(os.path.getsize(self.path(name)) > 1000, name)
        return figures

    @staticmethod
    def points(ax):
        """The finite data points of a chart's lines (an error bar's data line, not its caps)."""
        lines = [c.lines[0] for c in ax.containers if c.lines and c.lines[0] is not None] or ax.lines
        return [(x, y) for line in lines for x, y in zip(line.get_xdata(), line.get_ydata())
                if not math.isnan(float(y))]

    def test_string_first_key_and_no_target(self):
        figures = self.plot(rc.Fixtures.sweep())
        # accuracy against model.scale (the grid's first key): categories sqrt, none
        ax = figures["accuracy.png"].axes[0]
        self.assertEqual(ax.get_xlabel(), "model.scale")
        self.assertEqual([t.get_text() for t in ax.get_xticklabels()], ["sqrt", "none"])
        self.assertEqual(len(self.points(ax)), 4)  # 2 scales x 2 head widths
        # no cell reached 0.99 in 40 steps: said on the chart
        ax = figures["steps_to_target.png"].axes[0]
        self.assertEqual(self.points(ax), [])
        self.assertTrue(any("no cell reached train.target_accuracy = 0.99" in t.get_text() for t in ax.texts))
        # score std: the grid changes the head width (4, 8), so that is the x axis; one line per scale
        ax = figures["score_std.png"].axes[0]
        self.assertEqual(ax.get_xlabel(), "head width d_h")
        self.assertEqual(sorted({x for x, _ in self.points(ax)}), [4, 8])
        self.assertEqual(sorted(line.get_label() for line in ax.lines), ["model.scale=none", "model.scale=sqrt"])
        # entropy grid: one panel per cell with head and layer tick labels, and a colour bar
        fig = figures["entropy_heads.png"]
        panels = [a for a in fig.axes if a.images]
        self.assertEqual(len(panels), 8)
        self.assertEqual([t.get_text() for t in panels[0].get_xticklabels()], ["0", "1"])
        self.assertEqual([t.get_text() for t in panels[0].get_yticklabels()], ["0"])
        bars = [a for a in fig.axes if not a.images and a.get_ylabel().startswith("entropy")]
        self.assertEqual(len(bars), 1, "no colour bar")

    def test_string_key_for_score_std(self):
        """A grid over model.scale alone: the score-std chart is on the scale categories."""
        folder = rc.Fixtures.folder()
        config = os.path.join(folder, "scale_only.toml")
        with open(config, "w") as f:
            f.write(rc.SWEEP.replace('name = "grid"', 'name = "scale_only"').replace('"model.head_width" = [4, 8]\n', ""))
        r = rc.cc.attnlab(["sweep", config, "--jobs", "2"], folder, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        figures = self.plot(os.path.join(folder, "runs", "scale_only"))
        ax = figures["score_std.png"].axes[0]
        self.assertEqual(ax.get_xlabel(), "model.scale")
        self.assertEqual([t.get_text() for t in ax.get_xticklabels()], ["sqrt", "none"])
        self.assertEqual(sorted(x for x, _ in self.points(ax)), [0, 1])

    def test_some_reached(self):
        """A target some cells reach: their points are drawn, the others are named in a note."""
        folder = rc.Fixtures.folder()
        config = os.path.join(folder, "low_target.toml")
        with open(config, "w") as f:
            f.write(rc.SWEEP.replace('name = "grid"', 'name = "low_target"')
                    .replace("[train]\n", "[train]\ntarget_accuracy = 0.05\n"))
        r = rc.cc.attnlab(["sweep", config, "--jobs", "2"], folder, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        sweep = os.path.join(folder, "runs", "low_target")
        with h5py.File(os.path.join(sweep, "summary.h5"), "r") as f:
            first = f["aggregated/first_step_at_target"][()]
        figures = self.plot(sweep)
        ax = figures["steps_to_target.png"].axes[0]
        texts = " ".join(t.get_text() for t in ax.texts)
        reached = int(np.sum(~np.isnan(first)))
        self.assertEqual(len(self.points(ax)), reached)
        if reached == len(first):
            self.assertEqual(texts, "")
        elif reached == 0:
            self.assertIn("no cell reached train.target_accuracy = 0.05", texts)
        else:
            self.assertIn("not reached (0.05 within 40 steps)", texts)

if __name__ == "__main__":
    rc.main()
