// Rotary position embedding parameters of a model, shared by every backend so that they rotate
// by the same angles: the CPU backend applies them in f64 → f32, the CUDA backend uploads them.
//
// Thread-safe: a pure function.

#ifndef LLMSERVE_WORKER_MODEL_ROPE_H_
#define LLMSERVE_WORKER_MODEL_ROPE_H_

#include <vector>

#include "worker/model/model_config.h"

namespace llmserve::worker {

// The rotary inverse frequencies of `config` (head_dim / 2 values), rope scaling (linear, Llama
// 3.1) applied.
std::vector<double> RopeInverseFrequencies(const ModelConfig& config);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_ROPE_H_
