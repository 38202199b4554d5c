"""`attnlab export CHECKPOINT --format safetensors|hf|tl --out DIR`, read back by
code written from each format's own documentation, never by attnlab's:

- safetensors: an independent reader (struct + json + numpy) gives every array of
  the checkpoint's /params bit for bit, and the metadata and config text;
- hf: a GPT-2 forward (Hugging Face's modeling_gpt2.py: Conv1D x W + b with W
  [in, out], c_attn = q | k | v, causal softmax, F.gelu) on the exported names
  gives attnlab's logits (`attnlab inspect`), attention patterns and residual
  stream after each block;
- tl: a TransformerLens-style forward (HookedTransformer: einsum with W_Q [h, d, e],
  _W_K/_W_V repeat_interleave'd for grouped K/V, rotate_half rotary with float32
  sin/cos, ALiBi multipliers 2^(-8(h+1)/H), local attention, soft-capping,
  LN/RMS/no norm) does the same on attention-only, grouped, windowed, rotary,
  ALiBi and sinusoidal models;
- every architecture a format cannot express, a bad --format, a non-empty or
  impossible --out and an encoder-decoder for hf/tl: one line, exit 2, nothing written.

    /usr/bin/python3 tests/cli/test_export.py ATTNLAB_BINARY REPO_ROOT
"""
import json
import os
import struct

import h5py
import numpy as np
import torch
import torch.nn.functional as F

import cli_common as cc

# Random weights trained a few steps at a high rate, so that biases and norms are far from their start.
BASE = dict(cc.TINY, **{"model.layers": "2", "train.steps": "10", "train.checkpoint_every": "10",
                        "train.eval_every": "10", "optim.warmup": "0", "optim.lr": "0.01"})
MODELS = {
    "gpt2": {},
    # everything GPT-2 takes besides the default: sinusoidal positions as its table, absent biases as zeros
    "gpt2_variant": {"model.tie_embeddings": "true", "model.activation": "relu", "model.bias": "false",
                     "model.ffn_bias": "false", "model.norm_bias": "false", "model.positional": "sinusoidal",
                     "model.scale": "none"},
    "attn_only": {"model.ffn": "0", "model.norm_type": "rmsnorm", "model.positional": "alibi", "model.heads": "4"},
    "grouped": {"model.heads": "4", "model.kv_heads": "2", "model.window": "3", "model.softcap": "2.0",
                "model.positional": "none", "model.norm": "none"},
    "rotary": {"model.positional": "rotary", "model.head_width": "6", "model.rotary_base": "500",
               "model.scale": "linear", "model.norm_bias": "false", "model.tie_embeddings": "true"},
    "enc_dec": {"task.name": "translate", "model.kind": "encoder-decoder"},
}
TOLERANCE = 1e-5
DIFFS = {}  # "format model" -> largest |logit difference|, printed at the end

Trained = cc.Trained


def checkpoint(label, base=BASE, changes=None):
    return Trained.checkpoint(label, dict(base, **(MODELS[label] if changes is None else changes)))


def tearDownModule():
    Trained.remove()
    print("\nlargest |logits difference| against attnlab inspect:")
    for name, diff in sorted(DIFFS.items()):
        print(f"  {name:24s} {diff:.2e}")


# ---- reading the files (the formats' documentation, not attnlab's code) ----------

