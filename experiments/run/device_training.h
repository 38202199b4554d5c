// The whole training step of a DecoderLM or an EncoderDecoder on the GPU
// (train.device = "cuda"):
// parameters, their gradients and the optimiser's state (Adam's moments, SGD's
// velocity) stay on the device, in one flat buffer each; a step moves the batch in (tokens, targets, loss weights,
// lengths) and two numbers out (the loss and the gradient norm). The forward
// and backward are the model's layers written once more over the device ops of
// autograd/device/kernels.h and the attention kernels of autograd/device/attention.h: the blocks in
// device_block.cpp; embeddings, final norms, the head, the loss and the update
// in device_training.cpp; the buffers and the model described on them in
// device_model.cpp.
//
// The host model and optimiser are the reference and the checkpoint format:
// download() copies the parameters and the optimiser state back (before an
// evaluation, a metrics forward or a checkpoint), and a new DeviceTraining
// starts from whatever they hold (a resume).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "layers/module.h"

namespace attnlab {

class DecoderLM;
class EncoderDecoder;
class Optimizer;
struct Batch;
namespace cuda {
class Context;
}

// Why this model and optimiser cannot run the device step, or "" when they
// can: float32 parameters, no dropout on the attention weights,
// Adam, AdamW or SGD. (Embedding and residual dropout run on the device with
// masks of their own: autograd/device/kernels.h.)
// (Everything else runs the attention core on the device and the rest on the CPU.)
std::string device_step_unsupported(const DecoderLM& model, const Optimizer& optimizer);
std::string device_step_unsupported(const EncoderDecoder& model, const Optimizer& optimizer);

// What the device's metrics forward shows, per attention kind and layer (the
// host model shows the same through its hook points, layers/hooks.h).
struct AttentionTrace {
    std::vector<Tensor> weights;                 // (B, H, Tq, Tk)
    std::vector<std::vector<double>> score_std;  // per head: std of scale * q.k over eligible pairs
    std::vector<Tensor> context;                 // (B, H, Tq, d_h): per-head outputs before out_proj
};
struct AttentionMaps {
    AttentionTrace self;      // DecoderLM ("self"), or decoder self-attention ("dec_self")
    AttentionTrace enc_self;  // encoder self-attention
    AttentionTrace cross;     // decoder -> encoder
};

class DeviceTraining {
public:
    // Copies the model's parameters and the optimiser's moments and step count to
    // the device. Throws attnlab::Error naming the reason device_step_unsupported gives.
    DeviceTraining(cuda::Context& context, DecoderLM& model, Optimizer& optimizer);
    DeviceTraining(cuda::Context& context, EncoderDecoder& model, Optimizer& optimizer);
    ~DeviceTraining();
    DeviceTraining(const DeviceTraining&) = delete;
    DeviceTraining& operator=(const DeviceTraining&) = delete;

    struct StepResult {
        double loss = 0;       // mean cross-entropy over the loss mask
        double grad_norm = 0;  // global gradient norm before clipping
    };
    // The batch's inputs (and for an encoder-decoder its source), targets, loss
    // mask and lengths as the CPU model takes them. Forward, backward, clipping to max_norm (infinity: none) and one Adam/AdamW
    // step at learning rate lr. With a loss or norm that is not finite nothing is
    // updated (the trainer stops there, as on the CPU).
    StepResult step(const Batch& batch, double lr, double max_norm);

    // The model's logits (B, T, V) for the batch, from the device's parameters
    // (forward only; for evaluation without bringing the host model up to date).
    Tensor logits(const Batch& batch) const;

    // The forward the metrics read at log steps, from the device's parameters:
    // logits (B, T, V), and per attention kind and layer the weights (B, H, Tq,
    // Tk), each head's standard deviation of the scaled scores over eligible
    // pairs and the per-head outputs (B, H, Tq, d_h), appended to `maps` as the
    // CPU model's forward appends them (its hidden states are left out). Every
    // layer runs the dense kernel here, which materialises the weights. Train
    // mode: with dropout, the masks the next step() will use.
    Tensor trace(const Batch& batch, AttentionMaps& maps) const;

    // Parameters into the model; moments and step counts into the optimiser.
    void download() const;
    // The last step's gradients (before clipping), named as the model's parameters.
    NamedTensors gradients() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace attnlab
