#include "worker/model/safetensors_writer.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace llmserve::worker {

void SafetensorsWriter::Add(const std::string& name, const std::string& dtype,
                            std::vector<int64_t> shape, std::string bytes) {
  tensors_[name] = Entry{dtype, std::move(shape), std::move(bytes)};
}

void SafetensorsWriter::SetMetadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

std::string SafetensorsWriter::Header() const {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const auto& [name, entry] : tensors_) {
    header[name] = {{"dtype", entry.dtype},
                    {"shape", entry.shape},
                    {"data_offsets", {offset, offset + entry.bytes.size()}}};
    offset += entry.bytes.size();
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::string prefix(8, '\0');
  const uint64_t header_size = header_text.size();
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((header_size >> (8 * i)) & 0xff);
  return prefix + header_text;
}

std::string SafetensorsWriter::Serialize() const {
  std::string file = Header();
  for (const auto& [name, entry] : tensors_) file += entry.bytes;
  return file;
}

absl::Status SafetensorsWriter::WriteFile(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot create ", path));
  const std::string header = Header();
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  // Tensor by tensor: a model's weights need not be copied into one string.
  for (const auto& [name, entry] : tensors_) {
    out.write(entry.bytes.data(), static_cast<std::streamsize>(entry.bytes.size()));
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("failed writing ", path));
  return absl::OkStatus();
}

}  // namespace llmserve::worker
