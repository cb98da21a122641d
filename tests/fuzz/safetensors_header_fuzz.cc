// Fuzzes the safetensors header parser: arbitrary bytes must give a tensor list or an error,
// never a crash, and every tensor handed out must lie inside the buffer.

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "worker/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto tensors = llmserve::worker::ParseSafetensors("fuzz", data, size);
  if (!tensors.ok()) return 0;
  for (const auto& tensor : *tensors) {
    if (tensor.data < data || tensor.data + tensor.size > data + size) std::abort();
    if (static_cast<uint64_t>(tensor.NumElements()) * tensor.element_size != tensor.size) {
      std::abort();
    }
  }
  return 0;
}
