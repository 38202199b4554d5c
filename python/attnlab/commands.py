"""The CLI's experiments from Python: attnlab.train, patch, ablate and lens run
the `attnlab` binary itself (the same code, messages and files as on the
command line) and return the run folder or the command's HDF5 result as arrays.

A bad argument raises ValueError with the CLI's one line (exit status 2);
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


def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ValueError(f"config value {value!r}: expected a bool, number, string or list")


def _overrides(config, overrides):
    """key=value arguments from a config dict ({"model": {"heads": 4}} or
    {"model.heads": 4}) and keyword overrides (model__heads=4)."""
    flat = {}

    def add(prefix, table):
        for key, value in table.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict):
                add(name, value)
            else:
                flat[name] = value
    add("", config or {})
    add("", {key.replace("__", "."): value for key, value in overrides.items()})
    return [f"{key}={_toml_value(value)}" for key, value in flat.items()]


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
    if resume is not None:
        if config is not None or overrides or keyword_overrides:
            raise ValueError("train: resume takes no config and no overrides (a run continues with its own config.toml)")
        args = ["train", "--resume", os.fspath(resume)]
    else:
        args = ["train"]
        table = None
        if isinstance(config, (str, os.PathLike)):
            if not os.path.isfile(config):
                raise FileNotFoundError(f"{os.fspath(config)}: no such config file")
            args.append(os.fspath(config))
        elif config is not None:
            if not isinstance(config, dict):
                raise ValueError("train: config must be a TOML path or a dict")
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
    with h5py.File(path, "r") as f:
        result = read(f)
        result["attrs"] = {key: text(value) for key, value in f.attrs.items()}
    return result


def _command(name, checkpoint, options, echo):
    """`attnlab NAME CHECKPOINT --out TMP OPTIONS...`, its file read back."""
    folder = tempfile.mkdtemp(prefix=f"attnlab_{name}_")
    try:
        out = os.path.join(folder, "out.h5")
        args = [name, os.fspath(checkpoint), "--out", out]
        for key, value in options.items():
            flag = "--" + key.replace("_", "-")
            if value is None or value is False:
                continue
            if value is True:
                args.append(flag)
            elif isinstance(value, (list, tuple, np.ndarray)):
                items = list(value)
                args += [flag, ",".join(items) if all(isinstance(v, str) for v in items) else " ".join(str(int(v)) for v in items)]
            else:
                args += [flag, str(value)]
        status, lines = _run(args, echo=echo)
        _checked(status, lines)
        return read_h5(out)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def patch(checkpoint, quiet=True, **options):
    """`attnlab patch` (clean=[...], corrupt=[...], answers="9:8", hooks=["z", "v"],
    per_position=True, noising=True, metric=..., pairs=FILE): its .patch.h5 as a dict
    (result["grid"]["z"]["values"] with result["grid"]["z_axes"] = ("layer", "head"))."""
    return _command("patch", checkpoint, options, not quiet)


def ablate(checkpoint, quiet=True, **options):
    """`attnlab ablate` (batches=..., seed=..., together="1.0+1.1"): its .ablation.h5 as a dict."""
    return _command("ablate", checkpoint, options, not quiet)


def lens(checkpoint, quiet=True, **options):
    """`attnlab lens` (tokens=[...], target=[...]): its .lens.h5 as a dict."""
    return _command("lens", checkpoint, options, not quiet)
