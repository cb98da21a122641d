#include "worker/model/quantized_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace llmserve::worker {
namespace {

// The inverse of kAwqOrder: output 8b + j is nibble kAwqNibble[j].
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

uint32_t ReadU32(const unsigned char* data, int64_t index) {
  uint32_t value;
  std::memcpy(&value, data + index * 4, 4);
  return value;
}

int Nibble(uint32_t word, int n) { return static_cast<int>((word >> (4 * n)) & 0xF); }

// Widens the [groups, out] scales into an Int4Matrix's [out, groups], checking they are finite.
absl::Status ReadScales(const QuantizedProjectionBytes& bytes, int64_t groups, int64_t out,
                        absl::string_view name, Int4Matrix* w) {
  std::vector<float> scales(groups * out);
  ConvertElements(bytes.scales, bytes.scales_dtype, scales.data(), DType::kF32, scales.size());
  w->scales.resize(scales.size());
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t o = 0; o < out; ++o) {
      const float scale = scales[g * out + o];
      if (!std::isfinite(scale)) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ".scales[", g, ", ", o, "] is ", scale, ": scales must be finite"));
      }
      w->scales[o * groups + g] = scale;
    }
  }
  return absl::OkStatus();
}

Int4Matrix Allocate(int64_t rows, int64_t cols, int64_t group) {
  Int4Matrix w;
  w.rows = rows;
  w.cols = cols;
  w.group_size = group;
  w.packed_values.assign(rows * cols / 2, 0);
  w.zeros.assign(rows * w.groups(), 0);
  w.scales.assign(rows * w.groups(), 0.0f);
  return w;
}

void SetValue(Int4Matrix* w, int64_t r, int64_t c, int value) {
  uint8_t& byte = w->packed_values[r * (w->cols / 2) + c / 2];
  byte = c % 2 == 0 ? static_cast<uint8_t>((byte & 0xF0) | value)
                    : static_cast<uint8_t>((byte & 0x0F) | (value << 4));
}

std::string Int32Bytes(const std::vector<uint32_t>& words) {
  std::string bytes(words.size() * 4, '\0');
  std::memcpy(bytes.data(), words.data(), bytes.size());
  return bytes;
}

// The [groups, out] f16 scales of `w`.
std::string ScaleBytes(const Int4Matrix& w) {
  const int64_t groups = w.groups();
  std::vector<float> transposed(groups * w.rows);
  for (int64_t o = 0; o < w.rows; ++o) {
    for (int64_t g = 0; g < groups; ++g) transposed[g * w.rows + o] = w.Scale(o, g);
  }
  std::string bytes(transposed.size() * 2, '\0');
  ConvertElements(transposed.data(), DType::kF32, bytes.data(), DType::kF16, transposed.size());
  return bytes;
}

}  // namespace

absl::StatusOr<Int4Matrix> UnpackAwq(const QuantizedProjectionBytes& bytes, int64_t in, int64_t out,
                                     int64_t group, absl::string_view name) {
  Int4Matrix w = Allocate(out, in, group);
  const int64_t blocks = out / 8, groups = in / group;
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint32_t word = ReadU32(bytes.qweight, i * blocks + b);
      for (int j = 0; j < 8; ++j) SetValue(&w, 8 * b + j, i, Nibble(word, kAwqNibble[j]));
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint32_t word = ReadU32(bytes.qzeros, g * blocks + b);
      for (int j = 0; j < 8; ++j) {
        w.zeros[(8 * b + j) * groups + g] = static_cast<uint8_t>(Nibble(word, kAwqNibble[j]));
      }
    }
  }
  if (absl::Status read = ReadScales(bytes, groups, out, name, &w); !read.ok()) return read;
  return w;
}

absl::StatusOr<Int4Matrix> UnpackGptq(const QuantizedProjectionBytes& bytes, int64_t in,
                                      int64_t out, int64_t group, absl::string_view name) {
  for (int64_t i = 0; i < in; ++i) {
    const int32_t index = static_cast<int32_t>(ReadU32(bytes.g_idx, i));
    if (index != i / group) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ".g_idx[", i, "] is ", index, ", expected ", i / group,
                       ": only checkpoints without act-order (desc_act false) are supported"));
    }
  }
  Int4Matrix w = Allocate(out, in, group);
  const int64_t blocks = out / 8, groups = in / group;
  for (int64_t p = 0; p < in / 8; ++p) {
    for (int64_t o = 0; o < out; ++o) {
      const uint32_t word = ReadU32(bytes.qweight, p * out + o);
      for (int n = 0; n < 8; ++n) SetValue(&w, o, 8 * p + n, Nibble(word, n));
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint32_t word = ReadU32(bytes.qzeros, g * blocks + b);
      for (int n = 0; n < 8; ++n) {
        w.zeros[(8 * b + n) * groups + g] = static_cast<uint8_t>(Nibble(word, n) + 1);
      }
    }
  }
  if (absl::Status read = ReadScales(bytes, groups, out, name, &w); !read.ok()) return read;
  return w;
}

