#include "worker/engine/cpu/matmul.h"

#include <cblas.h>

#include <algorithm>

#include "worker/engine/cpu/bf16_gemm.h"
#include "worker/engine/cpu/packed_gemm.h"
#include "worker/engine/cpu/small_batch_gemv.h"

namespace llmserve::worker::cpu {
namespace {

// Rows of a bf16/f16 weight widened at once: 64 rows x 4096 columns is 1 MiB of f32, the size of
// a core's L2 on recent x86.
constexpr int64_t kPanelElements = 64 * 4096;

void MultiplyF32(const float* x, int64_t m, int64_t k, const float* w, int64_t rows, float* out,
                 int64_t ldc) {
  if (m == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(rows), static_cast<int>(k), 1.0f, w,
                static_cast<int>(k), x, 1, 0.0f, out, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(rows),
              static_cast<int>(k), 1.0f, x, static_cast<int>(k), w, static_cast<int>(k), 0.0f, out,
              static_cast<int>(ldc));
}

}  // namespace

ProjectionWeight::ProjectionWeight(Tensor w, WeightLayout layout, ParallelForPool* pool)
    : dtype_(w.dtype()), rows_(w.shape().at(0)), cols_(w.shape().at(1)) {
  is_packed_ = layout == WeightLayout::kBest && PackedGemmAvailable() &&
               (dtype_ == DType::kF32 || dtype_ == DType::kF16);
  if (is_packed_) {
    packed_ = PackedMatrix(w, pool);
  } else {
    dense_ = std::move(w);
  }
}

ProjectionWeight ProjectionWeight::QuantizedInt8(const Tensor& w, ParallelForPool* pool) {
  ProjectionWeight weight;
  weight.dtype_ = w.dtype();
  weight.rows_ = w.shape().at(0);
  weight.cols_ = w.shape().at(1);
  weight.is_packed_ = true;
  weight.packed_ = PackedMatrix::QuantizeInt8(w, pool);
  return weight;
}

ProjectionWeight ProjectionWeight::Int4(const Int4Matrix& w, ParallelForPool* pool) {
  ProjectionWeight weight;
  weight.dtype_ = DType::kF32;
  weight.rows_ = w.rows;
  weight.cols_ = w.cols;
  weight.is_packed_ = true;
  weight.packed_ = PackedMatrix::PackInt4(w, pool);
  return weight;
}

int64_t ProjectionWeight::SizeBytes() const {
  return is_packed_ ? packed_.SizeBytes() : static_cast<int64_t>(dense_.SizeBytes());
}

void ProjectionWeight::CopyRow(int64_t r, float* out) const {
  if (is_packed_) {
    packed_.CopyRow(r, out);
    return;
  }
  const auto* bytes = static_cast<const unsigned char*>(dense_.data());
  const size_t row_bytes = cols_ * DTypeSize(dtype_);
  ConvertElements(bytes + r * row_bytes, dtype_, out, DType::kF32, cols_);
}

MatMul::MatMul(ParallelForPool* pool, bool quantized_activations)
    : pool_(pool),
      quantized_activations_(quantized_activations),
      dot_isa_(QuantizedDotIsas().front()),
      panels_(pool->num_threads()) {
  // We split the work across our own threads; OpenBLAS's threads would only compete with them.
  openblas_set_num_threads(1);
  const std::vector<std::string> isas = PackedGemmIsas();
  if (!isas.empty()) packed_isa_ = isas.front();
}

void MatMul::Run(const float* x, int64_t m, const ProjectionWeight& w, float* out) {
  if (w.is_packed()) {
    RunPacked(x, m, w.packed(), out);
  } else {
    RunDense(x, m, w.dense(), out);
  }
}

void MatMul::RunPacked(const float* x, int64_t m, const PackedMatrix& w, float* out) {
  if (quantized_activations_ && m <= kQuantizedDotMaxRows && ActivationBlock(w) > 0) {
    RunQuantizedDot(x, m, w, out);
    return;
  }
  if (packed_isa_.empty()) {
    RunBaseline(x, m, w, out);
    return;
  }
  const int64_t k = w.cols();
  packed_x_.resize(PackedActivationsSize(packed_isa_, m, k));
  const int64_t blocks = PackedActivationBlocks(packed_isa_, m);
  if (blocks == 1) {
    PackActivations(packed_isa_, x, m, k, 0, 1, packed_x_.data());
  } else {
    pool_->ParallelFor(blocks, [&](int, int64_t begin, int64_t end) {
      PackActivations(packed_isa_, x, m, k, begin, end, packed_x_.data());
    });
  }
  pool_->ParallelFor(w.num_panels(), [&](int thread, int64_t begin, int64_t end) {
    std::vector<float>& scratch = panels_[thread];
    scratch.resize(PackedMatrix::kPanelRows * k);
    PackedGemm(packed_isa_, packed_x_.data(), m, w, begin, end, out, w.rows(), scratch.data());
  });
}

void MatMul::RunQuantizedDot(const float* x, int64_t m, const PackedMatrix& w, float* out) {
  // m * k work against the n * k of the product: one thread quantizes.
  QuantizeActivations(x, m, w, &x_quantized_);
  pool_->ParallelFor(w.num_panels(), [&](int, int64_t begin, int64_t end) {
    QuantizedDotGemm(dot_isa_, x_quantized_, w, begin, end, out, w.rows());
  });
}

void MatMul::RunBaseline(const float* x, int64_t m, const PackedMatrix& w, float* out) {
  pool_->ParallelFor(w.num_panels(), [&](int thread, int64_t begin, int64_t end) {
    std::vector<float>& scratch = panels_[thread];
    scratch.resize(PackedMatrix::kPanelRows * w.cols());
    PackedGemmBaseline(x, m, w, begin, end, out, w.rows(), scratch.data());
  });
}

void MatMul::RunDense(const float* x, int64_t m, const Tensor& w, float* out) {
  const int64_t n = w.shape()[0], k = w.shape()[1];
  // bf16 weights meet bf16 activations (bf16_gemm.h), on every CPU: with the bf16 dot product
  // where there is one, elsewhere widened back to f32 for the paths below.
  const bool bf16_dot = w.dtype() == DType::kBF16 && Bf16GemmAvailable();
  if (w.dtype() == DType::kBF16) {
    x_bf16_.resize(m * k);
    RoundToBf16(x, m * k, x_bf16_.data());
    if (!bf16_dot) {
      x_rounded_.resize(m * k);
      ConvertElements(x_bf16_.data(), DType::kBF16, x_rounded_.data(), DType::kF32, m * k);
      x = x_rounded_.data();
    }
  }
  // Slices of at least 16 rows keep BLAS calls worth their overhead.
  const int64_t slices = std::min<int64_t>(pool_->num_threads(), std::max<int64_t>(1, n / 16));
  pool_->ParallelFor(slices, [&](int thread, int64_t begin_slice, int64_t end_slice) {
    for (int64_t slice = begin_slice; slice < end_slice; ++slice) {
      const int64_t row_begin = n * slice / slices, row_end = n * (slice + 1) / slices;
      const auto* bytes = static_cast<const unsigned char*>(w.data());
      if (bf16_dot) {
        Bf16Gemm(x_bf16_.data(), m, k, w.data_as<uint16_t>() + row_begin * k, row_end - row_begin,
                 out + row_begin, n);
        continue;
      }
      if (w.dtype() == DType::kBF16 && m <= kSmallBatchGemvMaxRows && SmallBatchGemvAvailable()) {
        SmallBatchGemv(x, m, k, w.data_as<uint16_t>() + row_begin * k, row_end - row_begin,
                       out + row_begin, n);
        continue;
      }
      if (w.dtype() == DType::kF32) {
        MultiplyF32(x, m, k, w.data_as<float>() + row_begin * k, row_end - row_begin,
                    out + row_begin, n);
        continue;
      }
      std::vector<float>& panel = panels_[thread];
      const int64_t panel_rows = std::max<int64_t>(1, kPanelElements / k);
      panel.resize(panel_rows * k);
      for (int64_t r = row_begin; r < row_end; r += panel_rows) {
        const int64_t rows = std::min(panel_rows, row_end - r);
        ConvertElements(bytes + r * k * DTypeSize(w.dtype()), w.dtype(), panel.data(), DType::kF32,
                        rows * k);
        MultiplyF32(x, m, k, panel.data(), rows, out + r, n);
      }
    }
  });
}

}  // namespace llmserve::worker::cpu
