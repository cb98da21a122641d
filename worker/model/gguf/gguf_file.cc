#include "worker/model/gguf/gguf_file.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace llmserve::worker::gguf {

GgufFile::GgufFile(std::string name, std::unique_ptr<MappedFile> mapping, GgufContents contents)
    : name_(std::move(name)), mapping_(std::move(mapping)), contents_(std::move(contents)) {
  index_.reserve(contents_.tensors.size());
  for (size_t i = 0; i < contents_.tensors.size(); ++i) index_[contents_.tensors[i].name] = i;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(absl::string_view name,
                                                          const unsigned char* data, size_t size) {
  absl::StatusOr<GgufContents> contents = ParseGguf(name, data, size);
  if (!contents.ok()) return contents.status();
  return std::unique_ptr<GgufFile>(new GgufFile(std::string(name), nullptr, *std::move(contents)));
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> mapping = MappedFile::Open(path);
  if (!mapping.ok()) return mapping.status();
  if ((*mapping)->size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file, not a GGUF file"));
  }
  absl::StatusOr<GgufContents> contents = ParseGguf(path, (*mapping)->data(), (*mapping)->size());
  if (!contents.ok()) return contents.status();
  return std::unique_ptr<GgufFile>(new GgufFile(path, *std::move(mapping), *std::move(contents)));
}

const GgufTensor* GgufFile::FindTensor(absl::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &contents_.tensors[it->second];
}

absl::StatusOr<const GgufTensor*> GgufFile::GetTensor(absl::string_view name) const {
  const GgufTensor* tensor = FindTensor(name);
  if (tensor == nullptr) {
    return absl::NotFoundError(absl::StrCat(name_, ": no tensor named '", name, "'"));
  }
  return tensor;
}

}  // namespace llmserve::worker::gguf
