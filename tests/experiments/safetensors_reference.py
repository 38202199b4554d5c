#!/usr/bin/python3
"""An independent safetensors reader and writer for test_safetensors.cpp, written
from the format's description with struct, json and numpy (Debian's python3 has
no safetensors package).

    safetensors_reference.py write FILE DUMP   # writes a file (F16, BF16, F32, F64), and DUMP: what it holds
    safetensors_reference.py read FILE DUMP    # checks a file attnlab wrote and dumps what it holds

DUMP has one line per tensor, in file order: `name DTYPE ndim dims... values...`
(values as Python's repr of the exact double), then `__metadata__ {json}`.
A failed check exits with an AssertionError (status 1).
"""
import json
import struct
import sys

import numpy as np


def dump_lines(tensors, metadata):
    """tensors: [(name, dtype name, shape, float64 values)] in file order."""
    lines = []
    for name, dtype, shape, values in tensors:
        words = [name, dtype, str(len(shape))] + [str(d) for d in shape] + [repr(float(v)) for v in values.ravel()]
        lines.append(" ".join(words))
    lines.append("__metadata__ " + json.dumps(metadata))
    return "\n".join(lines) + "\n"


def bfloat16_bits(values):
    """bfloat16 by truncation (numpy has no bfloat16): the top 16 bits of each float32."""
    return (np.asarray(values, dtype="<f4").view("<u4") >> 16).astype("<u2")


def write(path, dump):
    half = np.array([1.0, -2.0, 65504.0, 2.0**-24, 2.0**-14 - 2.0**-24, -0.0, np.inf, -np.inf, np.nan, 1 / 3],
                    dtype="<f2").reshape(2, 5)
    bf16 = bfloat16_bits([3.140625, -1.5, 1e-40, 3.0e38])
    data = [  # in this file order, which is not the names' order
        ("z.half", "F16", half.shape, half.tobytes(), half.astype(np.float64)),
        ("m.bf16", "BF16", bf16.shape, bf16.tobytes(), (bf16.astype("<u4") << 16).view("<f4").astype(np.float64)),
        ("a.f32", "F32", (2, 3), (np.arange(6, dtype="<f4").reshape(2, 3) / np.float32(7)).tobytes(), None),
        ("b.f64", "F64", (3,), np.array([np.pi, -1e-300, 5e-324], dtype="<f8").tobytes(), None),
        ("s.scalar", "F32", (), np.array(2.5, dtype="<f4").tobytes(), None),
        ("e.empty", "F32", (0, 5), b"", None),
    ]
    metadata = {"format": "pt", "note": "caf\u00e9 \u2713"}  # json.dumps writes these as \u escapes
    header, blob, tensors = {"__metadata__": metadata}, b"", []
    for name, dtype, shape, raw, values in data:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
        if values is None:
            values = np.frombuffer(raw, dtype="<f4" if dtype == "F32" else "<f8").astype(np.float64)
        tensors.append((name, dtype, shape, values))
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob)
    with open(dump, "w") as f:
        f.write(dump_lines(tensors, metadata))


def read(path, dump):
    with open(path, "rb") as f:
        raw = f.read()
    (size,) = struct.unpack("<Q", raw[:8])
    assert size % 8 == 0, f"header of {size} bytes is not padded to a multiple of 8"
    text = raw[8:8 + size].decode("utf-8")
    assert text.rstrip(" ") == text.strip(), "the header is padded with something other than trailing spaces"
    header = json.loads(text)
    metadata = header.pop("__metadata__", {})
    data = raw[8 + size:]
    entries = sorted(header.items(), key=lambda item: item[1]["data_offsets"])
    expected = sorted(header.items(), key=lambda item: (item[1]["dtype"] != "F64", item[0]))
    assert [name for name, _ in entries] == [name for name, _ in expected], "not F64 first, then F32, each by name"
    tensors, end = [], 0
    for name, info in entries:
        begin, stop = info["data_offsets"]
        assert begin == end, f"{name}: begins at {begin}, not {end}"
        dtype = {"F32": "<f4", "F64": "<f8"}[info["dtype"]]
        values = np.frombuffer(data[begin:stop], dtype=dtype)
        assert values.size == int(np.prod(info["shape"])), f"{name}: {values.size} values for shape {info['shape']}"
        tensors.append((name, info["dtype"], info["shape"], values.astype(np.float64)))
        end = stop
    assert end == len(data), f"the tensors end at {end}, the data section at {len(data)}"
    with open(dump, "w") as f:
        f.write(dump_lines(tensors, metadata))


if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](sys.argv[2], sys.argv[3])
