// Reads a whole file that configuration names (a key, a certificate, a sysfs setting), with a
// bound: a wrong path (a log, a device such as /dev/zero) costs at most `max_bytes` + 1 bytes and
// ends with an error naming the file, never a hang or an exhausted memory.

#ifndef LLMSERVE_COMMON_BASE_READ_FILE_H_
#define LLMSERVE_COMMON_BASE_READ_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llmserve::common {

// The contents of `path`. NOT_FOUND when it cannot be opened, INVALID_ARGUMENT when it is a
// directory or holds more than `max_bytes`, UNAVAILABLE when reading fails. `what` names the file
// in messages ("JWT key file").
absl::StatusOr<std::string> ReadFileUpTo(const std::string& path, size_t max_bytes,
                                         absl::string_view what);

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_READ_FILE_H_
