// out[m, n] = x[m, k] · w[n, k]^T for weights kept as [out, in] rows in f32, bf16 or f16.
// Threads split the n dimension, so each weight row is read by one thread once per call,
// whatever m is (decode reads every weight byte once per step for the whole batch).
//
// f32 weights go straight to OpenBLAS (single-threaded per slice; we own the threading).
// bf16/f16 weights are widened to f32 a panel of rows at a time into per-thread scratch, then
// multiplied by OpenBLAS.
//
// Thread-compatible: call from the engine thread.

#ifndef LLMSERVE_WORKER_ENGINE_CPU_MATMUL_H_
#define LLMSERVE_WORKER_ENGINE_CPU_MATMUL_H_

#include <cstdint>
#include <vector>

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
};

}  // namespace llmserve::worker::cpu

#endif  // LLMSERVE_WORKER_ENGINE_CPU_MATMUL_H_
