// Lets command lines spell flags with dashes (--prompt-len) as well as with Abseil's underscores
// (--prompt_len): call before absl::ParseCommandLine.
//
// Thread-compatible: rewrites argv in place.

#ifndef LLMSERVE_COMMON_BASE_FLAG_NAMES_H_
#define LLMSERVE_COMMON_BASE_FLAG_NAMES_H_

namespace llmserve::common {

// In every argument that starts with "--", turns the dashes of the flag name (the part before
// any '=') into underscores. Stops at a bare "--", after which arguments are positional.
void NormalizeFlagNames(int argc, char** argv);

}  // namespace llmserve::common

#endif  // LLMSERVE_COMMON_BASE_FLAG_NAMES_H_
