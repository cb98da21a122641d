// A 4-bit group-quantized projection weight [rows, cols] ([out, in], as every projection is held)
// in one canonical form, whatever file format it came from: AWQ's and GPTQ's packings
// (quantized_checkpoint.h) and GGUF's Q4_0, Q4_1 and Q4_K blocks (gguf/gguf_int4.h) are all
// converted to it at load, and the backends pack it for their kernels.
//
// Each row's inputs are cut into groups of group_size columns, and every (row, group) has its own
// f32 scale and f32 offset. Element (r, c), with g = c / group_size, stands for
//   Value(r, c) * Scale(r, g) - Offset(r, g)
// computed as one fused multiply-add (one rounding), which is what every kernel computes. Values
// are 0..15. The offset is stored one of two ways:
//  - AWQ/GPTQ: an integer zero point per (row, group), 0..16 (GPTQ stores zero - 1 in 4 bits, so a
//    zero of 0 wraps to 15 and reads back as 16; real GPTQ kernels compute with 16 and so does
//    this), and Offset = Scale * Zero. Their scales come from f16 (or bf16), so Scale * Zero and
//    Value * Scale are exact in f32 and the element equals (Value - Zero) * Scale exactly.
//  - GGUF: the offset itself (`offsets`; `zeros` is then empty): Q4_0's 8 * d, Q4_1's -m, Q4_K's
//    dmin * m of each sub-block, all exact in f32, so the element is bit for bit llama.cpp's
//    dequantized value (gguf_int4.h says why).
//
// Thread-safe after construction: a plain value.

#ifndef LLMSERVE_WORKER_MODEL_INT4_MATRIX_H_
#define LLMSERVE_WORKER_MODEL_INT4_MATRIX_H_

#include <cmath>
#include <cstdint>
#include <vector>

namespace llmserve::worker {

struct Int4Matrix {
  int64_t rows = 0;
  int64_t cols = 0;  // a multiple of group_size (and of 8, as both checkpoint formats need)
  int64_t group_size = 0;
  // [rows, cols / 2]: byte (r, j) holds column 2j in its low nibble and 2j + 1 in its high one.
  std::vector<uint8_t> packed_values;
  std::vector<uint8_t> zeros;  // [rows, groups()], 0..16; empty when `offsets` holds the offsets
  std::vector<float> scales;   // [rows, groups()]
  std::vector<float> offsets;  // [rows, groups()] when the format stores offsets, else empty

  bool empty() const { return rows == 0; }
  int64_t groups() const { return group_size == 0 ? 0 : cols / group_size; }
  int Value(int64_t r, int64_t c) const {
    const uint8_t byte = packed_values[static_cast<size_t>(r * (cols / 2) + c / 2)];
    return (c % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  }
  // The zero point (AWQ/GPTQ form only: `zeros` non-empty).
  int Zero(int64_t r, int64_t g) const { return zeros[static_cast<size_t>(r * groups() + g)]; }
  float Scale(int64_t r, int64_t g) const { return scales[static_cast<size_t>(r * groups() + g)]; }
  // What is subtracted from Value * Scale in group g of row r, in either form.
  float Offset(int64_t r, int64_t g) const {
    const size_t i = static_cast<size_t>(r * groups() + g);
    return offsets.empty() ? scales[i] * static_cast<float>(zeros[i]) : offsets[i];
  }
  // The dequantized weight, computed in f32 exactly as the kernels compute it: q * s - offset with
  // one rounding.
  float Dequantized(int64_t r, int64_t c) const {
    const int64_t g = c / group_size;
    return std::fma(static_cast<float>(Value(r, c)), Scale(r, g), -Offset(r, g));
  }
  // Bytes it holds.
  int64_t SizeBytes() const {
    return static_cast<int64_t>(packed_values.size() + zeros.size() + scales.size() * 4 +
                                offsets.size() * 4);
  }
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_INT4_MATRIX_H_
