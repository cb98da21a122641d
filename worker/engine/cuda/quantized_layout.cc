#include "worker/engine/cuda/quantized_layout.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "worker/model/quantization.h"

namespace llmserve::worker::cuda {
namespace {

int64_t Int8RowStride(int64_t cols) { return (cols + 3) / 4 * 4; }

}  // namespace

int64_t Int8DeviceBytes(int64_t rows, int64_t cols) {
  return rows * Int8RowStride(cols) + rows * static_cast<int64_t>(sizeof(float));
}

int64_t Int4DeviceBytes(int64_t rows, int64_t cols, int64_t group_size) {
  return rows * (cols / 2) + rows * (cols / group_size) * 2 * static_cast<int64_t>(sizeof(float));
}

absl::StatusOr<Int8DeviceLayout> ToInt8DeviceLayout(const Tensor& weight, absl::string_view name) {
  if (weight.shape().size() != 2 || weight.shape()[0] < 1 || weight.shape()[1] < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": int8 quantization needs a non-empty 2-D weight"));
  }
  if (weight.dtype() != DType::kF32 && weight.dtype() != DType::kF16 &&
      weight.dtype() != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(name,
                                                   ": int8 quantization needs f32, f16 or "
                                                   "bf16 weights, not ",
                                                   DTypeName(weight.dtype())));
  }
  LLMSERVE_RETURN_IF_ERROR(CheckQuantizable(weight, name));
  Int8DeviceLayout layout;
  layout.rows = weight.shape()[0];
  layout.cols = weight.shape()[1];
  layout.row_stride = Int8RowStride(layout.cols);
  layout.values.assign(static_cast<size_t>(layout.rows * layout.row_stride), 0);
  layout.scales.resize(static_cast<size_t>(layout.rows));
  const auto* bytes = static_cast<const unsigned char*>(weight.data());
  const size_t row_bytes = static_cast<size_t>(layout.cols) * DTypeSize(weight.dtype());
  std::vector<float> row(static_cast<size_t>(layout.cols));
  for (int64_t r = 0; r < layout.rows; ++r) {
    ConvertElements(bytes + r * row_bytes, weight.dtype(), row.data(), DType::kF32, row.size());
    QuantizeRowInt8(row.data(), layout.cols, layout.values.data() + r * layout.row_stride,
                    &layout.scales[r]);
  }
  return layout;
}

absl::Status CheckInt4Matrix(const Int4Matrix& m, absl::string_view name) {
  if (m.rows < 1 || m.cols < 8 || m.cols % 8 != 0 || m.group_size < 1 ||
      m.cols % m.group_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": a 4-bit weight of ", m.rows, " x ", m.cols, " in groups of ", m.group_size,
        " cannot be laid out for CUDA (columns must be a positive multiple of 8 and of the "
        "group size)"));
  }
  const size_t cells = static_cast<size_t>(m.rows * m.groups());
  if (m.packed_values.size() != static_cast<size_t>(m.rows * m.cols / 2) ||
      (m.offsets.empty() ? m.zeros.size() : m.offsets.size()) != cells ||
      m.scales.size() != cells) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": 4-bit weight arrays do not match its ",
                                                   m.rows, " x ", m.cols, " shape in groups of ",
                                                   m.group_size));
  }
  for (size_t i = 0; i < cells; ++i) {
    if (!m.offsets.empty() && !std::isfinite(m.offsets[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": offset ", m.offsets[i], " at (row, group) cell ", i, " is not finite"));
    }
    if (m.offsets.empty() && m.zeros[i] > 16) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": zero point ", int{m.zeros[i]},
                                                     " at (row, group) cell ", i,
                                                     " is outside 0..16"));
    }
    if (!std::isfinite(m.scales[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": scale ", m.scales[i], " at (row, group) cell ", i, " is not finite"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Int4DeviceLayout> ToInt4DeviceLayout(const Int4Matrix& m, absl::string_view name) {
  LLMSERVE_RETURN_IF_ERROR(CheckInt4Matrix(m, name));
  Int4DeviceLayout layout;
  layout.rows = m.rows;
  layout.cols = m.cols;
  layout.group_size = m.group_size;
  // Byte 4j + b of a row holds columns 8j + 2b (low nibble) and 8j + 2b + 1 (high nibble); as a
  // little-endian word that puts column 8j + i at bits 4i. Assembled byte by byte so that the
  // result does not depend on the host's byte order.
  const int64_t words_per_row = m.cols / 8;
  layout.words.resize(static_cast<size_t>(m.rows * words_per_row));
  for (size_t w = 0; w < layout.words.size(); ++w) {
    const uint8_t* b = m.packed_values.data() + 4 * w;
    layout.words[w] =
        uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
  }
  const size_t cells = static_cast<size_t>(m.rows * m.groups());
  layout.scale_offset.resize(2 * cells);
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t g = 0; g < m.groups(); ++g) {
      const size_t i = static_cast<size_t>(r * m.groups() + g);
      layout.scale_offset[2 * i] = m.Scale(r, g);
      layout.scale_offset[2 * i + 1] = m.Offset(r, g);
    }
  }
  return layout;
}

std::vector<float> Dequantize(const Int8DeviceLayout& layout) {
  std::vector<float> out(static_cast<size_t>(layout.rows * layout.cols));
  for (int64_t r = 0; r < layout.rows; ++r) {
    for (int64_t c = 0; c < layout.cols; ++c) {
      out[r * layout.cols + c] =
          static_cast<float>(layout.values[r * layout.row_stride + c]) * layout.scales[r];
    }
  }
  return out;
}

std::vector<float> Dequantize(const Int4DeviceLayout& layout) {
  std::vector<float> out(static_cast<size_t>(layout.rows * layout.cols));
  const int64_t words_per_row = layout.cols / 8;
  for (int64_t r = 0; r < layout.rows; ++r) {
    for (int64_t c = 0; c < layout.cols; ++c) {
      const uint32_t word = layout.words[r * words_per_row + c / 8];
      const int q = static_cast<int>((word >> (4 * (c % 8))) & 0xF);
      const size_t cell = static_cast<size_t>(r * layout.groups() + c / layout.group_size);
      // q * scale - offset with one rounding, as the kernels.
      out[r * layout.cols + c] = std::fma(static_cast<float>(q), layout.scale_offset[2 * cell],
                                          -layout.scale_offset[2 * cell + 1]);
    }
  }
  return out;
}

}  // namespace llmserve::worker::cuda
