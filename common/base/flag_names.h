// Lets command lines spell flags with dashes (--prompt-len) as well as with Abseil's underscores
// (--prompt_len): call before absl::ParseCommandLine. And tells a flag the command line set from
// one left at its default, for flags whose default depends on other settings.
//
// Thread-compatible: rewrites argv in place.

#ifndef LLMSERVE_COMMON_BASE_FLAG_NAMES_H_
#define LLMSERVE_COMMON_BASE_FLAG_NAMES_H_

#include "absl/strings/string_view.h"

namespace llmserve::common {

// In every argument that starts with "--", turns the dashes of the flag name (the part before
// any '=') into underscores. Stops at a bare "--", after which arguments are positional.
void NormalizeFlagNames(int argc, char** argv);

// Whether the command line (normalized) sets flag `name`: --name, --name=..., or a boolean's
// --noname, with one dash or two, before a bare "--".
bool CommandLineSetsFlag(int argc, char* const* argv, absl::string_view name);

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_FLAG_NAMES_H_
