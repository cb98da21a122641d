// The boundary between the worker and libllmserve_cuda.so, the plugin that holds the CUDA backend.
//
// Why a plugin: cuBLAS is large (its libraries map hundreds of MB at start) and libcublasLt has
// 94 KB of thread-local storage. Linked into the worker, that TLS lands in every thread's static
// TLS block, and threads created with small stacks (CivetWeb's, serving /metrics) then fail to
// start; and a CUDA build of the worker could not start at all on a machine without the CUDA
// libraries. Loaded with dlopen only for --backend=cuda, the libraries cost a CPU worker nothing
// and their TLS is allocated per thread on demand.
//
// The plugin is built from the same tree as the binary that loads it: the two share C++ types
// (ModelWeights, Backend, absl::Status) across the boundary, so the loader checks
// kCudaPluginAbiVersion and refuses any other.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_CUDA_PLUGIN_API_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_CUDA_PLUGIN_API_H_

#include "absl/status/status.h"
#include "worker/engine/backend.h"
#include "worker/engine/cuda/cuda_backend_options.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker {

// Bump when anything the plugin and its loader share changes shape.
inline constexpr int kCudaPluginAbiVersion = 2;

// The plugin's file name; the loader looks for it beside the binary's directory (../lib/) and in
// it, unless LLMSERVE_CUDA_PLUGIN names the file.
inline constexpr char kCudaPluginFileName[] = "libllmserve_cuda.so";

// int llmserve_cuda_abi_version(void)
inline constexpr char kCudaPluginAbiVersionSymbol[] = "llmserve_cuda_abi_version";
using CudaPluginAbiVersionFn = int (*)();

// void llmserve_cuda_check_device(int device, absl::Status* status): CudaBackend::CheckDevice.
inline constexpr char kCudaPluginCheckDeviceSymbol[] = "llmserve_cuda_check_device";
using CudaPluginCheckDeviceFn = void (*)(int device, absl::Status* status);

// Backend* llmserve_cuda_create_backend(const ModelWeights* weights, const CudaBackendOptions*
// options, absl::Status* status): CudaBackend::Create. Takes ownership of `weights`; returns the
// backend (owned by the caller) or null with *status set.
inline constexpr char kCudaPluginCreateBackendSymbol[] = "llmserve_cuda_create_backend";
using CudaPluginCreateBackendFn = Backend* (*)(const ModelWeights* weights,
                                               const CudaBackendOptions* options,
                                               absl::Status* status);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_CUDA_PLUGIN_API_H_
