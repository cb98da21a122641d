#ifndef LLMSERVE_COMMON_BASE_STRING_VIEWS_H_
#define LLMSERVE_COMMON_BASE_STRING_VIEWS_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace llmserve::common {

// Debian's Abseil is built with its own string_view type rather than std::string_view, so the two
// do not convert implicitly; these convert without copying.
inline absl::string_view AsAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}
inline std::string_view AsStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_STRING_VIEWS_H_
