"""The CLI's experiments from Python: attnlab.train, patch, ablate and lens run
the `attnlab` binary itself (the same code, messages and files as on the
command line) and return the run folder or the command's HDF5 result as arrays.

Every argument is checked before the binary runs (python/attnlab/inputs.py:
TypeError or ValueError naming it); then a bad argument the CLI refuses raises
ValueError with its one line (exit status 2);
Ctrl-C (KeyboardInterrupt) during train stops the run at a checkpoint, as
SIGINT does on the command line, and raises KeyboardInterrupt naming the run
folder to resume.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import h5py
import numpy as np

from attnlab import inputs


class CommandError(RuntimeError):
    """The binary failed for a reason that is not bad input (exit status 1)."""


def binary():
    """The attnlab binary: $ATTNLAB_BINARY, the build folder this package was
    built into (BUILD/python/attnlab -> BUILD/attnlab), the installation it was
    installed with (PREFIX/lib/python3.X/dist-packages/attnlab -> PREFIX/bin/attnlab),
    or `attnlab` on the PATH."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("ATTNLAB_BINARY"),
                  os.path.join(here, "..", "..", "attnlab"),
                  os.path.join(here, "..", "..", "..", "..", "bin", "attnlab"),
                  shutil.which("attnlab")]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)
    raise FileNotFoundError("the attnlab binary was not found (set ATTNLAB_BINARY, or build it with scripts/setup.sh)")


def _toml_value(value, key):
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v, key) for v in value) + "]"
    raise TypeError(f"{key}: {inputs.describe(value)} is not a config value (a bool, number, string or list of them)")


def _overrides(config, overrides):
    """key=value arguments from a config dict ({"model": {"heads": 4}} or
    {"model.heads": 4}) and keyword overrides (model__heads=4)."""
    flat = {}

    def add(prefix, table):
        for key, value in table.items():
            if not isinstance(key, str) or not key:
                raise TypeError(f"config: the key {inputs.describe(key)}{' in ' + prefix if prefix else ''} is not a name (a string)")
            name = f"{prefix}.{key}" if prefix else key
            if isinstance(value, dict):
                add(name, value)
            else:
                flat[name] = value
    add("", config or {})
    add("", {key.replace("__", "."): value for key, value in overrides.items()})
    return [f"{key}={_toml_value(value, key)}" for key, value in flat.items()]


def _run(args, echo=True):
    """Runs the binary; its output goes on to sys.stderr as it comes (a notebook
    shows it). Returns (exit status, output lines)."""
    proc = subprocess.Popen([binary()] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            encoding="utf-8", errors="replace", bufsize=1)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if echo:
                sys.stderr.write(line)
                sys.stderr.flush()
        return proc.wait(), lines
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)  # the CLI's own stop: a checkpoint, then exit 130
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if echo:
                sys.stderr.write(line)
        proc.wait()
        raise KeyboardInterrupt("\n".join(line for line in lines if "interrupted at step" in line) or "interrupted") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _checked(status, lines):
    if status == 2:  # bad input: the CLI's one line, without its "attnlab COMMAND: " prefix
        last = lines[-1] if lines else "bad input"
        raise ValueError(last.split(": ", 1)[1] if last.startswith("attnlab ") and ": " in last else last)
    if status != 0:
        raise CommandError(lines[-1] if lines else f"exit status {status}")


def train(config=None, overrides=None, resume=None, quiet=False, **keyword_overrides):
    """Trains as `attnlab train` does and returns the run folder.

    config: a TOML file's path, or a dict of the config's tables (or dotted keys);
    None trains the default experiment. overrides: {"model.heads": 4, ...};
    keyword overrides use '__' for the dot (model__heads=4). resume: a run folder
    to continue instead (`attnlab train --resume`)."""
    if overrides is not None and not isinstance(overrides, dict):
        raise TypeError(f"overrides: expected a dict {{\"model.heads\": 4, ...}}, got {inputs.describe(overrides)}")
    if resume is not None:
        resume = inputs.path(resume, "resume")
        if config is not None or overrides or keyword_overrides:
            raise ValueError("train: resume takes no config and no overrides (a run continues with its own config.toml)")
        args = ["train", "--resume", resume]
    else:
        args = ["train"]
        table = None
        if isinstance(config, (str, os.PathLike)):
            config = inputs.path(config, "config")
            if not os.path.isfile(config):
                raise FileNotFoundError(f"{config}: no such config file")
            args.append(config)
        elif config is not None:
            if not isinstance(config, dict):
                raise TypeError(f"config: expected a TOML file's path or a dict of tables, got {inputs.describe(config)}")
            table = config
        args += _overrides(table, dict(overrides or {}, **keyword_overrides))
    status, lines = _run(args, echo=not quiet)
    _checked(status, lines)
    for line in reversed(lines):
        if line.startswith("run ") and ": " in line:
            return line[4:line.index(": ")]
    raise CommandError("train finished without naming its run folder")


