#include "common/base/byte_size.h"

#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace llmserve::common {

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  size_t unit_start = 0;
  while (unit_start < trimmed.size() &&
         (absl::ascii_isdigit(trimmed[unit_start]) || trimmed[unit_start] == '.')) {
    ++unit_start;
  }
  const std::string number(trimmed.substr(0, unit_start));
  const std::string unit =
      absl::AsciiStrToLower(absl::StripLeadingAsciiWhitespace(trimmed.substr(unit_start)));
  double value = 0;
  auto invalid = [&text](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not a size: ", why, " (examples: 4GiB, 512MiB, 65536)"));
  };
  if (number.empty() || !absl::SimpleAtod(number, &value) || !std::isfinite(value)) {
    return invalid("expected a number");
  }
  double scale = 0;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    scale = 1024.0;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    scale = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "t" || unit == "tb" || unit == "tib") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return invalid(absl::StrCat("unknown unit \"", unit, "\""));
  }
  const double bytes = value * scale;
  if (bytes > std::ldexp(1.0, 62)) return invalid("too large");
  return static_cast<int64_t>(bytes);
}

}  // namespace llmserve::common
