"""What tools/report.py reads: run folders (config.toml, metrics.h5, summary.json,
a saved audit, the newest ablation), sweep folders (sweep.toml, summary.h5) and
`attnlab inspect` files. Every problem is a ReportError with a one-line message
naming the file: each file is read inside `reading(path)`, which turns whatever
its reader raises into one, and what the pages use of it is checked here (types
and shapes), so a garbled file never reaches the drawing code.
"""
import contextlib
import glob
import json
import os
import re
import tomllib
import unicodedata

import h5py
import numpy as np

import h5_probe

ATTENTION_FIELDS = ["step", "entropy", "entropy_norm", "masked_mass", "masked_mass_max", "score_std"]
# /head_scores (train.head_scores): per-head scores and the loss on the repeated-token batch
HEAD_SCORE_FIELDS = ["step", "previous_token", "duplicate_token", "induction", "copying", "repeat_loss"]
# The generated tasks' special tokens (data/tasks.h); a token file's ids and a
# text model's characters have none.
SPECIAL_TOKENS = {0: "<PAD>", 1: "<SEP>", 2: "<BOS>"}
GENERATED_TASKS = {"copy", "reverse", "sort", "recall", "induction", "translate", "modular", "mqar"}
# Characters that would be invisible or break a label, shown as escapes.
VISIBLE = {" ": "\u2423", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


class ReportError(Exception):
    """Bad input: one line for stderr, exit status 2."""


def first_line(error):
    lines = str(error).splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


@contextlib.contextmanager
def reading(path):
    """Any failure while reading `path` (a decoding error, a garbled HDF5 object, a
    missing key or a value of the wrong type) as a ReportError naming it."""
    try:
        yield
    except ReportError:
        raise
    except UnicodeDecodeError as e:
        raise ReportError(f"{path}: not UTF-8 text (byte {e.start}: {e.object[e.start:e.start + 1]!r})") from None
    except OSError as e:
        raise ReportError(f"{path}: cannot read ({e.strerror or first_line(e)})") from None
    except RecursionError:
        raise ReportError(f"{path}: nested too deeply to read") from None
    except Exception as e:  # noqa: BLE001: a crafted file can make a reader raise anything
        raise ReportError(f"{path}: cannot read ({first_line(e)})") from None


def text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def character_label(ch):
    """A text model's character as a label: itself, or an escape when it would be
    invisible (a space as a visible-space sign, a newline as \\n, others U+XXXX)."""
    if ch in VISIBLE:
        return VISIBLE[ch]
    if unicodedata.category(ch)[0] in "CZ":  # control, format, unassigned, other spaces and separators
        return f"U+{ord(ch):04X}"
    return ch


def token_labeller(config):
    """token id -> label for the model whose resolved config (a dict) is given: a
    text model's character (token id = index into task.alphabet), a generated
    task's special-token name or id, a token file's id."""
    task = config.get("task", {}) if isinstance(config, dict) else {}
    task = task if isinstance(task, dict) else {}
    name = task.get("name")
    if name == "text" and isinstance(task.get("alphabet"), str):
        alphabet = task["alphabet"]
        return lambda t: character_label(alphabet[t]) if 0 <= t < len(alphabet) else f"id {t}"
    if name in GENERATED_TASKS:
        return lambda t: SPECIAL_TOKENS.get(t, str(t))
    return str


def read_toml(path):
    with reading(path), open(path, "rb") as f:
        try:
            return tomllib.load(f)  # a file that is not UTF-8: UnicodeDecodeError, which reading() words
        except tomllib.TOMLDecodeError as e:
            raise ReportError(f"{path}: not valid TOML ({e})") from None


def tables_of(path, config, names):
    """Refuses a config whose sections the report reads ([model], [train], ...) are not tables."""
    for name in names:
        if name in config and not isinstance(config[name], dict):
            raise ReportError(f"{path}: {name} is not a table")
    return config


def flatten(config, prefix=""):
    """{"model.width": 64, ...} from nested TOML tables, in file order."""
    out = {}
    for key, value in config.items():
        name = prefix + key
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def value_text(value):
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    return str(value)


def open_h5(path, swmr=False):
    """An HDF5 file, once a child process read it through (tools/h5_probe.py): a
    crafted file that crashes or hangs libhdf5 is a ReportError naming it."""
    try:
        return h5_probe.open_file(path, swmr)
    except h5_probe.H5ProbeError as e:
        raise ReportError(str(e)) from None
    except Exception as e:  # noqa: BLE001: OSError mostly; a crafted file can give others
        raise ReportError(f"{path}: cannot read as HDF5 ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None


def numbers(path, dataset, ndim):
    """A numeric dataset of `ndim` dimensions as an array (float or int), else a ReportError naming it."""
    if not isinstance(dataset, h5py.Dataset):
        raise ReportError(f"{path}: {dataset.name} is not a dataset")
    if dataset.dtype.kind not in "biuf" or dataset.ndim != ndim:
        raise ReportError(f"{path}: {dataset.name} holds {dataset.dtype} of shape {dataset.shape}; "
                          f"expected numbers in {ndim} dimension(s)")
    return np.asarray(dataset[()])


def strings(path, dataset):
    """A 1-D dataset of strings as a list."""
    if not isinstance(dataset, h5py.Dataset) or dataset.ndim != 1 or dataset.dtype.kind not in "OSU":
        raise ReportError(f"{path}: {dataset.name} is not a list of strings")
    return [text(v) for v in dataset[()]]


def read_series(path, f, name, fields, per_head=()):
    """{field: array} of one series group, every field cut to the shortest (a writer
    may be between appending one field and the next); None without the group.
    Fields are [K] arrays, those in `per_head` [K, layers, heads] alike."""
    if name not in f or not isinstance(f[name], h5py.Group):
        return None
    data = {}
    for field in fields:
        if field in f[name]:
            dataset = f[name][field]
            if isinstance(dataset, h5py.Dataset):
                dataset.refresh()
            data[field] = numbers(path, dataset, 3 if field in per_head else 1)
    if "step" not in data:
        return None
    shapes = {v.shape[1:] for k, v in data.items() if k in per_head}
    if len(shapes) > 1:
        raise ReportError(f"{path}: /{name} holds per-head series of different shapes {sorted(shapes)}")
    n = min(len(v) for v in data.values())
    return {k: v[:n] for k, v in data.items()}


def load_metrics(path):
    """(train, eval, {kind: attention series}, head scores or None) of a metrics.h5."""
    with open_h5(path, swmr=True) as f, reading(path):
        if text(f.attrs.get("format", "attnlab-metrics")) != "attnlab-metrics":
            raise ReportError(f"{path}: not an attnlab metrics file (format {text(f.attrs['format'])!r})")
        train = read_series(path, f, "train", ["step", "loss", "lr", "grad_norm", "token_acc"])
        evaluation = read_series(path, f, "eval", ["step", "loss", "token_acc", "seq_acc"])
        for series, group, needed in ((train, "train", ["loss"]), (evaluation, "eval", ["loss", "token_acc", "seq_acc"])):
            for field in needed:
                if series is not None and field not in series:
                    raise ReportError(f"{path}: /{group} has no {field}")
        kinds = {}
        if "attention" in f:
            if not isinstance(f["attention"], h5py.Group):
                raise ReportError(f"{path}: /attention is not a group")
            for kind in f["attention"]:
                series = read_series(path, f, "attention/" + kind, ATTENTION_FIELDS, per_head=ATTENTION_FIELDS[1:])
                if series is not None and len(series["step"]):
                    kinds[kind] = series
        heads = read_series(path, f, "head_scores", HEAD_SCORE_FIELDS, per_head=HEAD_SCORE_FIELDS[1:5])
        if heads is not None and not len(heads["step"]):
            heads = None
    return train, evaluation, kinds, heads


class Run:
    """One run folder: its resolved config, metrics, summary and saved analyses."""

    def __init__(self, folder):
        self.folder = folder.rstrip("/") or "/"
        self.name = os.path.basename(os.path.abspath(self.folder))
        self.label = self.name  # legend name, made unique among several runs
        config_path = os.path.join(self.folder, "config.toml")
        self.config = read_toml(config_path) if os.path.isfile(config_path) else {}
        tables_of(config_path, self.config, ("run", "task", "model", "train", "optim"))
        self.flat = flatten(self.config)
        self.metrics_path = os.path.join(self.folder, "metrics.h5")
        self.train, self.eval, self.attention, self.head_scores = load_metrics(self.metrics_path)
        summary_path = os.path.join(self.folder, "summary.json")
        self.summary = check_summary(summary_path, read_json(summary_path, optional=True))
        self.audit_path, self.audit = find_audit(self.folder)
        self.ablation_path = newest(os.path.join(self.folder, "checkpoints", "step_*.ablation.h5"))
        self.ablation = load_ablation(self.ablation_path) if self.ablation_path else None

    def head_width(self):
        model = self.config.get("model", {})
        whole = {k: model.get(k) for k in ("head_width", "width", "heads")
                 if isinstance(model.get(k), int) and not isinstance(model.get(k), bool) and model.get(k) > 0}
        if "head_width" in whole:
            return whole["head_width"]
        if "width" in whole and "heads" in whole:
            return whole["width"] // whole["heads"]
        return None


def read_json(path, optional=False):
    if optional and not os.path.exists(path):
        return None
    with reading(path), open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ReportError(f"{path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None


# summary.json's figures (the trainer writes them; experiments/run/trainer.cpp): numbers, or null.
SUMMARY_NUMBERS = ["steps", "eval_loss", "eval_token_acc", "eval_seq_acc", "target_accuracy", "first_step_at_target",
                   "wall_s", "tokens_per_s", "peak_rss_mb"]


def check_summary(path, summary):
    if summary is None:
        return None
    if not isinstance(summary, dict):
        raise ReportError(f"{path}: not a JSON object")
    for key in SUMMARY_NUMBERS:
        if key in summary and summary[key] is not None and not is_number(summary[key]):
            raise ReportError(f"{path}: {key} is {json.dumps(summary[key])[:40]}, not a number")
    return summary


STEP = re.compile(r"step_(\d+)")


def newest(pattern):
    """The path matching pattern with the largest step_NNN in its name, or None."""
    paths = glob.glob(pattern)
    if not paths:
        return None
    return max(paths, key=lambda p: int(STEP.search(os.path.basename(p)).group(1)) if STEP.search(os.path.basename(p)) else -1)


def find_audit(folder):
    """A saved `attnlab audit CHECKPOINT --json` record: RUN/audit.json, else the
    newest RUN/checkpoints/step_NNNNNNN.audit.json. (path, record) or (None, None)."""
    path = os.path.join(folder, "audit.json")
    if not os.path.isfile(path):
        path = newest(os.path.join(folder, "checkpoints", "step_*.audit.json"))
    if path is None:
        return None, None
    return path, check_audit(path, read_json(path))


def check_audit(path, record):
    """What the page shows of an audit record (experiments/cli/cmd_audit.cpp's --json): objects and lists
    where it reads them, numbers where it formats them."""
    if not isinstance(record, dict) or "tests" not in record:
        raise ReportError(f"{path}: not an `attnlab audit --json` record (no tests)")
    for key, kind in (("tests", list), ("heads", list), ("model", dict), ("attention", dict), ("cost", dict)):
        if key in record and not isinstance(record[key], kind):
            raise ReportError(f"{path}: {key} is not a JSON {'array' if kind is list else 'object'}")
    for key in ("tests", "heads"):
        for i, item in enumerate(record.get(key, [])):
            if not isinstance(item, dict):
                raise ReportError(f"{path}: {key}[{i}] is not a JSON object")
    return record


def number_attr(path, f, name, default=None):
    """A numeric root attribute (KeyError when it is missing and there is no default)."""
    value = f.attrs[name] if default is None else f.attrs.get(name, default)
    if np.ndim(value) != 0 or not isinstance(value.item() if hasattr(value, "item") else value, (int, float)):
        raise ReportError(f"{path}: attribute {name} is {text(value)[:40]!r}, not a number")
    return float(value)


def load_ablation(path):
    """The /ranked table and baseline of an `attnlab ablate` file."""
    with open_h5(path) as f, reading(path):
        if text(f.attrs.get("format", "")) != "attnlab-ablation":
            raise ReportError(f"{path}: not an `attnlab ablate` file (format attribute)")
        try:
            ranked = f["ranked"]
            rows = {name: numbers(path, ranked[name], 1)
                    for name in ("layer", "head", "zero_loss", "mean_loss", "zero_token_acc", "mean_token_acc")}
            rows["kind"] = strings(path, ranked["kind"])
            baseline = {k: number_attr(path, f, f"baseline_{k}") for k in ("loss", "token_acc", "seq_acc")}
            step = int(number_attr(path, f, "step", -1))
        except KeyError as e:
            raise ReportError(f"{path}: incomplete ablation file ({e})") from None
        if len({len(v) for v in rows.values()}) > 1:
            raise ReportError(f"{path}: /ranked holds columns of different lengths")
    return {"rows": rows, "baseline": baseline, "step": step}


class Sweep:
    """A sweep folder: its grid (key order as in sweep.toml) and summary.h5 tables."""

    def __init__(self, folder):
        self.folder = folder.rstrip("/") or "/"
        self.name = os.path.basename(os.path.abspath(self.folder))
        config_path = os.path.join(self.folder, "sweep.toml")
        self.config = tables_of(config_path, read_toml(config_path), ("sweep", "train"))
        self.grid = self.config.get("sweep", {})
        path = os.path.join(self.folder, "summary.h5")
        if not os.path.isfile(path):
            raise ReportError(f"{self.folder}: a sweep folder without summary.h5 (has `attnlab sweep` finished?)")
        self.tables = {}
        with open_h5(path) as f, reading(path):
            try:
                for group in ("cells", "aggregated"):
                    g = f[group]
                    names = strings(path, g["name"])
                    table = {"keys": {k: strings(path, g["keys"][k]) for k in g["keys"]},
                             "columns": {c: numbers(path, g[c], 1).astype(float) for c in g
                                         if isinstance(g[c], h5py.Dataset) and c not in ("name", "status")},
                             "name": names, "status": strings(path, g["status"])}
                    lengths = {len(v) for v in [table["status"], *table["keys"].values(), *table["columns"].values()]}
                    if lengths - {len(names)}:
                        raise ReportError(f"{path}: /{group} holds columns of different lengths")
                    self.tables[group] = table
                if "first_step_at_target" not in self.tables["aggregated"]["columns"]:
                    raise KeyError("aggregated/first_step_at_target")
            except KeyError as e:
                raise ReportError(f"{path}: not a complete attnlab sweep summary (no {e})") from None
            if set(self.tables["cells"]["keys"]) != set(self.tables["aggregated"]["keys"]):
                raise ReportError(f"{path}: /cells and /aggregated have different keys")
        # The grid's order (sweep.toml) decides the first swept key; summary.h5 lists keys alphabetically.
        stored = list(self.tables["cells"]["keys"])
        self.keys = [k for k in self.grid if k in stored] + [k for k in stored if k not in self.grid]
        self.x_key = next((k for k in self.keys if k != "run.seed"), self.keys[0] if self.keys else None)
        target = self.config.get("train", {}).get("target_accuracy")
        self.target = target if is_number(target) else None

    def cells(self):
        """[(index, name, Run or None)] of every cell; None where it has no readable metrics."""
        out = []
        for i, name in enumerate(self.tables["cells"]["name"]):
            folder = os.path.join(self.folder, name)
            run = None
            if os.path.isfile(os.path.join(folder, "metrics.h5")):
                try:
                    run = Run(folder)
                except ReportError:
                    run = None  # a cell that failed early: its row in the table says so
            out.append((i, name, run))
        return out


def load_inspection(path):
    """Every attention map of an `attnlab inspect` file, sequence 0, cropped to its lengths:
    {"step", "checkpoint", "maps": [{"kind", "layer", "head", "weights" (Tq, Tk),
    "queries", "keys" (labels), "causal"}]}. Tokens are labelled as the model reads
    them (token_labeller of the checkpoint's config)."""
    with open_h5(path) as f, reading(path):
        if text(f.attrs.get("format", "")) != "attnlab-inspect":
            raise ReportError(f"{path}: not an `attnlab inspect` file")
        config = text(f.attrs.get("config", ""))
        label = token_labeller(tomllib.loads(config))  # the checkpoint's config, which attnlab has read already
        maps = []
        for kind in f["attention"]:
            group = f["attention"][kind]
            q_name, k_name = text(group.attrs["queries"]), text(group.attrs["keys"])
            lengths = {n: int(f["lengths" if n == "tokens" else n + "_lengths"][0]) for n in (q_name, k_name)}
            q_tokens = [int(t) for t in f[q_name][0, :lengths[q_name]]]
            k_tokens = [int(t) for t in f[k_name][0, :lengths[k_name]]]
            layers = sorted(int(n.split("_")[1]) for n in group if n.startswith("layer_"))
            for layer in layers:
                weights = np.asarray(group[f"layer_{layer}"][0], dtype=float)  # (H, Tq, Tk)
                for head in range(weights.shape[0]):
                    maps.append({"kind": kind, "layer": layer, "head": head,
                                 "weights": weights[head, :len(q_tokens), :len(k_tokens)],
                                 "queries": [label(t) for t in q_tokens],
                                 "keys": [label(t) for t in k_tokens],
                                 "causal": bool(int(group.attrs["causal"]))})
        name = "tgt" if "tgt" in f else "tokens"
        length = int(f["tgt_lengths" if name == "tgt" else "lengths"][0])
        inputs = [label(int(t)) for t in f[name][0, :length]]
        argmax = [label(int(t)) for t in np.argmax(f["logits"][0, :length], axis=-1)] if "logits" in f else []
        return {"step": int(f.attrs.get("step", -1)), "checkpoint": text(f.attrs.get("checkpoint", "")),
                "config": config, "maps": maps, "input": inputs, "argmax": argmax}
