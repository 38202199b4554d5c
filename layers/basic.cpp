#include "layers/basic.h"

#include <cmath>

namespace attnlab {

Linear::Linear(size_t in_features, size_t out_features, bool with_bias, Rng& init) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    weight = register_parameter("weight", init.uniform({out_features, in_features}, -bound, bound));
    if (with_bias) bias = register_parameter("bias", init.uniform({out_features}, -bound, bound));
}

std::vector<Tensor> forward_each(const std::vector<const Linear*>& layers, const Tensor& x) {
    std::vector<Tensor> weights, biases;
    for (const Linear* layer : layers) {
        weights.push_back(layer->weight);
        biases.push_back(layer->bias);
    }
    return linears(x, weights, biases);
}

Embedding::Embedding(size_t vocab, size_t width, Rng& init, double init_std) {
    weight = register_parameter("weight", init.normal({vocab, width}, 0.0, init_std));
}

const Choices<Positional>& positional_choices() {
    static const Choices<Positional> choices{"positional", "", {{Positional::learned, "learned"}, {Positional::sinusoidal, "sinusoidal"},
                                                               {Positional::none, "none"}, {Positional::rotary, "rotary"},
                                                               {Positional::alibi, "alibi"}}};
    return choices;
}

Positional parse_positional(const std::string& name) { return positional_choices().parse(name); }

std::string to_string(Positional kind) { return positional_choices().name(kind); }

PositionalEncoding::PositionalEncoding(Positional kind_, size_t max_len_, size_t width, Rng& init)
    : kind(kind_), max_len(max_len_) {
    if (kind == Positional::learned) {
        weight = register_parameter("weight", init.normal({max_len, width}, 0.0, 1.0));
    } else if (kind == Positional::sinusoidal) {
        std::vector<double> table(max_len * width);
        for (size_t p = 0; p < max_len; ++p)
            for (size_t i = 0; i < width; ++i) {
                const double angle = static_cast<double>(p) / std::pow(10000.0, static_cast<double>(i - i % 2) / static_cast<double>(width));
                table[p * width + i] = i % 2 == 0 ? std::sin(angle) : std::cos(angle);
            }
        weight = register_buffer(Tensor::from_values(table, {max_len, width}));
    }
}

Tensor PositionalEncoding::forward(const Tensor& x, size_t offset) const {
    if (kind == Positional::none || kind == Positional::rotary || kind == Positional::alibi) return x;
    const size_t T = x.size(1);
    if (offset + T > max_len)
        fail("positional", "positions up to " + std::to_string(offset + T) + " exceed the table of " +
                               std::to_string(max_len) + " (raise the maximum sequence length)");
    Tensor table = weight.dtype() == x.dtype() ? weight : weight.to(x.dtype());
    if (members() == 1 || kind == Positional::sinusoidal) return x + slice(table, 0, offset, offset + T);  // (B,T,D) + (T,D)
    // stacked members (K, max_len, D): member m's rows of x read table m, rows offset ..
    // offset + T - 1 of it looked up as an embedding of the positions (the same sums,
    // forward and backward, as the slice's)
    const size_t B = x.size(0);
    std::vector<int32_t> positions(B * T);
    for (size_t i = 0; i < B * T; ++i) positions[i] = static_cast<int32_t>(offset + i % T);
    return x + embedding(table, Indices({B, T}, std::move(positions)));  // (B,T,D) + (B,T,D)
}

LayerNorm::LayerNorm(size_t width, double eps_, bool with_bias) : eps(eps_) {
    weight = register_parameter("weight", Tensor::ones({width}));
    if (with_bias) bias = register_parameter("bias", Tensor::zeros({width}));
    declare_hook_points({{"out", "batch pos d_model"}});
}

Tensor LayerNorm::frozen(const Tensor& component, const Tensor& stream) const {
    const Tensor centred = stream - mean(stream, {-1}, true);                                        // (..., D)
    const Tensor inv_sigma = pow(mean(centred * centred, {-1}, true) + eps, -0.5);  // (..., 1)
    return (component - mean(component, {-1}, true)) * inv_sigma * weight.to(component.device());  // (..., D)
}

const Choices<NormType>& norm_type_choices() {
    static const Choices<NormType> choices{"norm_type", "", {{NormType::layer, "layernorm"}, {NormType::rms, "rmsnorm"}, {NormType::scale, "scalenorm"}}};
    return choices;
}

NormType parse_norm_type(const std::string& name) { return norm_type_choices().parse(name); }

std::string to_string(NormType type) { return norm_type_choices().name(type); }

const Choices<Activation>& activation_choices() {
    static const Choices<Activation> choices{
        "activation", "", {{Activation::gelu, "gelu"}, {Activation::gelu_tanh, "gelu_tanh"}, {Activation::relu, "relu"}}};
    return choices;
}

Tensor activate(Activation activation, const Tensor& x) {
    if (activation == Activation::gelu) return gelu(x);
    if (activation == Activation::gelu_tanh) return gelu_tanh(x);
    return relu(x);
}

RMSNorm::RMSNorm(size_t width, double eps_) : eps(eps_) {
    weight = register_parameter("weight", Tensor::ones({width}));
    declare_hook_points({{"out", "batch pos d_model"}});
}

Tensor RMSNorm::frozen(const Tensor& component, const Tensor& stream) const {
    const Tensor inv_rms = pow(mean(stream * stream, {-1}, true) + eps, -0.5);  // (..., 1)
    return component * inv_rms * weight.to(component.device());  // (..., D)
}

ScaleNorm::ScaleNorm(size_t width, double eps_) : eps(eps_) {
    weight = register_parameter("weight", Tensor::full({1}, std::sqrt(static_cast<double>(width))));
    declare_hook_points({{"out", "batch pos d_model"}});
}

Tensor ScaleNorm::frozen(const Tensor& component, const Tensor& stream) const {
    const Tensor inv_norm = pow(sum(stream * stream, {-1}, true) + eps, -0.5);  // (..., 1)
    return component * inv_norm * weight.to(component.device());  // (..., D) * (1)
}

std::unique_ptr<NormLayer> make_norm(NormType type, size_t width, bool bias, double eps) {
    if (type == NormType::rms) return std::make_unique<RMSNorm>(width, eps);
    if (type == NormType::scale) return std::make_unique<ScaleNorm>(width, eps);
    return std::make_unique<LayerNorm>(width, eps, bias);
}

Tensor Dropout::forward(const Tensor& x) const {
    if (!is_training() || p == 0.0) return x;
    if (!rng) fail("dropout", "dropout " + std::to_string(p) + " in training needs an Rng");
    return dropout(x, p, true, *rng);
}

FeedForward::FeedForward(size_t width, size_t hidden, Activation activation_, double dropout_p, Rng& init, Rng* dropout_rng, bool bias)
    : fc1(width, hidden, bias, init), fc2(hidden, width, bias, init), activation(activation_), drop(dropout_p, dropout_rng) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("drop", drop);
    declare_hook_points({{"hidden", "batch pos d_ffn"}, {"out", "batch pos d_model"}});
}

Tensor FeedForward::forward(const Tensor& x) const {
    const Tensor pre = fc1.forward(x);  // (..., F)
    const Tensor h = hook("hidden", activate(activation, pre));
    return hook("out", drop.forward(fc2.forward(h)));  // (..., D)
}

}  // namespace attnlab
