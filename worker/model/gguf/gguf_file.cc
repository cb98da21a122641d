#include "worker/model/gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace llmserve::worker::gguf {

GgufFile::GgufFile(std::string name, void* mapping, size_t mapping_size, GgufContents contents)
    : name_(std::move(name)),
      mapping_(mapping),
      mapping_size_(mapping_size),
      contents_(std::move(contents)) {
  index_.reserve(contents_.tensors.size());
  for (size_t i = 0; i < contents_.tensors.size(); ++i) index_[contents_.tensors[i].name] = i;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(absl::string_view name,
                                                          const unsigned char* data, size_t size) {
  absl::StatusOr<GgufContents> contents = ParseGguf(name, data, size);
  if (!contents.ok()) return contents.status();
  return std::unique_ptr<GgufFile>(
      new GgufFile(std::string(name), nullptr, 0, *std::move(contents)));
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    const std::string message = absl::StrCat(path, ": ", std::strerror(error));
    return error == ENOENT ? absl::NotFoundError(message) : absl::InvalidArgumentError(message);
  }
  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(info.st_size);
  if (size == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file, not a GGUF file"));
  }
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_error = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (mapping == MAP_FAILED) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": mmap failed: ", std::strerror(map_error)));
  }
  absl::StatusOr<GgufContents> contents =
      ParseGguf(path, static_cast<const unsigned char*>(mapping), size);
  if (!contents.ok()) {
    ::munmap(mapping, size);
    return contents.status();
  }
  return std::unique_ptr<GgufFile>(new GgufFile(path, mapping, size, *std::move(contents)));
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
