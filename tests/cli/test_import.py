"""`attnlab import DIR --out CKPT.h5` against models built by code written from
each format's own documentation, never from attnlab's:

- a safetensors writer (struct + json + numpy: 8-byte little-endian header size,
  the JSON header {name: {dtype, shape, data_offsets}} and "__metadata__", then
  the raw little-endian bytes) stores random weights as F32, F16, BF16 or F64;
- independent PyTorch forwards compute each format's model on the weights as
  stored (rounded to F16/BF16 and back, or F64 to float32): Hugging Face's GPT-2
  (modeling_gpt2.py: Conv1D x W + b with W [in, out], c_attn = q | k | v,
  gelu_new, with and without the "transformer." prefix, tied and untied, the
  old attn.bias / attn.masked_bias buffers), GPT-NeoX / Pythia
  (modeling_gpt_neox.py: query_key_value viewed per head as q | k | v,
  rotate_half rotary on the first int(d_h rotary_pct) features, parallel and
  sequential residual, its buffers) and TransformerLens's HookedTransformer
  (W_Q [h, d, e], LN / RMS, standard or partial rotary positions, attention-only,
  parallel_attn_mlp, a nonzero b_U, attn_scale);
- each model is imported, `attnlab inspect --hooks "*"` runs it, and its logits,
  attention patterns, residual stream and every hook point it writes (embed,
  resid_pre/mid/post, ln1/ln2/ln_f out, attn in/q/k/v/rot_q/rot_k/scores/
  pattern/z/result/out, ffn hidden/out, logits) agree with the forward within
  1e-5 (relative to max(1, max |reference|));
- round trip: tiny attnlab models trained with gelu_tanh, norm_eps, parallel
  blocks, partial rotary, a head width of its own and a head bias are exported
  (hf, tl, safetensors), read back by the same PyTorch forwards (agreement with
  `inspect` of the original) and imported again (the same logits; the
  safetensors round trip bit for bit, parameters included);
- buffers a tool saves beside its weights, in the dtypes it saves them (Pythia's
  BOOL causal mask, TransformerLens's BOOL mask and -inf IGNORE), are skipped;
- HookedTransformerConfig's defaults (normalization_type "LN", d_mlp 4 d_model)
  where a config leaves them out;
- a GPT-2 tokenizer (vocab.json + merges.txt) beside the weights: --tokens and
  --prompt take text, encoded as encoder.py does, special token included;
- every analysis command (inspect, lens, patch, path-patch, circuit, decompose,
  heads, generate --check-cache, and eval, cache, audit, ablate with --data, a
  token file) runs on an imported Pythia-like model, cache's logits agreeing
  with the PyTorch forward;
- every bad folder, file, tensor or config field: one line "attnlab import: ...",
  exit 2, naming the field, tensor or file, and nothing written.

    /usr/bin/python3 tests/cli/test_import.py ATTNLAB_BINARY REPO_ROOT
"""
import json
import math
import os
import shutil
import struct
import tomllib

import h5py
import numpy as np
import torch
import torch.nn.functional as F

import cli_common as cc

TOLERANCE = 1e-5
DIFFS = {}  # case -> largest |logits difference|, printed at the end
Trained = cc.Trained


def tearDownModule():
    Trained.remove()
    print("\nlargest |logits difference| (reference: PyTorch forward, or the original checkpoint):")
    for name, diff in sorted(DIFFS.items()):
        print(f"  {name:34s} {diff:.2e}")


# ---- safetensors, from the format's documentation -----------------------------------

# dtype name -> numpy storage of one element
STORAGE = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "BOOL": "|u1", "I8": "|i1", "F8_E4M3": "|u1"}


def bf16_bits(values):
    """float32 -> bfloat16 bit patterns (the top 16 bits of the float32), rounded to nearest even."""
    bits = np.asarray(values, dtype="<f4").view("<u4").astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")


def encoded(values, dtype):
    """The little-endian bytes of `values` as `dtype`."""
    values = np.asarray(values)
    if dtype == "BF16":
        return bf16_bits(values.astype(np.float32)).tobytes()
    return np.ascontiguousarray(values.astype(STORAGE[dtype])).tobytes()


def as_stored(values, dtype):
    """What a float32 reader gets back from `values` stored as `dtype`."""
    values = np.asarray(values)
    if dtype == "BF16":
        return (bf16_bits(values.astype(np.float32)).astype("<u4") << 16).view("<f4")
    return values.astype(STORAGE[dtype]).astype(np.float32)


def safetensors_bytes(tensors, metadata=None, edit=None):
    """tensors: [(name, dtype, shape, raw bytes)] -> the file: u64 header size, JSON header,
    then the data, each tensor at data_offsets [begin, end) from the data's start.
    `edit(header)` may change the header before it is written (a lying file)."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if edit:
        edit(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # padded so that the data starts aligned
    return struct.pack("<Q", len(text)) + text + data


def read_safetensors(path):
    """-> {name: float32 array} of a file (the exports: F32 or F64)."""
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    header.pop("__metadata__", None)
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        raw = np.frombuffer(data[8 + size + begin: 8 + size + end], dtype=STORAGE[entry["dtype"]])
        out[name] = raw.astype(np.float32).reshape(entry["shape"])
    return out


def save_model(folder, config, state, dtype="F32", buffers=None):
    """Writes folder/config.json and folder/model.safetensors (every tensor of `state`
    as `dtype`, then `buffers` {name: (dtype, array)} in their own dtypes); returns
    the state as the reader gets it (float32)."""
    os.makedirs(folder, exist_ok=True)
    tensors = [(name, dtype, np.shape(value), encoded(value, dtype)) for name, value in state.items()]
    tensors += [(name, d, np.shape(value), encoded(value, d)) for name, (d, value) in (buffers or {}).items()]
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(safetensors_bytes(tensors, {"format": "pt"}))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return {name: as_stored(value, dtype) for name, value in state.items()}


# ---- random weights ----------------------------------------------------------------

class Draw:
    """Weights of std 0.2, biases of std 0.1, norm weights 1 + N(0, 0.1): every parameter
    matters. float64, so that an F64 file holds values float32 does not."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def weight(self, *shape):
        return 0.2 * self.rng.standard_normal(shape)

    def bias(self, *shape):
        return 0.1 * self.rng.standard_normal(shape)

    def norm(self, n):
        return 1.0 + 0.1 * self.rng.standard_normal(n)


def gpt2_state(draw, cfg, top="transformer."):
    D, V, P = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    F_ = cfg.get("n_inner") or 4 * D
    sd = {top + "wte.weight": draw.weight(V, D), top + "wpe.weight": draw.weight(P, D)}
    for l in range(cfg["n_layer"]):
        h = f"{top}h.{l}."
        sd.update({h + "ln_1.weight": draw.norm(D), h + "ln_1.bias": draw.bias(D),
                   h + "attn.c_attn.weight": draw.weight(D, 3 * D), h + "attn.c_attn.bias": draw.bias(3 * D),
                   h + "attn.c_proj.weight": draw.weight(D, D), h + "attn.c_proj.bias": draw.bias(D),
                   h + "ln_2.weight": draw.norm(D), h + "ln_2.bias": draw.bias(D),
                   h + "mlp.c_fc.weight": draw.weight(D, F_), h + "mlp.c_fc.bias": draw.bias(F_),
                   h + "mlp.c_proj.weight": draw.weight(F_, D), h + "mlp.c_proj.bias": draw.bias(D)})
    sd.update({top + "ln_f.weight": draw.norm(D), top + "ln_f.bias": draw.bias(D)})
    if not cfg.get("tie_word_embeddings", True):
        sd["lm_head.weight"] = draw.weight(V, D)
    return sd


