#include "worker/engine/cuda/cuda_plugin_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "worker/engine/cuda/cuda_plugin_api.h"

namespace llmserve::worker {
namespace {

struct CudaPlugin {
  CudaPluginCheckDeviceFn check_device = nullptr;
  CudaPluginCreateBackendFn create_backend = nullptr;
};

std::vector<std::string> CandidatePaths() {
  if (const char* path = std::getenv("LLMSERVE_CUDA_PLUGIN"); path != nullptr && *path != '\0') {
    return {path};
  }
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return {kCudaPluginFileName};
  const std::filesystem::path dir = exe.parent_path();
  // bin/../lib/ is where the build (and an install) puts it; beside the binary is the fallback.
  return {(dir.parent_path() / "lib" / kCudaPluginFileName).string(),
          (dir / kCudaPluginFileName).string()};
}

absl::StatusOr<CudaPlugin> Load() {
  const std::vector<std::string> paths = CandidatePaths();
  std::string path;
  for (const std::string& candidate : paths) {
    std::error_code error;
    if (std::filesystem::exists(candidate, error)) {
      path = candidate;
      break;
    }
  }
  if (path.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "--backend=cuda needs the CUDA backend plugin ", kCudaPluginFileName, ", not found at ",
        absl::StrJoin(paths, " or "),
        ": this build has no CUDA backend (it is built where nvcc is found, LLMSERVE_CUDA=AUTO or "
        "ON), or set LLMSERVE_CUDA_PLUGIN to its path"));
  }
  // Never closed: the backends it creates run its code until the process exits.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load the CUDA backend plugin ", path, ": ", dlerror()));
  }
  auto symbol = [handle](const char* name) { return dlsym(handle, name); };
  auto abi_version = reinterpret_cast<CudaPluginAbiVersionFn>(symbol(kCudaPluginAbiVersionSymbol));
  CudaPlugin plugin{
      .check_device =
          reinterpret_cast<CudaPluginCheckDeviceFn>(symbol(kCudaPluginCheckDeviceSymbol)),
      .create_backend =
          reinterpret_cast<CudaPluginCreateBackendFn>(symbol(kCudaPluginCreateBackendSymbol)),
  };
  if (abi_version == nullptr || plugin.check_device == nullptr ||
      plugin.create_backend == nullptr || abi_version() != kCudaPluginAbiVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA backend plugin ", path, " does not match this binary (plugin ABI version ",
        abi_version == nullptr ? -1 : abi_version(), ", expected ", kCudaPluginAbiVersion,
        "): use the plugin built with it"));
  }
  // Which file serves --backend=cuda: LLMSERVE_CUDA_PLUGIN can name another build's, or the
  // test-only emulated one (docs/cuda.md).
  LLMSERVE_LOG(INFO) << "CUDA backend plugin: " << path;
  return plugin;
}

const absl::StatusOr<CudaPlugin>& Plugin() {
  static const auto* const plugin = new absl::StatusOr<CudaPlugin>(Load());
  return *plugin;
}

}  // namespace

absl::Status CheckCudaDevice(int device) {
  const absl::StatusOr<CudaPlugin>& plugin = Plugin();
  if (!plugin.ok()) return plugin.status();
  absl::Status status;
  plugin->check_device(device, &status);
  return status;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    std::unique_ptr<const ModelWeights> weights, const CudaBackendOptions& options) {
  const absl::StatusOr<CudaPlugin>& plugin = Plugin();
  if (!plugin.ok()) return plugin.status();
  absl::Status status;
  // The plugin takes ownership whether or not it succeeds.
  Backend* backend = plugin->create_backend(weights.release(), &options, &status);
  if (backend == nullptr) return status;
  return std::unique_ptr<Backend>(backend);
}

}  // namespace llmserve::worker
