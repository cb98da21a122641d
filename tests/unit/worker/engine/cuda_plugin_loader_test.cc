// The CUDA plugin loader, on any machine: a missing plugin is NOT_FOUND naming where it looked, a
// file that is not a plugin is FAILED_PRECONDITION with the loader's reason, and in builds with
// the CUDA backend the real plugin loads (cuBLAS included) and reaches the device check.
//
// Each case runs in a child process (death-test style fork), because the loader remembers the
// first plugin it loaded for the life of the process.

#include "worker/engine/cuda/cuda_plugin_loader.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"

namespace llmserve::worker {
namespace {

// Runs CheckCudaDevice(0) with LLMSERVE_CUDA_PLUGIN set to `plugin` (unset when empty) in a
// child and exits with 0 when `expect` holds for the status.
template <typename Expect>
void ExpectInChild(const std::string& plugin, Expect expect) {
  EXPECT_EXIT(
      {
        if (plugin.empty()) {
          unsetenv("LLMSERVE_CUDA_PLUGIN");
        } else {
          setenv("LLMSERVE_CUDA_PLUGIN", plugin.c_str(), 1);
        }
        const absl::Status status = CheckCudaDevice(0);
        fprintf(stderr, "status: %s\n", status.ToString().c_str());
        std::exit(expect(status) ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "status: ");
}

TEST(CudaPluginLoaderTest, MissingPluginIsNotFoundNamingThePath) {
  ExpectInChild("/nonexistent/libllmserve_cuda.so", [](const absl::Status& status) {
    return status.code() == absl::StatusCode::kNotFound &&
           status.message().find("/nonexistent/libllmserve_cuda.so") != absl::string_view::npos &&
           status.message().find("no CUDA backend") != absl::string_view::npos;
  });
}

TEST(CudaPluginLoaderTest, FileThatIsNotAPluginIsFailedPrecondition) {
  llmserve::testing::ScopedTempDir dir("cuda_plugin_loader_test");
  const std::string path = dir.path() + "/libllmserve_cuda.so";
  std::ofstream(path) << "not an ELF file";
  ExpectInChild(path, [&path](const absl::Status& status) {
    return status.code() == absl::StatusCode::kFailedPrecondition &&
           status.message().find(path) != absl::string_view::npos;
  });
}

TEST(CudaPluginLoaderTest, BuiltPluginLoadsAndReachesTheDeviceCheck) {
#if !defined(LLMSERVE_CUDA_PLUGIN_BUILT)
  GTEST_SKIP() << "this build has no CUDA backend plugin (no nvcc)";
#else
  // Found beside the test binary's directory (build/lib), as the worker finds it.
  ExpectInChild("", [](const absl::Status& status) {
    return status.ok() || (status.code() == absl::StatusCode::kFailedPrecondition &&
                           status.message().find("no CUDA device") != absl::string_view::npos);
  });
#endif
}

}  // namespace
}  // namespace llmserve::worker
