#!/usr/bin/python3
"""An attnlab checkpoint as the equivalent PyTorch module, checked against `attnlab inspect`.

    tools/torch_bridge.py CHECKPOINT --compare OUT.h5 [--tol 1e-4] [--nn-mha] [--dtype float32|float64]
    tools/torch_bridge.py CHECKPOINT --tokens "3 7 5 1" [--target "2 9"]     # run it, print argmax
    tools/torch_bridge.py CHECKPOINT --save MODEL.pt                         # state_dict + config for torch.load

The checkpoint's /params/<dotted.name> (float32, PyTorch layout) load with
load_state_dict(strict=True) into DecoderLM or EncoderDecoder below, whose
modules carry the same dotted names (README, "Parameter names"). The
architecture comes from the checkpoint's `config` attribute (TOML): model.kind
decoder | encoder-decoder, norm pre | post | none, norm_type layernorm |
rmsnorm (torch 1.13 has no nn.RMSNorm: RMSNorm below), positional learned |
sinusoidal | none | rotary (RoPE on q and k of self-attention, split halves as
Hugging Face's rotate_half: pair (c, c + d_h/2) turns by p base^(-2c/d_h),
model.rotary_base; with model.rotary_dims = r only the first r features turn, angles
p base^(-2c/r)) | alibi (self-attention scores + -m_h |p_q - p_k|, the
slopes of Press et al. 2022: alibi_slopes), ffn 0 (attention-only) or > 0 with gelu (exact, erf) |
gelu_tanh (GPT-2's gelu_new) | relu, parallel (decoder blocks x + attn(ln1(x)) + ffn(ln2(x)), GPT-NeoX),
bias on | off (the attention projections'), ffn_bias and norm_bias (the feed-forward layers' and
LayerNorm's), head_bias (the output head's), tie_embeddings (the head reads tok_emb.weight), kv_heads
(grouped K/V: query head h reads K/V head h // (heads / kv_heads), i.e. repeat_interleave), head_width,
scale sqrt | none | linear | a number. Every norm's eps is model.norm_eps (default 1e-5). Sequences
are right-padded; keys at positions >= length are ineligible, decoder self-attention is also causal.

--compare OUT.h5 reads the tokens (and lengths) of an `attnlab inspect` file,
runs this module on them in eval mode and prints the largest absolute
difference of the logits, of every attention map and every hidden state. Exit
status: 0 when the logits and attention weights differ by at most --tol and
each hidden state by at most --tol * max(1, its largest magnitude); 1
otherwise; 2 for bad input (one line on stderr).

Masks: attnlab (like SDPA and FlashAttention) uses boolean ELIGIBILITY, true =
the query may attend to the key. torch.nn.MultiheadAttention's bool attn_mask
and key_padding_mask use the opposite polarity, true = NOT allowed; pass it
`~eligible` (see mha_attn_mask). --nn-mha runs every attention layer that
nn.MultiheadAttention can express (kv_heads = heads, heads * head_width =
width, scale 1/sqrt(head_width)) through torch.nn.functional.multi_head_attention_forward
with that converted mask, instead of the explicit softmax(scale Q K^T) V.

Needs Debian's /usr/bin/python3 with python3-torch, python3-h5py, python3-numpy.
"""
import argparse
import math
import os
import sys
import tomllib

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CHECKPOINT_FORMAT = "attnlab-checkpoint"
INSPECT_FORMAT = "attnlab-inspect"
FORMAT_VERSION = 1
BOS = 2


class BridgeError(Exception):
    """Bad input: printed as one line, exit status 2."""


# ---- checkpoint and config ---------------------------------------------------

def _attr_text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _open_h5(path, what):
    if not os.path.exists(path):
        raise BridgeError(f"{path}: no such file")
    if os.path.isdir(path):
        raise BridgeError(f"{path}: is a directory, not a file")
    try:
        is_hdf5 = h5py.is_hdf5(path)
    except OSError as e:
        raise BridgeError(f"{path}: cannot read ({e})") from None
    if not is_hdf5:
        raise BridgeError(f"{path}: not an HDF5 file")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise BridgeError(f"{path}: HDF5 cannot open this {what} ({str(e).splitlines()[0]})") from None


def _check_format(f, path, expected):
    for attr in ("format", "format_version", "config"):
        if attr not in f.attrs:
            raise BridgeError(f"{path}: missing root attribute '{attr}'")
    fmt = _attr_text(f.attrs["format"])
    if fmt != expected:
        raise BridgeError(f"{path}: format is '{fmt}', expected '{expected}'")
    version = int(f.attrs["format_version"])
    if version != FORMAT_VERSION:
        raise BridgeError(f"{path}: format_version {version} is not supported (this bridge reads {FORMAT_VERSION})")


