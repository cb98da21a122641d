// A 4-bit group-quantized projection weight [rows, cols] ([out, in], as every projection is held)
// in one canonical form, whatever checkpoint format it came from: AWQ's and GPTQ's packings
// (quantized_checkpoint.h) are both converted to it at load, and the backends pack it for their
// kernels.
//
// Element (r, c) stands for the dequantized weight (Value(r, c) - Zero(r, g)) * Scale(r, g), with
// g = c / group_size: each row's inputs are cut into groups of group_size columns, and every
// (row, group) has its own f32 scale (an f16 in the checkpoints, widened exactly) and integer zero
// point. Values are 0..15; zero points are 0..16 (GPTQ stores zero - 1 in 4 bits, so a zero of 0
// wraps to 15 and reads back as 16; real GPTQ kernels compute with 16 and so does this).
//
// Thread-safe after construction: a plain value.

#ifndef LLMSERVE_WORKER_MODEL_INT4_MATRIX_H_
#define LLMSERVE_WORKER_MODEL_INT4_MATRIX_H_

#include <cstdint>
#include <vector>

namespace llmserve::worker {

struct Int4Matrix {
  int64_t rows = 0;
  int64_t cols = 0;  // a multiple of group_size (and of 8, as both checkpoint formats need)
  int64_t group_size = 0;
  // [rows, cols / 2]: byte (r, j) holds column 2j in its low nibble and 2j + 1 in its high one.
  std::vector<uint8_t> packed_values;
  std::vector<uint8_t> zeros;  // [rows, groups()], 0..16
  std::vector<float> scales;   // [rows, groups()]

  bool empty() const { return rows == 0; }
  int64_t groups() const { return group_size == 0 ? 0 : cols / group_size; }
  int Value(int64_t r, int64_t c) const {
    const uint8_t byte = packed_values[static_cast<size_t>(r * (cols / 2) + c / 2)];
    return (c % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  }
  int Zero(int64_t r, int64_t g) const { return zeros[static_cast<size_t>(r * groups() + g)]; }
  float Scale(int64_t r, int64_t g) const { return scales[static_cast<size_t>(r * groups() + g)]; }
  // The dequantized weight, computed in f32 exactly as the kernels' reference: (q - z) * s.
  float Dequantized(int64_t r, int64_t c) const {
    const int64_t g = c / group_size;
    return static_cast<float>(Value(r, c) - Zero(r, g)) * Scale(r, g);
  }
  // Bytes it holds.
  int64_t SizeBytes() const {
    return static_cast<int64_t>(packed_values.size() + zeros.size() + scales.size() * 4);
  }
};

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_MODEL_INT4_MATRIX_H_
