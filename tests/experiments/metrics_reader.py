#!/usr/bin/python3
"""Reads an attnlab metrics.h5 with h5py, as a user would while a run goes on.

Used by tests/experiments/test_h5io.cpp (Debian's /usr/bin/python3 with h5py):

  metrics_reader.py check PATH --layers L --heads H --kinds self[,cross...]
                    --rows train=N,eval=M,<kind>=K [--config-file F] [--dump OUT] [--plain]
      Opens PATH in SWMR read mode (or a plain read with --plain), checks the
      layout of docs/file_formats.md "metrics.h5" (names, dtypes, shapes, chunking,
      attributes) and the row counts, and writes every dataset's values to OUT,
      one line each: "<dataset path> <value> <value> ..." (repr, so exact).

  metrics_reader.py follow PATH --ready PREFIX
      Opens PATH in SWMR mode once and keeps it open. Writes PREFIX.0 when open;
      then, for each stdin line "train=N:LAST,eval=M:LAST,<kind>=K:LAST", refreshes
      every dataset, checks each group has that many rows and that its last step
      is LAST, and writes PREFIX.<line number> holding "ok" or "fail: why".

Exit status 0 when every check passed, 1 otherwise (the reasons on stderr).
"""
import argparse
import sys

import h5py
import numpy as np

TRAIN = ["step", "loss", "lr", "grad_norm", "tokens_per_s", "wall_s"]
EVAL = ["step", "loss", "token_acc", "seq_acc"]
ATTENTION = ["step", "entropy", "entropy_norm", "masked_mass", "masked_mass_max", "score_std"]


class CheckFailed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


def open_log(path, plain):
    if plain:
        return h5py.File(path, "r")
    return h5py.File(path, "r", libver="latest", swmr=True)


def groups(f):
    """(group path, dataset names) for every series group of the log."""
    out = [("train", TRAIN), ("eval", EVAL)]
    out += [("attention/" + kind, ATTENTION) for kind in f["attention"]]
    return out


def parse_rows(text):
    rows = {}
    for item in text.split(","):
        key, value = item.split("=")
        rows[key if key in ("train", "eval") else "attention/" + key] = value
    return rows


def check_layout(f, args):
    expect(f.swmr_mode == (not args.plain), f"swmr_mode is {f.swmr_mode}")
    attrs = f.attrs
    provenance = {"attnlab_version", "attnlab_commit", "command_line", "cpu", "cpus", "threads"}  # docs/file_formats.md
    expect(set(attrs) == {"format", "format_version", "config", "layers", "heads"} | provenance, f"root attrs {sorted(attrs)}")
    expect(isinstance(attrs["format"], str) and attrs["format"] == "attnlab-metrics", f"format {attrs['format']!r}")
    for name in ("format_version", "layers", "heads"):
        expect(isinstance(attrs[name], np.integer), f"attr {name} is {type(attrs[name])}, not an integer")
    expect(attrs["format_version"] == 1, f"format_version {attrs['format_version']}")
    expect(attrs["layers"] == args.layers and attrs["heads"] == args.heads,
           f"layers/heads {attrs['layers']}/{attrs['heads']}")
    expect(isinstance(attrs["config"], str), "config is not a str")
    if args.config_file:
        with open(args.config_file, encoding="utf-8") as config:
            expect(attrs["config"] == config.read(), "config text differs")

    kinds = args.kinds.split(",")
    expect(set(f.keys()) == {"train", "eval", "attention"}, f"root groups {list(f.keys())}")
    expect(set(f["attention"].keys()) == set(kinds), f"attention kinds {list(f['attention'].keys())}")
    rows = parse_rows(args.rows)
    for group, names in groups(f):
        expect(set(f[group].keys()) == set(names), f"{group} holds {sorted(f[group].keys())}")
        for name in names:
            dataset = f[group][name]
            path = f"{group}/{name}"
            want_dtype = np.int64 if name == "step" else np.float64
            expect(dataset.dtype == want_dtype, f"{path} dtype {dataset.dtype}")
            expect(dataset.chunks is not None and dataset.maxshape[0] is None, f"{path} not extendible")
            tail = (args.layers, args.heads) if group.startswith("attention/") and name != "step" else ()
            want = (int(rows[group]),) + tail
            expect(dataset.shape == want, f"{path} shape {dataset.shape}, expected {want}")
            expect(dataset.maxshape == (None,) + tail, f"{path} maxshape {dataset.maxshape}")


def dump(f, out_path):
    with open(out_path, "w", encoding="utf-8") as out:
        for group, names in groups(f):
            for name in names:
                values = f[group][name][()].ravel()
                out.write(" ".join([f"{group}/{name}"] + [repr(v.item()) for v in values]) + "\n")


def check(args):
    with open_log(args.path, args.plain) as f:
        check_layout(f, args)
        if args.dump:
            dump(f, args.dump)


def follow(args):
    with open_log(args.path, False) as f:
        datasets = {group: [f[group][name] for name in names] for group, names in groups(f)}
        with open(args.ready + ".0", "w") as ready:
            ready.write("ok")
        for number, line in enumerate(sys.stdin, start=1):
            verdict = "ok"
            try:
                for group, expected in parse_rows(line.strip()).items():
                    count, last = (int(x) for x in expected.split(":"))
                    for dataset in datasets[group]:
                        dataset.refresh()
                        expect(dataset.shape[0] == count, f"{dataset.name} has {dataset.shape[0]} rows, expected {count}")
                    step = datasets[group][0]
                    if count > 0:
                        expect(step[count - 1] == last, f"{step.name} ends at {step[count - 1]}, expected {last}")
            except Exception as error:  # anything wrong must reach the waiting test
                verdict = f"fail: {error!r}"
            with open(f"{args.ready}.{number}", "w") as ready:
                ready.write(verdict)
            if verdict != "ok":
                print(verdict, file=sys.stderr)
                return 1
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["check", "follow"])
    parser.add_argument("path")
    parser.add_argument("--layers", type=int)
    parser.add_argument("--heads", type=int)
    parser.add_argument("--kinds")
    parser.add_argument("--rows")
    parser.add_argument("--config-file")
    parser.add_argument("--dump")
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--ready")
    args = parser.parse_args()
    try:
        if args.mode == "check":
            check(args)
            return 0
        return follow(args)
    except CheckFailed as error:
        print(f"metrics_reader: {args.path}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
