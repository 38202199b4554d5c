"""Bad HDF5 input of every kind (checkpoints, token files, inspect --input) ends
with exit status 2, one line on stderr naming what is wrong and where (the file
and the dataset or attribute), nothing on stdout, no file written anywhere, and
no change to an existing run (issue 13; README.md, "Command line"). Each file is
a real one (a tiny run made here) changed with h5py in one way: declared shapes
far beyond the data (refused before anything is allocated), wrong types and
ranks, links and loops, NaN weights, attributes of the wrong type, empty
configs, loss masks that select nothing.

    /usr/bin/python3 tests/cli/test_bad_h5_inputs.py ATTNLAB_BINARY REPO_ROOT
"""
import os
import shutil
import tempfile
import unittest

import h5py
import numpy as np

import cli_common as cc

# The token files' tiny experiment (a decoder over rows of width 6, vocab 32).
FILE_TASK = {"task.name": "file", "task.vocab": "32"}


def checkpoint_variants(newest, folder):
    """{name: path} of copies of `newest`, each broken in one way."""
    made = {}

    def variant(name, change):
        path = os.path.join(folder, name)
        shutil.copy(newest, path)
        with h5py.File(path, "r+") as f:
            change(f)
        made[name] = path

    def replace(f, name, **dataset):
        del f[name]
        parent, leaf = name.rsplit("/", 1)
        f[parent].create_dataset(leaf, **dataset)

    def poke(name, index, value):
        def change(f):
            w = f[name][...]
            w[index] = value
            f[name][...] = w
        return change

    # Declared shapes far beyond what the file holds (chunked, never written).
    variant("huge_param.h5", lambda f: replace(f, "params/head.weight", shape=(1 << 20, 1 << 20), dtype="f4",
                                               chunks=(1, 1024)))
    variant("huge_unbacked.h5", lambda f: replace(f, "params/head.weight", shape=(1 << 16, 1 << 15), dtype="f4",
                                                  chunks=(16, 1024)))
    variant("huge_rng.h5", lambda f: replace(f, "rng/train_data", shape=(1 << 31,), dtype="u8", chunks=(4096,)))
    # Wrong types, ranks and dataspaces.
    variant("int_param.h5", lambda f: replace(f, "params/head.weight", data=np.zeros((32, 16), np.int64)))
    variant("string_param.h5", lambda f: replace(f, "params/head.weight", data=np.array([b"a", b"b"])))
    variant("compound_param.h5", lambda f: replace(
        f, "params/head.weight", data=np.zeros(3, dtype=[("a", "i4"), ("b", "f4")])))
    variant("null_param.h5", lambda f: replace(f, "params/head.weight", data=h5py.Empty("f4")))
    variant("rank9_param.h5", lambda f: replace(f, "params/head.weight", data=np.zeros((1,) * 9, np.float32)))
    variant("scalar_rng.h5", lambda f: replace(f, "rng/train_data", data=np.uint64(7)))
    variant("float_rng.h5", lambda f: replace(f, "rng/train_data", data=np.zeros(4, np.float64)))
    variant("params_dataset.h5", lambda f: (f.__delitem__("params"), f.create_dataset("params", data=np.zeros(3))))
    # Links and loops.
    variant("soft_loop.h5", lambda f: f["params"].__setitem__("loop", h5py.SoftLink("/params")))
    variant("hard_loop.h5", lambda f: f["rng"].__setitem__("again", f["rng"]))
    variant("external_link.h5", lambda f: f["data"].__setitem__("ext", h5py.ExternalLink("other.h5", "/")))
    # Data outside the file.
    raw = os.path.join(folder, "raw.bin")
    with open(raw, "wb") as out:
        out.write(np.zeros((32, 16), np.float32).tobytes())
    variant("external_storage.h5", lambda f: replace(f, "params/head.weight", shape=(32, 16), dtype="f4",
                                                     external=[(raw, 0, 32 * 16 * 4)]))

    def virtual(f):
        layout = h5py.VirtualLayout(shape=(32, 16), dtype="f4")
        layout[...] = h5py.VirtualSource("other.h5", "w", shape=(32, 16))
        del f["params/head.weight"]
        f["params"].create_virtual_dataset("head.weight", layout)
    variant("virtual.h5", virtual)
    # Non-finite values.
    variant("nan_param.h5", poke("params/head.weight", (1, 2), np.nan))
    variant("inf_param.h5", poke("params/tok_emb.weight", (0, 0), np.inf))
    def infinite_moment(f):
        name = "optimizer/" + next(n for n in f["optimizer"] if n.startswith("m."))
        w = f[name][...]
        w.flat[0] = -np.inf
        f[name][...] = w
    variant("nan_optimizer.h5", infinite_moment)
    # Root attributes.
    variant("empty_config.h5", lambda f: f.attrs.__setitem__("config", ""))
    variant("blank_config.h5", lambda f: f.attrs.__setitem__("config", "  \n# only a comment\n"))
    variant("int_config.h5", lambda f: f.attrs.__setitem__("config", np.int64(3)))
    variant("string_step.h5", lambda f: f.attrs.__setitem__("step", "forty"))
    variant("negative_step.h5", lambda f: f.attrs.__setitem__("step", np.int64(-5)))
    variant("int_format.h5", lambda f: f.attrs.__setitem__("format", np.int64(1)))
    variant("float_version.h5", lambda f: f.attrs.__setitem__("format_version", np.float64(1.0)))
    variant("array_step.h5", lambda f: f.attrs.__setitem__("step", np.array([40, 41], np.int64)))
    return made