def neox_state(draw, cfg):
    D, V, F_ = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    sd = {"gpt_neox.embed_in.weight": draw.weight(V, D)}
    for l in range(cfg["num_hidden_layers"]):
        h = f"gpt_neox.layers.{l}."
        sd.update({h + "input_layernorm.weight": draw.norm(D), h + "input_layernorm.bias": draw.bias(D),
                   h + "post_attention_layernorm.weight": draw.norm(D), h + "post_attention_layernorm.bias": draw.bias(D),
                   h + "attention.query_key_value.weight": draw.weight(3 * D, D),
                   h + "attention.query_key_value.bias": draw.bias(3 * D),
                   h + "attention.dense.weight": draw.weight(D, D), h + "attention.dense.bias": draw.bias(D),
                   h + "mlp.dense_h_to_4h.weight": draw.weight(F_, D), h + "mlp.dense_h_to_4h.bias": draw.bias(F_),
                   h + "mlp.dense_4h_to_h.weight": draw.weight(D, F_), h + "mlp.dense_4h_to_h.bias": draw.bias(D)})
    sd.update({"gpt_neox.final_layer_norm.weight": draw.norm(D), "gpt_neox.final_layer_norm.bias": draw.bias(D),
               "embed_out.weight": draw.weight(V, D)})
    return sd


def tl_state(draw, cfg, head_bias=True):
    D, H, dh, V = cfg["d_model"], cfg["n_heads"], cfg["d_head"], cfg["d_vocab"]
    kv_heads = cfg.get("n_key_value_heads")
    norm = {"LN": ("w", "b"), "RMS": ("w",), None: ()}[cfg["normalization_type"]]

    def add_norm(sd, name):
        for part in norm:
            sd[f"{name}.{part}"] = draw.norm(D) if part == "w" else draw.bias(D)

    sd = {"embed.W_E": draw.weight(V, D)}
    if cfg["positional_embedding_type"] == "standard":
        sd["pos_embed.W_pos"] = draw.weight(cfg["n_ctx"], D)
    for l in range(cfg["n_layers"]):
        p = f"blocks.{l}."
        add_norm(sd, p + "ln1")
        for n in "QKV":  # grouped K/V (n_key_value_heads set): GroupedQueryAttention's _W_K, _W_V [H_kv, D, d_h]
            heads, at = (kv_heads, "attn._") if n != "Q" and kv_heads else (H, "attn.")
            sd[p + f"{at}W_{n}"] = draw.weight(heads, D, dh)
            sd[p + f"{at}b_{n}"] = draw.bias(heads, dh)
        sd[p + "attn.W_O"] = draw.weight(H, dh, D)
        sd[p + "attn.b_O"] = draw.bias(D)
        if not cfg["attn_only"]:
            add_norm(sd, p + "ln2")
            sd.update({p + "mlp.W_in": draw.weight(D, cfg["d_mlp"]), p + "mlp.b_in": draw.bias(cfg["d_mlp"]),
                       p + "mlp.W_out": draw.weight(cfg["d_mlp"], D), p + "mlp.b_out": draw.bias(D)})
    add_norm(sd, "ln_final")
    sd["unembed.W_U"] = draw.weight(D, V)
    sd["unembed.b_U"] = draw.bias(V) if head_bias else np.zeros(V)
    return sd


# ---- the three forwards (eval mode), recording what maps onto attnlab's hook points ----------

