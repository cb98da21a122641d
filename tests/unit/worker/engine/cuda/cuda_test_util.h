// Helpers for the CUDA backend's tests: skipping where no device exists, device buffers from
// host vectors and back, and the normalised mean squared error of test-backend-ops.

#ifndef LLMSERVE_TESTS_UNIT_CUDA_CUDA_TEST_UTIL_H_
#define LLMSERVE_TESTS_UNIT_CUDA_CUDA_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/engine/cuda/device_memory.h"
#include "worker/engine/cuda/kernels.h"
#include "worker/model/dtype.h"

namespace llmserve::worker::cuda::testing {

// Empty when a CUDA device exists; otherwise why not.
inline std::string NoCudaDeviceReason() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    return absl::StrCat("no CUDA device: cudaGetDeviceCount returned ", cudaGetErrorName(error),
                        " (", cudaGetErrorString(error), ")");
  }
  if (count == 0) return "no CUDA device: cudaGetDeviceCount returned 0 devices";
  return "";
}

#define LLMSERVE_SKIP_WITHOUT_CUDA_DEVICE()                                                    \
  do {                                                                                         \
    const std::string llmserve_why_ = ::llmserve::worker::cuda::testing::NoCudaDeviceReason(); \
    if (!llmserve_why_.empty()) GTEST_SKIP() << llmserve_why_;                                 \
  } while (0)

inline DType HostDType(DeviceDType dtype) {
  return dtype == DeviceDType::kBF16 ? DType::kBF16 : DType::kF16;
}

// Rounds f32 values through the 16-bit type (what the device stores).
inline std::vector<float> Round16(const std::vector<float>& values, DeviceDType dtype) {
  std::vector<uint16_t> half(values.size());
  ConvertElements(values.data(), DType::kF32, half.data(), HostDType(dtype), values.size());
  std::vector<float> out(values.size());
  ConvertElements(half.data(), HostDType(dtype), out.data(), DType::kF32, values.size());
  return out;
}

template <typename T>
DeviceBuffer Upload(const std::vector<T>& values) {
  auto buffer = DeviceBuffer::Allocate(std::max<size_t>(1, values.size() * sizeof(T)), "test");
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!values.empty()) {
    EXPECT_EQ(cudaMemcpy(buffer->data(), values.data(), values.size() * sizeof(T),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  return *std::move(buffer);
}

// f32 values stored on the device in 16-bit.
inline DeviceBuffer Upload16(const std::vector<float>& values, DeviceDType dtype) {
  std::vector<uint16_t> half(values.size());
  ConvertElements(values.data(), DType::kF32, half.data(), HostDType(dtype), values.size());
  return Upload(half);
}

inline std::vector<float> Download(const DeviceBuffer& buffer, size_t count) {
  std::vector<float> out(count);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(out.data(), buffer.data(), count * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return out;
}

inline std::vector<float> Download16(const DeviceBuffer& buffer, size_t count, DeviceDType dtype) {
  std::vector<uint16_t> half(count);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(
      cudaMemcpy(half.data(), buffer.data(), count * sizeof(uint16_t), cudaMemcpyDeviceToHost),
      cudaSuccess);
  std::vector<float> out(count);
  ConvertElements(half.data(), HostDType(dtype), out.data(), DType::kF32, count);
  return out;
}

// sum((got - want)^2) / sum(want^2), as llama.cpp's test-backend-ops.
inline double Nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double error = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    error += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return norm == 0 ? error : error / norm;
}

}  // namespace llmserve::worker::cuda::testing

#endif  // LLMSERVE_TESTS_UNIT_CUDA_CUDA_TEST_UTIL_H_