def read_safetensors(path):
    """-> ({name: array}, metadata, {name: dtype}): 8-byte little-endian header size,
    the JSON header, then each tensor's bytes at data_offsets from the data's start."""
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    metadata = header.pop("__metadata__", {})
    tensors, dtypes = {}, {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtypes[name] = entry["dtype"]
        raw = data[8 + size + begin: 8 + size + end]
        tensors[name] = np.frombuffer(raw, dtype={"F32": "<f4", "F64": "<f8"}[entry["dtype"]]).reshape(entry["shape"])
    return tensors, metadata, dtypes


def checkpoint_params(path):
    with h5py.File(path, "r") as f:
        params = {}
        f["params"].visititems(lambda name, obj: params.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        config = f.attrs["config"]
        return params, config.decode() if isinstance(config, bytes) else config, int(f.attrs["step"])


# ---- GPT-2 as Hugging Face's GPT2LMHeadModel computes it (eval mode) ---------------

# Hugging Face's ACT2FN and TransformerLens's act_fn by name: "gelu" is F.gelu (erf),
# "gelu_new" GPT-2's tanh approximation (NewGELUActivation, utils.gelu_new), "relu" F.relu.
ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_new": lambda x: 0.5 * x * (1.0 + torch.tanh((2.0 / torch.pi) ** 0.5 * (x + 0.044715 * torch.pow(x, 3.0)))),
    "relu": F.relu,
}


def gpt2_names(cfg):
    names = ["transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight", "transformer.ln_f.bias"]
    for i in range(cfg["n_layer"]):
        names += [f"transformer.h.{i}.{n}" for n in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                  "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                  "mlp.c_proj.weight", "mlp.c_proj.bias")]
    return set(names) | (set() if cfg["tie_word_embeddings"] else {"lm_head.weight"})


def gpt2_forward(sd, cfg, tokens):
    """tokens (B, T) -> logits (B, T, V), attention patterns per layer, residual stream
    [embeddings, after block 0, ...]."""
    t = {k: torch.from_numpy(v.copy()) for k, v in sd.items()}
    D, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    hd = D // H
    act = ACTIVATIONS[cfg["activation_function"]]
    ids = torch.as_tensor(tokens)
    B, T = ids.shape
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))

    def conv1d(x, name):  # Conv1D: x W + b, W (in, out)
        return x @ t[name + ".weight"] + t[name + ".bias"]

    x = t["transformer.wte.weight"][ids] + t["transformer.wpe.weight"][:T]
    hidden, patterns = [x], []
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        h = F.layer_norm(x, (D,), t[p + "ln_1.weight"], t[p + "ln_1.bias"], eps)
        q, k, v = (z.view(B, T, H, hd).transpose(1, 2) for z in conv1d(h, p + "attn.c_attn").split(D, dim=-1))
        w = q @ k.transpose(-1, -2)
        if cfg["scale_attn_weights"]:
            w = w / hd ** 0.5
        w = torch.softmax(w.masked_fill(~causal, torch.finfo(w.dtype).min), dim=-1)
        patterns.append(w)
        x = x + conv1d((w @ v).transpose(1, 2).reshape(B, T, D), p + "attn.c_proj")
        h = F.layer_norm(x, (D,), t[p + "ln_2.weight"], t[p + "ln_2.bias"], eps)
        x = x + conv1d(act(conv1d(h, p + "mlp.c_fc")), p + "mlp.c_proj")
        hidden.append(x)
    x = F.layer_norm(x, (D,), t["transformer.ln_f.weight"], t["transformer.ln_f.bias"], eps)
    unembed = t["transformer.wte.weight"] if cfg["tie_word_embeddings"] else t["lm_head.weight"]
    return x @ unembed.T, patterns, hidden


# ---- TransformerLens's HookedTransformer (eval mode) --------------------------------

def tl_names(cfg):
    norm = {"LN": ("w", "b"), "RMS": ("w",), None: ()}[cfg["normalization_type"]]
    kv = "attn._" if cfg.get("n_key_value_heads") else "attn."
    names = ["embed.W_E", "unembed.W_U", "unembed.b_U"] + [f"ln_final.{n}" for n in norm]
    if cfg["positional_embedding_type"] != "rotary":
        names.append("pos_embed.W_pos")
    for l in range(cfg["n_layers"]):
        p = f"blocks.{l}."
        names += [p + n for n in ("attn.W_Q", "attn.b_Q", "attn.W_O", "attn.b_O")]
        names += [p + kv + n for n in ("W_K", "W_V", "b_K", "b_V")]
        names += [p + f"ln1.{n}" for n in norm]
        if not cfg["attn_only"]:
            names += [p + n for n in ("mlp.W_in", "mlp.b_in", "mlp.W_out", "mlp.b_out")] + [p + f"ln2.{n}" for n in norm]
    return set(names)


