#include "worker/engine/cpu/packed_matrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/base/huge_page_memory.h"
#include "common/base/logging.h"
#include "worker/model/quantization.h"

namespace llmserve::worker::cpu {
namespace {

// Panel p of `src` [rows, cols] into `panel`. Element-sized units (f32 as uint32_t, f16 as
// uint16_t) are copied as bit patterns. Columns go in tiles so that the 32 source rows' lines of a
// tile stay in L1 while the panel is written front to back; padding rows are zeroed.
template <typename Unit>
void PackPanel(const Unit* src, int64_t rows, int64_t cols, int64_t p, Unit* panel) {
  constexpr int64_t kPanel = PackedMatrix::kPanelRows, kTile = 64;
  const int64_t first = p * kPanel;
  const int64_t real_rows = std::min(kPanel, rows - first);
  for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
    const int64_t c1 = std::min(cols, c0 + kTile);
    for (int64_t r = 0; r < real_rows; ++r) {
      const Unit* row = src + (first + r) * cols;
      for (int64_t c = c0; c < c1; ++c) panel[c * kPanel + r] = row[c];
    }
    for (int64_t r = real_rows; r < kPanel; ++r) {
      for (int64_t c = c0; c < c1; ++c) panel[c * kPanel + r] = Unit{0};
    }
  }
}

template <typename Unit>
void PackPanels(const Unit* src, int64_t rows, int64_t cols, int64_t panels, ParallelForPool* pool,
                Unit* dst) {
  const auto pack = [&](int, int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      PackPanel(src, rows, cols, p, dst + p * PackedMatrix::kPanelRows * cols);
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(panels, pack);
  } else {
    pack(0, 0, panels);
  }
}

}  // namespace

void PackedMatrix::Allocate() {
  // Packing writes every byte, padding included. Out of memory aborts with the size, as Tensor's
  // allocation does (the dense copy is still held at this point).
  const size_t bytes = static_cast<size_t>(num_panels() * PanelBytes());
  data_.reset(static_cast<unsigned char*>(AllocateHugePageMemory(bytes)));
  LLMSERVE_CHECK(data_ != nullptr)
      << "out of memory packing a [" << rows_ << ", " << cols_ << "] weight: " << bytes << " bytes";
}

int64_t PackedMatrix::SizeBytes() const {
  const int64_t scale_floats = element_ == PackedElement::kInt8 ? num_panels() * kPanelRows
                               : element_ == PackedElement::kInt4
                                   ? num_panels() * groups() * 2 * kPanelRows
                                   : 0;
  return num_panels() * PanelBytes() + scale_floats * int64_t{sizeof(float)};
}

PackedMatrix::PackedMatrix(const Tensor& w, ParallelForPool* pool)
    : element_(w.dtype() == DType::kF32 ? PackedElement::kF32 : PackedElement::kF16),
      rows_(w.shape().at(0)),
      cols_(w.shape().at(1)) {
  LLMSERVE_CHECK(w.shape().size() == 2 && (w.dtype() == DType::kF32 || w.dtype() == DType::kF16))
      << "PackedMatrix takes a 2-D f32 or f16 tensor";
  Allocate();
  if (element_ == PackedElement::kF32) {
    PackPanels(w.data_as<uint32_t>(), rows_, cols_, num_panels(), pool,
               reinterpret_cast<uint32_t*>(data_.get()));
  } else {
    PackPanels(w.data_as<uint16_t>(), rows_, cols_, num_panels(), pool,
               reinterpret_cast<uint16_t*>(data_.get()));
  }
}

