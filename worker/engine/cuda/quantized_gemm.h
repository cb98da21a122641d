// Every projection's GEMM on the CUDA backend, whatever its weight format (quantized_kernels.h's
// DeviceWeight), choosing the kernel by batch size:
//  - 16-bit weights: cuBLAS (gemm.h);
//  - int8 / int4 weights and m <= kMaxGemvBatch rows (decode steps): the GEMV kernel, which reads
//    each quantized weight once and dequantizes it in registers;
//  - int8 / int4 weights and larger batches (prefill): the weight rows are dequantized chunk by
//    chunk into a 16-bit scratch and multiplied by cuBLAS, each chunk writing its block of y's
//    columns. Dequantizing costs one pass over the weights per call, small next to a GEMM of more
//    than 8 rows on tensor cores, and needs no kernel of our own for the product.
//
// Thread-safe as the cuBLAS handle and stream it is given (the backend's, one engine thread).

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_GEMM_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_GEMM_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "worker/engine/cuda/quantized_kernels.h"

namespace llmserve::worker::cuda {

// Elements of 16-bit scratch a chunk of dequantized weight rows may take (32 MiB), when the
// weight is larger: enough rows per chunk for cuBLAS to run near its peak (8192 rows of a 2048-wide
// weight), a small allocation beside the model.
inline constexpr int64_t kDequantChunkElements = int64_t{16} << 20;

// 16-bit elements of scratch the prefill path needs for a quantized [n, k] weight: the whole
// weight when it is smaller than a chunk, else one chunk (at least one row).
int64_t DequantScratchElements(int64_t n, int64_t k);

// y[m, n] = x[m, k] · w[n, k]^T: x in `dtype` with rows k elements apart, y f32. `scratch` holds
// at least DequantScratchElements(w.n, w.k) 16-bit elements for quantized weights (unused for
// 16-bit ones); it is rewritten on `stream`, which must be the one `handle` runs on. `what` names
// the projection in errors. INVALID_ARGUMENT for a scratch too small or sizes beyond cuBLAS's
// ints; the failed launch's or cuBLAS's status otherwise.
absl::Status ProjectionGemm(cublasHandle_t handle, cudaStream_t stream, DeviceDType dtype,
                            const void* x, const DeviceWeight& w, float* y, int64_t m,
                            void* scratch, int64_t scratch_elements, const char* what);

}  // namespace llmserve::worker::cuda

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_QUANTIZED_GEMM_H_
