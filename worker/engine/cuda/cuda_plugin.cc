// The entry points of libllmserve_cuda.so (see cuda_plugin_api.h). Nothing else is exported: the
// plugin links with --exclude-libs,ALL and these are the only default-visibility symbols.

#include <memory>

#include "worker/engine/cuda/cuda_backend.h"
#include "worker/engine/cuda/cuda_plugin_api.h"

using llmserve::worker::Backend;
using llmserve::worker::CudaBackend;
using llmserve::worker::CudaBackendOptions;
using llmserve::worker::ModelWeights;

extern "C" __attribute__((visibility("default"))) int llmserve_cuda_abi_version() {
  return llmserve::worker::kCudaPluginAbiVersion;
}

extern "C" __attribute__((visibility("default"))) void llmserve_cuda_check_device(
    int device, absl::Status* status) {
  *status = CudaBackend::CheckDevice(device);
}

extern "C" __attribute__((visibility("default"))) Backend* llmserve_cuda_create_backend(
    const ModelWeights* weights, const CudaBackendOptions* options, absl::Status* status) {
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend =
      CudaBackend::Create(std::unique_ptr<const ModelWeights>(weights), *options);
  if (!backend.ok()) {
    *status = backend.status();
    return nullptr;
  }
  *status = absl::OkStatus();
  return backend->release();
}