def read_checkpoint(path):
    """-> (params {dotted.name: float32 ndarray}, config dict from the TOML text, config text, step)"""
    with _open_h5(path, "checkpoint") as f:
        try:
            _check_format(f, path, CHECKPOINT_FORMAT)
            text = _attr_text(f.attrs["config"])
            step = int(f.attrs["step"]) if "step" in f.attrs else -1
            if "params" not in f or not isinstance(f["params"], h5py.Group):
                raise BridgeError(f"{path}: no /params group")
            params = {}

            def visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    params[name] = np.asarray(obj[()], dtype=np.float32)

            f["params"].visititems(visit)
        except (OSError, KeyError, ValueError) as e:  # truncated or corrupt past the superblock
            raise BridgeError(f"{path}: cannot read ({str(e).splitlines()[0]})") from None
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BridgeError(f"{path}: config attribute is not valid TOML ({e})") from None
    return params, config, text, step


def resolve_scale(spec, head_width):
    """attnlab's model.scale: "sqrt" -> 1/sqrt(d_h), "none" -> 1, "linear" -> 1/d_h, or a positive number."""
    spec = str(spec)
    if spec == "sqrt":
        return 1.0 / math.sqrt(head_width)
    if spec == "none":
        return 1.0
    if spec == "linear":
        return 1.0 / head_width
    try:
        value = float(spec)
    except ValueError:
        raise BridgeError(f"model.scale '{spec}' is not sqrt, none, linear or a number") from None
    if not value > 0 or not math.isfinite(value):
        raise BridgeError(f"model.scale '{spec}' must be a positive number")
    return value


# Every [model] key this bridge builds from (Arch below), or knows to leave the
# forward alone: dropout and attn_dropout (training only), init (the parameters
# are given) and max_len (the learned table's rows are the parameter's). A key
# not listed, as a later attnlab may add, is refused: the bridge builds only the
# models it knows it builds right (issue 51's allow-lists).
MODEL_KEYS = {
    "kind", "layers", "width", "heads", "kv_heads", "head_width", "ffn", "norm", "norm_type", "positional", "rotary_base",
    "rotary_dims", "scale", "masked_rows", "window", "prefix_lm", "documents", "softcap", "sinks", "rel_buckets",
    "rel_max_distance", "dropout", "attn_dropout", "bias", "ffn_bias", "norm_bias", "norm_eps", "parallel", "head_bias",
    "init", "tie_embeddings", "activation", "max_len", "ablate_heads",
}


class Arch:
    """What the module builder needs from the config's [model] and [task] sections."""

    def __init__(self, config):
        try:
            m, t = config["model"], config["task"]
            unknown = sorted(set(m) - MODEL_KEYS)
            if unknown:
                raise BridgeError(f"model.{unknown[0]}: the bridge does not know this option, so it cannot build the model "
                                  f"(tools/torch_bridge.py, MODEL_KEYS)")
            self.kind = m["kind"]
            self.vocab = int(t["vocab"])
            self.layers = int(m["layers"])
            self.width = int(m["width"])
            self.heads = int(m["heads"])
            self.kv_heads = int(m.get("kv_heads", 0)) or self.heads
            self.head_width = int(m.get("head_width", 0)) or self.width // self.heads
            self.ffn = int(m["ffn"])
            self.norm = m["norm"]
            self.norm_type = m.get("norm_type", "layernorm")
            self.positional = m["positional"]
            self.activation = m.get("activation", "gelu")
            self.bias = bool(m.get("bias", True))  # the attention projections'
            self.ffn_bias = bool(m.get("ffn_bias", True))  # fc1's and fc2's
            self.norm_bias = bool(m.get("norm_bias", True))  # LayerNorm's
            self.norm_eps = float(m.get("norm_eps", 1e-5))  # every norm's epsilon
            self.parallel = bool(m.get("parallel", False))  # decoder: x + attn(ln1(x)) + ffn(ln2(x))
            self.head_bias = bool(m.get("head_bias", False))  # the output head's bias
            self.tie_embeddings = bool(m.get("tie_embeddings", False))  # decoder: head = tok_emb.weight
            self.scale = resolve_scale(m.get("scale", "sqrt"), self.head_width)
            self.rotary_base = float(m.get("rotary_base", 10000.0)) if self.positional == "rotary" else 0.0
            # the features of a head that turn, the first ones (0 in the config: all)
            self.rotary_dims = int(m.get("rotary_dims", 0)) or self.head_width
            self.softcap = float(m.get("softcap", 0.0))
            self.window = int(m.get("window", 0))  # sliding window of self-attention (autograd/variant.h)
            self.prefix_lm = bool(m.get("prefix_lm", False))  # decoder self-attention: prefixes read both ways
            self.documents = bool(m.get("documents", False))  # decoder self-attention: a query reads its own document
            self.sinks = bool(m.get("sinks", False))  # attention sinks: a learned logit per head, self-attention
            self.rel_buckets = int(m.get("rel_buckets", 0))  # T5's relative bias, self-attention
            self.rel_max_distance = int(m.get("rel_max_distance", 128))
            # model.ablate_heads: "L.H" heads whose output (context) is zero, decoder self-attention
            self.ablate_heads = [tuple(int(x) for x in h.split(".")) for h in m.get("ablate_heads", [])]
            # a query row with no eligible key: "error" (attnlab refuses the input) or "zero" (no weight, no context)
            self.masked_rows = m.get("masked_rows", "error")
        except KeyError as e:
            raise BridgeError(f"config has no key {e}") from None
        checks = [
            (self.kind in ("decoder", "encoder-decoder"), f"model.kind '{self.kind}'"),
            (self.norm in ("pre", "post", "none"), f"model.norm '{self.norm}'"),
            (self.norm_type in NORMS, f"model.norm_type '{self.norm_type}'"),
            (self.positional in ("learned", "sinusoidal", "none", "rotary", "alibi"), f"model.positional '{self.positional}'"),
            (self.activation in ("gelu", "gelu_tanh", "relu"), f"model.activation '{self.activation}'"),
            (self.masked_rows in ("error", "zero"), f"model.masked_rows '{self.masked_rows}'"),
            (self.heads % self.kv_heads == 0, f"model.kv_heads {self.kv_heads} for {self.heads} heads"),
        ]
        for ok, what in checks:
            if not ok:
                raise BridgeError(f"the bridge cannot build {what}")


