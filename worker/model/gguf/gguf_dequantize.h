// Dequantization of GGUF tensor data to f32, for every type in gguf_types.h (F32, F16, BF16,
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), following ggml's block layouts
// (ggml-common.h) and reproducing its reference dequantizer's values exactly (the same f32
// operations in the same order). Scalar code, one switch per call rather than per element.
//
// Thread-safe: pure functions.

#ifndef LLMSERVE_WORKER_MODEL_GGUF_GGUF_DEQUANTIZE_H_
#define LLMSERVE_WORKER_MODEL_GGUF_GGUF_DEQUANTIZE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/model/gguf/gguf_tensor.h"
#include "worker/model/gguf/gguf_types.h"

namespace llmserve::worker::gguf {

// Dequantizes `num_blocks` whole blocks of `type` at `data` (num_blocks * block_bytes bytes, any
// alignment) into `out` (num_blocks * block_size floats). No checks: the caller sized both.
void DequantizeBlocks(GgmlType type, const unsigned char* data, int64_t num_blocks, float* out);

// Dequantizes rows [first_row, first_row + num_rows) of `tensor` (a row is dims[0] elements;
// gguf_tensor.h) into `out`, which must hold exactly num_rows * dims[0] floats.
// INVALID_ARGUMENT when the range is outside the tensor or `out` has the wrong size.
absl::Status DequantizeRows(const GgufTensor& tensor, int64_t first_row, int64_t num_rows,
                            absl::Span<float> out);

// The whole tensor as f32 (num_elements floats): for tests and small tensors.
absl::StatusOr<std::vector<float>> DequantizeTensor(const GgufTensor& tensor);

// Q4_0, Q4_1 and Q4_K store 4-bit values (0..15) in groups of kInt4GroupSize, each group with
// one scale and one offset, which is Int4Matrix's form (int4_matrix.h): Q4_0's value is
// (q - 8) * d, Q4_1's q * d + m, Q4_K's (d * sc) * q - dmin * m per sub-block of 32. With scale d,
// d or d * sc, and offset 8 * d, -m or dmin * m, every product is exact in f32 (f16 d and dmin
// have 11 significant bits, sc and m 6, q 4), so fma(q, scale, -offset) rounds once the same
// exact value as ggml's dequantizer: the same f32 bit for bit.
inline constexpr int64_t kInt4GroupSize = 32;
bool HasInt4Groups(GgmlType type);

// Row `row` of `tensor` (of a type HasInt4Groups accepts) as Int4Matrix arrays: `packed` gets
// dims[0] / 2 bytes (column 2j in the low nibble of byte j, 2j + 1 in the high one), `scales` and
// `offsets` dims[0] / kInt4GroupSize floats each. INVALID_ARGUMENT for another type or a row
// outside the tensor.
absl::Status Int4GroupsOfRow(const GgufTensor& tensor, int64_t row, uint8_t* packed, float* scales,
                             float* offsets);

// IEEE binary16 and bfloat16 to f32, exactly.
float F16ToF32(uint16_t bits);
float BF16ToF32(uint16_t bits);

}  // namespace llmserve::worker::gguf

#endif  // LLMSERVE_WORKER_MODEL_GGUF_GGUF_DEQUANTIZE_H_