def gelu_new(x):
    """Hugging Face's NewGELUActivation and TransformerLens's gelu_new: GPT-2's tanh approximation."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


# ACT2FN / act_fn names: "gelu" is the exact (erf) GELU in both
ACTIVATIONS = {"gelu": F.gelu, "gelu_new": gelu_new, "relu": F.relu}


def torch_state(sd):
    return {name: torch.from_numpy(np.array(value, dtype=np.float32)) for name, value in sd.items()}


def causal_attention(q, k, v, divide_by, acts, a):
    """q, k, v (B, T, H, d_h), after any rotary -> z (B, T, H, d_h): softmax(q k^T / s) v over
    keys j <= i. Hugging Face fills the masked scores with finfo.min, TransformerLens with
    -inf: either weighs them 0. Records scores (-inf where masked), pattern and z."""
    T = q.shape[1]
    scores = torch.einsum("bqhe,bkhe->bhqk", q, k)
    if divide_by is not None:
        scores = scores / divide_by
    future = ~torch.tril(torch.ones(T, T, dtype=torch.bool))
    acts[a + "scores"] = scores = scores.masked_fill(future, float("-inf"))
    acts[a + "pattern"] = pattern = torch.softmax(scores, dim=-1)
    acts[a + "z"] = z = torch.einsum("bhqk,bkhe->bqhe", pattern, v)
    return z


def rotate_half_rotary(x, r, base):
    """x (B, T, H, d_h): the first r features turn in pairs (c, c + r/2) by the angle
    p / base^(2c/r) at position p (GPT-NeoX's rotate_half; TransformerLens without
    rotary_adjacent_pairs); the rest pass unchanged. With GPT-NeoX's float32 tables."""
    T = x.shape[1]
    inv_freq = 1.0 / (base ** (torch.arange(0, r, 2).float() / r))
    angles = torch.outer(torch.arange(T).float(), inv_freq)
    emb = torch.cat([angles, angles], dim=-1)[None, :, None, :]  # (1, T, 1, r)
    x_rot, x_pass = x[..., :r], x[..., r:]
    half = torch.cat([-x_rot[..., r // 2:], x_rot[..., :r // 2]], dim=-1)
    return torch.cat([x_rot * emb.cos() + half * emb.sin(), x_pass], dim=-1)


def gpt2_forward(sd, cfg, tokens):
    """GPT2LMHeadModel: {hook name: activation} for tokens (B, T)."""
    t = torch_state(sd)
    top = "transformer." if "transformer.wte.weight" in t else ""
    D, H = cfg["n_embd"], cfg["n_head"]
    dh, eps = D // H, cfg.get("layer_norm_epsilon", 1e-5)
    act = ACTIVATIONS[cfg.get("activation_function", "gelu_new")]
    ids = torch.as_tensor(tokens)
    B, T = ids.shape

    def conv1d(x, name):  # Conv1D: x W + b with W (in, out)
        return x @ t[name + ".weight"] + t[name + ".bias"]

    def ln(x, name):
        return F.layer_norm(x, (D,), t[name + ".weight"], t[name + ".bias"], eps)

    acts = {}
    x = acts["embed"] = t[top + "wte.weight"][ids] + t[top + "wpe.weight"][:T]
    for l in range(cfg["n_layer"]):
        h, a = f"{top}h.{l}.", f"blocks.{l}."
        acts[a + "resid_pre"] = x
        acts[a + "ln1.out"] = acts[a + "attn.in"] = acts[a + "attn.in_kv"] = y = ln(x, h + "ln_1")
        q, k, v = (part.reshape(B, T, H, dh) for part in conv1d(y, h + "attn.c_attn").split(D, dim=-1))
        acts[a + "attn.q"], acts[a + "attn.k"], acts[a + "attn.v"] = q, k, v
        z = causal_attention(q, k, v, dh ** 0.5 if cfg.get("scale_attn_weights", True) else None, acts, a + "attn.")
        acts[a + "attn.result"] = torch.einsum("bqhe,hed->bqhd", z, t[h + "attn.c_proj.weight"].view(H, dh, D))
        acts[a + "attn.out"] = out = conv1d(z.reshape(B, T, D), h + "attn.c_proj")
        x = acts[a + "resid_mid"] = x + out
        acts[a + "ln2.out"] = y = ln(x, h + "ln_2")
        acts[a + "ffn.hidden"] = hidden = act(conv1d(y, h + "mlp.c_fc"))
        acts[a + "ffn.out"] = out = conv1d(hidden, h + "mlp.c_proj")
        x = acts[a + "resid_post"] = x + out
    acts["ln_f.out"] = y = ln(x, top + "ln_f")
    unembed = t[top + "wte.weight"] if cfg.get("tie_word_embeddings", True) else t["lm_head.weight"]
    acts["logits"] = y @ unembed.T
    return acts


def neox_forward(sd, cfg, tokens):
    """GPTNeoXForCausalLM: {hook name: activation} for tokens (B, T)."""
    t = torch_state(sd)
    D, H = cfg["hidden_size"], cfg["num_attention_heads"]
    dh, eps = D // H, cfg.get("layer_norm_eps", 1e-5)
    r = int(dh * cfg.get("rotary_pct", 0.25))
    act = ACTIVATIONS[cfg.get("hidden_act", "gelu")]
    ids = torch.as_tensor(tokens)
    B, T = ids.shape

    def linear(x, name):  # nn.Linear: x W^T + b with W (out, in)
        return x @ t[name + ".weight"].T + t[name + ".bias"]

    def ln(x, name):
        return F.layer_norm(x, (D,), t[name + ".weight"], t[name + ".bias"], eps)

    acts = {}
    x = acts["embed"] = t["gpt_neox.embed_in.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        h, a = f"gpt_neox.layers.{l}.", f"blocks.{l}."
        acts[a + "resid_pre"] = x
        acts[a + "ln1.out"] = acts[a + "attn.in"] = acts[a + "attn.in_kv"] = y = ln(x, h + "input_layernorm")
        qkv = linear(y, h + "attention.query_key_value").view(B, T, H, 3 * dh)  # per head: q | k | v
        q, k, v = qkv[..., :dh], qkv[..., dh:2 * dh], qkv[..., 2 * dh:]
        acts[a + "attn.q"], acts[a + "attn.k"], acts[a + "attn.v"] = q, k, v
        if r > 0:
            q = acts[a + "attn.rot_q"] = rotate_half_rotary(q, r, cfg.get("rotary_emb_base", 10000))
            k = acts[a + "attn.rot_k"] = rotate_half_rotary(k, r, cfg.get("rotary_emb_base", 10000))
        z = causal_attention(q, k, v, math.sqrt(dh), acts, a + "attn.")  # norm_factor sqrt(head_size)
        acts[a + "attn.result"] = torch.einsum("bqhe,dhe->bqhd", z, t[h + "attention.dense.weight"].view(D, H, dh))
        acts[a + "attn.out"] = attn_out = linear(z.reshape(B, T, D), h + "attention.dense")

        def mlp(y):
            acts[a + "ffn.hidden"] = hidden = act(linear(y, h + "mlp.dense_h_to_4h"))
            acts[a + "ffn.out"] = out = linear(hidden, h + "mlp.dense_4h_to_h")
            return out

        if cfg.get("use_parallel_residual", True):  # x + attn(ln1(x)) + mlp(ln2(x))
            acts[a + "ln2.out"] = y = ln(x, h + "post_attention_layernorm")
            x = mlp(y) + attn_out + x
        else:
            x = acts[a + "resid_mid"] = attn_out + x
            acts[a + "ln2.out"] = y = ln(x, h + "post_attention_layernorm")
            x = mlp(y) + x
        acts[a + "resid_post"] = x
    acts["ln_f.out"] = y = ln(x, "gpt_neox.final_layer_norm")
    acts["logits"] = y @ t["embed_out.weight"].T
    return acts


def tl_forward(sd, cfg, tokens):
    """HookedTransformer: {hook name: activation} for tokens (B, T)."""
    t = torch_state(sd)
    kind, eps = cfg["normalization_type"], cfg.get("eps", 1e-5)
    act = ACTIVATIONS.get(cfg.get("act_fn"))
    ids = torch.as_tensor(tokens)

    def norm(x, name):  # LayerNorm / RMSNorm as TransformerLens writes them
        if kind is None:
            return x
        if kind == "LN":
            x = x - x.mean(-1, keepdim=True)
            return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * t[name + ".w"] + t[name + ".b"]
        return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * t[name + ".w"]

    acts = {}
    x = t["embed.W_E"][ids]
    if cfg.get("positional_embedding_type", "standard") == "standard":
        x = x + t["pos_embed.W_pos"][:ids.shape[1]]
    acts["embed"] = x
    for l in range(cfg["n_layers"]):
        p = a = f"blocks.{l}."
        acts[a + "resid_pre"] = x
        acts[a + "ln1.out"] = acts[a + "attn.in"] = acts[a + "attn.in_kv"] = y = norm(x, p + "ln1")
        grouped = cfg.get("n_key_value_heads")
        for n in "QKV":
            at = "attn._" if n != "Q" and grouped else "attn."
            acts[a + "attn." + n.lower()] = torch.einsum("bpd,hde->bphe", y, t[p + f"{at}W_{n}"]) + t[p + f"{at}b_{n}"]
        q, k, v = acts[a + "attn.q"], acts[a + "attn.k"], acts[a + "attn.v"]
        if cfg.get("positional_embedding_type") == "rotary":
            q = acts[a + "attn.rot_q"] = rotate_half_rotary(q, cfg["rotary_dim"], cfg.get("rotary_base", 10000))
            k = acts[a + "attn.rot_k"] = rotate_half_rotary(k, cfg["rotary_dim"], cfg.get("rotary_base", 10000))
        if grouped:  # query head h reads K/V head h // (H / H_kv): repeat_interleave
            k = k.repeat_interleave(cfg["n_heads"] // grouped, dim=2)
            v = v.repeat_interleave(cfg["n_heads"] // grouped, dim=2)
        scale = cfg.get("attn_scale", math.sqrt(cfg["d_head"])) if cfg.get("use_attn_scale", True) else None
        z = causal_attention(q, k, v, scale, acts, a + "attn.")
        acts[a + "attn.result"] = torch.einsum("bqhe,hed->bqhd", z, t[p + "attn.W_O"])
        acts[a + "attn.out"] = attn_out = acts[a + "attn.result"].sum(2) + t[p + "attn.b_O"]

        def mlp(y):
            acts[a + "ffn.hidden"] = hidden = act(y @ t[p + "mlp.W_in"] + t[p + "mlp.b_in"])
            acts[a + "ffn.out"] = out = hidden @ t[p + "mlp.W_out"] + t[p + "mlp.b_out"]
            return out

        if cfg["attn_only"]:
            x = acts[a + "resid_mid"] = x + attn_out
        elif cfg.get("parallel_attn_mlp", False):  # the MLP reads ln2 of resid_pre
            acts[a + "ln2.out"] = y = norm(x, p + "ln2")
            x = x + mlp(y) + attn_out
        else:
            x = acts[a + "resid_mid"] = x + attn_out
            acts[a + "ln2.out"] = y = norm(x, p + "ln2")
            x = x + mlp(y)
        acts[a + "resid_post"] = x
    acts["ln_f.out"] = y = norm(x, "ln_final")
    acts["logits"] = y @ t["unembed.W_U"] + t["unembed.b_U"]
    return acts


# ---- the models each format is tested on ----------------------------------------

GPT2 = {"model_type": "gpt2", "vocab_size": 48, "n_positions": 32, "n_embd": 32, "n_layer": 2, "n_head": 4}
NEOX = {"model_type": "gpt_neox", "vocab_size": 40, "max_position_embeddings": 32, "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 96, "tie_word_embeddings": False}
TL = {"n_layers": 2, "d_model": 32, "n_ctx": 32, "d_vocab": 64, "d_vocab_out": 64, "model_name": "random",
      "original_architecture": "random"}


def mask(n):
    return np.tril(np.ones((n, n)))


def with_lm_head_copy(sd):
    """A tied GPT-2 that saved its head anyway: lm_head.weight, a copy of wte."""
    return dict(sd, **{"lm_head.weight": sd["transformer.wte.weight"]})


# label -> (config, state builder, dtype, buffers(config) or None, forward, what the imported config says)
CASES = {
    "gpt2_gelu_new_untied": (
        dict(GPT2, n_inner=None, activation_function="gelu_new", layer_norm_epsilon=1e-5, scale_attn_weights=True,
             tie_word_embeddings=False),
        gpt2_state, "F32", None, gpt2_forward,
        {"model": {"activation": "gelu_tanh", "ffn": 128, "tie_embeddings": False, "max_len": 32}, "task": {"vocab": 48}}),
    # the original gpt2 upload: no "transformer.", tied (the default), its F32 mask buffers
    "gpt2_hub_names_buffers_f16": (
        dict(GPT2, n_inner=48, activation_function="gelu", layer_norm_epsilon=1e-6),
        lambda draw, cfg: gpt2_state(draw, cfg, top=""), "F16",
        lambda cfg: {**{f"h.{l}.attn.bias": ("F32", mask(32)[None, None]) for l in range(2)},
                     **{f"h.{l}.attn.masked_bias": ("F32", np.array(-1e4)) for l in range(2)}},
        gpt2_forward, {"model": {"activation": "gelu", "ffn": 48, "norm_eps": 1e-6, "tie_embeddings": True}}),
    # tied with a copy of wte saved as lm_head.weight (unread)
    "gpt2_relu_unscaled_tied_bf16": (
        dict(GPT2, n_head=2, activation_function="relu", scale_attn_weights=False, tie_word_embeddings=True),
        lambda draw, cfg: with_lm_head_copy(gpt2_state(draw, cfg)),
        "BF16", None, gpt2_forward, {"model": {"activation": "relu", "scale": "none", "tie_embeddings": True}}),
    # Pythia's layout: parallel residual, rotary on a quarter of each head (d_h 16: r = 4), its F32 buffers
    "neox_parallel_rotary_quarter_f16": (
        dict(NEOX, hidden_act="gelu", rotary_pct=0.25, rotary_emb_base=10000, use_parallel_residual=True, layer_norm_eps=1e-5),
        neox_state, "F16",
        lambda cfg: {**{f"gpt_neox.layers.{l}.attention.rotary_emb.inv_freq": ("F32", 1.0 / 10000 ** (np.arange(0, 4, 2) / 4))
                        for l in range(2)},
                     **{f"gpt_neox.layers.{l}.attention.masked_bias": ("F32", np.array(-1e9)) for l in range(2)}},
        neox_forward, {"model": {"parallel": True, "positional": "rotary", "rotary_dims": 4, "activation": "gelu"}}),
    "neox_sequential_full_rotary_f64": (
        dict(NEOX, num_attention_heads=4, hidden_act="gelu_new", rotary_pct=1.0, rotary_emb_base=500,
             use_parallel_residual=False, layer_norm_eps=1e-6),
        neox_state, "F64", None, neox_forward,
        {"model": {"parallel": False, "positional": "rotary", "rotary_dims": 0, "rotary_base": 500.0, "norm_eps": 1e-6,
                   "activation": "gelu_tanh"}}),
    "tl_ln_standard_gelu_new_b_U": (
        dict(TL, d_head=8, n_heads=4, d_mlp=64, act_fn="gelu_new", attn_only=False, eps=1e-6, normalization_type="LN",
             positional_embedding_type="standard", use_attn_scale=True),
        tl_state, "F32", None, tl_forward,
        {"model": {"head_bias": True, "activation": "gelu_tanh", "norm_eps": 1e-6, "positional": "learned"}}),
    # attention-only, RMS, rotary on 4 of 8 features, heads x d_head (16) != d_model, b_U zeros; its buffers
    "tl_attn_only_rms_partial_rotary": (
        dict(TL, d_head=8, n_heads=2, d_mlp=None, act_fn=None, attn_only=True, eps=1e-5, normalization_type="RMS",
             positional_embedding_type="rotary", rotary_dim=4, rotary_base=10000, rotary_adjacent_pairs=False,
             use_attn_scale=True),
        lambda draw, cfg: tl_state(draw, cfg, head_bias=False), "F32",
        lambda cfg: {**{f"blocks.{l}.attn.IGNORE": ("F32", np.array(-np.inf)) for l in range(2)},
                     **{f"blocks.{l}.attn.rotary_{f}": ("F32", np.zeros((32, 4))) for l in range(2) for f in ("sin", "cos")}},
        tl_forward,
        {"model": {"ffn": 0, "norm_type": "rmsnorm", "positional": "rotary", "rotary_dims": 4, "head_width": 8,
                   "head_bias": False}}),
    # grouped K/V: n_key_value_heads 2 for 4 query heads (attn._W_K, _W_V), rotary on every feature
    "tl_grouped_kv_rotary": (
        dict(TL, d_head=8, n_heads=4, n_key_value_heads=2, d_mlp=64, act_fn="gelu", attn_only=False, eps=1e-5,
             normalization_type="LN", positional_embedding_type="rotary", rotary_dim=8, rotary_base=10000,
             rotary_adjacent_pairs=False, use_attn_scale=True),
        tl_state, "F32", None, tl_forward, {"model": {"kv_heads": 2, "rotary_dims": 0, "positional": "rotary"}}),
    # n_key_value_heads given equal to n_heads: still GroupedQueryAttention's names (_W_K, _W_V)
    "tl_kv_heads_equal_heads": (
        dict(TL, d_head=8, n_heads=2, n_key_value_heads=2, d_mlp=64, act_fn="relu", attn_only=False, eps=1e-5,
             normalization_type="RMS", positional_embedding_type="standard", use_attn_scale=True),
        tl_state, "F32", None, tl_forward, {"model": {"kv_heads": 0, "norm_type": "rmsnorm"}}),
    # parallel_attn_mlp, scores divided by attn_scale 4 (not sqrt(d_head))
    "tl_parallel_attn_scale_bf16": (
        dict(TL, d_head=8, n_heads=4, d_mlp=48, act_fn="gelu", attn_only=False, eps=1e-5, normalization_type="LN",
             positional_embedding_type="standard", parallel_attn_mlp=True, use_attn_scale=True, attn_scale=4.0),
        tl_state, "BF16", None, tl_forward, {"model": {"parallel": True, "head_bias": True, "activation": "gelu"}}),
}


def gpt2_byte_symbols():
    """GPT-2's bytes_to_unicode (encoder.py): printable bytes stand for themselves, the
    others for 256 + n, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    symbols, n = {}, 0
    for b in range(256):
        if b in printable:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + n)
            n += 1
    return symbols


def saved_config(ckpt):
    with h5py.File(ckpt, "r") as f:
        config = f.attrs["config"]
        return tomllib.loads(config.decode() if isinstance(config, bytes) else config), int(f.attrs["step"])


def checkpoint_params(path):
    with h5py.File(path, "r") as f:
        params = {}
        f["params"].visititems(lambda name, obj: params.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        return params


class Import(cc.TempDirTest):
    def import_ok(self, folder, name="imported.h5"):
        out = self.path(name)
        r = self.run_ok(["import", folder, "--out", out])
        self.assertTrue(r.stdout.startswith(f"wrote {out}") and r.stdout.count("\n") == 1, r.stdout)
        return out

    def inspect(self, ckpt, vocab, seed=0, rows=3, length=12):
        """attnlab's forward on random full rows, every hook point recorded."""
        tokens = np.random.default_rng(seed).integers(0, vocab, size=(rows, length))
        self.inspected = getattr(self, "inspected", 0) + 1
        given, out = self.path(f"tokens_{self.inspected}.h5"), self.path(f"inspect_{self.inspected}.h5")
        with h5py.File(given, "w") as f:
            f["tokens"] = tokens
            f["lengths"] = np.full(rows, length)
        self.run_ok(["inspect", ckpt, "--input", given, "--out", out, "--hooks", "*"])
        with h5py.File(out, "r") as f:
            layers = len(f["attention/self"]) - 1  # and score_std
            hooks = {}
            f["hooks"].visititems(lambda name, obj: hooks.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
            return (tokens, f["logits"][()], [f[f"attention/self/layer_{l}"][()] for l in range(layers)],
                    [f[f"hidden/decoder/layer_{l}"][()] for l in range(layers + 1)], hooks)

    def compare(self, label, ckpt, forward, sd, cfg, vocab):
        """attnlab's logits, patterns, residual stream and every hook point against `forward`."""
        tokens, logits, patterns, hidden, hooks = self.inspect(ckpt, vocab)
        with torch.no_grad():
            ref = {name: value.numpy() for name, value in forward(sd, cfg, tokens).items()}
        diff = float(np.abs(ref["logits"] - logits).max())
        DIFFS[label] = diff
        self.assertLess(diff, TOLERANCE, f"{label}: logits differ by {diff}")

        def close(ours, theirs, what):
            self.assertEqual(ours.shape, theirs.shape, f"{label}: {what}")
            finite = np.isfinite(theirs)
            scale = max(1.0, float(np.abs(theirs[finite]).max()))
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=TOLERANCE * scale, err_msg=f"{label}: {what}")

        self.assertEqual(len(patterns), len(hidden) - 1)
        for l, pattern in enumerate(patterns):
            close(pattern, ref[f"blocks.{l}.attn.pattern"], f"/attention/self/layer_{l}")
        close(hidden[0], ref["embed"], "/hidden/decoder/layer_0")
        for l in range(len(patterns)):
            close(hidden[l + 1], ref[f"blocks.{l}.resid_post"], f"/hidden/decoder/layer_{l + 1}")
        self.assertEqual(sorted(hooks), sorted(ref), f"{label}: the hook points inspect wrote and the reference's")
        for name, value in hooks.items():
            close(value, ref[name], f"hook {name}")
        return logits

    # ---- each format's models -------------------------------------------------------

    def check_case(self, label):
        cfg, build, dtype, buffers, forward, expected = CASES[label]
        folder = self.path(label)
        sd = save_model(folder, cfg, build(Draw(len(label)), cfg), dtype, buffers(cfg) if buffers else None)
        ckpt = self.import_ok(folder, label + ".h5")
        config, step = saved_config(ckpt)
        self.assertEqual((config["task"]["name"], step), ("none", 0))
        for section, keys in expected.items():
            for key, value in keys.items():
                self.assertEqual(config[section][key], value, f"{label}: {section}.{key}")
        vocab = cfg.get("vocab_size") or cfg.get("d_vocab")
        self.assertEqual(config["task"]["vocab"], vocab)
        self.compare(label, ckpt, forward, sd, cfg, vocab)

    def test_gpt2(self):
        for label in ("gpt2_gelu_new_untied", "gpt2_hub_names_buffers_f16", "gpt2_relu_unscaled_tied_bf16"):
            with self.subTest(label):
                self.check_case(label)

    def test_gpt_neox(self):
        for label in ("neox_parallel_rotary_quarter_f16", "neox_sequential_full_rotary_f64"):
            with self.subTest(label):
                self.check_case(label)

    def test_transformer_lens(self):
        for label in ("tl_ln_standard_gelu_new_b_U", "tl_attn_only_rms_partial_rotary", "tl_grouped_kv_rotary",
                      "tl_kv_heads_equal_heads", "tl_parallel_attn_scale_bf16"):
            with self.subTest(label):
                self.check_case(label)

    def test_bool_mask_buffers_are_skipped(self):
        """Pythia's files hold attention.bias as a BOOL causal mask beside F16 weights (older
        transformers saved the buffer), TransformerLens's state dict its BOOL attn.mask and an
        -inf IGNORE: buffers that are skipped, whatever their dtype."""
        neox = dict(NEOX, hidden_act="relu", rotary_pct=0.5, use_parallel_residual=True)
        tl = dict(TL, d_head=8, n_heads=4, d_mlp=64, act_fn="relu", attn_only=False, normalization_type="LN",
                  positional_embedding_type="standard")
        for label, cfg, state, buffers, forward in (
                ("neox_bool_mask", neox, neox_state(Draw(1), neox),
                 {**{f"gpt_neox.layers.{l}.attention.bias": ("BOOL", mask(32)[None, None]) for l in range(2)},
                  **{f"gpt_neox.layers.{l}.attention.masked_bias": ("F32", np.array(-1e9)) for l in range(2)}}, neox_forward),
                ("tl_bool_mask", tl, tl_state(Draw(2), tl),
                 {**{f"blocks.{l}.attn.mask": ("BOOL", mask(32)) for l in range(2)},
                  **{f"blocks.{l}.attn.IGNORE": ("F32", np.array(-np.inf)) for l in range(2)}}, tl_forward)):
            with self.subTest(label):
                sd = save_model(self.path(label), cfg, state, "F16", buffers)
                ckpt = self.import_ok(self.path(label), label + ".h5")
                self.compare(label, ckpt, forward, sd, cfg, cfg.get("vocab_size") or cfg.get("d_vocab"))

    def test_transformer_lens_defaults(self):
        """HookedTransformerConfig's defaults where a config leaves a field out: normalization_type
        "LN" (null: no norm), d_mlp 4 d_model."""
        cfg = dict(TL, d_head=8, n_heads=4, act_fn="relu", attn_only=False, positional_embedding_type="standard")
        state = tl_state(Draw(3), dict(cfg, d_mlp=128, normalization_type="LN"))
        sd = save_model(self.path("tl_defaults"), cfg, state)
        ckpt = self.import_ok(self.path("tl_defaults"))
        config, _ = saved_config(ckpt)
        self.assertEqual((config["model"]["norm"], config["model"]["norm_type"], config["model"]["ffn"]), ("pre", "layernorm", 128))
        self.compare("tl_defaults", ckpt, tl_forward, sd, dict(cfg, d_mlp=128, normalization_type="LN"), 64)

    # ---- a tokenizer beside the weights: --tokens and --prompt take text -------------------

    def test_a_tokenizer_beside_the_weights_makes_tokens_text(self):
        """GPT-2's vocab.json + merges.txt (byte-level: bytes_to_unicode's 256 symbols, two merges,
        <|endoftext|>) beside the weights: the import records the folder, and --tokens, --prompt and
        the patch prompts take text, encoded as GPT-2's encoder.py does."""
        symbols = gpt2_byte_symbols()
        vocab = {symbols[b]: i for i, b in enumerate(range(256))}
        merges = [("h", "e"), ("\u0120", "t")]  # "he", " t"
        for a, b in merges:
            vocab[a + b] = len(vocab)
        vocab["<|endoftext|>"] = len(vocab)
        cfg = dict(GPT2, vocab_size=len(vocab) + 2, activation_function="gelu_new")
        folder = self.path("with_tokenizer")
        sd = save_model(folder, cfg, gpt2_state(Draw(4), cfg))
        with open(os.path.join(folder, "vocab.json"), "w") as f:
            json.dump(vocab, f)
        with open(os.path.join(folder, "merges.txt"), "w") as f:
            f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
        ckpt = self.import_ok(folder)
        config, _ = saved_config(ckpt)
        self.assertEqual(config["task"]["tokenizer"], os.path.abspath(folder))
        # "the tent<|endoftext|>": "t" "he" | " t" "e" "n" "t" | the special token whole
        want = [vocab["t"], vocab["he"], vocab["\u0120t"], vocab["e"], vocab["n"], vocab["t"], vocab["<|endoftext|>"]]
        out = self.path("text.h5")
        self.run_ok(["inspect", ckpt, "--tokens", "the tent<|endoftext|>", "--out", out])
        with h5py.File(out, "r") as f:
            self.assertEqual(f["tokens"][0].tolist(), want)
            logits = f["logits"][()]
        with torch.no_grad():
            ref = gpt2_forward(sd, cfg, np.array([want]))["logits"].numpy()
        self.assertLess(float(np.abs(ref - logits).max()), TOLERANCE)
        r = self.run_ok(["generate", ckpt, "--prompt", "the", "--max-new", "3"])
        self.assertTrue(r.stdout.splitlines()[-1].startswith("the"), r.stdout)  # the text itself, prompt first
        # a tokenizer larger than the model's vocabulary is refused
        small = self.path("small_vocab")
        save_model(small, dict(cfg, vocab_size=200), gpt2_state(Draw(5), dict(cfg, vocab_size=200)))
        for name in ("vocab.json", "merges.txt"):
            shutil.copy(os.path.join(folder, name), small)
        self.refused(small, ["small_vocab: the tokenizer has 259 tokens, more than the model's vocabulary of 200"])

    # ---- every analysis command on an imported model ------------------------------------

    def test_every_analysis_command_takes_an_imported_model(self):
        """A Pythia-like model (parallel blocks, partial rotary, untied head): the analysis commands
        run on it as on a trained checkpoint, the data-drawing ones (eval, cache, audit, ablate) with
        --data, a token file; eval's loss is the cross-entropy of the PyTorch forward on cache's rows."""
        cfg = dict(NEOX, hidden_act="gelu", rotary_pct=0.5, use_parallel_residual=True)
        sd = save_model(self.path("neox"), cfg, neox_state(Draw(6), cfg))
        ckpt = self.import_ok(self.path("neox"))
        data = self.path("data.h5")
        rng = np.random.default_rng(7)
        with h5py.File(data, "w") as f:
            f["tokens"] = rng.integers(3, 40, size=(40, 16)).astype(np.int32)
            f["lengths"] = np.full(40, 16)
        clean, corrupt = "5 9 4 12 5 1 5 12 4", "5 8 4 11 5 1 5 12 4"
        runs = [
            ["inspect", ckpt, "--tokens", clean, "--out", self.path("i.h5")],
            ["lens", ckpt, "--tokens", clean, "--out", self.path("lens.h5")],
            ["patch", ckpt, "--clean", clean, "--corrupt", corrupt, "--answers", "9:8", "--out", self.path("patch.h5")],
            ["path-patch", ckpt, "--clean", clean, "--corrupt", corrupt, "--answers", "9:8", "--sender", "0.0", "--receiver", "1.1:k"],
            ["circuit", ckpt, "--clean", clean, "--corrupt", corrupt, "--answers", "9:8", "--out", self.path("circuit.h5")],
            ["decompose", ckpt, "--tokens", clean, "--head", "1.0", "--query", "8", "--key", "3", "--out", self.path("parts.h5")],
            ["heads", ckpt],
            ["generate", ckpt, "--prompt", "5 9 4", "--max-new", "4", "--check-cache"],
            ["eval", ckpt, "--data", data, "--batches", "2"],
            ["cache", ckpt, "--data", data, "--hooks", "logits", "--batches", "1", "--out", self.path("cache.h5")],
            ["audit", ckpt, "--data", data, "--batches", "1"],
            ["ablate", ckpt, "--data", data, "--batches", "1", "--out", self.path("ablate.h5")],
            ["export", ckpt, "--format", "tl", "--out", self.path("back_to_tl")],
        ]
        for args in runs:
            with self.subTest(args[0]):
                self.run_ok(args)
        with h5py.File(self.path("cache.h5"), "r") as f:
            tokens, cached = f["tokens"][()].astype(np.int64), f["hooks/logits"][()]
        with torch.no_grad():
            ref = neox_forward(sd, cfg, tokens)["logits"].numpy()
        self.assertLess(float(np.abs(ref - cached).max()), TOLERANCE)
        # without --data, what needs a task says so
        work = self.path("work")
        os.makedirs(work, exist_ok=True)
        cc.run_refused(self, ["eval", ckpt], work, work, ['task.name = "none" has no data to draw', "--data FILE.h5"], {})
        cc.run_refused(self, ["ablate", ckpt], work, work, ['task.name = "none" has no data to draw', "--data FILE.h5"], {})
        # bad --data: a missing file, a token outside the vocabulary, rows longer than a learned table
        cc.run_refused(self, ["eval", ckpt, "--data", self.path("missing.h5")], work, work, ["missing.h5"], {})
        outside = self.path("outside.h5")
        with h5py.File(outside, "w") as f:
            f["tokens"] = np.full((10, 8), 40, dtype=np.int32)  # vocabulary 40: ids 0..39
            f["lengths"] = np.full(10, 8)
        cc.run_refused(self, ["cache", ckpt, "--data", outside, "--hooks", "logits", "--out", self.path("c2.h5")], work, work,
                       ["outside.h5"], {})
        gpt2 = dict(GPT2, n_layer=1)
        save_model(self.path("gpt2"), gpt2, gpt2_state(Draw(8), gpt2))
        # a sharded checkpoint: its index named, not "no such file" alone
        sharded = self.path("sharded")
        shutil.copytree(self.path("gpt2"), sharded)
        os.remove(os.path.join(sharded, "model.safetensors"))
        with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": {"wte.weight": "model-00001-of-00002.safetensors"}}, f)
        cc.run_refused(self, ["import", sharded, "--out", self.path("sharded.h5")], work, work,
                       ["model.safetensors.index.json", "sharded"], {})
        learned = self.import_ok(self.path("gpt2"), "gpt2.h5")
        long_rows = self.path("long.h5")
        with h5py.File(long_rows, "w") as f:
            f["tokens"] = np.full((10, 40), 5, dtype=np.int32)  # 40 positions; n_positions 32
            f["lengths"] = np.full(10, 40)
        cc.run_refused(self, ["eval", learned, "--data", long_rows], work, work,
                       ["--data " + long_rows + " needs 39 positions; the learned table of", "covers 32"], {})

    # ---- attnlab -> export -> the same forwards, and -> import -----------------------------

    def test_round_trip_through_each_export(self):
        base = dict(cc.TINY, **{"model.layers": "2", "train.steps": "10", "train.checkpoint_every": "10",
                                "train.eval_every": "10", "optim.warmup": "0", "optim.lr": "0.01",
                                "model.activation": "gelu_tanh", "model.norm_eps": "1e-6"})
        gpt2_like = Trained.checkpoint("gpt2_like", base)
        full = Trained.checkpoint("full", dict(base, **{"model.parallel": "true", "model.positional": "rotary",
                                                       "model.rotary_dims": "4", "model.heads": "4", "model.head_width": "8",
                                                       "model.head_bias": "true"}))
        for label, ckpt, fmt, forward in (("gpt2_like", gpt2_like, "hf", gpt2_forward), ("full", full, "tl", tl_forward)):
            with self.subTest(f"{fmt} {label}"):
                folder = self.path(f"{fmt}_{label}")
                self.run_ok(["export", ckpt, "--format", fmt, "--out", folder])
                with open(os.path.join(folder, "config.json")) as f:
                    cfg = json.load(f)
                sd = read_safetensors(os.path.join(folder, "model.safetensors"))
                if fmt == "hf":
                    self.assertEqual((cfg["activation_function"], cfg["layer_norm_epsilon"]), ("gelu_new", 1e-6))
                else:
                    self.assertEqual((cfg["act_fn"], cfg["eps"], cfg["parallel_attn_mlp"], cfg["rotary_dim"], cfg["d_head"]),
                                     ("gelu_new", 1e-6, True, 4, 8))
                    self.assertTrue(np.any(sd["unembed.b_U"]))  # the head bias
                original = self.compare(f"export {fmt} {label}", ckpt, forward, sd, cfg, 32)
                imported_ckpt = self.import_ok(folder, f"{fmt}_{label}.h5")
                imported = self.compare(f"import {fmt} {label}", imported_ckpt, forward, sd, cfg, 32)
                diff = float(np.abs(imported - original).max())
                DIFFS[f"round trip {fmt} {label}"] = diff
                self.assertLess(diff, TOLERANCE)
        for label, ckpt in (("gpt2_like", gpt2_like), ("full", full)):
            with self.subTest(f"safetensors {label}"):
                folder = self.path(f"safetensors_{label}")
                self.run_ok(["export", ckpt, "--format", "safetensors", "--out", folder])
                imported = self.import_ok(folder, f"safetensors_{label}.h5")
                self.assertEqual(saved_config(imported)[1], saved_config(ckpt)[1])  # the step
                ours, theirs = checkpoint_params(imported), checkpoint_params(ckpt)
                self.assertEqual(sorted(ours), sorted(theirs))
                for name, value in theirs.items():
                    np.testing.assert_array_equal(ours[name], value, err_msg=name)
                original, again = self.inspect(ckpt, 32)[1], self.inspect(imported, 32)[1]
                DIFFS[f"round trip safetensors {label}"] = float(np.abs(again - original).max())
                np.testing.assert_array_equal(again, original)  # bit for bit

    # ---- bad input: one line, exit 2, nothing written -------------------------------------

    def refused(self, folder, wants, out=None, extra=None):
        """`attnlab import folder --out out` refused naming each of `wants`; nothing new in
        out's folder, the models unchanged."""
        work, outs, models = self.path("work"), self.path("outs"), self.path("models")
        for d in (work, outs, models):
            os.makedirs(d, exist_ok=True)
        args = ["import", folder] + (["--out", out or os.path.join(outs, "model.h5")] if out is not False else [])
        before = {models: cc.tree_hashes(models), outs: cc.tree_hashes(outs)}
        return cc.run_refused(self, args + (extra or []), work, outs, wants, before)

    def bad_model(self, name, cfg=None, state=None, raw=None, config_text=None):
        """A folder under models/: cfg and state (default a small GPT-2), or raw file bytes."""
        folder = self.path("models", name)
        cfg = dict(GPT2, n_layer=1) if cfg is None else cfg
        state = gpt2_state(Draw(0), dict(GPT2, n_layer=1)) if state is None else state
        save_model(folder, cfg, state)
        if raw is not None:
            with open(os.path.join(folder, "model.safetensors"), "wb") as f:
                f.write(raw)
        if config_text is not None:
            with open(os.path.join(folder, "config.json"), "w") as f:
                f.write(config_text)
        return folder

    def test_bad_folders_and_files(self):
        good = gpt2_state(Draw(0), dict(GPT2, n_layer=1))
        tensors = [(n, "F32", np.shape(v), encoded(v, "F32")) for n, v in good.items()]
        whole = safetensors_bytes(tensors, {"format": "pt"})
        first = next(iter(good))

        self.refused(self.path("models", "nowhere"), ["nowhere"])
        no_config = self.bad_model("no_config")
        os.remove(os.path.join(no_config, "config.json"))
        self.refused(no_config, ["config.json"])
        no_weights = self.bad_model("no_weights")
        os.remove(os.path.join(no_weights, "model.safetensors"))
        self.refused(no_weights, ["model.safetensors"])
        self.refused(self.bad_model("truncated", raw=whole[:-10]), ["model.safetensors"])
        self.refused(self.bad_model("short", raw=whole[:5]), ["model.safetensors"])

        last = tensors[-1][0]

        def past_the_end(header):  # the last tensor claims twice its rows, and bytes past the file's end
            entry = header[last]
            begin, end = entry["data_offsets"]
            entry["shape"], entry["data_offsets"] = [2 * entry["shape"][0]], [begin, end + (end - begin)]

        def wrong_span(header):  # data_offsets that do not hold the shape's bytes
            entry = header[first]
            entry["data_offsets"] = [entry["data_offsets"][0], entry["data_offsets"][1] + (1 << 20)]
        for name, edit in (("past_the_end", past_the_end), ("wrong_span", wrong_span)):
            self.refused(self.bad_model(name, raw=safetensors_bytes(tensors, {"format": "pt"}, edit)), ["model.safetensors"])
        for dtype in ("I8", "F8_E4M3", "Q1"):  # the format's integer and 8-bit types as a parameter; no such type
            shape = np.shape(good[first])
            odd = [(first, dtype, shape, np.zeros(shape, np.int8).tobytes())] + tensors[1:]
            self.refused(self.bad_model(f"dtype_{dtype}", raw=safetensors_bytes(odd)), ["model.safetensors", dtype])

        missing = dict(good)
        del missing["transformer.h.0.mlp.c_fc.bias"]
        self.refused(self.bad_model("missing", state=missing), ["model.safetensors", "transformer.h.0.mlp.c_fc.bias"])
        extra = dict(good, **{"transformer.h.0.attn.rotary.weight": np.ones(4)})
        self.refused(self.bad_model("extra", state=extra), ["model.safetensors", "transformer.h.0.attn.rotary.weight"])
        wrong = dict(good, **{"transformer.h.0.attn.c_attn.weight": good["transformer.h.0.attn.c_attn.weight"].T})
        self.refused(self.bad_model("wrong_shape", state=wrong), ["model.safetensors", "transformer.h.0.attn.c_attn.weight"])
        nan = dict(good, **{"transformer.h.0.ln_2.bias": np.full(32, np.nan)})
        self.refused(self.bad_model("nan", state=nan), ["model.safetensors", "transformer.h.0.ln_2.bias"])

    def test_bad_configs(self):
        gpt2 = dict(GPT2, n_layer=1)
        neox = dict(NEOX, rotary_pct=0.25)
        tl = dict(TL, d_head=8, n_heads=4, d_mlp=64, act_fn="gelu", attn_only=False, normalization_type="LN",
                  positional_embedding_type="standard")
        tl_rotary = dict(tl, positional_embedding_type="rotary", rotary_dim=8)
        without = {k: v for k, v in gpt2.items() if k != "n_embd"}
        cases = [  # (name, config, state's config and builder, wants)
            ("not_json", None, None, ["config.json"]),
            ("no_n_embd", without, None, ["config.json", "n_embd"]),
            ("n_head_text", dict(gpt2, n_head="4"), None, ["config.json", "n_head"]),
            ("llama", dict(gpt2, model_type="llama"), None, ["config.json", "llama"]),
            ("inverse_layer_idx", dict(gpt2, scale_attn_by_inverse_layer_idx=True), None, ["scale_attn_by_inverse_layer_idx"]),
            ("neox_odd_rotary", dict(neox, rotary_pct=0.1875), (neox, neox_state), ["config.json", "rotary_pct"]),
            ("neox_no_layers", {k: v for k, v in neox.items() if k != "num_hidden_layers"}, (neox, neox_state),
             ["num_hidden_layers"]),
            ("tl_adjacent_pairs", dict(tl_rotary, rotary_adjacent_pairs=True), (tl_rotary, tl_state), ["rotary_adjacent_pairs"]),
            ("tl_solu_ln", dict(tl, act_fn="solu_ln"), (tl, tl_state), ["config.json", "act_fn"]),
            ("tl_d_head_float", dict(tl, d_head=8.0), (tl, tl_state), ["d_head"]),
            # a global layer past what the message quotes of attn_types is still seen
            ("tl_global_layer", dict(tl, use_local_attn=True, window_size=4, attn_types=["local"] * 100 + ["global"]),
             (tl, tl_state), ["config.json", 'attn_types = ["local","local",']),
        ]
        for name, cfg, model, wants in cases:
            with self.subTest(name):
                state = model[1](Draw(0), model[0]) if model else None
                folder = self.bad_model(name, cfg=cfg if cfg is not None else gpt2, state=state,
                                        config_text="{not json" if cfg is None else None)
                self.refused(folder, wants)

    def test_deep_long_and_invalid_values_are_quoted_short(self):
        """Issue 51: JSON nested 400,000 deep (a safetensors shape or __metadata__ value,
        config.json's rope_scaling, tokenizer.json's normalizer or merges[0]) is refused in one
        line naming the file and the depth (quoting it once exhausted the stack: SIGSEGV); a value
        a message quotes shows at most kQuotedBytes of itself and at most 4 levels of nesting; bytes
        that are not UTF-8 or are control characters (a merges.txt line \xff\xfe once ended in
        "internal error") are escaped."""
        deep = b"[" * 400_000 + b"]" * 400_000
        hundred = "[" * 100 + "]" * 100
        too_deep = "arrays and objects nested more than 128 deep at byte "
        good = gpt2_state(Draw(0), dict(GPT2, n_layer=1))
        tensors = [(n, "F32", np.shape(v), encoded(v, "F32")) for n, v in good.items()]
        first = next(iter(good))

        def with_text(placeholder, text, metadata=None):
            """The good weights' file, the header's "PLACEHOLDER" string replaced by `text`."""
            def edit(header):
                if metadata is None:
                    header[first]["shape"] = placeholder
            whole = safetensors_bytes(tensors, {"format": "pt"} if metadata is None else metadata, edit)
            (size,) = struct.unpack("<Q", whole[:8])
            header = whole[8:8 + size].rstrip(b" ").replace(json.dumps(placeholder).encode(), text)
            header += b" " * (-len(header) % 8)
            return struct.pack("<Q", len(header)) + header + whole[8 + size:]

        def with_tokenizer(name, files):
            folder = self.bad_model(name)
            for file, data in files.items():
                with open(os.path.join(folder, file), "wb") as f:
                    f.write(data)
            return folder
        tokenizer = b'{"normalizer": NORMALIZER, "pre_tokenizer": {"type": "ByteLevel"}, ' \
                    b'"model": {"type": "BPE", "vocab": {"a": 0, "aa": 1}, "merges": [MERGE]}}'
        tokenizer_json = lambda normalizer, merge: {"tokenizer.json": tokenizer.replace(b"NORMALIZER", normalizer).replace(b"MERGE", merge)}
        vocab = json.dumps({"a": 0, "b": 1, "ab": 2}).encode()
        neox = dict(NEOX, rotary_pct=0.25)
        neox_config = lambda value: json.dumps(dict(neox, rope_scaling="DEEP")).replace('"DEEP"', value)
        odd = "relu\x1b[31m" + "x" * 100_000
        cases = [  # (name, the folder, wants)
            ("deep_shape", lambda: self.bad_model("deep_shape", raw=with_text("DEEP", deep)), ["model.safetensors", too_deep]),
            ("deep_metadata", lambda: self.bad_model("deep_metadata", raw=with_text("DEEP", deep, {"format": "DEEP"})),
             ["model.safetensors", too_deep]),
            ("hundred_shape", lambda: self.bad_model("hundred_shape", raw=with_text("DEEP", ("[" + hundred + "]").encode())),
             ["model.safetensors", f'tensor "{first}": shape entry 0 ([[[[[...]]]]]) is not a non-negative integer']),
            ("deep_rope", lambda: self.bad_model("deep_rope", cfg=neox, state=neox_state(Draw(0), neox), config_text=neox_config(deep.decode())),
             ["config.json: the JSON has " + too_deep]),
            ("hundred_rope", lambda: self.bad_model("hundred_rope", cfg=neox, state=neox_state(Draw(0), neox), config_text=neox_config(hundred)),
             ["config.json: rope_scaling = [[[[[...]]]]]: attnlab's rotary positions are not scaled"]),
            ("odd_activation", lambda: self.bad_model("odd_activation", cfg=dict(GPT2, n_layer=1, activation_function=odd)),
             ['config.json: activation_function = "relu\\u001B[31m' + "x" * 50 + '..." (100009 bytes): ']),
            ("deep_normalizer", lambda: with_tokenizer("deep_normalizer", tokenizer_json(b'{"type": ' + deep + b'}', b'"a a"')),
             ["tokenizer.json: the JSON has " + too_deep]),
            ("deep_merge", lambda: with_tokenizer("deep_merge", tokenizer_json(b"null", deep)), ["tokenizer.json: the JSON has " + too_deep]),
            ("hundred_merge", lambda: with_tokenizer("hundred_merge", tokenizer_json(b"null", hundred.encode())),
             ['tokenizer.json: model.merges[0]: expected "left right" or ["left", "right"], got [[[[[...]]]]]']),
            ("invalid_merges", lambda: with_tokenizer("invalid_merges", {"vocab.json": vocab, "merges.txt": b"#version: 0.2\n\xff\xfe\n"}),
             ['merges.txt:2: expected two symbols separated by one space, got "\\xFF\\xFE"']),
            ("invalid_symbol", lambda: with_tokenizer("invalid_symbol", {"vocab.json": vocab, "merges.txt": b"a b\n\xff b\n"}),
             ['merges.txt:2: "\\xFF" is not in the vocabulary']),
            ("overflow", lambda: with_tokenizer("overflow", {"vocab.json": b'{"a": 1e999}', "merges.txt": b""}),
             ["vocab.json: not valid JSON: number overflow parsing '1e999'"]),
        ]
        for name, folder, wants in cases:
            with self.subTest(name):
                line, shown = self.refused(folder(), wants)
                self.assertNotIn("\x1b", line, shown)
                self.assertLess(len(line), 400, shown)

    def test_bad_arguments(self):
        folder = self.bad_model("good")
        outs = self.path("outs")
        os.makedirs(outs)
        existing = os.path.join(outs, "taken.h5")
        with open(existing, "wb") as f:
            f.write(b"mine\n")
        self.refused(folder, ["taken.h5"], out=existing)
        self.refused(folder, ["--out"], out=False)
        self.refused(folder, ["no_such_folder"], out=self.path("no_such_folder", "x.h5"))
        with open(existing, "rb") as f:
            self.assertEqual(f.read(), b"mine\n")
        self.import_ok(folder)  # the same folder imports


if __name__ == "__main__":
    cc.main()
