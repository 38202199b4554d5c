#!/usr/bin/env python3
"""Writes the PyTorch reference results that tests/layers/test_torch_agreement.cpp
compares attnlab's MultiHeadAttention against (to 1e-5, float32).

    /usr/bin/python3 tests/reference/torch_attention_fixtures.py OUT.h5

CTest runs this as the fixture `torch_attention_fixtures` before the
TorchAgreement.* tests (tests/CMakeLists.txt) and hands them the file through
ATTNLAB_TORCH_FIXTURES.

Two torch references per case, computed from the SAME float32 weights:

  nn_multihead_attention  torch.nn.MultiheadAttention (batch_first, dropout 0,
                          average_attn_weights=False for per-head weights).
  reference_attention     the SDPA stand-in: torch 1.13 (Debian's python3-torch)
                          has no F.scaled_dot_product_attention (added in 2.0), so
                          the core softmax(scale Q K^T, ineligible keys -> -inf) V
                          is written out in torch ops below (reference_attention).
                          When F.scaled_dot_product_attention exists (torch >= 2.1,
                          for scale=), it computes the context instead and the group
                          says so in its `implementation` attr (not exercised here).

grouped_kv has only reference_attention: nn.MultiheadAttention has no grouped
K/V, so K and V heads are repeated explicitly (repeat_interleave over the head
axis, query head h reads K/V head h // (H / H_kv)) and ordinary attention runs.

File layout (all arrays float32 unless said; weights in PyTorch layout [out, in]):

  /                attrs: format, format_version, torch_version, sdpa_available
  /<case>          attrs: width, kv_width, heads, kv_heads, head_width, causal (0/1),
                          self_attention (0/1), scale (spec string for attnlab:
                          "sqrt", "linear", ...), scale_value (float64, what torch used)
    x_q (B,Tq,D), x_kv (B,Tk,D_kv), key_lengths (B) int64,
    eligible (B,Tq,Tk) uint8 (our polarity: 1 = may attend), R (B,Tq,D)
    params/{q,k,v,out}_proj.{weight,bias}
    torch/<reference>/output (B,Tq,D), weights (B,H,Tq,Tk),
    torch/<reference>/grads/<name>  d(sum(output * R))/d<name> for x_q, x_kv and
                                    every parameter; self-attention cases also
                                    store grads/x: the gradient when ONE tensor is
                                    passed as query, key and value.

x_q and x_kv are separate leaves (same values in self-attention) so that the
query path and the key/value path are checked separately; grads/x checks the
shared-input call that the models make.
"""

import math
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

FORMAT = "attnlab-torch-attention-fixtures"
FORMAT_VERSION = 1
SEED = 20240611
# F.scaled_dot_product_attention arrived in torch 2.0, its scale= argument in 2.1
SDPA_AVAILABLE = (hasattr(F, "scaled_dot_product_attention")
                  and tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 1))

# (name, config). Every query row keeps at least one eligible key: torch gives
# NaN for a fully masked row, attnlab raises (masked_rows = "error").
CASES = [
    ("causal_self", dict(batch=2, tq=6, tk=6, width=12, kv_width=12, heads=3, kv_heads=3,
                         causal=True, key_lengths=[6, 6], self_attention=True, scale="sqrt")),
    ("key_padding", dict(batch=3, tq=5, tk=5, width=8, kv_width=8, heads=2, kv_heads=2,
                         causal=False, key_lengths=[5, 3, 1], self_attention=True, scale="sqrt")),
    ("causal_and_padding", dict(batch=2, tq=6, tk=6, width=8, kv_width=8, heads=4, kv_heads=4,
                                causal=True, key_lengths=[6, 4], self_attention=True, scale="sqrt")),
    # cross-attention: Tq != Tk, a source of another width (torch's kdim/vdim),
    # sources of different lengths
    ("cross", dict(batch=2, tq=3, tk=5, width=8, kv_width=6, heads=2, kv_heads=2,
                   causal=False, key_lengths=[5, 2], self_attention=False, scale="sqrt")),
    # grouped K/V, with a non-default scale ("linear" = 1/d_h) and both masks
    ("grouped_kv", dict(batch=2, tq=5, tk=5, width=16, kv_width=16, heads=4, kv_heads=2,
                        causal=True, key_lengths=[5, 3], self_attention=True, scale="linear")),
]

PARAM_NAMES = ["q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias",
               "v_proj.weight", "v_proj.bias", "out_proj.weight", "out_proj.bias"]