# ---- modules (names as attnlab's parameters) ---------------------------------

def sinusoidal_table(positions, width, dtype):
    """PE(p, 2i) = sin(p / 10000^(2i/D)), PE(p, 2i+1) = cos(p / 10000^(2i/D)), computed in float64."""
    p = torch.arange(positions, dtype=torch.float64)[:, None]
    i = torch.arange(width)
    angle = p / torch.pow(10000.0, (i - i % 2).to(torch.float64) / width)[None, :]
    return torch.where(i % 2 == 0, torch.sin(angle), torch.cos(angle)).to(dtype)  # (T, D)


class PositionalEncoding(nn.Module):
    def __init__(self, kind, max_len, width):
        super().__init__()
        self.kind, self.width = kind, width
        if kind == "learned":
            self.weight = nn.Parameter(torch.zeros(max_len, width))

    def forward(self, x):  # x (B, T, D)
        T = x.shape[1]
        if self.kind == "learned":
            if T > self.weight.shape[0]:
                raise BridgeError(f"{T} positions exceed the learned table of {self.weight.shape[0]}")
            return x + self.weight[:T]
        if self.kind == "sinusoidal":
            return x + sinusoidal_table(T, self.width, x.dtype)
        return x


def rotate_half(x):
    """(x1, x2) -> (-x2, x1) over the two halves of the last axis."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x, base, dims=None):
    """x (B, h, T, d_h) at positions 0 .. T-1: its first `dims` features (all by default) turned,
    x cos + rotate_half(x) sin over them, angles in float64; the rest pass unchanged."""
    if dims is not None and dims < x.shape[3]:
        return torch.cat([apply_rotary(x[..., :dims], base), x[..., dims:]], dim=-1)
    T, d = x.shape[2], x.shape[3]
    theta = torch.pow(torch.tensor(base, dtype=torch.float64), -2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * theta[None, :]  # (T, d_h/2)
    angle = torch.cat([angle, angle], dim=-1)
    return x * torch.cos(angle).to(x.dtype) + rotate_half(x) * torch.sin(angle).to(x.dtype)


def modify_scores(scores, a):
    """attnlab's score modifiers (autograd/variant.h) on the scaled scores (B, H, Tq, Tk), before
    ALiBi's bias and the mask."""
    if a.softcap > 0:  # logit soft-capping (Gemma 2)
        scores = a.softcap * torch.tanh(scores / a.softcap)
    return scores


def has_score_mods(a):
    """Whether any score modifier is on (nn.MultiheadAttention then cannot stand in)."""
    return a.softcap > 0 or a.sinks or a.rel_buckets > 0


def relative_bucket(relative, causal, buckets, max_distance):
    """T5's bucket of a key `relative` = j - p positions from its query (Raffel et al. 2020),
    as attnlab's relative_bucket: an encoder gives keys after the query the upper half;
    distances below half of the buckets are exact, the rest logarithmic up to max_distance."""
    base = 0
    if causal:
        distance = max(-relative, 0)
    else:
        buckets //= 2
        base = buckets if relative > 0 else 0
        distance = abs(relative)
    exact = buckets // 2
    if distance < exact:
        return base + distance
    far = exact + math.log(distance / exact) / math.log(max_distance / exact) * (buckets - exact)
    return base + min(int(far), buckets - 1)


def relative_bias(table, queries, keys, causal, max_distance):
    """(H, Tq, Tk) from table (buckets, H): table[bucket(j - (i + Tk - Tq)), h]."""
    ids = torch.tensor([[relative_bucket(j - (i + keys - queries), causal, table.shape[0], max_distance)
                         for j in range(keys)] for i in range(queries)])
    return table[ids].permute(2, 0, 1)