def tl_rotary(x, cfg):
    """x (B, pos, head, d_head): calculate_sin_cos_rotary and apply_rotary, not adjacent pairs."""
    r, T = cfg["rotary_dim"], x.shape[1]
    pos = torch.arange(cfg["n_ctx"], dtype=torch.float32)
    dim = torch.arange(r // 2, dtype=torch.float32)
    freq = cfg["rotary_base"] ** (dim / (r / 2))
    freq = torch.cat([freq, freq])  # "d -> (2 d)"
    angles = pos[:, None] / freq[None, :]
    sin, cos = torch.sin(angles)[None, :T, None, :], torch.cos(angles)[None, :T, None, :]
    x_rot, x_pass = x[..., :r], x[..., r:]
    n = r // 2
    flip = torch.cat([-x_rot[..., n:], x_rot[..., :n]], dim=-1)
    return torch.cat([x_rot * cos + flip * sin, x_pass], dim=-1)


def tl_forward(sd, cfg, tokens):
    t = {k: torch.from_numpy(v.copy()) for k, v in sd.items()}
    H, eps = cfg["n_heads"], cfg["eps"]
    kv_heads = cfg.get("n_key_value_heads") or H
    kv = "attn._" if cfg.get("n_key_value_heads") else "attn."
    act = ACTIVATIONS[cfg["act_fn"]]
    ids = torch.as_tensor(tokens)
    T = ids.shape[1]

    def norm(x, name):
        kind = cfg["normalization_type"]
        if kind is None:
            return x
        if kind == "LN":
            x = x - x.mean(-1, keepdim=True)
            return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * t[name + ".w"] + t[name + ".b"]
        return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * t[name + ".w"]

    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = j <= i
    if cfg.get("use_local_attn"):
        allowed = allowed & (j > i - cfg["window_size"])
    x = t["embed.W_E"][ids]
    if cfg["positional_embedding_type"] == "standard":
        x = x + t["pos_embed.W_pos"][:T]
    hidden, patterns = [x], []
    for l in range(cfg["n_layers"]):
        p = f"blocks.{l}."
        h = norm(x, p + "ln1")
        q = torch.einsum("bpd,hde->bphe", h, t[p + "attn.W_Q"]) + t[p + "attn.b_Q"]
        k = torch.einsum("bpd,hde->bphe", h, t[p + kv + "W_K"]) + t[p + kv + "b_K"]
        v = torch.einsum("bpd,hde->bphe", h, t[p + kv + "W_V"]) + t[p + kv + "b_V"]
        if cfg["positional_embedding_type"] == "rotary":
            q, k = tl_rotary(q, cfg), tl_rotary(k, cfg)
        k = k.repeat_interleave(H // kv_heads, dim=2)
        v = v.repeat_interleave(H // kv_heads, dim=2)
        scores = torch.einsum("bqhe,bkhe->bhqk", q, k)
        if cfg["use_attn_scale"]:
            scores = scores / cfg["attn_scale"]
        cap = cfg.get("attn_scores_soft_cap", -1.0)
        if cap > 0:
            scores = cap * torch.tanh(scores / cap)
        if cfg["positional_embedding_type"] == "alibi":
            start = 2 ** (-8 / H)
            multipliers = start * start ** torch.arange(H, dtype=torch.float32)
            scores = scores + multipliers[:, None, None] * (j - i).clamp(max=0).float()
        pattern = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        patterns.append(pattern)
        z = torch.einsum("bhqk,bkhe->bqhe", pattern, v)
        attn_out = torch.einsum("bqhe,hed->bqd", z, t[p + "attn.W_O"]) + t[p + "attn.b_O"]
        # TransformerBlock: the MLP reads resid_mid, or with parallel_attn_mlp resid_pre (ln2 of it)
        mlp_in = x if cfg.get("parallel_attn_mlp") else x + attn_out
        x = x + attn_out
        if not cfg["attn_only"]:
            h = norm(mlp_in, p + "ln2")
            x = x + act(h @ t[p + "mlp.W_in"] + t[p + "mlp.b_in"]) @ t[p + "mlp.W_out"] + t[p + "mlp.b_out"]
        hidden.append(x)
    return norm(x, "ln_final") @ t["unembed.W_U"] + t["unembed.b_U"], patterns, hidden


class Export(cc.TempDirTest):
    def inspect(self, ckpt, rows=3, length=12, seed=0):
        """Random full-length token rows and attnlab's logits, patterns, residual stream on them."""
        tokens = np.random.default_rng(seed).integers(0, 32, size=(rows, length))
        given, out = self.path("tokens.h5"), self.path("inspect.h5")
        with h5py.File(given, "w") as f:
            f["tokens"] = tokens
            f["lengths"] = np.full(rows, length)
        self.run_ok(["inspect", ckpt, "--input", given, "--out", out])
        with h5py.File(out, "r") as f:
            layers = len(f["attention/self"]) - 1  # and score_std
            return (tokens, f["logits"][()], [f[f"attention/self/layer_{l}"][()] for l in range(layers)],
                    [f[f"hidden/decoder/layer_{l}"][()] for l in range(layers + 1)])

    def export(self, ckpt, fmt):
        out = self.path(f"{fmt}_export")
        r = self.run_ok(["export", ckpt, "--format", fmt, "--out", out])
        self.assertIn(f"wrote {out}: {fmt} export", r.stdout)
        self.assertEqual(sorted(os.listdir(out)), sorted(["model.safetensors", "attnlab_config.toml" if fmt == "safetensors"
                                                          else "config.json"]))
        tensors, metadata, dtypes = read_safetensors(os.path.join(out, "model.safetensors"))
        _, config_text, step = checkpoint_params(ckpt)
        self.assertEqual(metadata, {"format": "pt", "attnlab_config": config_text, "step": str(step)})
        self.assertEqual(set(dtypes.values()), {"F32"})
        config = None
        if fmt != "safetensors":
            with open(os.path.join(out, "config.json")) as f:
                config = json.load(f)
        return tensors, config

    def compare(self, name, ckpt, fmt, forward):
        tokens, logits, patterns, hidden = self.inspect(ckpt)
        sd, cfg = self.export(ckpt, fmt)
        self.assertEqual(set(sd), (gpt2_names if fmt == "hf" else tl_names)(cfg))
        with torch.no_grad():
            ours, our_patterns, our_hidden = forward(sd, cfg, tokens)
        diff = float(np.abs(ours.numpy() - logits).max())
        DIFFS[f"{fmt} {name}"] = diff
        self.assertLess(diff, TOLERANCE, f"{fmt} {name}: logits differ by {diff}")
        for l, (a, b) in enumerate(zip(patterns, our_patterns)):
            np.testing.assert_allclose(b.numpy(), a, atol=TOLERANCE, err_msg=f"{fmt} {name}: pattern of layer {l}")
        for l, (a, b) in enumerate(zip(hidden, our_hidden)):
            scale = max(1.0, float(np.abs(a).max()))
            np.testing.assert_allclose(b.numpy(), a, atol=TOLERANCE * scale, err_msg=f"{fmt} {name}: stream after {l} blocks")
        return cfg

    # ---- safetensors: the checkpoint's /params, bit for bit ----

    def test_safetensors_is_the_checkpoint(self):
        for label in ("gpt2", "enc_dec"):
            ckpt = checkpoint(label)
            tensors, _ = self.export(ckpt, "safetensors")
            params, config_text, _ = checkpoint_params(ckpt)
            self.assertEqual(set(tensors), set(params))
            for name, value in params.items():
                self.assertEqual(value.dtype, np.float32)
                np.testing.assert_array_equal(tensors[name], value, err_msg=name)
            with open(self.path("safetensors_export", "attnlab_config.toml")) as f:
                self.assertEqual(f.read(), config_text)
            os.rename(self.path("safetensors_export"), self.path(f"done_{label}"))

    # ---- hf: GPT-2 ----

    def test_hf_gpt2_forward_matches(self):
        cfg = self.compare("gpt2", checkpoint("gpt2"), "hf", gpt2_forward)
        self.assertEqual((cfg["model_type"], cfg["architectures"], cfg["activation_function"]), ("gpt2", ["GPT2LMHeadModel"], "gelu"))
        self.assertEqual((cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["n_inner"], cfg["vocab_size"]), (2, 2, 16, 32, 32))
        self.assertEqual((cfg["layer_norm_epsilon"], cfg["scale_attn_weights"], cfg["tie_word_embeddings"]), (1e-5, True, False))
        self.assertEqual(cfg["n_positions"], cfg["n_ctx"])

    def test_hf_tied_relu_unbiased_sinusoidal(self):
        cfg = self.compare("gpt2_variant", checkpoint("gpt2_variant"), "hf", gpt2_forward)
        self.assertEqual((cfg["activation_function"], cfg["scale_attn_weights"], cfg["tie_word_embeddings"]), ("relu", False, True))
        sd, _ = read_safetensors(self.path("hf_export", "model.safetensors"))[:2]
        self.assertFalse(np.any(sd["transformer.h.0.attn.c_attn.bias"]))  # absent biases are zeros
        self.assertFalse(np.any(sd["transformer.h.1.ln_2.bias"]))
        D = 16  # the sinusoidal table attnlab adds, as wpe
        p, i = np.arange(cfg["n_positions"])[:, None], np.arange(D)
        angle = p / np.power(10000.0, (i - i % 2) / D)
        np.testing.assert_allclose(sd["transformer.wpe.weight"], np.where(i % 2 == 0, np.sin(angle), np.cos(angle)), atol=1e-6)

    # ---- tl: TransformerLens ----

    def test_tl_forward_matches(self):
        for label in ("gpt2", "gpt2_variant"):
            cfg = self.compare(label, checkpoint(label), "tl", tl_forward)
            self.assertEqual((cfg["normalization_type"], cfg["positional_embedding_type"], cfg["original_architecture"]),
                             ("LN", "standard", "attnlab"))
            os.rename(self.path("tl_export"), self.path(f"done_{label}"))

    def test_tl_attention_only_rms_alibi(self):
        cfg = self.compare("attn_only", checkpoint("attn_only"), "tl", tl_forward)
        self.assertEqual((cfg["attn_only"], cfg["d_mlp"], cfg["normalization_type"], cfg["positional_embedding_type"]),
                         (True, None, "RMS", "alibi"))

    def test_tl_grouped_window_softcap_no_norm(self):
        cfg = self.compare("grouped", checkpoint("grouped"), "tl", tl_forward)
        self.assertEqual((cfg["n_key_value_heads"], cfg["window_size"], cfg["attn_types"], cfg["attn_scores_soft_cap"]),
                         (2, 3, ["local", "local"], 2.0))
        self.assertIsNone(cfg["normalization_type"])
        sd, _ = read_safetensors(self.path("tl_export", "model.safetensors"))[:2]
        self.assertEqual(sd["blocks.0.attn._W_K"].shape, (2, 16, 4))  # [H_kv, D, d_h]
        self.assertFalse(np.any(sd["pos_embed.W_pos"]))  # no positions: a table of zeros

    def test_tl_rotary(self):
        cfg = self.compare("rotary", checkpoint("rotary"), "tl", tl_forward)
        self.assertEqual((cfg["rotary_dim"], cfg["rotary_base"], cfg["rotary_adjacent_pairs"], cfg["d_head"], cfg["attn_scale"]),
                         (6, 500, False, 6, 6.0))

    # ---- refusals ----

    def refused(self, args, wants, before=None):
        work = self.path("work")
        os.makedirs(work, exist_ok=True)
        cc.run_refused(self, ["export"] + args, work, self.tmp, wants, before or {})

    def test_architectures_that_do_not_map(self):
        short = dict(cc.TINY, **{"train.steps": "1", "train.checkpoint_every": "1", "train.eval_every": "1", "train.log_every": "1"})
        both = ["hf", "tl"]
        cases = [  # (label, config, formats that refuse it, the option named)
            ("post", {"model.norm": "post"}, both, 'model.norm = "post"'),
            ("scalenorm", {"model.norm_type": "scalenorm"}, both, 'model.norm_type = "scalenorm"'),
            ("prefix_lm", {"model.prefix_lm": "true"}, both, "model.prefix_lm = true"),
            ("documents", {"model.documents": "true", "task.pack": "32"}, both, "model.documents = true"),
            ("sinks", {"model.sinks": "true"}, both, "model.sinks = true"),
            ("rel_buckets", {"model.rel_buckets": "8"}, both, "model.rel_buckets = 8"),
            ("ablate", {"model.ablate_heads": '["0.1"]'}, both, 'model.ablate_heads = ["0.1"]'),
            ("enc_dec_short", MODELS["enc_dec"], both, 'model.kind = "encoder-decoder"'),
            ("alibi3", {"model.positional": "alibi", "model.heads": "3", "model.head_width": "4"}, ["hf"], 'model.positional = "alibi"'),
            ("alibi3", {"model.positional": "alibi", "model.heads": "3", "model.head_width": "4"}, ["tl"],
             'model.positional = "alibi" with model.heads = 3'),
            ("rmsnorm", {"model.norm_type": "rmsnorm"}, ["hf"], 'model.norm_type = "rmsnorm"'),
            ("no_norm", {"model.norm": "none"}, ["hf"], 'model.norm = "none"'),
            ("rotary_short", {"model.positional": "rotary"}, ["hf"], 'model.positional = "rotary"'),
            ("kv_heads", {"model.kv_heads": "1"}, ["hf"], "model.kv_heads = 1"),
            ("head_width", {"model.head_width": "4"}, ["hf"], "model.head_width = 4"),
            ("scale", {"model.scale": "linear"}, ["hf"], 'model.scale = "linear"'),
            ("ffn0", {"model.ffn": "0"}, ["hf"], "model.ffn = 0"),
            ("window", {"model.window": "3"}, ["hf"], "model.window = 3"),
            ("softcap", {"model.softcap": "5"}, ["hf"], "model.softcap = 5"),
        ]
        for label, changes, formats, option in cases:
            ckpt = Trained.checkpoint(label, dict(short, **changes))
            for fmt in formats:
                with self.subTest(model=label, format=fmt):
                    line, shown = cc.run_refused(self, ["export", ckpt, "--format", fmt, "--out", "out"], self.tmp, self.tmp, [], {})
                    tool = "GPT-2" if fmt == "hf" else "TransformerLens"
                    self.assertTrue(line.startswith(f"attnlab export: --format {fmt}: {option} does not map onto {tool} (")
                                    and line.endswith(")"), shown)
        # TransformerLens's ALiBi slopes are Press et al.'s for 4 heads: that one maps
        self.run_ok(["export", Trained.checkpoint("alibi4", dict(short, **{"model.positional": "alibi", "model.heads": "4"})),
                     "--format", "tl", "--out", self.path("alibi4")])

    def test_bad_arguments_write_nothing(self):
        ckpt = checkpoint("gpt2")
        full = self.path("full")
        os.makedirs(full)
        with open(os.path.join(full, "keep.txt"), "w") as f:
            f.write("mine\n")
        with open(self.path("a_file"), "w") as f:
            f.write("mine\n")
        before = {full: cc.tree_hashes(full)}
        self.refused([ckpt, "--format", "onnx", "--out", self.path("x")], ['--format: must be "safetensors", "hf" or "tl", got "onnx"'])
        self.refused([ckpt, "--out", self.path("x")], ["give --format"])
        self.refused([ckpt, "--format", "hf"], ["give --out"])
        self.refused([ckpt, "--format", "hf", "--out", full], ["is a folder that is not empty"], before)
        self.refused([ckpt, "--format", "tl", "--out", self.path("a_file")], ["exists and is not a folder"])
        self.refused([ckpt, "--format", "safetensors", "--out", self.path("no", "such")], ["does not exist"])
        self.refused([self.path("missing.h5"), "--format", "hf", "--out", self.path("x")], ["missing.h5"])
        self.assertEqual(sorted(os.listdir(self.tmp)), ["a_file", "full", "work"])  # no x, no x.tmp-<pid>

    def test_an_empty_folder_is_filled(self):
        out = self.path("empty")
        os.makedirs(out)
        self.run_ok(["export", checkpoint("gpt2"), "--format", "tl", "--out", out + "/"])
        self.assertEqual(sorted(os.listdir(out)), ["config.json", "model.safetensors"])
        self.assertEqual(os.listdir(self.tmp), ["empty"])


if __name__ == "__main__":
    cc.main()
