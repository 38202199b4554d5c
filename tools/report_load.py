"""What tools/report.py reads: run folders (config.toml, metrics.h5, summary.json,
a saved audit, the newest ablation), sweep folders (sweep.toml, summary.h5) and
`attnlab inspect` files. Every problem is a ReportError with a one-line message
naming the file.
"""
import glob
import json
import os
import re
import tomllib

import h5py
import numpy as np

ATTENTION_FIELDS = ["step", "entropy", "entropy_norm", "masked_mass", "masked_mass_max", "score_std"]
SPECIAL_TOKENS = {0: "<PAD>", 1: "<SEP>", 2: "<BOS>"}


class ReportError(Exception):
    """Bad input: one line for stderr, exit status 2."""


def text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def token_label(token):
    return SPECIAL_TOKENS.get(int(token), str(int(token)))


def read_toml(path):
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ReportError(f"{path}: cannot read ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise ReportError(f"{path}: not valid TOML ({e})") from None


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
    try:
        if swmr:
            return h5py.File(path, "r", libver="latest", swmr=True)
        return h5py.File(path, "r")
    except OSError as e:
        raise ReportError(f"{path}: cannot read as HDF5 ({str(e).splitlines()[0]})") from None


def read_series(f, name, fields):
    """{field: array} of one series group, every field cut to the shortest (a writer
    may be between appending one field and the next); None without the group."""
    if name not in f or not isinstance(f[name], h5py.Group):
        return None
    data = {}
    for field in fields:
        if field in f[name]:
            dataset = f[name][field]
            dataset.refresh()
            data[field] = np.asarray(dataset[()])
    if "step" not in data:
        return None
    n = min(len(v) for v in data.values())
    return {k: v[:n] for k, v in data.items()}


def load_metrics(path):
    """(train, eval, {kind: attention series}) of a metrics.h5."""
    with open_h5(path, swmr=True) as f:
        if text(f.attrs.get("format", "attnlab-metrics")) != "attnlab-metrics":
            raise ReportError(f"{path}: not an attnlab metrics file (format {text(f.attrs['format'])!r})")
        try:
            train = read_series(f, "train", ["step", "loss", "lr", "grad_norm", "token_acc"])
            evaluation = read_series(f, "eval", ["step", "loss", "token_acc", "seq_acc"])
            kinds = {}
            if "attention" in f:
                for kind in f["attention"]:
                    series = read_series(f, "attention/" + kind, ATTENTION_FIELDS)
                    if series is not None and len(series["step"]):
                        kinds[kind] = series
        except (OSError, KeyError) as e:
            raise ReportError(f"{path}: cannot read ({str(e).splitlines()[0]})") from None
    return train, evaluation, kinds


class Run:
    """One run folder: its resolved config, metrics, summary and saved analyses."""

    def __init__(self, folder):
        self.folder = folder.rstrip("/") or "/"
        self.name = os.path.basename(os.path.abspath(self.folder))
        self.label = self.name  # legend name, made unique among several runs
        config_path = os.path.join(self.folder, "config.toml")
        self.config = read_toml(config_path) if os.path.isfile(config_path) else {}
        self.flat = flatten(self.config)
        self.metrics_path = os.path.join(self.folder, "metrics.h5")
        self.train, self.eval, self.attention = load_metrics(self.metrics_path)
        self.summary = read_json(os.path.join(self.folder, "summary.json"), optional=True)
        self.audit_path, self.audit = find_audit(self.folder)
        self.ablation_path = newest(os.path.join(self.folder, "checkpoints", "step_*.ablation.h5"))
        self.ablation = load_ablation(self.ablation_path) if self.ablation_path else None

    def head_width(self):
        model = self.config.get("model", {})
        if model.get("head_width"):
            return int(model["head_width"])
        if model.get("width") and model.get("heads"):
            return int(model["width"]) // int(model["heads"])
        return None


def read_json(path, optional=False):
    if optional and not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise ReportError(f"{path}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None


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
    record = read_json(path)
    if not isinstance(record, dict) or "tests" not in record:
        raise ReportError(f"{path}: not an `attnlab audit --json` record (no tests)")
    return path, record


def load_ablation(path):
    """The /ranked table and baseline of an `attnlab ablate` file."""
    with open_h5(path) as f:
        if text(f.attrs.get("format", "")) != "attnlab-ablation":
            raise ReportError(f"{path}: not an `attnlab ablate` file (format attribute)")
        try:
            ranked = f["ranked"]
            rows = {name: np.asarray(ranked[name][()]) for name in ranked}
            rows["kind"] = [text(k) for k in rows["kind"]]
            baseline = {k: float(f.attrs[f"baseline_{k}"]) for k in ("loss", "token_acc", "seq_acc")}
            step = int(f.attrs.get("step", -1))
        except KeyError as e:
            raise ReportError(f"{path}: incomplete ablation file ({e})") from None
    return {"rows": rows, "baseline": baseline, "step": step}


class Sweep:
    """A sweep folder: its grid (key order as in sweep.toml) and summary.h5 tables."""

    def __init__(self, folder):
        self.folder = folder.rstrip("/") or "/"
        self.name = os.path.basename(os.path.abspath(self.folder))
        self.config = read_toml(os.path.join(self.folder, "sweep.toml"))
        self.grid = self.config.get("sweep", {})
        path = os.path.join(self.folder, "summary.h5")
        if not os.path.isfile(path):
            raise ReportError(f"{self.folder}: a sweep folder without summary.h5 (has `attnlab sweep` finished?)")
        self.tables = {}
        with open_h5(path) as f:
            try:
                for group in ("cells", "aggregated"):
                    g = f[group]
                    keys = {k: [text(v) for v in g["keys"][k][()]] for k in g["keys"]}
                    columns = {c: np.asarray(g[c][()], dtype=float) for c in g
                               if isinstance(g[c], h5py.Dataset) and c not in ("name", "status")}
                    self.tables[group] = {"keys": keys, "columns": columns,
                                          "name": [text(v) for v in g["name"][()]],
                                          "status": [text(v) for v in g["status"][()]]}
            except (KeyError, OSError, ValueError) as e:
                raise ReportError(f"{path}: not a complete attnlab sweep summary ({str(e).splitlines()[0]})") from None
        # The grid's order (sweep.toml) decides the first swept key; summary.h5 lists keys alphabetically.
        stored = list(self.tables["cells"]["keys"])
        self.keys = [k for k in self.grid if k in stored] + [k for k in stored if k not in self.grid]
        self.x_key = next((k for k in self.keys if k != "run.seed"), self.keys[0] if self.keys else None)
        self.target = self.config.get("train", {}).get("target_accuracy")

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
    "queries", "keys" (labels), "causal"}]}."""
    with open_h5(path) as f:
        if text(f.attrs.get("format", "")) != "attnlab-inspect":
            raise ReportError(f"{path}: not an `attnlab inspect` file")
        maps = []
        for kind in f["attention"]:
            group = f["attention"][kind]
            q_name, k_name = text(group.attrs["queries"]), text(group.attrs["keys"])
            lengths = {n: int(f["lengths" if n == "tokens" else n + "_lengths"][0]) for n in (q_name, k_name)}
            q_tokens = f[q_name][0, :lengths[q_name]]
            k_tokens = f[k_name][0, :lengths[k_name]]
            layers = sorted(int(n.split("_")[1]) for n in group if n.startswith("layer_"))
            for layer in layers:
                weights = np.asarray(group[f"layer_{layer}"][0], dtype=float)  # (H, Tq, Tk)
                for head in range(weights.shape[0]):
                    maps.append({"kind": kind, "layer": layer, "head": head,
                                 "weights": weights[head, :len(q_tokens), :len(k_tokens)],
                                 "queries": [token_label(t) for t in q_tokens],
                                 "keys": [token_label(t) for t in k_tokens],
                                 "causal": bool(int(group.attrs["causal"]))})
        name = "tgt" if "tgt" in f else "tokens"
        length = int(f["tgt_lengths" if name == "tgt" else "lengths"][0])
        inputs = [token_label(t) for t in f[name][0, :length]]
        argmax = [token_label(t) for t in np.argmax(f["logits"][0, :length], axis=-1)] if "logits" in f else []
        return {"step": int(f.attrs.get("step", -1)), "checkpoint": text(f.attrs.get("checkpoint", "")),
                "config": text(f.attrs.get("config", "")), "maps": maps, "input": inputs, "argmax": argmax}
