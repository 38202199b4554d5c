#!/usr/bin/python3
"""One self-contained interactive HTML report of attnlab runs, sweeps or attention maps.

    tools/report.py RUN_DIR --out report.html
    tools/report.py RUN_DIR RUN_DIR ... --out report.html
    tools/report.py SWEEP_DIR --out report.html
    tools/report.py CHECKPOINT.h5 --tokens "3 7 5 1" [--target "2 9"] --out report.html [--attnlab BIN]
    tools/report.py CHECKPOINT.h5 --tokens "3 7 5 1 | 4 4 2" --out report.html     (two prompts)
    tools/report.py RUN_DIR --tokens "3 7 5 1" --out report.html      (its newest checkpoint)
    tools/report.py CHECKPOINT.circuit.h5 --out report.html

`attnlab report PATH... --out report.html` runs this script (with --attnlab set
to itself). What the report holds depends on PATH:

  a run folder      the summary, loss and accuracy curves (train and held-out),
                    per layer x head heatmaps over training of entropy, normalised
                    entropy, masked mass and score std (metrics.h5), the audit if
                    one was saved (RUN/audit.json or RUN/checkpoints/step_N.audit.json:
                    `attnlab audit CHECKPOINT --json > ...`), the newest ablation
                    (RUN/checkpoints/step_N.ablation.h5, `attnlab ablate`'s default
                    output) and the resolved config
  several runs      their curves overlaid, a summary table and the config keys that differ
  a sweep folder    the summary tables (sortable), final accuracy and steps to the
                    target against the first swept key (seed error bars), every
                    cell's curves, the initial score std against head width (or the
                    first swept key), every head's final normalised entropy
  a checkpoint      with --tokens (a run folder with --tokens: its newest
                    checkpoint): `attnlab inspect` of that prompt; every kind,
                    layer and head with token labels: a grid of every head of the
                    layer picked, the big map of the head hovered or clicked (or
                    picked in its menu), the prompt's tokens (hover one: its row and
                    column outlined, every key shaded by its weight), and the
                    weights of the query clicked on. Several prompts go in one
                    --tokens separated by " | " (a bar with a space each side; so a
                    text prompt cannot hold " | "): each is inspected, and a menu
                    picks the prompt shown
  a circuit file    (`attnlab circuit`'s output; reported alone, no --tokens) the
                    graph of its edges by layer, embed to logits (the circuit's
                    edges when it was pruned, else the largest |scores|; width
                    |value|, colour sign, each edge's score on hover), the
                    faithfulness curve, score against exact effect, the top edges

The file embeds plotly.js (Debian's python3-plotly) and makes no network request:
it opens offline. It is written to a temporary name and renamed. Bad input (a
missing path, a folder that is neither run nor sweep, an unreadable or garbled
file, a non-checkpoint with --tokens, an empty prompt among several, a circuit
file with --tokens or with other paths, an --out in a missing folder) prints one line naming it and exits with
status 2, writing nothing. --out never replaces an
input or an existing file that is not an HTML report, and inside a run or sweep
folder it must be an .html file outside the folders attnlab writes (checkpoints/,
cells/, logs/, tb/).

Needs Debian's /usr/bin/python3 with python3-h5py, python3-numpy and python3-plotly.
"""
import argparse
import glob
import importlib
import os
import re
import signal
import subprocess
import sys
import tempfile

PROG = "report"


class ArgumentError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise ArgumentError(message)


def parse(argv):
    parser = Parser(prog="report.py", description=__doc__.split("\n\n")[0],
                    epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="run folder(s), a sweep folder, a checkpoint, or a circuit file")
    parser.add_argument("--out", required=True, metavar="REPORT.html", help="the HTML file to write")
    parser.add_argument("--tokens", help="with a checkpoint: token ids of the prompt, \"3 7 5 1\"; several prompts "
                                         "separated by \" | \", \"3 7 5 1 | 4 4 2\"")
    parser.add_argument("--target", help="with an encoder-decoder checkpoint: decoder input ids (default \"2\")")
    parser.add_argument("--attnlab", default=os.environ.get("ATTNLAB", "attnlab"),
                        help="the attnlab binary that runs `inspect` for a checkpoint (default $ATTNLAB or attnlab)")
    parser.add_argument("--prog", default=PROG, help=argparse.SUPPRESS)  # message prefix ("attnlab report")
    return parser.parse_args(argv)


# Folders of a run or sweep that only attnlab writes into.
ATTNLAB_FOLDERS = ("checkpoints", "cells", "logs", "tb")
REPORT_SUFFIXES = (".html", ".htm")


def is_attnlab_folder(folder):
    """A run folder (metrics.h5, or config.toml beside checkpoints/; a sweep's cell is one) or a sweep folder."""
    def has(name):
        return os.path.exists(os.path.join(folder, name))
    return has("metrics.h5") or has("sweep.toml") or has("config.toml") and has("checkpoints")


