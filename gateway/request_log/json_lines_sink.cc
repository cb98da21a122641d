#include "gateway/request_log/json_lines_sink.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace llmserve::gateway {
namespace {

absl::StatusOr<int> OpenForAppend(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    const int error = errno;
    return absl::ErrnoToStatus(error, absl::StrCat("request log file ", path));
  }
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("request log file ", path, " is not a regular file"));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<JsonLinesSink>> JsonLinesSink::Open(std::string path) {
  if (path.empty()) return absl::InvalidArgumentError("request log file: empty path");
  absl::StatusOr<int> fd = OpenForAppend(path);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<JsonLinesSink>(new JsonLinesSink(std::move(path), *fd));
}

JsonLinesSink::~JsonLinesSink() {
  if (fd_ >= 0) close(fd_);
}

absl::Status JsonLinesSink::ReopenIfMoved() {
  struct stat open_file {};
  struct stat at_path {};
  const bool same = fd_ >= 0 && fstat(fd_, &open_file) == 0 && stat(path_.c_str(), &at_path) == 0 &&
                    open_file.st_dev == at_path.st_dev && open_file.st_ino == at_path.st_ino;
  if (same) return absl::OkStatus();
  absl::StatusOr<int> fd = OpenForAppend(path_);
  if (!fd.ok()) return absl::UnavailableError(fd.status().message());
  if (fd_ >= 0) close(fd_);
  fd_ = *fd;
  return absl::OkStatus();
}

absl::Status JsonLinesSink::Write(absl::Span<const RequestRecord> records) {
  if (absl::Status reopened = ReopenIfMoved(); !reopened.ok()) return reopened;
  std::string lines;
  for (const RequestRecord& record : records) {
    absl::StrAppend(&lines, RequestRecordJson(record), "\n");
  }
  // Only this thread appends, so the size now is where this batch begins.
  struct stat before {};
  if (fstat(fd_, &before) != 0) {
    return absl::UnavailableError(absl::StrCat("request log file ", path_, ": ", strerror(errno)));
  }
  size_t written = 0;
  while (written < lines.size()) {
    const ssize_t n = write(fd_, lines.data() + written, lines.size() - written);
    if (n > 0) {
      written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int error = n < 0 ? errno : ENOSPC;
    // All or nothing: the retry writes the whole batch again.
    if (ftruncate(fd_, before.st_size) != 0) {
      return absl::UnavailableError(absl::StrCat("request log file ", path_, ": ", strerror(error),
                                                 ", and cannot cut back the "
                                                 "partial batch: ",
                                                 strerror(errno)));
    }
    return absl::UnavailableError(absl::StrCat("request log file ", path_, ": ", strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace llmserve::gateway