def softmax_with_sink(scores, sink):
    """softmax over the keys of scores (B, H, Tq, Tk); with sink (H), each head's sink logit
    joins as one more key of value zero and its column is dropped (attention sinks)."""
    if sink is None:
        return torch.softmax(scores, dim=-1)
    B, H, Tq, _ = scores.shape
    column = sink.to(scores.dtype)[None, :, None, None].expand(B, H, Tq, 1)
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]


def alibi_slopes(n):
    """Press et al. 2022 (their reference code): 2^(-8 i / n) for n a power of two,
    else those of the largest power of two below n and every other one of twice it."""
    def power_of_2(m):
        start = 2.0 ** (-(2.0 ** -(math.log2(m) - 3)))
        return [start * start ** i for i in range(m)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][: n - closest]


def alibi_bias(heads, queries, keys, dtype):
    """(H, Tq, Tk): -m_h |(i + Tk - Tq) - j|, queries bottom-right aligned, in float64."""
    i = torch.arange(queries, dtype=torch.float64)[:, None] + (keys - queries)
    j = torch.arange(keys, dtype=torch.float64)[None, :]
    m = torch.tensor(alibi_slopes(heads), dtype=torch.float64)[:, None, None]
    return (-m * (i - j).abs()[None]).to(dtype)


def eligibility(key_lengths, queries, keys, causal, window=0, tokens=None, prefix_lm=False, documents=False):
    """(B, Tq, Tk) bool, True = the query may attend to the key (attnlab's convention).

    Causal is bottom-right aligned: query i sees key j iff j <= i + (Tk - Tq). A
    sliding window W (self-attention) keeps keys p - W < j of the query at position
    p = i + (Tk - Tq), and without causal also j < p + W; a padding query (p past its
    item's last key) is placed at that last key. With `tokens` (B, Tk), the token
    rules: documents start at each <BOS> (token 2) after the first position, and a
    query reads only its own document's keys; prefix-LM lets a query also read the
    keys of its document up to the document's first <SEP> (token 1) among the real
    tokens (none: no prefix)."""
    j = torch.arange(keys)
    ok = (j[None, None, :] < key_lengths[:, None, None]).expand(len(key_lengths), queries, keys)
    p = torch.arange(queries)[:, None] + (keys - queries)
    last = (key_lengths - 1).clamp(min=0)[:, None, None]
    at = torch.where(key_lengths[:, None, None] > 0, torch.minimum(p[None], last), p[None])  # (B, Tq, 1)
    later = j[None, None, :] > at  # keys after the query
    if tokens is not None and (prefix_lm or documents):
        real = j[None, :] < key_lengths[:, None]  # (B, Tk)
        starts = (tokens == 2) & real & (j[None, :] > 0) if documents else torch.zeros_like(real)
        doc = starts.long().cumsum(1)  # each key's document
        doc_q = torch.gather(doc, 1, at[:, :, 0])  # (B, Tq): each query's
        same = doc_q[:, :, None] == doc[:, None, :]  # (B, Tq, Tk)
        if documents:
            ok = ok & same
        if prefix_lm:
            seps = same & ((tokens == 1) & real)[:, None, :]
            first_sep = torch.where(seps, j[None, None, :], keys).min(dim=2, keepdim=True).values  # (B, Tq, 1); keys: none
            later = later & ~(same & (j[None, None, :] <= first_sep) & (first_sep < keys))
    if causal:
        ok = ok & ~later
    if window > 0:
        ok = ok & (j[None, None, :] > at - window)
        if not causal:
            ok = ok & (j[None, None, :] < at + window)
    return ok


def mha_attn_mask(eligible, heads):
    """attnlab eligibility (B, Tq, Tk) -> nn.MultiheadAttention's bool attn_mask (B*heads, Tq, Tk).

    Opposite polarity: nn.MultiheadAttention blocks where the mask is True."""
    return (~eligible).repeat_interleave(heads, dim=0)


