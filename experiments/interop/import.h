// attnlab import: a model other tools saved, as an attnlab checkpoint that every
// analysis command takes.
//
// DIR holds model.safetensors and the config that says how to read it:
//   config.json, "model_type": "gpt2"      Hugging Face's GPT2LMHeadModel (GPT-2,
//                                           the TinyStories models, nanoGPT's exports)
//   config.json, "model_type": "gpt_neox"  Hugging Face's GPTNeoXForCausalLM (Pythia)
//   config.json with "n_layers", "d_model"  TransformerLens's HookedTransformerConfig
//                                           and its state-dict names
//   attnlab_config.toml                     attnlab's own export (--format safetensors)
// Each format is one function from its names, layouts and config fields to
// attnlab's (the inverse of export.cpp's), with the architecture options the
// model needs: tanh GELU, per-model norm epsilon, parallel attention and
// feed-forward, partial rotary, tied embeddings, a head bias. The checkpoint's
// config has task.name = "none" (analysis of given tokens) and model.max_len =
// the positions the model was built for; its step is 0 (or the export's).
//
// A config field the model needs that is missing or of the wrong type, an
// option attnlab cannot compute as the tool does, a tensor missing, extra or of
// the wrong shape for the config, and every bad safetensors file: one line
// naming the file and the field or tensor (attnlab::Error), before anything is written.
#pragma once

#include <string>

#include "experiments/files/checkpoint.h"

namespace attnlab {

struct ImportedModel {
    std::string format;          // "gpt2", "gpt_neox", "transformerlens", "attnlab"
    CheckpointData checkpoint;   // step, config_toml and params (attnlab's names); no optimizer state
    size_t tensors_read = 0;     // of model.safetensors (the buffers it may carry included)
};

// Reads DIR, checks every tensor against the config and builds the model once
// with them (so that the checkpoint loads).
ImportedModel import_model(const std::string& dir);

}  // namespace attnlab
