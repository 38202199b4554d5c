#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

    /usr/bin/python3 tests/fuzz/make_seeds.py ATTNLAB_BINARY [TARGET ...]

The committed seeds were made this way; rerun it only to change them. The HDF5
targets take recipes (any bytes, tests/fuzz/hdf5_recipe.h) from <target>/ and,
with FUZZ_RAW=1, raw files from <target>_files/. The raw checkpoints are real ones (a tiny decoder and encoder-decoder trained for one
step), plus copies with the structures the loaders must refuse (links, loops,
compressed and enum datasets) so that mutations start near them; the token
files are small h5py files; the config seeds are the example configs followed
by overrides; the safetensors seeds are small files written with struct and
json (every dtype attnlab reads, and a few it must refuse); the tokenizer and
import seeds are small tokenizer files and config.json files of each format.
The JSON targets also get issue 51's seeds, written with the targets' repeat
byte (0x01 and a count): values nested 401,409 deep, 100 deep, a megabyte long,
and bytes that are not UTF-8. With TARGET names, only their seeds are written.
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


# In the JSON targets' inputs, 0x01 and a count byte n repeat the byte before
# them n * 4096 times (tests/fuzz/fuzz_common.h): 98 * 4096 + 1 = 401,409 levels.
DEEP = b"[\x01\x62]\x01\x62"
MEGABYTE = b"\x01\xff"  # the byte before, 255 * 4096 times more
HUNDRED = b"[" * 100 + b"]" * 100


def deep_safetensors_seeds(folder):
    """Headers (JSON, NUL, data) that reach issue 51's class: a shape and a metadata value
    nested 400,000 deep, one nested 100 deep, and a name of a megabyte."""
    seeds = {"deep_shape": b'{"a":{"dtype":"F32","shape":[' + DEEP + b'],"data_offsets":[0,0]}}',
             "deep_metadata": b'{"__metadata__":{"k":' + DEEP + b'}}',
             "hundred_shape": b'{"a":{"dtype":"F32","shape":[' + HUNDRED + b'],"data_offsets":[0,0]}}',
             "long_name": b'{"n' + MEGABYTE + b'":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'}
    for name, header in seeds.items():
        with open(os.path.join(folder, name + ".json_nul_data"), "wb") as f:
            f.write(header + b"\0" + bytes(4))


TOKENIZER = (b'{"version": "1.0", "added_tokens": [{"id": 3, "content": "<|endoftext|>", "single_word": false, '
             b'"lstrip": false, "rstrip": false, "normalized": false, "special": true}], "normalizer": NORMALIZER, '
             b'"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}, '
             b'"post_processor": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", '
             b'"dropout": null, "vocab": {"h": 0, "e": 1, "he": 2, "<|endoftext|>": 3}, "merges": [MERGE]}}')


def tokenizer_seeds(folder):
    """tokenizer.json files (GPT-2's and NeoX's layouts) and vocab.json, NUL, merges.txt
    pairs, valid ones and issue 51's: nested 400,000 deep, not UTF-8, a megabyte long."""
    def tokenizer(normalizer=b"null", merge=b'["h", "e"]'):
        return TOKENIZER.replace(b"NORMALIZER", normalizer).replace(b"MERGE", merge)
    vocab = b'{"h": 0, "e": 1, "he": 2, "<|endoftext|>": 3}'
    seeds = {"gpt2.json": tokenizer(), "neox_nfc.json": tokenizer(b'{"type": "NFC"}', b'"h e"'),
             "deep_normalizer.json": tokenizer(b'{"type": ' + DEEP + b'}'), "deep_merge.json": tokenizer(merge=DEEP),
             "hundred_merge.json": tokenizer(merge=HUNDRED), "long_merge.json": tokenizer(merge=b'"h' + MEGABYTE + b' e"'),
             "vocab_merges": vocab + b"\0#version: 0.2\nh e\n", "invalid_merges": vocab + b"\0#version: 0.2\n\xff\xfe\n",
             "invalid_symbol": vocab + b"\0h e\n\xff e\n", "overflow": b'{"h": 1e999}\0h e\n'}
    for name, data in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


def import_seeds(folder):
    """config.json of each format attnlab imports, and issue 51's: rope_scaling nested
    400,000 deep and 100 deep, an activation of a megabyte with a control character."""
    gpt2 = {"model_type": "gpt2", "vocab_size": 48, "n_positions": 32, "n_embd": 32, "n_layer": 2, "n_head": 4,
            "activation_function": "gelu_new"}
    neox = {"model_type": "gpt_neox", "vocab_size": 40, "max_position_embeddings": 32, "hidden_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 96, "rotary_pct": 0.25,
            "rope_scaling": None}
    tl = {"n_layers": 2, "d_model": 32, "n_ctx": 32, "d_vocab": 64, "d_head": 8, "n_heads": 4, "d_mlp": 64,
          "act_fn": "gelu", "normalization_type": "LN", "positional_embedding_type": "rotary", "rotary_dim": 8,
          "use_local_attn": True, "window_size": 4, "attn_types": ["local", "local"]}
    text = lambda config: json.dumps(config).encode()
    seeds = {"gpt2.json": text(gpt2), "neox.json": text(neox), "transformer_lens.json": text(tl),
             "deep_rope.json": text(neox).replace(b'"rope_scaling": null', b'"rope_scaling": ' + DEEP),
             "hundred_rope.json": text(neox).replace(b'"rope_scaling": null', b'"rope_scaling": ' + HUNDRED),
             "long_activation.json": text(gpt2).replace(b'"gelu_new"', b'"\\u001b' + b"x" + MEGABYTE + b'"')}
    for name, data in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


def recipe_seeds_only(folder, tmp):
    recipe_seeds(folder)


def main():
    if len(sys.argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} ATTNLAB_BINARY [TARGET ...]")
    attnlab = os.path.abspath(sys.argv[1])
    makers = {"fuzz_checkpoint": recipe_seeds_only,
              "fuzz_checkpoint_files": lambda d, tmp: checkpoint_seeds(attnlab, tmp, d),
              "fuzz_token_file": recipe_seeds_only,
              "fuzz_token_file_files": lambda d, tmp: token_seeds(d),
              "fuzz_config": lambda d, tmp: config_seeds(d),
              "fuzz_sweep": lambda d, tmp: sweep_seeds(d),
              "fuzz_safetensors": lambda d, tmp: (safetensors_seeds(d), deep_safetensors_seeds(d)),
              "fuzz_tokenizer": lambda d, tmp: tokenizer_seeds(d),
              "fuzz_import": lambda d, tmp: import_seeds(d)}
    chosen = sys.argv[2:] or list(makers)  # ATTNLAB_BINARY [TARGET ...]: only those seeds
    unknown = [t for t in chosen if t not in makers]
    if unknown:
        sys.exit(f"{sys.argv[0]}: no seeds for {', '.join(unknown)} (targets: {', '.join(makers)})")
    for target, make in ((t, makers[t]) for t in chosen):
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