def run_folder_of(path):
    """The nearest folder above `path` that is a run or a sweep folder, or None."""
    folder = os.path.dirname(os.path.realpath(path))
    while True:
        if is_attnlab_folder(folder):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def check_out(out, inputs):
    """--out names a file the report may write: never an input, never a file other
    than an HTML report (an existing file is replaced only when it is one), and
    inside a run or sweep folder only an .html file outside the folders that
    attnlab itself writes (checkpoints/, cells/, logs/, tb/). Returns the identity
    (st_dev, st_ino) of the report found there, which alone may be replaced, or None."""
    from report_load import ReportError
    if not out:
        raise ReportError("--out: empty path")
    if os.path.isdir(out):
        raise ReportError(f"--out {out} is a directory")
    if os.path.lexists(out) and not os.path.isfile(out) or os.path.islink(out):
        # replacing it would destroy it (a device such as /dev/full, a FIFO) or what a link points at
        raise ReportError(f"--out {out} exists and is not a regular file; refusing to replace it")
    folder = os.path.dirname(out) or "."
    if not os.path.isdir(folder):
        raise ReportError(f"--out {out}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise ReportError(f"--out {out}: folder {folder} is not writable")
    for path in inputs:
        if os.path.exists(path) and os.path.exists(out) and os.path.samefile(path, out):
            raise ReportError(f"--out {out} is one of the inputs")
    html = out.lower().endswith(REPORT_SUFFIXES)
    if os.path.exists(out) and not html:
        raise ReportError(f"--out {out} exists and is not an HTML report (.html); refusing to replace it")
    owner = run_folder_of(out)
    if owner is not None:
        inside = os.path.relpath(os.path.realpath(out), owner).split(os.sep)
        if not html:
            raise ReportError(f"--out {out} is inside the attnlab folder {owner}: only a report (.html) may go there")
        if len(inside) > 1 and inside[0] in ATTNLAB_FOLDERS:
            raise ReportError(f"--out {out} is inside {os.path.join(owner, inside[0])}, which attnlab writes; "
                              "put the report elsewhere")
    from output_files import file_id
    return file_id(out)


def hdf5_format(path):
    """The root `format` attribute of an HDF5 file ("attnlab-circuit", ...), "" without
    one, None for a file that is no HDF5 file (or no regular file: a FIFO is never
    opened). libhdf5 reads the file in a child first (report_load.open_h5)."""
    import h5py
    from report_load import open_h5, reading, text
    try:
        if not os.path.isfile(path) or not h5py.is_hdf5(path):  # is_hdf5 reads the signature only
            return None
    except OSError:
        return None  # unreadable: the reader that needs it says so
    with open_h5(path) as f, reading(path):
        return text(f.attrs.get("format", ""))


def kind_of(path):
    """'run', 'sweep', 'circuit' or 'checkpoint' for an input PATH, or a ReportError saying why not."""
    from report_load import ReportError
    if not os.path.exists(path):
        raise ReportError(f"{path}: no such file or folder")
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "sweep.toml")):
            return "sweep"
        if os.path.isfile(os.path.join(path, "metrics.h5")):
            return "run"
        if os.path.isfile(os.path.join(path, "config.toml")):
            raise ReportError(f"{path}: a run folder without metrics.h5 (has the run started?)")
        raise ReportError(f"{path}: neither a run folder (metrics.h5, config.toml) nor a sweep folder (sweep.toml)")
    if hdf5_format(path) == "attnlab-circuit":
        return "circuit"
    return "checkpoint"  # any other file: `attnlab inspect` says what it is not


def inspect(attnlab, checkpoint, tokens, target, scratch, name="inspect.h5"):
    """Runs `attnlab inspect` into scratch/name; its error becomes a ReportError."""
    from report_load import ReportError
    out = os.path.join(scratch, name)
    command = [attnlab, "inspect", checkpoint, "--tokens", tokens, "--out", out]
    if target is not None:
        command += ["--target", target]
    try:
        result = subprocess.run(command, capture_output=True, text=True, errors="replace")
    except OSError as e:
        raise ReportError(f"cannot run {attnlab} inspect ({e.strerror}; give the binary with --attnlab)") from None
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        message = lines[-1] if lines else f"exit status {result.returncode}"
        for prefix in ("attnlab inspect: ", "[inspect] ", "[checkpoint] "):
            message = message.removeprefix(prefix)
        raise ReportError(message if message.startswith(checkpoint + ":") else f"{checkpoint}: {message}")
    return out


PROMPT_SEPARATOR = " | "


def prompts_of(tokens):
    """The prompts of --tokens: split at " | "; one prompt (no separator) is passed on as given."""
    from report_load import ReportError
    prompts = tokens.split(PROMPT_SEPARATOR)
    if len(prompts) > 1:
        for i, prompt in enumerate(prompts, 1):
            if not prompt:
                raise ReportError(f"--tokens: prompt {i} of {len(prompts)} is empty (prompts are separated by \" | \")")
    return prompts


