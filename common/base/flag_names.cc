#include "common/base/flag_names.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace llmserve::common {

void NormalizeFlagNames(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* arg = argv[i];
    if (std::strncmp(arg, "--", 2) != 0) continue;
    if (arg[2] == '\0') return;
    for (char* c = arg + 2; *c != '\0' && *c != '='; ++c) {
      if (*c == '-') *c = '_';
    }
  }
}

bool CommandLineSetsFlag(int argc, char* const* argv, absl::string_view name) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") return false;
    if (!absl::ConsumePrefix(&arg, "-")) continue;
    absl::ConsumePrefix(&arg, "-");
    arg = arg.substr(0, arg.find('='));
    if (arg == name || (absl::StartsWith(arg, "no") && arg.substr(2) == name)) return true;
  }
  return false;
}

}  // namespace llmserve::common
