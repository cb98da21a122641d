// Elementwise and row-wise kernels of the CPU backend, on f32 activations. Each processes a
// contiguous range of rows so that callers can split work across threads.
//
// Thread-safe: pure functions on caller-owned memory.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_KERNELS_H_
#define LLMSERVE_WORKER_ENGINE_CPU_KERNELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "worker/model/model_config.h"

namespace llmserve::worker::cpu {

// out[r] = norm(x[r]) * weight (+ bias) for each of `rows` rows of width `n`. `bias` may be null
// (RMSNorm has none).
void Norm(NormKind kind, const float* x, const float* weight, const float* bias, float eps,
          int64_t rows, int64_t n, float* out);

// x[r] += bias for each row.
void AddBias(float* x, const float* bias, int64_t rows, int64_t n);

// x[i] += y[i].
void Add(float* x, const float* y, int64_t count);

// In place: x = act(x). SiLU and the tanh GELU are vectorized with AVX-512 or AVX2, the best the
// CPU has (within a few ulp of the scalar std::exp/std::tanh forms); the erf GELU is scalar.
void Activate(Activation activation, float* x, int64_t count);

// Gated MLP: for each row, out[j] = act(gate_up[j]) * gate_up[n + j], with gate_up rows of width
// 2n (gate then up) and out rows of width n.
void GatedActivate(Activation activation, const float* gate_up, int64_t rows, int64_t n,
                   float* out);

// The activation variants this CPU runs, best first: "avx512", "avx2", "baseline".
std::vector<std::string> ActivationIsas();

// Activate and GatedActivate with one of ActivationIsas(), so that tests check every variant the
// CPU runs. False (nothing computed) where that variant does not take `activation`.
bool ActivateWithIsa(absl::string_view isa, Activation activation, float* x, int64_t count);
bool GatedActivateWithIsa(absl::string_view isa, Activation activation, const float* gate_up,
                          int64_t rows, int64_t n, float* out);

// Rotates `num_heads` heads of `head_dim` values at `x` (contiguous) for `position`, the way
// Hugging Face's Llama does (rotate_half: pairs (i, i + head_dim / 2)).
void ApplyRope(const std::vector<double>& inv_freq, int64_t position, int64_t num_heads,
               int64_t head_dim, float* x);

// Numerically stable in-place softmax of `n` values.
void Softmax(float* x, int64_t n);

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_KERNELS_H_