def inspections(attnlab, checkpoint, prompts, target):
    """load_inspection of `attnlab inspect` of each prompt; an error names the prompt when there are several."""
    from report_load import ReportError, load_inspection
    out = []
    with tempfile.TemporaryDirectory(prefix="attnlab_report_") as scratch:
        for i, prompt in enumerate(prompts, 1):
            try:
                out.append(load_inspection(inspect(attnlab, checkpoint, prompt, target, scratch, f"inspect_{i}.h5")))
            except ReportError as e:
                raise ReportError(str(e) if len(prompts) == 1 else f"{e} (prompt {i} of {len(prompts)})") from None
    return out


def newest_checkpoint(folder):
    from report_load import ReportError
    paths = glob.glob(os.path.join(glob.escape(folder), "checkpoints", "step_*.h5"))
    steps = [(int(m.group(1)), p) for p in paths if (m := re.fullmatch(r"step_(\d+)\.h5", os.path.basename(p)))]
    if not steps:
        raise ReportError(f"{folder}: a run folder without checkpoints/step_*.h5 (give a checkpoint file)")
    return max(steps)[1]


def build(args):
    """The report's Page for the inputs, or a ReportError."""
    from report_load import ReportError, Run, Sweep
    kinds = [kind_of(p) for p in args.paths]
    if kinds == ["run"] and args.tokens is not None:  # a run folder stands for its newest checkpoint
        args.paths = [newest_checkpoint(args.paths[0])]
        kinds = ["checkpoint"]
    if "circuit" in kinds:
        if len(args.paths) > 1:
            raise ReportError("a circuit file is reported alone (give one CHECKPOINT.circuit.h5)")
        if args.tokens is not None or args.target is not None:
            raise ReportError(f"{args.paths[0]}: a circuit file; --tokens and --target go with a checkpoint")
        from report_circuit import circuit_page, load_circuit
        return circuit_page(load_circuit(args.paths[0]))
    if "checkpoint" in kinds:
        if len(args.paths) > 1:
            raise ReportError("a checkpoint is reported alone (give one CHECKPOINT with --tokens)")
        if args.tokens is None:
            found = hdf5_format(args.paths[0])
            if found and found != "attnlab-checkpoint":
                raise ReportError(f"{args.paths[0]}: an HDF5 file of format {found[:40]!r}; the report reads run "
                                  "and sweep folders, a checkpoint with --tokens and an `attnlab circuit` file")
            raise ReportError(f"{args.paths[0]}: a file; for a checkpoint give --tokens \"3 7 5 1\" (the prompt whose "
                              "attention to show); for a run give its folder")
        from report_attention import attention_page
        prompts = prompts_of(args.tokens)
        return attention_page(inspections(args.attnlab, args.paths[0], prompts, args.target), prompts)
    if args.tokens is not None or args.target is not None:
        raise ReportError("--tokens and --target go with one checkpoint (a file, or a run folder for its newest)")
    if "sweep" in kinds:
        if len(args.paths) > 1:
            raise ReportError("a sweep folder is reported alone (its cells are runs: give those to compare runs)")
        from report_sweep import sweep_page
        return sweep_page(Sweep(args.paths[0]))
    from report_run import run_page, runs_page
    runs = [Run(p) for p in args.paths]
    return run_page(runs[0]) if len(runs) == 1 else runs_page(runs)


def interrupted(number, frame):
    raise KeyboardInterrupt


def write_report(path, text, seen):
    """The report, written as attnlab writes its outputs (tools/output_files.py)."""
    from output_files import write_output

    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    write_output(path, write, seen)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    prog = PROG
    if "--prog" in argv[:-1]:
        prog = argv[argv.index("--prog") + 1]
    try:
        args = parse(argv)
    except ArgumentError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    try:
        for module in ("plotly", "h5py", "numpy"):
            importlib.import_module(module)
    except ImportError as e:
        print(f"{prog}: {sys.executable} lacks {e.name} (install Debian's python3-plotly and python3-h5py, "
              "or run scripts/setup.sh)", file=sys.stderr)
        return 2
    from output_files import OutputKept
    from report_load import ReportError
    for sig in (signal.SIGTERM, signal.SIGHUP):  # as SIGINT: the temporary file is removed on the way out
        signal.signal(sig, interrupted)
    try:
        seen = check_out(args.out, args.paths)
        page = build(args)
        write_report(args.out, page.html(), seen)
    except (ReportError, OutputKept) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # nothing written: the temporary file is removed on the way out
        print(f"{prog}: interrupted; nothing written", file=sys.stderr)
        return 130
    except OSError as e:  # writing the report, or a file that vanished while it was read
        print(f"{prog}: {e.filename or args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    except Exception as e:  # our own bug: one line, as attnlab's commands say it
        where = e.__traceback__
        while where.tb_next:
            where = where.tb_next
        print(f"{prog}: internal error: {type(e).__name__}: {e} ({os.path.basename(where.tb_frame.f_code.co_filename)}:"
              f"{where.tb_lineno}; please report it with the command line)", file=sys.stderr)
        return 1
    size = os.path.getsize(args.out) / 1e6
    print(f"wrote {args.out}: {len(page.charts)} charts, {size:.1f} MB")  # most of it plotly.js
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