PackedMatrix PackedMatrix::QuantizeInt8(const Tensor& w, ParallelForPool* pool) {
  LLMSERVE_CHECK(w.shape().size() == 2) << "PackedMatrix takes a 2-D tensor";
  PackedMatrix m;
  m.element_ = PackedElement::kInt8;
  m.rows_ = w.shape()[0];
  m.cols_ = w.shape()[1];
  m.Allocate();
  m.scales_.reset(new float[m.num_panels() * kPanelRows]());
  const int64_t k = m.cols_;
  const size_t row_bytes = k * DTypeSize(w.dtype());
  const auto quantize = [&](int, int64_t begin, int64_t end) {
    std::vector<float> row(k);
    std::vector<int8_t> q(k);
    for (int64_t p = begin; p < end; ++p) {
      auto* panel = reinterpret_cast<int8_t*>(m.data_.get() + p * m.PanelBytes());
      for (int64_t lane = 0; lane < kPanelRows; ++lane) {
        const int64_t r = p * kPanelRows + lane;
        if (r < m.rows_) {
          ConvertElements(static_cast<const unsigned char*>(w.data()) + r * row_bytes, w.dtype(),
                          row.data(), DType::kF32, k);
          QuantizeRowInt8(row.data(), k, q.data(), &m.scales_[r]);
        } else {
          std::fill(q.begin(), q.end(), int8_t{0});
        }
        for (int64_t c = 0; c < k; ++c) panel[c * kPanelRows + lane] = q[c];
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(m.num_panels(), quantize);
  } else {
    quantize(0, 0, m.num_panels());
  }
  return m;
}

PackedMatrix PackedMatrix::PackInt4(const Int4Matrix& w, ParallelForPool* pool) {
  LLMSERVE_CHECK(w.rows > 0 && w.cols > 0 && w.cols % 2 == 0 && w.group_size > 0 &&
                 w.cols % w.group_size == 0)
      << "bad int4 matrix [" << w.rows << ", " << w.cols << "], group size " << w.group_size;
  LLMSERVE_CHECK(static_cast<int64_t>(w.packed_values.size()) == w.rows * w.cols / 2 &&
                 static_cast<int64_t>(w.offsets.empty() ? w.zeros.size() : w.offsets.size()) ==
                     w.rows * w.groups() &&
                 static_cast<int64_t>(w.scales.size()) == w.rows * w.groups())
      << "int4 matrix vectors do not match its shape";
  PackedMatrix m;
  m.element_ = PackedElement::kInt4;
  m.rows_ = w.rows;
  m.cols_ = w.cols;
  m.group_size_ = w.group_size;
  m.Allocate();
  const int64_t groups = m.groups();
  m.scales_.reset(new float[m.num_panels() * groups * 2 * kPanelRows]());
  const int64_t row_bytes = w.cols / 2;
  const auto pack = [&](int, int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      // Padding rows stay zero: their nibbles, scales and offsets.
      auto* panel = m.data_.get() + p * m.PanelBytes();
      std::memset(panel, 0, m.PanelBytes());
      float* data = m.scales_.get() + p * groups * 2 * kPanelRows;
      for (int64_t lane = 0; lane < kPanelRows && p * kPanelRows + lane < w.rows; ++lane) {
        const int64_t r = p * kPanelRows + lane;
        const int64_t byte = (lane / 16) * 8 + lane % 8;
        const int shift = (lane % 16) < 8 ? 0 : 4;
        const uint8_t* row = w.packed_values.data() + r * row_bytes;
        for (int64_t j = 0; j < row_bytes; ++j) {
          panel[(2 * j) * 16 + byte] |= static_cast<unsigned char>((row[j] & 0xF) << shift);
          panel[(2 * j + 1) * 16 + byte] |= static_cast<unsigned char>((row[j] >> 4) << shift);
        }
        for (int64_t g = 0; g < groups; ++g) {
          data[g * 2 * kPanelRows + lane] = w.Scale(r, g);
          data[g * 2 * kPanelRows + kPanelRows + lane] = w.Offset(r, g);
        }
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(m.num_panels(), pack);
  } else {
    pack(0, 0, m.num_panels());
  }
  return m;
}

void PackedMatrix::CopyRow(int64_t r, float* out) const {
  const unsigned char* panel_bytes = data_.get() + (r / kPanelRows) * PanelBytes();
  const int64_t lane = r % kPanelRows;
  if (element_ == PackedElement::kInt4) {
    // q * scale - offset in one rounding, as Int4Matrix::Dequantized and the kernels compute it.
    const int64_t byte = (lane / 16) * 8 + lane % 8;
    const int shift = (lane % 16) < 8 ? 0 : 4;
    const float* data = group_data(r / kPanelRows);
    for (int64_t c = 0; c < cols_; ++c) {
      const int64_t g = c / group_size_;
      const int q = (panel_bytes[c * 16 + byte] >> shift) & 0xF;
      out[c] = std::fma(static_cast<float>(q), data[g * 2 * kPanelRows + lane],
                        -data[g * 2 * kPanelRows + kPanelRows + lane]);
    }
    return;
  }
  if (element_ == PackedElement::kInt8) {
    const auto* panel = reinterpret_cast<const int8_t*>(panel_bytes);
    const float scale = scales_[r];
    for (int64_t c = 0; c < cols_; ++c) out[c] = panel[c * kPanelRows + lane] * scale;
    return;
  }
  if (element_ == PackedElement::kF32) {
    const auto* panel = reinterpret_cast<const float*>(panel_bytes);
    for (int64_t c = 0; c < cols_; ++c) out[c] = panel[c * kPanelRows + lane];
  } else {
    const auto* panel = reinterpret_cast<const uint16_t*>(panel_bytes);
    for (int64_t c = 0; c < cols_; ++c) out[c] = HalfToFloat(panel[c * kPanelRows + lane]);
  }
}

}  // namespace llmserve::worker::cpu
