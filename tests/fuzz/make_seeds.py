#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

    /usr/bin/python3 tests/fuzz/make_seeds.py ATTNLAB_BINARY

The committed seeds were made this way; rerun it only to change them. The HDF5
targets take recipes (any bytes, tests/fuzz/hdf5_recipe.h) from <target>/ and,
with FUZZ_RAW=1, raw files from <target>_files/. The raw checkpoints are real ones (a tiny decoder and encoder-decoder trained for one
step), plus copies with the structures the loaders must refuse (links, loops,
compressed and enum datasets) so that mutations start near them; the token
files are small h5py files; the config seeds are the example configs followed
by overrides; the safetensors seeds are small files written with struct and
json (every dtype attnlab reads, and a few it must refuse).
"""
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")

TINY = ["model.width=4", "model.heads=1", "model.layers=1", "model.ffn=0", "model.norm=none",
        "model.bias=false", "task.vocab=5", "task.min_len=1", "task.max_len=2", "train.steps=1",
        "train.checkpoint_every=1", "train.eval_every=1", "train.log_every=1", "train.batch=2",
        "train.eval_batches=1"]


def checkpoint(attnlab, tmp, name, extra):
    out = os.path.join(tmp, "runs")
    subprocess.run([attnlab, "train"] + TINY + extra + [f"run.out_dir={out}", f"run.name={name}"],
                   check=True, capture_output=True)
    return os.path.join(out, name, "checkpoints", "step_0000001.h5")


def recipe_seeds(folder, count=6):
    """Recipes (tests/fuzz/hdf5_recipe.h) are any bytes: a few of several lengths."""
    rng = np.random.default_rng(1)
    for i in range(count):
        with open(os.path.join(folder, f"recipe_{i}"), "wb") as f:
            f.write(rng.integers(0, 256, size=16 << i, dtype=np.uint8).tobytes())


def checkpoint_seeds(attnlab, tmp, folder):
    decoder = checkpoint(attnlab, tmp, "decoder", ["task.name=copy", "optim.name=sgd", "optim.momentum=0"])
    adam = checkpoint(attnlab, tmp, "adam", ["task.name=reverse", "model.positional=sinusoidal"])
    encdec = checkpoint(attnlab, tmp, "encdec", ["task.name=translate", "model.kind=encoder-decoder",
                                                  "optim.name=sgd", "optim.momentum=0"])
    for name, path in (("decoder.h5", decoder), ("adam.h5", adam), ("encdec.h5", encdec)):
        shutil.copy(path, os.path.join(folder, name))

    def variant(name, change):
        path = os.path.join(folder, name)
        shutil.copy(decoder, path)
        with h5py.File(path, "r+") as f:
            change(f)

    variant("soft_link.h5", lambda f: f["params"].__setitem__("loop", h5py.SoftLink("/params")))
    variant("hard_loop.h5", lambda f: f["rng"].__setitem__("again", f["rng"]))
    variant("external_link.h5", lambda f: f["data"].__setitem__("ext", h5py.ExternalLink("other.h5", "/")))

    def compressed(f):
        w = f["params/head.weight"][...]
        del f["params/head.weight"]
        f["params"].create_dataset("head.weight", data=w, chunks=True, compression="gzip", shuffle=True)
    variant("compressed.h5", compressed)

    def odd_types(f):
        f["data"].create_dataset("flags", data=np.array([True, False]))  # h5py's bool enum
        f.attrs["step"] = "one"
        f["params"].attrs["note"] = np.array([1.5, 2.5])
    variant("odd_types.h5", odd_types)


def token_seeds(folder):
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, 32, size=(6, 5)).astype(np.int32)
    lengths = np.array([5, 4, 3, 5, 2, 5], np.int64)
    mask = np.zeros((6, 5), bool)
    for i, n in enumerate(lengths):
        mask[i, 1:n] = True
    with h5py.File(os.path.join(folder, "plain.h5"), "w", libver="latest") as f:
        f["tokens"] = tokens
        f["lengths"] = lengths
    with h5py.File(os.path.join(folder, "bool_mask.h5"), "w", libver="latest") as f:
        f["tokens"] = tokens.astype(np.int64)
        f["lengths"] = lengths.astype(np.int16)
        f["loss_mask"] = mask
    with h5py.File(os.path.join(folder, "uint8_mask_chunked.h5"), "w", libver="latest") as f:
        f.create_dataset("tokens", data=tokens, chunks=(2, 5), compression="gzip")
        f.create_dataset("lengths", data=lengths.astype(np.int32), chunks=(3,))
        f.create_dataset("loss_mask", data=mask.astype(np.uint8), chunks=(2, 5), maxshape=(None, 5))
    with h5py.File(os.path.join(folder, "old_format.h5"), "w") as f:
        f["tokens"] = tokens[:3]
        f["lengths"] = lengths[:3]
        f["loss_mask"] = mask[:3].astype(np.uint8)


def config_seeds(folder):
    overrides = ["model.heads=4", "train.steps=10", "optim.betas=[0.9, 0.98]", "model.scale=sqrt", 'run.name="x"']
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "*.toml"))):
        with open(path, "rb") as f:
            text = f.read()
        with open(os.path.join(folder, os.path.basename(path)), "wb") as f:
            f.write(text + b"\0" + "\n".join(overrides).encode())
    with open(os.path.join(folder, "overrides_only"), "wb") as f:
        f.write(b"\0" + "\n".join(overrides + ["task.name=translate", "model.kind=encoder-decoder"]).encode())


def sweep_seeds(folder):
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "sweeps", "*.toml"))):
        with open(path) as f:
            body = f.read().split("[sweep]", 1)[1].lstrip("\n")
        with open(os.path.join(folder, os.path.basename(path)), "w") as f:
            f.write(body)
    with open(os.path.join(folder, "mixed.toml"), "w") as f:
        f.write('"model.norm" = ["pre", "post"]\n"optim.betas" = [[0.9, 0.98], [0.8, 0.9]]\n'
                '"model.scale" = ["sqrt", 0.5]\n"optim.lr" = [1e-3, 3e-4]\n')


def safetensors_file(path, entries, metadata=None, pad=True, extra=b""):
    """entries: [(name, dtype, shape, raw bytes)] laid out in this order; extra: bytes after the data."""
    header, blob = ({"__metadata__": metadata} if metadata is not None else {}), b""
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob + extra)


def safetensors_seeds(folder):
    """Small valid files of every dtype attnlab reads, and a few the reader must refuse; each
    also as the header's JSON, a NUL byte and the data (tests/fuzz/fuzz_safetensors.cpp)."""
    half = np.array([1, -2, 65504, 2.0**-24, np.inf, np.nan], "<f2")
    bf16 = (np.array([3.140625, -1.5, 1e-40], "<f4").view("<u4") >> 16).astype("<u2")
    f32 = (np.arange(6, dtype="<f4") / 7).reshape(2, 3)
    f64 = np.array([np.pi, 5e-324], "<f8")
    every = [("h", "F16", (2, 3), half.tobytes()), ("b", "BF16", (3,), bf16.tobytes()), ("w", "F32", (2, 3), f32.tobytes()),
             ("d", "F64", (2,), f64.tobytes()), ("s", "F32", (), np.float32(2.5).tobytes()), ("e", "F32", (0, 4), b"")]
    join = lambda name: os.path.join(folder, name)
    safetensors_file(join("every_dtype.safetensors"), every, {"format": "pt", "note": "caf\u00e9"})
    safetensors_file(join("empty.safetensors"), [])
    safetensors_file(join("unpadded.safetensors"), every[2:4], pad=False)
    safetensors_file(join("integer_dtype.safetensors"), [("i", "I64", (2,), np.arange(2, dtype="<i8").tobytes())])
    safetensors_file(join("trailing_bytes.safetensors"), every[:2], extra=b"\0" * 4)
    with open(join("overlap.safetensors"), "wb") as f:  # a [0, 8), b [4, 12)
        text = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}'
        f.write(struct.pack("<Q", len(text)) + text + bytes(12))
    with open(join("duplicate.safetensors"), "wb") as f:
        text = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
        f.write(struct.pack("<Q", len(text)) + text + bytes(4))
    with open(join("truncated.safetensors"), "wb") as f:  # the header size reaches past the end
        f.write(struct.pack("<Q", 64) + b'{"__metadata__":{}}')
    # The target's other form of input: the header's JSON, a NUL byte, the data.
    for path in glob.glob(join("*.safetensors")):
        with open(path, "rb") as f:
            raw = f.read()
        (size,) = struct.unpack("<Q", raw[:8])
        if 8 + size <= len(raw):
            with open(path[:-len(".safetensors")] + ".json_nul_data", "wb") as f:
                f.write(raw[8:8 + size] + b"\0" + raw[8 + size:])


