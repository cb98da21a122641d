// out[m, n] = x[m, k] · w[n, k]^T for projection weights in f32, bf16 or f16.
// Threads split the n dimension, so each weight byte is read by one thread once per call, whatever
// m is (decode reads every weight byte once per step for the whole batch).
//
// f32 and f16 weights are packed at load (packed_matrix.h) and multiplied by the packed GEMM
// (packed_gemm.h) for every batch size, where the CPU has AVX-512 or AVX2. int8 weights
// (--quantization=int8) are quantized and packed at load on every CPU, and run the packed GEMM
// where there is one, PackedGemmBaseline elsewhere; so do 4-bit group-quantized (AWQ/GPTQ) weights,
// packed at load from their canonical Int4Matrix. bf16 weights multiply
// bf16-rounded activations (bf16_gemm.h): with AVX512-BF16 for every batch size, elsewhere widened
// back to f32, where bf16 weights go to SmallBatchGemv for up to 4 rows (bandwidth-bound decode).
// Everything else (and everything on a CPU with neither AVX-512 nor AVX2) goes to OpenBLAS
// (single-threaded per slice: we own the threading), 16-bit weights widened to f32 a panel of rows
// at a time into per-thread scratch.
//
// With quantized activations (off by default), int8 and int4 weights at batches of up to
// kQuantizedDotMaxRows rows multiply activations quantized per token to int8 with integer dot
// products (quantized_dot.h), on every CPU; larger batches keep the f32 kernels.
//
// Thread-compatible: call from the engine thread.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_MATMUL_H_
#define LLMSERVE_WORKER_ENGINE_CPU_MATMUL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "worker/engine/cpu/aligned_vector.h"
#include "worker/engine/cpu/packed_matrix.h"
#include "worker/engine/cpu/parallel_for_pool.h"
#include "worker/engine/cpu/quantized_dot.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker::cpu {

// How a ProjectionWeight is stored: kBest packs f32/f16 weights where the packed GEMM runs;
// kDense keeps [n, k] rows (tests use it to check the dense paths on every CPU).
enum class WeightLayout { kBest, kDense };

// A projection weight [n, k] in the layout MatMul runs it in. Movable, immutable once built.
class ProjectionWeight {
 public:
  ProjectionWeight() = default;
  // Takes the tensor; when packed (on `pool`'s threads, if given), its dense copy is freed.
  explicit ProjectionWeight(Tensor w, WeightLayout layout = WeightLayout::kBest,
                            ParallelForPool* pool = nullptr);
  // `w` (f32, f16 or bf16, finite: CheckQuantizable) quantized to int8 per row and packed, on
  // `pool`'s threads if given; the caller keeps `w`.
  static ProjectionWeight QuantizedInt8(const Tensor& w, ParallelForPool* pool = nullptr);
  // `w` (valid: PackedMatrix::PackInt4 CHECKs it) packed with its groups, on `pool`'s threads if
  // given; the caller keeps `w`. Its dtype() is kF32, what its dequantized values are.
  static ProjectionWeight Int4(const Int4Matrix& w, ParallelForPool* pool = nullptr);

  bool empty() const { return rows_ == 0; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // The dtype of the weight it was built from (an int8 weight's source dtype; kF32 for int4).
  DType dtype() const { return dtype_; }
  bool is_packed() const { return is_packed_; }
  bool is_int8() const { return is_packed_ && packed_.element() == PackedElement::kInt8; }
  bool is_int4() const { return is_packed_ && packed_.element() == PackedElement::kInt4; }
  // Bytes it holds (packed or dense; a quantized weight's values, scales and offsets).
  int64_t SizeBytes() const;
  const Tensor& dense() const { return dense_; }
  const PackedMatrix& packed() const { return packed_; }

  // Row r widened to f32 into out[0, cols()): the embedding lookup of a tied LM head.
  void CopyRow(int64_t r, float* out) const;

 private:
  DType dtype_ = DType::kF32;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  bool is_packed_ = false;
  Tensor dense_;
  PackedMatrix packed_;
};

class MatMul {
 public:
  // `quantized_activations`: int8 and int4 weights at small batches take the integer-dot path
  // (quantized_dot.h), which computes with activations quantized to int8 per block.
  explicit MatMul(ParallelForPool* pool, bool quantized_activations = false);

  // x is [m, w.cols()] row-major; out is [m, w.rows()] row-major.
  void Run(const float* x, int64_t m, const ProjectionWeight& w, float* out);

 private:
  void RunPacked(const float* x, int64_t m, const PackedMatrix& w, float* out);
  void RunDense(const float* x, int64_t m, const Tensor& w, float* out);
  void RunBaseline(const float* x, int64_t m, const PackedMatrix& w, float* out);
  void RunQuantizedDot(const float* x, int64_t m, const PackedMatrix& w, float* out);

  ParallelForPool* pool_;
  std::string packed_isa_;  // the packed GEMM's instruction set, if any
  bool quantized_activations_;
  std::string dot_isa_;                     // the integer-dot kernels' instruction set
  QuantizedActivations x_quantized_;        // for the integer-dot path
  AlignedVector<float> packed_x_;           // activations in the packed GEMM's blocks
  std::vector<std::vector<float>> panels_;  // per-thread scratch for widened weights
  AlignedVector<uint16_t> x_bf16_;          // activations rounded to bf16, for bf16 weights
  AlignedVector<float> x_rounded_;          // the same widened back, where there is no bf16 GEMM
};

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_MATMUL_H_
