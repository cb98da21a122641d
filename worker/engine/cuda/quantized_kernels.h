// The CUDA kernels of quantized projections (int8 per output row, 4-bit groups; the layouts are
// quantized_layout.h's): a small-batch GEMV that reads each weight once and dequantizes it in
// registers, and a dequantization of row ranges into a 16-bit scratch for cuBLAS. Dispatch
// between them is quantized_gemm.h's.
//
// Shared by nvcc and the C++ backend: includes nothing but the CUDA runtime API.
//
// Thread-safe: launchers keep no state.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_KERNELS_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/engine/cuda/device_weight.h"
#include "worker/engine/cuda/kernels.h"

namespace llmserve::worker::cuda {

// The largest batch the GEMV kernel takes: its accumulators are registers per batch row. Larger
// batches dequantize into scratch and run cuBLAS (quantized_gemm.h).
inline constexpr int32_t kMaxGemvBatch = 8;

struct QuantizedGemvParams {
  DeviceWeight w;  // kInt8 or kInt4
  // [m, k] DeviceDType, rows contiguous (stride k); 16-byte aligned for kInt4, whose lanes load 8
  // activations at once (k being a multiple of 8, every row is then aligned too).
  const void* x;
  float* y;   // [m, n] f32 out
  int32_t m;  // 1..kMaxGemvBatch
};
// y[i, r] = sum_c x[i, c] * dequantized w[r, c], f32 accumulation. One warp per output row.
// cudaErrorInvalidValue, before launching, for m outside 1..kMaxGemvBatch, a 16-bit weight or a
// misaligned kInt4 x.
cudaError_t LaunchQuantizedGemv(DeviceDType dtype, const QuantizedGemvParams& p,
                                cudaStream_t stream);

struct DequantizeParams {
  DeviceWeight w;     // kInt8 or kInt4
  int32_t first_row;  // rows [first_row, first_row + num_rows) of w
  int32_t num_rows;
  void* out;  // [num_rows, k] DeviceDType out: the dequantized weights rounded to 16 bits
};
cudaError_t LaunchDequantize(DeviceDType dtype, const DequantizeParams& p, cudaStream_t stream);

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_KERNELS_H_