def resolve_scale(spec, head_width):
    """attnlab's score scale (docs/config.md, model.scale); torch's MHA always uses "sqrt"."""
    named = {"sqrt": 1.0 / math.sqrt(head_width), "none": 1.0, "linear": 1.0 / head_width}
    return named[spec] if spec in named else float(spec)


def eligibility(batch, tq, tk, causal, key_lengths):
    """attnlab's mask: (B, Tq, Tk) bool, True = the query MAY attend to the key.
    Causal is bottom-right aligned (j <= i + Tk - Tq); keys >= length are padding."""
    i = torch.arange(tq).view(1, tq, 1)
    j = torch.arange(tk).view(1, 1, tk)
    eligible = torch.ones(batch, tq, tk, dtype=torch.bool)
    if causal:
        eligible &= j <= i + (tk - tq)
    lengths = torch.tensor(key_lengths).view(batch, 1, 1)
    eligible &= j < lengths
    return eligible


def to_torch_blocked(eligible):
    """Polarity conversion, attnlab -> nn.MultiheadAttention.

    attnlab masks are ELIGIBILITY (True = may attend, the SDPA convention);
    nn.MultiheadAttention's boolean attn_mask and key_padding_mask mean the
    OPPOSITE (True = NOT allowed / padding). Every mask handed to
    nn.MultiheadAttention goes through this function."""
    return ~eligible


