// Fuzzes the GGUF parser (header, metadata, tensor infos, alignment, placement): arbitrary bytes
// must give a file or an error, never a crash or an overread; every tensor handed out must lie
// inside the buffer with the byte size its type and shape imply; and every accepted tensor and
// metadata value must be readable through the public lookups and the dequantizer.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/types/span.h"
#include "worker/model/gguf/gguf_dequantize.h"
#include "worker/model/gguf/gguf_file.h"

namespace {

using llmserve::worker::gguf::GgmlTypeInfo;
using llmserve::worker::gguf::GgmlTypeInfoOf;
using llmserve::worker::gguf::GgufFile;
using llmserve::worker::gguf::GgufMetadata;
using llmserve::worker::gguf::GgufTensor;
using llmserve::worker::gguf::GgufValueType;

void ReadEveryValue(const GgufMetadata& metadata) {
  for (const auto& [key, value] : metadata.entries()) {
    if (metadata.Find(key) != &value) std::abort();
    (void)metadata.GetInt(key);
    (void)metadata.GetFloat(key);
    (void)metadata.GetString(key);
    (void)metadata.GetBool(key);
    (void)metadata.GetStringArray(key);
    (void)metadata.GetIntArray(key);
    (void)metadata.GetFloatArray(key);
    if (value.type == GgufValueType::kArray && value.element_type == GgufValueType::kString &&
        value.strings.size() != value.count) {
      std::abort();
    }
  }
}

void CheckTensor(const GgufFile& file, const GgufTensor& tensor, const uint8_t* data, size_t size) {
  if (tensor.data < data || tensor.size > size ||
      tensor.data - data > static_cast<ptrdiff_t>(size - tensor.size)) {
    std::abort();
  }
  if (tensor.offset % file.alignment() != 0 || file.FindTensor(tensor.name) != &tensor) {
    std::abort();
  }
  const GgmlTypeInfo& info = GgmlTypeInfoOf(tensor.type);
  if (tensor.row_length() % info.block_size != 0 ||
      static_cast<uint64_t>(tensor.num_elements / info.block_size * info.block_bytes) !=
          tensor.size) {
    std::abort();
  }
  // Every byte of the tensor is read (its first and last rows when it is large).
  const int64_t rows = tensor.num_rows();
  const int64_t rows_to_read = tensor.num_elements <= (1 << 16) ? rows : 1;
  if (tensor.row_length() > (1 << 16)) return;
  std::vector<float> out(static_cast<size_t>(rows_to_read * tensor.row_length()));
  if (!llmserve::worker::gguf::DequantizeRows(tensor, 0, rows_to_read, absl::MakeSpan(out)).ok() ||
      !llmserve::worker::gguf::DequantizeRows(tensor, rows - rows_to_read, rows_to_read,
                                              absl::MakeSpan(out))
           .ok()) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = GgufFile::Parse("fuzz.gguf", data, size);
  if (!file.ok()) return 0;
  if ((*file)->data_offset() % (*file)->alignment() != 0) std::abort();
  ReadEveryValue((*file)->metadata());
  for (const GgufTensor& tensor : (*file)->tensors()) CheckTensor(**file, tensor, data, size);
  return 0;
}
