// A projection weight [n, k] in f32 or f16, rearranged once at load for the packed GEMM
// (packed_gemm.h): panels of kPanelRows output rows, and inside a panel the kPanelRows weights of
// each input column side by side (k-major). The kernel then reads a panel front to back as one
// stream, loading the weights of 32 outputs for one input at a time, and broadcasts activations
// against them; no per-call repacking (which cost BLAS a third of its time at batch 32), and one
// sequential stream per thread, which the hardware prefetcher follows at full bandwidth.
//
// The last panel is padded with zero rows. Thread-safe after construction: immutable.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_PACKED_MATRIX_H_
#define LLMSERVE_WORKER_ENGINE_CPU_PACKED_MATRIX_H_

#include <cstdint>
#include <memory>

#include "worker/engine/cpu/thread_pool.h"
#include "worker/model/dtype.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker::cpu {

class PackedMatrix {
 public:
  static constexpr int64_t kPanelRows = 32;

  PackedMatrix() = default;
  // `w` is a 2-D f32 or f16 tensor [n, k]. Packs on `pool`'s threads when given.
  explicit PackedMatrix(const Tensor& w, ThreadPool* pool = nullptr);

  DType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t num_panels() const { return (rows_ + kPanelRows - 1) / kPanelRows; }
  // Panel p: cols() groups of kPanelRows elements of dtype(); element [c][r] is w[p * 32 + r, c].
  const void* panel(int64_t p) const { return data_.get() + p * PanelBytes(); }
  int64_t PanelBytes() const {
    return kPanelRows * cols_ * static_cast<int64_t>(DTypeSize(dtype_));
  }

  // Row r of w widened to f32 into out[0, cols()): the embedding lookup of a tied LM head.
  void CopyRow(int64_t r, float* out) const;

 private:
  DType dtype_ = DType::kF32;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  struct AlignedDelete {
    void operator()(unsigned char* p) const;
  };
  std::unique_ptr<unsigned char[], AlignedDelete> data_;
};

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_PACKED_MATRIX_H_
