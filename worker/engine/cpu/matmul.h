// out[m, n] = x[m, k] · w[n, k]^T for weights kept as [out, in] rows in f32, bf16 or f16.
// Threads split the n dimension, so each weight row is read by one thread once per call,
// whatever m is (decode reads every weight byte once per step for the whole batch).
//
// Up to 4 activation rows: SmallBatchGemv (bandwidth-bound decode). More rows: f32 weights go
// straight to OpenBLAS (single-threaded per slice; we own the threading); f16 weights are widened
// to f32 a panel of rows at a time into per-thread scratch, then multiplied by OpenBLAS.
// bf16 weights multiply bf16-rounded activations (bf16_gemm.h): with AVX512-BF16 for every batch
// size, elsewhere through the paths above on the rounded values.
//
// Thread-compatible: call from the engine thread.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_MATMUL_H_
#define LLMSERVE_WORKER_ENGINE_CPU_MATMUL_H_

#include <cstdint>
#include <vector>

#include "worker/engine/cpu/aligned_vector.h"
#include "worker/engine/cpu/thread_pool.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker::cpu {

class MatMul {
 public:
  explicit MatMul(ThreadPool* pool);

  // `w` is [n, k]; x is [m, k] row-major; out is [m, n] row-major.
  void Run(const float* x, int64_t m, const Tensor& w, float* out);

 private:
  ThreadPool* pool_;
  std::vector<std::vector<float>> panels_;  // per-thread scratch for widened weight rows
  AlignedVector<uint16_t> x_bf16_;          // activations rounded to bf16, for bf16 weights
  AlignedVector<float> x_rounded_;          // the same widened back, where there is no bf16 GEMM
};

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_MATMUL_H_
