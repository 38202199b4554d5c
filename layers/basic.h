// The small layers: Linear, Embedding, positional encodings, LayerNorm,
// Dropout, FeedForward. Parameter names and layouts follow PyTorch.
#pragma once

#include <memory>
#include <string>

#include "autograd/choices.h"
#include "autograd/ops.h"
#include "autograd/rng.h"
#include "layers/module.h"

namespace attnlab {

// y = x W^T + b; weight (out, in), bias (out). Init as torch: U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
public:
    Linear(size_t in_features, size_t out_features, bool bias, Rng& init);
    Tensor forward(const Tensor& x) const { return linear(x, weight, bias); }  // (..., in) -> (..., out)
    Tensor weight, bias;  // bias undefined when disabled
};

// Several Linears of one input, [l.forward(x) for l in layers] (linears: on the
// device, layers side by side in the parameter block are one GEMM).
std::vector<Tensor> forward_each(const std::vector<const Linear*>& layers, const Tensor& x);

// ids (...) -> (..., D); weight (V, D) ~ N(0, init_std^2).
class Embedding : public Module {
public:
    Embedding(size_t vocab, size_t width, Rng& init, double init_std = 1.0);
    Tensor forward(const Indices& ids) const { return embedding(weight, ids); }
    Tensor weight;
};

// rotary: no code added here; self-attention rotates q and k (MultiHeadAttention,
// AttentionConfig::rotary_base), so no table bounds the length either. alibi:
// none either; self-attention's scores get ALiBi's linear bias (the models set
// AttentionVariant::alibi on their self-attention masks).
enum class Positional { learned, sinusoidal, none, rotary, alibi };
const Choices<Positional>& positional_choices();  // "learned" | "sinusoidal" | "none" | "rotary" | "alibi"
Positional parse_positional(const std::string& name);
std::string to_string(Positional kind);

// Adds a position code to x (B, T, D) for positions offset .. offset+T-1.
// learned: parameter `weight` (max_len, D) (stacked members: (K, max_len, D), each
// member's block of the batch with its own table); sinusoidal: Vaswani et al. 2017,
// PE(p, 2i) = sin(p / 10000^(2i/D)), PE(p, 2i+1) = cos(p / 10000^(2i/D)); none: x unchanged.
class PositionalEncoding : public Module {
public:
    PositionalEncoding(Positional kind, size_t max_len, size_t width, Rng& init);
    Tensor forward(const Tensor& x, size_t offset = 0) const;
    Positional kind;
    size_t max_len;
    Tensor weight;  // learned: parameter; sinusoidal: fixed table (not a parameter)
};

// The normalisations a block or a model's end can use, over the last axis.
// Hook point: out.
enum class NormType { layer, rms, scale };
const Choices<NormType>& norm_type_choices();  // "layernorm" | "rmsnorm" | "scalenorm"
NormType parse_norm_type(const std::string& name);
std::string to_string(NormType type);

class NormLayer : public Module {
public:
    virtual Tensor forward(const Tensor& x) const = 0;  // (..., D) -> (..., D)
    // The norm's linear part at the statistics of `stream`, applied to
    // `component` (both (..., D), one shape): the centring (LayerNorm), the
    // scale 1/sigma(stream) held fixed, the weight; no bias. Linear in the
    // component, and forward(x) = frozen(x, x) + bias, so components that add
    // up to the stream map to the norm's output less its bias: the direct logit
    // attribution's linearisation, written once here, in the model's ops. It
    // runs where the component is (the weight is copied there when the model is
    // on another device).
    virtual Tensor frozen(const Tensor& component, const Tensor& stream) const = 0;
    Tensor weight;                                      // (D), ones; ScaleNorm's (1)
};

// (x - mean) / sqrt(var + eps) * weight + bias; bias zeros, or none (model.norm_bias = false).
class LayerNorm : public NormLayer {
public:
    explicit LayerNorm(size_t width, double eps = 1e-5, bool with_bias = true);
    Tensor forward(const Tensor& x) const override { return hook("out", layer_norm(x, weight, bias, eps)); }
    Tensor frozen(const Tensor& component, const Tensor& stream) const override;
    Tensor bias;  // undefined without one
    double eps;
};

// x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019): no centring, no bias.
class RMSNorm : public NormLayer {
public:
    explicit RMSNorm(size_t width, double eps = 1e-5);
    Tensor forward(const Tensor& x) const override { return hook("out", rms_norm(x, weight, eps)); }
    Tensor frozen(const Tensor& component, const Tensor& stream) const override;
    double eps;
};

// g x / sqrt(|x|^2 + eps), one learned scale g (weight (1), initially sqrt(D))
// (Nguyen & Salazar 2019, ScaleNorm): no centring, no bias, one parameter.
class ScaleNorm : public NormLayer {
public:
    explicit ScaleNorm(size_t width, double eps = 1e-5);
    Tensor forward(const Tensor& x) const override { return hook("out", frozen(x, x)); }
    Tensor frozen(const Tensor& component, const Tensor& stream) const override;
    double eps;
};

// `bias`: LayerNorm's (the other norms have none); `eps` the norm's epsilon (model.norm_eps).
std::unique_ptr<NormLayer> make_norm(NormType type, size_t width, bool bias = true, double eps = 1e-5);

// Active only in training mode; draws from the Rng it was given (owned by the model).
class Dropout : public Module {
public:
    Dropout(double p, Rng* rng) : p(p), rng(rng) {}
    Tensor forward(const Tensor& x) const;
    double p;
    Rng* rng;
};

enum class Activation { gelu, gelu_tanh, relu };
const Choices<Activation>& activation_choices();  // "gelu" | "gelu_tanh" | "relu"
Tensor activate(Activation activation, const Tensor& x);  // gelu (exact), gelu_tanh (GPT-2's gelu_new) or relu

// D -> F -> D: fc2(act(fc1(x))), then dropout; fc1 and fc2 with biases or without.
// Hook points: hidden (..., F) after the activation, out (..., D).
class FeedForward : public Module {
public:
    FeedForward(size_t width, size_t hidden, Activation activation, double dropout, Rng& init, Rng* dropout_rng, bool bias = true);
    Tensor forward(const Tensor& x) const;
    Linear fc1, fc2;
    Activation activation;
    Dropout drop;
};

}  // namespace attnlab