def read_h5(path):
    """An attnlab HDF5 file as a dict: groups as dicts, datasets as arrays,
    "attrs" the root's attributes; a dataset or group with an "axes" attribute
    ("layer,head,position") also gives its axis names as "<name>_axes"."""
    def text(value):
        return value.decode() if isinstance(value, bytes) else value

    path = inputs.path(path, "path")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ValueError(f"{path}: a folder, not an HDF5 file")

    def read(group):
        out = {}
        for name, item in group.items():
            if isinstance(item, h5py.Group):
                out[name] = read(item)
            else:
                value = item[()]
                out[name] = np.array([text(v) for v in value]) if value.dtype.kind in "OS" else value
            if "axes" in item.attrs:
                out[name + "_axes"] = tuple(str(text(item.attrs["axes"])).replace(",", " ").split())
        return out
    try:
        f = h5py.File(path, "r")
    except OSError as e:  # h5py's message names no file: "Unable to open file (file signature not found)"
        raise ValueError(f"{path}: not an HDF5 file h5py can read ({e})") from None
    with f:
        result = read(f)
        result["attrs"] = {key: text(value) for key, value in f.attrs.items()}
    return result


# The options whose lists are token ids (or, as a string, a text model's text),
# checked as Model.run checks tokens, and those whose lists are positions.
_TOKEN_OPTIONS = ("clean", "corrupt", "tokens", "target")
_POSITION_OPTIONS = ("positions",)


def _arguments(options):
    """--key value arguments from keyword options, each value checked: True a flag
    (False and None: left out), a list of token ids or positions space-separated,
    a list of names comma-separated, a number, a string or a path as itself."""
    args = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        value = inputs.as_numpy(value)
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value.item()
        if value is None or value is False or value is np.False_:
            continue
        if value is True or value is np.True_:
            args.append(flag)
        elif isinstance(value, (list, tuple, range, np.ndarray)):
            if key in _TOKEN_OPTIONS + _POSITION_OPTIONS:
                ids = inputs.sequence(value, key, "token" if key in _TOKEN_OPTIONS else "position")
                args += [flag, " ".join(map(str, ids))]
            elif any(isinstance(v, str) for v in value):
                args += [flag, ",".join(inputs.names(list(value), key, []))]
            else:
                args += [flag, " ".join(map(str, inputs.sequence(value, key, "number")))]
        elif isinstance(value, (str, os.PathLike)):
            args += [flag, inputs.path(value, key) if isinstance(value, os.PathLike) else value]
        elif isinstance(value, (int, float, np.integer, np.floating)):
            args += [flag, str(value.item() if isinstance(value, np.generic) else value)]
        else:
            raise TypeError(f"{key}: {inputs.describe(value)} is not an option value (a bool, number, string, path or list)")
    return args


def _command(name, checkpoint, options, echo):
    """`attnlab NAME CHECKPOINT --out OUT OPTIONS...`, its file read back: OUT the
    caller's `out=`, else a temporary file removed after."""
    checkpoint = inputs.path(checkpoint, "checkpoint")
    options = dict(options)
    out = options.pop("out", None)
    out = inputs.path(out, "out") if out is not None else None
    args = _arguments(options)  # every check before the binary runs and writes anything
    folder = None if out is not None else tempfile.mkdtemp(prefix=f"attnlab_{name}_")
    try:
        target = out if out is not None else os.path.join(folder, "out.h5")
        status, lines = _run([name, checkpoint, "--out", target] + args, echo=echo)
        _checked(status, lines)
        return read_h5(target)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def patch(checkpoint, quiet=True, **options):
    """`attnlab patch` (clean=[...], corrupt=[...], answers="9:8", hooks=["z", "v"],
    per_position=True, noising=True, metric=..., pairs=FILE): its .patch.h5 as a dict
    (result["grid"]["z"]["values"] with result["grid"]["z_axes"] = ("layer", "head")).
    With out=FILE the file is also kept there (the CLI writes it as `--out` does)."""
    return _command("patch", checkpoint, options, not quiet)


def ablate(checkpoint, quiet=True, **options):
    """`attnlab ablate` (batches=..., seed=..., together="1.0+1.1"): its .ablation.h5 as a dict."""
    return _command("ablate", checkpoint, options, not quiet)


def lens(checkpoint, quiet=True, **options):
    """`attnlab lens` (tokens=[...], target=[...]): its .lens.h5 as a dict."""
    return _command("lens", checkpoint, options, not quiet)