def recipe_seeds_only(folder, tmp):
    recipe_seeds(folder)


def main():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} ATTNLAB_BINARY")
    attnlab = os.path.abspath(sys.argv[1])
    makers = {"fuzz_checkpoint": recipe_seeds_only,
              "fuzz_checkpoint_files": lambda d, tmp: checkpoint_seeds(attnlab, tmp, d),
              "fuzz_token_file": recipe_seeds_only,
              "fuzz_token_file_files": lambda d, tmp: token_seeds(d),
              "fuzz_config": lambda d, tmp: config_seeds(d),
              "fuzz_sweep": lambda d, tmp: sweep_seeds(d),
              "fuzz_safetensors": lambda d, tmp: safetensors_seeds(d)}
    for target, make in makers.items():
        folder = os.path.join(CORPUS, target)
        os.makedirs(folder, exist_ok=True)
        for old in glob.glob(os.path.join(folder, "*")):
            if not os.path.basename(old).startswith("crash-"):  # reproducers stay
                os.remove(old)
        with tempfile.TemporaryDirectory() as tmp:
            env_tmp = os.path.join(tmp, "w")
            os.makedirs(env_tmp)
            make(folder, env_tmp)
        sizes = [os.path.getsize(p) for p in glob.glob(os.path.join(folder, "*"))]
        print(f"{target}: {len(sizes)} seeds, {sum(sizes)} bytes")


if __name__ == "__main__":
    main()
