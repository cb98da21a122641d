// A tensor of a GGUF file: its name, ggml type, shape and bytes (pointing into the file).
//
// Shapes are in GGUF (ggml) order: dims[0] is the fastest-varying dimension, so a 2-D weight
// stored as [dims[0] = in_features, dims[1] = out_features] has out_features rows of
// in_features contiguous elements (PyTorch's [out_features, in_features]). A row is dims[0]
// elements; the reader checks that dims[0] is a whole number of the type's blocks, so every row
// starts on a block boundary and can be dequantized on its own.

#ifndef LLMSERVE_WORKER_MODEL_GGUF_GGUF_TENSOR_H_
#define LLMSERVE_WORKER_MODEL_GGUF_GGUF_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "worker/model/gguf/gguf_types.h"

namespace llmserve::worker::gguf {

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  // [dims[0] (fastest), dims[1], ...]; 1 to 4 entries, each >= 1.
  std::vector<int64_t> dims;
  int64_t num_elements = 0;
  // The tensor's offset in the data section, as written in the file.
  uint64_t offset = 0;
  // `size` bytes at `data`: num_elements / block_size blocks of the type.
  const unsigned char* data = nullptr;
  size_t size = 0;

  int64_t row_length() const { return dims[0]; }
  int64_t num_rows() const { return num_elements / dims[0]; }
  // Bytes of one row.
  size_t row_bytes() const { return size / static_cast<size_t>(num_rows()); }
};

}  // namespace llmserve::worker::gguf

#endif  // LLMSERVE_WORKER_MODEL_GGUF_GGUF_TENSOR_H_