class Attention(nn.Module):
    """q/k/v/out projections as attnlab's MultiHeadAttention; K/V grouped when kv_heads < heads."""

    use_nn_mha = False  # class-wide switch set by --nn-mha

    def __init__(self, a, rotary_base=0.0, alibi=False, sinks=False, rel_buckets=0, causal=True):
        super().__init__()
        self.causal = causal  # for the relative bias's buckets
        self.heads, self.kv_heads, self.head_width, self.scale = a.heads, a.kv_heads, a.head_width, a.scale
        self.rotary_base = rotary_base  # > 0: rotary positions on q and k
        self.rotary_dims = a.rotary_dims  # the features of a head that turn
        self.arch = a  # for the score modifiers
        self.alibi = alibi  # ALiBi's bias on the scores
        self.q_proj = nn.Linear(a.width, a.heads * a.head_width, bias=a.bias)
        self.k_proj = nn.Linear(a.width, a.kv_heads * a.head_width, bias=a.bias)
        self.v_proj = nn.Linear(a.width, a.kv_heads * a.head_width, bias=a.bias)
        self.out_proj = nn.Linear(a.heads * a.head_width, a.width, bias=a.bias)
        self.sink = nn.Parameter(torch.zeros(a.heads)) if sinks else None  # attnlab's `sink` (H)
        self.rel_bias = nn.Parameter(torch.zeros(rel_buckets, a.heads)) if rel_buckets else None  # `rel_bias` (buckets, H)
        self.ran_nn_mha = False
        self.ablated = []  # heads whose context is zero (model.ablate_heads), set by DecoderLM

    def nn_mha_compatible(self):
        width = self.out_proj.out_features
        return (not self.ablated and self.kv_heads == self.heads and self.heads * self.head_width == width and self.rotary_base == 0
                and not self.alibi and not has_score_mods(self.arch) and math.isclose(self.scale, 1.0 / math.sqrt(self.head_width), rel_tol=1e-12))

    def split(self, x, heads):  # (B, T, h*d_h) -> (B, h, T, d_h)
        B, T, _ = x.shape
        return x.view(B, T, heads, self.head_width).transpose(1, 2)

    def forward(self, x_q, x_kv, eligible):
        """x_q (B, Tq, D), x_kv (B, Tk, D), eligible (B, Tq, Tk) -> out (B, Tq, D), weights (B, H, Tq, Tk)"""
        if Attention.use_nn_mha and self.nn_mha_compatible():
            return self.forward_nn_mha(x_q, x_kv, eligible)
        q = self.split(self.q_proj(x_q), self.heads)
        k = self.split(self.k_proj(x_kv), self.kv_heads)
        v = self.split(self.v_proj(x_kv), self.kv_heads)
        if self.rotary_base > 0:
            q, k = apply_rotary(q, self.rotary_base, self.rotary_dims), apply_rotary(k, self.rotary_base, self.rotary_dims)
        if self.kv_heads != self.heads:  # query head h reads K/V head h // (H / H_kv)
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        scores = modify_scores(self.scale * (q @ k.transpose(-1, -2)), self.arch)  # (B, H, Tq, Tk)
        if self.alibi:
            scores = scores + alibi_bias(self.heads, scores.shape[2], scores.shape[3], scores.dtype)
        if self.rel_bias is not None:  # one-sided buckets in causal self-attention, signed in an encoder's
            scores = scores + relative_bias(self.rel_bias.to(scores.dtype), scores.shape[2], scores.shape[3],
                                            self.causal, self.arch.rel_max_distance)[None]
        scores = scores.masked_fill(~eligible[:, None], float("-inf"))
        weights = softmax_with_sink(scores, self.sink)
        empty = ~eligible.any(-1)  # (B, Tq): rows with no eligible key
        if bool(empty.any()):
            if self.arch.masked_rows != "zero":
                raise BridgeError("a query row has no eligible key (model.masked_rows = \"error\")")
            weights = weights.masked_fill(empty[:, None, :, None], 0.0)  # "zero": no weight, no context
        context = weights @ v  # (B, H, Tq, d_h)
        if self.ablated:  # model.ablate_heads: those heads' outputs are zero
            keep = torch.ones(self.heads, dtype=context.dtype)
            keep[self.ablated] = 0
            context = context * keep[None, :, None, None]
        B, _, Tq, _ = context.shape
        return self.out_proj(context.transpose(1, 2).reshape(B, Tq, self.heads * self.head_width)), weights

    def forward_nn_mha(self, x_q, x_kv, eligible):
        self.ran_nn_mha = True
        width = self.out_proj.out_features
        biases = [self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]
        out, weights = F.multi_head_attention_forward(
            x_q.transpose(0, 1), x_kv.transpose(0, 1), x_kv.transpose(0, 1), width, self.heads,
            torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]),
            torch.cat(biases) if biases[0] is not None else None,
            None, None, False, 0.0, self.out_proj.weight, self.out_proj.bias, training=False,
            need_weights=True, attn_mask=mha_attn_mask(eligible, self.heads), average_attn_weights=False)
        return out.transpose(0, 1), weights


