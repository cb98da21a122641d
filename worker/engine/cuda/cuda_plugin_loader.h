// Finds and loads libllmserve_cuda.so (cuda_plugin_api.h) once per process, and creates CUDA
// backends through it. Has no CUDA dependency: it builds, and fails with a clear message, where
// the plugin was never built.
//
// Thread-safe.

#ifndef LLMSERVE_WORKER_ENGINE_CUDA_CUDA_PLUGIN_LOADER_H_
#define LLMSERVE_WORKER_ENGINE_CUDA_CUDA_PLUGIN_LOADER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/engine/backend.h"
#include "worker/engine/cuda/cuda_backend_options.h"
#include "worker/model/model_weights.h"

namespace llmserve::worker {

// CudaBackend::CheckDevice through the plugin. NOT_FOUND naming the paths tried when there is no
// plugin; FAILED_PRECONDITION with the loader's message when it cannot be loaded (e.g. the CUDA
// runtime libraries are missing) or comes from another build.
absl::Status CheckCudaDevice(int device);

// CudaBackend::Create through the plugin, with the errors of CheckCudaDevice besides its own.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    std::unique_ptr<const ModelWeights> weights, const CudaBackendOptions& options);

}  // namespace llmserve::worker

#endif  // LLMSERVE_WORKER_ENGINE_CUDA_CUDA_PLUGIN_LOADER_H_