def token_file(path, tokens, lengths, mask=None, change=None):
    with h5py.File(path, "w") as f:
        f["tokens"] = tokens
        f["lengths"] = lengths
        if mask is not None:
            f["loss_mask"] = mask
        if change:
            change(f)
    return path


def token_variants(folder):
    """{name: path} of token files (vocab 32, 10 rows of width 6), good and broken."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, 32, size=(10, 6)).astype(np.int32)
    lengths = np.full(10, 6, np.int64)
    mask = np.zeros((10, 6), np.uint8)
    mask[:, 1:] = 1
    at = lambda name: os.path.join(folder, name)
    made = {"good": token_file(at("good.h5"), tokens, lengths, mask)}

    def make(name, **kwargs):
        spec = dict(tokens=tokens, lengths=lengths, mask=mask)
        spec.update(kwargs)
        made[name] = token_file(at(name + ".h5"), spec["tokens"], spec["lengths"], spec["mask"], spec.get("change"))

    first_only = np.zeros_like(mask)
    first_only[:, 0] = 1
    held_out_only = np.zeros_like(mask)
    held_out_only[9, 1:] = 1
    make("mask_zero", mask=np.zeros_like(mask))
    make("mask_first_only", mask=first_only)
    make("mask_train_rows_empty", mask=held_out_only)
    make("mask_bool_zero", mask=np.zeros((10, 6), bool))
    make("float_tokens", tokens=tokens.astype(np.float32))
    make("string_tokens", tokens=np.array([[b"3", b"4"]] * 10))
    make("scalar_lengths", lengths=np.int64(6))
    make("negative_length", lengths=np.concatenate([[-3], lengths[1:]]))
    make("long_length", lengths=np.concatenate([lengths[:4], [7], lengths[5:]]))
    make("mask_wrong_shape", mask=mask[:, :5])
    make("mask_strings", mask=np.array([[b"1"] * 6] * 10))

    def huge_tokens(f):
        del f["tokens"]
        f.create_dataset("tokens", shape=(1 << 24, 1 << 20), dtype="i4", chunks=(1, 1024))
    make("huge_tokens", change=huge_tokens)

    def huge_lengths(f):
        del f["lengths"]
        f.create_dataset("lengths", shape=(1 << 30,), dtype="i8", chunks=(1 << 16,))
    make("huge_lengths", change=huge_lengths)
    make("tokens_group", change=lambda f: (f.__delitem__("tokens"), f.create_group("tokens")))
    make("tokens_external", change=lambda f: (f.__delitem__("tokens"),
                                              f.__setitem__("tokens", h5py.ExternalLink(made["good"], "/tokens"))))
    return made


def inspect_variants(folder):
    """{name: path} of inspect --input files (vocab 32, rows of width 4)."""
    at = lambda name: os.path.join(folder, "in_" + name + ".h5")
    made = {}

    def make(name, change):
        with h5py.File(at(name), "w") as f:
            f["tokens"] = np.full((2, 4), 5, np.int32)
            f["lengths"] = np.array([4, 3], np.int64)
            change(f)
        made[name] = at(name)

    def swap(name, **dataset):
        def change(f):
            del f[name]
            f.create_dataset(name, **dataset)
        return change

    make("good", lambda f: None)
    make("huge", swap("tokens", shape=(1 << 26, 1 << 26), dtype="i4", chunks=(1, 4096)))
    make("unbacked", swap("tokens", shape=(1 << 14, 1 << 14), dtype="i8", chunks=(64, 64)))
    make("floats", swap("tokens", data=np.full((2, 4), 5.0)))
    make("strings", swap("tokens", data=np.array([[b"5"] * 4] * 2)))
    make("scalar", swap("tokens", data=np.int32(5)))
    make("lengths_count", swap("lengths", data=np.array([4, 3, 2], np.int64)))
    make("lengths_negative", swap("lengths", data=np.array([-1, 3], np.int64)))
    make("lengths_too_long", swap("lengths", data=np.array([4, 9], np.int64)))
    make("tokens_group", lambda f: (f.__delitem__("tokens"), f.create_group("tokens")))
    make("tokens_external", lambda f: (f.__delitem__("tokens"),
                                       f.__setitem__("tokens", h5py.ExternalLink("other.h5", "/tokens"))))
    return made


# Each case: the command (with {runs}, {files}, {broken}, {fifo}, {cwd} placeholders)
# and the substrings the one line must hold.
CASES = [
    # --- declared shapes beyond the data, refused before allocating ---
    dict(name="eval: parameter declaring 2^40 elements", cmd=["eval", "{files}/huge_param.h5"],
         want=["huge_param.h5", "/params/head.weight", "declares shape (1048576,1048576)", "more than 2^32"]),
    dict(name="eval: parameter declaring 2^31 unwritten elements", cmd=["eval", "{files}/huge_unbacked.h5"],
         want=["huge_unbacked.h5", "/params/head.weight", "declares shape (65536,32768)", "stores 0 bytes"]),
    dict(name="ablate: rng state declaring 2^31 words", cmd=["ablate", "{files}/huge_rng.h5"],
         want=["huge_rng.h5", "/rng/train_data", "declares shape (2147483648)"]),
    dict(name="train --resume: huge parameter in the newest checkpoint", cmd=["train", "--resume", "{broken}/huge_param"],
         want=["step_0000040.h5", "/params/head.weight", "declares shape"]),
    # --- wrong types, ranks, dataspaces ---
    dict(name="eval: integer parameter", cmd=["eval", "{files}/int_param.h5"],
         want=["int_param.h5", "/params/head.weight", "is int64 (32,16), expected floats"]),
    dict(name="inspect: string parameter", cmd=["inspect", "{files}/string_param.h5", "--tokens", "3 4", "--out", "{cwd}/o.h5"],
         want=["string_param.h5", "/params/head.weight", "is string (2), expected floats"]),
    dict(name="eval: compound parameter", cmd=["eval", "{files}/compound_param.h5"],
         want=["compound_param.h5", "/params/head.weight", "expected floats"]),
    dict(name="audit: null dataspace", cmd=["audit", "{files}/null_param.h5"],
         want=["null_param.h5", "/params/head.weight", "null dataspace"]),
    dict(name="eval: rank-9 parameter", cmd=["eval", "{files}/rank9_param.h5"],
         want=["rank9_param.h5", "/params/head.weight", "(1,1,1,1,1,1,1,1,1), expected floats"]),
    dict(name="generate: scalar rng state", cmd=["generate", "{files}/scalar_rng.h5", "--prompt", "3 4"],
         want=["scalar_rng.h5", "/rng/train_data", "is uint64 (), expected integers [n]"]),
    dict(name="eval: float rng state", cmd=["eval", "{files}/float_rng.h5"],
         want=["float_rng.h5", "/rng/train_data", "is float64 (4), expected integers [n]"]),
    dict(name="eval: /params is a dataset", cmd=["eval", "{files}/params_dataset.h5"],
         want=["params_dataset.h5", "/params is not a group"]),
    # --- links and loops ---
    dict(name="eval: soft link loop under /params", cmd=["eval", "{files}/soft_loop.h5"],
         want=["soft_loop.h5", "/params/loop", "soft link"]),
    dict(name="audit: hard-link loop under /rng", cmd=["audit", "{files}/hard_loop.h5"],
         want=["hard_loop.h5", "/rng/again", "loop"]),
    dict(name="ablate: external link", cmd=["ablate", "{files}/external_link.h5"],
         want=["external_link.h5", "/data/ext", "external link"]),
    dict(name="train --resume: soft link loop", cmd=["train", "--resume", "{broken}/soft_loop"],
         want=["step_0000040.h5", "/params/loop", "soft link"]),
    dict(name="eval: data in an external raw file", cmd=["eval", "{files}/external_storage.h5"],
         want=["external_storage.h5", "/params/head.weight", "external files"]),
    dict(name="eval: virtual dataset", cmd=["eval", "{files}/virtual.h5"],
         want=["virtual.h5", "/params/head.weight", "virtual dataset"]),
    dict(name="eval: a FIFO as the checkpoint", cmd=["eval", "{fifo}/pipe.h5"], want=["pipe.h5", "not a regular file"]),
    # --- non-finite weights ---
    dict(name="eval: NaN parameter", cmd=["eval", "{files}/nan_param.h5"],
         want=["nan_param.h5", "/params/head.weight", "element [1, 2] is NaN"]),
    dict(name="inspect: infinite parameter", cmd=["inspect", "{files}/inf_param.h5", "--tokens", "3 4", "--out", "{cwd}/o.h5"],
         want=["inf_param.h5", "/params/tok_emb.weight", "element [0, 0] is infinite"]),
    dict(name="ablate: NaN parameter", cmd=["ablate", "{files}/nan_param.h5"],
         want=["nan_param.h5", "/params/head.weight", "element [1, 2] is NaN"]),
    dict(name="audit: NaN parameter", cmd=["audit", "{files}/nan_param.h5"],
         want=["nan_param.h5", "/params/head.weight", "NaN"]),
    dict(name="generate: NaN parameter", cmd=["generate", "{files}/nan_param.h5", "--prompt", "3 4"],
         want=["nan_param.h5", "/params/head.weight", "NaN"]),
    dict(name="eval: infinite optimizer moment", cmd=["eval", "{files}/nan_optimizer.h5"],
         want=["nan_optimizer.h5", "/optimizer/m.", "is infinite"]),
    dict(name="train --resume: an Adam step count of 1e300", cmd=["train", "--resume", "{broken}/adam_step"],
         want=["step_0000040.h5", "step.head.weight", "expected a whole number"]),
    dict(name="train --resume: an Adam step count of 2.5", cmd=["train", "--resume", "{broken}/adam_half_step"],
         want=["step_0000040.h5", "step.head.weight", "2.5"]),
    dict(name="train --resume: an Adam moment of another shape", cmd=["train", "--resume", "{broken}/m_shape"],
         want=["step_0000040.h5", "/optimizer/m.head.weight", "(3,3)", "parameter head.weight"]),
    dict(name="train --resume: a negative Adam second moment", cmd=["train", "--resume", "{broken}/negative_v"],
         want=["step_0000040.h5", "v.head.weight", "never negative"]),
    dict(name="train --resume: NaN parameter", cmd=["train", "--resume", "{broken}/nan_param"],
         want=["step_0000040.h5", "/params/head.weight", "element [1, 2] is NaN"]),
    # --- root attributes ---
    dict(name="eval: empty config attribute", cmd=["eval", "{files}/empty_config.h5"],
         want=["empty_config.h5", "config attribute is empty"]),
    dict(name="inspect: config attribute of comments only",
         cmd=["inspect", "{files}/blank_config.h5", "--tokens", "3 4", "--out", "{cwd}/o.h5"],
         want=["blank_config.h5", "config attribute is empty"]),
    dict(name="train --resume: empty config attribute", cmd=["train", "--resume", "{broken}/empty_config"],
         want=["step_0000040.h5", "config attribute is empty"]),
    dict(name="eval: integer config attribute", cmd=["eval", "{files}/int_config.h5"],
         want=["int_config.h5", "attribute 'config'", "is not a string"]),
    dict(name="eval: string step attribute", cmd=["eval", "{files}/string_step.h5"],
         want=["string_step.h5", "attribute 'step'", "is not an integer"]),
    dict(name="eval: negative step", cmd=["eval", "{files}/negative_step.h5"],
         want=["negative_step.h5", "step -5 is negative"]),
    dict(name="audit: integer format attribute", cmd=["audit", "{files}/int_format.h5"],
         want=["int_format.h5", "attribute 'format'", "is not a string"]),
    dict(name="eval: float format_version", cmd=["eval", "{files}/float_version.h5"],
         want=["float_version.h5", "attribute 'format_version'", "is not an integer"]),
    dict(name="eval: step attribute holding two values", cmd=["eval", "{files}/array_step.h5"],
         want=["array_step.h5", "attribute 'step'", "is not a single value"]),
    # --- inspect --input ---
    dict(name="inspect --input: tokens declaring 2^52 elements",
         cmd=["inspect", "{good}", "--input", "{files}/in_huge.h5", "--out", "{cwd}/o.h5"],
         want=["in_huge.h5", "/tokens", "declares shape (67108864,67108864)"]),
    dict(name="inspect --input: 2^28 unwritten tokens",
         cmd=["inspect", "{good}", "--input", "{files}/in_unbacked.h5", "--out", "{cwd}/o.h5"],
         want=["in_unbacked.h5", "/tokens", "stores 0 bytes"]),
    dict(name="inspect --input: float tokens", cmd=["inspect", "{good}", "--input", "{files}/in_floats.h5", "--out", "{cwd}/o.h5"],
         want=["in_floats.h5", "/tokens", "is float64 (2,4), expected integers [N, S]"]),
    dict(name="inspect --input: string tokens", cmd=["inspect", "{good}", "--input", "{files}/in_strings.h5", "--out", "{cwd}/o.h5"],
         want=["in_strings.h5", "/tokens", "is string (2,4)"]),
    dict(name="inspect --input: scalar tokens", cmd=["inspect", "{good}", "--input", "{files}/in_scalar.h5", "--out", "{cwd}/o.h5"],
         want=["in_scalar.h5", "/tokens", "is int32 (), expected integers [N, S]"]),
    dict(name="inspect --input: one length too many",
         cmd=["inspect", "{good}", "--input", "{files}/in_lengths_count.h5", "--out", "{cwd}/o.h5"],
         want=["in_lengths_count.h5", "/lengths", "is int64 (3), expected integers [2] (one per row of /tokens)"]),
    dict(name="inspect --input: negative length",
         cmd=["inspect", "{good}", "--input", "{files}/in_lengths_negative.h5", "--out", "{cwd}/o.h5"],
         want=["in_lengths_negative.h5", "/lengths", "length -1 of row 0 is outside [1, 4]"]),
    dict(name="inspect --input: length beyond the row width",
         cmd=["inspect", "{good}", "--input", "{files}/in_lengths_too_long.h5", "--out", "{cwd}/o.h5"],
         want=["in_lengths_too_long.h5", "/lengths", "length 9 of row 1 is outside [1, 4]"]),
    dict(name="inspect --input: /tokens is a group",
         cmd=["inspect", "{good}", "--input", "{files}/in_tokens_group.h5", "--out", "{cwd}/o.h5"],
         want=["in_tokens_group.h5", "/tokens", "is not a dataset"]),
    dict(name="inspect --input: /tokens is an external link",
         cmd=["inspect", "{good}", "--input", "{files}/in_tokens_external.h5", "--out", "{cwd}/o.h5"],
         want=["in_tokens_external.h5", "/tokens", "external link"]),
    dict(name="inspect --input: a FIFO", cmd=["inspect", "{good}", "--input", "{fifo}/pipe.h5", "--out", "{cwd}/o.h5"],
         want=["pipe.h5", "not a regular file"]),
    # --- token files (task.name = "file") ---
    dict(name="file task: loss mask all zero", tokens="mask_zero",
         want=["mask_zero.h5", "/loss_mask", "selects no target"]),
    dict(name="file task: loss mask 1 only at position 0", tokens="mask_first_only",
         want=["mask_first_only.h5", "/loss_mask", "selects no target"]),
    dict(name="file task: bool loss mask all false", tokens="mask_bool_zero",
         want=["mask_bool_zero.h5", "/loss_mask", "selects no target"]),
    dict(name="file task: training rows select no target", tokens="mask_train_rows_empty",
         want=["mask_train_rows_empty.h5", "/loss_mask", "the training rows [0, 9) select no target"]),
    dict(name="file task: float tokens", tokens="float_tokens",
         want=["float_tokens.h5", "/tokens", "is float32 (10,6), expected integers [N, S]"]),
    dict(name="file task: string tokens", tokens="string_tokens",
         want=["string_tokens.h5", "/tokens", "is string (10,2)"]),
    dict(name="file task: scalar lengths", tokens="scalar_lengths",
         want=["scalar_lengths.h5", "/lengths", "is int64 (), expected integers [10]"]),
    dict(name="file task: negative length", tokens="negative_length",
         want=["negative_length.h5", "/lengths", "lengths[0] = -3 is outside [1, S = 6]"]),
    dict(name="file task: length beyond S", tokens="long_length",
         want=["long_length.h5", "/lengths", "lengths[4] = 7 is outside [1, S = 6]"]),
    dict(name="file task: loss mask of the wrong shape", tokens="mask_wrong_shape",
         want=["mask_wrong_shape.h5", "/loss_mask", "is uint8 (10,5), expected integers or bools [N, S] = (10,6)"]),
    dict(name="file task: string loss mask", tokens="mask_strings",
         want=["mask_strings.h5", "/loss_mask", "expected integers or bools"]),
    dict(name="file task: tokens declaring 2^44 elements", tokens="huge_tokens",
         want=["huge_tokens.h5", "/tokens", "declares shape (16777216,1048576)", "more than 2^32"]),
    dict(name="file task: 2^30 unwritten lengths for 10 rows", tokens="huge_lengths",
         want=["huge_lengths.h5", "/lengths", "expected integers [10]"]),
    dict(name="file task: /tokens is a group", tokens="tokens_group",
         want=["tokens_group.h5", "/tokens", "is not a dataset"]),
    dict(name="file task: /tokens is an external link", tokens="tokens_external",
         want=["tokens_external.h5", "/tokens", "external link"]),
    dict(name="eval: a file-task checkpoint whose token file now selects nothing",
         cmd=["eval", "{files}/file_task_mask_zero.h5"], want=["mask_zero.h5", "/loss_mask", "selects no target"]),
]


class BadH5Inputs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnlab_cli_bad_h5_")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)  # also when setUpClass fails
        cls.runs = os.path.join(cls.tmp, "runs")
        cls.broken = os.path.join(cls.tmp, "broken")
        cls.files = os.path.join(cls.tmp, "files")
        cls.fifo = os.path.join(cls.tmp, "fifo")  # not hashed: reading a FIFO blocks
        for d in (cls.broken, cls.files, cls.fifo):
            os.makedirs(d)
        os.mkfifo(os.path.join(cls.fifo, "pipe.h5"))
        # A real run (every train command points at it) and its newest checkpoint.
        r = cc.attnlab(["train"] + cc.overrides(**{"run.out_dir": cls.runs, "run.name": "base"}), cls.tmp)
        assert r.returncode == 0, r.stderr
        base = os.path.join(cls.runs, "base")
        assert cc.checkpoint_steps(base) == [20, 30, 40], cc.checkpoint_steps(base)
        cls.good = cc.checkpoint_path(base, 40)
        cls.variants = checkpoint_variants(cls.good, cls.files)
        # Runs to resume whose newest checkpoint is one of the variants.
        for name in ("huge_param", "soft_loop", "nan_param", "empty_config"):
            run = os.path.join(cls.broken, name)
            shutil.copytree(base, run)
            shutil.copy(cls.variants[name + ".h5"], cc.checkpoint_path(run, 40))
        # Runs to resume (summary.json gone, so not finished) whose optimizer state is off.
        for name, key, value in (("adam_step", "step.head.weight", 1e300), ("adam_half_step", "step.head.weight", 2.5),
                                 ("negative_v", "v.head.weight", -1.0)):
            run = os.path.join(cls.broken, name)
            shutil.copytree(base, run)
            os.remove(os.path.join(run, "summary.json"))
            with h5py.File(cc.checkpoint_path(run, 40), "r+") as f:
                data = f["optimizer"][key][()]
                if np.ndim(data) == 0:
                    f["optimizer"][key][()] = value
                else:
                    data.flat[0] = value
                    f["optimizer"][key][...] = data
        # A resume whose Adam moment has another shape than its parameter (it said only
        # "[assign] source (3,3) does not match destination ...", naming neither).
        run = os.path.join(cls.broken, "m_shape")
        shutil.copytree(base, run)
        os.remove(os.path.join(run, "summary.json"))
        with h5py.File(cc.checkpoint_path(run, 40), "r+") as f:
            del f["optimizer/m.head.weight"]
            f["optimizer/m.head.weight"] = np.zeros((3, 3), dtype=np.float32)
        cls.tokens = token_variants(cls.files)
        inspect_variants(cls.files)
        # A file-task run; a copy of its checkpoint whose config names a token file that selects nothing.
        file_run = dict(FILE_TASK, **{"task.path": cls.tokens["good"], "run.out_dir": cls.runs, "run.name": "file_run"})
        r = cc.attnlab(["train"] + cc.overrides(**file_run), cls.tmp)
        assert r.returncode == 0, r.stderr
        copy = os.path.join(cls.files, "file_task_mask_zero.h5")
        shutil.copy(cc.checkpoint_path(os.path.join(cls.runs, "file_run"), 40), copy)
        with h5py.File(copy, "r+") as f:
            config = f.attrs["config"]
            config = config.decode() if isinstance(config, bytes) else config
            f.attrs["config"] = config.replace(cls.tokens["good"], cls.tokens["mask_zero"])

        cls.before = {d: cc.tree_hashes(d) for d in (cls.runs, cls.broken, cls.files)}

    def fill(self, text, cwd):
        return text.format(runs=self.runs, broken=self.broken, files=self.files, fifo=self.fifo, cwd=cwd,
                           good=self.good)

    def command(self, case, cwd):
        if "tokens" in case:  # a tiny file-task run on that token file, aimed at the existing run
            changes = dict(FILE_TASK, **{"task.path": self.tokens[case["tokens"]], "run.out_dir": self.runs,
                                         "run.name": "base"})
            return ["train"] + cc.overrides(**changes)
        return [self.fill(a, cwd) for a in case["cmd"]]

    def check_case(self, index, case):
        cwd = os.path.join(self.tmp, f"case{index:02d}")
        os.makedirs(cwd)
        args = self.command(case, cwd)
        cc.run_refused(self, args, cwd, self.runs, [self.fill(w, cwd) for w in case["want"]], self.before)

    def test_table_has_enough_cases(self):
        self.assertGreaterEqual(len(CASES), 35)

    def test_bad_h5_inputs(self):
        for index, case in enumerate(CASES):
            with self.subTest(case=case["name"]):
                self.check_case(index, case)

    def test_good_files_are_accepted(self):
        # The controls: the unchanged checkpoint, --input file and token file
        # work through the same commands (so the table's failures come from
        # the changes, not from the harness).
        cwd = os.path.join(self.tmp, "good")
        os.makedirs(cwd)
        r = cc.attnlab(["eval", self.good], cwd)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = os.path.join(cwd, "o.h5")
        r = cc.attnlab(["inspect", self.good, "--input", os.path.join(self.files, "in_good.h5"), "--out", out], cwd)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.isfile(out))
        runs = os.path.join(cwd, "runs")
        r = cc.attnlab(["train"] + cc.overrides(**dict(FILE_TASK, **{"task.path": self.tokens["good"],
                                                                    "run.out_dir": runs})), cwd)
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    cc.main()
