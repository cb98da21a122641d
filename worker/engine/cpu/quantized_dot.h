// Integer dot products for int8 and int4 projection weights at small batches (decode), on
// activations quantized per token (--quantized_activations, off by default: it changes what is
// computed, docs/engine.md "Quantized activations" has the tolerance argument).
//
// Each row of x [m, k] is quantized symmetrically per block of ActivationBlock(w) columns:
// s = max|x| / 127 over the block, q = round(x / s) (half to even) in [-127, 127], so that
// |x - q * s| <= s / 2 for every element. The kernels then sum q(weight) * q(x) in int32 per block
// and apply the block's activation scale, and per row (int8) or per group (int4) the weight scale:
//   int8:  out[i, r] = scale[r] * Σ_b s_b * Σ_{c in b} w[r, c] * q[i, c]
//   int4:  out[i, r] = Σ_g (scale[r, g] * Σ_{b in g} s_b * Σ_{c in b} w4[r, c] * q[i, c]
//                           - scale[r, g] * zero[r, g] * Σ_{b in g} s_b * Σ_{c in b} q[i, c])
// The offset term uses the sums of the same quantized activations, so it is exact: the result is
// the dequantized weights times the dequantized activations, up to f32 rounding of the per-block
// terms.
//
// The weights stay in PackedMatrix's layout (the prefill path widens the same panels); the vector
// kernels transpose 4 or 8 input columns in registers so that each 32-bit lane holds 4 inputs of
// one output row, the shape the dot instructions take:
//   "avx512vbmi": int4 on 512-bit vectors, gathering each lane's 4 inputs with one byte permute
//   (vpermt2b, AVX512-VBMI) instead of the unpacks; int8 as avx512vnni,
//   "avx512vnni": vpdpbusd (AVX512-VNNI, 256-bit vectors), "avxvnni": vpdpbusd (AVX-VNNI),
//   "avx2": vpmaddubsw + vpmaddwd, "scalar": plain loops (any CPU).
// int8 weights are signed: the kernels take |w| as the unsigned operand and give x w's sign
// (vpsignb), as llama.cpp does; with weights in [-127, 127] a vpmaddubsw pair is at most
// 2 * 127 * 127 < 2^15, so nothing saturates. int4 values are unsigned already (0..15): pairs are
// at most 2 * 15 * 127, and the avx2 kernel sums up to 4 of them in 16 bits (< 2^15) before
// widening.
//
// Thread-safe: pure functions on caller-owned memory.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_QUANTIZED_DOT_H_
#define LLMSERVE_WORKER_ENGINE_CPU_QUANTIZED_DOT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "worker/engine/cpu/aligned_vector.h"
#include "worker/engine/cpu/packed_matrix.h"

namespace llmserve::worker::cpu {

// Batches of at most this many rows take the integer path; larger ones (prefill) keep the f32
// kernels on dequantized panels, which are compute-bound and gain nothing from smaller weights.
inline constexpr int64_t kQuantizedDotMaxRows = 16;

// Columns per activation scale for w: 32 for int8; for int4, the largest of 32, 16 and 8 that
// divides the group size, so that every block lies in one group. 0 when w has no integer kernel
// (f32/f16 weights, int4 groups not a multiple of 8 columns).
int64_t ActivationBlock(const PackedMatrix& w);

// The instruction sets of the integer kernels this CPU runs, best first, ending with "scalar"
// (which every CPU runs). Callers use the first; tests check each.
std::vector<std::string> QuantizedDotIsas();

// x [m, k] quantized for one weight.
struct QuantizedActivations {
  int64_t m = 0;
  int64_t k = 0;
  int64_t block = 0;       // columns per scale
  int64_t group_size = 0;  // int4: the weight's group; 0 for int8
  int64_t stride = 0;      // bytes per row of `values`: k rounded up to a multiple of 32
  // int4: inside each 8 columns c..c+7 the values are stored in the order c, c+2, c+4, c+6, c+1,
  // c+3, c+5, c+7 (the order the int4 kernels' column transpose leaves the weights in); zero past
  // k.
  bool int4_order = false;
  AlignedVector<int8_t> values;  // [m, stride]
  std::vector<float> scales;     // [m, blocks]: s per block
  // int4 only: [m, k / group_size], Σ_{b in g} s_b * Σ_{c in b} q[c], what the zero points meet.
  std::vector<float> group_sums;

  int64_t blocks() const { return (k + block - 1) / block; }
};

// Quantizes x [m, k] (row-major) for w (ActivationBlock(w) > 0: CHECKed) into `out`, reusing its
// memory. Non-finite inputs give unspecified values (the f32 path would propagate them).
void QuantizeActivations(const float* x, int64_t m, const PackedMatrix& w,
                         QuantizedActivations* out);

// Panels [panel_begin, panel_end) of w times x (from QuantizeActivations for w, m <=
// kQuantizedDotMaxRows): out[i * ldc + r] for the weight rows those panels hold (padding rows are
// not written). `isa` is one of QuantizedDotIsas().
void QuantizedDotGemm(absl::string_view isa, const QuantizedActivations& x, const PackedMatrix& w,
                      int64_t panel_begin, int64_t panel_end, float* out, int64_t ldc);

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_QUANTIZED_DOT_H_
