#include "experiments/run/attention_metrics.h"

#include <algorithm>
#include <cmath>

namespace attnlab {

HeadStats attention_stats(const std::vector<Tensor>& weights, const AttentionMask& mask,
                          const std::vector<size_t>& query_lengths) {
    HeadStats s;
    s.layers = weights.size();
    if (weights.empty()) return s;
    const Shape& shape = weights[0].shape();
    if (shape.size() != 4) fail("attention_stats", "weights must be (B, H, Tq, Tk), got " + shape_str(shape));
    const size_t B = shape[0], H = shape[1], Tq = shape[2], Tk = shape[3];
    s.heads = H;
    const size_t cells = s.layers * H;
    s.entropy.assign(cells, 0.0);
    s.entropy_norm.assign(cells, 0.0);
    s.masked_mass.assign(cells, 0.0);
    s.masked_mass_max.assign(cells, 0.0);
    for (size_t l = 0; l < s.layers; ++l) {
        if (weights[l].shape() != shape)
            fail("attention_stats", "layer " + std::to_string(l) + " weights " + shape_str(weights[l].shape()) +
                                        " differ from layer 0's " + shape_str(shape));
        const std::vector<double> a = weights[l].values();
        for (size_t h = 0; h < H; ++h) {
            double entropy = 0, entropy_norm = 0, masked = 0, masked_max = 0;
            size_t rows = 0;
            for (size_t b = 0; b < B; ++b) {
                const size_t valid = query_lengths.empty() ? Tq : std::min(query_lengths[b], Tq);
                for (size_t i = 0; i < valid; ++i) {
                    const double* row = a.data() + ((b * H + h) * Tq + i) * Tk;
                    size_t eligible = 0;
                    double row_entropy = 0, row_masked = 0;
                    for (size_t j = 0; j < Tk; ++j) {
                        if (mask.allows(b, i, j, Tq, Tk)) {
                            ++eligible;
                            if (row[j] > 0) row_entropy -= row[j] * std::log(row[j]);
                        } else {
                            row_masked += row[j];
                        }
                    }
                    if (eligible == 0) continue;  // an all-masked row (policy "zero") is not a valid row
                    ++rows;
                    entropy += row_entropy;
                    if (eligible > 1) entropy_norm += row_entropy / std::log(static_cast<double>(eligible));
                    masked += row_masked;
                    masked_max = std::max(masked_max, row_masked);
                }
            }
            const size_t cell = l * H + h;
            if (rows > 0) {
                s.entropy[cell] = entropy / static_cast<double>(rows);
                s.entropy_norm[cell] = entropy_norm / static_cast<double>(rows);
                s.masked_mass[cell] = masked / static_cast<double>(rows);
            }
            s.masked_mass_max[cell] = masked_max;
        }
    }
    return s;
}

std::vector<double> score_std(const std::vector<Tensor>& scores, const AttentionMask& mask) {
    std::vector<double> out;
    for (const Tensor& layer : scores) {
        if (layer.dim() != 4) fail("score_std", "scores must be (B, H, Tq, Tk), got " + shape_str(layer.shape()));
        const size_t B = layer.size(0), H = layer.size(1), Tq = layer.size(2), Tk = layer.size(3);
        const std::vector<double> s = layer.values();
        for (size_t h = 0; h < H; ++h) {
            double count = 0, sum = 0, squares = 0;
            for (size_t b = 0; b < B; ++b)
                for (size_t i = 0; i < Tq; ++i)
                    for (size_t j = 0; j < Tk; ++j) {
                        if (!mask.allows(b, i, j, Tq, Tk)) continue;
                        const double x = s[((b * H + h) * Tq + i) * Tk + j];
                        count += 1;
                        sum += x;
                        squares += x * x;
                    }
            out.push_back(std_from_moments(count, sum, squares));
        }
    }
    return out;
}

}  // namespace attnlab
