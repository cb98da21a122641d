#include "common/base/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace llmserve::common {

absl::StatusOr<std::string> ReadFileUpTo(const std::string& path, size_t max_bytes,
                                         absl::string_view what) {
  // O_NONBLOCK: opening a FIFO with no writer returns at once (and reads nothing) instead of
  // waiting for one.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", what, " ", path, ": ", std::strerror(errno)));
  }
  struct stat info;
  if (fstat(fd, &info) == 0 && S_ISDIR(info.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is a directory"));
  }
  std::string contents;
  char buffer[8192];
  absl::Status status;
  while (status.ok()) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;  // a FIFO or socket with nothing to read now
      status = absl::UnavailableError(
          absl::StrCat("cannot read ", what, " ", path, ": ", std::strerror(errno)));
    } else {
      contents.append(buffer, static_cast<size_t>(n));
      if (contents.size() > max_bytes) {
        status = absl::InvalidArgumentError(
            absl::StrCat(what, " ", path, " is larger than ", max_bytes, " bytes"));
      }
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return contents;
}

}  // namespace llmserve::common