def reference_attention(q, k, v, eligible, scale):
    """The SDPA stand-in, in torch ops: q (B,H,Tq,d), k and v (B,H,Tk,d),
    eligible (B,1,Tq,Tk) bool in attnlab's polarity (True = may attend).
    Returns context (B,H,Tq,d) and weights (B,H,Tq,Tk)."""
    scores = (q @ k.transpose(-2, -1)) * scale                      # (B,H,Tq,Tk)
    scores = scores.masked_fill(~eligible, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if SDPA_AVAILABLE:  # the real thing; its boolean attn_mask is eligibility too (True = takes part)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=eligible, scale=scale)
    else:
        context = weights @ v
    return context, weights


def split_heads(x, heads):  # (B,T,H*d) -> (B,H,T,d)
    b, t, hd = x.shape
    return x.view(b, t, heads, hd // heads).transpose(1, 2)


def reference_module(params, x_q, x_kv, eligible, cfg, scale):
    """MultiHeadAttention written out in torch ops around reference_attention.
    Grouped K/V: K and V heads are repeated explicitly with repeat_interleave,
    so query head h reads K/V head h // (H / H_kv)."""
    heads, kv_heads = cfg["heads"], cfg["kv_heads"]
    q = split_heads(F.linear(x_q, params["q_proj.weight"], params["q_proj.bias"]), heads)
    k = split_heads(F.linear(x_kv, params["k_proj.weight"], params["k_proj.bias"]), kv_heads)
    v = split_heads(F.linear(x_kv, params["v_proj.weight"], params["v_proj.bias"]), kv_heads)
    group = heads // kv_heads
    k = k.repeat_interleave(group, dim=1)                            # (B,H,Tk,d)
    v = v.repeat_interleave(group, dim=1)
    context, weights = reference_attention(q, k, v, eligible.unsqueeze(1), scale)
    b, _, tq, d = context.shape
    merged = context.transpose(1, 2).reshape(b, tq, heads * d)       # Concat(heads)
    return F.linear(merged, params["out_proj.weight"], params["out_proj.bias"]), weights


def torch_mha_module(params, cfg):
    """nn.MultiheadAttention holding our weights. Equal widths: in_proj_weight is
    [W_q; W_k; W_v]; a source of another width (kdim/vdim): separate
    q_proj_weight, k_proj_weight, v_proj_weight. in_proj_bias is [b_q; b_k; b_v]."""
    d, d_kv = cfg["width"], cfg["kv_width"]
    mha = torch.nn.MultiheadAttention(d, cfg["heads"], dropout=0.0, bias=True, batch_first=True,
                                      kdim=d_kv, vdim=d_kv)
    with torch.no_grad():
        if mha._qkv_same_embed_dim:
            mha.in_proj_weight.copy_(torch.cat([params["q_proj.weight"], params["k_proj.weight"],
                                                params["v_proj.weight"]]))
        else:
            mha.q_proj_weight.copy_(params["q_proj.weight"])
            mha.k_proj_weight.copy_(params["k_proj.weight"])
            mha.v_proj_weight.copy_(params["v_proj.weight"])
        mha.in_proj_bias.copy_(torch.cat([params["q_proj.bias"], params["k_proj.bias"], params["v_proj.bias"]]))
        mha.out_proj.weight.copy_(params["out_proj.weight"])
        mha.out_proj.bias.copy_(params["out_proj.bias"])
    mha.train()  # dropout is 0; training mode keeps torch off its inference fast path
    return mha


def mha_param_grads(mha):
    """Gradients of nn.MultiheadAttention's parameters under attnlab's names."""
    d = mha.embed_dim
    if mha._qkv_same_embed_dim:
        gq, gk, gv = mha.in_proj_weight.grad.split(d)
    else:
        gq, gk, gv = mha.q_proj_weight.grad, mha.k_proj_weight.grad, mha.v_proj_weight.grad
    bq, bk, bv = mha.in_proj_bias.grad.split(d)
    return {"q_proj.weight": gq, "q_proj.bias": bq, "k_proj.weight": gk, "k_proj.bias": bk,
            "v_proj.weight": gv, "v_proj.bias": bv,
            "out_proj.weight": mha.out_proj.weight.grad, "out_proj.bias": mha.out_proj.bias.grad}


def run_mha(mha, x_q, x_kv, eligible, cfg, shared_input):
    """One nn.MultiheadAttention pass. Causal part -> attn_mask (Tq,Tk), padding ->
    key_padding_mask (B,Tk), both converted by to_torch_blocked."""
    b, tq, tk = eligible.shape
    attn_mask = None
    if cfg["causal"]:
        attn_mask = to_torch_blocked(eligibility(1, tq, tk, True, [tk])[0])           # (Tq,Tk)
    key_eligible = torch.arange(tk).view(1, tk) < torch.tensor(cfg["key_lengths"]).view(b, 1)
    key_padding_mask = to_torch_blocked(key_eligible)                                 # (B,Tk)
    if shared_input:
        out, weights = mha(x_q, x_q, x_q, key_padding_mask=key_padding_mask, need_weights=True,
                           attn_mask=attn_mask, average_attn_weights=False)
    else:
        out, weights = mha(x_q, x_kv, x_kv, key_padding_mask=key_padding_mask, need_weights=True,
                           attn_mask=attn_mask, average_attn_weights=False)
    return out, weights


def leaf(array):
    return torch.from_numpy(array).clone().requires_grad_(True)


def make_case(rng, cfg):
    b, tq, tk, d, d_kv = cfg["batch"], cfg["tq"], cfg["tk"], cfg["width"], cfg["kv_width"]
    heads, kv_heads = cfg["heads"], cfg["kv_heads"]
    head_width = d // heads
    f32 = np.float32
    x_q = rng.standard_normal((b, tq, d)).astype(f32)
    x_kv = x_q.copy() if cfg["self_attention"] else rng.standard_normal((b, tk, d_kv)).astype(f32)

    def uniform(shape, fan_in):  # torch's Linear init range
        bound = 1.0 / math.sqrt(fan_in)
        return rng.uniform(-bound, bound, shape).astype(f32)

    params = {
        "q_proj.weight": uniform((heads * head_width, d), d), "q_proj.bias": uniform((heads * head_width,), d),
        "k_proj.weight": uniform((kv_heads * head_width, d_kv), d_kv),
        "k_proj.bias": uniform((kv_heads * head_width,), d_kv),
        "v_proj.weight": uniform((kv_heads * head_width, d_kv), d_kv),
        "v_proj.bias": uniform((kv_heads * head_width,), d_kv),
        "out_proj.weight": uniform((d, heads * head_width), heads * head_width),
        "out_proj.bias": uniform((d,), heads * head_width),
    }
    R = rng.standard_normal((b, tq, d)).astype(f32)
    eligible = eligibility(b, tq, tk, cfg["causal"], cfg["key_lengths"])
    assert eligible.any(dim=-1).all(), "a fully masked query row: torch would give NaN"
    return x_q, x_kv, params, R, eligible, head_width


def results(out, weights, R, named_leaves):
    """output, weights and d(sum(out * R))/d(each leaf), as float32 numpy."""
    (out * torch.from_numpy(R)).sum().backward()
    grads = {name: t.grad for name, t in named_leaves.items()}
    return out.detach(), weights.detach(), grads


def write(group, out, weights, grads):
    group["output"] = out.numpy().astype(np.float32)
    group["weights"] = weights.numpy().astype(np.float32)
    g = group.create_group("grads")
    for name, grad in grads.items():
        g[name] = grad.detach().numpy().astype(np.float32)


def max_diff(a, b):
    return float((a - b).abs().max())


def generate(path):
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    with h5py.File(path, "w") as f:
        f.attrs["format"] = np.bytes_(FORMAT)
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["torch_version"] = np.bytes_(torch.__version__)
        f.attrs["sdpa_available"] = int(SDPA_AVAILABLE)
        for name, cfg in CASES:
            x_q, x_kv, params, R, eligible, head_width = make_case(rng, cfg)
            scale = resolve_scale(cfg["scale"], head_width)
            grp = f.create_group(name)
            for key in ("width", "kv_width", "heads", "kv_heads"):
                grp.attrs[key] = cfg[key]
            grp.attrs["head_width"] = head_width
            grp.attrs["causal"] = int(cfg["causal"])
            grp.attrs["self_attention"] = int(cfg["self_attention"])
            grp.attrs["scale"] = np.bytes_(cfg["scale"])
            grp.attrs["scale_value"] = np.float64(scale)
            grp["x_q"], grp["x_kv"], grp["R"] = x_q, x_kv, R
            grp["key_lengths"] = np.asarray(cfg["key_lengths"], dtype=np.int64)
            grp["eligible"] = eligible.numpy().astype(np.uint8)
            pg = grp.create_group("params")
            for pname in PARAM_NAMES:
                pg[pname] = params[pname]
            tg = grp.create_group("torch")

            # reference_attention (SDPA stand-in), every case
            p = {k: leaf(v) for k, v in params.items()}
            xq, xkv = leaf(x_q), leaf(x_kv)
            out, w = reference_module(p, xq, xkv, eligible, cfg, scale)
            ref = results(out, w, R, {"x_q": xq, "x_kv": xkv, **p})
            sub = tg.create_group("reference_attention")
            sub.attrs["implementation"] = np.bytes_(
                "F.scaled_dot_product_attention" if SDPA_AVAILABLE else
                "explicit torch ops (torch < 2.0 has no F.scaled_dot_product_attention)")
            if cfg["self_attention"]:
                xs = leaf(x_q)
                out_s, w_s = reference_module(p, xs, xs, eligible, cfg, scale)
                for t in p.values():  # torch would accumulate into the grads kept above, in place
                    t.grad = None
                ref[2]["x"] = results(out_s, w_s, R, {"x": xs})[2]["x"]
            write(sub, *ref)
            report = [f"{name}: reference_attention written"]

            # nn.MultiheadAttention: no grouped K/V, and only the "sqrt" scale
            if cfg["kv_heads"] == cfg["heads"] and cfg["scale"] == "sqrt":
                mha = torch_mha_module({k: torch.from_numpy(v) for k, v in params.items()}, cfg)
                xq, xkv = leaf(x_q), leaf(x_kv)
                out, w = run_mha(mha, xq, xkv, eligible, cfg, shared_input=False)
                out, w, grads = results(out, w, R, {"x_q": xq, "x_kv": xkv})
                grads.update(mha_param_grads(mha))
                if cfg["self_attention"]:
                    mha.zero_grad(set_to_none=True)  # in place would overwrite the grads kept above
                    xs = leaf(x_q)
                    out_s, w_s = run_mha(mha, xs, xs, eligible, cfg, shared_input=True)
                    grads["x"] = results(out_s, w_s, R, {"x": xs})[2]["x"]
                write(tg.create_group("nn_multihead_attention"), out, w, grads)
                # the two torch references must agree with each other first
                worst = max([max_diff(out, ref[0]), max_diff(w, ref[1])] +
                            [max_diff(grads[k], ref[2][k]) for k in grads])
                assert worst <= 1e-5, f"{name}: nn.MultiheadAttention vs reference_attention differ by {worst:g}"
                report.append(f"nn.MultiheadAttention written (max |MHA - reference| = {worst:.2e})")
            print("; ".join(report))


def main(argv):
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUT.h5", file=sys.stderr)
        return 2
    generate(argv[1])
    print(f"wrote {argv[1]} (torch {torch.__version__}, "
          f"F.scaled_dot_product_attention {'available' if SDPA_AVAILABLE else 'absent: explicit stand-in'})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
