// A projection weight [n, k] in f32, f16, int8 or int4, rearranged once at load for the packed GEMM
// (packed_gemm.h): panels of kPanelRows output rows, and inside a panel the kPanelRows weights of
// each input column side by side (k-major). The kernel then reads a panel front to back as one
// stream, loading the weights of 32 outputs for one input at a time, and broadcasts activations
// against them; no per-call repacking (which cost BLAS a third of its time at batch 32), and one
// sequential stream per thread, which the kernels prefetch ahead of their loads (PrefetchStream,
// simd.h) to read it at the memory's bandwidth.
//
// int8 matrices (--quantization=int8, quantization.h) are quantized from an f32/f16/bf16 weight
// while packed: the same panels of int8 values, plus one f32 scale per row (kPanelRows per panel),
// so that a panel is read as 32 bytes per input column, a quarter of f32.
//
// int4 matrices (AWQ/GPTQ checkpoints, GGUF Q4 blocks, int4_matrix.h) keep their group
// quantization: a panel is read as 16 bytes per input column, byte b (0..15) of column c holding,
// with h = b / 8 and j = b % 8, row 16h + j in its low nibble and row 16h + 8 + j in its high one.
// One zero-extended 8-byte load then gives AVX2 a half of 16 rows (its low nibbles rows 0..7, its
// high ones 8..15) and one 16-byte load gives AVX-512 all 32 (low nibbles rows 0..7 and 16..23,
// high ones 8..15 and 24..31), with no shuffle per column. Each (panel, group) has 32 f32 scales
// and 32 f32 offsets (Int4Matrix::Offset: scale * zero, or GGUF's own), so that w = q * scale -
// offset is one fused multiply-subtract and the kernels can apply both once per group to sums of x
// * q (packed_gemm.h).
//
// The last panel is padded with zero rows. Thread-safe after construction: immutable.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_PACKED_MATRIX_H_
#define LLMSERVE_WORKER_ENGINE_CPU_PACKED_MATRIX_H_

#include <cstdint>
#include <memory>

#include "common/base/huge_page_memory.h"
#include "worker/engine/cpu/parallel_for_pool.h"
#include "worker/model/dtype.h"
#include "worker/model/int4_matrix.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker::cpu {

// The element type of a packed matrix's panels.
enum class PackedElement { kF32, kF16, kInt8, kInt4 };

class PackedMatrix {
 public:
  static constexpr int64_t kPanelRows = 32;

  PackedMatrix() = default;
  // `w` is a 2-D f32 or f16 tensor [n, k]. Packs on `pool`'s threads when given.
  explicit PackedMatrix(const Tensor& w, ParallelForPool* pool = nullptr);
  // `w` is a 2-D f32, f16 or bf16 tensor [n, k] of finite values (CheckQuantizable): quantized
  // per row to int8 (QuantizeRowInt8) and packed, on `pool`'s threads when given.
  static PackedMatrix QuantizeInt8(const Tensor& w, ParallelForPool* pool = nullptr);
  // `w` (rows, cols and group_size > 0, cols even and a multiple of group_size, vectors of their
  // sizes: CHECKed) packed with its groups, on `pool`'s threads when given.
  static PackedMatrix PackInt4(const Int4Matrix& w, ParallelForPool* pool = nullptr);

  PackedElement element() const { return element_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t num_panels() const { return (rows_ + kPanelRows - 1) / kPanelRows; }
  // Panel p: cols() groups of kPanelRows elements of element(); element [c][r] is w[p * 32 + r, c]
  // (int4: 16 bytes per column, as the top of this file says).
  const void* panel(int64_t p) const { return data_.get() + p * PanelBytes(); }
  int64_t PanelBytes() const {
    return element_ == PackedElement::kInt4 ? kPanelRows / 2 * cols_
                                            : kPanelRows * cols_ * ElementBytes();
  }
  // int8 only: the kPanelRows row scales of panel p (0 for padding rows).
  const float* scales(int64_t p) const { return scales_.get() + p * kPanelRows; }
  // int4 only: columns per quantization group (it divides cols()), and groups per row.
  int64_t group_size() const { return group_size_; }
  int64_t groups() const { return group_size_ == 0 ? 0 : cols_ / group_size_; }
  // int4 only: panel p's group data, [groups()][2][kPanelRows] f32: for group g, the 32 rows'
  // scales at 64g and their offsets scale * zero at 64g + 32 (both 0 for padding rows).
  const float* group_data(int64_t p) const { return scales_.get() + p * groups() * 2 * kPanelRows; }
  // Bytes of the panels and scales (int4: and group data).
  int64_t SizeBytes() const;

  // Row r of w widened (dequantized) to f32 into out[0, cols()): the embedding lookup of a tied
  // LM head.
  void CopyRow(int64_t r, float* out) const;

 private:
  int64_t ElementBytes() const {
    return element_ == PackedElement::kF32 ? 4 : element_ == PackedElement::kF16 ? 2 : 1;
  }
  void Allocate();

  PackedElement element_ = PackedElement::kF32;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  int64_t group_size_ = 0;  // int4 only
  // On huge pages (common/base/huge_page_memory.h): decode streams every panel once per step.
  std::unique_ptr<unsigned char[], HugePageMemoryDeleter> data_;
  // int8: [num_panels() * kPanelRows]; int4: [num_panels() * groups() * 2 * kPanelRows].
  std::unique_ptr<float[]> scales_;
};

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_PACKED_MATRIX_H_
