// Parses and validates the layout of a GGUF file held in memory (GGUF versions 2 and 3): the
// header, the metadata key/value pairs, the tensor infos, the alignment and the position of every
// tensor's bytes. Nothing is allocated on a count read from the file before the count is checked
// against the bytes left, and every error is INVALID_ARGUMENT naming the file, the field and the
// key or tensor concerned.
//
// What is refused: a wrong magic; versions other than 2 and 3; a truncated file; more than
// kMaxTensors tensors or kMaxMetadataPairs pairs; strings (keys, names, values) longer than the
// bytes left, keys and tensor names longer than kMaxNameBytes or empty; unknown value types;
// booleans other than 0 and 1; arrays nested deeper than kMaxArrayDepth; duplicate keys or tensor
// names; general.alignment that is not a uint32 power of two; tensors with 0 or more than 4
// dimensions, a dimension of 0, an element count or byte size past 2^63, a type this reader does
// not dequantize (named), a row length that is not a whole number of blocks, an offset that is
// not a multiple of the alignment, bytes past the end of the file, or bytes shared with another
// tensor.
//
// Thread-safe: a pure function.

#ifndef LLMSERVE_WORKER_MODEL_GGUF_GGUF_PARSER_H_
#define LLMSERVE_WORKER_MODEL_GGUF_GGUF_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/model/gguf/gguf_metadata.h"
#include "worker/model/gguf/gguf_tensor.h"

namespace llmserve::worker::gguf {

// Far above any real model (llama.cpp's largest files hold a few thousand tensors and a few
// dozen keys) and low enough that the tables built for them stay small.
inline constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
inline constexpr uint64_t kMaxMetadataPairs = uint64_t{1} << 20;
inline constexpr uint64_t kMaxNameBytes = 65535;
inline constexpr int kMaxArrayDepth = 8;
inline constexpr uint64_t kDefaultAlignment = 32;

struct GgufContents {
  uint32_t version = 0;
  GgufMetadata metadata;
  // In file order; data pointers point into the parsed buffer.
  std::vector<GgufTensor> tensors;
  uint64_t alignment = kDefaultAlignment;
  // Where the data section starts in the buffer (tensor offsets are relative to it).
  uint64_t data_offset = 0;
};

// `file_name` only appears in error messages. The result points into `data`, which must outlive
// it.
absl::StatusOr<GgufContents> ParseGguf(absl::string_view file_name, const unsigned char* data,
                                       size_t size);

}  // namespace llmserve::worker::gguf

#endif  // LLMSERVE_WORKER_MODEL_GGUF_GGUF_PARSER_H_