PackedProjection PackAwq(const Int4Matrix& w) {
  LLMSERVE_CHECK(w.offsets.empty()) << "AWQ stores zero points, not offsets";
  const int64_t in = w.cols, out = w.rows, blocks = out / 8, groups = w.groups();
  std::vector<uint32_t> qweight(in * blocks, 0), qzeros(groups * blocks, 0);
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t b = 0; b < blocks; ++b) {
      for (int n = 0; n < 8; ++n) {
        qweight[i * blocks + b] |= static_cast<uint32_t>(w.Value(8 * b + kAwqOrder[n], i))
                                   << (4 * n);
      }
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      for (int n = 0; n < 8; ++n) {
        const int zero = w.Zero(8 * b + kAwqOrder[n], g);
        LLMSERVE_CHECK(zero <= 15) << "AWQ zero points are 0..15";
        qzeros[g * blocks + b] |= static_cast<uint32_t>(zero) << (4 * n);
      }
    }
  }
  PackedProjection packed;
  packed.qweight = Int32Bytes(qweight);
  packed.qweight_shape = {in, blocks};
  packed.qzeros = Int32Bytes(qzeros);
  packed.qzeros_shape = {groups, blocks};
  packed.scales = ScaleBytes(w);
  packed.scales_shape = {groups, out};
  return packed;
}

PackedProjection PackGptq(const Int4Matrix& w) {
  LLMSERVE_CHECK(w.offsets.empty()) << "GPTQ stores zero points, not offsets";
  const int64_t in = w.cols, out = w.rows, blocks = out / 8, groups = w.groups();
  std::vector<uint32_t> qweight(in / 8 * out, 0), qzeros(groups * blocks, 0), g_idx(in);
  for (int64_t p = 0; p < in / 8; ++p) {
    for (int64_t o = 0; o < out; ++o) {
      for (int n = 0; n < 8; ++n) {
        qweight[p * out + o] |= static_cast<uint32_t>(w.Value(o, 8 * p + n)) << (4 * n);
      }
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      for (int n = 0; n < 8; ++n) {
        // zero - 1 in 4 bits: 0 wraps to 15, which readers turn into 16.
        const uint32_t stored = static_cast<uint32_t>(w.Zero(8 * b + n, g) - 1) & 0xF;
        qzeros[g * blocks + b] |= stored << (4 * n);
      }
    }
  }
  for (int64_t i = 0; i < in; ++i) g_idx[i] = static_cast<uint32_t>(i / w.group_size);
  PackedProjection packed;
  packed.qweight = Int32Bytes(qweight);
  packed.qweight_shape = {in / 8, out};
  packed.qzeros = Int32Bytes(qzeros);
  packed.qzeros_shape = {groups, blocks};
  packed.scales = ScaleBytes(w);
  packed.scales_shape = {groups, out};
  packed.g_idx = Int32Bytes(g_idx);
  packed.g_idx_shape = {in};
  return packed;
}

Int4Matrix QuantizeInt4(const float* w, int64_t rows, int64_t cols, int64_t group, bool symmetric) {
  Int4Matrix q = Allocate(rows, cols, group);
  const int64_t groups = q.groups();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* values = w + r * cols + g * group;
      // The range includes 0 (as AutoGPTQ's quantizer has it), so that no group's values lie
      // beyond the 15 steps above its zero point.
      float low = 0.0f, high = 0.0f;
      for (int64_t c = 0; c < group; ++c) {
        low = std::min(low, values[c]);
        high = std::max(high, values[c]);
      }
      float scale;
      int zero = 8;
      if (symmetric) {
        const float max_abs = std::max(-low, high);
        scale = max_abs == 0.0f ? 2.0f / 15 : 2 * max_abs / 15;
      } else {
        scale = std::max(high - low, 1e-5f) / 15;
      }
      // The checkpoint keeps the scale in f16: compute the values with the scale it will hold.
      uint16_t half;
      ConvertElements(&scale, DType::kF32, &half, DType::kF16, 1);
      ConvertElements(&half, DType::kF16, &scale, DType::kF32, 1);
      if (!symmetric) {
        // At least 1: GPTQ stores zero - 1 in 4 bits, where 0 would wrap to 16.
        zero = static_cast<int>(std::clamp(-std::nearbyint(low / scale), 1.0f, 15.0f));
      }
      q.scales[r * groups + g] = scale;
      q.zeros[r * groups + g] = static_cast<uint8_t>(zero);
      for (int64_t c = 0; c < group; ++c) {
        const float value = std::nearbyint(values[c] / scale) + static_cast<float>(zero);
        SetValue(&q, r, g * group + c, static_cast<int>(std::clamp(value, 0.0f, 15.0f)));
      }
    }
  }
  return q;
}

Int4Matrix ConcatRows(const std::vector<Int4Matrix>& parts) {
  Int4Matrix all;
  all.cols = parts.at(0).cols;
  all.group_size = parts.at(0).group_size;
  for (const Int4Matrix& part : parts) {
    LLMSERVE_CHECK(part.cols == all.cols && part.group_size == all.group_size &&
                   part.offsets.empty() == parts.at(0).offsets.empty())
        << "fused projections share their inputs, groups and offset form";
    all.rows += part.rows;
    all.packed_values.insert(all.packed_values.end(), part.packed_values.begin(),
                             part.packed_values.end());
    all.zeros.insert(all.zeros.end(), part.zeros.begin(), part.zeros.end());
    all.scales.insert(all.scales.end(), part.scales.begin(), part.scales.end());
    all.offsets.insert(all.offsets.end(), part.offsets.begin(), part.offsets.end());
  }
  return all;
}

}  // namespace llmserve::worker
