// Sizes given by people on command lines: "4GiB", "512MiB", "1.5G", "65536".
//
// Thread-safe: a pure function.

#ifndef LLMSERVE_COMMON_BASE_BYTE_SIZE_H_
#define LLMSERVE_COMMON_BASE_BYTE_SIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llmserve::common {

// A non-negative number (decimals allowed) with an optional unit: B, K/KB/KiB, M/MB/MiB,
// G/GB/GiB, T/TB/TiB (case-insensitive). Units are binary (1K = 1024) either way, as memory
// sizes are. INVALID_ARGUMENT naming the text when it is anything else or exceeds 2^62 bytes.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_BYTE_SIZE_H_
