// The CUDA backend's quantized projection weights as host images of what is uploaded, converted
// from the canonical forms the loader produces: an f32/f16/bf16 Tensor quantized to int8 per
// output row (quantization.h's QuantizeRowInt8, the CPU backend's format), and a 4-bit
// Int4Matrix (int4_matrix.h, from AWQ and GPTQ checkpoints and GGUF Q4 blocks). Plain C++, no CUDA
// dependency, so that the conversions are tested on machines without a GPU.
//
// Both layouts are row-major [out, in] because the decode kernel (quantized_kernels.h) gives each
// output row to one warp whose 32 lanes read consecutive 4-byte words of that row: every load of
// a warp is one contiguous 128-byte segment, the coalesced pattern, with no transposition and no
// shuffle. The prefill path dequantizes row ranges into a 16-bit [rows, in] scratch for cuBLAS,
// which row-major rows also make a plain contiguous write.
//
//  - int8: values [rows, row_stride] int8, row_stride = cols rounded up to 4 (one 4-byte word
//    per lane), the padding zero; one f32 scale per row. Weight (r, c) = values[r, c] * scale[r].
//    8 bits + 32 / cols bits per weight.
//  - int4: words [rows, cols / 8] uint32, column 8j + i of word (r, j) in bits 4i..4i + 3: the
//    canonical Int4Matrix bytes read as little-endian words. Per (row, group) two f32, the scale
//    and the offset (Int4Matrix::Offset), interleaved so that a word's pair is one aligned 8 bytes
//    (one memory sector, not two arrays). Weight (r, c) = q * scale - offset with one rounding,
//    g = c / group_size, exactly as Int4Matrix::Dequantized computes it. 4 bits +
//    64 / group_size bits per weight (4.5 bits at group 128). f32 rather than f16 scales: the
//    canonical scales are f32 (a bf16 checkpoint's scales are not all representable in f16), and
//    the scales are a ninth of the bytes at group 128.
//
// Thread-safe: plain values and pure functions.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_LAYOUT_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/model/int4_matrix.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker::cuda {

struct Int8DeviceLayout {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;      // bytes per row: cols rounded up to a multiple of 4
  std::vector<int8_t> values;  // [rows, row_stride], columns past cols are 0
  std::vector<float> scales;   // [rows]

  int64_t SizeBytes() const {
    return static_cast<int64_t>(values.size() + scales.size() * sizeof(float));
  }
};

struct Int4DeviceLayout {
  int64_t rows = 0;
  int64_t cols = 0;  // a multiple of 8 and of group_size
  int64_t group_size = 0;
  std::vector<uint32_t> words;      // [rows, cols / 8]
  std::vector<float> scale_offset;  // [rows, cols / group_size, 2]: scale, offset

  int64_t groups() const { return group_size == 0 ? 0 : cols / group_size; }
  int64_t SizeBytes() const {
    return static_cast<int64_t>(words.size() * sizeof(uint32_t) +
                                scale_offset.size() * sizeof(float));
  }
};

// Bytes each layout takes on the device for a [rows, cols] weight (what the upload plans before
// converting anything).
int64_t Int8DeviceBytes(int64_t rows, int64_t cols);
int64_t Int4DeviceBytes(int64_t rows, int64_t cols, int64_t group_size);

// Quantizes a 2-D f32/f16/bf16 weight [rows, cols] per row to int8 (QuantizeRowInt8: the same
// values and scales as the CPU backend's int8 path). INVALID_ARGUMENT naming `name` for a tensor
// that is not 2-D, not a float type, or holds a value that is not finite (CheckQuantizable).
absl::StatusOr<Int8DeviceLayout> ToInt8DeviceLayout(const Tensor& weight, absl::string_view name);

// OK when `m` is a well-formed Int4Matrix the int4 layout can hold: cols a positive multiple of 8
// and of group_size, vector sizes matching, zero points 0..16, scales and offsets finite.
// INVALID_ARGUMENT naming `name` and the first problem otherwise.
absl::Status CheckInt4Matrix(const Int4Matrix& m, absl::string_view name);

// Converts a checked Int4Matrix (CheckInt4Matrix) into the device layout.
absl::StatusOr<Int4DeviceLayout> ToInt4DeviceLayout(const Int4Matrix& m, absl::string_view name);

// The dequantized weights [rows, cols] as the device kernels compute them, in f32: the host
// reference the tests compare the kernels and the canonical forms with.
std::vector<float> Dequantize(const Int8DeviceLayout& layout);
std::vector<float> Dequantize(const Int4DeviceLayout& layout);

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_LAYOUT_H_
