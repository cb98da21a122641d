// Weight quantization applied at load: what --quantization names, and the int8 format.
//
// int8 (--quantization=int8) is symmetric, per output channel, weights only: each row r of a
// projection weight [out, in] is stored as int8 values q[r, :] in [-127, 127] and one f32 scale
// s[r] = max_c |w[r, c]| / 127, and stands for the dequantized weight q[r, c] * s[r]. -128 is
// never used, so the range is symmetric and negation is exact. Activations stay f32: the kernels
// multiply f32 activations by the int8 values and apply s[r] to each output once.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_MODEL_QUANTIZATION_H_
#define LLMSERVE_WORKER_MODEL_QUANTIZATION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/model/model_config.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker {

// kInt8 quantizes an unquantized checkpoint at load; kAwq and kGptq are checkpoints stored in
// 4 bits (model_config.h's CheckpointQuantization).
enum class Quantization { kNone, kInt8, kAwq, kGptq };

// "none", "int8", "awq", "gptq" (the values of the --quantization flags).
absl::string_view QuantizationName(Quantization quantization);

// Parses a flag value: "none" (or empty), "int8", "awq" and "gptq". Anything else is
// INVALID_ARGUMENT listing the accepted values (callers prefix the flag's name).
absl::StatusOr<Quantization> ParseQuantization(absl::string_view name);

// What runs, given the --quantization flag and the checkpoint's own quantization_config: an AWQ or
// GPTQ checkpoint runs as such whether the flag is none or names its method (as vLLM's does);
// int8 quantizes an unquantized checkpoint. A GGUF file with 4-bit projections (method kGguf)
// runs those in 4 bits either way, and resolves to none or int8, which applies to its other
// projections. INVALID_ARGUMENT, naming the flag, for int8 on an AWQ/GPTQ checkpoint and for
// awq/gptq on a checkpoint that is not in that format.
absl::StatusOr<Quantization> ResolveQuantization(Quantization requested,
                                                 const CheckpointQuantization& checkpoint);

// What GetModelInfo and the model_config_info metric report: QuantizationName(resolved), or for a
// GGUF file with 4-bit projections "gguf" ("gguf+int8" with its other projections in int8).
std::string RunningQuantizationName(Quantization resolved,
                                    const CheckpointQuantization& checkpoint);

// The largest int8 magnitude used: the range is [-kInt8Max, kInt8Max].
inline constexpr int kInt8Max = 127;

// Quantizes one row of k f32 weights: *scale = max |row| / 127 and q[c] = round(row[c] / *scale)
// (round half to even), so |q[c]| <= 127. An all-zero row gets scale 0 and zeros. The row must be
// finite (CheckQuantizable).
void QuantizeRowInt8(const float* row, int64_t k, int8_t* q, float* scale);

// OK when every element of `weight` (f32, f16 or bf16) is finite; INVALID_ARGUMENT naming
// `name` and the first offending element otherwise (a NaN or infinity would make its row's scale
// meaningless).
absl::Status CheckQuantizable(const Tensor& weight, absl::string_view name);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_QUANTIZATION_H_
