// The AWQ and GPTQ checkpoint formats of one 4-bit projection, converted to and from Int4Matrix
// (int4_matrix.h). Both store, for a linear layer with `in` inputs and `out` outputs and groups of
// `group` inputs, int32 tensors that pack 8 four-bit values each, plus f16 scales:
//
// AWQ ("gemm" version, AutoAWQ's WQLinear_GEMM):
//   qweight int32 [in, out / 8]: nibble n (bits 4n..4n+3) of qweight[i, b] is the value of input i
//     for output 8b + kAwqOrder[n], with kAwqOrder = {0, 2, 4, 6, 1, 3, 5, 7};
//   qzeros  int32 [in / group, out / 8]: zero points, packed the same way;
//   scales  f16   [in / group, out];
//   weight[o, i] = (q - zero) * scale.
// GPTQ (AutoGPTQ's original "gptq" format, desc_act false):
//   qweight int32 [in / 8, out]: nibble n of qweight[p, o] is the value of input 8p + n;
//   qzeros  int32 [groups, out / 8]: nibble n of qzeros[g, b] is (zero - 1) of output 8b + n (the
//     format stores zero - 1 and readers add 1, so a zero of 0 wraps and reads back as 16);
//   scales  f16   [groups, out];
//   g_idx   int32 [in]: the group of each input, which without act-order is i / group;
//   weight[o, i] = (q - zero) * scale.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_MODEL_QUANTIZED_CHECKPOINT_H_
#define LLMSERVE_WORKER_MODEL_QUANTIZED_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/model/dtype.h"
#include "worker/model/int4_matrix.h"

namespace llmserve::worker {

inline constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// One projection's tensors as a checkpoint holds them: little-endian bytes (int32 values for
// qweight, qzeros and g_idx; scales in `scales_dtype`), as they lie in a safetensors file. Need
// not be aligned.
struct QuantizedProjectionBytes {
  const unsigned char* qweight = nullptr;
  const unsigned char* qzeros = nullptr;
  const unsigned char* scales = nullptr;
  DType scales_dtype = DType::kF16;
  const unsigned char* g_idx = nullptr;  // GPTQ only
};

// The projection [out, in] of an AWQ checkpoint, whose tensors have the shapes above (the caller
// checks them). INVALID_ARGUMENT naming `name` for a scale that is not finite.
absl::StatusOr<Int4Matrix> UnpackAwq(const QuantizedProjectionBytes& bytes, int64_t in, int64_t out,
                                     int64_t group, absl::string_view name);

// The same for GPTQ; also INVALID_ARGUMENT when g_idx is not i / group (an act-order checkpoint
// whose config says otherwise).
absl::StatusOr<Int4Matrix> UnpackGptq(const QuantizedProjectionBytes& bytes, int64_t in,
                                      int64_t out, int64_t group, absl::string_view name);

// A projection in a checkpoint format, as bytes for a safetensors writer.
struct PackedProjection {
  std::string qweight, qzeros, scales, g_idx;  // g_idx: GPTQ only
  std::vector<int64_t> qweight_shape, qzeros_shape, scales_shape, g_idx_shape;
};

// `w` in AWQ's or GPTQ's packing, scales as f16. `w`'s scales must be f16 values (QuantizeInt4
// makes them so); AWQ needs zero points <= 15 (GPTQ stores 1..16).
PackedProjection PackAwq(const Int4Matrix& w);
PackedProjection PackGptq(const Int4Matrix& w);

// Quantizes a weight [rows, cols] of finite f32 values to 4 bits in groups of `group` columns, as
// AWQ and GPTQ quantizers do before their packing, over each group's range extended to include 0:
// asymmetric (scale = max(max - min, 1e-5) / 15, zero = clamp(round(-min / scale), 1, 15): at
// least 1, which GPTQ's zero - 1 storage needs) or symmetric (scale = 2 max|w| / 15, or 2 / 15 for
// a group of zeros; zero 8). Each scale is rounded to f16 before the values are computed with it;
// q = clamp(round(w / scale) + zero, 0, 15), rounding half to even. So every weight lies within
// one step (scale) of its dequantization: half a step of rounding, and up to another half where
// the group's top value clamps at 15.
Int4Matrix QuantizeInt4(const float* w, int64_t rows, int64_t cols, int64_t group, bool symmetric);

// The rows of `parts` (same cols, group size and offset form) one after another: q/k/v and gate/up
// are fused this way, as the unquantized ones are.
Int4Matrix ConcatRows(const std::vector<Int4Matrix>& parts);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_QUANTIZED_CHECKPOINT_H_
