// The device seam, part one: the kernels of a training step, float32, each
// forward beside its backward, on pointers into DeviceBuffers of one Context:
// every call only queues work on the context's stream. The ops' device branches
// (autograd/device/ops_*.cpp) and the optimisers (optim/device_update.cpp) call
// them; with the attention kernels of autograd/device/attention.h they are all a
// training step needs on the device.
//
// The CPU reference of each is the autograd op of the same name (embedding,
// layer_norm, rms_norm, gelu, relu, add, linear, cross_entropy, Adam::step); the
// device tests compare each, and whole steps, with it.
//
// Row-major throughout; M = B T rows of width D. A backward that writes into a
// parameter gradient always adds (the step zeroes all gradients first); one
// that writes an input gradient adds when `accumulate`, else overwrites.
// Column sums are deterministic (no atomics); only the embedding's scatter-add
// uses atomics.
//
// Plain C++; train_nn.cu, train_norm.cu, train_linear.cu and train_optim.cu with
// -DATTNLAB_CUDA=ON, train_ops_stub.cpp (which refuses) otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "autograd/device/attention.h"
#include "autograd/device/context.h"

namespace attnlab::device {

// ---- embedding + positions (train_nn.cu) --------------------------------------

// x (B T, D) = E[tokens] + P[t] for the row's position t (P (T_max, D), or null: no positions)
void embedding_forward(Context& context, size_t B, size_t T, size_t D, const int32_t* tokens, const float* E,
                       const float* P, float* x);
// dE (V, D) += dx rows scattered by token; dP (T_max, D) rows [0, T) += sum over b of dx (when dP is not null)
void embedding_backward(Context& context, size_t B, size_t T, size_t D, const int32_t* tokens, const float* dx,
                        float* dE, float* dP);

// ---- layer norm over the last axis (train_norm.cu) ---------------------------
// Both norms take stacked members (train.seeds): with `members` K the rows are K
// equal blocks and gamma, beta, w are (K, D), block m normalised with row m.

// y = (x - mean) rstd gamma + beta per row of x (rows, D); mean, rstd (rows) kept for the backward.
void layer_norm_forward(Context& context, size_t rows, size_t D, const float* x, const float* gamma, const float* beta,
                        float eps, float* y, float* mean, float* rstd, size_t members = 1);
// dx (+)= rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy gamma;
// dgamma += sum over rows of dy xhat; dbeta += sum over rows of dy. scratch (rows, D).
void layer_norm_backward(Context& context, size_t rows, size_t D, const float* x, const float* gamma,
                         const float* mean, const float* rstd, const float* dy, float* dx, bool accumulate,
                         float* dgamma, float* dbeta, float* scratch, size_t members = 1);

// ---- RMS norm over the last axis (train_norm.cu) -----------------------------

// y = x rstd w per row, rstd = 1 / sqrt(mean(x^2) + eps) (rows) kept for the backward.
void rms_norm_forward(Context& context, size_t rows, size_t D, const float* x, const float* w, float eps, float* y,
                      float* rstd, size_t members = 1);
// dx (+)= rstd (dxhat - xhat mean(dxhat xhat)), xhat = x rstd, dxhat = dy w;
// dw += sum over rows of dy xhat. scratch (rows, D).
void rms_norm_backward(Context& context, size_t rows, size_t D, const float* x, const float* w, const float* rstd,
                       const float* dy, float* dx, bool accumulate, float* dw, float* scratch, size_t members = 1);

// ---- activations (train_nn.cu) ----------------------------------------------

enum class DeviceActivation { gelu, relu };  // gelu: exact, x Phi(x), as the CPU op
void activation_forward(Context& context, DeviceActivation activation, size_t n, const float* x, float* y);
// dx = dy f'(x)
void activation_backward(Context& context, DeviceActivation activation, size_t n, const float* x, const float* dy,
                         float* dx);

// ---- rotary positions (train_nn.cu) ------------------------------------------

// y (B, T, H d) = x with each head's pairs (c, c + d/2) rotated by sign (offset + t)
// base^(-2c/d), the angle computed in double (as the CPU op): the forward with
// sign 1, the backward with -1. y may alias x.
void rotary(Context& context, size_t B, size_t T, size_t H, size_t d, size_t offset, double base, double sign,
            const float* x, float* y);

// ---- dropout (train_nn.cu) ----------------------------------------------------

// Element e of a call with `seed` is dropped when u(seed, e) < p, u uniform in
// [0, 1) from a counter-based hash (24 bits), and kept values are scaled by
// 1/(1 - p). Nothing is stored: the backward recomputes the same mask from
// (seed, e). The masks are not the CPU op's (its Rng draws element by element),
// as torch's CUDA masks are not its CPU ones. y and x (dx and dy) may alias.
void dropout_forward(Context& context, size_t n, const float* x, float p, uint64_t seed, float* y);
void dropout_backward(Context& context, size_t n, const float* dy, float p, uint64_t seed, float* dx);

// The seed of one dropout site (a stack, a block, a sublayer) within a step's seed.
inline uint64_t mix_seed(uint64_t seed, uint64_t site) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (site + 1);  // splitmix64's finaliser
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// ---- elementwise and layout (train_nn.cu) ------------------------------------

void add_into(Context& context, size_t n, const float* a, float* out);             // out += a
// to[r * to_ld + c] (+)= from[r * from_ld + c] for r < rows, c < width: a block of
// rows between strided layouts (concat and its backward).
void copy_rows(Context& context, size_t rows, size_t width, const float* from, size_t from_ld, float* to, size_t to_ld,
               bool accumulate);
// out[e] = a[e] + b[e % period] (b repeats along a: a residual when period = n, a
// table of rows broadcast over the batch otherwise); out may alias a.
void add_broadcast(Context& context, size_t n, size_t period, const float* a, const float* b, float* out);
// out[e] (+)= x[e] factor (*device_factor when not null): a gradient times the
// incoming scalar gradient, a clipping scale. out may alias x.
void scale(Context& context, size_t n, const float* x, float factor, const float* device_factor, float* out,
           bool accumulate);
// out[g, c] (+)= sum over r of x[g, r, c], x (groups, rows, cols), out (groups, cols)
void column_sums(Context& context, size_t rows, size_t cols, const float* x, float* out, bool accumulate,
                 size_t groups = 1);

// heads (B, H, T, d) -> merged (B, T, H d), Concat(heads) before the output projection.
void merge_heads(Context& context, size_t B, size_t H, size_t T, size_t d, const float* heads, float* merged);
// Its backward: dmerged (B, T, H d) -> dheads (B, H, T, d).
void split_heads(Context& context, size_t B, size_t H, size_t T, size_t d, const float* dmerged, float* dheads);

// ---- loss (train_nn.cu) -------------------------------------------------------

// logits (M, V), targets (M), weight (M): 1/count for a counted position, 0 for
// one the loss mask leaves out. Forward and backward in one pass:
//   loss_rows (M) = weight (logsumexp(z) - z_target),  dlogits (M, V) = weight (softmax(z) - onehot(target)).
void cross_entropy_forward_backward(Context& context, size_t M, size_t V, const float* logits, const int32_t* targets,
                                    const float* weight, float* loss_rows, float* dlogits);

// ---- attention statistics (train_nn.cu) ------------------------------------------

// For the metrics at log steps: per query head h, the count, sum and sum of
// squares of the scaled scores scale q_i . k_j over the eligible pairs of every
// batch item, added into moments (H, 3) (doubles; zero them first).
// q (B, H, Tq, d), k (B, H_kv, Tk, d) as the attention kernels take them.
void score_moments(Context& context, const AttentionDims& dims, const float* q, const float* k, const MaskView& mask,
                   float scale, double* moments);

// ---- reductions (train_optim.cu) ------------------------------------------------

constexpr size_t reduce_partials = 256;  // doubles of scratch a sum needs
// A piece of flat device memory: n floats at x, and where its sum goes.
struct SumPiece {
    size_t n;
    const float* x;
    double* out;
};
// For every piece, *out = sum over i of x_i (or of x_i^2), in double, in a fixed
// order (the same bits however many pieces share the launch): two launches for all
// of them. partials: reduce_partials doubles of scratch per piece.
void sums_to_double(Context& context, const std::vector<SumPiece>& pieces, bool squares, double* partials);
inline void sum_to_double(Context& context, size_t n, const float* x, bool squares, double* out, double* partials) {
    sums_to_double(context, {{n, x, out}}, squares, partials);
}

// ---- linear layers on cuBLAS (train_linear.cu) ----------------------------------

// y (M, N) = x (M, K) W^T + b, W (N, K) as Linear stores it, b (N) or null.
// With groups G, G projections of the one x: W (G, N, K), b (G, N), y (G, M, N),
// y_g = x W_g^T + b_g (one batched GEMM).
void linear_forward(Context& context, size_t M, size_t N, size_t K, const float* x, const float* W, const float* b,
                    float* y, size_t groups = 1);
// dx (M, K) (+)= dy W (skipped when dx is null); dW (N, K) += dy^T x; db (N) += column sums of dy (when not null).
// With groups: dx (+)= sum_g dy_g W_g, dW_g += dy_g^T x, db_g += column sums of dy_g (dy (G, M, N)).
void linear_backward(Context& context, size_t M, size_t N, size_t K, const float* x, const float* W, const float* dy,
                     float* dx, bool accumulate, float* dW, float* db, size_t groups = 1);
// Stacked members (train.seeds): K models' layers, each over its own block of rows:
// x (K, M, K_in), W (K, N, K_in), b (K, N) or null, y (K, M, N), y_m = x_m W_m^T + b_m,
// one batched GEMM for every member (each member's product at its solo sizes).
void linear_members_forward(Context& context, size_t members, size_t M, size_t N, size_t K, const float* x,
                            const float* W, const float* b, float* y);
// dx_m (+)= dy_m W_m (skipped when dx is null); dW_m += dy_m^T x_m; db_m += column sums of dy_m (when not null).
void linear_members_backward(Context& context, size_t members, size_t M, size_t N, size_t K, const float* x,
                             const float* W, const float* dy, float* dx, bool accumulate, float* dW, float* db);

// ---- the optimiser (train_optim.cu) ----------------------------------------------

// One Adam/AdamW step's scalars, computed on the host as Adam::step computes them.
struct AdamScalars {
    float beta1, beta2, one_minus_beta1, one_minus_beta2;
    float step_size;    // lr / (1 - beta1^t)
    float sqrt_c2;      // sqrt(1 - beta2^t)
    float eps;
    float weight_decay;  // for the first n_decay elements; 0 for the rest
    float shrink;        // 1 - lr weight_decay (AdamW) for the first n_decay elements
    bool decoupled;      // AdamW: p *= shrink; Adam: g += weight_decay p
    double max_norm;     // clip by the global norm (infinity: no clipping)
};

// One run of an Adam step: flat parameters P, gradients G and moments M, V (n),
// the first n_decay of which decay, all with the same scalars.
struct AdamRun {
    size_t n, n_decay;
    float* P;
    const float* G;
    float *M, *V;
    AdamScalars scalars;
};
// Every run's update in one launch (several models' optimisers: stacked members).
// stats (device) holds the step's [loss, sum of squared gradients]: when either is
// not finite nothing changes (the trainer stops there, as on the CPU); gradients
// are scaled by max_norm / (norm + 1e-6) when that is below 1 (torch's
// clip_grad_norm_), then the update runs element by element as Adam::step.
void adam_update(Context& context, const std::vector<AdamRun>& runs, const double* stats);

struct SgdScalars {
    float lr, momentum, weight_decay;
    bool nesterov;
    bool started;     // the velocity holds a previous step (torch: the first step sets v = d)
    double max_norm;  // as AdamScalars
};

// SGD::step over flat P, G and velocity (n), with the same stats, skip and clipping as adam_update:
//   d = g + wd p;  v = started ? momentum v + d : d;  p -= lr (nesterov ? d + momentum v : v)   (momentum 0: p -= lr d)
void sgd_update(Context& context, size_t n, float* P, const float* G, float* velocity, const SgdScalars& scalars,
                const double* stats);

// ---- stacked members' parameters (train_nn.cu) ------------------------------------

// The K members' own parameters and a stacked model's rows of them (train.seeds),
// one launch each way for every parameter. Every member's parameters lie in a
// block of its own at the same offsets; piece p (of `pieces`) is table[3p + 2]
// floats at member offset table[3p + 1], and member m's row of it sits at
// stacked offset table[3p] + m table[3p + 2]. table and members (K block
// pointers) are on the device.
//   members_to_stacked:  stacked rows = the members' values;
//   stacked_to_members:  the members' values (+)= the stacked rows (gradients back).
void members_to_stacked(Context& context, size_t members, size_t pieces, const size_t* table,
                        const float* const* member_blocks, float* stacked);
void stacked_to_members(Context& context, size_t members, size_t pieces, const size_t* table, const float* stacked,
                        float* const* member_blocks, bool accumulate);

// bytes of device memory set to zero, queued on the stream
void fill_zero(Context& context, void* data, size_t bytes);

// ---- many pieces in one launch (train_optim.cu): gradients clipped and zeroed ----

struct ScalePiece {
    size_t n;
    float* x;
    float factor;
};
// x_i *= factor for every piece (as scale in place), one launch for all.
void scale_pieces(Context& context, const std::vector<ScalePiece>& pieces);
// x_i = 0 for every piece (factor unread), one launch for all.
void zero_pieces(Context& context, const std::vector<ScalePiece>& pieces);

}  // namespace attnlab::device
