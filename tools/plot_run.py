#!/usr/bin/python3
"""PNG plots of an attnlab run, from its metrics.h5 (while it trains or after).

    tools/plot_run.py RUN_DIR [--out DIR] [--watch SECONDS]

RUN_DIR is a run folder (runs/<name>/, holding metrics.h5) or the metrics.h5
file itself. Writes into DIR (default RUN_DIR/plots):

    loss_acc.png            train loss and eval loss (log scale) against step;
                            eval token and sequence accuracy against step
    attention_<kind>.png    one per attention kind (self; or enc_self, dec_self,
                            cross): entropy (nats), normalised entropy (entropy /
                            log(eligible keys), in [0, 1]) and masked mass, one
                            line per layer/head (colour = head, line style = layer)
    head_scores.png         with train.head_scores: the eval loss and the loss on the
                            repeated-token batch, each head's induction score and
                            previous-token score, against step; a dashed line marks
                            the first step some head's induction score is >= 0.5
                            (Olsson et al.'s phase change)
    overview.png            all of the above but the head scores in one figure

Masked mass is the attention weight on ineligible keys (padding, the future):
with a correct mask it is exactly 0, and the panel's title says so; any other
value is a masking bug made visible, and the title then says NONZERO and gives
the largest value seen (from masked_mass_max).

The log is opened in SWMR mode, so a run that is still training can be plotted;
rows being appended at that moment are cut to the length every series of a
group has. --watch re-plots every SECONDS until interrupted (Ctrl-C).

Needs Debian's /usr/bin/python3 with python3-h5py, python3-numpy, python3-matplotlib.
"""
import argparse
import os
import sys
import time
import tomllib

import matplotlib

import h5_probe
from output_files import save_figure

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

LINESTYLES = ["-", "--", ":", "-."]


def open_metrics(path):
    try:
        return h5_probe.open_file(path, swmr=True)  # a crafted file: one line, not a crash
    except h5_probe.H5ProbeError:
        raise  # its message names the file
    except OSError as error:  # h5py's message does not name the file
        raise OSError(f"{path}: {error}") from None


def read_group(f, name, fields):
    """{field: array} for a series group, every field cut to the shortest length
    (a writer may be between appending one series and the next)."""
    if name not in f:
        return None
    group = f[name]
    data = {}
    for field in fields:
        if field in group:
            dataset = group[field]
            dataset.refresh()
            data[field] = dataset[()]
    if "step" not in data:
        return None
    n = min(len(v) for v in data.values())
    return {k: v[:n] for k, v in data.items()}


def load(path):
    """(config, train, eval, {kind: attention series}, head scores or None); a garbled file is an OSError naming it."""
    try:
        return read_metrics(path)
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as error:  # h5py on a damaged file
        first = str(error).splitlines()[0] if str(error) else ""
        raise OSError(f"{path}: cannot read ({type(error).__name__}: {first})") from None


def read_metrics(path):
    with open_metrics(path) as f:
        attrs = dict(f.attrs)
        config_text = attrs.get("config", "")
        if isinstance(config_text, bytes):
            config_text = config_text.decode()
        try:
            config = tomllib.loads(config_text)
        except tomllib.TOMLDecodeError:
            config = {}
        train = read_group(f, "train", ["step", "loss", "lr", "grad_norm"])
        evaluation = read_group(f, "eval", ["step", "loss", "token_acc", "seq_acc"])
        train_set = read_group(f, "eval_train", ["step", "loss", "token_acc", "seq_acc"])  # task.train_size only
        if evaluation is not None and train_set is not None:
            evaluation["train_set"] = train_set
        kinds = {}
        if "attention" in f:
            for kind in f["attention"]:
                kinds[kind] = read_group(f, "attention/" + kind,
                                         ["step", "entropy", "entropy_norm", "masked_mass", "masked_mass_max"])
        heads = read_group(f, "head_scores", ["step", "previous_token", "duplicate_token", "induction", "repeat_loss"])
    return config, train, evaluation, kinds, heads