class FeedForward(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.fc1 = nn.Linear(a.width, a.ffn, bias=a.ffn_bias)
        self.fc2 = nn.Linear(a.ffn, a.width, bias=a.ffn_bias)
        self.activation = a.activation

    def forward(self, x):
        h = self.fc1(x)
        if self.activation == "gelu":
            return self.fc2(F.gelu(h))
        if self.activation == "gelu_tanh":  # GPT-2's gelu_new
            return self.fc2(0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0)))))
        return self.fc2(F.relu(h))


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last axis (Zhang & Sennrich 2019); no bias."""

    def __init__(self, width, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class ScaleNorm(nn.Module):
    """g x / sqrt(|x|^2 + eps), one learned scale g, initially sqrt(width) (Nguyen & Salazar 2019)."""

    def __init__(self, width, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.full((1,), float(width) ** 0.5))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + self.eps) * self.weight


class LayerNormNoBias(nn.Module):
    """(x - mean) / sqrt(var + eps) * weight, no bias (model.norm_bias = false; torch 1.13's nn.LayerNorm has
    no bias=False)."""

    def __init__(self, width, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, self.eps)


# model.norm_type -> the norm of that width, as attnlab's make_norm (layers/basic.cpp)
NORMS = {
    "layernorm": lambda width, bias=True, eps=1e-5: nn.LayerNorm(width, eps=eps) if bias else LayerNormNoBias(width, eps=eps),
    "rmsnorm": lambda width, bias=True, eps=1e-5: RMSNorm(width, eps=eps),
    "scalenorm": lambda width, bias=True, eps=1e-5: ScaleNorm(width, eps=eps),
}


def make_norm(a):
    """The norm model.norm_type names, as attnlab's make_norm (model.norm_bias: LayerNorm's bias, model.norm_eps)."""
    return NORMS[a.norm_type](a.width, a.norm_bias, a.norm_eps)


def sublayer(norm, ln, x, f):
    """pre: x + f(LN(x));  post: LN(x + f(x));  none: x + f(x)."""
    if norm == "pre":
        return x + f(ln(x))
    if norm == "post":
        return ln(x + f(x))
    return x + f(x)


class Block(nn.Module):
    """attn + ln1, optional cross_attn + ln_cross, optional ffn + ln2 (attnlab's Encoder/DecoderBlock)."""

    def __init__(self, a, cross, causal=True):
        super().__init__()
        self.norm = a.norm
        self.parallel = a.parallel and not cross  # decoder blocks: x + attn(ln1(x)) + ffn(ln2(x))
        with_ln = a.norm != "none"
        self.attn = Attention(a, a.rotary_base, a.positional == "alibi", a.sinks, a.rel_buckets, causal)
        self.ln1 = make_norm(a) if with_ln else None
        self.cross_attn = Attention(a) if cross else None  # no rotary positions across source and target
        self.ln_cross = make_norm(a) if cross and with_ln else None
        self.ffn = FeedForward(a) if a.ffn > 0 else None
        self.ln2 = make_norm(a) if a.ffn > 0 and with_ln else None

    def forward(self, x, self_eligible, memory=None, cross_eligible=None, weights=None):
        def self_attention(h):
            out, w = self.attn(h, h, self_eligible)
            weights["self"].append(w)
            return out

        def cross_attention(h):
            out, w = self.cross_attn(h, memory, cross_eligible)
            weights["cross"].append(w)
            return out

        if self.parallel:
            return x + self_attention(self.ln1(x)) + self.ffn(self.ln2(x))
        x = sublayer(self.norm, self.ln1, x, self_attention)
        if self.cross_attn is not None:
            x = sublayer(self.norm, self.ln_cross, x, cross_attention)
        if self.ffn is not None:
            x = sublayer(self.norm, self.ln2, x, self.ffn)
        return x


class DecoderLM(nn.Module):
    def __init__(self, a, max_len):
        super().__init__()
        self.tok_emb = nn.Embedding(a.vocab, a.width)
        self.window, self.prefix_lm, self.documents = a.window, a.prefix_lm, a.documents
        self.pos_emb = PositionalEncoding(a.positional, max_len, a.width)
        self.blocks = nn.ModuleList(Block(a, cross=False) for _ in range(a.layers))
        for layer, head in a.ablate_heads:
            self.blocks[layer].attn.ablated.append(head)
        self.ln_f = make_norm(a) if a.norm == "pre" else None
        # tied: no head of its own; the logits read tok_emb.weight (one parameter, as attnlab's)
        self.head = None if a.tie_embeddings else nn.Linear(a.width, a.vocab, bias=a.head_bias)

    def forward(self, tokens, lengths):
        """tokens (B, T), lengths (B) -> logits (B, T, V), {"self": [weights per layer]}, {"decoder": [hidden]}"""
        x = self.pos_emb(self.tok_emb(tokens))
        hidden, weights = [x], {"self": [], "cross": []}
        eligible = eligibility(lengths, tokens.shape[1], tokens.shape[1], causal=True, window=self.window, tokens=tokens,
                               prefix_lm=self.prefix_lm, documents=self.documents)
        for block in self.blocks:
            x = block(x, eligible, weights=weights)
            hidden.append(x)
        if self.ln_f is not None:
            x = self.ln_f(x)
        logits = F.linear(x, self.tok_emb.weight) if self.head is None else self.head(x)
        return logits, {"self": weights["self"]}, {"decoder": hidden}


class EncoderDecoder(nn.Module):
    def __init__(self, a, max_len):
        super().__init__()
        self.src_emb = nn.Embedding(a.vocab, a.width)
        self.window = a.window
        self.tgt_emb = nn.Embedding(a.vocab, a.width)
        self.src_pos_emb = PositionalEncoding(a.positional, max_len, a.width)
        self.tgt_pos_emb = PositionalEncoding(a.positional, max_len, a.width)
        self.encoder = nn.ModuleList(Block(a, cross=False, causal=False) for _ in range(a.layers))
        self.decoder = nn.ModuleList(Block(a, cross=True) for _ in range(a.layers))
        self.enc_ln_f = make_norm(a) if a.norm == "pre" else None
        self.dec_ln_f = make_norm(a) if a.norm == "pre" else None
        self.head = nn.Linear(a.width, a.vocab, bias=a.head_bias)

    def forward(self, src, src_lengths, tgt, tgt_lengths):
        """src (B, S), tgt (B, T) = the decoder input, <BOS> first -> logits (B, T, V), weights, hidden"""
        S, T = src.shape[1], tgt.shape[1]
        x = self.src_pos_emb(self.src_emb(src))
        enc_hidden, enc_weights = [x], {"self": [], "cross": []}
        src_eligible = eligibility(src_lengths, S, S, causal=False, window=self.window)
        for block in self.encoder:
            x = block(x, src_eligible, weights=enc_weights)
            enc_hidden.append(x)
        memory = self.enc_ln_f(x) if self.enc_ln_f is not None else x

        y = self.tgt_pos_emb(self.tgt_emb(tgt))
        dec_hidden, dec_weights = [y], {"self": [], "cross": []}
        tgt_eligible = eligibility(tgt_lengths, T, T, causal=True, window=self.window)
        cross_eligible = eligibility(src_lengths, T, S, causal=False)
        for block in self.decoder:
            y = block(y, tgt_eligible, memory, cross_eligible, weights=dec_weights)
            dec_hidden.append(y)
        if self.dec_ln_f is not None:
            y = self.dec_ln_f(y)
        weights = {"enc_self": enc_weights["self"], "dec_self": dec_weights["self"], "cross": dec_weights["cross"]}
        return self.head(y), weights, {"encoder": enc_hidden, "decoder": dec_hidden}


def build_module(path, dtype=torch.float32):
    """The checkpoint at `path` as a torch module in eval mode -> (module, Arch, config text, step)."""
    params, config, text, step = read_checkpoint(path)
    arch = Arch(config)
    pos_name = "pos_emb.weight" if arch.kind == "decoder" else "tgt_pos_emb.weight"
    max_len = params[pos_name].shape[0] if arch.positional == "learned" and pos_name in params else 1
    module = (DecoderLM if arch.kind == "decoder" else EncoderDecoder)(arch, max_len)
    expected = module.state_dict()
    missing = sorted(set(expected) - set(params))
    unexpected = sorted(set(params) - set(expected))
    if missing or unexpected:
        raise BridgeError(f"{path}: parameters do not match the config's architecture "
                          f"(missing: {', '.join(missing) or 'none'}; unexpected: {', '.join(unexpected) or 'none'})")
    for name, value in params.items():
        if tuple(expected[name].shape) != value.shape:
            raise BridgeError(f"{path}: /params/{name} has shape {value.shape}, "
                              f"the config gives {tuple(expected[name].shape)}")
    module.load_state_dict({k: torch.from_numpy(v) for k, v in params.items()}, strict=True)
    module.to(dtype).eval()
    return module, arch, text, step


def run(module, arch, rows):
    """rows: {"tokens", "lengths"} or {"src", "src_lengths", "tgt", "tgt_lengths"} as int ndarrays."""
    t = {k: torch.as_tensor(np.asarray(v, dtype=np.int64)) for k, v in rows.items()}
    with torch.no_grad():
        if arch.kind == "decoder":
            return module(t["tokens"], t["lengths"])
        return module(t["src"], t["src_lengths"], t["tgt"], t["tgt_lengths"])


# ---- compare with an inspect file --------------------------------------------

def read_inspect(path, arch, config_text, step):
    """Inputs and reference arrays of an `attnlab inspect` OUT.h5 made from the same checkpoint."""
    with _open_h5(path, "inspect file") as f:
        _check_format(f, path, INSPECT_FORMAT)
        if _attr_text(f.attrs["config"]) != config_text:
            raise BridgeError(f"{path}: was made from a checkpoint with another config")
        if "step" in f.attrs and step >= 0 and int(f.attrs["step"]) != step:
            raise BridgeError(f"{path}: was made from the checkpoint of step {int(f.attrs['step'])}, not {step}")
        names = ["tokens", "lengths"] if arch.kind == "decoder" else ["src", "src_lengths", "tgt", "tgt_lengths"]
        try:
            rows = {n: f[n][()] for n in names}
            reference = {"logits": f["logits"][()], "attention": {}, "hidden": {}}
            for kind, group in f["attention"].items():
                reference["attention"][kind] = [group[f"layer_{l}"][()] for l in range(arch.layers)]
            for part, group in f["hidden"].items():
                reference["hidden"][part] = [group[f"layer_{l}"][()] for l in range(arch.layers + 1)]
        except KeyError as e:
            raise BridgeError(f"{path}: missing dataset ({e})") from None
    return rows, reference


def max_abs_diff(a, b, where):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise BridgeError(f"{where}: attnlab shape {a.shape}, torch shape {b.shape}")
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def compare(module, arch, config_text, step, inspect_path, tol):
    """Prints one line per compared array; returns True when everything agrees within tol."""
    rows, ref = read_inspect(inspect_path, arch, config_text, step)
    logits, weights, hidden = run(module, arch, rows)
    ok = True
    lines = []

    def report(name, diff, limit, scale=None):
        nonlocal ok
        good = diff <= limit
        ok = ok and good
        extra = f"  (max |value| {scale:.3g})" if scale is not None else ""
        lines.append(f"{name:32s} max |diff| {diff:.3e}{extra}{'' if good else '  > ' + format(limit, '.1e')}")

    logit_diff = max_abs_diff(ref["logits"], logits.numpy(), "logits")
    report("logits", logit_diff, tol, float(np.max(np.abs(ref["logits"]))))
    if set(ref["attention"]) != set(weights):
        raise BridgeError(f"{inspect_path}: attention kinds {sorted(ref['attention'])}, the model has {sorted(weights)}")
    for kind in weights:
        for l, w in enumerate(weights[kind]):
            name = f"attention/{kind}/layer_{l}"
            report(name, max_abs_diff(ref["attention"][kind][l], w.numpy(), name), tol)
    for part in hidden:
        for l, h in enumerate(hidden[part]):
            name = f"hidden/{part}/layer_{l}"
            magnitude = float(np.max(np.abs(ref["hidden"][part][l])))
            report(name, max_abs_diff(ref["hidden"][part][l], h.numpy(), name), tol * max(1.0, magnitude), magnitude)
    print("\n".join(lines))
    used = [m for m in module.modules() if isinstance(m, Attention)]
    if Attention.use_nn_mha:
        print(f"nn.MultiheadAttention ran {sum(m.ran_nn_mha for m in used)} of {len(used)} attention layers")
    print(f"{'AGREE' if ok else 'DISAGREE'}: max |logits diff| {logit_diff:.3e} (tolerance {tol:g}) "
          f"on {ref['logits'].shape[0]} sequence(s)")
    return ok


def parse_ids(text, option, vocab):
    try:
        ids = [int(w) for w in text.split()]
    except ValueError:
        raise BridgeError(f"{option}: '{text}' is not a list of token ids") from None
    if not ids or any(i < 0 or i >= vocab for i in ids):
        raise BridgeError(f"{option}: give token ids in [0, {vocab})")
    return np.asarray([ids], dtype=np.int64)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("checkpoint")
    parser.add_argument("--compare", metavar="OUT.h5", help="an `attnlab inspect` file of this checkpoint")
    parser.add_argument("--tol", type=float, default=1e-4, help="largest allowed |difference| (default 1e-4)")
    parser.add_argument("--tokens", help="token ids \"3 7 5\" (the source, for an encoder-decoder)")
    parser.add_argument("--target", help="encoder-decoder: decoder input ids, <BOS> first (default \"2\")")
    parser.add_argument("--save", metavar="MODEL.pt", help="torch.save {'state_dict', 'config'} of the module")
    parser.add_argument("--nn-mha", action="store_true",
                        help="run compatible attention layers through nn.MultiheadAttention (inverted mask)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    args = parser.parse_args(argv)
    if not (args.compare or args.tokens or args.save):
        parser.error("give --compare OUT.h5, --tokens \"...\" or --save MODEL.pt")
    torch.set_num_threads(1)
    Attention.use_nn_mha = args.nn_mha
    try:
        module, arch, text, step = build_module(args.checkpoint, getattr(torch, args.dtype))
        status = 0
        if args.save:
            torch.save({"state_dict": module.state_dict(), "config": text}, args.save)
            print(f"saved {args.save}")
        if args.tokens:
            tokens = parse_ids(args.tokens, "--tokens", arch.vocab)
            if arch.kind == "decoder":
                if args.target:
                    raise BridgeError("--target is for encoder-decoder checkpoints")
                rows = {"tokens": tokens, "lengths": [tokens.shape[1]]}
            else:
                tgt = parse_ids(args.target, "--target", arch.vocab) if args.target else np.asarray([[BOS]])
                rows = {"src": tokens, "src_lengths": [tokens.shape[1]], "tgt": tgt, "tgt_lengths": [tgt.shape[1]]}
            logits = run(module, arch, rows)[0]
            print("argmax", " ".join(str(int(i)) for i in logits[0].argmax(-1)))
        if args.compare:
            status = 0 if compare(module, arch, text, step, args.compare, args.tol) else 1
        return status
    except BridgeError as e:
        print(f"torch_bridge: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