def title_of(config, run_dir):
    run, task, model = config.get("run", {}), config.get("task", {}), config.get("model", {})
    name = run.get("name", os.path.basename(os.path.abspath(run_dir)))
    parts = [name]
    if task.get("name") == "file":
        parts.append(f"task file ({os.path.basename(task.get('path', ''))}, vocab {task.get('vocab')})")
    elif task.get("name") == "modular":
        parts.append(f"task modular (a {task.get('op')} b mod {task.get('modulus')})")
    elif task:
        what = "pairs" if task.get("name") == "recall" else "lengths"
        parts.append(f"task {task.get('name')} ({what} {task.get('min_len')}-{task.get('max_len')}, vocab {task.get('vocab')})")
    if model:
        parts.append(f"{model.get('kind')} {model.get('layers')} layers x width {model.get('width')}, "
                     f"{model.get('heads')} heads")
    return " | ".join(parts)


def plot_loss(ax, train, evaluation):
    if train is not None and len(train["step"]):
        ax.plot(train["step"], train["loss"], label="train loss", color="tab:blue")
    if evaluation is not None and len(evaluation["step"]):
        ax.plot(evaluation["step"], evaluation["loss"], "o-", label="eval loss", color="tab:red", markersize=3)
        if "train_set" in evaluation:  # a finite training set, evaluated as the held-out examples are
            ax.plot(evaluation["train_set"]["step"], evaluation["train_set"]["loss"], "^-", label="train-set loss (eval)",
                    color="tab:green", markersize=3)
    if ax.lines and all(np.all(line.get_ydata() > 0) for line in ax.lines):
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title("loss")
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend()


def plot_accuracy(ax, evaluation):
    if evaluation is not None and len(evaluation["step"]):
        ax.plot(evaluation["step"], evaluation["token_acc"], "o-", label="eval token accuracy", markersize=3)
        ax.plot(evaluation["step"], evaluation["seq_acc"], "s--", label="eval sequence accuracy", markersize=3)
        if "train_set" in evaluation:
            ax.plot(evaluation["train_set"]["step"], evaluation["train_set"]["token_acc"], "^-", label="train-set token accuracy",
                    color="tab:green", markersize=3)
        ax.legend(loc="lower right")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy")
    ax.set_title("held-out accuracy")
    ax.grid(True, alpha=0.3)


def plot_per_head(ax, steps, values, ylabel, title):
    """values: [K, layers, heads]; one line per (layer, head)."""
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if values.ndim == 3:
        layers, heads = values.shape[1], values.shape[2]
        for layer in range(layers):
            for head in range(heads):
                ax.plot(steps, values[:, layer, head], color=colours[head % len(colours)],
                        linestyle=LINESTYLES[layer % len(LINESTYLES)], label=f"L{layer} H{head}")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)


def plot_attention_row(axes, kind, series):
    steps = series["step"]
    plot_per_head(axes[0], steps, series["entropy"], "entropy (nats)", f"{kind}: entropy per head")
    plot_per_head(axes[1], steps, series["entropy_norm"], "entropy / log(eligible keys)",
                  f"{kind}: normalised entropy")
    axes[1].set_ylim(-0.02, 1.02)
    worst = float(np.max(series["masked_mass_max"])) if series["masked_mass_max"].size else 0.0
    verdict = "all 0 (mask correct)" if worst == 0.0 else f"NONZERO, max {worst:.3g}"
    plot_per_head(axes[2], steps, series["masked_mass"], "weight on ineligible keys",
                  f"{kind}: masked mass — {verdict}")
    if worst == 0.0:
        axes[2].set_ylim(-0.05, 1.0)  # a flat line at 0, not an autoscaled empty band
    if axes[0].lines:
        axes[0].legend(fontsize="x-small", ncol=2)


def plot_head_scores(axes, evaluation, heads):
    """Olsson et al.'s phase change: the losses, then the induction and previous-token scores per head."""
    steps = heads["step"]
    formed = steps[heads["induction"].reshape(len(steps), -1).max(axis=1) >= 0.5]
    ax = axes[0]
    if evaluation is not None and len(evaluation["step"]):
        ax.plot(evaluation["step"], evaluation["loss"], "-", label="eval loss", color="tab:red")
    ax.plot(steps, heads["repeat_loss"], "--", label="loss on the repeated-token batch", color="tab:purple")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title("loss")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    plot_per_head(axes[1], steps, heads["induction"], "attention to the token after the earlier copy",
                  "induction score per head")
    plot_per_head(axes[2], steps, heads["previous_token"], "attention to the previous token", "previous-token score per head")
    for ax in axes[1:]:
        ax.set_ylim(-0.02, 1.02)
    axes[1].legend(fontsize="x-small", ncol=2)
    if len(formed):
        for ax in axes:
            ax.axvline(formed[0], color="grey", linestyle=":", linewidth=1)
        axes[1].set_title(f"induction score per head (first >= 0.5 at step {formed[0]})")


def save(fig, path):
    save_figure(fig, path, dpi=110)  # a viewer never sees half a file, two writers never share a temporary
    plt.close(fig)


def plot(run_dir, out_dir):
    path = run_dir if run_dir.endswith(".h5") else os.path.join(run_dir, "metrics.h5")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file (is {run_dir} a run folder?)")
    config, train, evaluation, kinds, heads = load(path)
    title = title_of(config, os.path.dirname(path))
    kinds = {k: v for k, v in kinds.items() if v is not None and len(v["step"])}
    os.makedirs(out_dir, exist_ok=True)
    written = []

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), layout="constrained")
    plot_loss(axes[0], train, evaluation)
    plot_accuracy(axes[1], evaluation)
    fig.suptitle(title, fontsize="medium")
    written.append(os.path.join(out_dir, "loss_acc.png"))
    save(fig, written[-1])

    for kind, series in kinds.items():
        fig, axes = plt.subplots(1, 3, figsize=(16, 4.4), layout="constrained")
        plot_attention_row(axes, kind, series)
        fig.suptitle(title, fontsize="medium")
        written.append(os.path.join(out_dir, f"attention_{kind}.png"))
        save(fig, written[-1])

    if heads is not None and len(heads["step"]):
        fig, axes = plt.subplots(1, 3, figsize=(16, 4.4), layout="constrained")
        plot_head_scores(axes, evaluation, heads)
        fig.suptitle(title, fontsize="medium")
        written.append(os.path.join(out_dir, "head_scores.png"))
        save(fig, written[-1])

    rows = 1 + len(kinds)
    fig = plt.figure(figsize=(16, 4 * rows + 0.4), layout="constrained")
    grid = fig.add_gridspec(rows, 6)
    plot_loss(fig.add_subplot(grid[0, 0:3]), train, evaluation)
    plot_accuracy(fig.add_subplot(grid[0, 3:6]), evaluation)
    for row, (kind, series) in enumerate(kinds.items(), start=1):
        plot_attention_row([fig.add_subplot(grid[row, 2 * i:2 * i + 2]) for i in range(3)], kind, series)
    fig.suptitle(title, fontsize="medium")
    written.append(os.path.join(out_dir, "overview.png"))
    save(fig, written[-1])
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", metavar="RUN_DIR", help="run folder (runs/<name>) or its metrics.h5")
    parser.add_argument("--out", metavar="DIR", help="where the PNGs go (default RUN_DIR/plots)")
    parser.add_argument("--watch", metavar="SECONDS", type=float,
                        help="re-plot every SECONDS while the run trains (Ctrl-C stops)")
    args = parser.parse_args(argv)
    run_dir = args.run_dir.rstrip("/") or "/"
    base = os.path.dirname(run_dir) if run_dir.endswith(".h5") else run_dir
    out_dir = args.out or os.path.join(base, "plots")
    try:
        while True:
            try:
                for path in plot(run_dir, out_dir):
                    print(path, flush=True)
            except OSError as error:  # no metrics.h5 (yet), or h5py cannot read it
                if not args.watch:
                    print(f"plot_run: {error}", file=sys.stderr)
                    return 2
                print(f"plot_run: {error}; retrying in {args.watch:g} s", file=sys.stderr, flush=True)
            if not args.watch:
                return 0
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
